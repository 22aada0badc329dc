"""`ctx.step`: durable steps, sleeps and event waits inside a job body.

A run's recorded steps are loaded with ONE `step_list(run_id)` the first time the body asks for
one; from then on a replayed step costs no store round-trip, and an executed one costs one
(`step_put`, fenced on the claim exactly like the ack). A step's output is stored in its JSON form
BEFORE the step returns, and the step returns what was stored — a `datetime` in, its ISO string
out — on the first execution and on every replay alike.

Guarantees, stated plainly: a step's function runs AT LEAST ONCE (a crash after it ran and
before its record landed runs it again on the next attempt; make its side effect idempotent to
make it exactly once); its record is written EXACTLY ONCE (the first record of a name stays).
Code outside steps runs again on every attempt and every resume.

Names: unique within a run (a second use is `X_STEP_DUPLICATE`, terminal: the body's code is
wrong, not unlucky); a name may not start with `~` (reserved for the runner's own records:
`~wait:<name>` for a wait's start, `~undo:<name>` for a compensation that ran). Every argument
is checked before anything runs or is written: a name the store could not record, as itself or
as the runner's record of it (past `MAX_NAME_BYTES` UTF-8 bytes, a NUL, a lone surrogate), is
`X_STEP_NAME_INVALID`, terminal; a bad duration, time, event or match is refused with its code.
A call refused for its arguments takes no name: caught, the same name may be used again.
A step whose output cannot be stored (no JSON form, past a bound) fails the run for good,
`X_STEP_OUTPUT_INVALID`: its function ran, and a retry would only run it again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import inspect
import queue
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from jobs_core.clock import Clock
from jobs_core.context import CancelSignal
from jobs_core.driver import (
    ENQUEUE_CHUNK,
    MAX_BULK_IDS,
    MAX_ENQUEUE_BATCH,
    MAX_JOIN_IDS,
    MAX_TIME_MS,
    JobDriver,
    check_step_put,
    check_wait,
    name_refusal,
)
from jobs_core.errors import (
    AbortedError,
    BatchTooLargeError,
    DeclarationInvalidError,
    DrainingError,
    JobsError,
    LeaseLostError,
    OptionInvalidError,
    RecordInvalidError,
    ResultFailedError,
    StepDuplicateError,
    StepNameInvalidError,
    StepOutputInvalidError,
    StepTimeoutError,
    TenantMismatchError,
    WaitCycleError,
    shown,
)
from jobs_core.ids import derived_id
from jobs_core.job import JobHandle, check_handle
from jobs_core.jsonform import JsonValue, dumps, loads
from jobs_core.records import (
    ClaimedJob,
    EnqueueResult,
    EventWait,
    Fence,
    JobRecord,
    NewJob,
    StepPut,
    StepRecord,
)
from jobs_core.resend import again_if_lost
from jobs_core.results import answer_of, finished
from jobs_core.semantics import SAGA_STEP
from jobs_core.states import JobState
from jobs_core.steps.suspend import StepSuspension, UnwindReached
from jobs_core.tenant import current_tenant

if TYPE_CHECKING:
    from jobs_core.facade import Jobs

#: How often a run waiting for an event looks again when its job declares no `event_poll`
#: (the wake is the fast path; this is the guarantee).
DEFAULT_EVENT_POLL_MS: Final = 60_000
#: How many jobs a gather's cycle check reads at most (the waits of the jobs it would wait for,
#: and theirs): past it, a longer chain is not followed (docs/guides/workflows.md).
MAX_CYCLE_SCAN: Final = 10_000
#: The prefix of the runner's own step records; a user's step name may not start with it.
RESERVED: Final = "~"
#: The record a run gets once a step of it declared a compensation (the store reads it: a plain
#: requeue of a saga run that failed for good is refused).
SAGA: Final = SAGA_STEP
#: The prefix of a wait's start record (`~wait:<name>`).
WAIT: Final = f"{RESERVED}wait:"
#: The prefix of the record of a compensation that ran (`~undo:<name>`).
UNDO: Final = f"{RESERVED}undo:"

StepFn = Callable[[], Awaitable[Any]] | Callable[[], Any]
Compensation = Callable[[JsonValue], Awaitable[Any]] | Callable[[JsonValue], Any]
#: How a factory stores a step's record with its own family's write (`StepApi.run_written`):
#: answers whether the fence held.
RecordWrite = Callable[[StepPut], Awaitable[bool]]


@dataclass(slots=True)
class Compensable:
    """A completed step that declared how to undo it."""

    name: str
    output: JsonValue
    undo: Compensation


def _ms_of(when: object, what: str) -> int:
    """An aware datetime or epoch ms as epoch ms, within the store's times (1970 to 2109)."""
    if isinstance(when, dt.datetime):
        if when.tzinfo is None:
            raise OptionInvalidError("a datetime must be timezone-aware", detail=what)
        ms = when.timestamp() * 1000
    elif isinstance(when, bool) or not isinstance(when, int | float):
        raise OptionInvalidError("an aware datetime or epoch ms", detail=what)
    else:
        ms = when
    # Compared as it is: `math.isfinite` of an int past a float's range raises OverflowError.
    if not (0 <= ms <= MAX_TIME_MS):
        raise OptionInvalidError(f"a time between 0 and {MAX_TIME_MS} epoch ms", detail=what)
    return round(ms)


