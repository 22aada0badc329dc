"""The records that cross the driver boundary. Times are epoch ms; JSON travels as text."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Final, Literal, overload

from jobs_core.jsonform import JsonValue, loads
from jobs_core.states import JobState, Outcome

if TYPE_CHECKING:  # -- attempts -- (jobs_core.attempts imports this module)
    from jobs_core.attempts import AttemptRecord


@dataclass(frozen=True, slots=True)
class NewJob:
    """One job to insert. The caller allocates `id` and `run_id` (the outbox hands in its own)."""

    id: str
    run_id: str
    name: str
    queue: str
    #: The enqueuer's tenant, or None; never `''` (the namespace spells None as `''`).
    tenant_id: str | None
    idempotency_key: str
    input_json: str
    priority: int
    run_at_ms: int
    max_attempts: int
    created_at_ms: int
    #: Attribution only, never authority.
    enqueued_by: str | None = None
    #: The W3C `traceparent` of the enqueuer's span (tracing), or None: no span to continue.
    traceparent: str | None = None
    #: flows: the job whose durable body enqueued this one (`ctx.step.enqueue`), or None.
    parent_id: str | None = None
    #: flows: the batch (`client.batch()`) this job is a member of, or None.
    batch_id: str | None = None
    # -- acts-for --
    #: The org a run of this job acts for (its declaration's `tenant` of the input), or None
    #: (`tenant="none"`); shown and filtered on, never authority: the worker derives the org
    #: again from the input. Not the limiter's bucket (`tenant_id` is).
    acts_for: str | None = None


class NewJobs(Sequence[NewJob]):
    """The records of one batch as columns: `shared` holds every field the records share (its
    own id, run_id, idempotency_key, input_json and acts_for are those of the first record),
    the five columns each record's own. Reads as the sequence of `NewJob` it stands for; a
    driver that understands it (Redis) encodes the columns without building a `NewJob` each.
    `dumped`: every input JSON text is `jsonform.dumps`' own, valid by construction, so
    `JobDriver.job_enqueue_many` does not check it again. Only `Jobs.enqueue_many` vouches for
    that (the private `_dumped`); a batch anyone else builds is checked like a list.
    `take_fresh`: whether every id is `new_id()`'s, made for this batch and never sent (the
    private `_fresh`, also the facade's alone), so a store need not look for a row that has it.
    """

    __slots__ = (
        "_dumped",
        "_fresh",
        "acts_for",
        "ids",
        "input_jsons",
        "keys",
        "run_ids",
        "shared",
    )

    def __init__(
        self,
        shared: NewJob,
        ids: Sequence[str],
        run_ids: Sequence[str],
        keys: Sequence[str],
        input_jsons: Sequence[str],
        acts_for: Sequence[str | None] | None = None,
        *,
        _dumped: bool = False,
        _fresh: bool = False,
    ) -> None:
        """`acts_for` None: every record's is `shared.acts_for`."""
        n = len(ids)
        if not (len(run_ids) == len(keys) == len(input_jsons) == n) or (
            acts_for is not None and len(acts_for) != n
        ):
            raise ValueError("NewJobs: every column holds one value per record")
        self.shared = shared
        self.ids = ids
        self.run_ids = run_ids
        self.keys = keys
        self.input_jsons = input_jsons
        self.acts_for = acts_for
        self._dumped = _dumped
        self._fresh = _fresh

    @property
    def dumped(self) -> bool:
        """Whether the facade wrote every input JSON text with `dumps` (checked already)."""
        return self._dumped

    def take_fresh(self) -> bool:
        """True the first time only, when the facade made every id for this batch: no store
        holds one yet. Every later call answers False — a second sending (a retry after an
        outage) may find rows its first one wrote. A slice is never fresh."""
        fresh, self._fresh = self._fresh, False
        return fresh

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, at: int) -> NewJob: ...
    @overload
    def __getitem__(self, at: slice) -> NewJobs: ...
    def __getitem__(self, at: int | slice) -> NewJob | NewJobs:
        if isinstance(at, slice):
            acts = self.acts_for
            return NewJobs(
                self.shared,
                self.ids[at],
                self.run_ids[at],
                self.keys[at],
                self.input_jsons[at],
                None if acts is None else acts[at],
                _dumped=self._dumped,
            )
        acts = self.acts_for
        return self._one(
            self.ids[at],
            self.run_ids[at],
            self.keys[at],
            self.input_jsons[at],
            self.shared.acts_for if acts is None else acts[at],
        )

    def __iter__(self) -> Iterator[NewJob]:
        acts = self.acts_for
        if acts is None:
            acts = [self.shared.acts_for] * len(self.ids)
        one = self._one
        for row in zip(self.ids, self.run_ids, self.keys, self.input_jsons, acts, strict=True):
            yield one(*row)

    def _one(self, id: str, run_id: str, key: str, input_json: str, acts_for: str | None) -> NewJob:
        s = self.shared
        return NewJob(
            id,
            run_id,
            s.name,
            s.queue,
            s.tenant_id,
            key,
            input_json,
            s.priority,
            s.run_at_ms,
            s.max_attempts,
            s.created_at_ms,
            s.enqueued_by,
            s.traceparent,
            s.parent_id,
            s.batch_id,
            acts_for,
        )


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What an enqueue did: inserted `id`, or found a row (by id or live key) and wrote nothing."""

    id: str
    deduped: bool


@dataclass(frozen=True, slots=True)
class EventWait:
    """What a parked run waits for: an event named `event`, published in `[since_ms, until_ms)`,
    for the run's tenant, whose data holds every top-level key of `match_json` (a JSON object)
    with an equal value."""

    event: str
    match_json: str
    since_ms: int
    #: The tenant the waiting run acts for (None: a `tenant="none"` run). Only an event published
    #: for this very tenant, or one published for every tenant, meets the wait.
    tenant_id: str | None = None
    #: Events published at or after this time do not count (the wait's timeout); None: no end.
    until_ms: int | None = None


# -- flows: a row that waits for other rows to finish -------------------------------------------


class JoinPolicy(StrEnum):
    """What a row released from its join does when a dependency did not complete. The driver
    stores it and hands it back (`JoinState.policy`); the worker acts on it."""

    #: Run only if every dependency completed; else the worker fails it without running it.
    SUCCESS = "success"
    #: Run once every dependency finished, however each ended.
    ALWAYS = "always"


@dataclass(frozen=True, slots=True)
class JoinState:
    """A row's join: `total` distinct dependencies, `pending` of them not finished yet, and
    `failed` of the finished ones that ended other than `completed` (or no longer exist)."""

    total: int
    pending: int
    failed: int
    policy: JoinPolicy = JoinPolicy.ALWAYS


@dataclass(frozen=True, slots=True)
class JoinEnqueue:
    """Enqueue `job` to wait, parked, until every job of `after` (distinct ids) finished."""

    job: NewJob
    after: tuple[str, ...]
    policy: JoinPolicy = JoinPolicy.SUCCESS


@dataclass(frozen=True, slots=True)
class JoinEnqueueAnswer:
    """What a `join_enqueue` item did: `enqueued` as `job_enqueue` answers it, or None with the
    ids of `after` that name no row (`missing`): then nothing was written for that item."""

    enqueued: EnqueueResult | None
    missing: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job row as every driver reports it."""

    id: str
    run_id: str
    name: str
    queue: str
    tenant_id: str | None
    idempotency_key: str
    input_json: str
    state: JobState
    priority: int
    #: Attempts started; the claim moves it, a non-counting nack gives it back.
    attempt: int
    max_attempts: int
    #: Claims ever made on this row; moved by the claim, never reset. Half of the fence.
    claims: int
    #: The worker of the latest claim (kept after the row leaves `running`).
    claimed_by: str | None
    lease_until_ms: int | None
    #: When the row is runnable; `None` only for a row parked until an event.
    run_at_ms: int | None
    created_at_ms: int
    finished_at_ms: int | None
    last_error: str | None
    progress_json: str | None
    result_json: str | None
    enqueued_by: str | None
    traceparent: str | None = None
    #: The event the row waits for (a PARK nack's `wait`), set only while the row is `parked`
    #: with that wait stored; None otherwise — a park without a wait, one whose event was
    #: already stored (the row went `ready`), and once the row leaves `parked` (claimed at its
    #: timeout, woken by its event, cancelled).
    wait: EventWait | None = None
    #: flows: the row's parent (`NewJob.parent_id`) and batch (`NewJob.batch_id`), as enqueued.
    parent_id: str | None = None
    batch_id: str | None = None
    #: flows: the row's latest join (a `join_enqueue` or a PARK nack's `join`), kept after its
    #: release until the row parks on another join; None for a row that never joined.
    join: JoinState | None = None
    # -- acts-for --
    #: The org the row's runs act for, as enqueued (`NewJob.acts_for`).
    acts_for: str | None = None
    # -- attempts --
    #: When the latest claim was made (kept after the row leaves `running`); None before one.
    claimed_at_ms: int | None = None
    #: How the row's last claims ended, oldest first, at most `ATTEMPT_HISTORY`
    #: (`jobs_core.attempts`): written by the write that ended each claim.
    attempts: tuple[AttemptRecord, ...] = ()

    @property
    def input(self) -> JsonValue:
        return loads(self.input_json)


