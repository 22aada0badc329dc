"""What the `ujobs` pytest fixture hands a test (`UJobs`): its own store, a fake clock, a client
bound as the default, the real worker run until nothing is ready (`drain`), and one body called
directly with a real context (`run`). `ujobs_for` makes one without pytest.

`drain` starts a `jobs_core.worker.Worker` — its claim, admission, settles, retries, steps,
events and hooks, nothing imitated — for one claim pass at a time and stops it (its own drain,
so every claimed body finishes and settles) before looking again; nothing else moves the clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final, TypeVar

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import MAX_BULK_IDS, MAX_LIST_LIMIT, JobDriver
from jobs_core.errors import (
    DeclarationInvalidError,
    DriverUnavailableError,
    JobsError,
    OptionInvalidError,
    ResultInvalidError,
)
from jobs_core.facade import Jobs, LoopJobs, SettledEvent, bound_client, build_record
from jobs_core.ids import new_id
from jobs_core.job import JobHandle, default_registry, jobs_of
from jobs_core.jsonform import JsonValue, dumps, loads
from jobs_core.loops import cancel_other_tasks
from jobs_core.options import count, finite_number
from jobs_core.records import ClaimedJob, ClaimParams, JobFilter, JobListParams, JobRecord
from jobs_core.states import JobState, Outcome
from jobs_core.tenant import acting_for
from jobs_core.testing.stores import scratch_store
from jobs_core.urls import driver_from_url, mask_url
from jobs_core.worker import Worker

T = TypeVar("T")

log = logging.getLogger("jobs.testing")

#: The most runs one `drain` makes before it fails the test (a job that enqueues itself forever).
DEFAULT_MAX_RUNS: Final = 1_000
#: Wall seconds a drain waits for the store to answer its worker's start or first claim.
STORE_WAIT_S: Final = 30.0
#: The longest `advance` a drain takes (ten years): a bound, not a use case.
MAX_ADVANCE_S: Final = 10 * 365 * 86_400.0
#: The outcomes whose settle stores the attempt's error.
_FAILED: Final = frozenset(
    {
        Outcome.RETRIED,
        Outcome.DEAD_LETTERED,
        Outcome.DROPPED,
        Outcome.REFUSED,
        Outcome.CANCELLED,
    }
)
#: The claim `run` makes on its own step store, and how long that claim holds.
_RUN_WORKER: Final = "ujobs-test-run"
_RUN_LEASE_MS: Final = 3_600_000

#: What `drain(jobs=...)` takes: the forms `Worker` takes.
JobsSource = ModuleType | Sequence[JobHandle] | Mapping[str, JobHandle]


@dataclass(frozen=True, slots=True)
class RunError:
    """A failed attempt's stored error (the worker's `last_error`), read."""

    #: The exception's class name (`ConnectionError`, `TerminalError`…).
    type: str
    message: str
    #: The `X_*` code of a `JobsError`; None for any other exception.
    code: str | None
    #: The formatted traceback (its last frames), when the error was raised.
    traceback: str | None

    @staticmethod
    def parse(text: str) -> RunError:
        """`text` as the worker stores it (a JSON document); any other text is the message."""
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            return RunError("", text, None, None)
        code, tb = doc.get("code"), doc.get("traceback")
        return RunError(
            str(doc.get("type", "")),
            str(doc.get("message", "")),
            code if isinstance(code, str) else None,
            tb if isinstance(tb, str) else None,
        )


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """One run a drain made, as its settle wrote it."""

    job_id: str
    name: str
    queue: str
    #: Which attempt this run was (1 for the first; a suspension's resume keeps its number).
    attempt: int
    #: `completed`, `retried`, `dead-lettered`, `dropped`, `refused`, `suspended`, `shed`…
    outcome: Outcome
    #: The input the body was given (the JSON form).
    input: JsonValue
    #: What the body returned, in its stored JSON form, for `completed`; None otherwise.
    result: JsonValue
    #: The error stored with a failed attempt (every outcome in `_FAILED`); None otherwise.
    error: RunError | None


class DrainLimitError(AssertionError):
    """A drain made `max_runs` runs and jobs were still ready: a job that enqueues itself, or a
    limit set too low. A test failure, not a refusal of the library: `outcomes` holds the runs."""

    def __init__(self, max_runs: int, outcomes: list[RunOutcome]) -> None:
        names = sorted({o.name for o in outcomes[-20:]})
        super().__init__(
            f"drain made max_runs={max_runs} runs and jobs are still ready"
            f" (the last ones: {', '.join(names)})"
        )
        self.outcomes = outcomes


@dataclass(frozen=True, slots=True)
class _Prepared:
    """One body's call, made ready by `UJobs._prepare`: its input, context and step store."""

    input: JsonValue
    ctx: JobContext
    tenant: str | None
    steps: JobDriver


