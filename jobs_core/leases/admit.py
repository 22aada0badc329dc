"""May a claimed job start: its fleet slot and rate stamps, taken as its body is about to start,
renewed with the heartbeat, and handed back after the body (released) or without it (abandoned:
a start that never happened does not count against a rate).

The leases are taken once the job holds a local slot (`Worker(concurrency=)`), so its body
starts as soon as they are granted: a stamp counts a start, never a job waiting in the worker's
buffer (`max_in_flight`), and a slot is held by a run, never by a job waiting for one. The jobs
of a claim round that can start at once share one `lease_take` (`admit`); a job that waited for
a local slot is admitted as it gets one, with every job reaching its start meanwhile
(`admit_one`: one `lease_take` for them all). A job of a key whose every slot this worker's own
runs hold is refused without asking (the store would refuse it).

A job that may not start now is given back without spending an attempt: a busy slot retries
with a backoff (0.1 s doubling to 5 s per wait of that job), a rate-limited one waits until the
window lets it start. `when_busy="fail"` refuses the run only on evidence of another RUN holding
the key: a job with stamps asks for that slot only once its stamps are granted (a second
`lease_take` in the round, for such jobs only), so every holding of the key is a run that
starts (or a crashed run's leftover, which the same job takes over). A key function that raises
fails that attempt, never the round.

A slot is held by the worker (a holder name of its own), not by the job: when a body ends, its
slot goes to this worker's next run of the same key without a store call — a run waiting for it
(a "follower": a job refused a slot while this worker runs that key, one follower per slot it
holds) or the next one starting within `SLOT_LINGER_MS`; unused, it is released. A slot is valid
only while renewed in the store: it goes to another run only while its last renewal leaves
room for that run's first heartbeat, and a run turned away by a rate limit puts it back as it
was, never as fresh. `when_busy="fail"` slots are held by the job itself (a run's own leftover
is its evidence against a refusal), and are never handed over.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from jobs_core.clock import Clock
from jobs_core.driver import MAX_LEASE_BATCH, MAX_NAME_BYTES, JobDriver
from jobs_core.errors import DriverUnavailableError, InputInvalidError, JobsError
from jobs_core.ids import new_id
from jobs_core.job import JobHandle
from jobs_core.jsonform import loads, utf8_length
from jobs_core.leases.limits import RateLimit
from jobs_core.records import ClaimedJob, Lease, LeaseRef, LeaseRenew, LeaseTake
from jobs_core.resend import again_if_lost

log = logging.getLogger("jobs")

#: A job whose slot is busy comes back after this, doubling per wait of the job up to the cap.
SLOT_WAIT_FLOOR_MS: Final = 100
SLOT_WAIT_CEILING_MS: Final = 5_000
#: A job declaring `concurrency=0` (a hard stop) is looked at again after this.
STOPPED_DELAY_MS: Final = 60_000
#: Jobs whose leases could not be asked for (the store failed) come back after this.
UNAVAILABLE_DELAY_MS: Final = 1_000
#: How long a slot whose body ended waits for this worker's next run of its key (at most a third
#: of the lease; whether it is still fresh enough to hand over is `Gate._fresh_ms`'s say).
SLOT_LINGER_MS: Final = 100
#: A hand-back the store could not take is sent again after this, doubling up to the cap.
END_BACKOFF_MIN_MS: Final = 100
END_BACKOFF_MAX_MS: Final = 2_000


@dataclass(frozen=True, slots=True)
class Handed:
    """A slot this worker hands to one of its runs, and when the store last vouched for it (its
    take or its last renewal): the run's heartbeat counts the slot's life from then."""

    lease: Lease
    landed_ms: int


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a claimed job may not start now. `wait`: given back, no attempt spent, due at
    `run_at_ms`; `refuse`: settled `failed` (outcome `refused`), body never run; `error`: the
    attempt fails with `error` (the key could not be derived); `follow`: held by this worker
    until `slot` hands it the slot one of its runs of the key gives back."""

    kind: Literal["wait", "refuse", "error", "follow"]
    why: str
    run_at_ms: int = 0
    error: JobsError | None = None
    slot: asyncio.Future[Handed] | None = None


@dataclass(frozen=True, slots=True)
class Admission:
    """What a job about to start may start with: the leases it holds (none when it declares no
    limit) and when the store last vouched for all of them; or why it may not start."""

    leases: tuple[Lease, ...] = ()
    refusal: Refusal | None = None
    landed_ms: int = 0