@dataclass(frozen=True, slots=True)
class Fence:
    """The claim a settle must still hold: the row is `running` with these `claims` and worker."""

    job_id: str
    claims: int
    worker_id: str


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job the caller now holds, with the fence every later write must present."""

    id: str
    run_id: str
    name: str
    queue: str
    tenant_id: str | None
    idempotency_key: str
    input_json: str
    priority: int
    attempt: int
    max_attempts: int
    claims: int
    worker_id: str
    lease_until_ms: int
    created_at_ms: int
    enqueued_by: str | None
    traceparent: str | None = None
    #: flows: the join the row was released from (a dependency wait or a parent's gather), as
    #: it stood at the claim; None for a row that never joined.
    join: JoinState | None = None

    @property
    def fence(self) -> Fence:
        return Fence(self.id, self.claims, self.worker_id)

    @property
    def input(self) -> JsonValue:
        return loads(self.input_json)

    @property
    def final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


@dataclass(frozen=True, slots=True)
class BuriedJob:
    """A row whose lease lapsed on its final attempt: the claim moved it to `dead` or `failed`."""

    id: str
    name: str
    queue: str
    state: JobState


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """A worker announcing it is alive until `now_ms + ttl_ms`."""

    worker_id: str
    info_json: str
    ttl_ms: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker registry row."""

    worker_id: str
    info_json: str
    last_beat_ms: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class ClaimParams:
    """One claim pass: up to `limit` due rows of `queues`, leased to `worker_id` for `lease_ms`."""

    queues: tuple[str, ...]
    worker_id: str
    limit: int
    lease_ms: int
    now_ms: int
    #: Job names whose exhausted lapsed rows are buried `failed` (dead_letter=False), not `dead`.
    drop_exhausted: frozenset[str] = field(default_factory=frozenset)
    #: A registry beat that rides the claim's round-trip (a claim is proof of life).
    beat: WorkerBeat | None = None
    #: When set, a lapsed lease is reclaimed or buried only if it ended at or before this time
    #: as well as by `now_ms`. A worker back from a store outage passes the moment the store
    #: last answered it before, for a grace after it answers again: a lease that lapsed while
    #: its holder could not renew it waits for that holder's settle (docs/contributing.md).
    reclaim_until_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The claimed jobs in claim order, and the rows buried on the way."""

    jobs: tuple[ClaimedJob, ...]
    #: Sorted by id. A driver whose earlier claim of the same worker buried rows it could not
    #: answer (its caller gone, its answer lost: `jobs_core.lost_claims.HeldBurials`) adds them
    #: here, so the worker's burial path runs for every burial.
    buried: tuple[BuriedJob, ...] = ()


@dataclass(frozen=True, slots=True)
class Ack:
    """Complete a held job. `progress_json`, when given, is the last progress, flushed with it."""

    fence: Fence
    now_ms: int
    result_json: str | None = None
    progress_json: str | None = None


class NackKind(StrEnum):
    """How a nack moves the row (SPEC §6)."""

    #: Back to `ready` at `run_at_ms`; the attempt stays spent.
    RETRY = "retry"
    #: Finished for good: `dead` when `dead_letter`, else `failed`.
    FAIL = "fail"
    #: Suspended (`parked`) until `run_at_ms`, or until woken when it is None; no attempt spent.
    PARK = "park"
    #: Back to `ready` at `run_at_ms` (or now); no attempt spent, `last_error` untouched.
    SHED = "shed"
    #: A drain gave it back: `ready` at `run_at_ms`, or now; no attempt spent.
    INTERRUPT = "interrupt"
    #: Refused by keyed concurrency: `failed`, no attempt spent.
    REFUSE = "refuse"


@dataclass(frozen=True, slots=True)
class Nack:
    """Give a held job back, in one of the `NackKind` ways."""

    fence: Fence
    kind: NackKind
    now_ms: int
    run_at_ms: int | None = None
    error: str | None = None
    dead_letter: bool = True
    progress_json: str | None = None
    #: With PARK only: the event that wakes the run early (`event_publish`).
    wait: EventWait | None = None
    #: With PARK only (flows): distinct job ids the row waits for, released (`ready`) once every
    #: one finished — or at `run_at_ms` when given, whichever comes first. Never with `wait`.
    join: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Extend a held job's lease to `now_ms + lease_ms`."""

    fence: Fence
    lease_ms: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class Progress:
    """Record a held job's progress (JSON text)."""

    fence: Fence
    progress_json: str
    now_ms: int


