"""`ReferenceModel`: the `JobDriver` contract (`jobs_core/driver.py`) as plainly as Python says it.

Deliberately naive — a dict of rows, linear scans, `sorted()` — and written from the contract,
not from any driver, so a driver's bug shows up as a difference from it. Synchronous: the state
machine calls it beside the driver under test. Argument checks are the ABC's own
(`check_new_job`, the JSON text check) or their error codes restated.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace

from jobs_core.attempts import (
    ABANDONED_ERROR,
    ATTEMPT_HISTORY,
    NO_ERROR,
    AttemptError,
    AttemptOutcome,
    AttemptRecord,
    attempt_error,
)
from jobs_core.driver import (
    MAX_BALANCE_ACCOUNTS,
    MAX_BULK_IDS,
    MAX_CONSUMER_BATCH,
    MAX_CONSUMER_CURSOR_BYTES,
    MAX_CONSUMER_LIST,
    MAX_ENQUEUE_BATCH,
    MAX_LEASE_BATCH,
    MAX_LEASE_KEY_BYTES,
    MAX_LEASE_LIMIT,
    MAX_LEASE_MS,
    MAX_LIST_LIMIT,
    MAX_LIST_SCAN,
    MAX_POSTING_AMOUNT,
    MAX_POSTING_LINES,
    MAX_PURGE_LIMIT,
    MAX_SWEEP_CHECKSUM_BYTES,
    MAX_SWEEP_CURSOR_BYTES,
    MAX_SWEEP_LIST,
    MAX_SWEEP_ROWS,
    MAX_TASK_BATCH,
    MAX_TIME_MS,
    MAX_WEBHOOK_DISABLE_AFTER,
    MAX_WEBHOOK_EXCERPT_BYTES,
    MAX_WEBHOOK_LATENCY_MS,
    MAX_WEBHOOK_LIST,
    MAX_WEBHOOK_URL_BYTES,
    check_join_ids,
    check_new_job,
)
from jobs_core.errors import (
    BatchTooLargeError,
    ClaimQueuesEmptyError,
    JobNotFoundError,
    LedgerAccountInvalidError,
    LedgerAmountInvalidError,
    LedgerCurrencyInvalidError,
    LedgerLinesInvalidError,
    LedgerUnbalancedError,
    NotRequeueableError,
    RecordInvalidError,
    RequeueDuplicateError,
    RequeueUnwoundError,
)
from jobs_core.jsonform import check_text
from jobs_core.records import (
    SWEEP_KINDS,
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
    JobListParams,
    JobPage,
    JobRecord,
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
    PostingLine,
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
    LEASE_LAPSED_ERROR,
    decode_cursor,
    encode_cursor,
    lease_clock_droppable,
)
from jobs_core.states import JobState

_MINUTE = 60_000
_HOUR = 3_600_000
#: The counter columns of `CounterRow`, by name.
_COLUMNS = (
    "completed",
    "retried",
    "dead_lettered",
    "dropped",
    "refused",
    "interrupted",
    "shed",
    "suspended",
    "cancelled",
)

_LIVE = (JobState.READY, JobState.RUNNING, JobState.PARKED)


def _namespace(r: JobRecord | NewJob) -> tuple[str, str, str]:
    # Written out rather than imported so a wrong `namespace_of` would show as a difference.
    return (r.name, r.tenant_id if r.tenant_id is not None else "", r.idempotency_key)


def _check_json(text: str | None, what: str) -> None:
    if text is not None:
        check_text(text, what)


class ReferenceModel:
    """Every job, pause and worker row in plain dicts; each method answers what a driver must."""

    def __init__(self) -> None:
        self.rows: dict[str, JobRecord] = {}
        self.pauses: set[Pause] = set()
        self.workers: dict[str, WorkerInfo] = {}
        #: (name, queue, bucket start, width) -> column -> count.
        self.counters: dict[tuple[str, str, int, int], dict[str, int]] = {}
        #: (run id, step name) -> its record.
        self.steps: dict[tuple[str, str], StepRecord] = {}
        self.events: dict[str, EventRecord] = {}
        #: job id -> (the wait of its last park, the claim count it parked under). A wait counts
        #: only while its row is parked under that very claim (`wait_of`): any move out of
        #: `parked` (a claim, a wake, a cancel, a removal) leaves it stale, which is how the
        #: model drops it; every landed nack forgets the one before (a row removed, enqueued
        #: again under its id and parked without a wait under the same claim count holds none).
        self.waits: dict[str, tuple[EventWait, int]] = {}
        #: Every lease holding stored, live or not; `lease_tokens` is the last token granted.
        self.holdings: list[Lease] = []
        self.lease_tokens = 0
        #: lease key -> its clock: the latest time any call on the key used (a call's time is
        #: the later of its `now_ms` and this), moved by a purge to the latest end it deleted.
        self.lease_clocks: dict[str, int] = {}
        #: task name -> its mark (its watermark and its last fire), once armed.
        self.marks: dict[str, TaskMark] = {}
        #: flows: waiter id -> (the ids of its join not finished yet, the claim count it parked
        #: under). Like a wait, a join moves only while its row is parked under that very claim
        #: (`pending_of`): any move out of `parked` leaves the entry stale, and parking on a
        #: join again replaces it (recounted from the rows as they stand then).
        self.joins: dict[str, tuple[frozenset[str], int]] = {}
        #: flows: the rows `job_watch` marked, until removed or purged.
        self.watched: set[str] = set()
        #: flows: each watched row's id, once per finish, in finishing order (what
        #: `finish_subscribe` listeners hear).
        self.announced: list[str] = []
        #: sweeps: the ledger, one entry per run id (never removed by the family's calls).
        self.sweeps: dict[str, SweepRecord] = {}
        # -- postings --
        #: (tenant, key) -> the posting; (tenant, account, currency) -> (debits, credits).
        self.postings: dict[tuple[str | None, str], PostingRecord] = {}
        self.balances: dict[tuple[str | None, str, str], tuple[int, int]] = {}
        #: consumers: each consumer's entry by (name, tenant), None the cross-tenant one.
        self.consumers: dict[tuple[str, str | None], ConsumerCursor] = {}
        #: webhooks: every endpoint ever put, and every attempt recorded, in the order written.
        self.endpoints: list[WebhookEndpoint] = []
        self.attempts: list[WebhookAttempt] = []
        #: flows: every waiter move, in order — (waiter, dependency, the finishing path,
        #: released) — for the walk's tally; the suite drains it (`moves.clear()`).
        self.moves: list[tuple[str, str, str, bool]] = []

    # -- helpers ------------------------------------------------------------------------------

    def _by_id(self) -> list[JobRecord]:
        return [self.rows[i] for i in sorted(self.rows)]

    def _live_holder(self, ns: tuple[str, str, str]) -> JobRecord | None:
        holders = [r for r in self._by_id() if r.state in _LIVE and _namespace(r) == ns]
        # More than one live holder would already be a broken invariant of the model itself.
        assert len(holders) <= 1, holders
        return holders[0] if holders else None

    def _held(self, fence: Fence) -> JobRecord | None:
        r = self.rows.get(fence.job_id)
        if (
            r is not None
            and r.state == JobState.RUNNING
            and r.claims == fence.claims
            and r.claimed_by == fence.worker_id
        ):
            return r
        return None

    def _paused(self, r: JobRecord) -> bool:
        # Only a queue or a name pause holds a claim; a task pause (kind "task") is the
        # scheduler's, even when the task and a job share a name.
        return Pause("queue", r.queue) in self.pauses or Pause("name", r.name) in self.pauses

    def _bump(self, r: JobRecord, now_ms: int, column: str) -> None:
        """One more `column` settle of `r`'s name in `r`'s queue, in the minute of `now_ms`."""
        minute = now_ms // _MINUTE * _MINUTE
        key = (r.name, r.queue, minute, _MINUTE)
        row = self.counters.setdefault(key, dict.fromkeys(_COLUMNS, 0))
        row[column] += 1

    # -- flows: the finish rule ---------------------------------------------------------------

    def pending_of(self, waiter_id: str) -> frozenset[str] | None:
        """The dependencies `waiter_id` still waits for: its last join's, while the row is
        parked under the claim that parked it on that join; None otherwise (never joined,
        released, claimed at its run_at, cancelled, removed, parked again without a join)."""
        r = self.rows.get(waiter_id)
        stored = self.joins.get(waiter_id)
        if r is None or stored is None or r.state != JobState.PARKED or r.claims != stored[1]:
            return None
        return stored[0]

    def waiters(self) -> dict[str, frozenset[str]]:
        """Every row parked on a join now, by id, with the dependencies it still waits for."""
        out = {}
        for waiter_id in sorted(self.joins):
            pending = self.pending_of(waiter_id)
            if pending is not None:
                out[waiter_id] = pending
        return out

    def _count_join(self, after: Sequence[str]) -> tuple[frozenset[str], int]:
        """A join's dependencies not finished now, and how many of the finished ones did not
        complete (an id naming no row counts as finished, not completed)."""
        pending: set[str] = set()
        failed = 0
        for dep in after:
            r = self.rows.get(dep)
            if r is not None and r.state in _LIVE:
                pending.add(dep)
            elif r is None or r.state != JobState.COMPLETED:
                failed += 1
        return frozenset(pending), failed

    def _finished(self, r: JobRecord, now_ms: int | None, how: str) -> None:
        """`r` just finished (its row as the finishing write left it, or as it was when the
        write deleted it): in the same write every row parked on a join that still waits for
        it moves — one dependency fewer pending, one more failed unless `r` completed — and one
        left with none pending is `ready` at the finish's `now_ms`. A watched row announces."""
        completed = r.state == JobState.COMPLETED
        for waiter_id, pending in self.waiters().items():
            if r.id not in pending:
                continue
            w = self.rows[waiter_id]
            assert w.join is not None, w
            left = pending - {r.id}
            # The stored count and the ids still pending are one fact, kept twice.
            assert w.join.pending == len(pending), (w.join, pending)
            join = replace(w.join, pending=len(left), failed=w.join.failed + (not completed))
            self.joins[waiter_id] = (left, w.claims)
            if left:
                self.rows[waiter_id] = replace(w, join=join)
            else:
                # `_job_remove` takes no time, and the contract releases a waiter at "the
                # finish's now_ms": the time a remove of the last dependency releases it at is
                # not written. Read here as the reference driver reads it (due at once, at its
                # own `created_at_ms`); the flow rules never remove a last dependency, so no
                # walk of the family holds a driver to this reading.
                at = w.created_at_ms if now_ms is None else now_ms
                self.rows[waiter_id] = replace(w, join=join, state=JobState.READY, run_at_ms=at)
            self.moves.append((waiter_id, r.id, how, not left))
        if r.id in self.watched:
            self.announced.append(r.id)

    def join_enqueue(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        """All checks first; then each item in order: refused as `missing` (nothing written)
        when an id of its `after` names no row, else enqueued as `job_enqueue` does, an inserted
        row holding its join — `parked` (no run_at) while a dependency is not finished, else
        `ready` at its own run_at."""
        if len(items) > MAX_ENQUEUE_BATCH:
            raise BatchTooLargeError(detail=f"{len(items)} > {MAX_ENQUEUE_BATCH}")
        for item in items:
            check_new_job(item.job)
            check_join_ids(item.after, "after")
            if not isinstance(item.policy, JoinPolicy):
                raise RecordInvalidError(detail="policy")
        out: list[JoinEnqueueAnswer] = []
        for item in items:
            missing = tuple(dep for dep in item.after if dep not in self.rows)
            if missing:
                out.append(JoinEnqueueAnswer(None, missing))
                continue
            answer = self._enqueue(item.job)
            out.append(JoinEnqueueAnswer(answer))
            if answer.deduped:
                continue
            pending, failed = self._count_join(item.after)
            join = JoinState(len(item.after), len(pending), failed, item.policy)
            r = self.rows[item.job.id]
            if pending:
                self.rows[r.id] = replace(r, join=join, state=JobState.PARKED, run_at_ms=None)
                self.joins[r.id] = (pending, r.claims)
            else:
                self.rows[r.id] = replace(r, join=join)
        return out

    def join_pending(self, job_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Per row of `job_ids` parked on a join still waiting, what it waits for, sorted."""
        _check_bulk(job_ids)
        out: dict[str, tuple[str, ...]] = {}
        for i in job_ids:
            pending = self.pending_of(i)
            if pending:
                out[i] = tuple(sorted(pending))
        return out

    def job_watch(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """Mark the existing rows of `job_ids` watched; answer them as `job_get_many` does."""
        _check_bulk(job_ids)
        self.watched.update(i for i in job_ids if i in self.rows)
        return self.job_get_many(job_ids)

    # -- jobs ---------------------------------------------------------------------------------

    def job_enqueue(self, job: NewJob) -> EnqueueResult:
        """Insert `job` as `ready`, or answer the row that already holds its id or live key."""
        check_new_job(job)
        return self._enqueue(job)

    def job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        """All checks first, then one enqueue after another (a batch dedupes against itself)."""
        if len(jobs) > MAX_ENQUEUE_BATCH:
            raise BatchTooLargeError(detail=f"{len(jobs)} > {MAX_ENQUEUE_BATCH}")
        for j in jobs:
            check_new_job(j)
        return [self._enqueue(j) for j in jobs]

    def _enqueue(self, job: NewJob) -> EnqueueResult:
        if job.id in self.rows:
            return EnqueueResult(job.id, deduped=True)
        holder = self._live_holder(_namespace(job))
        if holder is not None:
            return EnqueueResult(holder.id, deduped=True)
        self.rows[job.id] = JobRecord(
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
        )
        return EnqueueResult(job.id, deduped=False)

    def job_claim(self, p: ClaimParams) -> ClaimResult:
        """Beat, claim in priority order, and bury lapsed final attempts (pauses or not); the
        waiters a bury releases wait for the next claim. A lease lapsed once it ended by now and,
        when the claim bounds it, by `reclaim_until_ms`."""
        if not p.queues:
            raise ClaimQueuesEmptyError(detail="queues")
        now = p.now_ms
        if p.beat is not None:
            self.worker_beat(p.beat)
        asked = set(p.queues)

        def lapsed(r: JobRecord) -> bool:
            end = r.lease_until_ms
            return (
                r.state == JobState.RUNNING
                and end is not None
                and end <= now
                and (p.reclaim_until_ms is None or end <= p.reclaim_until_ms)
            )

        def claimable(r: JobRecord) -> bool:
            if r.queue not in asked or self._paused(r):
                return False
            if r.state in (JobState.READY, JobState.PARKED):
                return r.run_at_ms is not None and r.run_at_ms <= now
            return lapsed(r) and r.attempt < r.max_attempts

        def order(r: JobRecord) -> tuple[int, int, str]:
            # A row only becomes running from a due row, so a running row keeps a run_at.
            assert r.run_at_ms is not None, r
            return (r.priority, r.run_at_ms, r.id)

        taken = sorted((r for r in self._by_id() if claimable(r)), key=order)[: p.limit]
        jobs: list[ClaimedJob] = []
        for r in taken:
            new = replace(
                r,
                state=JobState.RUNNING,
                attempt=r.attempt + 1,
                claims=r.claims + 1,
                claimed_by=p.worker_id,
                lease_until_ms=now + p.lease_ms,
                # -- attempts -- a reclaimed row's lapsed claim ends abandoned.
                claimed_at_ms=now,
                attempts=(
                    _history(r, now, AttemptOutcome.ABANDONED, ABANDONED_ERROR)
                    if r.state == JobState.RUNNING
                    else r.attempts
                ),
            )
            self.rows[r.id] = new
            jobs.append(
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
                    worker_id=p.worker_id,
                    lease_until_ms=now + p.lease_ms,
                    created_at_ms=new.created_at_ms,
                    enqueued_by=new.enqueued_by,
                    traceparent=new.traceparent,
                    join=new.join,
                )
            )
        # Buried after the claim took its rows: a waiter a bury releases is claimable from the
        # next claim on.
        buried: list[BuriedJob] = []
        for r in self._by_id():
            if r.queue in asked and lapsed(r) and r.attempt >= r.max_attempts:
                state = JobState.FAILED if r.name in p.drop_exhausted else JobState.DEAD
                self.rows[r.id] = replace(
                    r,
                    state=state,
                    finished_at_ms=now,
                    lease_until_ms=None,
                    last_error=LEASE_LAPSED_ERROR,
                    attempts=_history(r, now, AttemptOutcome.ABANDONED, ABANDONED_ERROR),
                )
                buried.append(BuriedJob(r.id, r.name, r.queue, state))
                self._bump(r, now, "dead_lettered" if state == JobState.DEAD else "dropped")
                self._finished(self.rows[r.id], now, "bury")

        return ClaimResult(tuple(jobs), tuple(sorted(buried, key=lambda b: b.id)))

    def job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        """Complete each held job, in order; False where the fence no longer holds."""
        for a in acks:
            _check_json(a.result_json, "result_json")
            _check_json(a.progress_json, "progress_json")
        out: list[bool] = []
        for a in acks:
            r = self._held(a.fence)
            if r is None:
                out.append(False)
                continue
            self.rows[r.id] = replace(
                r,
                state=JobState.COMPLETED,
                finished_at_ms=a.now_ms,
                lease_until_ms=None,
                result_json=a.result_json,
                progress_json=a.progress_json if a.progress_json is not None else r.progress_json,
                attempts=_history(r, a.now_ms, AttemptOutcome.COMPLETED, NO_ERROR),
            )
            self._bump(r, a.now_ms, "completed")
            self._finished(self.rows[r.id], a.now_ms, "ack")
            out.append(True)
        return out

    def job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        """Give each held job back as its kind says, in order; False where the fence is gone."""
        for n in nacks:
            if n.join is not None:
                if n.kind != NackKind.PARK or n.wait is not None:
                    raise RecordInvalidError("only a park without a wait joins", detail="join")
                check_join_ids(n.join, "join")
            if n.kind == NackKind.RETRY and n.run_at_ms is None:
                raise RecordInvalidError("a retry needs run_at_ms", detail="run_at_ms")
            _check_json(n.progress_json, "progress_json")
            if n.wait is not None and n.kind != NackKind.PARK:
                raise RecordInvalidError("only a park waits", detail="wait")
            if n.wait is not None:
                _check_wait(n.wait)
        out: list[bool] = []
        for n in nacks:
            r = self._held(n.fence)
            if r is None:
                out.append(False)
                continue
            after = _after_nack(r, n)
            self.waits.pop(r.id, None)
            if n.wait is not None:
                if self._first_event(n.wait, n.now_ms) is not None:
                    after = replace(after, state=JobState.READY, run_at_ms=n.now_ms)
                else:
                    self.waits[r.id] = (n.wait, r.claims)
            if n.join is not None:
                # Counted as the rows stand before this write: the row itself is still running.
                pending, failed = self._count_join(n.join)
                join = JoinState(len(n.join), len(pending), failed, JoinPolicy.ALWAYS)
                after = replace(after, join=join)
                if pending:
                    self.joins[r.id] = (pending, r.claims)
                else:
                    after = replace(after, state=JobState.READY, run_at_ms=n.now_ms)
            self.rows[r.id] = after
            self._bump(r, n.now_ms, _nack_column(n))
            if n.kind in (NackKind.FAIL, NackKind.REFUSE):
                self._finished(after, n.now_ms, n.kind.value)
            out.append(True)
        return out

    # -- steps and events -----------------------------------------------------------------------

    def step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        """Record each step of the fenced row's run unless it is recorded; False off the fence."""
        for p in puts:
            check_text(p.output_json, "output_json")
        out: list[bool] = []
        for p in puts:
            r = self._held(p.fence)
            if r is None:
                out.append(False)
                continue
            key = (r.run_id, p.name)
            if key not in self.steps:
                self.steps[key] = StepRecord(r.run_id, p.name, p.output_json, p.now_ms)
            out.append(True)
        return out

    def step_list(self, run_id: str) -> list[StepRecord]:
        """A run's steps, by (recorded_at, name)."""
        mine = [s for (run, _), s in self.steps.items() if run == run_id]
        return sorted(mine, key=lambda s: (s.recorded_at_ms, s.name))

    @staticmethod
    def _meets(e: EventRecord, wait: EventWait) -> bool:
        """Whether `e` meets `wait`, expiry aside: its name, its tenant (the wait's, None for
        None, or every tenant), its time in `[since, until)` and its data."""
        return (
            e.name == wait.event
            and (e.all_tenants or e.tenant_id == wait.tenant_id)
            and e.published_at_ms >= wait.since_ms
            and (wait.until_ms is None or e.published_at_ms < wait.until_ms)
            and _matches(json.loads(wait.match_json), json.loads(e.data_json))
        )

    def _first_event(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        found = [
            e for e in self.events.values() if e.expires_at_ms > now_ms and self._meets(e, wait)
        ]
        return min(found, key=lambda e: (e.published_at_ms, e.id)) if found else None

    def wait_of(self, job_id: str) -> EventWait | None:
        """The wait row `job_id` holds: its last park's, while the row is still parked under
        the claim that parked it; None otherwise."""
        r = self.rows.get(job_id)
        stored = self.waits.get(job_id)
        if r is None or stored is None or r.state != JobState.PARKED or r.claims != stored[1]:
            return None
        return stored[0]

    def event_find(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        """The oldest unexpired event that meets the wait (`_meets`)."""
        _check_wait(wait)
        return self._first_event(wait, now_ms)

    def event_publish(self, event: EventRecord) -> int:
        """Store the event (a known id: nothing) and wake the parked runs whose wait it meets
        (`_meets`: of its tenant only, unless it is for every tenant)."""
        check_text(event.data_json, "data_json")
        if event.tenant_id is not None:
            _check_name_text(event.tenant_id, "tenant_id")
        if event.all_tenants and event.tenant_id is not None:
            raise RecordInvalidError("an event for every tenant names none", detail="tenant_id")
        if event.id in self.events:
            return 0
        self.events[event.id] = event
        woken = 0
        for job_id in sorted(self.waits):
            wait = self.wait_of(job_id)
            if wait is not None and self._meets(event, wait):
                self.rows[job_id] = replace(
                    self.rows[job_id], state=JobState.READY, run_at_ms=event.published_at_ms
                )
                woken += 1
        return woken

    def event_purge(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` expired events, soonest expired first."""
        if not _an_int_in(limit, 1, MAX_PURGE_LIMIT):
            raise RecordInvalidError(detail="limit")
        expired = sorted(
            (e for e in self.events.values() if e.expires_at_ms <= now_ms),
            key=lambda e: (e.expires_at_ms, e.id),
        )[:limit]
        for e in expired:
            del self.events[e.id]
        return len(expired)

    def _forget_flows(self, job_id: str) -> None:
        """A deleted row takes its join and its watch with it."""
        self.joins.pop(job_id, None)
        self.watched.discard(job_id)

    def _forget_run(self, r: JobRecord) -> None:
        """A deleted row takes its steps with it."""
        for key in [k for k in self.steps if k[0] == r.run_id]:
            del self.steps[key]

    def job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        """Move each held lease to `now + lease_ms`; False where the fence is gone."""
        out: list[bool] = []
        for b in beats:
            r = self._held(b.fence)
            if r is None:
                out.append(False)
                continue
            self.rows[r.id] = replace(r, lease_until_ms=b.now_ms + b.lease_ms)
            out.append(True)
        return out

    def job_progress(self, items: Sequence[Progress]) -> list[bool]:
        """Store each held job's progress text; False where the fence is gone."""
        for p in items:
            check_text(p.progress_json, "progress_json")
        out: list[bool] = []
        for p in items:
            r = self._held(p.fence)
            if r is None:
                out.append(False)
                continue
            self.rows[r.id] = replace(r, progress_json=p.progress_json)
            out.append(True)
        return out

    def job_cancel(self, job_id: str, now_ms: int) -> CancelAnswer:
        """Cancel a live row; a finished or unknown one is left alone."""
        r = self.rows.get(job_id)
        if r is None:
            return CancelAnswer.NOT_FOUND
        if r.state not in _LIVE:
            return CancelAnswer.FINISHED
        self.rows[job_id] = replace(
            r,
            state=JobState.CANCELLED,
            finished_at_ms=now_ms,
            lease_until_ms=None,
            attempts=(
                _history(r, now_ms, AttemptOutcome.CANCELLED, NO_ERROR)
                if r.state == JobState.RUNNING
                else r.attempts
            ),
        )
        self._bump(r, now_ms, "cancelled")
        self._finished(self.rows[job_id], now_ms, "cancel")
        return CancelAnswer.CANCELLED

    def job_cancel_many(self, job_ids: Sequence[str], now_ms: int) -> list[CancelAnswer]:
        """`job_cancel` of each id, in order."""
        _check_bulk(job_ids)
        return [self.job_cancel(i, now_ms) for i in job_ids]

    def _unwound(self, r: JobRecord) -> bool:
        """A saga run that failed for good: its row is dead or failed and its run recorded the
        saga mark, so its unwind job undoes (or undid) its steps."""
        return r.state in (JobState.DEAD, JobState.FAILED) and (r.run_id, "~saga") in self.steps

    def job_requeue(self, job_id: str, now_ms: int, *, fresh_run_id: str | None = None) -> None:
        """Make a finished row ready now with attempt 0 (in a fresh run when given one), or
        raise one of the four refusals."""
        fresh = None if fresh_run_id is None else (fresh_run_id,)
        answer = self.job_requeue_many(RequeueParams((job_id,), now_ms, fresh))[0]
        refusal = {
            RequeueAnswer.NOT_FOUND: JobNotFoundError,
            RequeueAnswer.LIVE: NotRequeueableError,
            RequeueAnswer.UNWOUND: RequeueUnwoundError,
            RequeueAnswer.DUPLICATE: RequeueDuplicateError,
        }.get(answer)
        if refusal is not None:
            raise refusal(detail=job_id)

    def job_requeue_many(self, p: RequeueParams) -> list[RequeueAnswer]:
        """Each id in order: unknown, live, a plain requeue of an unwound saga run, a namespace
        another live row holds (one requeued earlier in the call included) — else requeued,
        in its run or in its fresh one (the run it left loses its steps, unless its unwind job
        still reads them)."""
        _check_bulk(p.job_ids)
        if p.fresh_run_ids is not None:
            fresh = list(p.fresh_run_ids)
            if len(fresh) != len(p.job_ids) or len(set(fresh)) != len(fresh):
                raise RecordInvalidError(detail="fresh_run_ids")
            for run_id in fresh:
                _check_name_text(run_id, "fresh_run_ids")
        out: list[RequeueAnswer] = []
        for n, job_id in enumerate(p.job_ids):
            r = self.rows.get(job_id)
            if r is None:
                out.append(RequeueAnswer.NOT_FOUND)
            elif r.state in _LIVE:
                out.append(RequeueAnswer.LIVE)
            elif p.fresh_run_ids is None and self._unwound(r):
                out.append(RequeueAnswer.UNWOUND)
            elif self._live_holder(_namespace(r)) is not None:
                out.append(RequeueAnswer.DUPLICATE)
            else:
                run_id = r.run_id
                if p.fresh_run_ids is not None:
                    run_id = p.fresh_run_ids[n]
                    if not self._unwound(r):
                        self._forget_run(r)
                self.rows[job_id] = replace(
                    r,
                    run_id=run_id,
                    state=JobState.READY,
                    attempt=0,
                    run_at_ms=p.now_ms,
                    lease_until_ms=None,
                    finished_at_ms=None,
                )
                out.append(RequeueAnswer.REQUEUED)
        return out

    def job_promote(self, job_ids: Sequence[str], now_ms: int) -> list[PromoteAnswer]:
        """Each `ready` row due later becomes due now; every other row is left alone."""
        _check_bulk(job_ids)
        out: list[PromoteAnswer] = []
        for i in job_ids:
            r = self.rows.get(i)
            if r is None:
                out.append(PromoteAnswer.NOT_FOUND)
            elif r.state != JobState.READY:
                out.append(PromoteAnswer.NOT_READY)
            elif r.run_at_ms is not None and r.run_at_ms <= now_ms:
                out.append(PromoteAnswer.ALREADY_DUE)
            else:
                self.rows[i] = replace(r, run_at_ms=now_ms)
                out.append(PromoteAnswer.PROMOTED)
        return out

    def job_remove(self, job_ids: Sequence[str]) -> list[RemoveAnswer]:
        """Delete each row that is not running; a running one is left alone."""
        _check_bulk(job_ids)
        out: list[RemoveAnswer] = []
        for i in job_ids:
            r = self.rows.get(i)
            if r is None:
                out.append(RemoveAnswer.NOT_FOUND)
            elif r.state == JobState.RUNNING:
                out.append(RemoveAnswer.RUNNING)
            else:
                del self.rows[i]
                self._forget_run(r)
                if r.state in _LIVE:
                    # A live row removed finishes without completing (its id is gone already).
                    self._finished(r, None, "remove")
                self._forget_flows(i)
                out.append(RemoveAnswer.REMOVED)
        return out

    def job_list(self, p: JobListParams) -> JobPage:
        """Newest first by (created_at, id): after the cursor, examine up to `scan` rows and
        keep up to `limit` of those the filter keeps."""
        f = p.filter
        fields = (
            ("queue", f.queue),
            ("name", f.name),
            ("tenant_id", f.tenant_id),
            ("parent_id", f.parent_id),
            ("batch_id", f.batch_id),
            ("acts_for", f.acts_for),  # acts-for
        )
        for what, value in fields:
            if value is not None and (not isinstance(value, str) or not value):
                raise RecordInvalidError(detail=f"filter.{what}")
        if not _an_int_in(p.limit, 1, MAX_LIST_LIMIT):
            raise RecordInvalidError(detail="limit")
        if not _an_int_in(p.scan, 1, MAX_LIST_SCAN):
            raise RecordInvalidError(detail="scan")
        after = None if p.cursor is None else decode_cursor(p.cursor, f)
        order = sorted(self.rows.values(), key=lambda r: (r.created_at_ms, r.id), reverse=True)
        if after is not None:
            order = [r for r in order if (r.created_at_ms, r.id) < (after.created_at_ms, after.id)]
        examined = 0
        taken: list[JobSummary] = []
        for r in order:
            if examined == p.scan or len(taken) == p.limit:
                break
            examined += 1
            if (
                (not f.states or r.state in f.states)
                and f.queue in (None, r.queue)
                and f.name in (None, r.name)
                and f.tenant_id in (None, r.tenant_id)
                and f.parent_id in (None, r.parent_id)
                and f.batch_id in (None, r.batch_id)
                and f.acts_for in (None, r.acts_for)  # acts-for
            ):
                taken.append(JobSummary.of(r))
        if examined == len(order):
            return JobPage(tuple(taken), None)
        last = order[examined - 1]
        return JobPage(tuple(taken), encode_cursor(ListKey(last.created_at_ms, last.id), f))

    def job_purge(self, p: PurgeParams) -> int:
        """Delete the oldest-finished rows whose state's retention ran out, at most `limit`."""
        keeps = {
            JobState.COMPLETED: p.completed_ms,
            JobState.CANCELLED: p.cancelled_ms,
            JobState.FAILED: p.failed_ms,
            JobState.DEAD: p.dead_ms,
        }
        for what, value in (
            ("now_ms", p.now_ms),
            *((f"{s.value}_ms", v) for s, v in keeps.items()),
        ):
            if value is not None and not _an_int_in(value, 0, MAX_TIME_MS):
                raise RecordInvalidError(detail=what)
        if not _an_int_in(p.limit, 1, MAX_PURGE_LIMIT):
            raise RecordInvalidError(detail="limit")

        def expired(r: JobRecord) -> bool:
            keep = keeps.get(r.state)
            if keep is None or r.state in _LIVE:
                return False
            # A finished row always carries the time it finished.
            assert r.finished_at_ms is not None, r
            return r.finished_at_ms + keep <= p.now_ms

        def age(r: JobRecord) -> tuple[int, str]:
            assert r.finished_at_ms is not None, r
            return (r.finished_at_ms, r.id)

        doomed = sorted((r for r in self.rows.values() if expired(r)), key=age)[: p.limit]
        for r in doomed:
            del self.rows[r.id]
            self._forget_run(r)
            self._forget_flows(r.id)
        return len(doomed)

    def job_get_many(self, job_ids: Sequence[str]) -> dict[str, JobRecord]:
        """The rows of these ids that exist, each with the wait it holds (`wait_of`)."""
        return {i: replace(self.rows[i], wait=self.wait_of(i)) for i in job_ids if i in self.rows}

    # -- pauses, queues, workers --------------------------------------------------------------

    def pause_add(self, pause: Pause) -> bool:
        """True when the pause is new (of a queue, a job name or a task: stored alike)."""
        new = pause not in self.pauses
        self.pauses.add(pause)
        return new

    def pause_remove(self, pause: Pause) -> bool:
        """True when the pause existed."""
        existed = pause in self.pauses
        self.pauses.discard(pause)
        return existed

    def pause_list(self) -> list[Pause]:
        """Every pause, sorted."""
        return sorted(self.pauses)

    def queue_stats(self, now_ms: int) -> list[QueueStats]:
        """Per queue with rows: how many in each state, and its oldest due ready row's time."""
        out: list[QueueStats] = []
        for q in sorted({r.queue for r in self.rows.values()}):
            rows = [r for r in self.rows.values() if r.queue == q]
            counts = tuple((s, len([r for r in rows if r.state == s])) for s in JobState)
            due = [
                r.run_at_ms
                for r in rows
                if r.state == JobState.READY and r.run_at_ms is not None and r.run_at_ms <= now_ms
            ]
            out.append(QueueStats(q, counts, min(due) if due else None))
        return out

    def queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        """Per asked queue, `ready` rows due by `now_ms`; 0 for a paused queue."""
        out: dict[str, int] = {}
        for q in queues:
            if Pause("queue", q) in self.pauses:
                out[q] = 0
                continue
            out[q] = len(
                [
                    r
                    for r in self.rows.values()
                    if r.queue == q
                    and r.state == JobState.READY
                    and r.run_at_ms is not None
                    and r.run_at_ms <= now_ms
                ]
            )
        return out

    # -- counters -----------------------------------------------------------------------------

    def counter_read(self, p: CounterReadParams) -> list[CounterRow]:
        """Buckets starting in [since, until), of the asked names and queues, by (name, queue,
        bucket, width)."""
        return [
            CounterRow(name, queue, bucket, width, **values)
            for (name, queue, bucket, width), values in sorted(self.counters.items())
            if (p.names is None or name in p.names)
            and (p.queues is None or queue in p.queues)
            and p.since_ms <= bucket < p.until_ms
        ]

    def counter_fold(self, now_ms: int, limit: int) -> int:
        """Fold minute buckets that began before the previous hour into their hour bucket,
        oldest first; with budget left, drop hour buckets older than 30 days."""
        if not _an_int_in(limit, 1, MAX_PURGE_LIMIT):
            raise RecordInvalidError(detail="limit")
        fold_before = max(0, now_ms // _HOUR * _HOUR - _HOUR)
        minutes = sorted(
            (bucket, name, queue)
            for (name, queue, bucket, width) in self.counters
            if width == _MINUTE and bucket < fold_before
        )[:limit]
        for bucket, name, queue in minutes:
            values = self.counters.pop((name, queue, bucket, _MINUTE))
            hour = bucket // _HOUR * _HOUR
            key = (name, queue, hour, _HOUR)
            into = self.counters.setdefault(key, dict.fromkeys(_COLUMNS, 0))
            for column, n in values.items():
                into[column] += n
        left = limit - len(minutes)
        if not left:
            return len(minutes)
        drop_before = max(0, now_ms - 30 * 24 * _HOUR)
        hours = sorted(
            (bucket, name, queue)
            for (name, queue, bucket, width) in self.counters
            if width == _HOUR and bucket < drop_before
        )[:left]
        for bucket, name, queue in hours:
            del self.counters[(name, queue, bucket, _HOUR)]
        return len(minutes) + len(hours)

    # -- leases -------------------------------------------------------------------------------

    def _lease_time(self, keys: Sequence[str], now_ms: int) -> dict[str, int]:
        """Each key's time for a call at `now_ms` that names it: the later of `now_ms` and the
        key's clock, which moves there (a key's time never runs back)."""
        for key in keys:
            self.lease_clocks[key] = max(now_ms, self.lease_clocks.get(key, now_ms))
        return {key: self.lease_clocks[key] for key in keys}

    def _holding(self, key: str, token: int, now_ms: int) -> Lease | None:
        """The live holding `(key, token)` at `now_ms`, if any."""
        for h in self.holdings:
            if h.key == key and h.token == token and h.expires_at_ms > now_ms:
                return h
        return None

    def lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        """The named keys' expired holdings deleted; then in order: a holder's own live holding
        is replaced; else a new holding while the key has fewer than `limit` live ones; else
        None."""
        _check_lease_batch(len(takes))
        agreed: dict[str, int] = {}
        pairs: set[tuple[str, str]] = set()
        for t in takes:
            _check_lease_key(t.key)
            _check_name_text(t.holder, "holder")
            _check_range(t.limit, 1, MAX_LEASE_LIMIT, "limit")
            _check_range(t.ttl_ms, 1, MAX_LEASE_MS, "ttl_ms")
            if agreed.setdefault(t.key, t.limit) != t.limit or (t.key, t.holder) in pairs:
                raise RecordInvalidError(detail=t.key)
            pairs.add((t.key, t.holder))
        _check_range(now_ms, 0, MAX_TIME_MS, "now_ms")
        # The named keys' expired holdings go first, granted or not: what a purge finds later
        # depends on it. Each key is judged at its own time (`_lease_time`).
        at = self._lease_time([t.key for t in takes], now_ms)
        self.holdings = [h for h in self.holdings if h.key not in at or h.expires_at_ms > at[h.key]]
        out: list[Lease | None] = []
        for t in takes:
            live = [h for h in self.holdings if h.key == t.key and h.expires_at_ms > at[t.key]]
            own = [h for h in live if h.holder == t.holder]
            if not own and len(live) >= t.limit:
                out.append(None)
                continue
            self.holdings = [h for h in self.holdings if h not in own]
            self.lease_tokens += 1
            granted = Lease(t.key, t.holder, self.lease_tokens, at[t.key] + t.ttl_ms, t.stamp)
            self.holdings.append(granted)
            out.append(granted)
        return out

    def lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        """Each live holding moves to `now + ttl`; an expired one stays lost."""
        _check_lease_batch(len(renews))
        for r in renews:
            _check_lease_key(r.key)
            _check_range(r.token, 1, 2**62, "token")
            _check_range(r.ttl_ms, 1, MAX_LEASE_MS, "ttl_ms")
        _check_range(now_ms, 0, MAX_TIME_MS, "now_ms")
        at = self._lease_time([r.key for r in renews], now_ms)
        out: list[bool] = []
        for r in renews:
            h = self._holding(r.key, r.token, at[r.key])
            if h is not None:
                place = self.holdings.index(h)
                self.holdings[place] = replace(h, expires_at_ms=at[r.key] + r.ttl_ms)
            out.append(h is not None)
        return out

    def lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        """A live slot goes now, a live stamp stays until it expires, an expired holding goes;
        True for each live one."""
        return self._end_holdings(refs, now_ms, stamps_stay=True)

    def lease_abandon(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        """Every named holding goes, stamps too; True for each that was live."""
        return self._end_holdings(refs, now_ms, stamps_stay=False)

    def _end_holdings(
        self, refs: Sequence[LeaseRef], now_ms: int, *, stamps_stay: bool
    ) -> list[bool]:
        _check_lease_batch(len(refs))
        for r in refs:
            _check_lease_key(r.key)
            _check_range(r.token, 1, 2**62, "token")
        _check_range(now_ms, 0, MAX_TIME_MS, "now_ms")
        at = self._lease_time([r.key for r in refs], now_ms)
        out: list[bool] = []
        for r in refs:
            stored = next((h for h in self.holdings if (h.key, h.token) == (r.key, r.token)), None)
            live = stored is not None and stored.expires_at_ms > at[r.key]
            if stored is not None and not (stamps_stay and live and stored.stamp):
                self.holdings.remove(stored)
            out.append(live)
        return out

    def lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        """The live holdings of `key` at the key's time (its clock moves not), by token."""
        _check_lease_key(key)
        _check_range(now_ms, 0, MAX_TIME_MS, "now_ms")
        at = max(now_ms, self.lease_clocks.get(key, now_ms))
        live = [h for h in self.holdings if h.key == key and h.expires_at_ms > at]
        return sorted(live, key=lambda h: h.token)

    def lease_purge(self, now_ms: int, limit: int) -> int:
        """Delete the first `limit` stored holdings expired at `now_ms` (slots and stamps
        alike) by (expiry, key, token); answers how many went. Live ones stay. Each key a
        holding went from has its clock moved to the latest end deleted (a later caller behind
        must not find the room they left). Before that, the first `limit` clocks by (clock, key)
        that are `lease_clock_droppable` are examined, and those whose key holds nothing (as
        the purge begins) are dropped."""
        _check_range(now_ms, 0, MAX_TIME_MS, "now_ms")
        _check_range(limit, 1, MAX_PURGE_LIMIT, "limit")
        old = sorted(
            (clock, key)
            for key, clock in self.lease_clocks.items()
            if lease_clock_droppable(clock, now_ms)
        )[:limit]
        for _, key in old:
            if not any(h.key == key for h in self.holdings):
                del self.lease_clocks[key]
        expired = [h for h in self.holdings if h.expires_at_ms <= now_ms]
        doomed = sorted(expired, key=lambda h: (h.expires_at_ms, h.key, h.token))[:limit]
        self.holdings = [h for h in self.holdings if h not in doomed]
        for h in doomed:
            self.lease_clocks[h.key] = max(h.expires_at_ms, self.lease_clocks.get(h.key, 0))
        return len(doomed)

    # -- tasks --------------------------------------------------------------------------------

    def task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        """Each name's mark in order; an unarmed name first gets one whose watermark is now (a
        stored watermark never moves here)."""
        _check_task_names(names)
        _check_range(now_ms, 0, MAX_TIME_MS, "now_ms")
        out: list[TaskMark] = []
        for name in names:
            if name not in self.marks:
                self.marks[name] = TaskMark(name, watermark_ms=now_ms)
            out.append(self.marks[name])
        return out

    def task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        """When the stored watermark is the one the firer read (`expect_ms`): this model's own
        enqueue of the job, and the mark moved to the fire's watermark with the occurrence, the
        enqueue's id and the fire's time as its last fire. Otherwise nothing changes."""
        _check_name_text(fire.name, "name")
        _check_range(fire.expect_ms, 0, MAX_TIME_MS, "expect_ms")
        _check_range(fire.now_ms, 0, MAX_TIME_MS, "now_ms")
        # The occurrence comes after the watermark read; the new watermark is not before it.
        _check_range(fire.occurrence_ms, fire.expect_ms + 1, MAX_TIME_MS, "occurrence_ms")
        _check_range(fire.watermark_ms, fire.occurrence_ms, MAX_TIME_MS, "watermark_ms")
        check_new_job(fire.job)
        stored = self.marks.get(fire.name)
        if stored is None or stored.watermark_ms != fire.expect_ms:
            return TaskFireAnswer(enqueued=None, mark=stored)
        enqueued = self._enqueue(fire.job)
        moved = TaskMark(
            name=fire.name,
            watermark_ms=fire.watermark_ms,
            fired_ms=fire.occurrence_ms,
            fired_job_id=enqueued.id,
            fired_at_ms=fire.now_ms,
        )
        self.marks[fire.name] = moved
        return TaskFireAnswer(enqueued=enqueued, mark=moved)

    def task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        """The marks of the armed names among `names`."""
        _check_task_names(names)
        return {n: self.marks[n] for n in names if n in self.marks}

    # -- sweeps ---------------------------------------------------------------------------------

    def _ledger_writer(self, fence: Fence, run_id: str) -> JobRecord | None:
        """The row a ledger write of run `run_id` lands under: the one `fence` holds, while that
        row is in run `run_id` (a fresh requeue moves a row to another run; two rows may share
        one, as a saga and its unwind job do). None: the write lands nowhere."""
        held = self._held(fence)
        if held is None or held.run_id != run_id:
            return None
        return held

    def sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        """In the contract's order: off the fence (or a fence of a row in another run),
        nothing; a completed entry of another run of the same (name, scope, environment,
        checksum) blocks, the last finished (ties: the greater run id); the run's own entry
        resumes (a completed one is answered as it is); else a new running entry under the
        fence's job (a row of the run)."""
        _check_sweep_fence(start.fence)
        _check_name_text(start.run_id, "run_id")
        for what in ("name", "scope", "environment"):
            _check_name_text(getattr(start, what), what)
        if start.kind not in SWEEP_KINDS:
            raise RecordInvalidError(detail="kind")
        _check_name_text(start.checksum, "checksum", MAX_SWEEP_CHECKSUM_BYTES)
        if start.expected is not None:
            _check_range(start.expected, 0, MAX_SWEEP_ROWS, "expected")
        _check_range(start.now_ms, 0, MAX_TIME_MS, "now_ms")
        writer = self._ledger_writer(start.fence, start.run_id)
        if writer is None:
            return SweepStartAnswer(None)
        blocker = self._sweep_blocker(start)
        if blocker is not None:
            return SweepStartAnswer(None, blocked_by=blocker)
        own = self.sweeps.get(start.run_id)
        if own is not None and own.status == "completed":
            return SweepStartAnswer(own)
        if own is not None:
            # A later attempt of the same run (or a second start of a running one): what was
            # recorded stays, the end it was given goes.
            resumed = replace(
                own, status="running", error=None, finished_at_ms=None, updated_at_ms=start.now_ms
            )
            self.sweeps[start.run_id] = resumed
            return SweepStartAnswer(resumed)
        entry = SweepRecord(
            run_id=start.run_id,
            job_id=writer.id,
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
        self.sweeps[start.run_id] = entry
        return SweepStartAnswer(entry)

    def _sweep_blocker(self, start: SweepStart) -> SweepRecord | None:
        """The completed entry of another run that blocks `start`, if any."""
        best: SweepRecord | None = None
        for e in self.sweeps.values():
            if (
                e.run_id == start.run_id
                or e.status != "completed"
                or e.name != start.name
                or e.scope != start.scope
                or e.environment != start.environment
                or e.checksum != start.checksum
            ):
                continue
            # A completed entry always carries its end.
            assert e.finished_at_ms is not None, e
            if best is None:
                best = e
                continue
            assert best.finished_at_ms is not None
            if e.finished_at_ms > best.finished_at_ms or (
                e.finished_at_ms == best.finished_at_ms and e.run_id > best.run_id
            ):
                best = e
        return best

    def sweep_advance(self, advance: SweepAdvance) -> bool:
        """The `span` batches ending at batch `batch` of a running entry are recorded when they
        are the next ones (the first of them is `batches + 1`) and the fence holds for its run;
        a replayed window, one overlapping the recorded batches, or one skipping some moves
        nothing."""
        _check_sweep_fence(advance.fence)
        _check_advance(advance)
        e = self.sweeps.get(advance.run_id)
        if e is None or e.status != "running":
            return False
        if self._ledger_writer(advance.fence, advance.run_id) is None:
            return False
        if not _next_window(e, advance):
            return False
        self.sweeps[advance.run_id] = _advanced(e, advance)
        return True

    def sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        """A batch's step and its advance, one write under one fence: when the fence holds for
        the advance's run, the step is recorded under that run (its first record stays) and the
        entry moves by the advance's rule; otherwise nothing is written."""
        step, advance = checkpoint.step, checkpoint.advance
        _check_sweep_fence(step.fence)
        _check_name_text(step.name, "name")
        check_text(step.output_json, "output_json")
        _check_range(step.now_ms, 0, MAX_TIME_MS, "now_ms")
        if step.fence != advance.fence:
            raise RecordInvalidError(detail="fence")
        _check_advance(advance)
        if self._ledger_writer(advance.fence, advance.run_id) is None:
            return False
        key = (advance.run_id, step.name)
        if key not in self.steps:
            self.steps[key] = StepRecord(advance.run_id, step.name, step.output_json, step.now_ms)
        e = self.sweeps.get(advance.run_id)
        if e is not None and e.status == "running" and _next_window(e, advance):
            self.sweeps[advance.run_id] = _advanced(e, advance)
        return True

    def sweep_finish(self, finish: SweepFinish) -> bool:
        """A running entry, under a fence held by a row of its run, ends `completed`, or
        `failed` with its code."""
        _check_sweep_fence(finish.fence)
        _check_name_text(finish.run_id, "run_id")
        if finish.status == "completed":
            if finish.error is not None:
                raise RecordInvalidError(detail="error")
        elif finish.status == "failed":
            _check_name_text(finish.error, "error")
        else:
            raise RecordInvalidError(detail="status")
        _check_range(finish.now_ms, 0, MAX_TIME_MS, "now_ms")
        e = self.sweeps.get(finish.run_id)
        writer = self._ledger_writer(finish.fence, finish.run_id)
        if writer is None or e is None or e.status != "running":
            return False
        self.sweeps[finish.run_id] = replace(
            e,
            status=finish.status,
            error=finish.error,
            finished_at_ms=finish.now_ms,
            updated_at_ms=finish.now_ms,
        )
        return True

    def sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        """The entries (of declaration `name`), newest start first, ties by the greater run id;
        the first `limit`."""
        if name is not None:
            _check_name_text(name, "name")
        _check_range(limit, 1, MAX_SWEEP_LIST, "limit")
        mine = [e for e in self.sweeps.values() if name is None or e.name == name]
        mine.sort(key=lambda e: e.run_id, reverse=True)
        mine.sort(key=lambda e: e.started_at_ms, reverse=True)
        return mine[:limit]

    # -- postings -------------------------------------------------------------------------------

    def posting_put(self, put: PostingPut) -> PostingPutAnswer:
        """Off the fence — not held, or held by a row whose idempotency key is not the posting's
        key —: nothing. A key posted before: `already_applied` with the same lines (as a set of
        (account, currency, amount)), else `conflict`; nothing written. Else the posting, its
        lines by (account, currency), and every line's amount on its account's debits (> 0) or
        credits (< 0) in that currency."""
        _check_sweep_fence(put.fence)
        if put.tenant_id is not None:
            _check_name_text(put.tenant_id, "tenant_id")
        _check_name_text(put.key, "key", 1024)
        lines = _posting_lines(put.lines)
        _check_range(put.now_ms, 0, MAX_TIME_MS, "now_ms")
        row = self._held(put.fence)
        if row is None or row.idempotency_key != put.key:
            return PostingPutAnswer("fence_lost", None)
        stored = self.postings.get((put.tenant_id, put.key))
        if stored is not None:
            same = set(stored.lines) == set(lines)
            return PostingPutAnswer("already_applied" if same else "conflict", stored)
        posting = PostingRecord(
            tenant_id=put.tenant_id,
            key=put.key,
            job_id=row.id,
            lines=tuple(sorted(lines, key=lambda x: (x.account, x.currency))),
            posted_at_ms=put.now_ms,
        )
        self.postings[(put.tenant_id, put.key)] = posting
        for x in lines:
            debits, credits = self.balances.get((put.tenant_id, x.account, x.currency), (0, 0))
            if x.amount > 0:
                debits += x.amount
            else:
                credits += abs(x.amount)
            self.balances[(put.tenant_id, x.account, x.currency)] = (debits, credits)
        return PostingPutAnswer("applied", posting)

    def posting_get(self, tenant_id: str | None, key: str) -> PostingRecord | None:
        if tenant_id is not None:
            _check_name_text(tenant_id, "tenant_id")
        _check_name_text(key, "key", 1024)
        return self.postings.get((tenant_id, key))

    def posting_balances(self, tenant_id: str | None, accounts: Sequence[str]) -> list[BalanceRow]:
        """Every (account, currency) of `accounts` that a posting of the tenant touched, by
        account then currency."""
        if tenant_id is not None:
            _check_name_text(tenant_id, "tenant_id")
        if isinstance(accounts, str) or not isinstance(accounts, Sequence) or not accounts:
            raise RecordInvalidError(detail="accounts")
        if len(accounts) > MAX_BALANCE_ACCOUNTS:
            raise BatchTooLargeError(detail=str(len(accounts)))
        for a in accounts:
            _check_account(a)
        if len(set(accounts)) != len(accounts):
            raise RecordInvalidError(detail="accounts")
        return [
            BalanceRow(account, currency, debits, credits)
            for (tenant, account, currency), (debits, credits) in sorted(
                self.balances.items(), key=lambda kv: (kv[0][1], kv[0][2])
            )
            if tenant == tenant_id and account in accounts
        ]

    # -- webhooks -------------------------------------------------------------------------------

    def _endpoint_at(self, tenant_id: str | None, endpoint: str) -> int | None:
        """Where endpoint (tenant, endpoint) sits in `endpoints`: a None tenant is a key of its
        own, apart from every named tenant."""
        for i, e in enumerate(self.endpoints):
            if e.tenant_id == tenant_id and e.endpoint == endpoint:
                return i
        return None

    def webhook_endpoint_put(self, put: WebhookEndpointPut) -> WebhookEndpoint:
        """A new endpoint enabled with no failures; a known one moved to the URL, its state
        (enabled, failures, disabled_at, created_at) kept."""
        _check_tenant_text(put.tenant_id)
        _check_name_text(put.endpoint, "endpoint")
        _check_name_text(put.url, "url", MAX_WEBHOOK_URL_BYTES)
        _check_range(put.now_ms, 0, MAX_TIME_MS, "now_ms")
        at = self._endpoint_at(put.tenant_id, put.endpoint)
        if at is None:
            e = WebhookEndpoint(
                put.tenant_id, put.endpoint, put.url, True, 0, None, put.now_ms, put.now_ms
            )
            self.endpoints.append(e)
            return e
        e = replace(self.endpoints[at], url=put.url, updated_at_ms=put.now_ms)
        self.endpoints[at] = e
        return e

    def webhook_endpoint_get(self, tenant_id: str | None, endpoint: str) -> WebhookEndpoint | None:
        _check_tenant_text(tenant_id)
        _check_name_text(endpoint, "endpoint")
        at = self._endpoint_at(tenant_id, endpoint)
        return None if at is None else self.endpoints[at]

    def webhook_endpoint_list(self, limit: int) -> list[WebhookEndpoint]:
        """By tenant (no tenant as the empty text, so first), then endpoint, in code points."""
        _check_range(limit, 1, MAX_WEBHOOK_LIST, "limit")
        ordered = sorted(
            self.endpoints,
            key=lambda e: ("" if e.tenant_id is None else e.tenant_id, e.endpoint),
        )
        return ordered[:limit]

    def webhook_endpoint_enable(self, enable: WebhookEndpointEnable) -> WebhookEndpoint | None:
        """The operator's re-enable: enabled, no failures, no disabled time."""
        _check_tenant_text(enable.tenant_id)
        _check_name_text(enable.endpoint, "endpoint")
        _check_range(enable.now_ms, 0, MAX_TIME_MS, "now_ms")
        at = self._endpoint_at(enable.tenant_id, enable.endpoint)
        if at is None:
            return None
        e = replace(
            self.endpoints[at],
            enabled=True,
            failures=0,
            disabled_at_ms=None,
            updated_at_ms=enable.now_ms,
        )
        self.endpoints[at] = e
        return e

    def webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        """Off the claim or without the endpoint: nothing. A claim's second attempt: nothing,
        the endpoint answered as it is. Else the attempt is kept and the streak moves: cleared
        on a delivery, one longer on a failure — and the failure that makes it `disable_after`
        long turns an enabled endpoint off."""
        _check_sweep_fence(put.fence)
        _check_tenant_text(put.tenant_id)
        _check_name_text(put.endpoint, "endpoint")
        _check_name_text(put.event_id, "event_id")
        if put.outcome == "delivered":
            if put.error is not None:
                raise RecordInvalidError(detail="error")
        elif put.outcome == "failed":
            _check_name_text(put.error, "error")
        else:
            raise RecordInvalidError(detail="outcome")
        if put.status_code is not None:
            _check_range(put.status_code, 100, 599, "status_code")
        _check_range(put.latency_ms, 0, MAX_WEBHOOK_LATENCY_MS, "latency_ms")
        if (
            not isinstance(put.excerpt, str)
            or "\x00" in put.excerpt
            or any("\ud800" <= c <= "\udfff" for c in put.excerpt)
            or len(put.excerpt.encode("utf-8")) > MAX_WEBHOOK_EXCERPT_BYTES
        ):
            raise RecordInvalidError(detail="excerpt")
        _check_range(put.disable_after, 1, MAX_WEBHOOK_DISABLE_AFTER, "disable_after")
        _check_range(put.now_ms, 0, MAX_TIME_MS, "now_ms")
        at = self._endpoint_at(put.tenant_id, put.endpoint)
        if self._held(put.fence) is None or at is None:
            return WebhookAttemptAnswer(False, None)
        e = self.endpoints[at]
        f = put.fence
        if any(a.job_id == f.job_id and a.claims == f.claims for a in self.attempts):
            return WebhookAttemptAnswer(True, e)
        self.attempts.append(
            WebhookAttempt(
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
        )
        if put.outcome == "delivered":
            e = replace(e, failures=0, updated_at_ms=put.now_ms)
        else:
            streak = e.failures + 1
            off = e.enabled and streak >= put.disable_after
            e = replace(
                e,
                failures=streak,
                enabled=e.enabled and not off,
                disabled_at_ms=put.now_ms if off else e.disabled_at_ms,
                updated_at_ms=put.now_ms,
            )
        self.endpoints[at] = e
        return WebhookAttemptAnswer(True, e)

    def webhook_attempt_purge(self, before_ms: int, limit: int) -> int:
        """Delete the first `limit` attempts made before `before_ms` by (at, job id, claims);
        answers how many went. Endpoints stay as they are, streaks included."""
        _check_range(before_ms, 0, MAX_TIME_MS, "before_ms")
        _check_range(limit, 1, MAX_PURGE_LIMIT, "limit")
        old = sorted(
            (a for a in self.attempts if a.at_ms < before_ms),
            key=lambda a: (a.at_ms, a.job_id, a.claims),
        )[:limit]
        for a in old:
            self.attempts.remove(a)
        return len(old)

    def webhook_attempt_list(self, params: WebhookAttemptListParams) -> list[WebhookAttempt]:
        """One endpoint's attempts, newest first; ties by the greater job id, then claims."""
        _check_tenant_text(params.tenant_id)
        _check_name_text(params.endpoint, "endpoint")
        _check_range(params.limit, 1, MAX_WEBHOOK_LIST, "limit")
        mine = [
            a
            for a in self.attempts
            if a.tenant_id == params.tenant_id and a.endpoint == params.endpoint
        ]
        mine.sort(key=lambda a: (a.at_ms, a.job_id, a.claims), reverse=True)
        return mine[: params.limit]

    def worker_beat(self, beat: WorkerBeat) -> None:
        """Insert or replace the worker's row, alive until `now + ttl`."""
        self.workers[beat.worker_id] = WorkerInfo(
            worker_id=beat.worker_id,
            info_json=beat.info_json,
            last_beat_ms=beat.now_ms,
            expires_at_ms=beat.now_ms + beat.ttl_ms,
        )

    def worker_forget(self, worker_id: str) -> bool:
        """True when the worker had a row (expired or not)."""
        return self.workers.pop(worker_id, None) is not None

    def worker_purge(self, now_ms: int, limit: int) -> int:
        """Delete the first `limit` rows expired at `now_ms` by (expiry, worker id); answers
        how many went. Live rows stay."""
        _check_range(now_ms, 0, MAX_TIME_MS, "now_ms")
        _check_range(limit, 1, MAX_PURGE_LIMIT, "limit")
        expired = [w for w in self.workers.values() if w.expires_at_ms <= now_ms]
        for w in sorted(expired, key=lambda w: (w.expires_at_ms, w.worker_id))[:limit]:
            del self.workers[w.worker_id]
        return min(len(expired), limit)

    def worker_list(self, now_ms: int) -> list[WorkerInfo]:
        """Rows still alive at `now_ms`, by worker id."""
        return sorted(
            (w for w in self.workers.values() if w.expires_at_ms > now_ms),
            key=lambda w: w.worker_id,
        )

    # -- consumers ------------------------------------------------------------------------------

    def consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        """The entry of exactly this name and tenant."""
        _check_name_text(name, "name")
        if tenant_id is not None:
            _check_name_text(tenant_id, "tenant_id")
        return self.consumers.get((name, tenant_id))

    def consumer_cursor_put(self, put: ConsumerPut) -> bool:
        """Lands when the fence's row runs under that very claim and the stored cursor is the
        one the turn names as its start, text for text (none stored: `expect_json` None)."""
        _check_sweep_fence(put.fence)
        _check_name_text(put.name, "name")
        if put.tenant_id is not None:
            _check_name_text(put.tenant_id, "tenant_id")
        _check_name_text(put.source, "source")
        _check_consumer_json(put.cursor_json, "cursor_json")
        if put.expect_json is not None:
            _check_consumer_json(put.expect_json, "expect_json")
        _check_range(put.records, 0, MAX_CONSUMER_BATCH, "records")
        if put.lag is not None:
            _check_range(put.lag, 0, MAX_SWEEP_ROWS, "lag")
        _check_range(put.now_ms, 0, MAX_TIME_MS, "now_ms")
        key = (put.name, put.tenant_id)
        before = self.consumers.get(key)
        if self._held(put.fence) is None:
            return False
        if (before.cursor_json if before is not None else None) != put.expect_json:
            return False
        self.consumers[key] = ConsumerCursor(
            name=put.name,
            tenant_id=put.tenant_id,
            source=put.source,
            cursor_json=put.cursor_json,
            turns=(before.turns if before is not None else 0) + 1,
            records=(before.records if before is not None else 0) + put.records,
            lag=put.lag,
            holder=put.fence.worker_id,
            job_id=put.fence.job_id,
            updated_at_ms=put.now_ms,
        )
        return True

    def consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        """Every entry (of `name`), by name then tenant with the cross-tenant one first (in code
        points); the first `limit`."""
        if name is not None:
            _check_name_text(name, "name")
        _check_range(limit, 1, MAX_CONSUMER_LIST, "limit")
        mine = [e for (n, _), e in self.consumers.items() if name is None or n == name]
        mine.sort(key=lambda e: (e.name, "" if e.tenant_id is None else e.tenant_id))
        return mine[:limit]


def _check_consumer_json(text: object, what: str) -> None:
    """JSON text the ABC takes as a consumer's cursor: within its byte bound, storable."""
    if not isinstance(text, str) or len(text.encode("utf-8", "surrogatepass")) > (
        MAX_CONSUMER_CURSOR_BYTES
    ):
        raise RecordInvalidError(detail=what)
    check_text(text, what)


def _check_task_names(names: Sequence[str]) -> None:
    """A list (not a string) of at most `MAX_TASK_BATCH` distinct, valid names."""
    if isinstance(names, str):
        raise RecordInvalidError(detail="names")
    if len(names) > MAX_TASK_BATCH:
        raise BatchTooLargeError(detail=str(len(names)))
    for n in names:
        _check_name_text(n, "name")
    if len(names) != len(set(names)):
        raise RecordInvalidError(detail="names")


def _check_advance(advance: SweepAdvance) -> None:
    """An advance the ABC accepts, its fence aside: a run id, counts in range, a cursor of JSON
    text within its limit, a time."""
    _check_name_text(advance.run_id, "run_id")
    _check_range(advance.batch, 1, MAX_SWEEP_ROWS, "batch")
    _check_range(advance.span, 1, advance.batch, "span")
    _check_range(advance.rows, 0, MAX_SWEEP_ROWS, "rows")
    _check_range(advance.errors, 0, MAX_SWEEP_ROWS, "errors")
    if advance.cursor_json is not None:
        check_text(advance.cursor_json, "cursor_json")
        if len(advance.cursor_json.encode("utf-8")) > MAX_SWEEP_CURSOR_BYTES:
            raise RecordInvalidError(detail="cursor_json")
    _check_range(advance.now_ms, 0, MAX_TIME_MS, "now_ms")


def _next_window(e: SweepRecord, advance: SweepAdvance) -> bool:
    """Whether `advance`'s batches are the ones after `e`'s: its first batch (the last,
    `batch`, less the `span - 1` before it) is `e.batches + 1`."""
    first = advance.batch - advance.span + 1
    return first == e.batches + 1


def _advanced(e: SweepRecord, advance: SweepAdvance) -> SweepRecord:
    """Entry `e` with batches up to `advance.batch` recorded: its counts added, its cursor
    replaced."""
    return replace(
        e,
        batches=advance.batch,
        rows=e.rows + advance.rows,
        errors=e.errors + advance.errors,
        cursor_json=advance.cursor_json,
        updated_at_ms=advance.now_ms,
    )


def _check_sweep_fence(fence: Fence) -> None:
    """A fence the ABC accepts: an id and a worker as names, a count of at least 1."""
    _check_name_text(fence.job_id, "fence.job_id")
    _check_name_text(fence.worker_id, "fence.worker_id")
    _check_range(fence.claims, 1, 2**62, "fence.claims")


def _check_tenant_text(tenant_id: object) -> None:
    if tenant_id is not None:
        _check_name_text(tenant_id, "tenant_id")


def _check_lease_batch(n: int) -> None:
    if n > MAX_LEASE_BATCH:
        raise BatchTooLargeError(detail=str(n))


def _check_lease_key(key: object) -> None:
    _check_name_text(key, "key", MAX_LEASE_KEY_BYTES)


def _check_name_text(value: object, what: str, max_bytes: int = 200) -> None:
    """A non-empty string of at most `max_bytes` UTF-8 bytes with no NUL and no surrogate code
    point, which UTF-8 cannot encode (RecordInvalid)."""
    if (
        not isinstance(value, str)
        or not value
        or "\x00" in value
        or any("\ud800" <= c <= "\udfff" for c in value)
        or len(value.encode("utf-8")) > max_bytes
    ):
        raise RecordInvalidError(detail=what)


def _check_range(value: object, lo: int, hi: int, what: str) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise RecordInvalidError(detail=what)


def _check_wait(wait: EventWait) -> None:
    """A wait whose match is an object, with a valid tenant and end when it has them."""
    if not _is_object_text(wait.match_json):
        raise RecordInvalidError("a match is an object", detail="wait.match_json")
    if wait.tenant_id is not None:
        _check_name_text(wait.tenant_id, "wait.tenant_id")
    if wait.until_ms is not None:
        _check_range(wait.until_ms, 0, MAX_TIME_MS, "wait.until_ms")


def _is_object_text(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def _same(a: object, b: object) -> bool:
    """Equal as JSON values the way a store compares them: numbers by value, never a boolean
    for a number, arrays in order, objects key by key (written out, not taken from the library)."""
    if type(a) is bool or type(b) is bool:
        return type(a) is bool and type(b) is bool and a == b
    numbers = (int, float)
    if type(a) in numbers and type(b) in numbers:
        return a == b
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict and type(b) is dict:
        return sorted(a) == sorted(b) and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _matches(match: dict[str, object], data: object) -> bool:
    return not match or (
        type(data) is dict and all(k in data and _same(v, data[k]) for k, v in match.items())
    )


def _check_bulk(job_ids: Sequence[str]) -> None:
    if len(job_ids) > MAX_BULK_IDS:
        raise BatchTooLargeError(detail=f"{len(job_ids)} ids")
    for i in job_ids:
        if not isinstance(i, str) or not i:
            raise RecordInvalidError(detail="job_ids")


def _nack_column(n: Nack) -> str:
    """The counter a landed nack moves: written out per kind, not taken from the library."""
    if n.kind == NackKind.FAIL:
        return "dead_lettered" if n.dead_letter else "dropped"
    return {
        NackKind.RETRY: "retried",
        NackKind.PARK: "suspended",
        NackKind.SHED: "shed",
        NackKind.INTERRUPT: "interrupted",
        NackKind.REFUSE: "refused",
    }[n.kind]


def _an_int_in(value: object, lo: int, hi: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi


def _after_nack(r: JobRecord, n: Nack) -> JobRecord:
    """The row a landed nack leaves: which kinds spend the attempt, which finish the job."""
    progress = n.progress_json if n.progress_json is not None else r.progress_json
    outcome = _NACK_OUTCOMES[n.kind]
    if n.kind == NackKind.FAIL and not n.dead_letter:
        outcome = AttemptOutcome.FAILED
    history = _history(r, n.now_ms, outcome, attempt_error(n.error))
    r = replace(r, lease_until_ms=None, progress_json=progress, attempts=history)
    if n.kind == NackKind.RETRY:
        return replace(r, state=JobState.READY, run_at_ms=n.run_at_ms, last_error=n.error)
    if n.kind == NackKind.FAIL:
        state = JobState.DEAD if n.dead_letter else JobState.FAILED
        return replace(r, state=state, finished_at_ms=n.now_ms, last_error=n.error)
    # Every other kind hands the attempt back: the job did not get to fail.
    given_back = r.attempt - 1
    if n.kind == NackKind.PARK:
        return replace(r, state=JobState.PARKED, run_at_ms=n.run_at_ms, attempt=given_back)
    if n.kind in (NackKind.SHED, NackKind.INTERRUPT):
        run_at = n.run_at_ms if n.run_at_ms is not None else n.now_ms
        return replace(r, state=JobState.READY, run_at_ms=run_at, attempt=given_back)
    if n.kind == NackKind.REFUSE:
        return replace(
            r,
            state=JobState.FAILED,
            finished_at_ms=n.now_ms,
            last_error=n.error,
            attempt=given_back,
        )
    raise AssertionError(f"unknown nack kind {n.kind!r}")


# -- attempts --
#: What each nack kind writes as its claim's outcome (a FAIL without dead letter: FAILED).
_NACK_OUTCOMES = {
    NackKind.RETRY: AttemptOutcome.RETRIED,
    NackKind.FAIL: AttemptOutcome.DEAD,
    NackKind.PARK: AttemptOutcome.PARKED,
    NackKind.SHED: AttemptOutcome.SHED,
    NackKind.INTERRUPT: AttemptOutcome.INTERRUPTED,
    NackKind.REFUSE: AttemptOutcome.REFUSED,
}


def _history(
    r: JobRecord, now_ms: int, outcome: AttemptOutcome, error: AttemptError
) -> tuple[AttemptRecord, ...]:
    """The running row `r`'s history once its claim ended now: one entry appended, only the
    last `ATTEMPT_HISTORY` kept."""
    assert r.claimed_by is not None and r.claimed_at_ms is not None, r
    entry = AttemptRecord(
        r.attempt, r.claims, r.claimed_by, r.claimed_at_ms, now_ms, outcome, *error
    )
    kept = [*r.attempts, entry]
    return tuple(kept[max(0, len(kept) - ATTEMPT_HISTORY) :])


# -- postings --
#: An account and a currency as the contract spells them (restated, not imported).
_ACCOUNT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,199}")
_CURRENCY = re.compile(r"[A-Z][A-Z0-9]{2,11}")


def _check_account(account: object) -> None:
    if not isinstance(account, str) or not _ACCOUNT.fullmatch(account):
        raise LedgerAccountInvalidError(detail=repr(account))


def _posting_lines(lines: object) -> list[PostingLine]:
    """The lines of a posting the contract takes, in the order its refusals are checked: the
    list and its size; per line its type, account, currency, amount, and no (account,
    currency) twice; then each currency summing to zero."""
    if not isinstance(lines, list | tuple) or not 2 <= len(lines) <= MAX_POSTING_LINES:
        raise LedgerLinesInvalidError(detail="lines")
    seen: set[tuple[str, str]] = set()
    for x in lines:
        if not isinstance(x, PostingLine):
            raise LedgerLinesInvalidError(detail="lines")
        _check_account(x.account)
        if not isinstance(x.currency, str) or not _CURRENCY.fullmatch(x.currency):
            raise LedgerCurrencyInvalidError(detail=repr(x.currency))
        if type(x.amount) is not int or x.amount == 0 or abs(x.amount) > MAX_POSTING_AMOUNT:
            raise LedgerAmountInvalidError(detail=repr(x.amount))
        if (x.account, x.currency) in seen:
            raise LedgerLinesInvalidError(detail="lines")
        seen.add((x.account, x.currency))
    for currency in {x.currency for x in lines}:
        if sum(x.amount for x in lines if x.currency == currency) != 0:
            raise LedgerUnbalancedError(detail=currency)
    return list(lines)
