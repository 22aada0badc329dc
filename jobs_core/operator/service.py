"""`Operator`: what a person (or a script, or the dashboard) sees and steers, on any driver.

Every read goes through the driver's operator family (`job_list`, `queue_stats`,
`counter_read`…) and comes back as a plain view record with its JSON form; every input, result,
progress value and stored error is redacted by the declarations in force (`RedactionPolicy`:
the live workers' and the caller's own). Single-id steering answers with the driver's answer
or raises the typed refusal (`X_JOB_NOT_FOUND`, `X_JOB_NOT_CANCELLABLE`…); the bulk forms walk
a filter's pages and act on each page in one call.

Each view needs the driver families it reads (`Capabilities`), and is refused before any call
when one is missing (`X_DRIVER_CAPABILITY_MISSING`, naming it): listing and steering need
`operator`; `queues()` and `stats()` need `operator` and `counters`, `throughput()` counters;
`workers()` the registry (`workers`); pausing `pauses`; `task_fires()` `tasks`; a job's family
(`family()`: its children and batch) and a batch's view (`batch()`) `operator` and `flows`. One
job's view (`job()`) needs the core family alone. What a view merely reads beside its own family is
absent where the driver has none: no pauses (nothing is paused), no steps, no marks, and
without a registry only the caller's declarations redact (any other job's input shows
`[redacted]` whole).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import tzinfo
from enum import StrEnum
from typing import Any, Final

from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import MAX_LIST_LIMIT, MAX_TASK_BATCH, MAX_TIME_MS, JobDriver, name_refusal
from jobs_core.errors import (
    JobNotFoundError,
    JobsError,
    NotCancellableError,
    NotPromotableError,
    NotRemovableError,
    NotRequeueableError,
    OptionInvalidError,
    RecordInvalidError,
    RequeueDuplicateError,
    RequeueUnwoundError,
)
from jobs_core.ids import derived_id, new_id
from jobs_core.job import JobHandle
from jobs_core.jsonform import JsonValue
from jobs_core.operator.attempts import AttemptView, attempt_views
from jobs_core.operator.times import relative
from jobs_core.options import count
from jobs_core.records import (
    COUNTED_OUTCOMES,
    CancelAnswer,
    CounterReadParams,
    CounterRow,
    JobFilter,
    JobListParams,
    JobRecord,
    JobSummary,
    JoinState,
    Pause,
    PromoteAnswer,
    RemoveAnswer,
    RequeueAnswer,
    RequeueParams,
    TaskMark,
    WorkerInfo,
)
from jobs_core.redact import RedactionPolicy
from jobs_core.scheduler.task import TaskHandle
from jobs_core.semantics import HOUR_MS, MINUTE_MS, fold_before, hour_of, minute_of
from jobs_core.states import LIVE_STATES, JobState

#: How many listing calls one page of the operator's may take to fill up (each examines at most
#: the driver's scan budget): a rare filter over a big table answers short rather than slow.
MAX_CALLS_PER_PAGE: Final = 25
#: How many listing calls counting a job's children or a batch's members may take (each
#: examines at most the driver's scan budget and answers at most `MAX_LIST_LIMIT` matches): a
#: family past that is answered counted so far, `complete=False`, with the cursor to go on.
MAX_CALLS_PER_COUNT: Final = 40
#: The window `queues()` reports throughput over.
THROUGHPUT_WINDOW_MS: Final = 5 * MINUTE_MS


class Action(StrEnum):
    """A steering verb an operator applies to jobs."""

    CANCEL = "cancel"
    #: Run a finished job again in its run: its recorded steps replay. A saga run that failed
    #: for good (its steps are undone) is refused, `unwound` (`X_JOB_REQUEUE_UNWOUND`).
    REQUEUE = "requeue"
    #: Run a finished job again as a FRESH run: a new run id, no recorded step replays.
    REQUEUE_FRESH = "requeue-fresh"
    PROMOTE = "promote"
    REMOVE = "remove"


Answer = CancelAnswer | RequeueAnswer | PromoteAnswer | RemoveAnswer

#: The answers of each verb that changed the row.
DONE: Final[frozenset[Answer]] = frozenset(
    {
        CancelAnswer.CANCELLED,
        RequeueAnswer.REQUEUED,
        PromoteAnswer.PROMOTED,
        RemoveAnswer.REMOVED,
    }
)


def refusal_for(action: Action, job_id: str, answer: Answer) -> JobsError | None:
    """The typed refusal a single-id verb raises for `answer`; None when it did the job (or had
    nothing to do: promoting a job already due is not a refusal)."""
    if answer in DONE or answer is PromoteAnswer.ALREADY_DUE:
        return None
    if answer in (
        CancelAnswer.NOT_FOUND,
        RequeueAnswer.NOT_FOUND,
        PromoteAnswer.NOT_FOUND,
        RemoveAnswer.NOT_FOUND,
    ):
        return JobNotFoundError(detail=job_id)
    refusals: dict[Answer, JobsError] = {
        CancelAnswer.FINISHED: NotCancellableError(detail=job_id),
        RequeueAnswer.LIVE: NotRequeueableError(detail=job_id),
        RequeueAnswer.DUPLICATE: RequeueDuplicateError(detail=job_id),
        RequeueAnswer.UNWOUND: RequeueUnwoundError(detail=job_id),
        PromoteAnswer.NOT_READY: NotPromotableError(detail=job_id),
        RemoveAnswer.RUNNING: NotRemovableError(detail=job_id),
    }
    return refusals[answer]


def _error_doc(text: str | None) -> JsonValue:
    """A stored `last_error` as its JSON document when it is one (the worker's), else its text."""
    if text is None:
        return None
    try:
        doc: JsonValue = json.loads(text)
    except ValueError:
        return text
    return doc


@dataclass(frozen=True, slots=True)
class StepView:
    """One recorded step of a job's run: its name, its stored output redacted, when."""

    name: str
    output: JsonValue
    recorded_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "output": self.output, "recorded_at_ms": self.recorded_at_ms}


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as an operator may see it: every field, its texts redacted."""

    record: JobRecord
    input: JsonValue
    result: JsonValue
    progress: JsonValue
    #: The stored error: the worker's JSON document (type, message, code, traceback) or text.
    error: JsonValue
    #: Whether a live worker (or the caller) declares this job name; if not, its input shows
    #: `[redacted]` whole.
    declared: bool
    #: The match of the event a parked row waits for, redacted as a result is (a match may
    #: repeat an input's secret); None when the row holds no wait (`record.wait`).
    wait_match: JsonValue = None
    #: The run's recorded durable steps, oldest first (none on a driver without steps).
    steps: tuple[StepView, ...] = ()
    #: acts-for: the org the row acts for as it may be shown (`RedactionPolicy.org`).
    acts_for: str | None = None
    # -- attempts -- its ended claims, oldest first, then the running one (the timeline).
    attempts: tuple[AttemptView, ...] = ()

    def wait_json(self) -> dict[str, Any] | None:
        """What the row waits for — `{"event", "match", "since_ms"}` — or None."""
        w = self.record.wait
        if w is None:
            return None
        return {"event": w.event, "match": self.wait_match, "since_ms": w.since_ms}

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "id": r.id,
            "run_id": r.run_id,
            "name": r.name,
            "queue": r.queue,
            "tenant_id": r.tenant_id,
            "acts_for": self.acts_for,
            "idempotency_key": r.idempotency_key,
            "state": r.state.value,
            "priority": r.priority,
            "attempt": r.attempt,
            "max_attempts": r.max_attempts,
            "claims": r.claims,
            "claimed_by": r.claimed_by,
            "lease_until_ms": r.lease_until_ms,
            "run_at_ms": r.run_at_ms,
            "created_at_ms": r.created_at_ms,
            "finished_at_ms": r.finished_at_ms,
            "enqueued_by": r.enqueued_by,
            "traceparent": r.traceparent,
            "input": self.input,
            "result": self.result,
            "progress": self.progress,
            "error": self.error,
            "declared": self.declared,
            "wait": self.wait_json(),
            "steps": [st.to_json() for st in self.steps],
            "parent_id": r.parent_id,
            "batch_id": r.batch_id,
            "join": join_json(r.join),
            # -- attempts --
            "claimed_at_ms": r.claimed_at_ms,
            "attempts": [a.to_json() for a in self.attempts],
        }


def join_json(j: JoinState | None) -> dict[str, Any] | None:
    """A row's join as JSON: `{"total", "pending", "failed", "policy"}`, or None."""
    if j is None:
        return None
    return {"total": j.total, "pending": j.pending, "failed": j.failed, "policy": j.policy.value}


