"""A driver written the way a third party writes one from the README: the core job family alone.

It subclasses `JobDriver`, implements the nine core `_` methods from their docstrings over two
dicts, and declares nothing in `capabilities()` (each instance is a fresh, empty store).
Everything else (listing, pauses, the registry, counters, retention, steps, events, leases,
tasks) it leaves to the ABC, which refuses it with `X_DRIVER_CAPABILITY_MISSING`. The tests in
`tests/test_core_driver.py` hold it to the parity suite and run a worker on it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from jobs_core.attempts import (
    ABANDONED_ERROR,
    AttemptOutcome,
    attempt_error,
    ended,
    nack_attempt_outcome,
)
from jobs_core.driver import JobDriver
from jobs_core.records import (
    Ack,
    BuriedJob,
    ClaimedJob,
    ClaimParams,
    ClaimResult,
    EnqueueResult,
    Fence,
    Heartbeat,
    JobRecord,
    Nack,
    NackKind,
    NewJob,
    Progress,
)
from jobs_core.semantics import LEASE_LAPSED_ERROR, namespace_of
from jobs_core.states import LIVE_STATES, JobState

Namespace = tuple[str, str, str]


class CoreDriver(JobDriver):
    """Jobs in this process's memory; nothing but the core family."""

    def __init__(self) -> None:
        # `Jobs.enqueue_sync` calls from its own thread: one lock around every read and write.
        self._lock = threading.Lock()
        self._rows: dict[str, JobRecord] = {}
        #: The live row holding each idempotency namespace.
        self._live: dict[Namespace, str] = {}

    def describe(self) -> str:
        return "core-only"

    # -- writes ---------------------------------------------------------------------------------

    def _store(self, row: JobRecord) -> None:
        """Keep `row`, and the namespace index true to its state."""
        ns = namespace_of(row.name, row.tenant_id, row.idempotency_key)
        if row.state in LIVE_STATES:
            self._live[ns] = row.id
        elif self._live.get(ns) == row.id:
            del self._live[ns]
        self._rows[row.id] = row

    def _insert(self, job: NewJob) -> EnqueueResult:
        if job.id in self._rows:
            return EnqueueResult(job.id, deduped=True)
        holder = self._live.get(namespace_of(job.name, job.tenant_id, job.idempotency_key))
        if holder is not None:
            return EnqueueResult(holder, deduped=True)
        self._store(
            JobRecord(
                id=job.id,
                run_id=job.run_id,
                name=job.name,
                queue=job.queue,
                tenant_id=job.tenant_id,
                idempotency_key=job.idempotency_key,
                input_json=job.input_json,
                state=JobState.READY,
                priority=job.priority,
                attempt=0,
                max_attempts=job.max_attempts,
                claims=0,
                claimed_by=None,
                lease_until_ms=None,
                run_at_ms=job.run_at_ms,
                created_at_ms=job.created_at_ms,
                finished_at_ms=None,
                last_error=None,
                progress_json=None,
                result_json=None,
                enqueued_by=job.enqueued_by,
                traceparent=job.traceparent,
                acts_for=job.acts_for,
            )
        )
        return EnqueueResult(job.id, deduped=False)

    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        with self._lock:
            return self._insert(job)

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        with self._lock:
            return [self._insert(j) for j in jobs]

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        now = params.now_ms
        # A lease lapsed when it ended by now, and by the reclaim bound when one is given.
        bound = now if params.reclaim_until_ms is None else min(now, params.reclaim_until_ms)
        with self._lock:
            rows = [r for r in self._rows.values() if r.queue in params.queues]
            buried: list[BuriedJob] = []
            for r in sorted(rows, key=lambda r: r.id):
                lapsed = r.lease_until_ms is not None and r.lease_until_ms <= bound
                if r.state is JobState.RUNNING and lapsed and r.attempt >= r.max_attempts:
                    dropped = r.name in params.drop_exhausted
                    state = JobState.FAILED if dropped else JobState.DEAD
                    self._store(
                        replace(
                            r,
                            state=state,
                            finished_at_ms=now,
                            lease_until_ms=None,
                            last_error=LEASE_LAPSED_ERROR,
                            attempts=ended(r, now, AttemptOutcome.ABANDONED, ABANDONED_ERROR),
                        )
                    )
                    buried.append(BuriedJob(r.id, r.name, r.queue, state))
            due = [
                r for r in self._rows.values() if r.queue in params.queues and _due(r, now, bound)
            ]
            due.sort(key=lambda r: (r.priority, r.run_at_ms, r.id))
            claimed: list[ClaimedJob] = []
            for r in due[: params.limit]:
                held = replace(
                    r,
                    state=JobState.RUNNING,
                    attempt=r.attempt + 1,
                    claims=r.claims + 1,
                    claimed_by=params.worker_id,
                    lease_until_ms=now + params.lease_ms,
                    claimed_at_ms=now,
                    attempts=ended(r, now, AttemptOutcome.ABANDONED, ABANDONED_ERROR)
                    if r.state is JobState.RUNNING
                    else r.attempts,
                )
                self._store(held)
                claimed.append(_claimed(held, params.worker_id, now + params.lease_ms))
            return ClaimResult(tuple(claimed), tuple(buried))

    def _held(self, fence: Fence) -> JobRecord | None:
        """The row `fence` still holds, or None."""
        r = self._rows.get(fence.job_id)
        if (
            r is None
            or r.state is not JobState.RUNNING
            or r.claims != fence.claims
            or r.claimed_by != fence.worker_id
        ):
            return None
        return r

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        landed: list[bool] = []
        with self._lock:
            for a in acks:
                r = self._held(a.fence)
                if r is not None:
                    progress = r.progress_json if a.progress_json is None else a.progress_json
                    self._store(
                        replace(
                            r,
                            state=JobState.COMPLETED,
                            finished_at_ms=a.now_ms,
                            lease_until_ms=None,
                            result_json=a.result_json,
                            progress_json=progress,
                            attempts=ended(r, a.now_ms, AttemptOutcome.COMPLETED),
                        )
                    )
                landed.append(r is not None)
        return landed

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        landed: list[bool] = []
        with self._lock:
            for n in nacks:
                r = self._held(n.fence)
                if r is not None:
                    outcome = nack_attempt_outcome(n.kind, n.dead_letter)
                    history = ended(r, n.now_ms, outcome, attempt_error(n.error))
                    self._store(replace(_nacked(r, n), attempts=history))
                landed.append(r is not None)
        return landed

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        landed: list[bool] = []
        with self._lock:
            for b in beats:
                r = self._held(b.fence)
                if r is not None:
                    self._store(replace(r, lease_until_ms=b.now_ms + b.lease_ms))
                landed.append(r is not None)
        return landed

    async def _job_progress(self, items: Sequence[Progress]) -> list[bool]:
        landed: list[bool] = []
        with self._lock:
            for p in items:
                r = self._held(p.fence)
                if r is not None:
                    self._store(replace(r, progress_json=p.progress_json))
                landed.append(r is not None)
        return landed

    # -- reads ----------------------------------------------------------------------------------

    async def _job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        with self._lock:
            return {i: self._rows[i] for i in job_ids if i in self._rows}

    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        with self._lock:
            demand = dict.fromkeys(queues, 0)
            for r in self._rows.values():
                if r.queue in demand and r.state is JobState.READY and _due(r, now_ms, now_ms):
                    demand[r.queue] += 1
            return demand