class CancelAnswer(StrEnum):
    """What `job_cancel` did."""

    CANCELLED = "cancelled"
    NOT_FOUND = "not_found"
    #: The row is finished; nothing changed.
    FINISHED = "finished"


@dataclass(frozen=True, slots=True, order=True)
class Pause:
    """A pause: every job of a queue or of a name (the claim reads both), or a scheduled task
    (the scheduler reads it; the task keeps its watermark while paused)."""

    kind: Literal["queue", "name", "task"]
    value: str


@dataclass(frozen=True, slots=True)
class PurgeParams:
    """One retention pass: delete up to `limit` finished rows whose retention has run out.

    Each `*_ms` is how long a row in that final state is kept after its `finished_at_ms`;
    `None` keeps rows in that state forever.
    """

    now_ms: int
    limit: int
    completed_ms: int | None
    cancelled_ms: int | None
    failed_ms: int | None
    dead_ms: int | None

    def keep_ms(self, state: JobState) -> int | None:
        """The retention of rows in `state` (`None`: kept forever; a live state is never purged)."""
        return {
            JobState.COMPLETED: self.completed_ms,
            JobState.CANCELLED: self.cancelled_ms,
            JobState.FAILED: self.failed_ms,
            JobState.DEAD: self.dead_ms,
        }.get(state)


