"""Batched settles: every ack, nack and step record waiting at a moment goes out in one driver
call.

While one call is in flight, the next settles gather behind it, so batching costs no added
latency. Each item is still fenced by its own claim; the answer per item says if it landed.

Every item is checked with the driver's own checks (`check_ack`, `check_nack`) when it is
submitted, so a bad one never reaches a batch: it is replaced by what `replace_invalid` answers
(a worker fails that job with the validation error) or answers False. A batch that fails for
any other reason than an unavailable store (a refusal, an error the store raised on one item)
is sent again item by item, so only the item at fault answers False and the others land once.
A batch the store cannot take (`X_DRIVER_UNAVAILABLE`) is retried with capped backoff for as
long as each item's claim could still be held (`give_up_at`) and the drain allows
(`set_deadline`): the fence makes a late or repeated settle safe, so a body that finishes during
an outage is not run again. A backoff ends at once when any call finds the store back
(`store_back`), so a settle lands before another worker's reclaim grace runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final, Generic, Protocol, TypeVar

from jobs_core.backoff import wait_kick
from jobs_core.clock import Clock
from jobs_core.driver import JobDriver, check_ack, check_nack
from jobs_core.errors import DriverUnavailableError, JobsError
from jobs_core.records import Ack, Fence, Nack, StepPut

log = logging.getLogger("jobs")

#: The most settles one call carries.
SETTLE_BATCH: Final = 1_000
#: First wait before an unavailable batch is sent again; it doubles up to `SETTLE_BACKOFF_MAX_MS`.
SETTLE_BACKOFF_MIN_MS: Final = 100
SETTLE_BACKOFF_MAX_MS: Final = 2_000
#: How long an unavailable settle is retried when `give_up_at` knows nothing of its claim.
SETTLE_PATIENCE_MS: Final = 30_000

T = TypeVar("T", Ack, Nack, StepPut)


class StoreSeen(Protocol):
    """Told what each settle call found (`jobs_core.worker.outage.StoreWatch`)."""

    def answered(self, sent_ms: int) -> None: ...

    def unavailable(self, sent_ms: int) -> None: ...


@dataclass(eq=False, slots=True)
class _Entry(Generic[T]):
    item: T
    #: Answered with whether the item landed (None: `then` is called instead).
    fut: asyncio.Future[bool] | None
    #: Give up on an unavailable store after this time unless `give_up_at` says later.
    fallback_ms: int
    #: Called once with whether the item landed, from the lane's flush, when `fut` is None.
    then: Callable[[bool], None] | None = None


class _Lane(Generic[T]):
    def __init__(
        self,
        send: Callable[[Sequence[T]], Awaitable[list[bool]]],
        clock: Clock,
        give_up_at: Callable[[Fence], int | None],
        deadline: Callable[[], int | None],
        seen: StoreSeen | None,
    ) -> None:
        self._send: Callable[[Sequence[T]], Awaitable[list[bool]]] = send
        self._clock = clock
        self._give_up_at = give_up_at
        self._deadline = deadline
        self._seen = seen
        self._pending: list[_Entry[T]] = []
        self._task: asyncio.Task[None] | None = None
        #: Set when the store is seen back: a backoff under way ends at once.
        self.back = asyncio.Event()

    def submit(self, item: T) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queue(_Entry(item, fut, self._clock.now_ms() + SETTLE_PATIENCE_MS))
        return fut

    def submit_then(self, item: T, then: Callable[[bool], None]) -> None:
        """Queue `item`; `then(landed)` is called once it is answered (never before this
        returns: the flush runs as a task of its own)."""
        self._queue(_Entry(item, None, self._clock.now_ms() + SETTLE_PATIENCE_MS, then))

    def _queue(self, entry: _Entry[T]) -> None:
        self._pending.append(entry)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush())

    def _give_up_ms(self, e: _Entry[T]) -> int:
        # Read again on every round: a heartbeat that lands meanwhile extends the claim.
        until = self._give_up_at(e.item.fence)
        end = e.fallback_ms if until is None else until
        deadline = self._deadline()
        return end if deadline is None else min(end, deadline)

    def _expire(self, now: int) -> None:
        keep: list[_Entry[T]] = []
        for e in self._pending:
            if now > self._give_up_ms(e):
                log.warning(
                    "jobs.settle.gave_up %s: the store stayed unavailable past the claim's lease",
                    e.item.fence.job_id,
                )
                _answer(e, False)
            else:
                keep.append(e)
        self._pending = keep

    async def _flush(self) -> None:
        delay = SETTLE_BACKOFF_MIN_MS
        while self._pending:
            batch, self._pending = self._pending[:SETTLE_BATCH], self._pending[SETTLE_BATCH:]
            sent = self._clock.now_ms()
            try:
                answers = await self._send([e.item for e in batch])
            except DriverUnavailableError as exc:
                if self._seen is not None:
                    self._seen.unavailable(sent)
                self._pending[:0] = batch
                delay = await self._back_off(exc, delay)
                continue
            except Exception as exc:
                # A refusal, or a value a store could not take that slipped past the checks:
                # one item must not sink the others, so each goes alone and answers for itself.
                log.warning(
                    "jobs.settle.refused: %r (%d items, retried one by one)", exc, len(batch)
                )
                left = await self._one_by_one(batch)
                if left:
                    self._pending[:0] = left
                    delay = await self._back_off(None, delay)
                continue
            if self._seen is not None:
                self._seen.answered(sent)
            for e, ok in zip(batch, answers, strict=True):
                _answer(e, ok)
            delay = SETTLE_BACKOFF_MIN_MS

    async def _one_by_one(self, batch: list[_Entry[T]]) -> list[_Entry[T]]:
        """Send each item alone; answers the entries left for a retry (the store went away)."""
        for i, e in enumerate(batch):
            try:
                (ok,) = await self._send([e.item])
            except DriverUnavailableError:
                return batch[i:]
            except Exception as exc:
                log.warning("jobs.settle.refused %s: %r", e.item.fence.job_id, exc)
                ok = False
            _answer(e, ok)
        return []

    async def _back_off(self, exc: JobsError | None, delay: int) -> int:
        # Only after a failed try: every settle is sent at least once, however late.
        now = self._clock.now_ms()
        self._expire(now)
        if not self._pending:
            return delay
        # Wake just past the earliest give-up, so an item is never held beyond its claim.
        soonest = min(self._give_up_ms(e) for e in self._pending) + 1
        wait = max(1, min(delay, soonest - now))
        if exc is not None:
            log.warning(
                "jobs.settle.failed: %s (%d items, again in %d ms)", exc, len(self._pending), wait
            )
        await wait_kick(self.back, self._clock, wait)
        if self.back.is_set():
            # A call found the store back (maybe while this one failed): try at once, and from
            # the first step again. A stale kick costs one early try at most.
            self.back.clear()
            return SETTLE_BACKOFF_MIN_MS
        return min(delay * 2, SETTLE_BACKOFF_MAX_MS)

    async def join(self) -> None:
        while (task := self._task) is not None and not task.done():
            # `wait`, not `await task`: an abandoned (cancelled) flush must not cancel the joiner.
            await asyncio.wait([task])

    def abandon(self) -> None:
        """Stop retrying: every settle not yet answered answers False now."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        pending, self._pending = self._pending, []
        for e in pending:
            _answer(e, False)