def _duration_ms(duration: object, what: str) -> int:
    seconds = duration.total_seconds() if isinstance(duration, dt.timedelta) else duration
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        # A NaN fails the comparison; an int is compared exactly, never turned into a float.
        or not (0 <= seconds * 1000 <= MAX_TIME_MS)
    ):
        raise OptionInvalidError("a duration is finite seconds >= 0 or a timedelta", detail=what)
    return round(seconds * 1000)


def _ends(now_ms: int, duration_ms: int, what: str) -> int:
    """`now_ms + duration_ms`, refused past the store's last time."""
    if now_ms + duration_ms > MAX_TIME_MS:
        raise OptionInvalidError(f"ends after {MAX_TIME_MS} epoch ms", detail=what)
    return now_ms + duration_ms


def _output_text(name: str, value: Any) -> str:
    """A step's output as stored; one that cannot be stored is `X_STEP_OUTPUT_INVALID`."""
    try:
        return dumps(value)
    except JobsError as exc:
        raise StepOutputInvalidError(
            f"the output of step {name!r} cannot be stored: {exc.message}", detail=name
        ) from exc


class StepApi:
    """The steps of one run (`ctx.step`). Methods are coroutines: use them from an `async def`
    body; a `def` body uses `ctx.sync_step`, which has the same methods, blocking."""

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        job: ClaimedJob,
        signal: CancelSignal,
        *,
        step_timeout_ms: int | None = None,
        event_poll_ms: int | None = None,
        mode: Literal["run", "unwind"] = "run",
        put: Callable[[StepPut], Awaitable[bool]] | None = None,
        tenant: str | None = None,
    ) -> None:
        """`tenant`: the org the run acts for (`handle.tenant_for(input)`, None for
        `tenant="none"`); its event waits count only events published for it (or for every
        tenant)."""
        self._driver = driver
        #: How a record is sent: the worker's batching settler (runs finishing a step together
        #: share a round-trip), else one `step_put` call of its own.
        self._put = put or self._put_alone
        self._clock = clock
        self._job = job
        self._signal = signal
        self._step_timeout_ms = step_timeout_ms
        self._event_poll_ms = event_poll_ms or DEFAULT_EVENT_POLL_MS
        self._mode = mode
        self._tenant = tenant
        self._loaded: dict[str, StepRecord] | None = None
        self._used: set[str] = set()
        #: The client a child is enqueued with (made on first use: its clock is the run's).
        self._jobs: Jobs | None = None
        #: The completed steps of this run that declared a compensation, as met (replayed or run).
        self.compensable: list[Compensable] = []

    # -- what a factory built over steps reads ------------------------------------------------

    @property
    def driver(self) -> JobDriver:
        """The store this run records in (a factory writes its own family there, fenced)."""
        return self._driver

    @property
    def clock(self) -> Clock:
        """The run's clock: every time a factory records comes from it."""
        return self._clock

    @property
    def run_id(self) -> str:
        """The run these steps belong to (the ledger of a sweep is keyed by it)."""
        return self._job.run_id

    @property
    def job_key(self) -> str:
        """The idempotency key of the job this run belongs to (`ledger()` posts under it)."""
        return self._job.idempotency_key

    @property
    def fence(self) -> Fence:
        """The claim this run holds; a write fenced on it lands only while the claim holds."""
        return self._job.fence

    # -- the store ------------------------------------------------------------------------------

    async def records(self) -> dict[str, StepRecord]:
        """The run's recorded steps by name, read once per run."""
        if self._loaded is None:
            self._driver.require("steps", what="ctx.step")
            self._loaded = {r.name: r for r in await self._driver.step_list(self._job.run_id)}
        return self._loaded

    def unwinding(self) -> StepApi:
        """The same run's steps in unwind mode: recorded steps replay, the first step the run
        never recorded stops the replay (`UnwindReached`); see `jobs_core.steps.unwind`."""
        return StepApi(
            self._driver,
            self._clock,
            self._job,
            self._signal,
            step_timeout_ms=self._step_timeout_ms,
            event_poll_ms=self._event_poll_ms,
            mode="unwind",
            put=self._put,
            tenant=self._tenant,
        )

    async def _put_alone(self, item: StepPut) -> bool:
        return (await self._driver.step_put([item]))[0]

    async def record(self, name: str, value: JsonValue) -> StepRecord:
        """Store one of the runner's own records of this run (see `_store`)."""
        self._refuse_if_stopped(name)
        return await self._store(name, dumps(value))

    def _refuse_if_stopped(self, name: str) -> None:
        """A cancelled or lost run writes nothing (`X_ABORTED`); a run aborted by a drain still
        records a step that finished."""
        reason = self._signal.reason
        if reason is not None and not isinstance(reason, DrainingError):
            raise AbortedError(f"the run stopped ({reason.code}); {name!r} is not recorded")

    async def _store(self, name: str, text: str, write: RecordWrite | None = None) -> StepRecord:
        """Store one record of this run, fenced on its claim (by `write` when given); answers
        the record that stays."""
        now = self._clock.now_ms()
        # Shielded: a drain's cancel that arrives during the write does not leave it half-known.
        item = StepPut(self._job.fence, name, text, now)
        check_step_put(item)
        # Resent when its answer is lost: the first record of a name stays and a factory's
        # write moves its family once per record, so no attempt (the last, maybe) is spent on a
        # record that is stored.
        send = write or self._put
        landed = await asyncio.shield(again_if_lost(lambda: send(item)))
        if not landed:
            raise LeaseLostError(f"the claim was lost before {name!r} was recorded")
        record = StepRecord(self._job.run_id, name, text, now)
        loaded = await self.records()
        loaded.setdefault(name, record)
        return loaded[name]

    def _claim_name(self, name: object, *prefixes: str) -> None:
        """Take `name` for this run, refusing one the store could not record — as itself or
        under each of the runner's `prefixes` it will be recorded with — or one used already."""
        why = name_refusal(name)
        if why is None:
            assert isinstance(name, str)
            if name.startswith(RESERVED):
                why = f"starts with {RESERVED!r}, the runner's own records' prefix"
            for prefix in prefixes:
                if why is None and (under := name_refusal(prefix + name)) is not None:
                    why = f"{under} once recorded as {prefix}<name>"
        if why is not None:
            # The name as code would spell it: one holding a NUL or a surrogate is printable.
            raise StepNameInvalidError(f"the step name {why}", detail=shown(name))
        assert isinstance(name, str)
        if name in self._used:
            raise StepDuplicateError(detail=name)
        self._used.add(name)

    @contextlib.contextmanager
    def _freed_if_refused(self, name: str) -> Iterator[None]:
        """Give `name` back when the block raises: it ran before anything was recorded under
        the name (a child's input or option refused, a sleep ending past the last time), so a
        call that caught the refusal may use the name again. A child's id is derived from its
        step's name: a later call under it sends the same child, never a second one."""
        try:
            yield
        except BaseException:
            self._used.discard(name)
            raise

    # -- steps ----------------------------------------------------------------------------------

    async def run(self, name: str, fn: StepFn, *, compensate: Compensation | None = None) -> Any:
        """Run `fn` once for this run and answer its stored JSON form; on a later attempt (or
        a resume) answer the stored form without calling `fn`. `compensate(output)` undoes
        the step if the run fails for good (steps undone in reverse order, each recorded once;
        a compensation, like `fn`, runs at least once)."""
        if not callable(fn):
            raise DeclarationInvalidError("a step runs a function", detail="fn")
        if compensate is not None and not callable(compensate):
            raise DeclarationInvalidError("a compensation is a function", detail="compensate")
        self._claim_name(name, *((UNDO,) if compensate is not None else ()))
        record = await self._recorded(name, fn, marks_saga=compensate is not None)
        output = loads(record.output_json)
        if compensate is not None:
            self.compensable.append(Compensable(name, output, compensate))
            if SAGA not in await self.records() and self._mode == "run":
                # A step recorded by a version that marked after the step.
                await self.record(SAGA, {"first": name})
        return output

    async def run_written(self, name: str, fn: StepFn, write: RecordWrite) -> Any:
        """`run`, but a first run's record is stored by `write(record)` instead of a plain
        `step_put`: a factory's own fenced write that lands the record together with what its
        family keeps of the step, in one commit; `write` answers whether the fence held."""
        if not callable(fn):
            raise DeclarationInvalidError("a step runs a function", detail="fn")
        self._claim_name(name)
        return loads((await self._recorded(name, fn, write=write)).output_json)

    async def _recorded(
        self, name: str, fn: StepFn, *, marks_saga: bool = False, write: RecordWrite | None = None
    ) -> StepRecord:
        """Step `name`'s record: the stored one, else `fn`'s output once stored."""
        record = (await self.records()).get(name)
        if record is None:
            if self._mode == "unwind":
                raise UnwindReached(name)
            if marks_saga and SAGA not in await self.records():
                # Marks the run as one with something to undo BEFORE the side effect: a worker
                # burying it after a crash on its final attempt reads this, not the body, to
                # queue the undoing.
                await self.record(SAGA, {"first": name})
            value = await self._call(name, fn)
            self._refuse_if_stopped(name)
            record = await self._store(name, _output_text(name, value), write)
        return record

    async def _call(self, name: str, fn: StepFn) -> Any:
        if self._signal.cancelled:
            reason = self._signal.reason
            raise AbortedError(f"the run stopped ({reason.code if reason else '?'})", detail=name)
        result = fn()
        if not inspect.isawaitable(result):
            return result
        if self._step_timeout_ms is None:
            return await result
        try:
            return await asyncio.wait_for(result, self._step_timeout_ms / 1000)
        except TimeoutError:
            raise StepTimeoutError(
                f"step {name!r} passed its {self._step_timeout_ms} ms deadline", detail=name
            ) from None

    async def sleep(self, name: str, duration: float | dt.timedelta) -> None:
        """Park the run for `duration` (seconds or a timedelta) without spending an attempt;
        it resumes on any worker once the time is up. The end is recorded, so a replay sleeps
        only what is left of it."""
        ms = _duration_ms(duration, "duration")
        self._claim_name(name)
        await self._sleep(name, lambda now: _ends(now, ms, "duration"))

    async def sleep_until(self, name: str, when: dt.datetime | int) -> None:
        """`sleep` until an aware datetime (or epoch ms); a time already past does not park."""
        until = _ms_of(when, "when")
        self._claim_name(name)
        await self._sleep(name, lambda now: until)

    async def _sleep(self, name: str, until_of: Callable[[int], int]) -> None:
        record = (await self.records()).get(name)
        if record is None:
            if self._mode == "unwind":
                raise UnwindReached(name)
            with self._freed_if_refused(name):
                ends = until_of(self._clock.now_ms())
            record = await self.record(name, {"until": ends})
        until = _field(record, "until")
        if not isinstance(until, int):
            raise DeclarationInvalidError(f"{name!r} is recorded, but not as a sleep", detail=name)
        if self._clock.now_ms() < until:
            raise StepSuspension(until)

    async def wait_for_event(
        self,
        name: str,
        event: str,
        *,
        match: dict[str, Any] | None = None,
        timeout: float | dt.timedelta | None = None,  # noqa: ASYNC109 - a deadline kept across parks
        since: Literal["wait", "enqueued"] | dt.datetime | int = "wait",
    ) -> Any:
        """Park the run until an event named `event` whose data holds every key of `match`
        (equal values) arrives, and answer its data; None once `timeout` passed with none.

        Which events count: those published for the tenant this run acts for (or for every
        tenant: `send_event(..., all_tenants=True)`), from the wait's start on — by default the
        moment it BEGAN (its first execution; recorded, so a replay keeps it); `since=
        "enqueued"` also counts those published since the job was enqueued, and a datetime (or
        epoch ms) any since then — and before its deadline (start + `timeout`): one published
        at the deadline or later never counts, however late the run resumes.
        """
        now = self._clock.now_ms()
        match_json = dumps(match if match is not None else {})
        if since == "wait":
            since_ms = now
        elif since == "enqueued":
            since_ms = self._job.created_at_ms
        else:
            since_ms = _ms_of(since, "since")
        ends = None if timeout is None else _ends(now, _duration_ms(timeout, "timeout"), "timeout")
        # The event's name and the match as `event_find` will judge them, before any record.
        check_wait(EventWait(event, match_json, since_ms, tenant_id=self._tenant, until_ms=ends))
        self._claim_name(name, WAIT)
        loaded = await self.records()
        done = loaded.get(name)
        if done is not None:
            return _field(done, "data")
        if self._mode == "unwind":
            # The failed run never got past this wait (begun or not): its replay ends here,
            # without looking for an event or recording one.
            raise UnwindReached(name)
        started = loaded.get(f"{WAIT}{name}")
        if started is None:
            started = await self.record(
                f"{WAIT}{name}",
                {"event": event, "match": loads(match_json), "since": since_ms, "deadline": ends},
            )
        spec = loads(started.output_json)
        assert isinstance(spec, dict)
        deadline = spec.get("deadline")
        until = deadline if isinstance(deadline, int) else None
        wait = EventWait(
            str(spec["event"]),
            dumps(spec["match"]),
            int(str(spec["since"])),
            tenant_id=self._tenant,
            # The store counts only events published before the deadline, in the look below,
            # in the park's look and in a publish's wake alike: a run resumed late (workers
            # down or busy) never takes an event that came after its timeout.
            until_ms=until,
        )
        now = self._clock.now_ms()
        found = await self._driver.event_find(wait, now)
        if found is not None:
            data = loads(found.data_json)
            record = await self.record(name, {"data": data, "event_id": found.id})
            return _field(record, "data")
        if until is not None and now >= until:
            await self.record(name, {"data": None, "timeout": True})
            return None
        wake: int = now + self._event_poll_ms
        if until is not None:
            wake = min(wake, until)
        raise StepSuspension(wake, wait)

    # -- child jobs ---------------------------------------------------------------------------

    def _child_options(
        self, handle: JobHandle, job_id: str, options: dict[str, Any]
    ) -> dict[str, Any]:
        options["parent_id"] = self._job.id
        if "tenant_id" not in options:
            acting = current_tenant()
            if acting is not None and acting != self._tenant:
                # Refused as an enqueue naming another tenant would be, but saying where the
                # tenant came from: the writer named none, and may not know the default.
                raise TenantMismatchError(
                    f"a child of ctx.step is enqueued for the run's tenant ({self._tenant!r}) "
                    f"unless tenant_id= names one, and this code acts for {acting!r} "
                    f"(acting_for): pass tenant_id={acting!r} to enqueue it for {acting!r}, or "
                    "call it outside the acting_for block to enqueue it for the run's tenant",
                    detail="tenant_id",
                )
        # The run's tenant, as a plain enqueue inside the body takes it (`current_tenant()`):
        # named here so a replay (or an unwinding one) enqueues for the very same tenant.
        options.setdefault("tenant_id", self._tenant)
        if "key" not in options and handle.key is None:
            options["key"] = job_id  # a child needs no key of its own: its id dedupes it
        return options

    async def enqueue(self, name: str, handle: JobHandle, input: Any, **options: Any) -> str:
        """Enqueue one child job for this run, exactly once, and answer its id.

        The child's id is derived from (run id, `name`) (`jobs_core.ids.derived_id`), and the
        id the store answered is recorded as step `name`: a replay answers the recorded id
        without enqueueing, and a crash between the enqueue and its record enqueues the same
        id again, which the store dedupes. The child carries this job as its parent
        (`NewJob.parent_id`) and is enqueued for this run's tenant (`tenant_id=` naming another
        is `X_JOB_TENANT_MISMATCH` unless inside `acting_for(that tenant)`; inside
        `acting_for(other)`, a call naming no `tenant_id=` is refused the same way, its message
        saying to pass `tenant_id=other`);
        without a `key=` or a key function its key is its id. `options` are `client.enqueue`'s
        (`after=` included). Needs the `flows` family."""
        check_handle(handle, "handle")  # read below (its key) before the enqueue checks it
        _refuse_taken(options)
        self._claim_name(name)
        record = (await self.records()).get(name)
        if record is None:
            if self._mode == "unwind":
                raise UnwindReached(name)
            self._driver.require("flows", what="ctx.step.enqueue")
            job_id = derived_id(self._job.run_id, name)
            options = self._child_options(handle, job_id, options)
            with self._freed_if_refused(name):
                done = await self._client().enqueue(handle, input, id=job_id, **options)
            record = await self.record(name, {"id": done.id})
        return str(_field(record, "id"))

    async def enqueue_many(
        self, name: str, handle: JobHandle, inputs: Sequence[Any], **options: Any
    ) -> list[str]:
        """`enqueue` of one child per input, recorded as ONE step `name`: the ids are derived
        from (run id, `name`, index), so a replay or a retry enqueues none twice. At most
        `MAX_ENQUEUE_BATCH` inputs."""
        check_handle(handle, "handle")  # read below (its key) before a record is built
        if isinstance(inputs, str | bytes) or not isinstance(inputs, Sequence):
            raise DeclarationInvalidError("a list of inputs", detail="inputs")
        if len(inputs) > MAX_ENQUEUE_BATCH:
            raise BatchTooLargeError(detail=f"{len(inputs)} > {MAX_ENQUEUE_BATCH}")
        for one_only in ("after", "after_policy"):
            if one_only in options:
                raise DeclarationInvalidError(
                    "children that wait for other jobs are enqueued one by one (enqueue)",
                    detail=one_only,
                )
        _refuse_taken(options)
        self._claim_name(name)
        record = (await self.records()).get(name)
        if record is None:
            if self._mode == "unwind":
                raise UnwindReached(name)
            self._driver.require("flows", what="ctx.step.enqueue_many")
            from jobs_core.facade import build_record, check_caller_options

            ids = [derived_id(self._job.run_id, name, i) for i in range(len(inputs))]
            answered: list[JsonValue] = []
            with self._freed_if_refused(name):
                # As `enqueue` checks them (its records are built here, past
                # `Jobs.enqueue_many`): another tenant than the one acted for, a `traceparent=`.
                check_caller_options(options)
                records = [
                    build_record(
                        handle,
                        value,
                        clock=self._clock,
                        id=job_id,
                        **self._child_options(handle, job_id, dict(options)),
                    )
                    for value, job_id in zip(inputs, ids, strict=True)
                ]
                for at in range(0, len(records), ENQUEUE_CHUNK):
                    chunk = records[at : at + ENQUEUE_CHUNK]
                    answered.extend(d.id for d in await self._enqueue_chunk(chunk))
            record = await self.record(name, {"ids": answered})
        got = _field(record, "ids")
        if not isinstance(got, list):
            raise DeclarationInvalidError(f"{name!r} is recorded, but not as children", detail=name)
        return [str(i) for i in got]

    async def result(self, name: str, job_id: str) -> Any:
        """The result of job `job_id` (a child, or any job), recorded as step `name`: while it
        is live the run PARKS — no attempt spent, no slot held — and resumes once it finished.
        `X_RESULT_FAILED` (`ResultFailedError`, terminal) when it ended dead, failed or
        cancelled (or no longer exists: state "missing"), on the first run and every replay."""
        distinct = self._join_ids((job_id,))
        self._claim_name(name)
        (outcome,) = await self._gathered(name, (job_id,), distinct)
        return _answer(outcome, return_errors=False)

    async def gather(
        self, name: str, job_ids: Sequence[str], *, return_errors: bool = False
    ) -> list[Any]:
        """The results of `job_ids`, in their order, recorded as ONE step `name`: while any of
        them is live the run PARKS on all of them at once (no attempt, no slot) and the store
        releases it when the last one finishes — one wake, however many children.

        A job that did not complete raises `ResultFailedError` (the first in order; terminal)
        unless `return_errors=True`: then its place holds a `ResultFailedError` (`job_id`,
        `state`, `error`). Recorded as `{"results": [{"ok": <result>} | {"failed": {"job_id",
        "state", "error"}}, ...]}`, so a replay answers, and raises, exactly the same."""
        if isinstance(job_ids, str) or not isinstance(job_ids, Sequence):
            raise DeclarationInvalidError("a list of job ids", detail="job_ids")
        distinct = self._join_ids(tuple(job_ids))
        self._claim_name(name)
        outcomes = await self._gathered(name, tuple(job_ids), distinct)
        answers = [_answer(o, return_errors=return_errors) for o in outcomes]
        return answers

    def _join_ids(self, job_ids: tuple[str, ...]) -> tuple[str, ...]:
        """`job_ids` without repeats, once checked as ids a run can wait for."""
        for job_id in job_ids:
            if not isinstance(job_id, str):
                raise DeclarationInvalidError("a job id is a string", detail="job_ids")
            if (why := name_refusal(job_id)) is not None:
                # Before the name is taken: the store's read refused it only after.
                raise RecordInvalidError(f"a job id {why}", detail="job_ids")
        distinct = tuple(dict.fromkeys(job_ids))
        if self._job.id in distinct:
            # Its own row is live while it waits: the park would never be released.
            raise DeclarationInvalidError(
                "a run cannot wait for the result of its own job", detail=self._job.id
            )
        if len(distinct) > MAX_JOIN_IDS:
            raise BatchTooLargeError(detail=f"{len(distinct)} jobs > {MAX_JOIN_IDS}")
        return distinct

    async def _gathered(
        self, name: str, job_ids: tuple[str, ...], distinct: tuple[str, ...]
    ) -> list[JsonValue]:
        """The recorded outcome of each of `job_ids` (`distinct`: `_join_ids`'s; see `gather`);
        parks while any is live."""
        record = (await self.records()).get(name)
        if record is None:
            if self._mode == "unwind":
                raise UnwindReached(name)
            self._driver.require("flows", what="ctx.step.gather")
            rows: dict[str, JobRecord] = {}
            for at in range(0, len(distinct), MAX_BULK_IDS):
                rows.update(await self._driver.job_get_many(distinct[at : at + MAX_BULK_IDS]))
            live = tuple(i for i in distinct if i in rows and not finished(rows[i]))
            if live:
                await self._refuse_cycle(live, rows)
                # The store recounts the join as the park lands: a child that finished since
                # the read above counts as finished, and none finishing meanwhile is missed.
                raise StepSuspension(None, join=live)
            outcomes = [_outcome(i, rows.get(i)) for i in job_ids]
            self._refuse_if_stopped(name)
            record = await self._store(name, _output_text(name, {"results": outcomes}))
        got = _field(record, "results")
        if not isinstance(got, list) or len(got) != len(job_ids):
            raise DeclarationInvalidError(
                f"{name!r} is recorded, but not as these jobs' results", detail=name
            )
        return got

    async def _refuse_cycle(self, live: tuple[str, ...], rows: dict[str, JobRecord]) -> None:
        """`X_JOB_WAIT_CYCLE` when a job of `live` waits, through joins, for this run's own job:
        the park would close a cycle no finish could ever release (`wait_ring`). A row of
        `live` not parked on a join waits for nothing, so a plain fan-out costs no read at all;
        the race this read-then-park leaves open is closed after the park (`wait_ring`)."""
        me = self._job.id
        ring = await wait_ring(self._driver, me, [i for i in live if _parked_on_join(rows[i])])
        if ring:
            raise WaitCycleError(
                f"job {ring[0]} waits for this run's job {me}: the wait would never end",
                detail=ring[0],
            )

    async def _enqueue_chunk(self, chunk: list[NewJob]) -> list[EnqueueResult]:
        return await self._client()._retrying(lambda: self._driver.job_enqueue_many(chunk))

    def _client(self) -> Jobs:
        from jobs_core.facade import Jobs

        if self._jobs is None:
            self._jobs = Jobs(self._driver, clock=self._clock)
        return self._jobs