# -- introspection: what an operator reads and steers ------------------------------------------


@dataclass(frozen=True, slots=True)
class JobFilter:
    """Which rows a listing keeps: every given field must match (empty `states`: any state)."""

    states: frozenset[JobState] = frozenset()
    queue: str | None = None
    name: str | None = None
    #: The enqueuer's tenant on the row; None filters nothing (rows without a tenant included).
    tenant_id: str | None = None
    #: flows: only the children of this job / the members of this batch.
    parent_id: str | None = None
    batch_id: str | None = None
    # -- acts-for --
    #: The org the row acts for (`NewJob.acts_for`); None filters nothing.
    acts_for: str | None = None

    def matches(self, r: JobRecord | JobSummary) -> bool:
        return (
            (not self.states or r.state in self.states)
            and (self.queue is None or r.queue == self.queue)
            and (self.name is None or r.name == self.name)
            and (self.tenant_id is None or r.tenant_id == self.tenant_id)
            and (self.parent_id is None or r.parent_id == self.parent_id)
            and (self.batch_id is None or r.batch_id == self.batch_id)
            and (self.acts_for is None or r.acts_for == self.acts_for)
        )


#: The most rows one `job_list` call examines unless told otherwise (`JobListParams.scan`).
LIST_SCAN: Final = 2_000


@dataclass(frozen=True, slots=True)
class JobListParams:
    """One page of `job_list`: up to `limit` rows after `cursor` (None: from the newest)."""

    filter: JobFilter = field(default_factory=JobFilter)
    limit: int = 50
    #: The `next_cursor` of the previous page of the SAME filter, as it was handed out.
    cursor: str | None = None
    #: The most rows this call examines (matching or not): a call's cost stays bounded.
    scan: int = LIST_SCAN


