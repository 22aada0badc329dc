"""The parity suite has teeth: each deliberately broken driver fails its family's walk and a
scenario, and each family's walk reaches the edges its rules aim at.

Every broken driver is the memory driver with ONE `_` method wrong, mostly at an exact edge
(a fence, an expiry or cut-off to the millisecond, an inclusive bound, an order, a count).
Each is caught by the walk of its family exactly as a driver's suite runs it under the `ci`
profile, from a fixed seed, so the answer is the same on every run and stays quick.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TypeVar

import pytest
from hypothesis import Phase

from jobs_core.driver import (
    MAX_PURGE_LIMIT,
    MAX_SWEEP_LIST,
    MAX_TIME_MS,
    Capabilities,
    JobDriver,
    WakeSubscription,
)
from jobs_core.errors import CapabilityMissingError, DriverError
from jobs_core.records import (
    Ack,
    BalanceRow,
    CancelAnswer,
    ClaimParams,
    ClaimResult,
    ConsumerCursor,
    ConsumerPut,
    CounterReadParams,
    CounterRow,
    EnqueueResult,
    EventRecord,
    EventWait,
    Fence,
    Heartbeat,
    JobFilter,
    JobRecord,
    JobSlice,
    JoinEnqueue,
    JoinEnqueueAnswer,
    JoinPolicy,
    JoinState,
    Lease,
    LeaseRef,
    LeaseRenew,
    LeaseTake,
    ListKey,
    Nack,
    NackKind,
    NewJob,
    Pause,
    PostingPut,
    PostingPutAnswer,
    PostingRecord,
    PromoteAnswer,
    PurgeParams,
    QueueStats,
    RemoveAnswer,
    RequeueAnswer,
    RequeueParams,
    StepPut,
    StepRecord,
    SweepAdvance,
    SweepCheckpoint,
    SweepFinish,
    SweepRecord,
    SweepStart,
    SweepStartAnswer,
    TaskFire,
    TaskFireAnswer,
    TaskMark,
    WebhookAttempt,
    WebhookAttemptAnswer,
    WebhookAttemptPut,
    WebhookEndpoint,
    WebhookEndpointEnable,
    WebhookEndpointPut,
    WorkerInfo,
)
from jobs_core.semantics import (
    HOUR_MS,
    MINUTE_MS,
    SAGA_STEP,
    drop_before,
    event_matches,
    fold_before,
    hour_of,
    nack_outcome,
    namespace_of,
)
from jobs_core.states import FINISHED_STATES, LIVE_STATES, JobState, Outcome
from jobs_core.testing import (
    SCENARIOS,
    DriverNotEmptyError,
    ParityError,
    make_machine,
    run_scenario,
)
from jobs_core.testing.machine import FAMILIES, QUEUES, ParityMachine
from jobs_core.testing.profiles import profile_settings, scaled
from jobs_memory import MemoryDriver
from jobs_memory.driver import nacked
from tests.core_driver import CoreDriver
from tests.teeth import (
    SEEDS,
    MachineMaker,
    assert_each_listed_once,
    ci_walk,
    first_catch,
    reached,
)


class UnfencedAck(MemoryDriver):
    """Acks any running row, whoever claimed it and however long ago."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        current = []
        for a in acks:
            row = self._rows.get(a.fence.job_id)
            if row is not None and row.rec.claimed_by is not None:
                a = replace(a, fence=Fence(a.fence.job_id, row.rec.claims, row.rec.claimed_by))
            current.append(a)
        return await super()._job_ack(current)


class ClaimIgnoresPauses(MemoryDriver):
    """Claims as if nothing were paused."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        paused, self._pauses = self._pauses, set()
        try:
            return await super()._job_claim(params)
        finally:
            self._pauses = paused


class KeyIgnoresTenant(MemoryDriver):
    """Dedupes on (name, key) alone, so one tenant's live row swallows another's enqueue."""

    def _enqueue_locked(self, job: NewJob) -> EnqueueResult:
        if job.id not in self._rows:
            for row in self._rows.values():
                r = row.rec
                if r.state in LIVE_STATES and (r.name, r.idempotency_key) == (
                    job.name,
                    job.idempotency_key,
                ):
                    return EnqueueResult(r.id, deduped=True)
        return super()._enqueue_locked(job)


class ClaimsLapsedFinalAttempt(MemoryDriver):
    """Hands a lapsed final attempt out again instead of burying it."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        spare: dict[str, int] = {}
        with self._lock:
            for row in list(self._rows.values()):
                r = row.rec
                if (
                    r.queue in params.queues
                    and r.state is JobState.RUNNING
                    and r.lease_until_ms is not None
                    and r.lease_until_ms <= params.now_ms
                    and r.attempt >= r.max_attempts
                ):
                    spare[r.id] = r.max_attempts
                    self._put(r, replace(r, max_attempts=r.attempt + 1))
        result = await super()._job_claim(params)
        with self._lock:
            for job_id, max_attempts in spare.items():
                r = self._rows[job_id].rec
                self._put(r, replace(r, max_attempts=max_attempts))
        jobs = tuple(replace(j, max_attempts=spare.get(j.id, j.max_attempts)) for j in result.jobs)
        return replace(result, jobs=jobs)


class HeartbeatFromLeaseEnd(MemoryDriver):
    """Extends a lease from its old end instead of from now."""

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        out: list[bool] = []
        for b in beats:
            r = self._held(b.fence)
            start = r.lease_until_ms if r is not None and r.lease_until_ms is not None else b.now_ms
            out += await super()._job_heartbeat([replace(b, now_ms=start)])
        return out


class RequeueKeepsAttempt(MemoryDriver):
    """Requeues a row but leaves its spent attempts in place."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        row = self._rows.get(job_id)
        attempt = row.rec.attempt if row is not None else 0
        answer = super()._requeue_locked(job_id, now_ms, fresh_run_id)
        if answer is RequeueAnswer.REQUEUED:
            r = self._rows[job_id].rec
            self._put(r, replace(r, attempt=attempt))
        return answer


class DemandCountsFuture(MemoryDriver):
    """Counts ready rows that are not due yet."""

    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        return await super()._queue_demand(queues, MAX_TIME_MS)


class BatchBlindToItself(MemoryDriver):
    """Dedupes a batch against the rows stored before it, never against its own records."""

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        with self._lock:
            before = set(self._rows)
            holders = dict(self._live_keys)
            out: list[EnqueueResult] = []
            for j in jobs:
                ns = namespace_of(j.name, j.tenant_id, j.idempotency_key)
                if j.id in before:
                    out.append(EnqueueResult(j.id, deduped=True))
                elif ns in holders:
                    out.append(EnqueueResult(holders[ns], deduped=True))
                else:
                    earlier = self._rows.pop(j.id, None)
                    if earlier is not None:
                        self._unindex(earlier.rec)
                    self._live_keys.pop(ns, None)
                    out.append(self._enqueue_locked(j))
            return out


class PurgeIgnoresLimit(MemoryDriver):
    """Purges every expired row at once, whatever the limit."""

    async def _job_purge(self, params: PurgeParams) -> int:
        return await super()._job_purge(replace(params, limit=MAX_PURGE_LIMIT))


class PurgesEarly(MemoryDriver):
    """Purges a row one millisecond before its retention runs out."""

    async def _job_purge(self, params: PurgeParams) -> int:
        return await super()._job_purge(replace(params, now_ms=params.now_ms + 1))


class PurgesKeptForever(MemoryDriver):
    """Reads a retention of None as "no retention at all": purges rows meant to stay."""

    async def _job_purge(self, params: PurgeParams) -> int:
        def zero(keep: int | None) -> int:
            return 0 if keep is None else keep

        return await super()._job_purge(
            replace(
                params,
                completed_ms=zero(params.completed_ms),
                cancelled_ms=zero(params.cancelled_ms),
                failed_ms=zero(params.failed_ms),
                dead_ms=zero(params.dead_ms),
            )
        )


# -- blind spots of the suite before issue 8: each of these passed it --------------------------


class ReclaimIgnoresNamePause(MemoryDriver):
    """Hands a lapsed lease to a new claim although its job name is paused (queue pauses hold)."""

    def _claimable(self, r: JobRecord) -> bool:
        return Pause("queue", r.queue) not in self._pauses


class ReclaimIgnoresQueuePause(MemoryDriver):
    """Hands a lapsed lease to a new claim although its queue is paused (name pauses hold)."""

    def _claimable(self, r: JobRecord) -> bool:
        return Pause("name", r.name) not in self._pauses


class ReclaimCountsFromAttempt(MemoryDriver):
    """On the reclaim path, sets the claim counter from the attempt instead of bumping it."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        running = {i for i, row in self._rows.items() if row.rec.state is JobState.RUNNING}
        result = await super()._job_claim(params)
        jobs = []
        for j in result.jobs:
            if j.id in running:
                r = self._rows[j.id].rec
                self._put(r, replace(r, claims=j.attempt))
                j = replace(j, claims=j.attempt)
            jobs.append(j)
        return replace(result, jobs=tuple(jobs))


class BuriesInLeaseOrder(MemoryDriver):
    """Reports the rows one claim buried in the order their leases lapsed, not by id."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        ends = {i: row.rec.lease_until_ms or 0 for i, row in self._rows.items()}
        result = await super()._job_claim(params)
        buried = tuple(sorted(result.buried, key=lambda b: (ends[b.id], b.id)))
        return replace(result, buried=buried)


class ReclaimOnlyAfterLeaseEnd(MemoryDriver):
    """Treats a lease as lapsed one millisecond late (`<` for `<=`) when handing it out again."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        with self._lock:
            edge = [
                (row.rec.lease_until_ms, i)
                for i, row in self._rows.items()
                if row.rec.state is JobState.RUNNING
                and row.rec.lease_until_ms == params.now_ms
                and row.rec.attempt < row.rec.max_attempts
            ]
            for lease in edge:
                self._leases.discard(lease)
        try:
            return await super()._job_claim(params)
        finally:
            with self._lock:
                for lease in edge:
                    if self._rows[lease[1]].rec.state is JobState.RUNNING:
                        self._leases.add(lease)


class BuriesPastTheReclaimBound(MemoryDriver):
    """Ignores `reclaim_until_ms` when burying: a final attempt whose lease ended after the bound
    (its holder's ack may be on its way) is buried all the same; reclaims keep the bound."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        unbounded = replace(params, limit=0, beat=None, reclaim_until_ms=None)
        first = await super()._job_claim(unbounded)
        rest = await super()._job_claim(params)
        return replace(rest, buried=tuple(sorted(first.buried + rest.buried, key=lambda b: b.id)))


class ReclaimBoundExclusive(MemoryDriver):
    """Takes `reclaim_until_ms` as exclusive: a lease ending exactly at the bound is left."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        bound = params.reclaim_until_ms
        if bound is not None:
            params = replace(params, reclaim_until_ms=bound - 1)
        return await super()._job_claim(params)


class AckKeepsOldResult(MemoryDriver):
    """An ack without a result keeps the result a previous run stored (after a requeue)."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        kept = []
        for a in acks:
            row = self._rows.get(a.fence.job_id)
            if a.result_json is None and row is not None:
                a = replace(a, result_json=row.rec.result_json)
            kept.append(a)
        return await super()._job_ack(kept)


class AckFailsPastFourThousand(MemoryDriver):
    """An ack call of over 4,000 items fails whole, as Redis's script did (`unpack` of every
    row's history in one command: past what Lua's C stack holds)."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        if len(acks) > 4_000:
            raise DriverError("too many results to unpack", detail="job_ack")
        return await super()._job_ack(acks)


class NackKeepsOldError(MemoryDriver):
    """A retry or failure without an error keeps the error an earlier attempt stored."""

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        kept = []
        for n in nacks:
            row = self._rows.get(n.fence.job_id)
            if n.error is None and row is not None:
                n = replace(n, error=row.rec.last_error)
            kept.append(n)
        return await super()._job_nack(kept)


def _floats(text: str) -> str:
    # Only where the float is the same number, so that only the type tells them apart.
    return json.dumps(
        json.loads(text, parse_int=lambda t: float(t) if float(t) == int(t) else int(t))
    )


class StoresIntegersAsFloats(MemoryDriver):
    """Stores every JSON integer of an input as a float (`1` comes back `1.0`)."""

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        return await super()._job_enqueue_many(
            [replace(j, input_json=_floats(j.input_json)) for j in jobs]
        )

    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        return await super()._job_enqueue(replace(job, input_json=_floats(job.input_json)))


def _no_bools(value: object) -> object:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, list):
        return [_no_bools(v) for v in value]
    if isinstance(value, dict):
        return {k: _no_bools(v) for k, v in value.items()}
    return value


class StoresTrueAsOne(MemoryDriver):
    """Stores a result's `true`/`false` as `1`/`0` (a column without a boolean type)."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        return await super()._job_ack(
            [
                a
                if a.result_json is None
                else replace(a, result_json=json.dumps(_no_bools(json.loads(a.result_json))))
                for a in acks
            ]
        )


class RequeueTakesParked(MemoryDriver):
    """Requeues a parked row as if it were finished."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        row = self._rows.get(job_id)
        if row is not None and row.rec.state is JobState.PARKED:
            r = row.rec
            self._put(r, replace(r, state=JobState.READY, attempt=0, run_at_ms=now_ms))
            return RequeueAnswer.REQUEUED
        return super()._requeue_locked(job_id, now_ms, fresh_run_id)


class RequeueDuplicateIgnoresTenant(MemoryDriver):
    """Refuses a requeue when a live row holds the (name, key) under ANY tenant."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        row = self._rows.get(job_id)
        if row is not None and row.rec.state not in LIVE_STATES:
            r = row.rec
            for other in self._rows.values():
                o = other.rec
                if o.state in LIVE_STATES and (o.name, o.idempotency_key) == (
                    r.name,
                    r.idempotency_key,
                ):
                    return RequeueAnswer.DUPLICATE
        return super()._requeue_locked(job_id, now_ms, fresh_run_id)


class KeysCutAt255Characters(MemoryDriver):
    """Stores idempotency keys in a 255-character column, cutting longer ones (and its index)."""

    def _enqueue_locked(self, job: NewJob) -> EnqueueResult:
        return super()._enqueue_locked(replace(job, idempotency_key=job.idempotency_key[:255]))


class SilentWake(MemoryDriver):
    """Declares a wake channel that proves itself live but never delivers a wake."""

    def capabilities(self) -> Capabilities:
        return Capabilities(wake=True)

    async def wake_subscribe(
        self, queues: Sequence[str], on_wake: Callable[[str], None]
    ) -> WakeSubscription | None:
        return _Subscription()


class _Subscription:
    def is_live(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class WakingMemory(MemoryDriver):
    """A memory driver with an in-process wake: what `SilentWake` should have been."""

    def __init__(self) -> None:
        super().__init__()
        self._subscribers: list[tuple[frozenset[str], Callable[[str], None]]] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(wake=True)

    async def wake_subscribe(
        self, queues: Sequence[str], on_wake: Callable[[str], None]
    ) -> WakeSubscription | None:
        self._subscribers.append((frozenset(queues), on_wake))
        return _Subscription()

    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        answer = await super()._job_enqueue(job)
        if not answer.deduped:
            for queues, on_wake in self._subscribers:
                if job.queue in queues:
                    on_wake(job.queue)
        return answer


# -- the operator family (issue 9) -------------------------------------------------------------


class ListIgnoresTenant(MemoryDriver):
    """Lists rows of every tenant whatever the filter asks."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        return await super()._job_list(replace(f, tenant_id=None), after, limit, scan)


class ListTiesByIdAscending(MemoryDriver):
    """Breaks created_at ties by ascending id (the index was declared the wrong way round)."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        got = await super()._job_list(f, after, limit, scan)
        jobs = sorted(got.jobs, key=lambda j: (-j.created_at_ms, j.id))
        return replace(got, jobs=tuple(jobs))


class ListCursorInclusive(MemoryDriver):
    """Starts a page AT the cursor's row instead of after it: a row shows on two pages."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        if after is not None:
            after = ListKey(after.created_at_ms, after.id + "\x01")
        return await super()._job_list(f, after, limit, scan)