def summary_json(j: JobSummary) -> dict[str, Any]:
    return {
        "id": j.id,
        "name": j.name,
        "queue": j.queue,
        "tenant_id": j.tenant_id,
        "acts_for": j.acts_for,
        "state": j.state.value,
        "priority": j.priority,
        "attempt": j.attempt,
        "max_attempts": j.max_attempts,
        "claimed_by": j.claimed_by,
        "lease_until_ms": j.lease_until_ms,
        "run_at_ms": j.run_at_ms,
        "created_at_ms": j.created_at_ms,
        "finished_at_ms": j.finished_at_ms,
        "parent_id": j.parent_id,
        "batch_id": j.batch_id,
    }


@dataclass(frozen=True, slots=True)
class JobsPage:
    """A page of the listing, filled by as many driver calls as it took (at most a bound)."""

    jobs: tuple[JobSummary, ...]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"jobs": [summary_json(j) for j in self.jobs], "next_cursor": self.next_cursor}


def _tally(rows: Sequence[CounterRow]) -> dict[str, int]:
    out = {o.name.lower(): 0 for o in COUNTED_OUTCOMES}
    for r in rows:
        for o in COUNTED_OUTCOMES:
            out[o.name.lower()] += r.get(o)
    return out


@dataclass(frozen=True, slots=True)
class QueueView:
    """One queue: its rows by state, how long its oldest due job has waited, its demand, whether
    it is paused, and what it settled over the last `window_ms`."""

    queue: str
    counts: dict[str, int]
    oldest_ready_age_ms: int | None
    demand: int
    paused: bool
    window_ms: int
    settled: dict[str, int]

    @property
    def completed_per_minute(self) -> float:
        return self.settled["completed"] * MINUTE_MS / self.window_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "counts": self.counts,
            "oldest_ready_age_s": (
                None if self.oldest_ready_age_ms is None else self.oldest_ready_age_ms / 1000
            ),
            "demand": self.demand,
            "paused": self.paused,
            "window_s": self.window_ms / 1000,
            "settled": self.settled,
            "completed_per_minute": round(self.completed_per_minute, 3),
        }


