"""`MemoryDriver`: the whole `JobDriver` contract in one process, behind one lock.

Rows keep their JSON as text, exactly as a database would hand it back. Due rows are indexed per
queue by (priority, run_at, id), running rows by lease end, finished rows per state by
(finished_at, id) and every row by (created_at, id), so a claim, a purge or a listing page reads
what it takes rather than every row. The lock
(not the event loop) guards the state, so the sync enqueue facade may call in from another
thread.

Flows: per waiter the dependencies it still waits on, per dependency its waiters, so a finish
costs O(its waiters) and a row nobody waits for costs one dict lookup. Every finish goes through
`_put` (live to finished) or `_drop` (a live row removed), which apply the finish rule there.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from sortedcontainers import SortedList

from jobs_core.attempts import (
    ABANDONED_ERROR,
    AttemptOutcome,
    AttemptRecord,
    attempt_error,
    ended,
    nack_attempt_outcome,
)
from jobs_core.driver import Capabilities, JobDriver, WakeSubscription
from jobs_core.jsonform import loads
from jobs_core.records import (
    COUNTED_OUTCOMES,
    Ack,
    BalanceRow,
    BuriedJob,
    CancelAnswer,
    ClaimedJob,
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
    JobSummary,
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
    Progress,
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
    WebhookAttemptListParams,
    WebhookAttemptPut,
    WebhookEndpoint,
    WebhookEndpointEnable,
    WebhookEndpointPut,
    WorkerBeat,
    WorkerInfo,
)
from jobs_core.semantics import (
    HOUR_MS,
    LEASE_LAPSED_ERROR,
    MINUTE_MS,
    SAGA_STEP,
    UNWOUND_STATES,
    bury_outcome,
    drop_before,
    event_matches,
    event_reaches,
    fold_before,
    hour_of,
    lapsed_by,
    lease_clock_droppable,
    minute_of,
    nack_outcome,
    namespace_of,
)
from jobs_core.states import FINISHED_STATES, LIVE_STATES, JobState, Outcome

_DueKey = tuple[int, int, str]
_Fenced = TypeVar("_Fenced", Ack, Nack, Heartbeat, Progress)
#: A counter bucket: (name, queue, bucket_ms, width_ms).
_Bucket = tuple[str, str, int, int]
_OUTCOME_AT: dict[Outcome, int] = {o: i for i, o in enumerate(COUNTED_OUTCOMES)}
_log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Row:
    rec: JobRecord

    @property
    def due_key(self) -> _DueKey | None:
        r = self.rec
        if r.state in (JobState.READY, JobState.PARKED) and r.run_at_ms is not None:
            return (r.priority, r.run_at_ms, r.id)
        return None


class MemoryDriver(JobDriver):
    """Every job in this process's memory; lost with it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, _Row] = {}
        self._live_keys: dict[tuple[str, str, str], str] = {}
        self._due: dict[str, SortedList[_DueKey]] = {}
        self._leases: SortedList[tuple[int, str]] = SortedList()
        self._finished: dict[JobState, SortedList[tuple[int, str]]] = {
            s: SortedList() for s in FINISHED_STATES
        }
        self._created: SortedList[tuple[int, str]] = SortedList()
        self._pauses: set[Pause] = set()
        self._workers: dict[str, WorkerInfo] = {}
        self._counters: dict[_Bucket, list[int]] = {}
        #: run_id -> step name -> record.
        self._steps: dict[str, dict[str, StepRecord]] = {}
        self._events: dict[str, EventRecord] = {}
        #: Per event name, its events by (published_at, id); every event by (expires_at, id).
        self._events_by_name: dict[str, SortedList[tuple[int, str]]] = {}
        self._expiries: SortedList[tuple[int, str]] = SortedList()
        #: job id -> the wait of its parked row.
        self._waits: dict[str, EventWait] = {}
        #: lease key -> token -> holding (expired ones go when their key is next taken).
        self._holdings: dict[str, dict[int, Lease]] = {}
        #: lease key -> its clock, the latest time a call on it used (`_lease_time`).
        self._lease_clocks: dict[str, int] = {}
        self._tokens = itertools.count(1)
        self._marks: dict[str, TaskMark] = {}
        self._sweeps: dict[str, SweepRecord] = {}
        # -- postings --
        #: (tenant or None, key) -> its posting; (tenant or None, account, currency) -> [debits,
        #: credits], Python ints: exact at any size.
        self._postings: dict[tuple[str | None, str], PostingRecord] = {}
        self._balances: dict[tuple[str | None, str, str], list[int]] = {}
        #: (consumer name, tenant or "") -> its cursor entry.
        self._consumers: dict[tuple[str, str], ConsumerCursor] = {}
        #: webhooks: (tenant or '', endpoint) -> endpoint; (job id, claims) -> attempt.
        self._endpoints: dict[tuple[str, str], WebhookEndpoint] = {}
        self._attempts: dict[tuple[str, int], WebhookAttempt] = {}
        #: flows: parked waiter id -> the dependencies it still waits on; dependency id -> the
        #: parked waiters that still count it (both sides of one edge, dropped together).
        self._waiting: dict[str, set[str]] = {}
        self._waiters: dict[str, set[str]] = {}
        self._watched: set[str] = set()
        self._listeners: list[Callable[[str], None]] = []
        #: Watched ids finished under the lock, announced once it is released (`_announce`).
        self._finished_watched: list[str] = []

    def describe(self) -> str:
        return "memory"

    def capabilities(self) -> Capabilities:
        return Capabilities(
            operator=True,
            pauses=True,
            workers=True,
            counters=True,
            retention=True,
            steps=True,
            events=True,
            leases=True,
            tasks=True,
            flows=True,
            sweeps=True,
            postings=True,
            consumers=True,
            webhooks=True,
        )

    # -- the one place a row changes; it keeps every index true -------------------------------

    def _put(self, old: JobRecord | None, new: JobRecord) -> None:
        if old is not None:
            self._unindex(old)
        else:
            self._created.add((new.created_at_ms, new.id))
        self._rows[new.id] = _Row(new)
        self._index(new)
        if new.state is not JobState.PARKED:
            self._waits.pop(new.id, None)  # a wait lives only while its row is parked
            # A waiter that leaves `parked` by any path is not moved by its old join any more.
            self._unlink_waiter(new.id)
        if old is not None and old.state in LIVE_STATES and new.state in FINISHED_STATES:
            # Every finishing write stamps `finished_at_ms = now_ms`: the finish's own clock.
            assert new.finished_at_ms is not None
            self._finish_locked(new.id, new.state is JobState.COMPLETED, new.finished_at_ms)

    def _drop(self, job_id: str) -> None:
        r = self._rows.pop(job_id).rec
        self._unindex(r)
        self._created.discard((r.created_at_ms, r.id))
        self._waits.pop(job_id, None)
        self._steps.pop(r.run_id, None)
        self._unlink_waiter(job_id)
        if r.state in LIVE_STATES:
            # A live row removed is a finish that did not complete. `_job_remove` takes no
            # clock: a waiter it releases is due at once, at its own `created_at_ms`.
            self._finish_locked(job_id, False, None)
        self._waiters.pop(job_id, None)
        self._watched.discard(job_id)

    # -- flows: the finish rule, applied inside every finishing write ---------------------------

    def _unlink_waiter(self, waiter_id: str) -> None:
        for dep in self._waiting.pop(waiter_id, ()):
            waiters = self._waiters.get(dep)
            if waiters is not None:
                waiters.discard(waiter_id)
                if not waiters:
                    del self._waiters[dep]

    def _finish_locked(self, job_id: str, completed: bool, now_ms: int | None) -> None:
        """Move every waiter still counting `job_id`, which just finished (see "Flows" in
        `jobs_core.driver`): each (waiter, dependency) pair once, the edge dropped with it."""
        if job_id in self._watched:
            self._finished_watched.append(job_id)
        for waiter_id in self._waiters.pop(job_id, ()):
            deps = self._waiting[waiter_id]
            deps.discard(job_id)
            w = self._rows[waiter_id].rec
            assert w.join is not None and w.state is JobState.PARKED
            join = replace(
                w.join, pending=w.join.pending - 1, failed=w.join.failed + (not completed)
            )
            if join.pending > 0:
                self._put(w, replace(w, join=join))
            else:
                at = w.created_at_ms if now_ms is None else now_ms
                self._put(w, replace(w, join=join, state=JobState.READY, run_at_ms=at))

    def _join_locked(self, waiter_id: str, after: Sequence[str], policy: JoinPolicy) -> JoinState:
        """Count `after` as it stands now (an id naming no row: finished, not completed) and
        link the waiter to every dependency still live; the caller parks it while pending. The
        waiter holds no edge yet: a new row, or a running one (leaving `parked` unlinked it)."""
        pending = failed = 0
        live: list[str] = []
        for dep in after:
            row = self._rows.get(dep)
            if row is not None and row.rec.state in LIVE_STATES:
                live.append(dep)
            elif row is None or row.rec.state is not JobState.COMPLETED:
                failed += 1
        pending = len(live)
        if live:
            self._waiting[waiter_id] = set(live)
            for dep in live:
                self._waiters.setdefault(dep, set()).add(waiter_id)
        return JoinState(total=len(after), pending=pending, failed=failed, policy=policy)

    def _announce(self) -> None:
        """Hand the watched ids finished so far to every listener, outside the lock (a
        listener may call back into the driver); a listener that raises is dropped."""
        with self._lock:
            if not self._finished_watched:
                return
            ids, self._finished_watched = self._finished_watched, []
            listeners = list(self._listeners)
        for listener in listeners:
            for job_id in ids:
                try:
                    listener(job_id)
                except Exception:
                    _log.exception("a finish listener raised; it is dropped")
                    with self._lock:
                        if listener in self._listeners:
                            self._listeners.remove(listener)
                    break

    async def finish_subscribe(self, on_finish: Callable[[str], None]) -> WakeSubscription | None:
        with self._lock:
            self._listeners.append(on_finish)
        return _FinishSubscription(self, on_finish)

    def _unsubscribe(self, on_finish: Callable[[str], None]) -> None:
        with self._lock:
            if on_finish in self._listeners:
                self._listeners.remove(on_finish)

    async def _join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        out: list[JoinEnqueueAnswer] = []
        with self._lock:
            for item in items:
                missing = tuple(i for i in item.after if i not in self._rows)
                if missing:
                    out.append(JoinEnqueueAnswer(None, missing))
                    continue
                enqueued = self._enqueue_locked(item.job)
                if not enqueued.deduped:
                    r = self._rows[enqueued.id].rec
                    join = self._join_locked(r.id, item.after, item.policy)
                    if join.pending > 0:
                        self._put(r, replace(r, state=JobState.PARKED, run_at_ms=None, join=join))
                    else:
                        self._put(r, replace(r, join=join))
                out.append(JoinEnqueueAnswer(enqueued))
        return out

    async def _join_pending(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        with self._lock:
            out: dict[str, tuple[str, ...]] = {}
            for i in job_ids:
                deps = self._waiting.get(i)
                row = self._rows.get(i)
                if deps and row is not None and row.rec.state is JobState.PARKED:
                    out[i] = tuple(sorted(deps))
            return out

    async def _job_watch(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        with self._lock:
            for i in job_ids:
                if i in self._rows:
                    self._watched.add(i)
            return self._get_many_locked(job_ids)

    def _count(self, r: JobRecord, now_ms: int, outcome: Outcome) -> None:
        row = self._counters.setdefault((r.name, r.queue, minute_of(now_ms), MINUTE_MS), [0] * 9)
        row[_OUTCOME_AT[outcome]] += 1

    def _index(self, r: JobRecord) -> None:
        if r.state in LIVE_STATES:
            self._live_keys[namespace_of(r.name, r.tenant_id, r.idempotency_key)] = r.id
        key = _Row(r).due_key
        if key is not None:
            self._due.setdefault(r.queue, SortedList()).add(key)
        if r.state is JobState.RUNNING and r.lease_until_ms is not None:
            self._leases.add((r.lease_until_ms, r.id))
        if r.state in FINISHED_STATES and r.finished_at_ms is not None:
            self._finished[r.state].add((r.finished_at_ms, r.id))

    def _unindex(self, r: JobRecord) -> None:
        if r.state in LIVE_STATES:
            self._live_keys.pop(namespace_of(r.name, r.tenant_id, r.idempotency_key), None)
        key = _Row(r).due_key
        if key is not None:
            self._due[r.queue].discard(key)
        if r.state is JobState.RUNNING and r.lease_until_ms is not None:
            self._leases.discard((r.lease_until_ms, r.id))
        if r.state in FINISHED_STATES and r.finished_at_ms is not None:
            self._finished[r.state].discard((r.finished_at_ms, r.id))

    def _held(self, fence: Fence) -> JobRecord | None:
        row = self._rows.get(fence.job_id)
        if row is None:
            return None
        r = row.rec
        if (
            r.state is JobState.RUNNING
            and r.claims == fence.claims
            and r.claimed_by == fence.worker_id
        ):
            return r
        return None

    # -- jobs -----------------------------------------------------------------------------------

    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        with self._lock:
            return self._enqueue_locked(job)

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        with self._lock:
            return [self._enqueue_locked(j) for j in jobs]

    def _enqueue_locked(self, job: NewJob) -> EnqueueResult:
        if job.id in self._rows:
            return EnqueueResult(job.id, deduped=True)
        holder = self._live_keys.get(namespace_of(job.name, job.tenant_id, job.idempotency_key))
        if holder is not None:
            return EnqueueResult(holder, deduped=True)
        self._put(
            None,
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
                parent_id=job.parent_id,
                batch_id=job.batch_id,
                acts_for=job.acts_for,  # acts-for
            ),
        )
        return EnqueueResult(job.id, deduped=False)

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        now = params.now_ms
        queues = set(params.queues)
        with self._lock:
            if params.beat is not None:
                self._beat_locked(params.beat)
            burying: list[tuple[JobRecord, JobState]] = []
            candidates: list[_DueKey] = []
            bound = lapsed_by(params)
            lapsed = list(itertools.takewhile(lambda lease: lease[0] <= bound, self._leases))
            for _, job_id in lapsed:
                r = self._rows[job_id].rec
                if r.queue not in queues:
                    continue
                if r.attempt >= r.max_attempts:
                    state = JobState.FAILED if r.name in params.drop_exhausted else JobState.DEAD
                    burying.append((r, state))
                elif self._claimable(r) and r.run_at_ms is not None:
                    candidates.append((r.priority, r.run_at_ms, r.id))
            for q in queues:
                candidates.extend(self._due_in(q, now, params.limit))
            claimed: list[ClaimedJob] = []
            for _, _, job_id in heapq.nsmallest(params.limit, candidates):
                r = self._rows[job_id].rec
                new = replace(
                    r,
                    state=JobState.RUNNING,
                    attempt=r.attempt + 1,
                    claims=r.claims + 1,
                    claimed_by=params.worker_id,
                    lease_until_ms=now + params.lease_ms,
                    # -- attempts -- a reclaim ends the lapsed claim as abandoned.
                    claimed_at_ms=now,
                    attempts=_reclaimed(r, now),
                )
                self._put(r, new)
                claimed.append(
                    ClaimedJob(
                        id=new.id,
                        run_id=new.run_id,
                        name=new.name,
                        queue=new.queue,
                        tenant_id=new.tenant_id,
                        idempotency_key=new.idempotency_key,
                        input_json=new.input_json,
                        priority=new.priority,
                        attempt=new.attempt,
                        max_attempts=new.max_attempts,
                        claims=new.claims,
                        worker_id=params.worker_id,
                        lease_until_ms=now + params.lease_ms,
                        created_at_ms=new.created_at_ms,
                        enqueued_by=new.enqueued_by,
                        traceparent=new.traceparent,
                        join=new.join,
                    )
                )
            # Buried after the claim chose its rows: the waiters a bury releases are claimable
            # from the next claim on (the contract; a Postgres claim is one statement whose
            # finish trigger runs after it chose them).
            buried: list[BuriedJob] = []
            for r, state in burying:
                finished = replace(
                    r,
                    state=state,
                    lease_until_ms=None,
                    finished_at_ms=now,
                    last_error=LEASE_LAPSED_ERROR,
                    attempts=ended(r, now, AttemptOutcome.ABANDONED, ABANDONED_ERROR),
                )
                self._put(r, finished)
                buried.append(BuriedJob(r.id, r.name, r.queue, state))
                self._count(r, now, bury_outcome(state))
            buried.sort(key=lambda b: b.id)
            answer = ClaimResult(tuple(claimed), tuple(buried))
        self._announce()
        return answer

    def _claimable(self, r: JobRecord) -> bool:
        return (
            Pause("queue", r.queue) not in self._pauses
            and Pause("name", r.name) not in self._pauses
        )

    def _due_in(self, queue: str, now: int, limit: int) -> list[_DueKey]:
        """Up to `limit` due, unpaused keys of one queue, skipping a priority's future rows."""
        index = self._due.get(queue)
        if not index or Pause("queue", queue) in self._pauses:
            return []
        out: list[_DueKey] = []
        i = 0
        while i < len(index) and len(out) < limit:
            key = index[i]
            if key[1] > now:
                # Within one priority run_at ascends: the rest of this priority is not due.
                i = index.bisect_left((key[0] + 1,))  # type: ignore[arg-type]
                continue
            if Pause("name", self._rows[key[2]].rec.name) not in self._pauses:
                out.append(key)
            i += 1
        return out

    def _fenced(
        self,
        items: Sequence[_Fenced],
        change: Callable[[_Fenced, JobRecord], JobRecord],
        outcome: Callable[[_Fenced], Outcome] | None = None,
    ) -> list[bool]:
        """Apply `change` to each item's row while its fence holds, moving the `outcome`
        counter of each that landed; answer which landed."""
        out: list[bool] = []
        with self._lock:
            for item in items:
                r = self._held(item.fence)
                if r is not None:
                    self._put(r, change(item, r))
                    if outcome is not None:
                        self._count(r, item.now_ms, outcome(item))
                out.append(r is not None)
        return out

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        out = self._fenced(acks, _acked, lambda _: Outcome.COMPLETED)
        self._announce()
        return out

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        out = self._fenced(nacks, self._nacked, lambda n: nack_outcome(n.kind, n.dead_letter))
        self._announce()
        return out

    def _nacked(self, n: Nack, r: JobRecord) -> JobRecord:
        new = nacked(r, n)
        if n.join is not None:
            join = self._join_locked(r.id, n.join, JoinPolicy.ALWAYS)
            if join.pending == 0:
                return replace(new, state=JobState.READY, run_at_ms=n.now_ms, join=join)
            return replace(new, join=join)
        if n.wait is None:
            return new
        if self._find_locked(n.wait, n.now_ms) is not None:
            # The event came before the wait was stored: the run goes on at once.
            return replace(new, state=JobState.READY, run_at_ms=n.now_ms)
        self._waits[r.id] = n.wait
        return new

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        return self._fenced(beats, lambda b, r: replace(r, lease_until_ms=b.now_ms + b.lease_ms))

    async def _job_progress(self, items: Sequence[Progress]) -> list[bool]:
        return self._fenced(items, lambda p, r: replace(r, progress_json=p.progress_json))

    async def _job_cancel_many(self, job_ids: Sequence[str], now_ms: int) -> list[CancelAnswer]:
        with self._lock:
            answers = [self._cancel_locked(i, now_ms) for i in job_ids]
        self._announce()
        return answers

    def _cancel_locked(self, job_id: str, now_ms: int) -> CancelAnswer:
        row = self._rows.get(job_id)
        if row is None:
            return CancelAnswer.NOT_FOUND
        r = row.rec
        if r.state not in LIVE_STATES:
            return CancelAnswer.FINISHED
        self._put(
            r,
            replace(
                r,
                state=JobState.CANCELLED,
                lease_until_ms=None,
                finished_at_ms=now_ms,
                attempts=_cancelled_attempts(r, now_ms),
            ),
        )
        self._count(r, now_ms, Outcome.CANCELLED)
        return CancelAnswer.CANCELLED

    async def _job_requeue_many(self, params: RequeueParams) -> list[RequeueAnswer]:
        with self._lock:
            return [self._requeue_locked(i, params.now_ms, run) for i, run in params.items()]

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        row = self._rows.get(job_id)
        if row is None:
            return RequeueAnswer.NOT_FOUND
        r = row.rec
        if r.state in LIVE_STATES:
            return RequeueAnswer.LIVE
        unwound = r.state in UNWOUND_STATES and SAGA_STEP in self._steps.get(r.run_id, {})
        if unwound and fresh_run_id is None:
            return RequeueAnswer.UNWOUND
        if namespace_of(r.name, r.tenant_id, r.idempotency_key) in self._live_keys:
            return RequeueAnswer.DUPLICATE
        if fresh_run_id is not None and not unwound:
            # The run it leaves is nobody's now; an unwound one is its unwind job's.
            self._steps.pop(r.run_id, None)
        self._put(
            r,
            replace(
                r,
                run_id=r.run_id if fresh_run_id is None else fresh_run_id,
                state=JobState.READY,
                attempt=0,
                run_at_ms=now_ms,
                lease_until_ms=None,
                finished_at_ms=None,
            ),
        )
        return RequeueAnswer.REQUEUED

    async def _job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        out: list[PromoteAnswer] = []
        with self._lock:
            for job_id in job_ids:
                row = self._rows.get(job_id)
                if row is None:
                    out.append(PromoteAnswer.NOT_FOUND)
                    continue
                r = row.rec
                if r.state is not JobState.READY or r.run_at_ms is None:
                    out.append(PromoteAnswer.NOT_READY)
                elif r.run_at_ms <= now_ms:
                    out.append(PromoteAnswer.ALREADY_DUE)
                else:
                    self._put(r, replace(r, run_at_ms=now_ms))
                    out.append(PromoteAnswer.PROMOTED)
        return out

    async def _job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        out: list[RemoveAnswer] = []
        with self._lock:
            for job_id in job_ids:
                row = self._rows.get(job_id)
                if row is None:
                    out.append(RemoveAnswer.NOT_FOUND)
                elif row.rec.state is JobState.RUNNING:
                    out.append(RemoveAnswer.RUNNING)
                else:
                    self._drop(job_id)
                    out.append(RemoveAnswer.REMOVED)
        self._announce()
        return out

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        with self._lock:
            index = self._created
            # Newest first: walk the (created_at, id) index backwards from just below `after`.
            end = (
                len(index) if after is None else index.bisect_left((after.created_at_ms, after.id))
            )
            taken: list[JobSummary] = []
            i = end
            while i > 0 and end - i < scan and len(taken) < limit:
                i -= 1
                r = self._rows[index[i][1]].rec
                if f.matches(r):
                    taken.append(JobSummary.of(r))
            last = None if i == 0 else ListKey(*index[i])
            return JobSlice(tuple(taken), last)

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        with self._lock:
            counts: dict[str, dict[JobState, int]] = {}
            oldest: dict[str, int] = {}
            for row in self._rows.values():
                r = row.rec
                by_state = counts.setdefault(r.queue, dict.fromkeys(JobState, 0))
                by_state[r.state] += 1
                if r.state is JobState.READY and r.run_at_ms is not None and r.run_at_ms <= now_ms:
                    oldest[r.queue] = min(oldest.get(r.queue, r.run_at_ms), r.run_at_ms)
            return [
                QueueStats(q, tuple(by_state.items()), oldest.get(q))
                for q, by_state in counts.items()
            ]

    async def _job_purge(self, params: PurgeParams) -> int:
        with self._lock:
            eligible: list[tuple[int, str]] = []
            for state, index in self._finished.items():
                keep = params.keep_ms(state)
                if keep is None:
                    continue
                cutoff = params.now_ms - keep
                # Each state's index is in (finished_at, id) order: its first `limit` entries
                # at or before the cutoff are all it can contribute.
                for entry in index.islice(0, params.limit):
                    if entry[0] > cutoff:
                        break
                    eligible.append(entry)
            gone = heapq.nsmallest(params.limit, eligible)
            for _, job_id in gone:
                self._drop(job_id)
            return len(gone)

    async def _job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        with self._lock:
            return self._get_many_locked(job_ids)

    def _get_many_locked(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        out: dict[str, JobRecord] = {}
        for i in job_ids:
            row = self._rows.get(i)
            if row is not None:
                # The stored record never carries the wait: `_waits` is its one home.
                wait = self._waits.get(i)
                out[i] = row.rec if wait is None else replace(row.rec, wait=wait)
        return out

    # -- steps and events -----------------------------------------------------------------------

    async def _step_list(self, run_id: str) -> list[StepRecord]:
        with self._lock:
            return list(self._steps.get(run_id, {}).values())

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        out: list[bool] = []
        with self._lock:
            for p in puts:
                r = self._held(p.fence)
                if r is not None:
                    steps = self._steps.setdefault(r.run_id, {})
                    if p.name not in steps:
                        steps[p.name] = StepRecord(r.run_id, p.name, p.output_json, p.now_ms)
                out.append(r is not None)
        return out

    async def _event_publish(self, event: EventRecord) -> int:
        with self._lock:
            if event.id in self._events:
                return 0
            self._events[event.id] = event
            self._events_by_name.setdefault(event.name, SortedList()).add(
                (event.published_at_ms, event.id)
            )
            self._expiries.add((event.expires_at_ms, event.id))
            data = loads(event.data_json)
            woken = 0
            for job_id, wait in list(self._waits.items()):
                if (
                    wait.event == event.name
                    and event_reaches(event, wait)
                    and event_matches(_object(wait.match_json), data)
                ):
                    r = self._rows[job_id].rec
                    self._put(r, replace(r, state=JobState.READY, run_at_ms=event.published_at_ms))
                    woken += 1
            return woken

    async def _event_find(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        with self._lock:
            return self._find_locked(wait, now_ms)

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        index = self._events_by_name.get(wait.event)
        if not index:
            return None
        match = _object(wait.match_json)
        for published, event_id in index.irange(minimum=(wait.since_ms, "")):
            if wait.until_ms is not None and published >= wait.until_ms:
                return None
            e = self._events[event_id]
            if (
                e.expires_at_ms > now_ms
                and event_reaches(e, wait)
                and event_matches(match, loads(e.data_json))
            ):
                return e
        return None

    async def _event_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            gone = list(
                itertools.takewhile(lambda e: e[0] <= now_ms, self._expiries.islice(0, limit))
            )
            for expires, event_id in gone:
                e = self._events.pop(event_id)
                self._expiries.discard((expires, event_id))
                self._events_by_name[e.name].discard((e.published_at_ms, event_id))
            return len(gone)

    # -- counters -------------------------------------------------------------------------------

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        names = None if params.names is None else set(params.names)
        queues = None if params.queues is None else set(params.queues)
        with self._lock:
            return [
                CounterRow(name, queue, bucket, width, *values)
                for (name, queue, bucket, width), values in self._counters.items()
                if (names is None or name in names)
                and (queues is None or queue in queues)
                and params.since_ms <= bucket < params.until_ms
            ]

    async def _counter_fold(self, now_ms: int, limit: int) -> int:
        with self._lock:
            before = fold_before(now_ms)
            minutes = sorted(
                (bucket, name, queue)
                for (name, queue, bucket, width) in self._counters
                if width == MINUTE_MS and bucket < before
            )[:limit]
            for bucket, name, queue in minutes:
                values = self._counters.pop((name, queue, bucket, MINUTE_MS))
                hour = self._counters.setdefault((name, queue, hour_of(bucket), HOUR_MS), [0] * 9)
                for i, v in enumerate(values):
                    hour[i] += v
            left = limit - len(minutes)
            if left == 0:
                return len(minutes)
            cutoff = drop_before(now_ms)
            hours = sorted(
                (bucket, name, queue)
                for (name, queue, bucket, width) in self._counters
                if width == HOUR_MS and bucket < cutoff
            )[:left]
            for bucket, name, queue in hours:
                del self._counters[(name, queue, bucket, HOUR_MS)]
            return len(minutes) + len(hours)

    # -- pauses, queues, workers ------------------------------------------------------------------

    async def _pause_add(self, pause: Pause) -> bool:
        with self._lock:
            if pause in self._pauses:
                return False
            self._pauses.add(pause)
            return True

    async def _pause_remove(self, pause: Pause) -> bool:
        with self._lock:
            if pause not in self._pauses:
                return False
            self._pauses.discard(pause)
            return True

    async def _pause_list(self) -> list[Pause]:
        with self._lock:
            return list(self._pauses)

    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        with self._lock:
            out: dict[str, int] = {}
            for q in queues:
                if Pause("queue", q) in self._pauses:
                    out[q] = 0
                    continue
                index = self._due.get(q, ())
                out[q] = sum(
                    1
                    for _, run_at, job_id in index
                    if run_at <= now_ms and self._rows[job_id].rec.state is JobState.READY
                )
            return out

    async def _worker_beat(self, beat: WorkerBeat) -> None:
        with self._lock:
            self._beat_locked(beat)

    def _beat_locked(self, beat: WorkerBeat) -> None:
        self._workers[beat.worker_id] = WorkerInfo(
            beat.worker_id, beat.info_json, beat.now_ms, beat.now_ms + beat.ttl_ms
        )

    def _lease_time(self, key: str, now_ms: int) -> int:
        """The time of a call at `now_ms` on `key`: the later of `now_ms` and the key's clock,
        which moves there. Called once per key and call, under the lock."""
        at = self._lease_clocks[key] = max(now_ms, self._lease_clocks.get(key, now_ms))
        return at

    def _lease_times(self, keys: Iterable[str], now_ms: int) -> dict[str, int]:
        return {key: self._lease_time(key, now_ms) for key in dict.fromkeys(keys)}

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        with self._lock:
            at = self._lease_times((t.key for t in takes), now_ms)
            for key, when in at.items():
                held = self._holdings.get(key, {})
                for token in [k for k, h in held.items() if h.expires_at_ms <= when]:
                    del held[token]
            out: list[Lease | None] = []
            for t in takes:
                held = self._holdings.setdefault(t.key, {})
                mine = next((k for k, h in held.items() if h.holder == t.holder), None)
                if mine is None and len(held) >= t.limit:
                    out.append(None)
                    continue
                if mine is not None:
                    del held[mine]
                ends = at[t.key] + t.ttl_ms
                lease = Lease(t.key, t.holder, next(self._tokens), ends, t.stamp)
                held[lease.token] = lease
                out.append(lease)
            for key in at:
                if not self._holdings.get(key, True):
                    del self._holdings[key]
            return out

    def _live_holding(self, key: str, token: int, now_ms: int) -> Lease | None:
        h = self._holdings.get(key, {}).get(token)
        return h if h is not None and h.expires_at_ms > now_ms else None

    async def _lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        with self._lock:
            at = self._lease_times((r.key for r in renews), now_ms)
            out = []
            for r in renews:
                h = self._live_holding(r.key, r.token, at[r.key])
                if h is not None:
                    ends = at[r.key] + r.ttl_ms
                    self._holdings[r.key][r.token] = replace(h, expires_at_ms=ends)
                out.append(h is not None)
            return out

    async def _lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return self._end_holdings(refs, now_ms, keep_stamps=True)

    async def _lease_abandon(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return self._end_holdings(refs, now_ms, keep_stamps=False)

    def _end_holdings(
        self, refs: Sequence[LeaseRef], now_ms: int, *, keep_stamps: bool
    ) -> list[bool]:
        with self._lock:
            at = self._lease_times((r.key for r in refs), now_ms)
            out = []
            for r in refs:
                h = self._live_holding(r.key, r.token, at[r.key])
                if not (keep_stamps and h is not None and h.stamp):
                    held = self._holdings.get(r.key, {})
                    held.pop(r.token, None)
                    if not held:
                        self._holdings.pop(r.key, None)
                out.append(h is not None)
            return out

    async def _lease_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            old = sorted(
                (clock, key)
                for key, clock in self._lease_clocks.items()
                if lease_clock_droppable(clock, now_ms)
            )[:limit]
            for _, key in old:
                if key not in self._holdings:
                    del self._lease_clocks[key]
            gone = sorted(
                (h.expires_at_ms, h.key, h.token)
                for held in self._holdings.values()
                for h in held.values()
                if h.expires_at_ms <= now_ms
            )[:limit]
            for ends, key, token in gone:
                held = self._holdings[key]
                del held[token]
                if not held:
                    del self._holdings[key]
                self._lease_clocks[key] = max(ends, self._lease_clocks.get(key, ends))
            return len(gone)

    async def _lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        with self._lock:
            at = max(now_ms, self._lease_clocks.get(key, now_ms))
            return [h for h in self._holdings.get(key, {}).values() if h.expires_at_ms > at]

    async def _task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        with self._lock:
            return [self._marks.setdefault(n, TaskMark(n, watermark_ms=now_ms)) for n in names]

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        with self._lock:
            mark = self._marks.get(fire.name)
            if mark is None or mark.watermark_ms != fire.expect_ms:
                return TaskFireAnswer(None, mark)
            enqueued = self._enqueue_locked(fire.job)
            mark = self._marks[fire.name] = TaskMark(
                fire.name,
                watermark_ms=fire.watermark_ms,
                fired_ms=fire.occurrence_ms,
                fired_job_id=enqueued.id,
                fired_at_ms=fire.now_ms,
            )
            return TaskFireAnswer(enqueued, mark)

    async def _task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        with self._lock:
            return {n: self._marks[n] for n in names if n in self._marks}

    async def _worker_forget(self, worker_id: str) -> bool:
        with self._lock:
            return self._workers.pop(worker_id, None) is not None

    async def _worker_list(self, now_ms: int) -> list[WorkerInfo]:
        with self._lock:
            return [w for w in self._workers.values() if w.expires_at_ms > now_ms]

    async def _worker_purge(self, now_ms: int, limit: int) -> int:
        with self._lock:
            gone = sorted(
                (w.expires_at_ms, w.worker_id)
                for w in self._workers.values()
                if w.expires_at_ms <= now_ms
            )[:limit]
            for _, worker_id in gone:
                del self._workers[worker_id]
            return len(gone)

    # -- sweeps ---------------------------------------------------------------------------------

    def _holds_run(self, fence: Fence, run_id: str) -> bool:
        """A ledger write's fence: held, and its row is in run `run_id` now (a run writes only
        its own entry)."""
        r = self._held(fence)
        return r is not None and r.run_id == run_id

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        with self._lock:
            if not self._holds_run(start.fence, start.run_id):
                return SweepStartAnswer(None)
            done = [
                e
                for e in self._sweeps.values()
                if e.run_id != start.run_id
                and e.status == "completed"
                and (e.name, e.scope, e.environment, e.checksum)
                == (start.name, start.scope, start.environment, start.checksum)
            ]
            if done:
                return SweepStartAnswer(
                    None, blocked_by=max(done, key=lambda e: (e.finished_at_ms or 0, e.run_id))
                )
            held = self._sweeps.get(start.run_id)
            if held is not None:
                if held.status != "completed":
                    held = self._sweeps[start.run_id] = replace(
                        held,
                        status="running",
                        error=None,
                        finished_at_ms=None,
                        updated_at_ms=start.now_ms,
                    )
                return SweepStartAnswer(held)
            entry = self._sweeps[start.run_id] = SweepRecord(
                run_id=start.run_id,
                job_id=start.fence.job_id,
                name=start.name,
                scope=start.scope,
                environment=start.environment,
                kind=start.kind,
                checksum=start.checksum,
                status="running",
                batches=0,
                rows=0,
                errors=0,
                expected=start.expected,
                cursor_json=None,
                error=None,
                started_at_ms=start.now_ms,
                updated_at_ms=start.now_ms,
                finished_at_ms=None,
            )
            return SweepStartAnswer(entry)

    async def _sweep_advance(self, advance: SweepAdvance) -> bool:
        with self._lock:
            return self._holds_run(advance.fence, advance.run_id) and self._advance(advance)

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        step, advance = checkpoint.step, checkpoint.advance
        with self._lock:
            if not self._holds_run(step.fence, advance.run_id):
                return False
            steps = self._steps.setdefault(advance.run_id, {})
            if step.name not in steps:
                steps[step.name] = StepRecord(
                    advance.run_id, step.name, step.output_json, step.now_ms
                )
            self._advance(advance)
            return True

    def _advance(self, advance: SweepAdvance) -> bool:
        """Move the run's running entry by the advance's batches when they start where it
        stopped; the caller holds the lock and has checked the fence."""
        held = self._sweeps.get(advance.run_id)
        if held is None or held.status != "running" or held.batches != advance.batch - advance.span:
            return False
        self._sweeps[advance.run_id] = replace(
            held,
            batches=advance.batch,
            rows=held.rows + advance.rows,
            errors=held.errors + advance.errors,
            cursor_json=advance.cursor_json,
            updated_at_ms=advance.now_ms,
        )
        return True

    async def _sweep_finish(self, finish: SweepFinish) -> bool:
        with self._lock:
            held = self._sweeps.get(finish.run_id)
            if (
                not self._holds_run(finish.fence, finish.run_id)
                or held is None
                or held.status != "running"
            ):
                return False
            self._sweeps[finish.run_id] = replace(
                held,
                status=finish.status,
                error=finish.error,
                finished_at_ms=finish.now_ms,
                updated_at_ms=finish.now_ms,
            )
            return True

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        with self._lock:
            entries = [e for e in self._sweeps.values() if name is None or e.name == name]
        entries.sort(key=lambda e: (e.started_at_ms, e.run_id), reverse=True)
        return entries[:limit]

    # -- postings -------------------------------------------------------------------------------

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        with self._lock:
            r = self._held(put.fence)
            if r is None or r.idempotency_key != put.key:
                return PostingPutAnswer("fence_lost", None)
            stored = self._postings.get((put.tenant_id, put.key))
            if stored is not None:
                same = stored.lines == put.lines
                return PostingPutAnswer("already_applied" if same else "conflict", stored)
            record = PostingRecord(put.tenant_id, put.key, put.fence.job_id, put.lines, put.now_ms)
            self._postings[(put.tenant_id, put.key)] = record
            for line in put.lines:
                sums = self._balances.setdefault(
                    (put.tenant_id, line.account, line.currency), [0, 0]
                )
                if line.amount > 0:
                    sums[0] += line.amount
                else:
                    sums[1] -= line.amount
            return PostingPutAnswer("applied", record)

    async def _posting_get(self, tenant_id: str | None, key: str) -> PostingRecord | None:
        with self._lock:
            return self._postings.get((tenant_id, key))

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        wanted = set(accounts)
        with self._lock:
            return [
                BalanceRow(account, currency, sums[0], sums[1])
                for (tenant, account, currency), sums in self._balances.items()
                if tenant == tenant_id and account in wanted
            ]

    # -- consumers ------------------------------------------------------------------------------

    async def _consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        with self._lock:
            return self._consumers.get((name, tenant_id or ""))

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        key = (put.name, put.tenant_id or "")
        with self._lock:
            held = self._consumers.get(key)
            stored = None if held is None else held.cursor_json
            if self._held(put.fence) is None or stored != put.expect_json:
                return False
            self._consumers[key] = ConsumerCursor(
                name=put.name,
                tenant_id=put.tenant_id,
                source=put.source,
                cursor_json=put.cursor_json,
                turns=1 if held is None else held.turns + 1,
                records=put.records if held is None else held.records + put.records,
                lag=put.lag,
                holder=put.fence.worker_id,
                job_id=put.fence.job_id,
                updated_at_ms=put.now_ms,
            )
            return True

    async def _consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        with self._lock:
            entries = [e for e in self._consumers.values() if name is None or e.name == name]
        entries.sort(key=lambda e: (e.name, e.tenant_id or ""))
        return entries[:limit]

    # -- webhooks -------------------------------------------------------------------------------

    async def _webhook_endpoint_put(self, put: WebhookEndpointPut) -> WebhookEndpoint:
        key = (put.tenant_id or "", put.endpoint)
        with self._lock:
            held = self._endpoints.get(key)
            if held is None:
                ep = WebhookEndpoint(
                    tenant_id=put.tenant_id,
                    endpoint=put.endpoint,
                    url=put.url,
                    enabled=True,
                    failures=0,
                    disabled_at_ms=None,
                    created_at_ms=put.now_ms,
                    updated_at_ms=put.now_ms,
                )
            else:
                ep = replace(held, url=put.url, updated_at_ms=put.now_ms)
            self._endpoints[key] = ep
            return ep

    async def _webhook_endpoint_get(
        self, tenant_id: str | None, endpoint: str
    ) -> WebhookEndpoint | None:
        with self._lock:
            return self._endpoints.get((tenant_id or "", endpoint))

    async def _webhook_endpoint_list(self, limit: int) -> list[WebhookEndpoint]:
        with self._lock:
            return [self._endpoints[k] for k in sorted(self._endpoints)[:limit]]

    async def _webhook_endpoint_enable(
        self, enable: WebhookEndpointEnable
    ) -> WebhookEndpoint | None:
        key = (enable.tenant_id or "", enable.endpoint)
        with self._lock:
            held = self._endpoints.get(key)
            if held is None:
                return None
            ep = self._endpoints[key] = replace(
                held, enabled=True, failures=0, disabled_at_ms=None, updated_at_ms=enable.now_ms
            )
            return ep

    async def _webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        key = (put.tenant_id or "", put.endpoint)
        f = put.fence
        with self._lock:
            held = self._endpoints.get(key)
            if held is None or self._held(f) is None:
                return WebhookAttemptAnswer(False, None)
            if (f.job_id, f.claims) in self._attempts:
                return WebhookAttemptAnswer(True, held)
            self._attempts[(f.job_id, f.claims)] = WebhookAttempt(
                tenant_id=put.tenant_id,
                endpoint=put.endpoint,
                job_id=f.job_id,
                claims=f.claims,
                event_id=put.event_id,
                outcome=put.outcome,
                status_code=put.status_code,
                latency_ms=put.latency_ms,
                excerpt=put.excerpt,
                error=put.error,
                at_ms=put.now_ms,
            )
            if put.outcome == "delivered":
                ep = replace(held, failures=0, updated_at_ms=put.now_ms)
            else:
                failures = held.failures + 1
                ep = replace(held, failures=failures, updated_at_ms=put.now_ms)
                if held.enabled and failures >= put.disable_after:
                    ep = replace(ep, enabled=False, disabled_at_ms=put.now_ms)
            self._endpoints[key] = ep
            return WebhookAttemptAnswer(True, ep)

    async def _webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        with self._lock:
            gone = sorted(
                (a.at_ms, key) for key, a in self._attempts.items() if a.at_ms < before_ms
            )[:limit]
            for _, key in gone:
                del self._attempts[key]
            return len(gone)

    async def _webhook_attempt_list(self, params: WebhookAttemptListParams) -> list[WebhookAttempt]:
        tenant = params.tenant_id or ""
        with self._lock:
            mine = [
                a
                for a in self._attempts.values()
                if (a.tenant_id or "", a.endpoint) == (tenant, params.endpoint)
            ]
        mine.sort(key=lambda a: (a.at_ms, a.job_id, a.claims), reverse=True)
        return mine[: params.limit]


def _acked(a: Ack, r: JobRecord) -> JobRecord:
    return replace(
        r,
        attempts=ended(r, a.now_ms, AttemptOutcome.COMPLETED),
        state=JobState.COMPLETED,
        lease_until_ms=None,
        finished_at_ms=a.now_ms,
        result_json=a.result_json,
        progress_json=a.progress_json if a.progress_json is not None else r.progress_json,
    )


def nacked(r: JobRecord, n: Nack) -> JobRecord:
    """The row after a nack that landed (SPEC §6: which kinds count as an attempt)."""
    progress = n.progress_json if n.progress_json is not None else r.progress_json
    history = ended(
        r, n.now_ms, nack_attempt_outcome(n.kind, n.dead_letter), attempt_error(n.error)
    )
    base = replace(r, lease_until_ms=None, progress_json=progress, attempts=history)
    match n.kind:
        case NackKind.RETRY:
            return replace(base, state=JobState.READY, run_at_ms=n.run_at_ms, last_error=n.error)
        case NackKind.FAIL:
            return replace(
                base,
                state=JobState.DEAD if n.dead_letter else JobState.FAILED,
                finished_at_ms=n.now_ms,
                last_error=n.error,
            )
        case NackKind.PARK:
            return replace(
                base, state=JobState.PARKED, run_at_ms=n.run_at_ms, attempt=r.attempt - 1
            )
        case NackKind.SHED | NackKind.INTERRUPT:
            return replace(
                base,
                state=JobState.READY,
                run_at_ms=n.run_at_ms if n.run_at_ms is not None else n.now_ms,
                attempt=r.attempt - 1,
            )
        case NackKind.REFUSE:
            return replace(
                base,
                state=JobState.FAILED,
                finished_at_ms=n.now_ms,
                last_error=n.error,
                attempt=r.attempt - 1,
            )


class _FinishSubscription:
    """One in-process finish listener: live from the start (no channel to cross)."""

    def __init__(self, driver: MemoryDriver, on_finish: Callable[[str], None]) -> None:
        self._driver = driver
        self._on_finish = on_finish

    def is_live(self) -> bool:
        return self._on_finish in self._driver._listeners

    async def close(self) -> None:
        self._driver._unsubscribe(self._on_finish)


def _object(match_json: str) -> Mapping[str, object]:
    match: object = loads(match_json)
    if not isinstance(match, dict):
        raise AssertionError("the ABC refuses a match that is not an object")
    return match


# -- attempts --


def _reclaimed(r: JobRecord, now_ms: int) -> tuple[AttemptRecord, ...]:
    """The history of a row a claim takes: a running one's lapsed claim ends abandoned."""
    if r.state is not JobState.RUNNING:
        return r.attempts
    return ended(r, now_ms, AttemptOutcome.ABANDONED, ABANDONED_ERROR)


def _cancelled_attempts(r: JobRecord, now_ms: int) -> tuple[AttemptRecord, ...]:
    """The history of a row cancelled now: a running one's claim ends cancelled."""
    if r.state is not JobState.RUNNING:
        return r.attempts
    return ended(r, now_ms, AttemptOutcome.CANCELLED)