class ListScanCountsMatchesOnly(MemoryDriver):
    """Spends its scan budget on matching rows only: an unbounded walk for a rare filter."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        return await super()._job_list(f, after, limit, 10_000 if f != JobFilter() else scan)


class StatsMissParked(MemoryDriver):
    """Counts parked rows as ready (a count read off the due index alone)."""

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        out = []
        for q in await super()._queue_stats(now_ms):
            c = dict(q.counts)
            c[JobState.READY] += c[JobState.PARKED]
            c[JobState.PARKED] = 0
            out.append(replace(q, counts=tuple(c.items())))
        return out


class OldestReadyIncludesFuture(MemoryDriver):
    """Reports the oldest ready row whether or not it is due yet."""

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        return await super()._queue_stats(MAX_TIME_MS)


class PromotesParked(MemoryDriver):
    """Promotes a parked row with a time (a sleep) as if it were a delayed ready row."""

    async def _job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        out = []
        for job_id in job_ids:
            row = self._rows.get(job_id)
            r = row.rec if row is not None else None
            parked = r is not None and r.state is JobState.PARKED and r.run_at_ms is not None
            if r is not None and parked and r.run_at_ms is not None and r.run_at_ms > now_ms:
                self._put(r, replace(r, run_at_ms=now_ms))
                out.append(PromoteAnswer.PROMOTED)
                continue
            out += await super()._job_promote([job_id], now_ms)
        return out


class RemovesRunning(MemoryDriver):
    """Removes a running row from under its worker."""

    async def _job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        out = []
        for job_id in job_ids:
            row = self._rows.get(job_id)
            if row is not None and row.rec.state is JobState.RUNNING:
                with self._lock:
                    self._drop(job_id)
                out.append(RemoveAnswer.REMOVED)
            else:
                out += await super()._job_remove([job_id])
        return out


class RemoveKeepsLiveKey(MemoryDriver):
    """Removes a live row but leaves its idempotency key taken."""

    async def _job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        keys = dict(self._live_keys)
        out = await super()._job_remove(job_ids)
        for ns, holder in keys.items():
            if holder not in self._rows:
                self._live_keys[ns] = holder
        return out


class CountsMissedSettles(MemoryDriver):
    """Moves the counter of every ack, landed or not."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        out = await super()._job_ack(acks)
        for a, landed in zip(acks, out, strict=True):
            row = self._rows.get(a.fence.job_id)
            if not landed and row is not None:
                self._count(row.rec, a.now_ms, Outcome.COMPLETED)
        return out


class CountsIgnoreQueue(MemoryDriver):
    """Counts every settle of a name in the queue it was declared for, whatever queue ran it."""

    def _count(self, r: JobRecord, now_ms: int, outcome: Outcome) -> None:
        super()._count(replace(r, queue=QUEUES[0]), now_ms, outcome)


class CountsDropsAsDead(MemoryDriver):
    """Moves `dead_lettered` for a failure without dead letter (it must be `dropped`)."""

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        return self._fenced(
            nacks,
            lambda n, r: nacked(r, n),
            lambda n: (
                Outcome.DEAD_LETTERED
                if n.kind is NackKind.FAIL
                else nack_outcome(n.kind, n.dead_letter)
            ),
        )


class CountsBuriesNowhere(MemoryDriver):
    """Buries a lapsed final attempt without moving its counter."""

    def _count(self, r: JobRecord, now_ms: int, outcome: Outcome) -> None:
        if outcome in (Outcome.DEAD_LETTERED, Outcome.DROPPED) and self._burying:
            return
        super()._count(r, now_ms, outcome)

    _burying = False

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        self._burying = True
        try:
            return await super()._job_claim(params)
        finally:
            self._burying = False


class FoldsEveryMinute(MemoryDriver):
    """Folds minute buckets of the current hour too (it forgot to keep the recent ones)."""

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        return await super()._counter_fold(now_ms + 2 * HOUR_MS, limit)


class FoldIgnoresLimit(MemoryDriver):
    """Folds every old bucket at once, whatever the limit."""

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        done = await super()._counter_fold(now_ms, MAX_PURGE_LIMIT)
        return min(done, limit)


# -- the step and event families (issue 10) -----------------------------------------------------


class UnfencedStepPut(MemoryDriver):
    """Records a step for the fence's row whoever holds it now (any running row)."""

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        current = []
        for p in puts:
            row = self._rows.get(p.fence.job_id)
            if row is not None and row.rec.state is JobState.RUNNING and row.rec.claimed_by:
                p = replace(p, fence=Fence(p.fence.job_id, row.rec.claims, row.rec.claimed_by))
            current.append(p)
        return await super()._step_put(current)


class StepListMissesOne(MemoryDriver):
    """Answers a run's steps but the last one recorded (a read that raced its own write)."""

    async def _step_list(self, run_id: str) -> list[StepRecord]:
        steps = sorted(await super()._step_list(run_id), key=lambda s: s.recorded_at_ms)
        return steps[:-1]


class StepPutOverwrites(MemoryDriver):
    """A second record of a step replaces the first (a replay would see a new output)."""

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        with self._lock:
            for p in puts:
                r = self._held(p.fence)
                if r is not None:
                    self._steps.get(r.run_id, {}).pop(p.name, None)
        return await super()._step_put(puts)


class RemoveKeepsSteps(MemoryDriver):
    """Removes and purges rows but keeps their steps."""

    def _drop(self, job_id: str) -> None:
        kept = dict(self._steps)
        super()._drop(job_id)
        self._steps = kept


class WakesWaitsThatBeganLater(MemoryDriver):
    """Wakes a wait with an event published before the wait's `since`."""

    async def _event_publish(self, event: EventRecord) -> int:
        self._waits = {i: replace(w, since_ms=0) for i, w in self._waits.items()}
        return await super()._event_publish(event)


class MatchTakesTrueForOne(MemoryDriver):
    """Compares match values with Python's `==`, so `true` matches `1`."""

    async def _event_publish(self, event: EventRecord) -> int:
        data = json.loads(event.data_json)
        if isinstance(data, dict):
            data = {k: (1 if v is True else v) for k, v in data.items()}
        self._waits = {
            i: replace(w, match_json=w.match_json.replace("true", "1"))
            for i, w in self._waits.items()
        }
        return await super()._event_publish(replace(event, data_json=json.dumps(data)))


class WaitOutlivesItsPark(MemoryDriver):
    """Keeps a row's wait after the row left `parked`: a later event wakes a run that moved on."""

    def _put(self, old: JobRecord | None, new: JobRecord) -> None:
        waits = dict(self._waits)
        super()._put(old, new)
        self._waits = waits

    async def _event_publish(self, event: EventRecord) -> int:
        # Its wake only moves parked rows, so a stale wait shows as a wrong count.
        woken = await super()._event_publish(event)
        stale = [
            i
            for i, w in self._waits.items()
            if w.event == event.name
            and i in self._rows
            and self._rows[i].rec.state is not JobState.PARKED
        ]
        return woken + len(stale)


class ParkIgnoresStoredEvent(MemoryDriver):
    """Parks a waiting run although its event was published already: it sleeps to its timeout."""

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        if self._parking:
            return None
        return super()._find_locked(wait, now_ms)

    _parking = False

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        self._parking = True
        try:
            return await super()._job_nack(nacks)
        finally:
            self._parking = False


class WaitShownAfterItsPark(MemoryDriver):
    """Drops a wait when its row leaves `parked` (a publish never wakes it) but goes on
    reporting it in `job_get_many`: a run claimed at its timeout, woken or cancelled still shows
    what it waited for."""

    def __init__(self) -> None:
        super().__init__()
        self._shown: dict[str, EventWait] = {}

    def _put(self, old: JobRecord | None, new: JobRecord) -> None:
        super()._put(old, new)
        self._shown.update(self._waits)

    async def _job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        rows = await super()._job_get_many(job_ids)
        return {
            i: replace(r, wait=self._shown[i]) if i in self._shown else r for i, r in rows.items()
        }


class WaitNotShown(MemoryDriver):
    """Stores and honours a parked row's wait but never reports it (`wait` always None)."""

    async def _job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        rows = await super()._job_get_many(job_ids)
        return {i: replace(r, wait=None) for i, r in rows.items()}


# -- a wait's until, events' tenants, requeues of unwound sagas (issue 24) ----------------------


class WakeIgnoresUntil(MemoryDriver):
    """A publish wakes a wait whatever its until: an event after the timeout takes the run."""

    async def _event_publish(self, event: EventRecord) -> int:
        kept = dict(self._waits)
        self._waits = {i: replace(w, until_ms=None) for i, w in self._waits.items()}
        try:
            return await super()._event_publish(event)
        finally:
            self._waits = {i: kept[i] for i in self._waits}


class FindIgnoresUntil(MemoryDriver):
    """`event_find` and a park's look count events published after the wait's until."""

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        return super()._find_locked(replace(wait, until_ms=None), now_ms)


class UntilInclusive(MemoryDriver):
    """Counts an event published exactly at the wait's until (`<=` for `<`), in every path."""

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        return super()._find_locked(_one_ms_on(wait), now_ms)

    async def _event_publish(self, event: EventRecord) -> int:
        kept = dict(self._waits)
        self._waits = {i: _one_ms_on(w) for i, w in self._waits.items()}
        try:
            return await super()._event_publish(event)
        finally:
            self._waits = {i: kept[i] for i in self._waits}


def _one_ms_on(wait: EventWait) -> EventWait:
    return wait if wait.until_ms is None else replace(wait, until_ms=wait.until_ms + 1)


class WakeIgnoresTenant(MemoryDriver):
    """A publish wakes the waits of every tenant: one org's event runs another org's saga."""

    async def _event_publish(self, event: EventRecord) -> int:
        kept = dict(self._waits)
        self._waits = {i: replace(w, tenant_id=event.tenant_id) for i, w in self._waits.items()}
        try:
            return await super()._event_publish(event)
        finally:
            self._waits = {i: kept[i] for i in self._waits}


class FindIgnoresTenant(MemoryDriver):
    """`event_find` and a park's look take the first event of any tenant."""

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        hits: list[EventRecord] = []
        for tenant in {e.tenant_id for e in self._events.values()} | {wait.tenant_id}:
            found = super()._find_locked(replace(wait, tenant_id=tenant), now_ms)
            if found is not None:
                hits.append(found)
        return min(hits, key=lambda e: (e.published_at_ms, e.id)) if hits else None


class EveryTenantIgnored(MemoryDriver):
    """Stores an event for every tenant as an event for no tenant."""

    async def _event_publish(self, event: EventRecord) -> int:
        return await super()._event_publish(replace(event, all_tenants=False))


class RequeueReplaysUnwound(MemoryDriver):
    """A plain requeue takes a saga run that failed for good: it replays undone steps."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        row = self._rows.get(job_id)
        steps = self._steps.get(row.rec.run_id, {}) if row is not None else {}
        mark = steps.pop(SAGA_STEP, None)
        try:
            return super()._requeue_locked(job_id, now_ms, fresh_run_id)
        finally:
            if mark is not None:
                steps[SAGA_STEP] = mark


class FreshRequeueKeepsRun(MemoryDriver):
    """A fresh requeue keeps the row's run id, so its recorded steps replay after all."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        row = self._rows.get(job_id)
        answer = super()._requeue_locked(job_id, now_ms, fresh_run_id)
        if row is not None and answer is RequeueAnswer.REQUEUED:
            r = self._rows[job_id].rec
            self._put(r, replace(r, run_id=row.rec.run_id))
        return answer


class FreshRequeueKeepsOldSteps(MemoryDriver):
    """A fresh requeue leaves the steps of the run it left, nobody's now, stored for good."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        kept = dict(self._steps)
        answer = super()._requeue_locked(job_id, now_ms, fresh_run_id)
        self._steps = {**kept, **self._steps}
        return answer


class FreshRequeueDropsUnwoundSteps(MemoryDriver):
    """A fresh requeue deletes an unwound run's steps too: its unwinding finds nothing to undo."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        row = self._rows.get(job_id)
        answer = super()._requeue_locked(job_id, now_ms, fresh_run_id)
        if row is not None and fresh_run_id is not None and answer is RequeueAnswer.REQUEUED:
            self._steps.pop(row.rec.run_id, None)
        return answer


#: The families a broken driver's walk takes: the job family alone, or with the family the
#: broken method belongs to (a narrow walk reaches its edges; the suite itself walks them all).
class RenewsExpiredLease(MemoryDriver):
    """Renews a holding that expired, so long as nobody took its room."""

    async def _lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        out = []
        for r in renews:
            held = self._holdings.get(r.key, {})
            h = held.get(r.token)
            if h is not None:
                held[r.token] = replace(h, expires_at_ms=now_ms + r.ttl_ms)
            out.append(h is not None)
        return out


class TakesPastTheLimit(MemoryDriver):
    """Grants one holding more than a key's limit."""

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        return await super()._lease_take([replace(t, limit=t.limit + 1) for t in takes], now_ms)


class CountsExpiredHolders(MemoryDriver):
    """Counts expired holdings against a key's limit (a lapsed slot blocks the key for good)."""

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        out: list[Lease | None] = []
        for t in takes:
            stored = len(self._holdings.get(t.key, {}))
            mine = any(h.holder == t.holder for h in self._holdings.get(t.key, {}).values())
            out.append(
                None
                if stored >= t.limit and not mine
                else (await super()._lease_take([t], now_ms))[0]
            )
        return out


class ReleaseDropsStamps(MemoryDriver):
    """Releases a rate stamp as a slot: the start stops counting before its interval is up."""

    async def _lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return await super()._lease_abandon(refs, now_ms)


class TakeAgainCountsTwice(MemoryDriver):
    """A holder's second take of its key adds a holding instead of replacing its own."""

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        return await super()._lease_take(
            [replace(t, holder=f"{t.holder}#{now_ms}-{i}") for i, t in enumerate(takes)], now_ms
        )


class RenewsFromTheOldEnd(MemoryDriver):
    """Extends a renewed holding from its old end, not from now."""

    async def _lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        out = []
        for r in renews:
            h = self._live_holding(r.key, r.token, now_ms)
            if h is not None:
                self._holdings[r.key][r.token] = replace(
                    h, expires_at_ms=h.expires_at_ms + r.ttl_ms
                )
            out.append(h is not None)
        return out


class HoldsAtItsEnd(MemoryDriver):
    """Counts a holding as live at exactly its `expires_at_ms` (one millisecond too long)."""

    def _live_holding(self, key: str, token: int, now_ms: int) -> Lease | None:
        return super()._live_holding(key, token, now_ms - 1)

    async def _lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        return await super()._lease_holders(key, now_ms - 1)


class UnfencedTaskFire(MemoryDriver):
    """Fires whatever the stored watermark: two schedulers that read the same one both land."""

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        mark = self._marks.get(fire.name)
        if mark is not None:
            fire = replace(fire, expect_ms=mark.watermark_ms)
        return await super()._task_fire(fire)


class RefusedFireEnqueues(MemoryDriver):
    """Enqueues the occurrence's job even when the fence refuses the fire (the mark stays)."""

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        answer = await super()._task_fire(fire)
        if answer.enqueued is None:
            with self._lock:
                self._enqueue_locked(fire.job)
        return answer


class ArmOverwritesWatermark(MemoryDriver):
    """Arming a task that has a mark moves its watermark to now (missed occurrences vanish, or
    fired ones fire again)."""

    async def _task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        with self._lock:
            for n in names:
                if n in self._marks:
                    self._marks[n] = replace(self._marks[n], watermark_ms=now_ms)
        return await super()._task_arm(names, now_ms)


class FiredAtTheWatermark(MemoryDriver):
    """Records a catch-up fire's new watermark as its fired occurrence."""

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        answer = await super()._task_fire(fire)
        if answer.mark is not None and answer.fired:
            with self._lock:
                mark = self._marks[fire.name] = replace(answer.mark, fired_ms=fire.watermark_ms)
            answer = replace(answer, mark=mark)
        return answer


class DedupedFireDropsJob(MemoryDriver):
    """Moves the mark when the job's key is held by a live row, but answers nothing fired."""

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        answer = await super()._task_fire(fire)
        e = answer.enqueued
        if e is not None and e.deduped and e.id != fire.job.id:
            return replace(answer, enqueued=None)
        return answer