def _answer(e: _Entry[T], ok: bool) -> None:
    if e.fut is not None:
        if not e.fut.done():
            e.fut.set_result(ok)
        return
    then, e.then = e.then, None
    if then is not None:
        try:
            then(ok)
        except Exception:  # one item's bookkeeping must not sink the batch's other answers
            log.exception("jobs.settle.answer_crashed %s", e.item.fence.job_id)


class Settler:
    """Queues acks, nacks and step records and sends each kind in batches; `await` answers
    landed or not. Step records ride the same lanes as settles: the runs of one worker that
    finish a step at the same moment share one `step_put` call (one round-trip), and a record
    the store cannot take is retried like a settle, for as long as its claim could be held.

    `give_up_at(fence)`: the time after which an unavailable settle of that claim is given up
    (the end of its lease plus a margin), or None for `SETTLE_PATIENCE_MS` from its submission.
    `replace_invalid(item, error)`: the nack to send instead of an item the driver's checks
    refuse, or None to answer False. `seen` is told what each call found of the store.
    """

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        *,
        give_up_at: Callable[[Fence], int | None] | None = None,
        replace_invalid: Callable[[Ack | Nack, JobsError], Nack | None] | None = None,
        seen: StoreSeen | None = None,
    ) -> None:
        self._deadline_ms: int | None = None
        until = give_up_at or (lambda fence: None)
        # Every item passed the driver's own check (`check_ack`, `check_nack`,
        # `check_step_put`) before it joined a lane, so a batch goes to the driver's
        # implementation: the public method would check each item a second time.
        self._acks: _Lane[Ack] = _Lane(driver._job_ack, clock, until, self._deadline, seen)
        self._nacks: _Lane[Nack] = _Lane(driver._job_nack, clock, until, self._deadline, seen)
        self._steps: _Lane[StepPut] = _Lane(driver._step_put, clock, until, self._deadline, seen)
        #: Unanswered step records by job id: a settle of that job waits for them, so a step that
        #: finished before its run ended is recorded before the settle breaks the fence.
        self._unanswered: dict[str, set[asyncio.Future[bool]]] = {}
        self._replace_invalid = replace_invalid

    def _deadline(self) -> int | None:
        return self._deadline_ms

    def store_back(self) -> None:
        """The store answers again: every lane waiting out a backoff tries at once."""
        for lane in (self._acks, self._nacks, self._steps):
            lane.back.set()

    def set_deadline(self, deadline_ms: int | None) -> None:
        """No settle is retried past `deadline_ms` (a drain's end); None lifts the bound."""
        self._deadline_ms = deadline_ms

    async def ack(self, item: Ack) -> bool:
        await self._steps_answered(item.fence)
        try:
            check_ack(item)
        except JobsError as exc:
            return await self._replace(item, exc)
        return await self._acks.submit(item)

    def ack_then(self, item: Ack, then: Callable[[bool], None]) -> bool:
        """Queue `item` as `ack` does, but answer by calling `then(landed)` from the lane's flush
        (no future, no task woken for it). False, with nothing queued, when it cannot go that
        way: a step record of its job is still unanswered, or the driver's checks refuse it
        (`await ack(item)` then waits or replaces it)."""
        if item.fence.job_id in self._unanswered:
            return False
        try:
            check_ack(item)
        except JobsError:
            return False
        self._acks.submit_then(item, then)
        return True

    async def nack(self, item: Nack) -> bool:
        await self._steps_answered(item.fence)
        try:
            check_nack(item)
        except JobsError as exc:
            return await self._replace(item, exc)
        return await self._nacks.submit(item)

    async def _steps_answered(self, fence: Fence) -> None:
        # Lanes are independent: without this, a drain's INTERRUPT nack could land first (its
        # lane idle, the step's behind a batch in flight) and refuse the step's record.
        pending = self._unanswered.get(fence.job_id)
        if pending:
            await asyncio.wait(list(pending))

    async def step_put(self, item: StepPut) -> bool:
        """Record one step, batched with the others put meanwhile; True when its fence held.
        The caller has checked the item (`check_step_put`): a refused batch is sent again item
        by item, and an item refused alone answers False."""
        fut = self._steps.submit(item)
        pending = self._unanswered.setdefault(item.fence.job_id, set())
        pending.add(fut)

        def answered(done: asyncio.Future[bool]) -> None:
            pending.discard(done)
            if not pending and self._unanswered.get(item.fence.job_id) is pending:
                del self._unanswered[item.fence.job_id]

        fut.add_done_callback(answered)
        return await fut

    async def nack_many(self, items: Sequence[Nack]) -> list[bool]:
        return list(await asyncio.gather(*(self.nack(i) for i in items)))

    async def _replace(self, item: Ack | Nack, exc: JobsError) -> bool:
        instead = self._replace_invalid(item, exc) if self._replace_invalid else None
        if instead is not None:
            with contextlib.suppress(JobsError):
                check_nack(instead)
                log.warning(
                    "jobs.settle.invalid %s: %s (sent as %s)",
                    item.fence.job_id,
                    exc,
                    instead.kind.value,
                )
                return await self._nacks.submit(instead)
        log.warning("jobs.settle.invalid %s: %s (not sent)", item.fence.job_id, exc)
        return False

    async def join(self) -> None:
        """Wait until every queued settle has been answered."""
        await self._acks.join()
        await self._nacks.join()
        await self._steps.join()

    def abandon(self) -> None:
        """Answer False for every settle still waiting on the store (a drain out of time)."""
        self._acks.abandon()
        self._nacks.abandon()
        self._steps.abandon()