class _LoopThread:
    """An event loop on a daemon thread: the one the `_sync` methods and the setup run on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="ujobs-test-loop", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """`coro` run to its end on this loop; this thread waits."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        """Cancel what still runs there (as `asyncio.run` would), then stop and close the loop."""
        with contextlib.suppress(Exception):
            self.run(cancel_other_tasks())
        with contextlib.suppress(Exception):
            self.run(self.loop.shutdown_default_executor())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


def _no_running_loop(coroutine: str) -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(
        f"called from a running event loop: await ujobs.{coroutine}(...) in an async test"
    )


class UJobs:
    """One test's jobs: its own store (`driver`, reached at `url`, password masked), a fake
    clock (`clock`) and the client bound as the default for the test (`client`), so
    `handle.enqueue(...)` and `handle.enqueue_sync(...)` in the code under test reach this store
    with no `configure` call.

    Each method comes in two forms, as `Jobs.enqueue` / `enqueue_sync` do: the bare name is a
    coroutine, run on the caller's loop, for `async def` tests (pytest-asyncio); the `_sync`
    name blocks, for plain tests, and runs on a private loop this object owns. One name per
    form keeps both typed (no function that answers a list here and a coroutine there), and a
    `_sync` call from inside a running loop is refused, naming the coroutine, so an async test
    cannot block its own loop. Made by the `ujobs` fixture or by `ujobs_for`.
    """

    def __init__(self, driver: JobDriver, clock: FakeClock, url: str, loop: _LoopThread) -> None:
        self.driver = driver
        self.clock = clock
        self.url = url
        self._loop = loop
        self.client: Jobs = LoopJobs(driver, loop=loop.loop, clock=clock)

    # -- drain ----------------------------------------------------------------------------------

    async def drain(
        self,
        jobs: JobsSource | None = None,
        *,
        advance: float | dt.timedelta | None = None,
        max_runs: int = DEFAULT_MAX_RUNS,
    ) -> list[RunOutcome]:
        """Run every ready job through the real worker until none is ready; answer each run's
        outcome in the order the runs settled (each job's runs in turn; the bodies run one at
        a time in claim order, but between two jobs their settles may land either way).

        `jobs`: the declarations to run (a module, a list or a mapping, as `Worker` takes);
        None: every job declared with `job()` in this process. Their queues are drained, one
        body at a time in claim order (priority, then run time, then id); a job of another
        name in those queues is given back, due a minute later, as any worker gives back a name
        it does not run (no outcome is recorded for it). Jobs the bodies enqueue are run too.
        `advance` (seconds or a timedelta): the clock then moves forward to each time a retry,
        a delay, a sleep or an event poll falls due within that window, the jobs due are run
        there, and the clock ends exactly `advance` later; without it the clock does not move.
        It moves only between runs, so a body's `timeout` never fires here. Fails the test
        (`DrainLimitError`) once `max_runs` runs are made and jobs are still ready.
        """
        handles = self._handles(jobs)
        window_ms = _window_ms(advance)
        limit = count(max_runs, "max_runs", minimum=1, maximum=1_000_000)
        queues = tuple(dict.fromkeys(h.queue for h in handles))
        end = self.clock.now_ms() + window_ms
        ran: list[RunOutcome] = []
        # Set when a round claimed nothing though rows were due (a paused name, a paused queue):
        # only time moving on can change that.
        stalled = False
        while True:
            now = self.clock.now_ms()
            due_now, next_at = await self._due(queues, now, end)
            if due_now and not stalled:
                if len(ran) >= limit:
                    raise DrainLimitError(limit, ran)
                outcomes, claimed = await self._round(handles)
                ran.extend(outcomes)
                stalled = not claimed
                continue
            if now >= end:
                return ran
            await self.clock.advance((end if next_at is None else next_at) - now)
            stalled = False

    def drain_sync(
        self,
        jobs: JobsSource | None = None,
        *,
        advance: float | dt.timedelta | None = None,
        max_runs: int = DEFAULT_MAX_RUNS,
    ) -> list[RunOutcome]:
        """`drain`, blocking: for a plain (not async) test."""
        _no_running_loop("drain")
        return self._loop.run(self.drain(jobs, advance=advance, max_runs=max_runs))

    def _handles(self, jobs: JobsSource | None) -> list[JobHandle]:
        if jobs is not None:
            handles = jobs_of(jobs)
        else:
            found = (default_registry.get(n) for n in default_registry.names())
            handles = [h for h in found if h is not None]
        if not handles:
            raise DeclarationInvalidError(
                "nothing to run: declare jobs with job(), or pass jobs=", detail="jobs"
            )
        return handles

    async def _due(self, queues: Sequence[str], now: int, end: int) -> tuple[bool, int | None]:
        """Whether a live row of `queues` is due by `now` (ready, or parked until a time that
        has come: a claim takes both), and the earliest time in `(now, end]` one falls due."""
        wanted = set(queues)
        live = JobFilter(states=frozenset({JobState.READY, JobState.PARKED}))
        due_now = False
        next_at: int | None = None
        cursor: str | None = None
        while True:
            page = await self.driver.job_list(JobListParams(live, MAX_LIST_LIMIT, cursor))
            for j in page.jobs:
                at = j.run_at_ms
                if j.queue not in wanted or at is None:
                    continue
                if at <= now:
                    due_now = True
                elif at <= end:
                    next_at = at if next_at is None else min(next_at, at)
            cursor = page.next_cursor
            if cursor is None:
                return due_now, next_at

    async def _round(self, handles: list[JobHandle]) -> tuple[list[RunOutcome], int]:
        """One worker, one job claimed at most, its body finished and settled; answers the runs
        it settled and how many jobs it claimed."""
        settled: list[tuple[ClaimedJob, Outcome]] = []
        endings: dict[tuple[str, int], SettledEvent] = {}

        def ended(event: SettledEvent) -> None:
            endings[(event.job_id, event.attempt)] = event

        worker = Worker(
            self.driver,
            handles,
            clock=self.clock,
            # One body at a time, in claim order. Their settles can land out of that order
            # (an ack and a retry's nack go by separate batches), so `drain`'s list is in
            # settle order: one job's runs in turn, between jobs not fixed.
            concurrency=1,
            retention=None,
            rng=random.Random(0),
            on_settled=ended,
        )
        worker.observe(lambda job, outcome, _body_ms: settled.append((job, outcome)))
        # One job a round, however soon its body ends: a freed slot kicks the claim loop at
        # once, and a second claim could beat the stop below (a runaway job's next run would
        # then slip past `max_runs`).
        worker.limit_claims(1, lambda: None)
        try:
            try:
                await asyncio.wait_for(worker.start(), STORE_WAIT_S)
            except TimeoutError:
                raise self._unanswered("the worker's start") from None
            await self._first_claim(worker)
        finally:
            # The worker's own drain: no claim after the pass it races, every body finishes.
            await worker.stop()
        # A hand-back is this round's stop, not the job's doing: the next round runs it.
        kept = [(j, o) for j, o in settled if o is not Outcome.INTERRUPTED]
        ids = list(dict.fromkeys(j.id for j, _ in kept))
        rows = await self.driver.job_get_many(ids) if ids else {}
        outcomes = [_outcome(j, o, endings.get((j.id, j.attempt)), rows.get(j.id)) for j, o in kept]
        return outcomes, worker.stats.claimed

    async def _first_claim(self, worker: Worker) -> None:
        """Return once the worker's first claim pass has answered (its jobs admitted)."""
        give_up = time.monotonic() + STORE_WAIT_S
        spins = 0
        # `store_ok_ms` is the clock's reading at the pass, never 0: until the first answer it is.
        while worker.stats.store_ok_ms == 0:
            if time.monotonic() >= give_up:
                raise self._unanswered("the worker's first claim")
            spins += 1
            # A store in this process answers within a few loop turns; one over a socket takes
            # real time, so the wait then yields for a millisecond at a time.
            await asyncio.sleep(0 if spins < 100 else 0.001)

    def _unanswered(self, what: str) -> DriverUnavailableError:
        return DriverUnavailableError(
            f"{what} got no answer within {STORE_WAIT_S:g} s", detail=self.driver.describe()
        )

    # -- one body -------------------------------------------------------------------------------

    async def run(
        self,
        handle: JobHandle,
        input: Any,
        *,
        attempt: int = 1,
        key: str | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> Any:
        """Call `handle`'s body once, directly, and answer what it returned (or raise what it
        raised); no row is written to this test's store, no retry is made.

        The body gets what a worker gives it: the input's JSON form, the tenant and the client
        bound as under a worker, and a `JobContext` (`JobContext.for_test`) whose steps record
        in an in-memory step store of this call, fenced as in production. The record is built
        as `enqueue` builds it (`key` as there; without one a run key is made up), so an input
        enqueue would refuse is refused here. `attempt` sets `ctx.attempt` (1 to the job's
        `retry.attempts`). A `def` body runs on a thread, as a worker runs it. A body that
        parks (`step.sleep`, `wait_for_event`) raises `StepSuspension`; to see it resume, enqueue
        it and `drain(advance=...)`. A result with no JSON form is `X_JOB_RESULT_INVALID`.
        """
        prepared = await self._prepare(handle, input, attempt, key, on_progress)
        try:
            with acting_for(prepared.tenant), bound_client(self.client):
                if handle.is_async:
                    value = await handle.fn(prepared.input, prepared.ctx)
                else:
                    value = await asyncio.to_thread(handle.fn, prepared.input, prepared.ctx)
        finally:
            await prepared.steps.close()
        return _storable(handle, value)

    def run_sync(
        self,
        handle: JobHandle,
        input: Any,
        *,
        attempt: int = 1,
        key: str | None = None,
        on_progress: Callable[[Any], None] | None = None,
    ) -> Any:
        """`run`, blocking: for a plain test. A `def` body runs on the calling thread (its
        `ctx.sync_step` works from there), an `async def` body on this object's loop."""
        _no_running_loop("run")
        if handle.is_async:
            return self._loop.run(
                self.run(handle, input, attempt=attempt, key=key, on_progress=on_progress)
            )
        prepared = self._loop.run(self._prepare(handle, input, attempt, key, on_progress))
        try:
            with acting_for(prepared.tenant), bound_client(self.client):
                value = handle.fn(prepared.input, prepared.ctx)
        finally:
            self._loop.run(prepared.steps.close())
        return _storable(handle, value)

    async def _prepare(
        self,
        handle: JobHandle,
        input: Any,
        attempt: int,
        key: str | None,
        on_progress: Callable[[Any], None] | None,
    ) -> _Prepared:
        """The body's input and context, every refusal made before the step store is used."""
        if not isinstance(handle, JobHandle):
            raise DeclarationInvalidError("a job handle, as job() returns it", detail="handle")
        nth = count(attempt, "attempt", minimum=1, maximum=handle.retry.attempts)
        if key is None and handle.key is None:
            key = f"ujobs-test-run:{new_id()}"
        record = build_record(handle, input, clock=self.clock, key=key)
        steps = driver_from_url("memory")
        await steps.job_enqueue(record)
        claim = await steps.job_claim(
            ClaimParams(
                queues=(record.queue,),
                worker_id=_RUN_WORKER,
                limit=1,
                lease_ms=_RUN_LEASE_MS,
                now_ms=self.clock.now_ms(),
            )
        )
        job = dataclasses.replace(claim.jobs[0], attempt=nth)
        body_input = loads(job.input_json)
        tenant = handle.tenant_for(body_input)
        ctx = JobContext.for_test(
            job,
            steps,
            tenant=tenant,
            clock=self.clock,
            on_progress=on_progress,
            step_timeout_ms=handle.step_timeout_ms,
            event_poll_ms=handle.event_poll_ms,
        )
        return _Prepared(body_input, ctx, tenant, steps)

    # -- what was enqueued ----------------------------------------------------------------------

    async def jobs(
        self,
        name: str | None = None,
        *,
        state: JobState | str | Iterable[JobState | str] | None = None,
    ) -> list[JobRecord]:
        """Every row of this test's store of job `name` (None: any) in `state` (one, several,
        None: any), oldest first — the order they were enqueued — read through the operator
        family (`job_list`, `job_get_many`) as an operator sees them."""
        keep = JobFilter(states=_states(state), name=name)
        ids: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.driver.job_list(JobListParams(keep, MAX_LIST_LIMIT, cursor))
            ids += [j.id for j in page.jobs]
            cursor = page.next_cursor
            if cursor is None:
                break
        ids.reverse()
        rows: dict[str, JobRecord] = {}
        for at in range(0, len(ids), MAX_BULK_IDS):
            rows.update(await self.driver.job_get_many(ids[at : at + MAX_BULK_IDS]))
        return [rows[i] for i in ids if i in rows]

    def jobs_sync(
        self,
        name: str | None = None,
        *,
        state: JobState | str | Iterable[JobState | str] | None = None,
    ) -> list[JobRecord]:
        """`jobs`, blocking."""
        _no_running_loop("jobs")
        return self._loop.run(self.jobs(name, state=state))

    async def enqueued(self, name: str | None = None) -> list[JsonValue]:
        """The inputs (JSON form) of every job `name` (None: any) enqueued in this test, in
        whatever state it is now, oldest first."""
        return [r.input for r in await self.jobs(name)]

    def enqueued_sync(self, name: str | None = None) -> list[JsonValue]:
        """`enqueued`, blocking."""
        _no_running_loop("enqueued")
        return self._loop.run(self.enqueued(name))


def _outcome(
    job: ClaimedJob, outcome: Outcome, ending: SettledEvent | None, row: JobRecord | None
) -> RunOutcome:
    """A run's record: the `on_settled` event of an ending (its exact result and error), else
    the error the settle left on the row (read before any later run of it)."""
    if ending is not None:
        result, error = ending.result, ending.error
    else:
        result = None
        error = row.last_error if row is not None and outcome in _FAILED else None
    return RunOutcome(
        job_id=job.id,
        name=job.name,
        queue=job.queue,
        attempt=job.attempt,
        outcome=outcome,
        input=job.input,
        result=result,
        error=None if error is None else RunError.parse(error),
    )


def _storable(handle: JobHandle, value: T) -> T:
    """`value` when a worker could store it as the result; `X_JOB_RESULT_INVALID` otherwise."""
    if value is not None:
        try:
            dumps(value)
        except Exception as exc:
            why = exc.message if isinstance(exc, JobsError) else f"{type(exc).__name__}: {exc}"
            raise ResultInvalidError(
                f"the result cannot be stored: {why}", detail=handle.name
            ) from exc
    return value


def _window_ms(advance: float | dt.timedelta | None) -> int:
    if advance is None:
        return 0
    seconds = advance.total_seconds() if isinstance(advance, dt.timedelta) else advance
    return round(finite_number(seconds, "advance", minimum=0.0, maximum=MAX_ADVANCE_S) * 1000)


def _states(state: JobState | str | Iterable[JobState | str] | None) -> frozenset[JobState]:
    if state is None:
        return frozenset()
    given = [state] if isinstance(state, str) else list(state)
    try:
        return frozenset(JobState(s) for s in given)
    except ValueError:
        raise OptionInvalidError(
            f"must be one of {', '.join(s.value for s in JobState)}", detail="state"
        ) from None


@contextmanager
def ujobs_for(url: str = "memory") -> Iterator[UJobs]:
    """A `UJobs` on a scratch store of the server `url` names — a new memory store, a new
    Postgres schema (migrated), a new Redis key prefix — bound as the default client inside
    the block; on the way out the driver is closed and the store dropped, whatever happened
    (a failure there is raised only when the block itself succeeded)."""
    store = scratch_store(url)
    loop = _LoopThread()
    driver: JobDriver | None = None
    failed = False
    try:
        driver = driver_from_url(store.url)
        loop.run(driver.migrate())
        harness = UJobs(driver, FakeClock(), mask_url(store.url), loop)
        with bound_client(harness.client):
            yield harness
    except BaseException:
        failed = True
        raise
    finally:
        steps: list[Callable[[], Coroutine[Any, Any, object]]] = [store.drop]
        if driver is not None:
            steps.insert(0, driver.close)
        try:
            for step in steps:
                try:
                    loop.run(step())
                except Exception:
                    if not failed:
                        raise
                    log.warning("jobs.testing.cleanup_failed %s", mask_url(url), exc_info=True)
        finally:
            loop.stop()