def _due(r: JobRecord, now: int, bound: int) -> bool:
    """Whether a claim at `now` that reclaims leases ended by `bound` may take `r`."""
    if r.state in (JobState.READY, JobState.PARKED):
        return r.run_at_ms is not None and r.run_at_ms <= now
    lapsed = r.lease_until_ms is not None and r.lease_until_ms <= bound
    return r.state is JobState.RUNNING and lapsed and r.attempt < r.max_attempts


def _claimed(r: JobRecord, worker_id: str, lease_until_ms: int) -> ClaimedJob:
    return ClaimedJob(
        id=r.id,
        run_id=r.run_id,
        name=r.name,
        queue=r.queue,
        tenant_id=r.tenant_id,
        idempotency_key=r.idempotency_key,
        input_json=r.input_json,
        priority=r.priority,
        attempt=r.attempt,
        max_attempts=r.max_attempts,
        claims=r.claims,
        worker_id=worker_id,
        lease_until_ms=lease_until_ms,
        created_at_ms=r.created_at_ms,
        enqueued_by=r.enqueued_by,
        traceparent=r.traceparent,
    )


def _nacked(r: JobRecord, n: Nack) -> JobRecord:
    """`r` once nack `n` landed on it (as `JobDriver._job_nack` says, kind by kind)."""
    r = replace(
        r,
        lease_until_ms=None,
        progress_json=r.progress_json if n.progress_json is None else n.progress_json,
    )
    given_back = r.attempt - 1
    match n.kind:
        case NackKind.RETRY:
            return replace(r, state=JobState.READY, run_at_ms=n.run_at_ms, last_error=n.error)
        case NackKind.FAIL:
            state = JobState.DEAD if n.dead_letter else JobState.FAILED
            return replace(r, state=state, finished_at_ms=n.now_ms, last_error=n.error)
        case NackKind.PARK:
            return replace(r, state=JobState.PARKED, run_at_ms=n.run_at_ms, attempt=given_back)
        case NackKind.SHED | NackKind.INTERRUPT:
            at = n.now_ms if n.run_at_ms is None else n.run_at_ms
            return replace(r, state=JobState.READY, run_at_ms=at, attempt=given_back)
        case NackKind.REFUSE:
            return replace(
                r,
                state=JobState.FAILED,
                finished_at_ms=n.now_ms,
                attempt=given_back,
                last_error=n.error,
            )