async def wait_ring(driver: JobDriver, me: str, frontier: Sequence[str]) -> tuple[str, ...]:
    """The jobs of a wait cycle through `me`, found from `frontier` (the jobs `me` waits, or
    would wait, for) along the joins parked now: first the job that waits for `me`, last the
    job of `frontier` it is reached from; empty when none within `MAX_CYCLE_SCAN` jobs. Walks
    `join_pending` level by level; reads only.

    Why a check after the park closes the race the check before it leaves: two runs (or k, in
    a ring) each park on the next and each, AFTER its park landed, walks the parks from its
    own join. Every park lands before its own run's walk starts, so the run whose walk starts
    last finds every other park of the ring already written and reaches itself: at least one
    run of any ring sees it (several may). A park of the ring can only be undone by a finish,
    and no row of a ring finishes unless one of them is refused or cancelled, which ends it."""
    via: dict[str, str] = dict.fromkeys(frontier, me)
    level = list(via)
    while level:
        ahead: list[str] = []
        for at in range(0, len(level), MAX_BULK_IDS):
            pending = await driver.join_pending(level[at : at + MAX_BULK_IDS])
            for waiter, deps in pending.items():
                if me in deps:
                    ring = [waiter]
                    while via[ring[-1]] != me:
                        ring.append(via[ring[-1]])
                    return tuple(ring)
                for dep in deps:
                    if dep not in via and len(via) < MAX_CYCLE_SCAN:
                        via[dep] = waiter
                        ahead.append(dep)
        level = ahead
    return ()