@dataclass(frozen=True, slots=True)
class Throughput:
    """One queue's settles per minute from `start_ms` on: completed, and failed (retried,
    dead-lettered or refused)."""

    start_ms: int
    completed: list[int]
    failed: list[int]


@dataclass(frozen=True, slots=True)
class WorkerView:
    """A live worker: its registry row, read."""

    worker_id: str
    host: str | None
    pid: int | None
    queues: list[str]
    concurrency: int | None
    jobs: list[str]
    last_beat_ms: int
    expires_at_ms: int

    @staticmethod
    def of(w: WorkerInfo) -> WorkerView:
        try:
            info = json.loads(w.info_json)
        except ValueError:
            info = {}
        if not isinstance(info, dict):
            info = {}
        jobs = info.get("jobs")
        return WorkerView(
            worker_id=w.worker_id,
            host=info.get("host") if isinstance(info.get("host"), str) else None,
            pid=info.get("pid") if isinstance(info.get("pid"), int) else None,
            queues=[q for q in info.get("queues", []) if isinstance(q, str)],
            concurrency=(
                info.get("concurrency") if isinstance(info.get("concurrency"), int) else None
            ),
            jobs=sorted(jobs) if isinstance(jobs, dict) else [],
            last_beat_ms=w.last_beat_ms,
            expires_at_ms=w.expires_at_ms,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "worker_id": self.worker_id,
            "host": self.host,
            "pid": self.pid,
            "queues": self.queues,
            "concurrency": self.concurrency,
            "jobs": self.jobs,
            "last_beat_ms": self.last_beat_ms,
            "expires_at_ms": self.expires_at_ms,
        }


@dataclass(frozen=True, slots=True)
class TaskView:
    """A declared task and its durable mark, read."""

    handle: TaskHandle
    mark: TaskMark | None
    paused: bool
    #: The next occurrence a leader would fire: after the watermark, or after now for a task
    #: never armed (a first sight fires nothing from before it). A pause keeps the watermark,
    #: so a paused task's may be past: it is then due, and fires once on resume (`fire_said`).
    next_fire_ms: int

    @staticmethod
    def of(h: TaskHandle, mark: TaskMark | None, paused: bool, now_ms: int) -> TaskView:
        return TaskView(
            h, mark, paused, h.schedule.next_after(mark.watermark_ms if mark else now_ms)
        )

    @property
    def last_fire_ms(self) -> int | None:
        return self.mark.fired_ms if self.mark is not None else None

    def local(self, at_ms: int | None) -> str | None:
        """`at_ms` in the task's own time zone, ISO 8601."""
        return None if at_ms is None else self.handle.schedule.local(at_ms).isoformat()

    def shown(self, at_ms: int, zone: tzinfo | None = None) -> str:
        """`at_ms` for people, in `zone` (else the task's own time zone): to the minute, or to
        the second for a cron that names seconds (a 10-second cron's fires are not all "the
        same minute")."""
        schedule = self.handle.schedule
        spec = "%Y-%m-%d %H:%M:%S %Z" if schedule.has_seconds else "%Y-%m-%d %H:%M %Z"
        at = schedule.local(at_ms)
        return (at if zone is None else at.astimezone(zone)).strftime(spec)

    def fire_said(self, now_ms: int, zone: tzinfo | None = None) -> str:
        """The next fire for people, as `ujobs tasks` and the dashboard's schedule show it:
        `<when> (in 5 min)`; paused, what a resume brings — `paused: would fire <when> (in 5
        min) if resumed by then`, or, its next occurrence past, `paused: fires once on resume
        (due since <when> (8 s ago))`, that one fire standing for every occurrence missed as
        its catch-up says. Never a past time read as a fire that came late."""
        at = self.next_fire_ms
        when = f"{self.shown(at, zone)} ({relative(at, now_ms)})"
        if not self.paused:
            return when
        if at > now_ms:
            return f"paused: would fire {when} if resumed by then"
        return f"paused: fires once on resume (due since {when})"

    def to_json(self) -> dict[str, Any]:
        h, mark = self.handle, self.mark
        return {
            "name": h.name,
            "cron": h.cron,
            "tz": h.tz,
            "job": h.job.name,
            "catch_up": h.catch_up,
            "paused": self.paused,
            "next_fire_ms": self.next_fire_ms,
            "next_fire": self.local(self.next_fire_ms),
            "last_fire_ms": self.last_fire_ms,
            "last_fire": self.local(self.last_fire_ms),
            "last_job_id": mark.fired_job_id if mark else None,
            "watermark_ms": mark.watermark_ms if mark else None,
        }