#: The admission of a job that declares no limit.
ADMITTED: Final = Admission()


def deferred(jobs: Sequence[ClaimedJob], now: int, why: str) -> dict[str, Admission]:
    """Every job given back (no attempt spent), due in `UNAVAILABLE_DELAY_MS`, for `why`: the
    answer when their leases could not be asked for (the store failed, or the admission itself
    did), rather than leave a job to its lease."""
    back = Admission(refusal=Refusal("wait", why, now + UNAVAILABLE_DELAY_MS))
    return {j.id: back for j in jobs}


@dataclass(slots=True)
class _Idle:
    """A slot of this worker that no run holds: since when, and when its last renewal landed."""

    lease: Lease
    since_ms: int
    landed_ms: int


@dataclass(slots=True)
class _Wants:
    job: ClaimedJob
    takes: list[LeaseTake] = field(default_factory=list)
    #: The key of the slot whose refusal is judged on evidence (`when_busy="fail"`).
    fail_key: str | None = None
    #: That slot's take when the job also has stamps: asked after them, only once they are all
    #: granted, so the store never holds the key for a job that does not start.
    late: LeaseTake | None = None
    rates: dict[str, int] = field(default_factory=dict)
    #: Slots this worker already held for the key, handed over to this job.
    reused: list[_Idle] = field(default_factory=list)
    #: This worker's own runs fill the key: its slot (`takes[0]`) is refused without asking
    #: the store, and its stamps are not asked either.
    full: bool = False


