"""The records that cross the driver boundary. Times are epoch ms; JSON travels as text."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from jobs_core.jsonform import JsonValue, loads
from jobs_core.states import JobState


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


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What an enqueue did: inserted `id`, or found a row (by id or live key) and wrote nothing."""

    id: str
    deduped: bool


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


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The claimed jobs in claim order, and the rows buried on the way."""

    jobs: tuple[ClaimedJob, ...]
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
    """A pause the claim reads: every job of a queue, or every job of a name."""

    kind: Literal["queue", "name"]
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