@dataclass(frozen=True, slots=True)
class NameStats:
    """What one job name settled over the window, in every queue."""

    name: str
    settled: dict[str, int]


def counted_since(now_ms: int, window_ms: int) -> int:
    """Where the counters of a window of `window_ms` back from `now_ms` start: the minute the
    window starts in, or the hour, when that minute may be folded already.

    Minute buckets before `fold_before(now_ms)` may be summed into their hour bucket by now,
    which keeps no minutes: a window starting inside such an hour counts that hour whole (it
    reaches back to the hour's start, never skips it), whether or not the fold ran yet, so one
    window reads the same counts before and after a fold."""
    since = minute_of(max(0, now_ms - window_ms))
    return hour_of(since) if since < fold_before(now_ms) else since


@dataclass(frozen=True, slots=True)
class StatsView:
    """Rows by state across every queue, and what each job name settled from `since_ms` on
    (the window asked for, widened to the start of a folded hour: `counted_since`)."""

    now_ms: int
    window_ms: int
    states: dict[str, int]
    names: list[NameStats]
    totals: dict[str, int] = field(default_factory=dict)
    since_ms: int = 0

    @property
    def widened(self) -> bool:
        """Whether counting began before the window (at the start of a folded hour)."""
        return self.since_ms < minute_of(max(0, self.now_ms - self.window_ms))

    def to_json(self) -> dict[str, Any]:
        return {
            "now_ms": self.now_ms,
            "window_s": self.window_ms / 1000,
            "since_ms": self.since_ms,
            "states": self.states,
            "totals": self.totals,
            "names": {n.name: n.settled for n in self.names},
        }


@dataclass(frozen=True, slots=True)
class BulkReport:
    """What a bulk verb did: how many rows gave each answer, and the rows it looked at."""

    action: Action
    answers: dict[str, int]
    examined: int

    @property
    def done(self) -> int:
        return sum(n for a, n in self.answers.items() if a in {d.value for d in DONE})

    @property
    def advice(self) -> str | None:
        """What to do about the refusals that have a remedy (unwound saga runs), or None."""
        unwound = self.answers.get(RequeueAnswer.UNWOUND.value, 0)
        if not unwound:
            return None
        return (
            f"{unwound} unwound: saga runs that failed for good, their steps undone (or being"
            " undone), are not replayed; requeue them as fresh runs (`ujobs jobs requeue"
            " --fresh`, the job page's requeue-fresh)"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.action.value,
            "answers": self.answers,
            "done": self.done,
            "examined": self.examined,
        }


@dataclass(frozen=True, slots=True)
class Census:
    """The rows one filter keeps (a job's children, a batch's members), counted by state.
    `complete` is False when counting stopped at its bound (`MAX_CALLS_PER_COUNT` listing
    calls): the counts are then a lower bound, and `cursor` lists on from where it stopped."""

    counts: dict[str, int]
    complete: bool
    cursor: str | None = None

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def live(self) -> int:
        return sum(n for s, n in self.counts.items() if JobState(s) in LIVE_STATES)

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": self.counts,
            "total": self.total,
            "live": self.live,
            "complete": self.complete,
        }


@dataclass(frozen=True, slots=True)
class FamilyView:
    """A job's place in a flow: its parent (the job whose body enqueued it), its children by
    state, and its batch's members by state."""

    job_id: str
    parent_id: str | None
    children: Census
    batch_id: str | None
    batch: Census | None

    def to_json(self) -> dict[str, Any]:
        return {
            "parent_id": self.parent_id,
            "children": self.children.to_json(),
            "batch_id": self.batch_id,
            "batch": None if self.batch is None else self.batch.to_json(),
        }


def batch_callback_ids(batch_id: str) -> tuple[str, str]:
    """The ids a batch's callbacks are enqueued under (`on_complete`, `on_success`): the
    runtime derives them from the batch id (`jobs_core.batch`), so a batch's page finds them
    without a scan."""
    return derived_id(batch_id, "on_complete"), derived_id(batch_id, "on_success")