class Gate:
    """The worker's admission: `admit` the jobs about to start (`admit_one` for one that waited
    for a local slot), `end` a run's leases, `renew` them."""

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        handles: Mapping[str, JobHandle],
        worker_limits: tuple[RateLimit, ...],
        *,
        lease_ms: int,
        heartbeat_ms: int | None = None,
    ) -> None:
        self._driver = driver
        self._clock = clock
        self._handles = handles
        self._worker_limits = worker_limits
        self._lease_ms = lease_ms
        self._linger_ms = max(1, min(SLOT_LINGER_MS, lease_ms // 3))
        heartbeat_ms = heartbeat_ms if heartbeat_ms is not None else max(1, lease_ms // 3)
        #: How long after its last renewal a slot may still go to another run without a store
        #: call: its new run's first heartbeat (a period away, plus half a period for the call)
        #: must find it live.
        self._fresh_ms = max(0, lease_ms - heartbeat_ms - heartbeat_ms // 2)
        #: The holder names of this worker's slots: a prefix of its own and a serial.
        self._holder_prefix = f"w:{new_id()[-12:]}:"
        self._serial = 0
        #: Slots no run holds (a body ended, or a run was turned away), by lease key.
        self._pool: dict[str, list[_Idle]] = {}
        self._lingering: asyncio.Task[None] | None = None
        #: This worker's slots given to runs now, and the runs waiting for one of them, by key.
        self._in_use: Counter[str] = Counter()
        self._followers: dict[str, deque[asyncio.Future[Handed]]] = {}
        #: Tokens of slots known lost (a renewal refused, or none landed for a lease): never
        #: handed over or pooled, whatever ends their run.
        self._lost: set[int] = set()
        #: Jobs that waited for a local slot and are about to start (`admit_one`), and the task
        #: admitting them together.
        self._starting: list[tuple[ClaimedJob, asyncio.Future[Admission]]] = []
        self._starter: asyncio.Task[None] | None = None
        #: True when any job or the worker declares a limit: only then is the store asked.
        self.active = bool(worker_limits) or any(
            h.concurrency is not None or h.rate_limits for h in handles.values()
        )
        self._release = _EndLane(
            lambda refs: driver.lease_release(refs, clock.now_ms()), clock, lease_ms
        )
        self._abandon = _EndLane(
            lambda refs: driver.lease_abandon(refs, clock.now_ms()), clock, lease_ms
        )

    def limited(self, job: ClaimedJob) -> bool:
        """Whether `job` may have to wait for a lease (its declaration or the worker's)."""
        handle = self._handles.get(job.name)
        return handle is not None and (
            bool(self._worker_limits) or handle.concurrency is not None or bool(handle.rate_limits)
        )

    async def admit_one(self, job: ClaimedJob) -> Admission:
        """`admit` for one job about to start after it waited for a local slot: the jobs
        reaching their start meanwhile share one call. A caller that stops waiting (a drain)
        has whatever was taken for it handed back as never used."""
        if not self.limited(job):
            return ADMITTED
        answer: asyncio.Future[Admission] = asyncio.get_running_loop().create_future()
        self._starting.append((job, answer))
        if self._starter is None or self._starter.done():
            self._starter = asyncio.create_task(self._start_together())
        return await answer

    async def _start_together(self) -> None:
        while self._starting:
            batch, self._starting = self._starting, []
            waiting = [(job, answer) for job, answer in batch if not answer.done()]
            now = self._clock.now_ms()
            try:
                verdicts = await self.admit([job for job, _ in waiting], now)
            except Exception:
                log.exception("jobs.lease.admit_crashed (%d jobs given back)", len(waiting))
                verdicts = deferred([job for job, _ in waiting], now, "the admission failed")
            for job, answer in waiting:
                verdict = verdicts.get(job.id, ADMITTED)
                if answer.done():
                    self._unused(verdict)
                else:
                    answer.set_result(verdict)

    def _unused(self, verdict: Admission) -> None:
        """Hand back what an admission granted to a run that stopped before it started."""
        self.end(verdict.leases, started=False, landed_ms=verdict.landed_ms)
        if verdict.refusal is not None and verdict.refusal.slot is not None:
            verdict.refusal.slot.cancel()

    async def admit(self, jobs: Sequence[ClaimedJob], now: int) -> dict[str, Admission]:
        """Per job about to start that declares a limit: what it may start with, or why it may
        not. Jobs without a limit are absent. Never raises: a failing store defers the jobs.
        `now` (the round's) dates refusals and what was granted; each `lease_take` goes out at
        the clock read right before it (`_take`)."""
        wanted: list[_Wants] = []
        out: dict[str, Admission] = {}
        for job in jobs:
            w = self._wants(job, now, out)
            if w is not None:
                wanted.append(w)
        asking = [w for w in wanted if not w.full]
        try:
            # Nothing to ask when every slot is handed over by this worker (and no stamp).
            got = await self._ask(asking) if any(w.takes for w in asking) else [[] for _ in asking]
        except Exception as exc:
            log.warning("jobs.lease.take_failed: %s (%d jobs deferred)", exc, len(wanted))
            for w in wanted:
                self._put_back(w.reused)
            # Whatever a failed call may have granted lapses at its TTL.
            return out | deferred([w.job for w in wanted], now, "leases unavailable")
        # Granted to jobs that do not start: abandoned (never released, those starts did not
        # happen) before any refusal is judged, and no evidence against another job.
        stranded: list[Lease] = []
        turned_away = [(w, w.takes[:1]) for w in wanted if w.full]
        for w, answer in zip(asking, got, strict=True):
            granted = [g for g in answer if g is not None]
            if len(granted) == len(w.takes) + (w.late is not None):
                out[w.job.id] = self._grant(w, granted, now)
                continue
            stranded += granted
            self._put_back(w.reused)
            # A late slot left unasked (its job's stamps were refused) was not refused either.
            asked = w.takes + ([w.late] if w.late is not None else [])
            refused = [t for t, g in zip(asked, answer, strict=False) if g is None]
            turned_away.append((w, refused))
        for lease in stranded:
            self._abandon.submit(LeaseRef(lease.key, lease.token))
        ignored = {lease.token for lease in stranded}
        rate_waits: dict[str, int] = {}
        expiries: dict[str, list[int]] = {}
        for w, refused in turned_away:
            follow = self._follow(w, refused)
            out[w.job.id] = Admission(
                refusal=follow
                or await self._refusal(w, refused, now, ignored, rate_waits, expiries)
            )
        return out

    async def _ask(self, wanted: list[_Wants]) -> list[list[Lease | None]]:
        """Each job's answers, in the order of its takes: one call for every take of the round,
        then one for the slots that wait for their job's stamps (`late`), asked only for a job
        whose stamps were all granted. When that second call fails, the first one's grants are
        abandoned and it raises."""
        answers = await self._take([t for w in wanted for t in w.takes])
        got: list[list[Lease | None]] = []
        for w in wanted:
            got.append(answers[: len(w.takes)])
            answers = answers[len(w.takes) :]
        late = [
            (answer, w.late)
            for w, answer in zip(wanted, got, strict=True)
            if w.late is not None and None not in answer
        ]
        if late:
            try:
                more = await self._take([t for _, t in late])
            except Exception:
                for lease in (g for answer in got for g in answer if g is not None):
                    self._abandon.submit(LeaseRef(lease.key, lease.token))
                raise
            for (answer, _), slot in zip(late, more, strict=True):
                answer.append(slot)
        return got

    async def _take(self, takes: Sequence[LeaseTake]) -> list[Lease | None]:
        """`lease_take` in batches, each at the clock read right before it is sent: a stamp is
        a start, so it is taken as close to the body's start as the worker can (a round's
        `now`, read before its claim went out, is stale by the claim's round trip and more)."""
        answers: list[Lease | None] = []
        for i in range(0, len(takes), MAX_LEASE_BATCH):
            batch = takes[i : i + MAX_LEASE_BATCH]
            # Resent under the same holders when its answer is lost (`again_if_lost`).
            answers += await again_if_lost(functools.partial(self._take_now, batch))
        return answers

    async def _take_now(self, takes: Sequence[LeaseTake]) -> list[Lease | None]:
        return await self._driver.lease_take(takes, self._clock.now_ms())

    def _grant(self, w: _Wants, granted: list[Lease], now: int) -> Admission:
        held = [idle.lease for idle in w.reused] + granted
        self._in_use.update(s.key for s in held if self._mine(s))
        landed = min([idle.landed_ms for idle in w.reused] + [now])
        return Admission(tuple(held), None, landed)

    def _wants(self, job: ClaimedJob, now: int, out: dict[str, Admission]) -> _Wants | None:
        handle = self._handles.get(job.name)
        if handle is None or not self.limited(job):
            return None
        w = _Wants(job)
        c = handle.concurrency
        if c is not None:
            if c.limit == 0:
                out[job.id] = Admission(
                    refusal=Refusal("wait", "concurrency 0: a hard stop", now + STOPPED_DELAY_MS)
                )
                return None
            try:
                key = c.lease_key(job.name, loads(job.input_json) if c.key else None)
            except JobsError as exc:
                out[job.id] = Admission(refusal=Refusal("error", exc.message, error=exc))
                return None
            except Exception as exc:  # the stored input itself does not decode
                error = InputInvalidError(f"the stored input cannot be decoded: {exc}")
                out[job.id] = Admission(refusal=Refusal("error", error.message, error=error))
                return None
            if c.key is not None and c.when_busy == "fail":
                w.late = LeaseTake(key, job.id, c.limit, self._lease_ms)
                w.fail_key = key
            elif (pooled := self._take_pooled(key, now)) is not None:
                w.reused.append(pooled)
            else:
                self._serial += 1
                holder = f"{self._holder_prefix}{self._serial}"
                w.takes.append(LeaseTake(key, holder, c.limit, self._lease_ms))
                w.full = self._in_use[key] >= c.limit
        owner = f"job:{len(job.name)}:{job.name}"
        stamp_holder = _short(f"{job.id}:{job.claims}")
        for r, by in [(r, owner) for r in handle.rate_limits] + [
            (r, "worker") for r in self._worker_limits
        ]:
            key = r.lease_key(by, job.queue, job.tenant_id)
            w.takes.append(LeaseTake(key, stamp_holder, r.limit, r.per_ms, stamp=True))
            w.rates[key] = r.per_ms
        if w.late is not None and not w.takes:
            # No stamp to wait for: the slot is asked with the rest of the round.
            w.takes, w.late = [w.late], None
        return w

    async def _refusal(
        self,
        w: _Wants,
        refused: list[LeaseTake],
        now: int,
        ignored: set[int],
        rate_waits: dict[str, int],
        expiries: dict[str, list[int]],
    ) -> Refusal:
        job = w.job
        run_at = now
        why = []
        for t in refused:
            if t.stamp:
                # The i-th job refused by one window this round starts when the i-th stamp
                # lapses (a whole window later per round of stamps): no herd at one instant.
                if t.key not in expiries:
                    expiries[t.key] = sorted(
                        h.expires_at_ms for h in await self._holders(t.key, now)
                    ) or [now]
                i = rate_waits.get(t.key, 0)
                rate_waits[t.key] = i + 1
                ends = expiries[t.key]
                at = ends[i % len(ends)] + (i // len(ends)) * w.rates[t.key]
                run_at = max(run_at, at)
                why.append(f"rate limited ({t.key})")
            elif t.key == w.fail_key:
                # Evidence of another RUN: a holding of the key by another job. This round's
                # grants to jobs that do not start are none (being abandoned).
                others = [
                    h
                    for h in await self._holders(t.key, now)
                    if h.holder != job.id and h.token not in ignored
                ]
                if others:
                    return Refusal(
                        "refuse",
                        f"concurrency key busy: held by {len(others)} other run(s)"
                        f" (limit {t.limit})",
                    )
                why.append("key freed meanwhile")
            else:
                waits = max(0, job.claims - job.attempt)
                delay = min(SLOT_WAIT_FLOOR_MS << min(waits, 10), SLOT_WAIT_CEILING_MS)
                run_at = max(run_at, now + delay)
                why.append(f"no free slot ({t.key})")
        return Refusal("wait", "; ".join(why), run_at)

    async def _holders(self, key: str, now: int) -> list[Lease]:
        try:
            return await self._driver.lease_holders(key, now)
        except Exception as exc:  # no evidence: the job waits instead of being refused
            log.warning("jobs.lease.holders_failed %s: %s", key, exc)
            return []

    def _mine(self, lease: Lease) -> bool:
        """A slot this worker holds (its holder name), not a job's own slot or a stamp."""
        return not lease.stamp and lease.holder.startswith(self._holder_prefix)

    def _follow(self, w: _Wants, refused: list[LeaseTake]) -> Refusal | None:
        """A job refused only a slot of a key this worker is running, with no rate stamp to go
        stale while it waits, follows one of those runs: one follower per slot in use."""
        if len(refused) != 1 or len(w.takes) != 1 or w.reused:
            return None
        (t,) = refused
        if t.stamp or not t.holder.startswith(self._holder_prefix):
            return None
        waiting = self._followers.setdefault(t.key, deque())
        while waiting and waiting[0].done():
            waiting.popleft()
        if self._in_use[t.key] <= sum(1 for f in waiting if not f.done()):
            return None
        slot: asyncio.Future[Handed] = asyncio.get_running_loop().create_future()
        waiting.append(slot)
        return Refusal("follow", f"waits for this worker's slot ({t.key})", slot=slot)

    def _hand_over(self, handed: Handed) -> bool:
        """Give a slot one of this worker's runs gave back to a follower of its key, if any."""
        waiting = self._followers.get(handed.lease.key)
        while waiting:
            slot = waiting.popleft()
            if not slot.done():
                slot.set_result(handed)
                self._in_use[handed.lease.key] += 1
                return True
        self._followers.pop(handed.lease.key, None)
        return False

    def _trim_followers(self, key: str) -> None:
        """A key lost a slot: the followers beyond the slots left go back to the queue."""
        waiting = self._followers.get(key)
        if not waiting:
            return
        live = [f for f in waiting if not f.done()]
        for slot in live[self._in_use[key] :]:
            slot.cancel()
        self._followers[key] = deque(f for f in live if not f.done())

    def _take_pooled(self, key: str, now: int) -> _Idle | None:
        """An idle slot of `key` fresh enough to hand over (idle under `SLOT_LINGER_MS`, renewed
        within `fresh_ms`); the stale ones on the way are released."""
        pooled = self._pool.get(key)
        while pooled:
            idle = pooled.pop()
            if now - idle.since_ms < self._linger_ms and now - idle.landed_ms <= self._fresh_ms:
                return idle
            self._release.submit(LeaseRef(idle.lease.key, idle.lease.token))
        return None

    def _put_back(self, idle: Sequence[_Idle]) -> None:
        """Keep this worker's idle slots for its next run of their key, for a short while: as
        they were (a slot a run was turned away with is no fresher for it)."""
        for slot in idle:
            self._pool.setdefault(slot.lease.key, []).append(slot)
        if idle and (self._lingering is None or self._lingering.done()):
            self._lingering = asyncio.create_task(self._linger())

    async def _linger(self) -> None:
        """Release the idle slots nobody took over within `SLOT_LINGER_MS`."""
        while self._pool:
            await self._clock.sleep_ms(self._linger_ms)
            self._release_pooled(self._clock.now_ms() - self._linger_ms)

    def _release_pooled(self, before: int | None = None) -> None:
        for key in list(self._pool):
            keep = []
            for idle in self._pool[key]:
                if before is None or idle.since_ms <= before:
                    self._release.submit(LeaseRef(idle.lease.key, idle.lease.token))
                else:
                    keep.append(idle)
            if keep:
                self._pool[key] = keep
            else:
                del self._pool[key]

    def end(self, leases: Sequence[Lease], *, started: bool, landed_ms: int) -> None:
        """Hand back a run's leases, last vouched for by the store at `landed_ms`: this
        worker's slots go to its next run of their key while fresh (then are released); a
        job's own slots and stamps are released after its body started (a stamp stays
        counted), abandoned when it never did. Sent in batches; a lost call lets them lapse."""
        now = self._clock.now_ms()
        idle = []
        for lease in leases:
            if not self._mine(lease):
                continue
            self._in_use[lease.key] -= 1
            if self._in_use[lease.key] <= 0:
                del self._in_use[lease.key]
            if lease.token in self._lost:
                self._lost.discard(lease.token)
                self._trim_followers(lease.key)
            elif now - landed_ms > self._fresh_ms:
                # It may lapse before another run's first renewal: nobody starts on it.
                self._release.submit(LeaseRef(lease.key, lease.token))
                self._trim_followers(lease.key)
            elif not self._hand_over(Handed(lease, landed_ms)):
                idle.append(_Idle(lease, now, landed_ms))
        self._put_back(idle)
        for lease in leases:
            if self._mine(lease):
                continue
            if started:
                if not lease.stamp:  # releasing a stamp changes nothing: skip the write
                    self._release.submit(LeaseRef(lease.key, lease.token))
            else:
                self._abandon.submit(LeaseRef(lease.key, lease.token))

    async def renew(self, leases: Sequence[Lease], now: int) -> list[bool] | None:
        """Renew each slot for another lease (stamps are windows, never renewed); answers per
        lease whether it is still held (a stamp always is), or None when the store failed."""
        slots = [lease for lease in leases if not lease.stamp]
        if not slots:
            return [True] * len(leases)
        try:
            answers = await self._driver.lease_renew(
                [LeaseRenew(s.key, s.token, self._lease_ms) for s in slots], now
            )
        except JobsError as exc:
            log.warning("jobs.lease.renew_failed: %s", exc)
            return None
        by_token = {s.token: ok for s, ok in zip(slots, answers, strict=True)}
        self.lost([s for s, ok in zip(slots, answers, strict=True) if not ok])
        return [by_token.get(lease.token, True) for lease in leases]

    def lost(self, leases: Sequence[Lease]) -> None:
        """Mark slots as no longer held: their run's end hands them to nobody."""
        self._lost.update(lease.token for lease in leases if self._mine(lease))

    async def join(self) -> None:
        """Release every idle slot, and wait for the admissions and hand-backs under way."""
        if self._starter is not None:
            await asyncio.wait([self._starter])
        if self._lingering is not None:
            self._lingering.cancel()
        self._release_pooled()
        await self._release.join()
        await self._abandon.join()


def _short(holder: str) -> str:
    """`holder`, or a digest of it when it would pass a holder's byte limit (a long job id)."""
    if len(holder) * 4 <= MAX_NAME_BYTES or utf8_length(holder) <= MAX_NAME_BYTES:
        return holder
    return "h:" + hashlib.sha256(holder.encode("utf-8")).hexdigest()


class _EndLane:
    """Releases (or abandons) submitted while a call is in flight go out together in the next
    one. A call the store cannot take is sent again with a capped backoff for as long as a
    holding could still be live (`patience_ms`: a lease); after that they have lapsed anyway."""

    def __init__(
        self,
        send: Callable[[Sequence[LeaseRef]], Awaitable[list[bool]]],
        clock: Clock,
        patience_ms: int,
    ) -> None:
        self._send = send
        self._clock = clock
        self._patience_ms = patience_ms
        self._pending: list[LeaseRef] = []
        self._task: asyncio.Task[None] | None = None

    def submit(self, ref: LeaseRef) -> None:
        self._pending.append(ref)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._flush())

    async def _flush(self) -> None:
        delay = END_BACKOFF_MIN_MS
        failing_since: int | None = None
        while self._pending:
            batch = self._pending[:MAX_LEASE_BATCH]
            self._pending = self._pending[MAX_LEASE_BATCH:]
            try:
                await self._send(batch)
            except DriverUnavailableError as exc:
                now = self._clock.now_ms()
                failing_since = now if failing_since is None else failing_since
                if now - failing_since >= self._patience_ms:
                    log.warning(
                        "jobs.lease.end_failed: %s (%d leases left to lapse)", exc, len(batch)
                    )
                    continue
                self._pending[:0] = batch
                await self._clock.sleep_ms(delay)
                delay = min(delay * 2, END_BACKOFF_MAX_MS)
                continue
            except Exception as exc:
                log.warning("jobs.lease.end_failed: %s (%d leases left to lapse)", exc, len(batch))
            failing_since = None
            delay = END_BACKOFF_MIN_MS

    async def join(self) -> None:
        while (task := self._task) is not None and not task.done():
            await asyncio.wait([task])