@dataclass(frozen=True, slots=True)
class ListKey:
    """A position in the listing order: newest first by `(created_at_ms, id)`."""

    created_at_ms: int
    id: str


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A listed row: everything but the large texts (input, result, progress, last error)."""

    id: str
    name: str
    queue: str
    tenant_id: str | None
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    claimed_by: str | None
    lease_until_ms: int | None
    run_at_ms: int | None
    created_at_ms: int
    finished_at_ms: int | None
    #: flows: as on the row.
    parent_id: str | None = None
    batch_id: str | None = None
    # -- acts-for --
    acts_for: str | None = None

    @staticmethod
    def of(r: JobRecord) -> JobSummary:
        return JobSummary(
            id=r.id,
            name=r.name,
            queue=r.queue,
            tenant_id=r.tenant_id,
            state=r.state,
            priority=r.priority,
            attempt=r.attempt,
            max_attempts=r.max_attempts,
            claimed_by=r.claimed_by,
            lease_until_ms=r.lease_until_ms,
            run_at_ms=r.run_at_ms,
            created_at_ms=r.created_at_ms,
            finished_at_ms=r.finished_at_ms,
            parent_id=r.parent_id,
            batch_id=r.batch_id,
            acts_for=r.acts_for,
        )


@dataclass(frozen=True, slots=True)
class JobSlice:
    """What a driver's `_job_list` answers: the matching rows of one bounded walk, and the key
    of the last row it examined when rows remain after it (None: the walk reached the end)."""

    jobs: tuple[JobSummary, ...]
    last_examined: ListKey | None


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a listing; `next_cursor` is None once the walk has reached the oldest row.

    A page may hold fewer than `limit` rows while `next_cursor` is set: each call examines a
    bounded number of rows (`LIST_SCAN`), so a rare filter over a big table takes several calls.
    """

    jobs: tuple[JobSummary, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue's rows by state, and when its oldest due `ready` row became due."""

    queue: str
    #: Every state, in `JobState` order, with its row count (0 included).
    counts: tuple[tuple[JobState, int], ...]
    #: The least `run_at_ms` of the queue's `ready` rows due by `now_ms`; None when none is due.
    oldest_ready_at_ms: int | None

    def count(self, state: JobState) -> int:
        return dict(self.counts)[state]


class PromoteAnswer(StrEnum):
    """What `job_promote` did with one id."""

    #: A `ready` row due later is due now.
    PROMOTED = "promoted"
    NOT_FOUND = "not_found"
    #: A `ready` row already due; nothing changed.
    ALREADY_DUE = "already_due"
    #: Running, parked or finished: not a delayed job; nothing changed.
    NOT_READY = "not_ready"


class RequeueAnswer(StrEnum):
    """What `job_requeue_many` did with one id (the single `job_requeue` raises instead)."""

    REQUEUED = "requeued"
    NOT_FOUND = "not_found"
    #: The row is live (ready, running or parked); nothing changed.
    LIVE = "live"
    #: Another live row holds its idempotency namespace; nothing changed.
    DUPLICATE = "duplicate"
    #: A plain requeue of a saga run that failed for good (its steps are being or were undone):
    #: a replay would take them for done; only a fresh requeue (a new run) takes it. Unchanged.
    UNWOUND = "unwound"


@dataclass(frozen=True, slots=True)
class RequeueParams:
    """Requeue each of `job_ids`, in order, at `now_ms`: the same run, or a fresh one.

    `fresh_run_ids` None: each row keeps its run id, so its recorded steps replay (and a row whose
    run is unwound is refused, `UNWOUND`). Else one new run id per id, in the same order: the row
    starts a FRESH run under it, with no recorded step (the caller allocates them, as it does an
    enqueue's, so a retried call is the same call).
    """

    job_ids: tuple[str, ...]
    now_ms: int
    fresh_run_ids: tuple[str, ...] | None = None

    def items(self) -> list[tuple[str, str | None]]:
        """Each id with its fresh run id (None: requeued in its run), in order."""
        fresh = self.fresh_run_ids or (None,) * len(self.job_ids)
        return list(zip(self.job_ids, fresh, strict=True))


class RemoveAnswer(StrEnum):
    """What `job_remove` did with one id."""

    REMOVED = "removed"
    NOT_FOUND = "not_found"
    #: A running row is never removed (cancel it first); nothing changed.
    RUNNING = "running"


#: The counters a settle moves, one per outcome, in this order everywhere (`CounterRow` fields).
COUNTED_OUTCOMES: Final = (
    Outcome.COMPLETED,
    Outcome.RETRIED,
    Outcome.DEAD_LETTERED,
    Outcome.DROPPED,
    Outcome.REFUSED,
    Outcome.INTERRUPTED,
    Outcome.SHED,
    Outcome.SUSPENDED,
    Outcome.CANCELLED,
)


@dataclass(frozen=True, slots=True)
class CounterRow:
    """Settles of one job name in one queue in one time bucket, per outcome (moved by the
    settling write). Keyed by queue too: an enqueue may put a name in another queue than its
    declaration's, and a queue's throughput must count what ran in it."""

    name: str
    queue: str
    #: The bucket's start (epoch ms, a multiple of `width_ms`).
    bucket_ms: int
    #: `MINUTE_MS` (recent) or `HOUR_MS` (folded).
    width_ms: int
    completed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    dropped: int = 0
    refused: int = 0
    interrupted: int = 0
    shed: int = 0
    suspended: int = 0
    cancelled: int = 0

    def get(self, outcome: Outcome) -> int:
        return int(getattr(self, outcome.name.lower()))

    @property
    def values(self) -> tuple[int, ...]:
        """The counts in `COUNTED_OUTCOMES` order."""
        return tuple(self.get(o) for o in COUNTED_OUTCOMES)


@dataclass(frozen=True, slots=True)
class CounterReadParams:
    """Counter buckets starting in `[since_ms, until_ms)`, of every name or of `names`, in every
    queue or in `queues`."""

    since_ms: int
    until_ms: int
    names: tuple[str, ...] | None = None
    queues: tuple[str, ...] | None = None


# -- durable steps and events ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One recorded step of a run: its name and the JSON form its first execution stored."""

    run_id: str
    name: str
    output_json: str
    recorded_at_ms: int


@dataclass(frozen=True, slots=True)
class StepPut:
    """Record step `name` of the run the fence's job belongs to, while the fence holds."""

    fence: Fence
    name: str
    output_json: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class EventRecord:
    """A published event: any process may send one; waiting runs whose wait matches wake."""

    id: str
    name: str
    data_json: str
    published_at_ms: int
    #: The event is not found by a wait, and may be purged, from this time on.
    expires_at_ms: int
    #: The tenant it is published for: it meets only the waits of runs acting for this tenant
    #: (None: only those of `tenant="none"` runs). Fail closed: a tenant's event never wakes
    #: another tenant's run unless it says so with `all_tenants`.
    tenant_id: str | None = None
    #: Published for every tenant (then `tenant_id` is None): it meets the waits of every run.
    all_tenants: bool = False


@dataclass(frozen=True, slots=True)
class LeaseTake:
    """Ask for a holding of `key` for `holder`, one of at most `limit` live holders, for `ttl_ms`.

    A `stamp` is a rate-limit start: releasing it leaves it counted until it expires; only
    `lease_abandon` (the start never happened) removes it early.
    """

    key: str
    holder: str
    limit: int
    ttl_ms: int
    stamp: bool = False


@dataclass(frozen=True, slots=True)
class Lease:
    """A live holding. `token` is the store's fencing token: greater for every later grant of
    the same key, so a guarded resource can refuse a holder that was superseded."""

    key: str
    holder: str
    token: int
    expires_at_ms: int
    stamp: bool = False


@dataclass(frozen=True, slots=True)
class LeaseRenew:
    """Extend the holding `(key, token)` to `now_ms + ttl_ms`."""

    key: str
    token: int
    ttl_ms: int


@dataclass(frozen=True, slots=True)
class LeaseRef:
    """The holding `(key, token)`, for `lease_release` and `lease_abandon`."""

    key: str
    token: int


@dataclass(frozen=True, slots=True)
class TaskMark:
    """The durable state of one scheduled task.

    `watermark_ms`: every occurrence at or before it is dealt with (fired, or covered by a
    catch-up fire); the scheduler fires only occurrences after it. `fired_ms` is the last
    occurrence that really dispatched a job (`task_fires()`), None before the first; arming
    and catch-up move the watermark, never it.
    """

    name: str
    watermark_ms: int
    fired_ms: int | None = None
    #: The job the last fire enqueued (or found under its key), with `fired_ms`.
    fired_job_id: str | None = None
    #: When the last fire was written (the caller's clock), with `fired_ms`.
    fired_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class TaskFire:
    """Fire one occurrence of task `name`: fenced on the watermark the firer read.

    `occurrence_ms` is the occurrence the job stands for (its idempotency key names it);
    `watermark_ms` the watermark after the fire (later than `occurrence_ms` when one catch-up
    run covers a span of missed occurrences).
    """

    name: str
    expect_ms: int
    occurrence_ms: int
    watermark_ms: int
    job: NewJob
    now_ms: int


@dataclass(frozen=True, slots=True)
class TaskFireAnswer:
    """What a fire did: `enqueued` when it landed (the job inserted or deduped by id or key),
    None when the fence refused it; `mark` is the task's stored state after the call (None:
    the task was never armed)."""

    enqueued: EnqueueResult | None
    mark: TaskMark | None

    @property
    def fired(self) -> bool:
        return self.enqueued is not None


# -- sweeps: the ledger of what factories (backfills, imports, exports) swept ---------------------

#: A sweep's status in the ledger. `running` until its run records the end; `failed` when the
#: run failed for good (a later attempt of the same run sets it `running` again).
SweepStatus = Literal["running", "completed", "failed"]
SWEEP_STATUSES: Final[tuple[SweepStatus, ...]] = ("running", "completed", "failed")
#: What swept: the factory that wrote the entry.
SweepKind = Literal["backfill", "import", "export"]
SWEEP_KINDS: Final[tuple[SweepKind, ...]] = ("backfill", "import", "export")


@dataclass(frozen=True, slots=True)
class SweepRecord:
    """One run of a sweep as the ledger holds it: what was SWEPT, keyed by the run.

    `name` is the declaration's name and `scope` the tenant it acted for (`"none"` for a
    cross-tenant sweep); `key` (`<name>:<scope>`) is what a completed entry blocks, together
    with the `environment` and the declaration's `checksum` (a changed declaration is a new
    sweep). `batches`/`rows`/`errors`/`cursor_json` move only with a batch the run records for
    the first time, so a replayed batch changes nothing.
    """

    run_id: str
    job_id: str
    name: str
    scope: str
    environment: str
    kind: SweepKind
    checksum: str
    status: SweepStatus
    #: Batches (pages) recorded so far; the next advance starts at batch `batches + 1`.
    batches: int
    #: Rows processed by the recorded batches.
    rows: int
    #: Rows refused by the recorded batches (an import's report; 0 for a backfill).
    errors: int
    #: How many rows the declaration expects (`count=`), read when the sweep started; or None.
    expected: int | None
    #: Where the next batch starts, as JSON text (None before the first batch).
    cursor_json: str | None
    #: The `X_*` code of the failure that ended the run (`failed`), else None.
    error: str | None
    started_at_ms: int
    updated_at_ms: int
    finished_at_ms: int | None

    @property
    def key(self) -> str:
        return f"{self.name}:{self.scope}"


@dataclass(frozen=True, slots=True)
class SweepStart:
    """Open (or resume) the ledger entry of run `run_id` of a sweep, fenced on its claim."""

    fence: Fence
    run_id: str
    name: str
    scope: str
    environment: str
    kind: SweepKind
    checksum: str
    expected: int | None
    now_ms: int


@dataclass(frozen=True, slots=True)
class SweepStartAnswer:
    """What `sweep_start` found: the run's entry (None: the fence does not hold for this run —
    lost, or a claim of another run —, nothing was written), or the completed entry of another
    run that blocks this one (nothing written)."""

    record: SweepRecord | None
    blocked_by: SweepRecord | None = None


@dataclass(frozen=True, slots=True)
class SweepAdvance:
    """Record the `span` batches up to batch number `batch` (1-based) of run `run_id` — batches
    `batch - span + 1` to `batch`, one window of a backfill (one batch, an import's page) —:
    their rows, their refused rows and the cursor the next batch starts at."""

    fence: Fence
    run_id: str
    batch: int
    rows: int
    errors: int
    cursor_json: str | None
    now_ms: int
    #: How many batches this advance records, ending at `batch`: from 1 to `batch`.
    span: int = 1


@dataclass(frozen=True, slots=True)
class SweepCheckpoint:
    """A step's record and its ledger advance (the step's batches: one, or a backfill's window
    of several), written as ONE fenced write: a batch is never recorded as done without being
    counted, and it costs one durable commit, not two."""

    step: StepPut
    advance: SweepAdvance


@dataclass(frozen=True, slots=True)
class SweepFinish:
    """End run `run_id`'s entry: `completed`, or `failed` with the `X_*` code that ended it."""

    fence: Fence
    run_id: str
    status: Literal["completed", "failed"]
    error: str | None
    now_ms: int


# -- postings: the ledger factory's balanced postings (`ledger()`) -------------------------------

#: What a `posting_put` did: wrote the posting and moved the balances; found the key posted with
#: the same lines (nothing written); found it posted with other lines (nothing written); or
#: found the fence not held for the key (nothing read, nothing written).
PostingStatus = Literal["applied", "already_applied", "conflict", "fence_lost"]
POSTING_STATUSES: Final[tuple[PostingStatus, ...]] = (
    "applied",
    "already_applied",
    "conflict",
    "fence_lost",
)


@dataclass(frozen=True, slots=True)
class PostingLine:
    """One line of a posting: `amount` minor units (cents, satoshis…) of `currency` on
    `account`, a debit when positive, a credit when negative; never zero."""

    account: str
    currency: str
    amount: int


@dataclass(frozen=True, slots=True)
class PostingPut:
    """Post `lines` under `key` in `tenant_id`'s ledger (None: the cross-tenant ledger of a
    `tenant="none"` factory), fenced on the claim of the job whose idempotency key is `key`.
    The ABC hands the lines sorted by (account, currency)."""

    fence: Fence
    tenant_id: str | None
    key: str
    lines: tuple[PostingLine, ...]
    now_ms: int


@dataclass(frozen=True, slots=True)
class PostingRecord:
    """A stored posting: one per (tenant, key), never changed once written."""

    tenant_id: str | None
    key: str
    #: The job whose fence it was posted under.
    job_id: str
    #: Sorted by (account, currency), code-point order.
    lines: tuple[PostingLine, ...]
    posted_at_ms: int


@dataclass(frozen=True, slots=True)
class PostingPutAnswer:
    """What a `posting_put` did, and the posting stored under the key after it (None when the
    fence did not hold: nothing was read)."""

    status: PostingStatus
    posting: PostingRecord | None


@dataclass(frozen=True, slots=True)
class BalanceRow:
    """One account's totals in one currency, over every posting of a tenant's ledger: the
    debits (positive amounts) and credits (negative amounts, as a positive sum) apart, each
    exact at any size."""

    account: str
    currency: str
    debits: int
    credits: int

    @property
    def balance(self) -> int:
        """Debits minus credits, in minor units."""
        return self.debits - self.credits


# -- consumers: where each consumer of a source stands, for one tenant ---------------------------


@dataclass(frozen=True, slots=True)
class ConsumerCursor:
    """The stored position of consumer `name` acting for `tenant_id` (None: a `tenant="none"`
    consumer): the cursor its next turn reads after, and what its last landed turn said."""

    name: str
    tenant_id: str | None
    #: What the consumer reads (`table:<table>`, `stream:<key>`, `function:<name>`).
    source: str
    #: The cursor as JSON text, exactly as the turn that stored it wrote it.
    cursor_json: str
    #: Turns that landed (each landed `consumer_cursor_put` counts one).
    turns: int
    #: Records handled by the turns that landed, summed.
    records: int
    #: Records left past the cursor when the last turn measured them (None: unknown).
    lag: int | None
    #: The worker whose turn landed last, and its job.
    holder: str
    job_id: str
    updated_at_ms: int


# -- webhooks: the endpoint ledger `webhook()` sends through, and its attempts --------------------

#: How one delivery attempt ended: the endpoint answered 2xx (`delivered`), or anything else —
#: another status, no answer, a refused redirect (`failed`).
WebhookOutcome = Literal["delivered", "failed"]
WEBHOOK_OUTCOMES: Final[tuple[WebhookOutcome, ...]] = ("delivered", "failed")


@dataclass(frozen=True, slots=True)
class WebhookEndpoint:
    """One endpoint of one tenant, as the ledger holds it: where its events go and whether they
    still may. `failures` is the streak of failed attempts since the last delivered one (or the
    operator's enable); an attempt that brings it to its job's `disable_after` disables the
    endpoint, and only `webhook_endpoint_enable` opens it again."""

    #: The tenant the endpoint belongs to, or None (a `tenant="none"` sender's).
    tenant_id: str | None
    endpoint: str
    url: str
    enabled: bool
    failures: int
    #: When an attempt disabled it (None while enabled).
    disabled_at_ms: int | None
    created_at_ms: int
    #: The last put, enable or recorded attempt.
    updated_at_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerPut:
    """Move consumer `name`'s cursor (for `tenant_id`) from `expect_json` (None: nothing stored
    yet) to `cursor_json`, fenced on the turn's claim; `records` handled, `lag` left."""

    fence: Fence
    name: str
    tenant_id: str | None
    source: str
    expect_json: str | None
    cursor_json: str
    records: int
    lag: int | None
    now_ms: int


@dataclass(frozen=True, slots=True)
class WebhookEndpointPut:
    """Register endpoint `endpoint` of `tenant_id` at `url`, or move it there (its state kept)."""

    tenant_id: str | None
    endpoint: str
    url: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class WebhookEndpointEnable:
    """The operator's re-enable: the endpoint enabled, its failure streak cleared."""

    tenant_id: str | None
    endpoint: str
    now_ms: int


@dataclass(frozen=True, slots=True)
class WebhookAttempt:
    """One delivery attempt as recorded: made by claim `claims` of job `job_id` (the pair is
    its key: one attempt per claim), to `endpoint` of `tenant_id`."""

    tenant_id: str | None
    endpoint: str
    job_id: str
    claims: int
    #: The Standard Webhooks message id (`webhook-id`), the same on every attempt of an event.
    event_id: str
    outcome: WebhookOutcome
    #: The HTTP status answered, or None: no answer (a network error, a timeout).
    status_code: int | None
    latency_ms: int
    #: The start of the response body (or of the error), sanitized and bounded; may be empty.
    excerpt: str
    #: The `X_*` code of a failed attempt, None for a delivered one.
    error: str | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class WebhookAttemptPut:
    """Record one attempt, fenced on the claim that made it, and move its endpoint's streak
    in the same write (`disable_after` failures in a row disable it)."""

    fence: Fence
    tenant_id: str | None
    endpoint: str
    event_id: str
    outcome: WebhookOutcome
    status_code: int | None
    latency_ms: int
    excerpt: str
    error: str | None
    disable_after: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class WebhookAttemptAnswer:
    """What `webhook_attempt_put` did: `recorded` (this claim's attempt is in the ledger, now
    or from before), and the endpoint as the write left it (None: the fence did not hold or
    there is no such endpoint, and nothing was written)."""

    recorded: bool
    endpoint: WebhookEndpoint | None


@dataclass(frozen=True, slots=True)
class WebhookAttemptListParams:
    """The attempts recorded for one endpoint, newest first, at most `limit`."""

    tenant_id: str | None
    endpoint: str
    limit: int
