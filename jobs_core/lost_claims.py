"""Claims whose answer was lost, their rows given back: what the store drivers share.

A claim the store ran whose answer never reached its caller (the connection dropped, or the call
timed out, after the store ran it) leaves the rows it took `running` for a worker that does not
know them: held by nobody until their lease ends, when the lapse spends their attempt (and
buries a final one never run). The driver looks for them (its own statement or script: its
worker's rows of the claim's queues, leased to exactly its lease end, claimed at its `now_ms`)
and gives them back with an interrupt nack; `LostClaims` keeps the rest: which claims are in
flight and which rows were answered (a claim of the same worker, millisecond and lease end
takes rows that look the same), the lost claims pending, and one task a worker that looks
for them, again every `RETRY_S` while the store is out, until their lease end or the driver's
close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final

from jobs_core.errors import DriverUnavailableError
from jobs_core.records import BuriedJob, ClaimParams, Fence

#: Seconds between the looks for a lost claim's rows while the store is out.
RETRY_S: Final = 0.5
#: Workers whose latest claims' answers are remembered at most.
_ANSWERED_MAX: Final = 10_000
#: The doublings of the wait for a claim the store may still run (0.005 s * 2**7 > `RETRY_S`).
_WAITS_MAX: Final = 16
#: Rows buried at most held for their workers' next claims (`HeldBurials`).
_HELD_BURIALS_MAX: Final = 10_000
#: The give-back tasks running now (the loop keeps only weak references to tasks).
_TASKS: set[asyncio.Task[None]] = set()


class ClaimCall:
    """A claim's parameters, and when (monotonic) its call began: rows given back after it are
    stamped that long after its `now_ms`."""

    __slots__ = ("began", "params")

    def __init__(self, params: ClaimParams) -> None:
        self.params = params
        self.began = time.monotonic()

    def now_ms(self) -> int:
        """The claim's clock now: its `now_ms` and the time since its call began."""
        return self.params.now_ms + max(0, round((time.monotonic() - self.began) * 1000))


class LostClaim:
    """A claim whose answer was lost, when (monotonic) the loss was seen, and the ids answered
    to the claims of its worker, millisecond and lease end before it."""

    __slots__ = ("answered", "call", "lease_end", "lost_at")

    def __init__(self, call: ClaimCall, answered: frozenset[str]) -> None:
        self.call = call
        self.answered = answered
        self.lease_end = call.params.now_ms + call.params.lease_ms
        self.lost_at = time.monotonic()

    def same(self, other: ClaimCall) -> bool:
        """`other` is of this claim's worker, millisecond and lease end: its rows look the same."""
        a, b = self.call.params, other.params
        return (
            a.worker_id == b.worker_id
            and a.now_ms == b.now_ms
            and b.now_ms + b.lease_ms == self.lease_end
        )


#: The driver's look for a lost claim's rows: the fences of its worker's `running` rows of the
#: claim's queues leased to its lease end and claimed at its `now_ms` (answered ones included);
#: None while the store may still run the claim (look again a little later).
Look = Callable[[LostClaim], Awaitable[Sequence[Fence] | None]]
#: The driver's give-back of a claim's rows: an interrupt nack at the claim's clock now.
GiveBack = Callable[[ClaimCall, Sequence[Fence]], Awaitable[None]]
#: The ids of the rows of a claim's answer, as the driver holds it (`LostClaims.answered`).
IdsOf = Callable[[Sequence[Any]], Iterable[str]]
#: The driver's look for the rows a lost claim may have buried: finished `dead` or `failed` at
#: its `now_ms` with `LEASE_LAPSED_ERROR`, in its queues (a claim of the same millisecond may
#: have buried some of them: `LostClaims` leaves out those its worker was answered).
LookBuried = Callable[[LostClaim], Awaitable[Sequence[BuriedJob]]]
#: Where the rows a worker's lost claim buried go: held by the driver for that worker's next
#: claim, whose `ClaimResult.buried` reports them (the worker's burial path then runs for them).
ReportBuried = Callable[[str, Sequence[BuriedJob]], None]