class TaskPauseHoldsItsName(MemoryDriver):
    """Claims as if a task pause paused the job name it shares."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        held = {Pause("name", p.value) for p in self._pauses if p.kind == "task"} - self._pauses
        self._pauses |= held
        try:
            return await super()._job_claim(params)
        finally:
            self._pauses -= held


class CoreUnfencedAck(CoreDriver):
    """The core-only driver, acking any running row whoever claimed it (`UnfencedAck`'s bug)."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        current = []
        for a in acks:
            row = self._rows.get(a.fence.job_id)
            if row is not None and row.claimed_by is not None:
                a = replace(a, fence=Fence(a.fence.job_id, row.claims, row.claimed_by))
            current.append(a)
        return await super()._job_ack(current)


class DeclaresWhatItLacks(CoreDriver):
    """The core-only driver declaring the operator family without implementing it."""

    def capabilities(self) -> Capabilities:
        return Capabilities(operator=True)


# -- blind spots of the suite before issue 25: one bug each at an exact edge ----------------------
# Each of these passed the suite (or was caught only by luck) while every family shared one walk.


class HeartbeatIgnoresWorker(MemoryDriver):
    """Fences a heartbeat on the claim count alone: another worker's beat moves the lease."""

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        out: list[bool] = []
        for b in beats:
            row = self._rows.get(b.fence.job_id)
            if row is not None and row.rec.claimed_by is not None:
                b = replace(b, fence=replace(b.fence, worker_id=row.rec.claimed_by))
            out += await super()._job_heartbeat([b])
        return out


class HeartbeatNeverShortens(MemoryDriver):
    """A heartbeat only ever pushes a lease out: a shorter one leaves the old end in place."""

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        return self._fenced(
            beats,
            lambda b, r: replace(
                r, lease_until_ms=max(r.lease_until_ms or 0, b.now_ms + b.lease_ms)
            ),
        )


class WorkersVanishAtExpiry(MemoryDriver):
    """Deletes a registry row once any call's clock reaches its expiry (a TTL'd key): forgetting
    an expired worker then answers False, though its row was never forgotten."""

    def _expire(self, now_ms: int) -> None:
        with self._lock:
            for w in [w for w in self._workers.values() if w.expires_at_ms <= now_ms]:
                del self._workers[w.worker_id]

    async def _worker_list(self, now_ms: int) -> list[WorkerInfo]:
        self._expire(now_ms)
        return await super()._worker_list(now_ms)

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        self._expire(params.now_ms)
        return await super()._job_claim(params)


class SettlesRefusedOnceLapsed(MemoryDriver):
    """Reads a lapsed lease as a lost fence: an ack or nack after the lease end, though no claim
    took the row since (under a pause, say), is refused."""

    def _lapsed(self, fence: Fence, now_ms: int) -> bool:
        r = self._held(fence)
        return r is not None and r.lease_until_ms is not None and r.lease_until_ms <= now_ms

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        out: list[bool] = []
        for a in acks:
            out += [False] if self._lapsed(a.fence, a.now_ms) else await super()._job_ack([a])
        return out

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        out: list[bool] = []
        for n in nacks:
            out += [False] if self._lapsed(n.fence, n.now_ms) else await super()._job_nack([n])
        return out


class ClaimsOnlyPastRunAt(MemoryDriver):
    """Takes a ready row only once its run_at has passed (`<` for `<=`): a row due exactly now
    waits a millisecond."""

    def _due_in(self, queue: str, now: int, limit: int) -> list[tuple[int, int, str]]:
        return super()._due_in(queue, now - 1, limit)


class WorkerListedAtItsExpiry(MemoryDriver):
    """Lists a registry row at exactly its `expires_at_ms` (one millisecond too long)."""

    async def _worker_list(self, now_ms: int) -> list[WorkerInfo]:
        return await super()._worker_list(now_ms - 1)


class BuriesOneAttemptEarly(MemoryDriver):
    """Buries a lapsed lease on its last-but-one attempt (`attempt + 1 >= max_attempts`): the
    final attempt never runs."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        early: dict[str, int] = {}
        with self._lock:
            for end, job_id in list(self._leases):
                r = self._rows[job_id].rec
                if end <= params.now_ms and r.queue in params.queues and r.max_attempts > 1:
                    early[job_id] = r.max_attempts
                    self._put(r, replace(r, max_attempts=r.max_attempts - 1))
        result = await super()._job_claim(params)
        with self._lock:
            for job_id, max_attempts in early.items():
                r = self._rows[job_id].rec
                self._put(r, replace(r, max_attempts=max_attempts))
        jobs = tuple(replace(j, max_attempts=early.get(j.id, j.max_attempts)) for j in result.jobs)
        return replace(result, jobs=jobs)


class PromotesADueRow(MemoryDriver):
    """Answers PROMOTED for a ready row due exactly now (it is ALREADY_DUE)."""

    async def _job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        due_now = {
            i
            for i in job_ids
            if i in self._rows
            and self._rows[i].rec.state is JobState.READY
            and self._rows[i].rec.run_at_ms == now_ms
        }
        out = await super()._job_promote(job_ids, now_ms)
        return [
            PromoteAnswer.PROMOTED if i in due_now else a for i, a in zip(job_ids, out, strict=True)
        ]


class OldestReadyOnlyPastRunAt(MemoryDriver):
    """Reports a queue's oldest due ready row only once its run_at has passed (`<` for `<=`)."""

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        return await super()._queue_stats(now_ms - 1)


class RequeueManyBlindToItself(MemoryDriver):
    """Checks each requeue of one call against the keys held before the call: two finished twins
    requeued together both come back live."""

    async def _job_requeue_many(self, params: RequeueParams) -> list[RequeueAnswer]:
        with self._lock:
            before = dict(self._live_keys)
            out = []
            for i, run in params.items():
                current = self._live_keys
                self._live_keys = dict(before)
                out.append(self._requeue_locked(i, params.now_ms, run))
                added = {k: v for k, v in self._live_keys.items() if before.get(k) != v}
                self._live_keys = {**current, **added}
            return out


class ListCursorAtTheEnd(MemoryDriver):
    """Answers a cursor after a page whose last examined row is the last row: one empty page
    more."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        got = await super()._job_list(f, after, limit, scan)
        if got.last_examined is None and got.jobs:
            last = got.jobs[-1]
            return replace(got, last_examined=ListKey(last.created_at_ms, last.id))
        return got


class CounterReadUntilInclusive(MemoryDriver):
    """Reads the counter buckets starting in `[since, until]`: the bucket at `until` too."""

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        return await super()._counter_read(replace(params, until_ms=params.until_ms + 1))


class CounterReadSinceExclusive(MemoryDriver):
    """Reads the counter buckets starting in `(since, until)`: the bucket at `since` is missed."""

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        return await super()._counter_read(replace(params, since_ms=params.since_ms + 1))


class DropsAtTheCutoff(MemoryDriver):
    """Drops the hour bucket starting exactly 30 days before now too (`<=` for `<`)."""

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        done = await super()._counter_fold(now_ms, limit)
        with self._lock:
            at = [
                k for k in sorted(self._counters) if k[3] == HOUR_MS and k[2] == drop_before(now_ms)
            ]
            for key in at[: limit - done]:
                del self._counters[key]
                done += 1
        return done


class FoldsAtTheCutoff(MemoryDriver):
    """Folds the minute buckets starting exactly at `fold_before(now)` too (`<=` for `<`)."""

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        done = 0
        with self._lock:
            at = [
                k
                for k in sorted(self._counters)
                if k[3] == MINUTE_MS and k[2] == fold_before(now_ms)
            ]
            for name, queue, bucket, width in at[:limit]:
                values = self._counters.pop((name, queue, bucket, width))
                hour = self._counters.setdefault((name, queue, hour_of(bucket), HOUR_MS), [0] * 9)
                hour[:] = [a + b for a, b in zip(hour, values, strict=True)]
                done += 1
        if done == limit:
            return done
        return done + await super()._counter_fold(now_ms, limit - done)


class FoldsNewestFirst(MemoryDriver):
    """With more old minute buckets than its limit, folds the newest first."""

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        with self._lock:
            old = sorted(
                (
                    (b, n, q)
                    for (n, q, b, w) in self._counters
                    if w == MINUTE_MS and b < fold_before(now_ms)
                ),
                reverse=True,
            )
            if len(old) <= limit:
                old = []
            for bucket, name, queue in old[:limit]:
                values = self._counters.pop((name, queue, bucket, MINUTE_MS))
                hour = self._counters.setdefault((name, queue, hour_of(bucket), HOUR_MS), [0] * 9)
                hour[:] = [a + b for a, b in zip(hour, values, strict=True)]
        if old:
            return limit
        return await super()._counter_fold(now_ms, limit)


class CountsInThePreviousMinute(MemoryDriver):
    """Counts a settle at exactly a minute's start in the minute before (`minute_of(now - 1)`)."""

    def _count(self, r: JobRecord, now_ms: int, outcome: Outcome) -> None:
        super()._count(r, now_ms - 1, outcome)


class PublishWakesOneWaiter(MemoryDriver):
    """Wakes only the first parked run an event matches; a second one waits on."""

    async def _event_publish(self, event: EventRecord) -> int:
        data = json.loads(event.data_json)
        matching = [
            i
            for i, w in self._waits.items()
            if w.event == event.name
            and event.published_at_ms >= w.since_ms
            and event_matches(json.loads(w.match_json), data)
        ]
        hidden = {i: self._waits.pop(i) for i in matching[1:]}
        try:
            return await super()._event_publish(event)
        finally:
            self._waits.update(hidden)


class RepublishWakes(MemoryDriver):
    """Stores nothing for an event id it knows, but wakes the runs its data matches."""

    async def _event_publish(self, event: EventRecord) -> int:
        if event.id not in self._events:
            return await super()._event_publish(event)
        ghost = replace(event, id=f"{event.id}\x01again")
        await super()._event_publish(ghost)
        with self._lock:
            e = self._events.pop(ghost.id)
            self._expiries.discard((e.expires_at_ms, e.id))
            self._events_by_name[e.name].discard((e.published_at_ms, e.id))
        return 0


class ParkMeetsExpiredEvent(MemoryDriver):
    """At park time, counts a stored event that has expired as met: the run goes on at once."""

    _parking = False

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        return super()._find_locked(wait, 0 if self._parking else now_ms)

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        self._parking = True
        try:
            return await super()._job_nack(nacks)
        finally:
            self._parking = False


class EventFoundAtItsExpiry(MemoryDriver):
    """Finds an event at exactly its `expires_at_ms` (one millisecond too long)."""

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        return super()._find_locked(wait, now_ms - 1)


class EventFindSinceExclusive(MemoryDriver):
    """Finds only events published after a wait's `since`, not at it."""

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        return super()._find_locked(replace(wait, since_ms=wait.since_ms + 1), now_ms)


class EventPurgeSparesItsExpiry(MemoryDriver):
    """Purges events that expired before now, not one expiring exactly now (`<` for `<=`)."""

    async def _event_purge(self, now_ms: int, limit: int) -> int:
        return await super()._event_purge(now_ms - 1, limit)


class EventPurgeInIdOrder(MemoryDriver):
    """Purges expired events by id, not soonest expired first."""

    async def _event_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            gone = sorted(i for i, e in self._events.items() if e.expires_at_ms <= now_ms)[:limit]
            for event_id in gone:
                e = self._events.pop(event_id)
                self._expiries.discard((e.expires_at_ms, event_id))
                self._events_by_name[e.name].discard((e.published_at_ms, event_id))
            return len(gone)


class ReleaseAtItsEndLands(MemoryDriver):
    """Releases or abandons a holding at exactly its end as if it were still live."""

    _ending = False

    def _end_holdings(
        self, refs: Sequence[LeaseRef], now_ms: int, *, keep_stamps: bool
    ) -> list[bool]:
        # A millisecond off the key's time, not off the caller's now: the key's clock (moved
        # by the call itself) would put the caller's back.
        self._ending = True
        try:
            return super()._end_holdings(refs, now_ms, keep_stamps=keep_stamps)
        finally:
            self._ending = False

    def _live_holding(self, key: str, token: int, now_ms: int) -> Lease | None:
        return super()._live_holding(key, token, now_ms - self._ending)


class TakesOfOneCallIgnoreEachOther(MemoryDriver):
    """Judges each take of one call against the holdings stored before the call: two takes of
    a key with room for one both land."""

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        granted: Counter[str] = Counter()
        out: list[Lease | None] = []
        for t in takes:
            got = (await super()._lease_take([replace(t, limit=t.limit + granted[t.key])], now_ms))[
                0
            ]
            granted[t.key] += got is not None
            out.append(got)
        return out


class LeasePurgeTakesLive(MemoryDriver):
    """Purges a holding a millisecond before its end (`<` for `<=`, the other way round)."""

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        return await super()._lease_purge(now_ms + 1, limit)


class LeasePurgeSparesItsEnd(MemoryDriver):
    """Keeps a holding purged at exactly its end, as if it were still live."""

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        return await super()._lease_purge(now_ms - 1, limit)


class LeasePurgeIgnoresLimit(MemoryDriver):
    """Purges every expired holding, whatever the limit."""

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        return await super()._lease_purge(now_ms, MAX_PURGE_LIMIT)


class LeasePurgeLatestFirst(MemoryDriver):
    """Purges the holdings that expired last first."""

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            gone = sorted(
                (
                    (h.expires_at_ms, h.key, h.token)
                    for held in self._holdings.values()
                    for h in held.values()
                    if h.expires_at_ms <= now_ms
                ),
                reverse=True,
            )[:limit]
            for _, key, token in gone:
                del self._holdings[key][token]
            return len(gone)


class TakeKeepsExpired(MemoryDriver):
    """A take leaves its key's expired holdings stored (the contract once said it may): a later
    purge counts them."""

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        with self._lock:
            kept = {
                t.key: {
                    k: h
                    for k, h in self._holdings.get(t.key, {}).items()
                    if h.expires_at_ms <= now_ms
                }
                for t in takes
            }
        got = await super()._lease_take(takes, now_ms)
        with self._lock:
            for key, expired in kept.items():
                if expired:
                    self._holdings.setdefault(key, {}).update(expired)
        return got


# -- leases: the key's clock (contract v6) ---------------------------------------------------


class IgnoresTheKeyClock(MemoryDriver):
    """Works on a key at each caller's own now, as every driver did before the key's clock: a
    take whose now was read before a fresher one landed no longer sees the stamps the fresher
    one pruned, and is granted a fourth stamp inside a window of three (and a host ahead prunes
    the slots of the hosts behind it)."""

    def _lease_time(self, key: str, now_ms: int) -> int:
        return now_ms


class PurgeLeavesTheClock(MemoryDriver):
    """Deletes expired holdings without moving their keys' clocks: a caller behind the purge
    finds the room they left free at its own time."""

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            before = dict(self._lease_clocks)
        purged = await super()._lease_purge(now_ms, limit)
        with self._lock:
            for key in self._lease_clocks.keys() & before.keys():
                self._lease_clocks[key] = before[key]
        return purged


class KeepsIdleClocks(MemoryDriver):
    """Never drops a key's clock: what is stored grows with every key ever named, and a key
    idle for hours still judges its next caller at its old time."""

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            before = dict(self._lease_clocks)
        purged = await super()._lease_purge(now_ms, limit)
        with self._lock:
            for key, clock in before.items():
                self._lease_clocks.setdefault(key, clock)
        return purged


class WorkerPurgeTakesLive(MemoryDriver):
    """Purges a registry row a millisecond before its expiry."""

    async def _worker_purge(self, now_ms: int, limit: int) -> int:
        return await super()._worker_purge(now_ms + 1, limit)


class WorkerPurgeIgnoresLimit(MemoryDriver):
    """Purges every expired registry row, whatever the limit."""

    async def _worker_purge(self, now_ms: int, limit: int) -> int:
        return await super()._worker_purge(now_ms, MAX_PURGE_LIMIT)


class WorkerPurgeTiesByIdDescending(MemoryDriver):
    """Purges rows that expired in the same millisecond in descending id order."""

    async def _worker_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            expired = [w for w in self._workers.values() if w.expires_at_ms <= now_ms]
            expired.sort(key=lambda w: w.worker_id, reverse=True)
            expired.sort(key=lambda w: w.expires_at_ms)
            for w in expired[:limit]:
                del self._workers[w.worker_id]
            return len(expired[:limit])


class FireLandsAheadOfTheWatermark(MemoryDriver):
    """Lands a fire whose expected watermark is at or ahead of the stored one (`<=` for `==`)."""

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        mark = self._marks.get(fire.name)
        if mark is not None and mark.watermark_ms < fire.expect_ms:
            fire = replace(fire, expect_ms=mark.watermark_ms)
        return await super()._task_fire(fire)


class FiredJobIsTheRecord(MemoryDriver):
    """Records the fired record's id as the mark's `fired_job_id`, even when a live row of its
    key took the fire (it must name that row)."""

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        answer = await super()._task_fire(fire)
        if answer.enqueued is not None and answer.mark is not None:
            with self._lock:
                mark = self._marks[fire.name] = replace(answer.mark, fired_job_id=fire.job.id)
            answer = replace(answer, mark=mark)
        return answer


class PurgeOrdersById(MemoryDriver):
    """Purges the expired rows in id order, not oldest finished first."""

    async def _job_purge(self, params: PurgeParams) -> int:
        with self._lock:
            expired = []
            for state, index in self._finished.items():
                keep = params.keep_ms(state)
                if keep is not None:
                    expired += [i for at, i in index if at + keep <= params.now_ms]
            gone = sorted(expired)[: params.limit]
            for job_id in gone:
                self._drop(job_id)
            return len(gone)


class PurgesLate(MemoryDriver):
    """Keeps a row whose retention ends exactly now (`<` for `<=`)."""

    async def _job_purge(self, params: PurgeParams) -> int:
        return await super()._job_purge(replace(params, now_ms=params.now_ms - 1))


class PurgeLimitPerState(MemoryDriver):
    """Applies the limit to each final state apart: up to four times the limit go."""

    async def _job_purge(self, params: PurgeParams) -> int:
        gone = 0
        for state in FINISHED_STATES:
            keeps = [params.keep_ms(s) if s is state else None for s in _PURGE_ORDER]
            gone += await super()._job_purge(PurgeParams(params.now_ms, params.limit, *keeps))
        return gone


#: The final states in `PurgeParams`' field order.
_PURGE_ORDER = (JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.DEAD)


class PurgeTiesByIdDescending(MemoryDriver):
    """Among rows finished in the same millisecond, purges the greatest id first."""

    async def _job_purge(self, params: PurgeParams) -> int:
        with self._lock:
            expired = []
            for state, index in self._finished.items():
                keep = params.keep_ms(state)
                if keep is not None:
                    expired += [(at, i) for at, i in index if at + keep <= params.now_ms]
            gone = sorted(expired, key=lambda e: (e[0], [-ord(c) for c in e[1]]))[: params.limit]
            for _, job_id in gone:
                self._drop(job_id)
            return len(gone)


# -- the flow family (issue 26): one bug each in the finish rule ----------------------------------


class ReleasesAtPendingOne(MemoryDriver):
    """Releases a waiter once a single dependency is left pending, not none (an off-by-one)."""

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        moved = set(self._waiters.get(job_id, ()))
        super()._finish_locked(job_id, completed, now_ms)
        for waiter_id in moved:
            w = self._rows[waiter_id].rec
            if w.state is JobState.PARKED and w.join is not None and w.join.pending == 1:
                at = w.created_at_ms if now_ms is None else now_ms
                self._put(w, replace(w, state=JobState.READY, run_at_ms=at))


class CountsFailureAsCompleted(MemoryDriver):
    """Moves a waiter's `pending` on every finish but never its `failed`: a dependency that
    died, was refused or cancelled counts as completed."""

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        super()._finish_locked(job_id, True, now_ms)


T = TypeVar("T")


class _SomeFinishesMoveNoWaiter(MemoryDriver):
    """The finishes made inside `_unmoving` move no waiter (one write path forgot the join)."""

    _quiet = False

    async def _unmoving(self, call: Awaitable[T]) -> T:
        self._quiet = True
        try:
            return await call
        finally:
            self._quiet = False

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        if not self._quiet:
            super()._finish_locked(job_id, completed, now_ms)


class BuryMovesNoWaiter(_SomeFinishesMoveNoWaiter):
    """A claim's bury finishes a lapsed final attempt without moving the rows waiting on it
    (the bury's statement forgot the join)."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        return await self._unmoving(super()._job_claim(params))


class ClaimTakesWhatItsBuryReleased(MemoryDriver):
    """A claim buries first and then chooses its rows, so a waiter its bury released is among
    its candidates (the contract leaves it to the next claim)."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        first = await super()._job_claim(replace(params, limit=0))
        then = await super()._job_claim(replace(params, beat=None))
        return ClaimResult(then.jobs, tuple(sorted(first.buried + then.buried, key=lambda b: b.id)))


class BuryMovesTheWaiterItsClaimTook(MemoryDriver):
    """A claim that takes a waiter at its run_at while its bury finishes one of that waiter's
    dependencies counts the finish on the join it answers and stores (a finish trigger that
    runs after the claim's statement and moves the rows the statement just claimed)."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        with self._lock:
            waiting = {w: set(deps) for w, deps in self._waiting.items()}
        got = await super()._job_claim(params)
        dead = {b.id for b in got.buried}
        jobs = []
        for j in got.jobs:
            moved = len(waiting.get(j.id, set()) & dead)
            if j.join is not None and moved:
                join = replace(j.join, pending=j.join.pending - moved, failed=j.join.failed + moved)
                with self._lock:
                    r = self._rows[j.id].rec
                    self._put(r, replace(r, join=join))
                j = replace(j, join=join)
            jobs.append(j)
        return ClaimResult(tuple(jobs), got.buried)


class CancelMovesNoWaiter(_SomeFinishesMoveNoWaiter):
    """A cancel finishes a live row without moving the rows waiting on it."""

    async def _job_cancel_many(self, job_ids: Sequence[str], now_ms: int) -> list[CancelAnswer]:
        return await self._unmoving(super()._job_cancel_many(job_ids, now_ms))


class RemoveMovesNoWaiter(_SomeFinishesMoveNoWaiter):
    """Removes a live row without counting it as a finish: its waiters wait on for it."""

    async def _job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        return await self._unmoving(super()._job_remove(job_ids))


class MovesWaiterThatLeft(MemoryDriver):
    """Keeps a waiter's links when it leaves `parked` (claimed at its run_at, cancelled), so a
    later finish of its old join still counts on the row (an edge table never cleaned)."""

    def _put(self, old: JobRecord | None, new: JobRecord) -> None:
        kept = set(self._waiting.get(new.id, ())) if new.state is not JobState.PARKED else set()
        super()._put(old, new)
        if kept:
            self._waiting[new.id] = kept
            for dep in kept:
                self._waiters.setdefault(dep, set()).add(new.id)

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        for waiter_id in list(self._waiters.get(job_id, ())):
            w = self._rows[waiter_id].rec
            if w.state is not JobState.PARKED and w.join is not None:
                self._waiters[job_id].discard(waiter_id)
                self._waiting[waiter_id].discard(job_id)
                moved = replace(
                    w.join, pending=w.join.pending - 1, failed=w.join.failed + (not completed)
                )
                self._put(w, replace(w, join=moved))
        super()._finish_locked(job_id, completed, now_ms)


class CountsRefinishedDepTwice(MemoryDriver):
    """Keeps a counted dependency linked to its waiter: finished, requeued and finished again,
    it moves the join a second time."""

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        waiters = set(self._waiters.get(job_id, ()))
        super()._finish_locked(job_id, completed, now_ms)
        for waiter_id in waiters:
            if waiter_id in self._waiting:  # still parked on its join
                self._waiting[waiter_id].add(job_id)
                self._waiters.setdefault(job_id, set()).add(waiter_id)


class JoinPendingKeepsCounted(MemoryDriver):
    """`join_pending` answers a waiter's whole join as it parked, the dependencies its join
    already counted too (an edge table read without the finishes' deletes)."""

    def __init__(self) -> None:
        super().__init__()
        self._linked: dict[str, tuple[str, ...]] = {}

    def _join_locked(self, waiter_id: str, after: Sequence[str], policy: JoinPolicy) -> JoinState:
        join = super()._join_locked(waiter_id, after, policy)
        self._linked[waiter_id] = tuple(sorted(self._waiting.get(waiter_id, ())))
        return join

    async def _join_pending(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        got = await super()._join_pending(job_ids)
        return {i: self._linked[i] for i in got}


class JoinEnqueueIgnoresFinished(MemoryDriver):
    """`join_enqueue` counts every dependency as pending, the finished ones too: its row waits
    for finishes that already happened."""

    _enqueueing = False

    async def _join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        self._enqueueing = True
        try:
            return await super()._join_enqueue(items)
        finally:
            self._enqueueing = False

    def _join_locked(self, waiter_id: str, after: Sequence[str], policy: JoinPolicy) -> JoinState:
        join = super()._join_locked(waiter_id, after, policy)
        return replace(join, pending=join.total, failed=0) if self._enqueueing else join


class MissingDependencyWritesRow(MemoryDriver):
    """Answers an item naming an unknown dependency `missing`, but its row was inserted first
    and stays (ready, as a plain enqueue)."""

    async def _join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        out = await super()._join_enqueue(items)
        for item, answer in zip(items, out, strict=True):
            if answer.enqueued is None:
                await super()._job_enqueue(item.job)
        return out


class ReleasedAtItsCreation(MemoryDriver):
    """Releases a waiter due at its own `created_at_ms`, not at the finish's `now_ms` (the
    release statement never got the finish's clock)."""

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        super()._finish_locked(job_id, completed, None)


class ClaimForgetsJoin(MemoryDriver):
    """Claims a released waiter without its join (the claim's answer reads no join column)."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        got = await super()._job_claim(params)
        return replace(got, jobs=tuple(replace(j, join=None) for j in got.jobs))


class ReparkAddsToOldJoin(MemoryDriver):
    """Parking on a join again starts from the old join's `failed`, not afresh."""

    def _nacked(self, n: Nack, r: JobRecord) -> JobRecord:
        new = super()._nacked(n, r)
        if n.join is not None and r.join is not None and new.join is not None:
            new = replace(new, join=replace(new.join, failed=new.join.failed + r.join.failed))
        return new


class AckCallMovesAWaiterOnce(MemoryDriver):
    """One ack call moves each waiter once, however many of its dependencies it acks (a
    set-based update per statement): two dependencies acked together count as one."""

    _moved: set[str] | None = None

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        self._moved = set()
        try:
            return await super()._job_ack(acks)
        finally:
            self._moved = None

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        if self._moved is not None:
            for waiter_id in list(self._waiters.get(job_id, ())):
                if waiter_id in self._moved:
                    self._waiters[job_id].discard(waiter_id)
                    self._waiting[waiter_id].discard(job_id)
            self._moved |= self._waiters.get(job_id, set())
        super()._finish_locked(job_id, completed, now_ms)


class ParkCountsUnknownAsCompleted(MemoryDriver):
    """A park's join counts an id naming no row as completed (it must count as failed)."""

    def _nacked(self, n: Nack, r: JobRecord) -> JobRecord:
        unknown = sum(1 for i in n.join or () if i not in self._rows)
        new = super()._nacked(n, r)
        if unknown and new.join is not None:
            new = replace(new, join=replace(new.join, failed=new.join.failed - unknown))
        return new


class ListIgnoresBatch(MemoryDriver):
    """Lists rows of every batch whatever the filter asks."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        return await super()._job_list(replace(f, batch_id=None), after, limit, scan)


# -- the sweep family (issue 27): one bug each in the ledger --------------------------------------


def _same_sweep(e: SweepRecord, start: SweepStart, *fields: str) -> bool:
    """`e` is another run's entry of `start`'s sweep, compared on `fields`."""
    return e.run_id != start.run_id and all(getattr(e, f) == getattr(start, f) for f in fields)


class _SweepBlocker(MemoryDriver):
    """Blocks a start on the entries `_blocks` says, the last finished first (ties by the
    greater run id); otherwise starts as the memory driver does."""

    def _blocks(self, e: SweepRecord, start: SweepStart) -> bool:
        raise NotImplementedError

    def _last(self, e: SweepRecord) -> tuple[int, str]:
        return (e.finished_at_ms or 0, e.run_id)

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        with self._lock:
            if self._held(start.fence) is not None:
                done = [e for e in self._sweeps.values() if self._blocks(e, start)]
                if done:
                    return SweepStartAnswer(None, blocked_by=max(done, key=self._last))
        return await super()._sweep_start(start)


_IDENTITY = ("name", "scope", "environment", "checksum")


class SweepBlockedByFailed(_SweepBlocker):
    """A failed run of the same sweep blocks a new one, as a completed one does."""

    def _blocks(self, e: SweepRecord, start: SweepStart) -> bool:
        return e.status in ("completed", "failed") and _same_sweep(e, start, *_IDENTITY)


class SweepBlockIgnoresEnvironment(_SweepBlocker):
    """A run completed in one environment blocks the same sweep in every other (the lookup
    forgot the environment)."""

    def _blocks(self, e: SweepRecord, start: SweepStart) -> bool:
        return e.status == "completed" and _same_sweep(e, start, "name", "scope", "checksum")


class SweepBlockIgnoresChecksum(_SweepBlocker):
    """A completed run blocks a changed declaration of the same sweep (the checksum is not
    compared)."""

    def _blocks(self, e: SweepRecord, start: SweepStart) -> bool:
        return e.status == "completed" and _same_sweep(e, start, "name", "scope", "environment")


class SweepBlockComparesKind(MemoryDriver):
    """Only a completed run of the same kind blocks (the contract compares no kind)."""

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        with self._lock:
            hidden = {
                k: e for k, e in self._sweeps.items() if e.kind != start.kind and k != start.run_id
            }
            for k in hidden:
                del self._sweeps[k]
        try:
            return await super()._sweep_start(start)
        finally:
            with self._lock:
                self._sweeps.update(hidden)


class SweepBlockerTiesBySmallerRunId(_SweepBlocker):
    """Of completed runs finished in one millisecond, the smaller run id blocks."""

    def _blocks(self, e: SweepRecord, start: SweepStart) -> bool:
        return e.status == "completed" and _same_sweep(e, start, *_IDENTITY)

    def _last(self, e: SweepRecord) -> tuple[int, str]:
        return (e.finished_at_ms or 0, "".join(chr(0x10FFFF - ord(c)) for c in e.run_id))


class SweepBlockerIsTheGreatestRunId(_SweepBlocker):
    """The completed run with the greatest run id blocks, whenever it finished."""

    def _blocks(self, e: SweepRecord, start: SweepStart) -> bool:
        return e.status == "completed" and _same_sweep(e, start, *_IDENTITY)

    def _last(self, e: SweepRecord) -> tuple[int, str]:
        return (0, e.run_id)


class SweepStartReopensCompleted(MemoryDriver):
    """A later attempt of a completed run reopens its entry (`running`, its end cleared)."""

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        with self._lock:
            own = self._sweeps.get(start.run_id)
            if own is not None and own.status == "completed" and self._held(start.fence):
                self._sweeps[start.run_id] = replace(own, status="failed")
        return await super()._sweep_start(start)


class SweepResumeKeepsItsEnd(MemoryDriver):
    """A failed run resumed by its next attempt is `running` again but keeps its error and
    its end."""

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        with self._lock:
            before = self._sweeps.get(start.run_id)
        got = await super()._sweep_start(start)
        if before is None or before.status != "failed" or got.record is None:
            return got
        with self._lock:
            kept = replace(got.record, error=before.error, finished_at_ms=before.finished_at_ms)
            self._sweeps[start.run_id] = kept
        return SweepStartAnswer(kept)


class SweepResumeStartsOver(MemoryDriver):
    """A failed run resumed by its next attempt starts over: its batches, rows and cursor go."""

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        with self._lock:
            before = self._sweeps.get(start.run_id)
        got = await super()._sweep_start(start)
        if before is None or before.status != "failed" or got.record is None:
            return got
        with self._lock:
            fresh = replace(got.record, batches=0, rows=0, errors=0, cursor_json=None)
            self._sweeps[start.run_id] = fresh
        return SweepStartAnswer(fresh)


class SweepEntryTakesTheRunsJob(MemoryDriver):
    """A new entry takes the job id of the first row holding its run id, not the fence's: they
    differ when two rows share a run (as a saga and its unwind job do)."""

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        with self._lock:
            new = start.run_id not in self._sweeps
            owner = next(
                (r.rec.id for r in self._rows.values() if r.rec.run_id == start.run_id), None
            )
        got = await super()._sweep_start(start)
        if not new or got.record is None or owner is None:
            return got
        with self._lock:
            moved = self._sweeps[start.run_id] = replace(got.record, job_id=owner)
        return SweepStartAnswer(moved)


class _SweepUnfenced(MemoryDriver):
    """Inside `_unfenced`, a fence naming a stored row holds, whatever its claim."""

    _open = False

    async def _unfenced(self, call: Awaitable[T]) -> T:
        self._open = True
        try:
            return await call
        finally:
            self._open = False

    def _held(self, fence: Fence) -> JobRecord | None:
        row = self._rows.get(fence.job_id)
        if self._open and row is not None:
            return row.rec
        return super()._held(fence)


class UnfencedSweepStart(_SweepUnfenced):
    """Opens and resumes entries under a lost fence (the claim is never read)."""

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        return await self._unfenced(super()._sweep_start(start))


class UnfencedSweepAdvance(_SweepUnfenced):
    """Records a batch under a lost fence."""

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        return await self._unfenced(super()._sweep_advance(advance))


class CheckpointSkipsAdvance(MemoryDriver):
    """Records a batch's step and never counts it: a recorded batch is never run again, so the
    ledger misses its rows for good."""

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        return (await self._step_put([checkpoint.step]))[0] and self._holds_run(
            checkpoint.step.fence, checkpoint.advance.run_id
        )


class CheckpointSkipsStep(MemoryDriver):
    """Counts the batch and records no step: the batch runs again on a replay."""

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        return await self._sweep_advance(checkpoint.advance) or self._holds_run(
            checkpoint.step.fence, checkpoint.advance.run_id
        )


class UnfencedCheckpoint(_SweepUnfenced):
    """Records a batch's step and counts it under a lost fence."""

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        return await self._unfenced(super()._sweep_checkpoint(checkpoint))


class CheckpointFencedLikeAStep(MemoryDriver):
    """Fences a checkpoint as `step_put` is fenced — any held claim of the row, whatever run the
    row is in now — so a row's new run records its old run's batches."""

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        with self._lock:
            row = self._held(checkpoint.step.fence)
            if row is not None and row.run_id != checkpoint.advance.run_id:
                steps = self._steps.setdefault(checkpoint.advance.run_id, {})
                step = checkpoint.step
                steps.setdefault(
                    step.name,
                    StepRecord(checkpoint.advance.run_id, step.name, step.output_json, step.now_ms),
                )
                return True
        return await super()._sweep_checkpoint(checkpoint)


class CheckpointReplacesStep(MemoryDriver):
    """A replayed checkpoint replaces the step's first record (a resumed run would read the
    second try's cursor)."""

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        with self._lock:
            if self._holds_run(checkpoint.step.fence, checkpoint.advance.run_id):
                self._steps.get(checkpoint.advance.run_id, {}).pop(checkpoint.step.name, None)
        return await super()._sweep_checkpoint(checkpoint)


class CheckpointCountsEveryLanding(MemoryDriver):
    """Counts the batch whenever the checkpoint lands, a replay included (the step's own
    `ON CONFLICT` taken for the batch's)."""

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        a = checkpoint.advance
        with self._lock:
            e = self._sweeps.get(a.run_id)
            replayed = e is not None and e.status == "running" and e.batches >= a.batch
            if e is not None and replayed and self._holds_run(a.fence, a.run_id):
                self._sweeps[a.run_id] = replace(
                    e, rows=e.rows + a.rows, errors=e.errors + a.errors
                )
        return await super()._sweep_checkpoint(checkpoint)


class SweepFenceIgnoresRun(MemoryDriver):
    """Lands a ledger write under any held fence, as `step_put`'s: a claim of another run (of
    another row, or of the same row after a fresh requeue) writes this run's entry."""

    def _holds_run(self, fence: Fence, run_id: str) -> bool:
        return self._held(fence) is not None


class SweepStartIgnoresRun(MemoryDriver):
    """Checks the run on a batch and an end, not on a start: any held fence opens (or resumes)
    an entry of any run."""

    _starting = False

    def _holds_run(self, fence: Fence, run_id: str) -> bool:
        if self._starting:
            return self._held(fence) is not None
        return super()._holds_run(fence, run_id)

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        self._starting = True
        try:
            return await super()._sweep_start(start)
        finally:
            self._starting = False


class SweepRunIsTheEntrysJob(MemoryDriver):
    """Takes an entry's job for its run: the job it was opened under writes it, even in a
    fresh run after a requeue; a twin row of the run (an unwind job) does not."""

    def _holds_run(self, fence: Fence, run_id: str) -> bool:
        held, e = self._held(fence), self._sweeps.get(run_id)
        if held is None or e is None:
            return super()._holds_run(fence, run_id)
        return e.job_id == fence.job_id


class SweepRunComparedByPrefix(MemoryDriver):
    """Compares the row's run id by its first bytes, as a Lua `string.sub` without the NUL after
    the id would: a row in run `run-a·2` writes run `run-a`'s entry."""

    def _holds_run(self, fence: Fence, run_id: str) -> bool:
        held = self._held(fence)
        return held is not None and held.run_id.startswith(run_id)


def _advanced(e: SweepRecord, a: SweepAdvance) -> SweepRecord:
    return replace(
        e,
        batches=a.batch,
        rows=e.rows + a.rows,
        errors=e.errors + a.errors,
        cursor_json=a.cursor_json,
        updated_at_ms=a.now_ms,
    )


class SweepAdvanceCountsReplay(MemoryDriver):
    """Records the last batch again when it is replayed: its rows count twice."""

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        with self._lock:
            e = self._sweeps.get(advance.run_id)
            if (
                e is not None
                and e.status == "running"
                and e.batches == advance.batch
                and self._held(advance.fence) is not None
            ):
                self._sweeps[e.run_id] = _advanced(e, advance)
                return True
        return await super()._sweep_advance(advance)


class SweepAdvanceTakesSkips(MemoryDriver):
    """Records any later batch (`batch > batches`), so a skipped batch moves the cursor past
    rows nobody swept."""

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        with self._lock:
            e = self._sweeps.get(advance.run_id)
            if (
                e is not None
                and e.status == "running"
                and advance.batch > e.batches + 1
                and self._held(advance.fence) is not None
            ):
                self._sweeps[e.run_id] = _advanced(e, advance)
                return True
        return await super()._sweep_advance(advance)


class SweepWindowCountsOneBatch(MemoryDriver):
    """Lands a window where it starts, but counts it as one batch (`batches + 1`, not
    `batches + span`): the ledger's batches fall behind, and the next window is refused."""

    def _advance(self, advance: SweepAdvance) -> bool:
        held = self._sweeps.get(advance.run_id)
        moved = super()._advance(advance)
        if moved and held is not None:
            e = self._sweeps[advance.run_id]
            self._sweeps[advance.run_id] = replace(e, batches=held.batches + 1)
        return moved


class SweepWindowStartUnchecked(MemoryDriver):
    """Checks an advance's last batch against the entry (`batches == batch - 1`), whatever its
    span, as a driver left at the one-batch rule would: a window of several never lands, and
    one overlapping the recorded batches does."""

    def _advance(self, advance: SweepAdvance) -> bool:
        return super()._advance(replace(advance, span=1))


class SweepWindowOverlapCounted(MemoryDriver):
    """Lands any window that reaches past the entry's batches (`batch - span <= batches <
    batch`): an overlapping window counts its recorded batches' rows again."""

    def _advance(self, advance: SweepAdvance) -> bool:
        held = self._sweeps.get(advance.run_id)
        if held is not None and advance.batch - advance.span <= held.batches < advance.batch:
            advance = replace(advance, span=advance.batch - held.batches)
        return super()._advance(advance)


class SweepAdvanceKeepsCursorOnNull(MemoryDriver):
    """A batch without a cursor (the last one) keeps the previous cursor (`COALESCE`)."""

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        with self._lock:
            e = self._sweeps.get(advance.run_id)
        if e is not None and advance.cursor_json is None:
            advance = replace(advance, cursor_json=e.cursor_json)
        return await super()._sweep_advance(advance)


class SweepFinishEndsAnyEntry(MemoryDriver):
    """Ends an entry whatever its status: a completed run can be marked failed, and ended
    again."""

    async def _sweep_finish(self, finish: SweepFinish) -> bool:
        with self._lock:
            e = self._sweeps.get(finish.run_id)
            if e is not None and e.status != "running" and self._held(finish.fence) is not None:
                self._sweeps[e.run_id] = replace(e, status="running")
        return await super()._sweep_finish(finish)


class SweepListTiesAscending(MemoryDriver):
    """Cuts the listing with ties of one start time by the smaller run id first."""

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        every = await super()._sweep_list(name, MAX_SWEEP_LIST)
        every.sort(key=lambda e: e.run_id)
        every.sort(key=lambda e: e.started_at_ms, reverse=True)
        return every[:limit]


# -- the posting family (issue 28): one bug each in the posting ledger -----------------------------


class PostingAppliedTwice(MemoryDriver):
    """A repeat of a posted key answers already applied, but moves the balances again (the
    balance update is not tied to the insert)."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        got = await super()._posting_put(put)
        if got.status == "already_applied":
            with self._lock:
                for line in put.lines:
                    sums = self._balances[(put.tenant_id, line.account, line.currency)]
                    sums[0 if line.amount > 0 else 1] += abs(line.amount)
        return got


class PostingConflictByAccountsOnly(MemoryDriver):
    """Tells a repeat from a conflict by the lines' accounts and currencies, not their amounts:
    other amounts under a posted key answer already applied."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        got = await super()._posting_put(put)
        if got.status == "conflict" and got.posting is not None:
            mine = [(x.account, x.currency) for x in put.lines]
            if mine == [(x.account, x.currency) for x in got.posting.lines]:
                return PostingPutAnswer("already_applied", got.posting)
        return got


class PostingConflictOverwrites(MemoryDriver):
    """A conflict answers conflict, but the other lines replace the stored ones (an upsert)."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        got = await super()._posting_put(put)
        if got.status == "conflict" and got.posting is not None:
            with self._lock:
                self._postings[(put.tenant_id, put.key)] = replace(got.posting, lines=put.lines)
        return got


def _post_anyway(driver: MemoryDriver, put: PostingPut) -> PostingPutAnswer:
    """What the memory driver does past its fence check, for a fence it would refuse."""
    with driver._lock:
        stored = driver._postings.get((put.tenant_id, put.key))
        if stored is not None:
            same = stored.lines == put.lines
            return PostingPutAnswer("already_applied" if same else "conflict", stored)
        record = PostingRecord(put.tenant_id, put.key, put.fence.job_id, put.lines, put.now_ms)
        driver._postings[(put.tenant_id, put.key)] = record
        for line in put.lines:
            sums = driver._balances.setdefault((put.tenant_id, line.account, line.currency), [0, 0])
            sums[0 if line.amount > 0 else 1] += abs(line.amount)
        return PostingPutAnswer("applied", record)


class UnfencedPostingPut(MemoryDriver):
    """Posts under whatever claim it is handed, for the row's own key: a run that lost its
    claim (reclaimed, acked, retried) still posts."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        got = await super()._posting_put(put)
        row = self._rows.get(put.fence.job_id)
        if got.status == "fence_lost" and row is not None and row.rec.idempotency_key == put.key:
            return _post_anyway(self, put)
        return got


class PostingFenceIgnoresKey(MemoryDriver):
    """The fence is checked, not the key: a run posts under another job's key."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        got = await super()._posting_put(put)
        if got.status == "fence_lost" and self._held(put.fence) is not None:
            return _post_anyway(self, put)
        return got


class PostingBalancesMovedOffTheFence(MemoryDriver):
    """A put whose fence does not hold answers fence_lost, yet its lines reach the balances."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        got = await super()._posting_put(put)
        if got.status == "fence_lost":
            with self._lock:
                for line in put.lines:
                    sums = self._balances.setdefault(
                        (put.tenant_id, line.account, line.currency), [0, 0]
                    )
                    sums[0 if line.amount > 0 else 1] += abs(line.amount)
        return got


class PostingKeyIgnoresTenant(MemoryDriver):
    """One posting per key across every ledger: a key posted in one tenant's ledger answers
    in every other's (the tenant left out of the unique key)."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        with self._lock:
            other = next(
                (p for (t, k), p in self._postings.items() if k == put.key and t != put.tenant_id),
                None,
            )
            r = self._held(put.fence)
        if other is not None and r is not None and r.idempotency_key == put.key:
            same = other.lines == put.lines
            return PostingPutAnswer("already_applied" if same else "conflict", other)
        return await super()._posting_put(put)


class BalancesIgnoreTenant(MemoryDriver):
    """Balances are read across every ledger: a tenant sees another tenant's sums."""

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        wanted = set(accounts)
        sums: dict[tuple[str, str], list[int]] = {}
        with self._lock:
            for (_t, account, currency), (d, c) in self._balances.items():
                if account in wanted:
                    into = sums.setdefault((account, currency), [0, 0])
                    into[0] += d
                    into[1] += c
        return [BalanceRow(a, cur, d, c) for (a, cur), (d, c) in sums.items()]


class PostingAmountsAsDoubles(MemoryDriver):
    """Adds amounts as floats (a Lua number, a JSON double): sums past 2**53 are rounded."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        with self._lock:
            before = {k: list(v) for k, v in self._balances.items()}
        got = await super()._posting_put(put)
        if got.status == "applied":
            with self._lock:
                for line in put.lines:
                    k = (put.tenant_id, line.account, line.currency)
                    d, c = before.get(k, [0, 0])
                    if line.amount > 0:
                        self._balances[k][0] = int(float(d) + float(line.amount))
                    else:
                        self._balances[k][1] = int(float(c) + float(-line.amount))
        return got


class BalancesMixCurrencies(MemoryDriver):
    """Sums an account's lines in every currency together, under its first currency."""

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        rows = await super()._posting_balances(tenant_id, accounts)
        out: dict[str, BalanceRow] = {}
        for r in sorted(rows, key=lambda r: (r.account, r.currency)):
            held = out.get(r.account)
            out[r.account] = (
                r
                if held is None
                else replace(held, debits=held.debits + r.debits, credits=held.credits + r.credits)
            )
        return list(out.values())


class PostingAnswersTheLatestJob(MemoryDriver):
    """A repeat answers the posting as if the job repeating it had posted it."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        got = await super()._posting_put(put)
        if got.status == "already_applied" and got.posting is not None:
            return replace(got, posting=replace(got.posting, job_id=put.fence.job_id))
        return got


# -- legal drivers: what the contract leaves free, the suite must leave free ----------------------


class TokensPerKey(MemoryDriver):
    """Numbers lease tokens per key (1, 2, 3 … for each key): the contract asks only that a
    key's tokens grow."""

    def __init__(self) -> None:
        super().__init__()
        self._per_key: dict[str, itertools.count[int]] = {}

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        out: list[Lease | None] = []
        for t in takes:
            self._tokens = self._per_key.setdefault(t.key, itertools.count(1))
            out += await super()._lease_take([t], now_ms)
        return out


class SweepCursorRespelled(MemoryDriver):
    """Stores a sweep's cursor as jsonb would give it back (keys sorted, no spaces, non-ASCII
    escaped): the same JSON value, spelled otherwise."""

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        if advance.cursor_json is not None:
            value = json.loads(advance.cursor_json)
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
            advance = replace(advance, cursor_json=text)
        return await super()._sweep_advance(advance)


# -- consumers --


class ConsumerPutMovesBack(MemoryDriver):
    """A put under a held fence lands whatever cursor it started from (no compare-and-set): a
    stale turn moves the cursor back."""

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        with self._lock:
            held = self._consumers.get((put.name, put.tenant_id or ""))
            stored = None if held is None else held.cursor_json
        return await super()._consumer_cursor_put(replace(put, expect_json=stored))


class UnfencedConsumerPut(MemoryDriver):
    """A put lands from the stored cursor whether or not its claim still holds (the fence is
    not read): a run that lost its claim moves the cursor."""

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        with self._lock:
            key = (put.name, put.tenant_id or "")
            held = self._consumers.get(key)
            if (None if held is None else held.cursor_json) != put.expect_json:
                return False
            self._consumers[key] = ConsumerCursor(
                put.name,
                put.tenant_id,
                put.source,
                put.cursor_json,
                1 if held is None else held.turns + 1,
                put.records if held is None else held.records + put.records,
                put.lag,
                put.fence.worker_id,
                put.fence.job_id,
                put.now_ms,
            )
            return True


class ConsumerKeyIgnoresTenant(MemoryDriver):
    """Entries are keyed by the consumer's name alone: one tenant's turn reads and moves
    another tenant's cursor."""

    async def _consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        got = await super()._consumer_cursor_get(name, "*")
        return None if got is None else replace(got, tenant_id=tenant_id)

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        landed = await super()._consumer_cursor_put(replace(put, tenant_id="*"))
        if landed:
            with self._lock:
                e = self._consumers[(put.name, "*")]
                self._consumers[(put.name, "*")] = replace(e, tenant_id=put.tenant_id)
        return landed


class ConsumerListByNamePrefix(MemoryDriver):
    """A listing of one name takes every name that begins with it (a range with no end)."""

    async def _consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        every = await super()._consumer_list(None, 10_000)
        return [e for e in every if name is None or e.name.startswith(name)][:limit]


class ConsumerCursorCut(MemoryDriver):
    """A cursor is stored cut at 255 characters (a varchar column)."""

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        return await super()._consumer_cursor_put(replace(put, cursor_json=put.cursor_json[:255]))


class ConsumerLagBeforeTurn(MemoryDriver):
    """The lag stored is what was left before the turn's records were handled (lag + records)."""

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        lag = None if put.lag is None else put.lag + put.records
        return await super()._consumer_cursor_put(replace(put, lag=lag))


class ConsumerLagKeptOnNone(MemoryDriver):
    """A turn that could not measure its lag leaves the last measured one in place."""

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        if put.lag is None:
            with self._lock:
                held = self._consumers.get((put.name, put.tenant_id or ""))
            if held is not None and held.lag is not None:
                put = replace(put, lag=held.lag)
        return await super()._consumer_cursor_put(put)


#: Each broken driver, the family walk that must catch it, and the fixed scenarios that must
#: catch it too.
# -- webhooks --


class _WebhookLedger(MemoryDriver):
    """The memory driver's attempt write, spelled with the seams a broken ledger bends: which
    endpoint an attempt names, whether its claim holds, whether it was recorded before, what
    is kept and how the streak moves."""

    def _wh_endpoint_key(self, put: WebhookAttemptPut) -> tuple[str, str] | None:
        key = (put.tenant_id or "", put.endpoint)
        return key if key in self._endpoints else None

    def _wh_holds(self, fence: Fence) -> bool:
        return self._held(fence) is not None

    def _wh_recorded_before(self, fence: Fence) -> bool:
        return (fence.job_id, fence.claims) in self._attempts

    def _wh_kept(self, put: WebhookAttemptPut) -> WebhookAttempt:
        f = put.fence
        return WebhookAttempt(
            put.tenant_id,
            put.endpoint,
            f.job_id,
            f.claims,
            put.event_id,
            put.outcome,
            put.status_code,
            put.latency_ms,
            put.excerpt,
            put.error,
            put.now_ms,
        )

    def _wh_moved(self, held: WebhookEndpoint, put: WebhookAttemptPut) -> WebhookEndpoint:
        if put.outcome == "delivered":
            return replace(held, failures=0, updated_at_ms=put.now_ms)
        failures = held.failures + 1
        ep = replace(held, failures=failures, updated_at_ms=put.now_ms)
        if held.enabled and failures >= put.disable_after:
            ep = replace(ep, enabled=False, disabled_at_ms=put.now_ms)
        return ep

    async def _webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        with self._lock:
            key = self._wh_endpoint_key(put)
            if key is None or not self._wh_holds(put.fence):
                return WebhookAttemptAnswer(False, None)
            held = self._endpoints[key]
            if self._wh_recorded_before(put.fence):
                return WebhookAttemptAnswer(True, held)
            self._attempts[(put.fence.job_id, put.fence.claims)] = self._wh_kept(put)
            ep = self._endpoints[key] = self._wh_moved(held, put)
            return WebhookAttemptAnswer(True, ep)


class WebhookStreakKeptOnDelivery(_WebhookLedger):
    """A delivery leaves the failure streak as it was (only the enable clears it)."""

    def _wh_moved(self, held: WebhookEndpoint, put: WebhookAttemptPut) -> WebhookEndpoint:
        if put.outcome == "delivered":
            return replace(held, updated_at_ms=put.now_ms)
        return super()._wh_moved(held, put)


class WebhookDisabledOneEarly(_WebhookLedger):
    """Disables at `disable_after - 1` failures in a row (the limit read as 'after N-1')."""

    def _wh_moved(self, held: WebhookEndpoint, put: WebhookAttemptPut) -> WebhookEndpoint:
        ep = super()._wh_moved(held, put)
        limit = max(1, put.disable_after - 1)
        if put.outcome == "failed" and held.enabled and ep.failures >= limit:
            ep = replace(ep, enabled=False, disabled_at_ms=put.now_ms)
        return ep


class WebhookDisabledOneLate(_WebhookLedger):
    """Disables past `disable_after` failures, not at it (a `>` for a `>=`)."""

    def _wh_moved(self, held: WebhookEndpoint, put: WebhookAttemptPut) -> WebhookEndpoint:
        ep = super()._wh_moved(held, put)
        if ep.failures == put.disable_after and held.enabled:
            ep = replace(ep, enabled=True, disabled_at_ms=None)
        return ep


class WebhookDeliveryEnables(_WebhookLedger):
    """A delivery to a disabled endpoint enables it again (no operator asked)."""

    def _wh_moved(self, held: WebhookEndpoint, put: WebhookAttemptPut) -> WebhookEndpoint:
        ep = super()._wh_moved(held, put)
        if put.outcome == "delivered":
            ep = replace(ep, enabled=True, disabled_at_ms=None)
        return ep


class UnfencedWebhookAttempt(_WebhookLedger):
    """Records an attempt (and moves the streak) under a lost claim."""

    def _wh_holds(self, fence: Fence) -> bool:
        return fence.job_id in self._rows


class WebhookAttemptTwice(_WebhookLedger):
    """A retried write of one claim's attempt moves the streak again (a double apply)."""

    def _wh_recorded_before(self, fence: Fence) -> bool:
        return False


class WebhookEndpointIgnoresTenant(_WebhookLedger):
    """An attempt names its endpoint by id alone: it moves whichever tenant's came first."""

    def _wh_endpoint_key(self, put: WebhookAttemptPut) -> tuple[str, str] | None:
        for key in self._endpoints:
            if key[1] == put.endpoint:
                return key
        return None


class WebhookExcerptCut(_WebhookLedger):
    """Keeps the first 255 characters of an excerpt (a varchar(255) column)."""

    def _wh_kept(self, put: WebhookAttemptPut) -> WebhookAttempt:
        return replace(super()._wh_kept(put), excerpt=put.excerpt[:255])


class WebhookEnableKeepsStreak(MemoryDriver):
    """The operator's enable opens the endpoint but keeps its streak: the next failure
    disables it again at once."""

    async def _webhook_endpoint_enable(
        self, enable: WebhookEndpointEnable
    ) -> WebhookEndpoint | None:
        key = (enable.tenant_id or "", enable.endpoint)
        with self._lock:
            held = self._endpoints.get(key)
            if held is None:
                return None
            ep = self._endpoints[key] = replace(
                held, enabled=True, disabled_at_ms=None, updated_at_ms=enable.now_ms
            )
            return ep


class WebhookPutResetsStreak(MemoryDriver):
    """Moving an endpoint's URL starts it over: enabled, no streak, created again."""

    async def _webhook_endpoint_put(self, put: WebhookEndpointPut) -> WebhookEndpoint:
        with self._lock:
            self._endpoints.pop((put.tenant_id or "", put.endpoint), None)
        return await super()._webhook_endpoint_put(put)


class _WebhookPurge(MemoryDriver):
    """The memory driver's attempt purge, spelled with the seams a broken purge bends: which
    attempts are old, in which order they go, how many, and what else a purge touches."""

    def _wh_old(self, a: WebhookAttempt, before_ms: int) -> bool:
        return a.at_ms < before_ms

    def _wh_order(self, a: WebhookAttempt) -> tuple[int, str, int]:
        return (a.at_ms, a.job_id, a.claims)

    def _wh_gone(self, gone: list[WebhookAttempt]) -> None:
        """What the purge does beside deleting `gone` (nothing)."""

    async def _webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        with self._lock:
            old = [a for a in self._attempts.values() if self._wh_old(a, before_ms)]
            gone = sorted(old, key=self._wh_order)[:limit]
            for a in gone:
                del self._attempts[(a.job_id, a.claims)]
            self._wh_gone(gone)
            return len(gone)


class WebhookPurgeTakesItsBound(_WebhookPurge):
    """Deletes an attempt made at `before_ms` too (a `<=` for a `<`)."""

    def _wh_old(self, a: WebhookAttempt, before_ms: int) -> bool:
        return a.at_ms <= before_ms


class WebhookPurgeIgnoresLimit(_WebhookPurge):
    """Deletes every old attempt, whatever the limit (answers the limit when it cut)."""

    async def _webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        return min(await super()._webhook_attempt_purge(before_ms, MAX_PURGE_LIMIT), limit)


class WebhookPurgeTiesByIdDescending(_WebhookPurge):
    """Attempts of one millisecond go greatest job id first (an index built descending)."""

    def _wh_order(self, a: WebhookAttempt) -> tuple[int, str, int]:
        return (a.at_ms, "".join(chr(0x10FFFF - ord(c)) for c in a.job_id), a.claims)


class WebhookPurgeClaimsNewestFirst(_WebhookPurge):
    """Of one job in one millisecond, the later claim's attempt goes first."""

    def _wh_order(self, a: WebhookAttempt) -> tuple[int, str, int]:
        return (a.at_ms, a.job_id, -a.claims)


class WebhookPurgeClearsStreak(_WebhookPurge):
    """Purging an endpoint's attempts clears its failure streak (the history 'starts over')."""

    def _wh_gone(self, gone: list[WebhookAttempt]) -> None:
        for a in gone:
            key = (a.tenant_id or "", a.endpoint)
            held = self._endpoints.get(key)
            if held is not None and held.failures:
                self._endpoints[key] = replace(held, failures=0)


class WebhookPurgeKeepsClaimMark(_WebhookLedger, _WebhookPurge):
    """Remembers each purged attempt's claim as recorded: a claim that still holds cannot
    record its attempt again (a tombstone kept beside the history)."""

    def _wh_gone(self, gone: list[WebhookAttempt]) -> None:
        self.__dict__.setdefault("_wh_tombs", set()).update((a.job_id, a.claims) for a in gone)

    def _wh_recorded_before(self, fence: Fence) -> bool:
        tombs = self.__dict__.get("_wh_tombs", set())
        return super()._wh_recorded_before(fence) or (fence.job_id, fence.claims) in tombs


BROKEN: list[tuple[type[MemoryDriver], str, list[str]]] = [
    (UnfencedAck, "jobs", ["lapsed_lease_reclaimed", "requeue_refusals"]),
    (ClaimIgnoresPauses, "jobs", ["pause_by_queue_and_name", "bury_final_attempt"]),
    (KeyIgnoresTenant, "jobs", ["idempotency_live_rows_only"]),
    (ClaimsLapsedFinalAttempt, "jobs", ["bury_final_attempt"]),
    (HeartbeatFromLeaseEnd, "jobs", ["heartbeat_from_now"]),
    (RequeueKeepsAttempt, "jobs", ["requeue_refusals"]),
    (DemandCountsFuture, "jobs", ["demand_with_paused_queue"]),
    (BatchBlindToItself, "jobs", ["idempotency_live_rows_only"]),
    (ReclaimIgnoresNamePause, "jobs", ["reclaim_edges"]),
    (ReclaimIgnoresQueuePause, "jobs", ["reclaim_edges"]),
    (ReclaimCountsFromAttempt, "jobs", ["reclaim_edges"]),
    (BuriesInLeaseOrder, "jobs", ["reclaim_edges"]),
    (
        ReclaimOnlyAfterLeaseEnd,
        "jobs",
        ["lapsed_lease_reclaimed", "heartbeat_from_now", "reclaim_edges"],
    ),
    (BuriesPastTheReclaimBound, "jobs", ["reclaim_bound"]),
    (ReclaimBoundExclusive, "jobs", ["reclaim_bound"]),
    (AckKeepsOldResult, "jobs", ["settles_overwrite_with_nothing"]),
    (NackKeepsOldError, "jobs", ["settles_overwrite_with_nothing"]),
    (StoresIntegersAsFloats, "jobs", ["json_types_exact"]),
    (StoresTrueAsOne, "jobs", ["json_types_exact"]),
    (RequeueTakesParked, "jobs", ["every_live_state"]),
    (RequeueDuplicateIgnoresTenant, "jobs", ["every_live_state"]),
    (KeysCutAt255Characters, "jobs", ["values_at_the_byte_limits"]),
    (HeartbeatIgnoresWorker, "jobs", ["heartbeat_from_now"]),
    (HeartbeatNeverShortens, "jobs", ["heartbeat_from_now"]),
    (WorkersVanishAtExpiry, "jobs", ["worker_registry_ttl"]),
    (SettlesRefusedOnceLapsed, "jobs", ["lapsed_lease_reclaimed"]),
    (ClaimsOnlyPastRunAt, "jobs", ["claim_order"]),
    (WorkerListedAtItsExpiry, "jobs", ["worker_registry_ttl"]),
    (WorkerPurgeTakesLive, "jobs", ["worker_purge_takes_the_expired_only"]),
    (WorkerPurgeIgnoresLimit, "jobs", ["worker_purge_takes_the_expired_only"]),
    (WorkerPurgeTiesByIdDescending, "jobs", ["worker_purge_takes_the_expired_only"]),
    (BuriesOneAttemptEarly, "jobs", ["bury_final_attempt"]),
    (PurgeIgnoresLimit, "retention", ["purge_retention"]),
    (PurgesEarly, "retention", ["purge_retention"]),
    (PurgesKeptForever, "retention", ["purge_retention"]),
    (PurgeOrdersById, "retention", ["purge_oldest_first_across_states"]),
    (PurgesLate, "retention", ["purge_retention"]),
    (PurgeLimitPerState, "retention", ["purge_oldest_first_across_states"]),
    (PurgeTiesByIdDescending, "retention", ["purge_retention"]),
    (ListIgnoresTenant, "operator", ["list_filters_and_scan_budget"]),
    (ListTiesByIdAscending, "operator", ["list_newest_first"]),
    (ListCursorInclusive, "operator", ["list_newest_first", "list_filters_and_scan_budget"]),
    (ListScanCountsMatchesOnly, "operator", ["list_filters_and_scan_budget"]),
    (ListCursorAtTheEnd, "operator", ["list_newest_first"]),
    (StatsMissParked, "operator", ["queue_stats"]),
    (OldestReadyIncludesFuture, "operator", ["queue_stats"]),
    (OldestReadyOnlyPastRunAt, "operator", ["queue_stats"]),
    (PromotesParked, "operator", ["promote"]),
    (PromotesADueRow, "operator", ["promote"]),
    (RemovesRunning, "operator", ["remove"]),
    (RemoveKeepsLiveKey, "operator", ["remove"]),
    (RequeueManyBlindToItself, "operator", ["bulk_requeue_and_cancel"]),
    (CountsMissedSettles, "counters", ["counters_move_with_settles"]),
    (CountsDropsAsDead, "counters", ["counters_move_with_settles"]),
    (CountsIgnoreQueue, "counters", ["counters_move_with_settles"]),
    (CountsBuriesNowhere, "counters", ["counters_move_with_settles"]),
    (CountsInThePreviousMinute, "counters", ["counters_move_with_settles"]),
    (FoldsEveryMinute, "counters", ["counters_fold"]),
    (FoldIgnoresLimit, "counters", ["counters_fold"]),
    (FoldsAtTheCutoff, "counters", ["counters_fold"]),
    (FoldsNewestFirst, "counters", ["counters_fold"]),
    (DropsAtTheCutoff, "counters", ["counters_fold"]),
    (CounterReadUntilInclusive, "counters", ["counters_move_with_settles"]),
    (CounterReadSinceExclusive, "counters", ["counters_fold"]),
    (UnfencedStepPut, "durable", ["steps_recorded_once_under_the_fence"]),
    (StepListMissesOne, "durable", ["steps_recorded_once_under_the_fence"]),
    (StepPutOverwrites, "durable", ["steps_recorded_once_under_the_fence"]),
    (RemoveKeepsSteps, "durable", ["steps_recorded_once_under_the_fence"]),
    (WakesWaitsThatBeganLater, "durable", ["a_wait_wakes_on_its_event_only"]),
    (MatchTakesTrueForOne, "durable", ["a_wait_wakes_on_its_event_only"]),
    (WaitOutlivesItsPark, "durable", ["a_wait_wakes_on_its_event_only"]),
    (ParkIgnoresStoredEvent, "durable", ["a_wait_wakes_on_its_event_only"]),
    (PublishWakesOneWaiter, "durable", ["a_wait_wakes_on_its_event_only"]),
    (RepublishWakes, "durable", ["a_wait_wakes_on_its_event_only"]),
    (ParkMeetsExpiredEvent, "durable", ["a_wait_wakes_on_its_event_only"]),
    (WaitShownAfterItsPark, "durable", ["a_parked_row_shows_its_wait"]),
    (WaitNotShown, "durable", ["a_parked_row_shows_its_wait"]),
    (WakeIgnoresUntil, "durable", ["a_wait_ends_at_its_until"]),
    (FindIgnoresUntil, "durable", ["a_wait_ends_at_its_until"]),
    (UntilInclusive, "durable", ["a_wait_ends_at_its_until"]),
    (
        WakeIgnoresTenant,
        "durable",
        ["events_keep_to_their_tenant", "a_parked_row_shows_its_wait"],
    ),
    (FindIgnoresTenant, "durable", ["events_keep_to_their_tenant"]),
    (EveryTenantIgnored, "durable", ["events_keep_to_their_tenant"]),
    (RequeueReplaysUnwound, "durable", ["requeue_of_an_unwound_saga"]),
    (FreshRequeueKeepsRun, "durable", ["requeue_of_an_unwound_saga"]),
    (FreshRequeueKeepsOldSteps, "durable", ["requeue_of_an_unwound_saga"]),
    (FreshRequeueDropsUnwoundSteps, "durable", ["requeue_of_an_unwound_saga"]),
    (EventFoundAtItsExpiry, "durable", ["events_found_expired_and_purged"]),
    (EventFindSinceExclusive, "durable", ["events_found_expired_and_purged"]),
    (EventPurgeSparesItsExpiry, "durable", ["events_found_expired_and_purged"]),
    (EventPurgeInIdOrder, "durable", ["events_found_expired_and_purged"]),
    (RenewsExpiredLease, "leases", ["lease_renew_never_revives"]),
    (TakesPastTheLimit, "leases", ["lease_limit_holds_and_frees", "lease_racing_takers"]),
    (CountsExpiredHolders, "leases", ["lease_limit_holds_and_frees"]),
    (ReleaseDropsStamps, "leases", ["lease_stamps_stay_until_abandoned"]),
    (TakeAgainCountsTwice, "leases", ["lease_holder_takes_again"]),
    (RenewsFromTheOldEnd, "leases", ["lease_renew_never_revives"]),
    (HoldsAtItsEnd, "leases", ["lease_renew_never_revives"]),
    (ReleaseAtItsEndLands, "leases", ["lease_renew_never_revives"]),
    (TakesOfOneCallIgnoreEachOther, "leases", ["lease_batch_in_order"]),
    (LeasePurgeTakesLive, "leases", ["lease_purge_takes_the_expired_only"]),
    (LeasePurgeSparesItsEnd, "leases", ["lease_purge_takes_the_expired_only"]),
    (LeasePurgeIgnoresLimit, "leases", ["lease_purge_takes_the_expired_only"]),
    (LeasePurgeLatestFirst, "leases", ["lease_purge_takes_the_expired_only"]),
    (TakeKeepsExpired, "leases", ["lease_purge_takes_the_expired_only"]),
    (UnfencedTaskFire, "tasks", ["task_fire_fenced_once", "task_leader_handover"]),
    (RefusedFireEnqueues, "tasks", ["task_refused_fire_writes_nothing"]),
    (ArmOverwritesWatermark, "tasks", ["task_arm_keeps_the_watermark"]),
    (FiredAtTheWatermark, "tasks", ["task_catch_up_fire"]),
    (DedupedFireDropsJob, "tasks", ["task_deduped_fire_moves_the_mark"]),
    (TaskPauseHoldsItsName, "tasks", ["task_pause_holds_no_job"]),
    (FireLandsAheadOfTheWatermark, "tasks", ["task_refused_fire_writes_nothing"]),
    (FiredJobIsTheRecord, "tasks", ["task_deduped_fire_moves_the_mark"]),
    (ReleasesAtPendingOne, "flows", ["flows_released_at_its_last_dependency"]),
    (CountsFailureAsCompleted, "flows", ["flows_each_finish_releases_its_waiter"]),
    (BuryMovesNoWaiter, "flows", ["flows_each_finish_releases_its_waiter"]),
    (CancelMovesNoWaiter, "flows", ["flows_each_finish_releases_its_waiter"]),
    (
        BuryMovesTheWaiterItsClaimTook,
        "flows",
        ["flows_a_claims_bury_releases_for_the_next_claim"],
    ),
    (
        ClaimTakesWhatItsBuryReleased,
        "flows",
        ["flows_a_claims_bury_releases_for_the_next_claim"],
    ),
    (RemoveMovesNoWaiter, "flows", ["flows_remove_of_a_live_dependency_releases"]),
    (MovesWaiterThatLeft, "flows", ["flows_a_waiter_that_left_parked_is_not_moved"]),
    (CountsRefinishedDepTwice, "flows", ["flows_a_dependency_counts_once"]),
    (JoinEnqueueIgnoresFinished, "flows", ["flows_join_enqueue_counts_its_dependencies"]),
    (JoinPendingKeepsCounted, "flows", ["flows_join_pending_answers_what_is_left"]),
    (MissingDependencyWritesRow, "flows", ["flows_join_enqueue_missing_dependency_writes_nothing"]),
    (ReleasedAtItsCreation, "flows", ["flows_released_at_its_last_dependency"]),
    (ClaimForgetsJoin, "flows", ["flows_park_on_a_join"]),
    (ReparkAddsToOldJoin, "flows", []),
    (AckCallMovesAWaiterOnce, "flows", []),
    (ParkCountsUnknownAsCompleted, "flows", ["flows_park_on_a_join"]),
    (ListIgnoresBatch, "flows", ["flows_parent_and_batch_links"]),
    (SweepBlockedByFailed, "sweeps", ["sweeps_a_completed_run_blocks_the_same_sweep"]),
    (SweepBlockIgnoresEnvironment, "sweeps", ["sweeps_a_completed_run_blocks_the_same_sweep"]),
    (SweepBlockIgnoresChecksum, "sweeps", ["sweeps_a_completed_run_blocks_the_same_sweep"]),
    (SweepBlockComparesKind, "sweeps", ["sweeps_a_completed_run_blocks_the_same_sweep"]),
    (SweepBlockerTiesBySmallerRunId, "sweeps", ["sweeps_the_blocker_is_the_last_finished"]),
    (SweepBlockerIsTheGreatestRunId, "sweeps", ["sweeps_the_blocker_is_the_last_finished"]),
    (SweepStartReopensCompleted, "sweeps", ["sweeps_a_completed_run_stays_completed"]),
    (SweepResumeKeepsItsEnd, "sweeps", ["sweeps_a_failed_run_resumes"]),
    (SweepResumeStartsOver, "sweeps", ["sweeps_a_failed_run_resumes"]),
    (SweepEntryTakesTheRunsJob, "sweeps", ["sweeps_a_new_entry"]),
    (UnfencedSweepStart, "sweeps", ["sweeps_writes_are_fenced_on_the_claim"]),
    (UnfencedSweepAdvance, "sweeps", ["sweeps_writes_are_fenced_on_the_claim"]),
    (SweepFenceIgnoresRun, "sweeps", ["sweeps_a_run_writes_only_its_own_entry"]),
    (SweepStartIgnoresRun, "sweeps", ["sweeps_a_run_writes_only_its_own_entry"]),
    (SweepRunIsTheEntrysJob, "sweeps", ["sweeps_a_run_writes_only_its_own_entry"]),
    (SweepRunComparedByPrefix, "sweeps", ["sweeps_a_run_writes_only_its_own_entry"]),
    (SweepAdvanceCountsReplay, "sweeps", ["sweeps_a_batch_is_recorded_once"]),
    (SweepAdvanceTakesSkips, "sweeps", ["sweeps_a_batch_is_recorded_once"]),
    (SweepAdvanceKeepsCursorOnNull, "sweeps", ["sweeps_a_batch_is_recorded_once"]),
    (SweepWindowCountsOneBatch, "sweeps", ["sweeps_a_window_is_recorded_once"]),
    (SweepWindowStartUnchecked, "sweeps", ["sweeps_a_window_is_recorded_once"]),
    (SweepWindowOverlapCounted, "sweeps", ["sweeps_a_window_is_recorded_once"]),
    (
        SweepFinishEndsAnyEntry,
        "sweeps",
        ["sweeps_a_completed_run_stays_completed", "sweeps_a_failed_run_resumes"],
    ),
    (SweepListTiesAscending, "sweeps", ["sweeps_listed_newest_first"]),
    (CheckpointSkipsAdvance, "sweeps", ["sweeps_a_checkpoint_records_and_counts_together"]),
    (CheckpointSkipsStep, "sweeps", ["sweeps_a_checkpoint_records_and_counts_together"]),
    (UnfencedCheckpoint, "sweeps", ["sweeps_a_checkpoint_records_and_counts_together"]),
    (CheckpointFencedLikeAStep, "sweeps", ["sweeps_a_checkpoint_records_and_counts_together"]),
    (CheckpointReplacesStep, "sweeps", ["sweeps_a_checkpoint_records_and_counts_together"]),
    (CheckpointCountsEveryLanding, "sweeps", ["sweeps_a_checkpoint_records_and_counts_together"]),
    (PostingAppliedTwice, "postings", ["postings_a_posting_lands_once"]),
    (PostingConflictByAccountsOnly, "postings", ["postings_a_posting_lands_once"]),
    (PostingConflictOverwrites, "postings", ["postings_a_posting_lands_once"]),
    (UnfencedPostingPut, "postings", ["postings_fenced_on_the_claim"]),
    (PostingFenceIgnoresKey, "postings", ["postings_a_run_posts_only_its_own_key"]),
    (PostingBalancesMovedOffTheFence, "postings", ["postings_fenced_on_the_claim"]),
    (PostingKeyIgnoresTenant, "postings", ["postings_ledgers_are_apart"]),
    (BalancesIgnoreTenant, "postings", ["postings_ledgers_are_apart"]),
    (PostingAmountsAsDoubles, "postings", ["postings_balances_are_exact"]),
    (BalancesMixCurrencies, "postings", ["postings_balances_are_exact"]),
    (PostingAnswersTheLatestJob, "postings", ["postings_a_second_job_of_a_key_finds_the_first"]),
    # -- consumers --
    (ConsumerPutMovesBack, "consumers", ["consumers_a_stale_turn_never_moves_the_cursor_back"]),
    (UnfencedConsumerPut, "consumers", ["consumers_puts_are_fenced_on_the_claim"]),
    (ConsumerKeyIgnoresTenant, "consumers", ["consumers_tenants_and_names_apart"]),
    (ConsumerListByNamePrefix, "consumers", ["consumers_tenants_and_names_apart"]),
    (ConsumerCursorCut, "consumers", ["consumers_turns_move_the_cursor"]),
    (ConsumerLagBeforeTurn, "consumers", ["consumers_turns_move_the_cursor"]),
    (ConsumerLagKeptOnNone, "consumers", ["consumers_turns_move_the_cursor"]),
    # -- webhooks --
    (WebhookStreakKeptOnDelivery, "webhooks", ["webhooks_a_delivery_clears_the_streak"]),
    (WebhookDisabledOneEarly, "webhooks", ["webhooks_a_streak_disables_at_its_limit"]),
    (WebhookDisabledOneLate, "webhooks", ["webhooks_a_streak_disables_at_its_limit"]),
    (WebhookDeliveryEnables, "webhooks", ["webhooks_a_streak_disables_at_its_limit"]),
    (UnfencedWebhookAttempt, "webhooks", ["webhooks_attempts_are_fenced_on_the_claim"]),
    (WebhookAttemptTwice, "webhooks", ["webhooks_one_attempt_per_claim"]),
    (WebhookEndpointIgnoresTenant, "webhooks", ["webhooks_tenants_stay_apart"]),
    (WebhookExcerptCut, "webhooks", ["webhooks_attempts_listed_newest_first"]),
    (WebhookEnableKeepsStreak, "webhooks", ["webhooks_a_streak_disables_at_its_limit"]),
    (WebhookPutResetsStreak, "webhooks", ["webhooks_endpoints_put_and_listed"]),
    (WebhookPurgeTakesItsBound, "webhooks", ["webhooks_attempts_purged_oldest_first"]),
    (WebhookPurgeIgnoresLimit, "webhooks", ["webhooks_attempts_purged_oldest_first"]),
    (WebhookPurgeTiesByIdDescending, "webhooks", ["webhooks_attempts_purged_oldest_first"]),
    (WebhookPurgeClaimsNewestFirst, "webhooks", ["webhooks_attempts_purged_oldest_first"]),
    (WebhookPurgeClearsStreak, "webhooks", ["webhooks_attempts_purged_oldest_first"]),
    (WebhookPurgeKeepsClaimMark, "webhooks", ["webhooks_attempts_purged_oldest_first"]),
]


# -- acts-for: the org a row acts for, stored at enqueue and filtered on ---------------------


class DropsActsFor(MemoryDriver):
    """Stores no org a row acts for: an enqueue path that forgot the field."""

    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        return await super()._job_enqueue(replace(job, acts_for=None))

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        return await super()._job_enqueue_many([replace(j, acts_for=None) for j in jobs])


class ListsActsForByTenant(MemoryDriver):
    """Filters a listing by the enqueuer's tenant where it asks for the org a row acts for."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        if f.acts_for is not None:
            f = replace(f, tenant_id=f.acts_for, acts_for=None)
        return await super()._job_list(f, after, limit, scan)


class FreshRunDropsActsFor(MemoryDriver):
    """A fresh requeue rewrites the row without its org (a new run, as if a new row)."""

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        answer = super()._requeue_locked(job_id, now_ms, fresh_run_id)
        if answer is RequeueAnswer.REQUEUED and fresh_run_id is not None:
            r = self._rows[job_id].rec
            self._put(r, replace(r, acts_for=None))
        return answer


class JoinsAndFiresDropActsFor(MemoryDriver):
    """A join's enqueue and a task's fire insert their rows without the org."""

    async def _join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        return await super()._join_enqueue(
            [replace(i, job=replace(i.job, acts_for=None)) for i in items]
        )

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        return await super()._task_fire(replace(fire, job=replace(fire.job, acts_for=None)))


#: Broken drivers only a scenario catches: no family walk draws the call they break (the
#: operator walk never requeues a row into a fresh run; no walk holds thousands of rows), so
#: none is asked to catch them.
SCENARIO_ONLY: list[tuple[type[MemoryDriver], list[str]]] = [
    (FreshRunDropsActsFor, ["acts_for_kept_by_every_write"]),
    (AckFailsPastFourThousand, ["settles_of_thousands_in_one_call"]),
]

# -- leases: the key's clock --
BROKEN += [
    (
        IgnoresTheKeyClock,
        "leases",
        ["lease_time_never_runs_back", "lease_purge_moves_and_drops_clocks"],
    ),
    (PurgeLeavesTheClock, "leases", ["lease_purge_moves_and_drops_clocks"]),
]
#: No walk idles a key for `LEASE_CLOCK_KEEP_MS` (an hour of its clock).
SCENARIO_ONLY += [(KeepsIdleClocks, ["lease_purge_moves_and_drops_clocks"])]

BROKEN += [
    (JoinsAndFiresDropActsFor, "flows", ["acts_for_kept_by_every_write"]),
    (DropsActsFor, "jobs", ["acts_for_stored_and_listed"]),
    (ListsActsForByTenant, "operator", ["acts_for_stored_and_listed"]),
]


class CheckpointInThreeCalls(MemoryDriver):
    """Checkpoints with the ABC's default: a read of the row, the advance, then the step, each
    its own call (what a third party's driver of both families gets without writing one)."""

    _sweep_checkpoint = JobDriver._sweep_checkpoint


#: Drivers the contract allows, though they do what the model does not, with the family walks
#: their freedom could trip: those walks and every scenario must pass them.
LEGAL: list[tuple[type[MemoryDriver], frozenset[str]]] = [
    (TokensPerKey, FAMILIES),
    (SweepCursorRespelled, frozenset({"sweeps"})),
    (CheckpointInThreeCalls, frozenset({"sweeps"})),
]

#: Each family walk's `ci` settings.
CI = {family: scaled(profile_settings("ci"), family) for family in FAMILIES}


def walk_of(factory: Callable[[], object], family: str) -> MachineMaker:
    """Makes `family`'s machine on `factory`'s drivers, as a driver's suite walks it."""
    return lambda: make_machine(factory, {family})  # type: ignore[arg-type]


def family_walk(factory: Callable[[], object], family: str) -> type[ParityMachine]:
    """Walk `family` on `factory`'s drivers as a driver's suite does under `ci`, from the first
    of `SEEDS`; answers the machine class (its `tally` is what the walks reached)."""
    machine = make_machine(factory, {family})  # type: ignore[arg-type]
    ci_walk(machine, CI[family], SEEDS[0])
    return machine


@pytest.mark.parametrize(
    ("broken", "family"), [(b, f) for b, f, _ in BROKEN], ids=[b.__name__ for b, _, _ in BROKEN]
)
def test_machine_catches(broken: type[MemoryDriver], family: str) -> None:
    """The family's walk, as a driver's suite runs it in `ci`, catches the driver."""
    caught = first_catch(walk_of(broken, family), CI[family])
    assert caught is not None, f"{broken.__name__} passed its {family} walk from each of {SEEDS}"


@pytest.mark.parametrize(
    ("broken", "scenario"),
    [(b, s) for b, _, names in BROKEN for s in names]
    + [(b, s) for b, names in SCENARIO_ONLY for s in names],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_scenario_catches(broken: type[MemoryDriver], scenario: str) -> None:
    with pytest.raises(AssertionError):
        run_scenario(broken, SCENARIOS[scenario])


@pytest.mark.parametrize(
    ("legal", "family"),
    [(d, f) for d, families in LEGAL for f in sorted(families)],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_what_the_contract_leaves_free_passes_its_walks(
    legal: type[MemoryDriver], family: str
) -> None:
    """Each walk of a family where `legal` does what the model does not passes it. One test
    per walk, not one per driver: a driver free in every family walks all twelve, and as one
    test that was the suite's longest (94 s on a loaded 2-core runner, 2026-12-06), which no
    other pytest process could take a share of."""
    family_walk(legal, family)


@pytest.mark.parametrize("legal", [d for d, _ in LEGAL], ids=lambda d: d.__name__)
def test_what_the_contract_leaves_free_passes_every_scenario(legal: type[MemoryDriver]) -> None:
    """Every scenario but `wake` passes `legal`."""
    for name, scenario in sorted(SCENARIOS.items()):
        if name != "wake":
            run_scenario(legal, scenario)


def test_every_broken_driver_is_listed_once() -> None:
    assert_each_listed_once(
        globals(),
        __name__,
        [b for b, _, _ in BROKEN] + [b for b, _ in SCENARIO_ONLY],
        {
            SilentWake,
            WakingMemory,
            _SomeFinishesMoveNoWaiter,
            _SweepBlocker,
            _SweepUnfenced,
            _WebhookLedger,
            _WebhookPurge,
            *(d for d, _ in LEGAL),
        },
    )


#: Per family walk: each edge its rules aim at, and the least number of times the `ci` walks
#: from `SEEDS` must reach it, added up. Each bound is a fifth of the least that ten other
#: triples of seeds reached when the family's rules last changed (how often a walk draws a rule
#: varies tenfold from seed to seed), so an unrelated edit leaves it true and a change that
#: starves an edge fails here. The bounds were set when `ci` walked 40 times a family share; at
#: its 30 (2026-12-07) the walks from `SEEDS` still reach every one (at 20, three fell short).
REACH: dict[str, dict[str, int]] = {
    "jobs": {
        "reclaim of a lapsed lease": 49,
        "reclaim at exactly lease_until_ms": 12,
        "reclaim into the last attempt": 23,
        "lapsed lease held back by a pause": 9,
        "bury at exactly lease_until_ms": 24,
        "several rows buried by one claim": 15,
        "several rows buried, lease order not id order": 3,
        "claim at exactly run_at_ms": 83,
        "clock at a row's run_at": 2,
        "settle of a lapsed lease nobody claimed since": 4,
        "heartbeat shortening a lease": 3,
        "heartbeat of the held count by another worker": 4,
        "forget of an expired registry row": 1,
        "registry read at a row's expiry": 2,
        "ack without a result over a stored result": 1,
        "nack without an error over a stored error": 1,
        "requeue of a parked row": 2,
        "requeue refused X_JOB_REQUEUE_DUPLICATE": 2,
        "requeue beside a twin of other tenant, a tenant set": 6,
        "demand beside a parked row": 1,
        "dedupe by key": 3,
        "insert of values at the byte limits": 36,
        "reclaim at exactly reclaim_until_ms": 2,
        "bury at exactly reclaim_until_ms": 2,
        "lapsed lease held back by reclaim_until_ms": 3,
        "registry purge at a row's exact expiry": 5,
        "registry purge cut by its limit": 6,
        "registry purge cut between rows ending in one millisecond": 5,
    },
    "operator": {
        "promote answered promoted": 1,
        "promote answered already_due": 2,
        "bulk naming a row due exactly now": 1,
        "remove answered running": 9,
        "enqueue of a removed row's twin": 4,
        "bulk naming two finished twins": 7,
        "requeue answered duplicate": 3,
        "list page with a cursor": 18,
        "list page empty, not the end": 6,
        "list with a foreign cursor": 3,
        "stats with a row due exactly now": 109,
    },
    "counters": {
        "settle at exactly a minute's start": 18,
        "several rows buried by one claim": 11,
        "counter read bounded at a bucket's start": 6,
        "counter buckets folded or dropped": 16,
        "fold at a minute bucket's cut-off": 2,
        "fold an hour after a minute bucket starting an hour": 1,
        "fold at an hour bucket's 30-day cut-off": 2,
    },
    "durable": {
        "step recorded": 50,
        "row compared while it waits": 117,
        "event published before its wait (at expiry)": 2,
        "event published before its wait (just live)": 3,
        "event published for two waiting runs": 5,
        "one event woke several runs": 3,
        "republish of a stored id a parked run's wait matches": 1,
        "find since exactly an event's publishing": 4,
        "event find at an event's exact expiry": 1,
        "event park at an event's exact expiry": 1,
        "event purge at an event's exact expiry": 1,
        "event purge cut where id order is not expiry order": 2,
        "requeue of an unwound saga": 5,
        "requeue refused X_JOB_REQUEUE_UNWOUND": 1,
        "fresh requeue": 7,
        "event stamped at a wait's until": 5,
        "event stamped a ms before a wait's until": 1,
    },
    "leases": {
        "lease refused: no room": 12,
        "lease taken again by its holder": 11,
        "lease renew: landed": 4,
        "lease renew at a holding's exact end": 1,
        "lease release at a holding's exact end": 1,
        "lease abandon at a holding's exact end": 1,
        "lease take at a holding's exact end": 1,
        "lease purge at a holding's exact end": 5,
        "lease purge cut by its limit": 3,
        "lease purge by a caller behind": 4,
        "lease purge of a rate stamp": 5,
        # -- the key's clock --
        "lease take from a caller behind": 6,
        "lease take from a caller ahead": 6,
        "lease take behind its key's clock": 12,
        "lease take behind its key's clock, past a holding's end": 1,
        "lease take behind the end a purge deleted": 7,
        "lease renew from a caller behind": 1,
        "lease release from a caller ahead": 2,
        "lease abandon from a caller behind": 2,
    },
    "tasks": {
        "task fire landed": 18,
        "task catch-up fire": 7,
        "task fire deduped by id": 4,
        "task fire deduped by key": 7,
        "task fire fenced off (stale)": 11,
        "task fire fenced off (rival)": 12,
        "task fire fenced off (ahead)": 4,
        "task fire fenced off (unarmed)": 6,
        "task armed again": 9,
        "claim of a job named like a paused task": 4,
    },
    "retention": {
        "purge at a row's exact retention end": 6,
        "purge cut by its limit": 18,
        "purge cut across final states": 16,
        "purge cut between rows finished in one millisecond": 9,
        "purge cut where id order is not finish order": 7,
        "several rows buried, lease order not id order": 2,
    },
    "flows": {
        "waiter released by ack": 15,
        "waiter released by fail": 8,
        "waiter released by refuse": 10,
        "waiter released by bury": 8,
        "claim whose bury releases a waiter of a queue it claims": 4,
        "claim of a due waiter whose dependency it buries": 1,
        "waiter released by cancel": 7,
        "waiter moved by remove": 12,
        "waiter moved by fail": 7,
        "waiter moved by cancel": 6,
        "one ack call finishing two dependencies of a waiter": 8,
        "dependency finished again after a requeue, its waiter waiting": 7,
        "waiter claimed at its run_at, a dependency pending": 8,
        "claim of a waiter at its run_at, its join pending": 11,
        "park on a join again: recounted": 5,
        "waiter cancelled, a dependency pending": 3,
        "claim of a waiter its join released": 63,
        "join_enqueue refused: a dependency missing": 5,
        "join_enqueue beside a finished dependency": 7,
        "join_enqueue ready": 1,
        "join_enqueue deduped": 4,
        "park on a join naming no row": 15,
        "park on a join, none pending": 5,
        "list by batch page with a cursor": 2,
        "list by parent page with a cursor": 3,
    },
    # -- consumers --
    "consumers": {
        "consumer cursor at the byte limit": 8,
        "consumer idle turn (same cursor)": 9,
        "consumer lag dropped to unknown": 2,
        "consumer put beside the same name for another tenant": 40,
        "consumer put from an older cursor (moved back refused)": 5,
        "consumer put from none while one is stored": 3,
        "consumer put from the stored cursor off the fence": 14,
        "consumer put landed": 53,
        "consumer put landed (first)": 20,
        "consumer put under a lapsed lease nobody claimed": 5,
    },
    "sweeps": {
        "sweep advance clearing the cursor": 1,
        "sweep checkpoint clearing the cursor": 1,
        "sweep checkpoint landed": 23,
        "sweep checkpoint of a completed entry": 2,
        "sweep checkpoint of a cursor at the byte limit": 3,
        "sweep checkpoint of a failed entry": 2,
        "sweep checkpoint of a recorded step, its first record kept": 7,
        "sweep checkpoint of a replayed batch": 4,
        "sweep checkpoint of a skipped batch": 1,
        "sweep checkpoint of a replayed window": 3,
        "sweep checkpoint of a window landed": 5,
        "sweep checkpoint of a window overlapping the recorded batches": 1,
        "sweep checkpoint of the next batch off the fence": 4,
        "sweep checkpoint off the fence": 4,
        "sweep checkpoint under a lapsed lease nobody claimed": 2,
        "sweep advance landed": 54,
        "sweep advance landed under another row of its run": 2,
        "sweep advance of a completed entry": 4,
        "sweep advance of a cursor at the byte limit": 7,
        "sweep advance of a failed entry": 3,
        "sweep advance of a replayed batch": 3,
        "sweep advance of a skipped batch": 1,
        "sweep advance of a replayed window": 1,
        "sweep advance of a window landed": 2,
        "sweep advance of a window overlapping the recorded batches": 1,
        "sweep advance of the next batch off the fence": 3,
        "sweep advance of the next batch under a held fence of another run": 6,
        "sweep advance under a lapsed lease nobody claimed": 2,
        "sweep entry opened by a twin row of its run": 4,
        "sweep finish landed failed": 10,
        "sweep finish of a completed entry": 2,
        "sweep finish of a failed entry": 3,
        "sweep finish off the fence": 2,
        "sweep finish under a held fence of another run": 5,
        "sweep finish under a lapsed lease nobody claimed": 2,
        "sweep list by name": 5,
        "sweep list cut through entries started in one millisecond": 8,
        "sweep start blocked by a completed run": 9,
        "sweep start blocked by the last finished, not the greatest run id": 1,
        "sweep start blocked though its kind differs": 1,
        "sweep start blocked: two runs completed in one millisecond": 2,
        "sweep start for another row's run": 3,
        "sweep start not blocked: a failed run of the same sweep": 3,
        "sweep start not blocked: a running run of the same sweep": 25,
        "sweep start not blocked: its checksum differs": 8,
        "sweep start not blocked: its environment differs": 4,
        "sweep start not blocked: its name differs": 4,
        "sweep start not blocked: its scope differs": 5,
        "sweep start of a row's fresh run after a requeue": 2,
        "sweep start of its own completed entry": 1,
        "sweep start of its own failed entry": 1,
        "sweep start of its own running entry": 2,
        "sweep start off the fence": 7,
        "sweep start under a held fence of another run": 11,
        "sweep writes of a row's old run after a fresh requeue": 2,
        "sweep writes of a run after a plain requeue": 1,
        "sweep writes of a run its row's fresh run id extends": 2,
        "sweep writes of a run under another row's held fence": 3,
        "sweep writes of a run under its twin row's fence": 1,
    },
    "postings": {
        "posting put applied": 28,
        "posting put already_applied": 17,
        "posting put conflict": 13,
        "posting put fence_lost": 10,
        "posting already applied by another job": 10,
        "posting already applied, lines in another order": 9,
        "posting applied beside the same key in another ledger": 12,
        "posting put under a held fence of a row with another key": 1,
        "posting put under a lapsed lease nobody claimed": 3,
    },
    # -- webhooks --
    "webhooks": {
        "webhook attempt beside another tenant's endpoint of the same id": 16,
        "webhook attempt of a claim recorded before": 5,
        "webhook attempt of no endpoint": 2,
        "webhook attempt off the fence": 8,
        "webhook attempt under a claim taken again": 2,
        "webhook attempt under a lapsed lease nobody claimed": 4,
        "webhook attempt with an excerpt at the byte limit": 8,
        "webhook delivery clearing a streak": 3,
        "webhook delivery on a disabled endpoint": 12,
        "webhook enable of a disabled endpoint": 9,
        "webhook endpoint disabled at its limit": 20,
        "webhook failure on a disabled endpoint": 30,
        "webhook failure one short of the limit": 12,
        "webhook attempt again after its record was purged": 1,
        "webhook purge cut between two claims of one row": 1,
        "webhook purge cut by its limit": 1,
        "webhook purge cut inside one millisecond": 1,
        "webhook purge sparing an attempt made at its bound": 1,
    },
}


@pytest.mark.parametrize("family", sorted(REACH))
def test_walk_reaches_its_edges(family: str) -> None:
    """The reference driver passes the family's walks, which reach each of its edges."""
    tally = reached(walk_of(MemoryDriver, family), CI[family])
    short = {k: tally[k] for k, least in REACH[family].items() if tally[k] < least}
    assert not short, f"reached too rarely: {short} (all: {dict(tally)})"


def test_a_core_only_walk_still_catches_a_core_bug() -> None:
    # Every optional family's rules are off for this driver: the job family's must still bite.
    assert first_catch(walk_of(CoreUnfencedAck, "jobs"), CI["jobs"]) is not None
    with pytest.raises(AssertionError):
        run_scenario(CoreUnfencedAck, SCENARIOS["lapsed_lease_reclaimed"])


def test_a_family_declared_but_not_implemented_is_caught() -> None:
    # The state compared after the first step reads the family: it fails there.
    with pytest.raises(CapabilityMissingError, match="declares the operator family but does not"):
        ci_walk(make_machine(DeclaresWhatItLacks, {"operator"}), CI["operator"], SEEDS[0])
    with pytest.raises(CapabilityMissingError, match="does not implement _queue_stats"):
        run_scenario(DeclaresWhatItLacks, SCENARIOS["queue_stats"])
    # Undeclared, the same scenario ends at its first call of the family, refused as it must be.
    run_scenario(CoreDriver, SCENARIOS["queue_stats"])


def test_wake_scenario_catches_a_silent_channel(monkeypatch: pytest.MonkeyPatch) -> None:
    import jobs_core.testing.scenarios.jobs as scenarios

    # An in-process channel delivers at once or never: no need for the servers' margin.
    monkeypatch.setattr(scenarios, "WAKE_WAIT_S", 0.5)
    with pytest.raises(AssertionError, match="no wake for queue 'q'"):
        run_scenario(SilentWake, SCENARIOS["wake"])


def test_wake_scenario_passes_a_delivering_channel() -> None:
    run_scenario(WakingMemory, SCENARIOS["wake"])
    woken: list[str] = []

    async def silent_by_declaration() -> None:
        # A driver without the capability must not hand out a channel (the scenario says so).
        class Undeclared(WakingMemory):
            def capabilities(self) -> Capabilities:
                return Capabilities()

        with pytest.raises(AssertionError, match="capabilities\\(\\) has no wake"):
            await SCENARIOS["wake"](Undeclared())
        assert woken == []

    import asyncio

    asyncio.run(silent_by_declaration())


def _shared(driver: MemoryDriver) -> Callable[[], object]:
    @asynccontextmanager
    async def factory() -> AsyncIterator[JobDriver]:
        yield driver  # never dropped: the next call hands the same rows out again

    return factory


def test_a_driver_left_full_is_named() -> None:
    """A factory that hands back the same store fails as such, never as Hypothesis's Flaky."""
    shared = MemoryDriver()
    with pytest.raises(DriverNotEmptyError, match="the driver was not empty: job rows"):
        family_walk(_shared(shared), "jobs")
    with pytest.raises(DriverNotEmptyError, match="the driver was not empty"):
        run_scenario(_shared(shared), SCENARIOS["claim_order"])  # type: ignore[arg-type]


def test_a_divergence_names_the_step_that_caused_it() -> None:
    """A wrong write seen only in the state is blamed on the rule that wrote it, not the check."""
    message = str(first_catch(walk_of(AckKeepsOldResult, "jobs"), CI["jobs"]))
    assert "the state after step" in message, message
    assert re.search(r"rule (ack|work|rerun)\(", message), message
    assert re.search(r"which called [a-z_, ]*job_ack\)", message), message
    message = str(first_catch(walk_of(DemandCountsFuture, "jobs"), CI["jobs"]))
    assert re.match(r"step \d+, rule \w+\(.*\): queue_demand: ", message), message


def test_a_json_type_change_is_a_difference() -> None:
    """`1` against `1.0` and `true` against `1` differ; spacing and key order do not."""
    from jobs_core.testing.compare import typed_json

    assert typed_json('{"a": 1, "b": [true]}') == typed_json('{ "b":[true],"a":1 }')
    assert typed_json("1") != typed_json("1.0")
    assert typed_json("true") != typed_json("1")
    assert typed_json("0") != typed_json("false")


def test_a_failing_ci_run_prints_a_seed_that_replays_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The `ci` profile does not shrink (a failing run costs about a passing one), reports one
    failure and keeps no example database; its seed, printed, reproduces the same failure."""
    from jobs_core.testing.profiles import profile_settings
    from jobs_core.testing.suite import run_machine

    ci = profile_settings("ci")
    assert Phase.shrink not in ci.phases and ci.report_multiple_bugs is False
    assert ci.database is None
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "ci")
    messages = []
    for _ in range(2):
        with pytest.raises(ParityError) as caught:
            run_machine(UnfencedAck, seed=20261202, families=frozenset({"jobs"}))
        messages.append(str(caught.value))
        assert "--hypothesis-seed=20261202" in "".join(caught.value.__notes__)
    assert messages[0] == messages[1]
    assert "seed 20261202" in capsys.readouterr().out


def test_two_families_defining_one_helper_are_refused() -> None:
    """The machine that walks every family would silently run one family's helper for both."""
    from jobs_core.testing.machine import ParityMachine, _every_rule, _one_owner_each

    _every_rule()  # today's families: each name has one owner

    class First(ParityMachine):
        FAMILY = "jobs"

        def _refused(self) -> None: ...

    class Second(ParityMachine):
        FAMILY = "jobs"

        def _refused(self) -> None: ...

    with pytest.raises(TypeError, match="First and Second both define '_refused'"):
        _one_owner_each((First, Second))