def _refuse_taken(options: dict[str, Any]) -> None:
    """A child's ids are derived from its step: options naming them are refused."""
    for taken in ("id", "ids", "parent_id", "run_id"):
        if taken in options:
            raise DeclarationInvalidError("a child's ids are the step's own", detail=taken)


def _parked_on_join(row: JobRecord) -> bool:
    return row.state is JobState.PARKED and row.join is not None and row.join.pending > 0


def _outcome(job_id: str, row: JobRecord | None) -> JsonValue:
    """A finished row's outcome as `gather` records it."""
    if row is None:
        return {"failed": {"job_id": job_id, "state": "missing", "error": None}}
    try:
        return {"ok": answer_of(row)}
    except ResultFailedError as exc:
        return {"failed": {"job_id": exc.job_id, "state": exc.state, "error": exc.error}}


def _answer(outcome: JsonValue, *, return_errors: bool) -> Any:
    """A recorded outcome as `gather` answers it: the result, or the failure (raised unless
    `return_errors`)."""
    if isinstance(outcome, dict) and "ok" in outcome:
        return outcome["ok"]
    failed = outcome.get("failed") if isinstance(outcome, dict) else None
    if not isinstance(failed, dict):
        raise DeclarationInvalidError("a recorded result is neither a value nor a failure")
    job_id, state, error = failed.get("job_id"), failed.get("state"), failed.get("error")
    exc = ResultFailedError(
        f"job {job_id} ended {state}",
        job_id=str(job_id),
        state=str(state),
        error=error if isinstance(error, str) else None,
    )
    if return_errors:
        return exc
    raise exc