@dataclass(frozen=True, slots=True)
class BatchView:
    """A batch's progress: its members by state (the callbacks not counted), and its callback
    jobs that exist, by role (`on_complete`, `on_success`)."""

    batch_id: str
    members: Census
    callbacks: dict[str, JobSummary]

    @property
    def finished(self) -> bool:
        """Whether every member counted is finished (and the count is complete)."""
        return self.members.complete and self.members.live == 0

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "members": self.members.to_json(),
            "finished": self.finished,
            "callbacks": {role: summary_json(j) for role, j in self.callbacks.items()},
        }


@dataclass(frozen=True, slots=True)
class CancelReport:
    """What a cancel did: each named job's answer, in order, and how many of their live
    descendants the cascade cancelled (`cascaded`) out of those it looked at (`examined`)."""

    answers: list[CancelAnswer]
    cascaded: int = 0
    examined: int = 0

    def to_json(self, job_ids: Sequence[str]) -> dict[str, Any]:
        return {
            "answers": [
                {"id": i, "answer": a.value} for i, a in zip(job_ids, self.answers, strict=True)
            ],
            "children_cancelled": self.cascaded,
            "descendants_examined": self.examined,
        }


#: The longest series `Operator.throughput` answers, in minutes (30 days).
MAX_THROUGHPUT_MINUTES: Final = 30 * 24 * 60