class LostClaims:
    """One driver's claims in flight, answered and lost. The driver calls `start` and `end`
    around each claim's call (no await between its answer's arrival and `answered`), and
    `lost` when that call failed out of reach."""

    __slots__ = (
        "_answered",
        "_closed",
        "_give_back",
        "_ids_of",
        "_in_flight",
        "_log",
        "_look",
        "_look_buried",
        "_pending",
        "_report_buried",
    )

    def __init__(
        self,
        log: logging.Logger,
        look: Look,
        give_back: GiveBack,
        closed: Callable[[], bool],
        ids_of: IdsOf,
        look_buried: LookBuried | None = None,
        report_buried: ReportBuried | None = None,
    ) -> None:
        self._log = log
        self._look = look
        self._look_buried = look_buried
        self._report_buried = report_buried
        self._give_back = give_back
        self._ids_of = ids_of
        #: True once the driver is closed: a call then would open a client nobody closes.
        self._closed = closed
        self._in_flight: set[ClaimCall] = set()
        #: worker_id -> (now_ms, lease end, answers) of its latest claims answered (all those of
        #: one millisecond and lease end), each answer as the driver holds it (`ids_of`).
        self._answered: dict[str, tuple[int, int, tuple[Sequence[Any], ...]]] = {}
        #: worker_id -> its lost claims whose rows are not given back yet.
        self._pending: dict[str, list[LostClaim]] = {}

    def start(self, params: ClaimParams) -> ClaimCall:
        """A claim's call begins: in flight until `end`."""
        call = ClaimCall(params)
        self._in_flight.add(call)
        return call

    def end(self, call: ClaimCall) -> None:
        """`call` answered or failed."""
        self._in_flight.discard(call)

    def answered(self, call: ClaimCall, answer: Sequence[Any]) -> None:
        """`answer` (the rows or jobs `call` was answered, read by `ids_of`) kept beside the
        others of its worker, millisecond and lease end."""
        if not answer:
            return
        params = call.params
        worker, now_ms, lease_end = params.worker_id, params.now_ms, params.now_ms + params.lease_ms
        answered = self._answered
        last = answered.get(worker)
        if last is not None and last[0] == now_ms and last[1] == lease_end:
            # Two claims in one millisecond: both answered.
            answered[worker] = (now_ms, lease_end, (answer, *last[2]))
            return
        if last is None and len(answered) >= _ANSWERED_MAX:
            answered.clear()
        answered[worker] = (now_ms, lease_end, (answer,))

    def _answered_ids(self, call: ClaimCall) -> frozenset[str]:
        """The ids answered so far to the claims of `call`'s worker, millisecond and lease end."""
        params = call.params
        last = self._answered.get(params.worker_id)
        if last is None or last[0] != params.now_ms or last[1] != params.now_ms + params.lease_ms:
            return frozenset()
        ids_of = self._ids_of
        return frozenset(i for answer in last[2] for i in ids_of(answer))

    def lost(self, call: ClaimCall) -> None:
        """`call`'s answer was lost: if the store ran it, its rows are given back (in the task of
        its worker's lost claims, started if none runs). Best effort: a store out past the lease
        end leaves them to lapse, the attempt spent. Rows it buried (lapsed final attempts) are
        looked for too (`look_buried`) and handed to `report_buried`, so the worker's next
        claim reports them: the answer that named them was lost."""
        worker = call.params.worker_id
        lost = LostClaim(call, self._answered_ids(call))
        pending = self._pending.get(worker)
        if pending is not None:
            pending.append(lost)
            return
        self._pending[worker] = [lost]
        task = asyncio.get_running_loop().create_task(self._give_back_all(worker))
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    async def _give_back_all(self, worker: str) -> None:
        """(`lost`'s task.) Give back the rows of `worker`'s lost claims, then end."""
        log = self._log
        waits = 0
        try:
            while pending := self._pending.get(worker):
                live = [c for c in pending if c.call.now_ms() < c.lease_end]
                if len(live) < len(pending):
                    log.warning(
                        "%s.lost_claim_lapses: the store was out past the lease end of"
                        " %d lost claims of %r",
                        log.name,
                        len(pending) - len(live),
                        worker,
                    )
                pending[:] = live
                if not pending:
                    return
                if self._closed():
                    log.info("%s.lost_claim_give_back_skipped: closed; leases lapse", log.name)
                    return
                lost = pending[0]
                try:
                    found = await self._look(lost)
                    if found is None:
                        # Waits double up to `RETRY_S`: the claim's commit is usually a matter
                        # of milliseconds, a lock it waits on perhaps of the whole lease (their
                        # count capped: 2 ** 1024 is past a float, and a lease holds more waits).
                        waits = min(waits + 1, _WAITS_MAX)
                        await asyncio.sleep(min(RETRY_S, 0.005 * 2**waits))
                        continue
                    # After the look: a claim of the same millisecond and lease end the store
                    # ran before it is either still in flight or answered by now, and the rows
                    # it took look the same.
                    if any(lost.same(c) for c in self._in_flight):
                        await asyncio.sleep(0.005)
                        continue
                    since = self._answered_ids(lost.call)
                    fences = [
                        f for f in found if f.job_id not in lost.answered and f.job_id not in since
                    ]
                    if fences:
                        await self._give_back(lost.call, fences)
                    if self._look_buried is not None and self._report_buried is not None:
                        # Rows a claim of the same worker and millisecond was answered are its.
                        buried = [
                            b
                            for b in await self._look_buried(lost)
                            if b.id not in lost.answered and b.id not in since
                        ]
                        if buried:
                            self._report_buried(worker, buried)
                    pending.remove(lost)
                    waits = 0
                except DriverUnavailableError:
                    await asyncio.sleep(RETRY_S)
        except Exception:
            log.warning("%s.lost_claim_give_back_failed: leases lapse", log.name, exc_info=True)
        finally:
            self._pending.pop(worker, None)


class HeldBurials:
    """Rows a worker's claims buried whose answer never reached it (its caller gone, or the
    answer lost), held for that worker's next claim (`ClaimResult.buried`, whose worker then
    counts, logs and hooks them as any burial) and logged meanwhile: a worker that stops
    claims no more. Bounded: a process whose workers never claim again holds no more than
    `_HELD_BURIALS_MAX` of them."""

    __slots__ = ("_by_worker", "_log")

    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._by_worker: dict[str, list[BuriedJob]] = {}

    def hold(self, worker: str, buried: Sequence[BuriedJob]) -> None:
        """Keep `buried` for `worker`'s next claim."""
        if not buried:
            return
        kept = sum(map(len, self._by_worker.values())) + len(buried) <= _HELD_BURIALS_MAX
        if kept:
            self._by_worker.setdefault(worker, []).extend(buried)
        for b in buried:
            self._log.warning(
                "%s.claim_buried_unanswered %s %s (%s; %s worker %r)",
                self._log.name,
                b.name,
                b.id,
                b.state,
                "reported with the next claim of" if kept else "too many held to report to",
                worker,
            )

    def take(self, worker: str) -> list[BuriedJob] | None:
        """What is held for `worker` (None: nothing), held no more."""
        return self._by_worker.pop(worker, None) if self._by_worker else None