def _field(record: StepRecord, key: str) -> JsonValue:
    value = loads(record.output_json)
    return value.get(key) if isinstance(value, dict) else None


class SyncStepApi:
    """`ctx.sync_step`: the same steps for a `def` body, each call blocking its thread while the
    worker's loop does the store's work. A step's function runs on the calling thread — the
    body's own — so it sees what the body sees (its tenant, its bound client) and never waits
    for a thread another run holds."""

    def __init__(self, api: StepApi, loop: asyncio.AbstractEventLoop) -> None:
        self._api = api
        self._loop = loop

    def _submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            coro.close()
            raise DeclarationInvalidError(
                "ctx.sync_step is for def bodies; an async body awaits ctx.step", detail="step"
            )
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _wait(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self._submit(coro).result()

    def run(
        self, name: str, fn: Callable[[], Any], *, compensate: Compensation | None = None
    ) -> Any:
        """`StepApi.run`, blocking; `fn` runs on this thread when it runs (its deadline,
        `step_timeout`, is told when it returns: a thread cannot be stopped from outside)."""
        loop = self._loop
        # What the loop asks of this thread: the step's function to call, or None once the
        # step is over (replayed, recorded or refused).
        asks: queue.SimpleQueue[tuple[Callable[[], Any], asyncio.Future[Any]] | None]
        asks = queue.SimpleQueue()

        async def on_this_thread() -> Any:
            answer: asyncio.Future[Any] = loop.create_future()
            asks.put((fn, answer))
            return await answer

        step = self._submit(self._api.run(name, on_this_thread, compensate=compensate))
        step.add_done_callback(lambda _: asks.put(None))
        while (ask := asks.get()) is not None:
            call, answer = ask
            try:
                value = call()
            except BaseException as exc:  # the step's outcome, whatever it is, goes to the loop
                _answer_on(loop, answer, None, exc)
            else:
                _answer_on(loop, answer, value, None)
        return step.result()

    def sleep(self, name: str, duration: float | dt.timedelta) -> None:
        self._wait(self._api.sleep(name, duration))

    def sleep_until(self, name: str, when: dt.datetime | int) -> None:
        self._wait(self._api.sleep_until(name, when))

    def wait_for_event(self, name: str, event: str, **options: Any) -> Any:
        return self._wait(self._api.wait_for_event(name, event, **options))

    def enqueue(self, name: str, handle: JobHandle, input: Any, **options: Any) -> str:
        return str(self._wait(self._api.enqueue(name, handle, input, **options)))

    def enqueue_many(
        self, name: str, handle: JobHandle, inputs: Sequence[Any], **options: Any
    ) -> list[str]:
        return list(self._wait(self._api.enqueue_many(name, handle, inputs, **options)))

    def result(self, name: str, job_id: str) -> Any:
        return self._wait(self._api.result(name, job_id))

    def gather(
        self, name: str, job_ids: Sequence[str], *, return_errors: bool = False
    ) -> list[Any]:
        return list(self._wait(self._api.gather(name, job_ids, return_errors=return_errors)))


def _answer_on(
    loop: asyncio.AbstractEventLoop,
    answer: asyncio.Future[Any],
    value: Any,
    exc: BaseException | None,
) -> None:
    """Resolve `answer` on its loop from another thread (unless a step deadline cancelled it)."""

    def resolve() -> None:
        if answer.done():
            return
        if exc is not None:
            answer.set_exception(exc)
        else:
            answer.set_result(value)

    with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
        loop.call_soon_threadsafe(resolve)