class Operator:
    """See and steer the jobs of one driver. `handles` are declarations the caller knows (an
    app module), added to the live workers' for redaction."""

    def __init__(
        self,
        driver: JobDriver,
        *,
        clock: Clock | None = None,
        handles: Sequence[JobHandle] = (),
    ) -> None:
        self.driver = driver
        self.clock = clock or SystemClock()
        self._local = RedactionPolicy.of((h.name, h.sensitive) for h in handles)

    async def policy(self) -> RedactionPolicy:
        """The declarations in force: the live workers' (where the driver keeps a registry) and
        the caller's."""
        if not self.driver.capabilities().workers:
            return self._local
        workers = await self.driver.worker_list(self.clock.now_ms())
        return RedactionPolicy.from_workers(workers).merged(self._local)

    async def _pauses(self) -> list[Pause]:
        """Every pause; none on a driver without the pause family (nothing can be paused)."""
        return await self.driver.pause_list() if self.driver.capabilities().pauses else []

    # -- reads ----------------------------------------------------------------------------------

    async def jobs(
        self,
        f: JobFilter | None = None,
        *,
        limit: int = 50,
        cursor: str | None = None,
        max_calls: int = MAX_CALLS_PER_PAGE,
    ) -> JobsPage:
        """Up to `limit` rows the filter keeps, newest first, after `cursor`; follows the
        driver's short pages (a rare filter) for up to `max_calls` calls, then answers short
        with the cursor to go on from."""
        self.driver.require("operator", what="listing jobs")
        f = f if f is not None else JobFilter()
        for option, value in (("limit", limit), ("max_calls", max_calls)):
            if isinstance(value, bool) or not isinstance(value, int):
                # Compared below: another type was a bare TypeError.
                raise OptionInvalidError("must be an integer", detail=option)
        limit = min(max(1, limit), MAX_LIST_LIMIT)
        taken: list[JobSummary] = []
        for _ in range(max(1, max_calls)):
            page = await self.driver.job_list(JobListParams(f, limit - len(taken), cursor))
            taken += page.jobs
            cursor = page.next_cursor
            if cursor is None or len(taken) >= limit:
                break
        return JobsPage(await self._shown_orgs(taken), cursor)

    async def _shown_orgs(self, rows: Sequence[JobSummary]) -> tuple[JobSummary, ...]:
        """acts-for: `rows` with each org as the declarations let it be shown: one registry
        read, and one read of the inputs of the rows whose names hide fields (to tell whether
        the org is one of their secrets) — none when no listed row acts for an org."""
        if all(j.acts_for is None for j in rows):
            return tuple(rows)
        policy = await self.policy()
        wanted = [j.id for j in rows if j.acts_for and policy.needs_input_for_org(j.name)]
        inputs = await self.driver.job_get_many(wanted) if wanted else {}
        out = []
        for j in rows:
            got = inputs.get(j.id)
            shown = policy.org(j.name, j.acts_for, None if got is None else got.input_json)
            out.append(j if shown == j.acts_for else replace(j, acts_for=shown))
        return tuple(out)

    async def job(self, job_id: str) -> JobView:
        """One job with its texts redacted; `X_JOB_NOT_FOUND` when no row has this id."""
        rows = await self.driver.job_get_many([job_id])
        r = rows.get(job_id)
        if r is None:
            raise JobNotFoundError(detail=job_id)
        policy = await self.policy()
        steps: tuple[StepView, ...] = ()
        if self.driver.capabilities().steps:
            steps = tuple(
                StepView(
                    st.name,
                    policy.value(r.name, st.output_json, r.input_json),
                    st.recorded_at_ms,
                )
                for st in await self.driver.step_list(r.run_id)
            )
        return self.view(r, policy, steps)

    def view(
        self, r: JobRecord, policy: RedactionPolicy, steps: tuple[StepView, ...] = ()
    ) -> JobView:
        """`r` as `policy` lets it be shown."""
        return JobView(
            steps=steps,
            record=r,
            input=policy.input(r.name, r.input_json),
            result=policy.value(r.name, r.result_json, r.input_json),
            progress=policy.value(r.name, r.progress_json, r.input_json),
            error=_error_doc(policy.text(r.name, r.last_error, r.input_json)),
            declared=policy.knows(r.name),
            acts_for=policy.org(r.name, r.acts_for, r.input_json),
            wait_match=None
            if r.wait is None
            else policy.value(r.name, r.wait.match_json, r.input_json),
            attempts=attempt_views(r, policy, steps),  # -- attempts --
        )

    async def census(
        self, f: JobFilter, *, exclude: frozenset[str] = frozenset(), max_calls: int = 0
    ) -> Census:
        """The rows `f` keeps, counted by state (ids in `exclude` not counted), in at most
        `max_calls` listing calls (`MAX_CALLS_PER_COUNT` when 0)."""
        self.driver.require("operator", what="counting jobs")
        counts = dict.fromkeys((s.value for s in JobState), 0)
        cursor: str | None = None
        for _ in range(max_calls or MAX_CALLS_PER_COUNT):
            page = await self.driver.job_list(JobListParams(f, MAX_LIST_LIMIT, cursor))
            for j in page.jobs:
                if j.id not in exclude:
                    counts[j.state.value] += 1
            cursor = page.next_cursor
            if cursor is None:
                return Census(counts, True)
        return Census(counts, False, cursor)

    async def family(self, record: JobRecord) -> FamilyView:
        """`record`'s parent, its children by state and its batch's members by state: a
        bounded count each (`Census`). Refused without `flows` (`X_DRIVER_CAPABILITY_MISSING`)."""
        self.driver.require("operator", "flows", what="a job's children and batch")
        children = await self.census(JobFilter(parent_id=record.id))
        batch = None
        if record.batch_id is not None:
            batch = await self.census(
                JobFilter(batch_id=record.batch_id),
                exclude=frozenset(batch_callback_ids(record.batch_id)),
            )
        return FamilyView(record.id, record.parent_id, children, record.batch_id, batch)

    async def batch(self, batch_id: str) -> BatchView:
        """A batch's members by state and its callbacks; `X_JOB_NOT_FOUND` when no member nor
        callback exists. Refused without `flows` (`X_DRIVER_CAPABILITY_MISSING`)."""
        self.driver.require("operator", "flows", what="a batch's view")
        if (why := name_refusal(batch_id)) is not None:
            # Before its callbacks' ids are derived from it (a lone surrogate: UnicodeEncodeError).
            raise RecordInvalidError(f"a batch id {why}", detail="batch_id")
        ids = batch_callback_ids(batch_id)
        members = await self.census(JobFilter(batch_id=batch_id), exclude=frozenset(ids))
        rows = await self.driver.job_get_many(list(ids))
        callbacks = {
            role: JobSummary.of(rows[i])
            for role, i in zip(("on_complete", "on_success"), ids, strict=True)
            if i in rows
        }
        if members.total == 0 and not callbacks and members.complete:
            raise JobNotFoundError(f"no job of batch {batch_id!r}", detail=batch_id)
        return BatchView(batch_id, members, callbacks)

    async def queues(self) -> list[QueueView]:
        """Every queue holding rows or paused, with its counts, age, demand and throughput."""
        self.driver.require("operator", "counters", what="the queues view")
        now = self.clock.now_ms()
        since = now - THROUGHPUT_WINDOW_MS
        # Three independent reads at once: the page waits for the slowest, not for their sum.
        all_stats, pauses, rows = await asyncio.gather(
            self.driver.queue_stats(now),
            self._pauses(),
            self.driver.counter_read(CounterReadParams(since - since % MINUTE_MS, now + 1)),
        )
        stats = {s.queue: s for s in all_stats}
        paused = {p.value for p in pauses if p.kind == "queue"}
        names = sorted(set(stats) | paused)
        demand = await self.driver.queue_demand(names, now) if names else {}
        out: list[QueueView] = []
        for q in names:
            s = stats.get(q)
            counts = {st.value: (s.count(st) if s is not None else 0) for st in JobState}
            oldest = s.oldest_ready_at_ms if s is not None else None
            out.append(
                QueueView(
                    queue=q,
                    counts=counts,
                    oldest_ready_age_ms=None if oldest is None else max(0, now - oldest),
                    demand=demand.get(q, 0),
                    paused=q in paused,
                    window_ms=THROUGHPUT_WINDOW_MS,
                    settled=_tally([r for r in rows if r.queue == q]),
                )
            )
        return out

    async def throughput(self, minutes: int = 60) -> dict[str, Throughput]:
        """Per queue, what settled in each of the last `minutes` minutes (the current one last),
        from the counters' minute buckets: one counter read for every queue."""
        self.driver.require("counters", what="the throughput view")
        # Bounded: each queue's series is `minutes` long (a month of them at most).
        minutes = count(minutes, "minutes", minimum=1, maximum=MAX_THROUGHPUT_MINUTES)
        now = self.clock.now_ms()
        first = now - now % MINUTE_MS - (minutes - 1) * MINUTE_MS
        rows = await self.driver.counter_read(CounterReadParams(first, now + 1))
        out: dict[str, Throughput] = {}
        for r in rows:
            i = (r.bucket_ms - first) // MINUTE_MS
            if r.width_ms != MINUTE_MS or not 0 <= i < minutes:
                continue
            t = out.setdefault(r.queue, Throughput(first, [0] * minutes, [0] * minutes))
            t.completed[i] += r.completed
            t.failed[i] += r.retried + r.dead_lettered + r.refused
        return out

    async def workers(self) -> list[WorkerView]:
        """The live workers, by id."""
        self.driver.require("workers", what="the worker list")
        return [WorkerView.of(w) for w in await self.driver.worker_list(self.clock.now_ms())]

    async def stats(self, window_ms: int = HOUR_MS) -> StatsView:
        """Rows by state, and per job name what settled over the last `window_ms`, read from
        the counters from `counted_since(now, window_ms)` on (a window starting in a folded hour
        counts that hour whole; the view's `since_ms` says where counting began)."""
        self.driver.require("operator", "counters", what="the stats view")
        window_ms = count(window_ms, "window_ms", minimum=0, maximum=MAX_TIME_MS)
        now = self.clock.now_ms()
        states = dict.fromkeys((s.value for s in JobState), 0)
        for q in await self.driver.queue_stats(now):
            for st, n in q.counts:
                states[st.value] += n
        since = counted_since(now, window_ms)
        rows = await self.driver.counter_read(CounterReadParams(since, now + 1))
        by_name: dict[str, list[CounterRow]] = {}
        for r in rows:
            by_name.setdefault(r.name, []).append(r)
        names = [NameStats(n, _tally(rs)) for n, rs in sorted(by_name.items())]
        return StatsView(now, window_ms, states, names, _tally(rows), since)

    # -- steering -------------------------------------------------------------------------------

    async def act(self, action: Action, job_ids: Sequence[str]) -> list[Answer]:
        """Apply `action` to each id in one driver call (at most `MAX_BULK_IDS`), in order."""
        if not isinstance(action, Action):
            raise OptionInvalidError("must be an Action", detail="action")
        self.driver.require("operator", what=f"{action.value} (an operator's verb)")
        if isinstance(job_ids, str | bytes) or not isinstance(job_ids, Sequence):
            # A string was the ids of its characters; a number a bare TypeError (`tuple`).
            raise RecordInvalidError("must be a list of ids, not one string", detail="job_ids")
        now = self.clock.now_ms()
        answers: list[Answer]
        match action:
            case Action.CANCEL:
                answers = list(await self.driver.job_cancel_many(job_ids, now))
            case Action.REQUEUE:
                answers = list(
                    await self.driver.job_requeue_many(RequeueParams(tuple(job_ids), now))
                )
            case Action.REQUEUE_FRESH:
                fresh = tuple(new_id() for _ in job_ids)
                answers = list(
                    await self.driver.job_requeue_many(RequeueParams(tuple(job_ids), now, fresh))
                )
            case Action.PROMOTE:
                answers = list(await self.driver.job_promote(job_ids, now))
            case Action.REMOVE:
                answers = list(await self.driver.job_remove(job_ids))
        return answers

    async def act_one(self, action: Action, job_id: str) -> Answer:
        """Apply `action` to one job; a refusal raises its typed error (`X_JOB_NOT_FOUND`,
        `X_JOB_NOT_CANCELLABLE`, `X_JOB_NOT_REQUEUEABLE`, `X_JOB_REQUEUE_DUPLICATE`,
        `X_JOB_REQUEUE_UNWOUND`, `X_JOB_NOT_PROMOTABLE`, `X_JOB_NOT_REMOVABLE`)."""
        answer = (await self.act(action, [job_id]))[0]
        refusal = refusal_for(action, job_id, answer)
        if refusal is not None:
            raise refusal
        return answer

    async def act_all(
        self, action: Action, f: JobFilter, *, max_rows: int | None = None
    ) -> BulkReport:
        """Apply `action` to every row the filter keeps, page by page (one driver call a page of
        up to 500 rows), newest first; at most `max_rows` rows when given. Rows that change
        meanwhile are answered for as they are when their page is acted on. A bulk `REQUEUE`
        refuses each unwound saga run as the single one does (counted `unwound`): only
        `REQUEUE_FRESH` takes those."""
        self.driver.require("operator", what=f"{action.value} (an operator's verb)")
        answers: dict[str, int] = {}
        examined = 0
        cursor: str | None = None
        while max_rows is None or examined < max_rows:
            limit = MAX_LIST_LIMIT if max_rows is None else min(MAX_LIST_LIMIT, max_rows - examined)
            page = await self.driver.job_list(JobListParams(f, limit, cursor))
            ids = [j.id for j in page.jobs]
            if ids:
                for a in await self.act(action, ids):
                    answers[a.value] = answers.get(a.value, 0) + 1
                examined += len(ids)
            cursor = page.next_cursor
            if cursor is None:
                break
        return BulkReport(action, answers, examined)

    async def cancel(
        self,
        job_ids: Sequence[str],
        *,
        keep_children: bool = False,
        max_rows: int | None = None,
    ) -> CancelReport:
        """Cancel each job (one driver call, at most `MAX_BULK_IDS`), then, unless
        `keep_children`, the LIVE descendants of each one this call cancelled: children listed
        by the parent filter, their children in turn, and so on (a child already finished may
        still have live children). At most `max_rows` descendants are looked at when given.

        The cascade is NOT atomic with the parent's cancel: it is a walk of listing pages and
        one cancel call a page, each its own write, after the parent's. Nothing in the store
        links a parent's cancel to its children (a child is a row like any other, its parent
        merely named on it), and a running parent learns of its cancel only at its next
        heartbeat, so its body may enqueue a child after the walk listed its children: such a
        straggler is not cancelled. `ujobs jobs cancel --all --parent ID` sweeps them. Without
        `flows` no job has children: there is nothing to cascade."""
        answers = [a for a in await self.act(Action.CANCEL, job_ids) if isinstance(a, CancelAnswer)]
        cancelled = [
            i for i, a in zip(job_ids, answers, strict=True) if a is CancelAnswer.CANCELLED
        ]
        if keep_children or not cancelled or not self.driver.capabilities().flows:
            return CancelReport(answers)
        cascaded = examined = 0
        seen = set(cancelled)
        todo = list(cancelled)
        while todo and (max_rows is None or examined < max_rows):
            parent = todo.pop()
            cursor: str | None = None
            while max_rows is None or examined < max_rows:
                limit = MAX_LIST_LIMIT
                if max_rows is not None:
                    limit = min(limit, max_rows - examined)
                page = await self.driver.job_list(
                    JobListParams(JobFilter(parent_id=parent), limit, cursor)
                )
                examined += len(page.jobs)
                fresh = [j for j in page.jobs if j.id not in seen]
                seen.update(j.id for j in fresh)
                # Every child is walked (a finished one may have live children); live ones
                # are cancelled in one call a page.
                todo += [j.id for j in fresh]
                live = [j.id for j in fresh if j.state in LIVE_STATES]
                if live:
                    done = await self.driver.job_cancel_many(live, self.clock.now_ms())
                    cascaded += sum(a is CancelAnswer.CANCELLED for a in done)
                cursor = page.next_cursor
                if cursor is None:
                    break
        return CancelReport(answers, cascaded, examined)

    async def pause(self, pause: Pause) -> bool:
        """Pause a queue, a job name or a task; True when it was not paused before."""
        self.driver.require("pauses", what="pausing")
        return await self.driver.pause_add(pause)

    async def resume(self, pause: Pause) -> bool:
        """Lift a pause; True when it existed."""
        self.driver.require("pauses", what="resuming")
        return await self.driver.pause_remove(pause)

    async def pauses(self) -> list[Pause]:
        """Every pause, sorted."""
        self.driver.require("pauses", what="the pause list")
        return await self.driver.pause_list()

    async def tasks(self, handles: Sequence[TaskHandle]) -> list[TaskView]:
        """Each declared task with its durable mark: the next occurrence a leader would fire,
        the last that really fired, whether it is paused. Reads the task family (an empty mark
        on a driver without it; none paused on a driver without pauses)."""
        now = self.clock.now_ms()
        names = [h.name for h in handles]
        marks = await self._task_marks(names) if self.driver.capabilities().tasks else {}
        paused = {p.value for p in await self._pauses() if p.kind == "task"}
        return [TaskView.of(h, marks.get(h.name), h.name in paused, now) for h in handles]

    async def task_fires(self, names: Sequence[str]) -> dict[str, int | None]:
        """Per named task, the last occurrence (epoch ms) that really dispatched its job; None
        before the first (a task never armed, or armed and not fired yet). Never the watermark:
        a catch-up or a pause moves that, not this."""
        self.driver.require("tasks", what="the task fires")
        if isinstance(names, str | bytes) or not isinstance(names, Sequence):
            raise RecordInvalidError("must be a sequence of task names", detail="names")
        marks = await self._task_marks(names)
        return {n: (marks[n].fired_ms if n in marks else None) for n in names}

    async def _task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        """`task_marks` of any number of names, `MAX_TASK_BATCH` a call."""
        marks: dict[str, TaskMark] = {}
        for at in range(0, len(names), MAX_TASK_BATCH):
            marks.update(await self.driver.task_marks(names[at : at + MAX_TASK_BATCH]))
        return marks
