"""One held job's run: wait for a slot, decode its input, run its body (a task, a thread for a
`def` body, a process for one declared `executor="process"`) under its deadline and signal, and
hand its ending to `Outcomes`."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

from jobs_core import tracing
from jobs_core.batch import batch_view
from jobs_core.clock import Clock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    DependencyFailedError,
    InputInvalidError,
    JobsError,
    JobTimeoutError,
    ProcessDiedError,
    ResultInvalidError,
    TenantRequiredError,
    WorkerError,
)
from jobs_core.facade import Jobs, SettledEvent
from jobs_core.job import JobHandle
from jobs_core.jsonform import JsonValue, dumps, loads
from jobs_core.leases.admit import Gate, Handed, Refusal
from jobs_core.processes import BodyProcesses, Encoded, ProcessContext
from jobs_core.records import Ack, JoinPolicy, Nack, NackKind
from jobs_core.states import Outcome
from jobs_core.steps import StepApi, StepSuspension
from jobs_core.tenant import acting_for
from jobs_core.threads import BodyThreads
from jobs_core.worker.failure import brief, typed
from jobs_core.worker.held import Held, job_fields, let_go
from jobs_core.worker.outcome import Outcomes
from jobs_core.worker.stats import WorkerStats

log = logging.getLogger("jobs")

#: A job whose name this worker does not run is given back (no attempt spent) to run this much
#: later: a worker that knows the name (the rest of a rolling deploy) gets it then, and an old
#: worker spends one claim a minute on it, not a spin.
UNKNOWN_NAME_DELAY_MS = 60_000
#: At most one warning per unknown name in this window (the worker's clock).
UNKNOWN_NAME_WARN_EVERY_MS = 60_000
_NO_TENANT: contextlib.nullcontext[None] = contextlib.nullcontext()


class LocalSlots:
    """A worker's `concurrency` slots, first come first served: `try_take` never passes a run
    waiting in `take`, and a slot given back goes to the longest waiting run."""

    def __init__(self, count: int) -> None:
        self._free = count
        self._waiting: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        while self._waiting and self._waiting[0].done():
            self._waiting.popleft()  # a waiter cancelled while it waited
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.give()  # handed a slot as it was cancelled: the next waiter's
            raise

    def give(self) -> None:
        while self._waiting:
            turn = self._waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1


class Runner:
    """Runs held jobs, `concurrency` bodies at once; a run's end leaves `held` (`run_held`)."""

    def __init__(
        self,
        driver: JobDriver,
        clock: Clock,
        handles: Mapping[str, JobHandle],
        held: dict[str, Held],
        stats: WorkerStats,
        outcomes: Outcomes,
        client: Callable[[], Jobs],
        *,
        worker_id: str,
        concurrency: int,
        gate: Gate,
        process_pool_size: int = 1,
        process_preload: tuple[str, ...] = (),
    ) -> None:
        self._driver = driver
        #: The fleet-wide limits' admission; its leases are handed back as each run ends.
        self.gate = gate
        self._clock = clock
        self._handles = handles
        self._held = held
        self._stats = stats
        self._outcomes = outcomes
        #: The client a body's enqueues use (`Worker._body_client`), bound by the claim loop.
        self.client = client
        self._worker_id = worker_id
        self._concurrency = concurrency
        self._slots = LocalSlots(concurrency)
        #: The threads `def` bodies run on, made with the first one (the drain shuts them down).
        self.executor: BodyThreads | None = None
        #: The processes `executor="process"` bodies run in, made with the first one (the drain
        #: closes them), `process_pool_size` at most, each importing `process_preload` first.
        self.processes: BodyProcesses | None = None
        self._process_pool_size = process_pool_size
        self._process_preload = process_preload
        self._unknown_warned: dict[str, int] = {}
        #: The loop the runs run on, set by the claim loop as it starts (`ClaimLoop.run`):
        #: `asyncio.get_running_loop` makes a `getpid` system call each time it is asked.
        self.loop: asyncio.AbstractEventLoop | None = None
        #: Told of each run whose body ended (the claim loop's count of settling jobs).
        self.on_body_end: Callable[[Held], None] = lambda held: None
        #: Told of each run that ended (its settle answered, or it never started), once.
        self.on_run_end: Callable[[Held], None] = lambda held: None

    async def run_held(self, held: Held) -> None:
        """Run one claimed job in a slot; whatever raises, the job is settled (or known lost).

        An exception that escapes `_execute` before a settle was made fails the attempt on the
        normal retry path, typed (`X_WORKER_ERROR` with the original type and message unless
        it was a `JobsError` already). Only a settle that itself raises leaves the row to its
        lease.
        """
        handle = self._handles.get(held.job.name)
        held.sensitive = handle.sensitive if handle is not None else frozenset()
        try:
            if not held.in_slot or not held.admitted or held.refusal is not None:
                await self._enter(held)  # a claim round's job held a slot and was admitted
            held.started = True
            if not tracing.active():  # no span, and no context manager to enter for none
                try:
                    await self._execute(held, handle)
                except Exception as exc:
                    await self._settle_crash(held, exc)
                return
            with tracing.consumer(held.job) as held.span:
                try:
                    await self._execute(held, handle)
                except Exception as exc:
                    await self._settle_crash(held, exc)
        finally:
            self._leave_slot(held)
            # A run that never reached its body hands its leases back as never started.
            self.end_leases(held, started=False)
            if not held.acking:  # else its ack's answer ends it (`_acked`)
                self._run_ended(held)

    def _run_ended(self, held: Held) -> None:
        if held.started:
            let_go(self._held, held)
            self._stats.in_flight = len(self._held)
        self.on_run_end(held)

    def _acked(self, held: Held, landed: bool) -> None:
        """A completed run's ack answered (`Settler.ack_then`): counted, and the run ends."""
        try:
            self._outcomes.tally(Outcome.COMPLETED, landed, held)
        finally:
            self._run_ended(held)

    def take_slot_now(self, held: Held) -> bool:
        """Give `held` a local slot if one is free and no run waits for one (a claim round's
        jobs, in order); True when it got one."""
        if not self._slots.try_take():
            return False
        self._occupy(held)
        return True

    def _occupy(self, held: Held) -> None:
        held.in_slot = True
        self._stats.running += 1

    async def _enter(self, held: Held) -> None:
        """Until the run may start: a local slot, then its fleet leases (unless its claim round
        admitted it with the slot), taken now so its body starts on them at once. A follower
        waits for its slot outside the local slots, then takes one again."""
        while True:
            if not held.in_slot and not await self._take_slot(held):
                # Its claim (or the fleet slot it was handed) was lost while it waited: it is
                # given back now, and no body starts on what the store no longer holds.
                reason = held.signal.reason
                why = f"lost before it started ({reason.code if reason else 'cancelled'})"
                held.refusal = Refusal("wait", why, self._clock.now_ms())
                return
            if not held.admitted:
                held.admit(await self.gate.admit_one(held.job))
            if held.refusal is None or held.refusal.slot is None:
                return
            self._leave_slot(held)
            await self._follow(held, held.refusal.slot)

    async def _take_slot(self, held: Held) -> bool:
        """Wait for a local slot; False, without one, when the run's signal fires first."""
        if held.signal.cancelled:
            return False
        taking = asyncio.ensure_future(self._slots.take())

        def stop_waiting() -> None:
            taking.cancel()

        held.signal.on_fire(stop_waiting)
        try:
            await taking
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # a drain hands the job back (`run_held`'s caller)
            return False
        self._occupy(held)
        return True

    def _leave_slot(self, held: Held) -> None:
        # Once: when the body ends (its settle then runs outside the slot), when a follower
        # starts waiting, or when the run ends.
        if held.in_slot:
            held.in_slot = False
            self._stats.running -= 1
            self._slots.give()

    async def _follow(self, held: Held, slot: asyncio.Future[Handed]) -> None:
        """Wait for the slot one of this worker's runs of the key gives back; a fired signal
        (a cancel, a lost lease) gives the job back instead."""

        def stop_waiting() -> None:
            slot.cancel()

        held.signal.on_fire(stop_waiting)
        try:
            handed = await slot
            held.leases, held.leases_landed_ms = (handed.lease,), handed.landed_ms
            held.refusal = None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # a drain hands the job back (`run_held`'s caller)
            held.refusal = Refusal("wait", "stopped waiting for a slot", self._clock.now_ms())
        finally:
            if slot.done() and not slot.cancelled() and not held.leases:
                handed = slot.result()
                self.gate.end([handed.lease], started=False, landed_ms=handed.landed_ms)

    def end_leases(self, held: Held, *, started: bool) -> None:
        """Hand back the run's slots and stamps once (released or abandoned, `Gate.end`)."""
        leases, held.leases = held.leases, ()
        if leases:
            self.gate.end(leases, started=started, landed_ms=held.leases_landed_ms)

    async def _settle_crash(self, held: Held, exc: Exception) -> None:
        job = held.job
        if held.settled:
            log.error(
                "jobs.run.crashed %s %s after its settle",
                job.name,
                job.id,
                exc_info=exc,
                extra=held.log_extra(self._worker_id),
            )
            return
        error = typed(exc, WorkerError(brief(exc), detail=job.name))
        try:
            await self._outcomes.settle_error(held, self._handles.get(job.name), error)
        except Exception:  # the last resort: the row stays leased, lapses and is claimed again
            log.exception(
                "jobs.run.crashed %s %s and its settle failed",
                job.name,
                job.id,
                extra=held.log_extra(self._worker_id),
            )

    async def _execute(self, held: Held, handle: JobHandle | None) -> None:
        """Run the body (`handle`'s: the job's name's, None for a name this worker does not run)
        and settle its job; each step around the body that raises settles the job with a typed
        error (the stored input, the tenant function, the result's form)."""
        job = held.job
        if handle is None:
            await self._give_back_unknown(held)
            return
        if held.refusal is not None:
            self._leave_slot(held)  # no body runs: the slot is the next run's while this settles
            await self._outcomes.refused(held, handle, held.refusal)
            return
        try:
            input = loads(job.input_json)
        except Exception as exc:
            undecodable = InputInvalidError(f"the stored input cannot be decoded: {brief(exc)}")
            await self._outcomes.settle_error(held, handle, typed(exc, undecodable))
            return
        join = job.join
        if join is not None and join.policy is JoinPolicy.SUCCESS and join.failed > 0:
            # Released from an `after=` whose dependency did not complete: failed for good
            # (terminal: the dependency is finished for good), its body never run.
            unmet = DependencyFailedError(
                f"{join.failed} of the {join.total} jobs it depends on did not complete",
                detail=job.id,
            )
            await self._outcomes.settle_error(held, handle, unmet, input)
            return
        viewed = batch_view(input, join, job.id)
        # What a process is sent: the stored text, unless the body is handed a view of it.
        input_json = job.input_json if viewed is input else None
        input = viewed
        try:
            tenant = handle.tenant_for(input)
        except Exception as exc:
            # The function sees the stored JSON form (a dict for a dataclass input).
            no_org = TenantRequiredError(
                f"the tenant function raised {brief(exc)}", detail=job.name
            )
            await self._outcomes.settle_error(held, handle, typed(exc, no_org), input)
            return

        def make_step() -> StepApi:
            # Made when the body first reads `ctx.step` (most bodies never do); kept on the run
            # for what a final failure undoes.
            held.steps = StepApi(
                self._driver,
                self._clock,
                job,
                held.signal,
                step_timeout_ms=handle.step_timeout_ms,
                event_poll_ms=handle.event_poll_ms,
                put=self._outcomes.settler.step_put,
                tenant=tenant,
            )
            return held.steps

        ctx = JobContext._of_claim(
            job,
            tenant=tenant,
            signal=held.signal,
            report=held.report_progress,
            make_step=make_step,
            loop=self.loop or asyncio.get_running_loop(),
        )
        # Set when the body starts: a deadline counts from it, and a thread or a process body
        # starts later than this task. An async body without a deadline needs none.
        started = asyncio.Event() if not handle.is_async or handle.timeout_ms is not None else None
        deadline: asyncio.Task[None] | None = None
        if handle.timeout_ms is not None and started is not None:
            deadline = asyncio.create_task(self._deadline(held, handle.timeout_ms, started))
        value: Any = None
        error: BaseException | None = None
        suspension: StepSuspension | None = None
        held.in_body = True
        body_from = self._clock.now_ms()
        try:
            # The body runs inside this task, so a fired signal cancels it without a second
            # task per job. The task's context is a copy of the claim loop's, which binds this
            # worker's client and no tenant (`ClaimLoop.run`); a run acting for an org sets it
            # here, in this task's own context (and a thread body's, a copy of it).
            if tenant is None and started is None:  # the usual run: nothing to enter
                value = await handle.fn(input, ctx)
            else:
                value = await self._body(held, handle, input, input_json, ctx, tenant, started)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not held.signal.cancelled or task is None:
                raise
            task.uncancel()
        except StepSuspension as asked:
            suspension = asked
        except Exception as exc:
            error = exc
        finally:
            held.in_body = False
            held.body_ms = self._clock.now_ms() - body_from
            if deadline is not None:
                deadline.cancel()
            # The slots are free once the body is: the next run may start before this one
            # settles, and the next claim need not wait for the settle to land.
            self.end_leases(held, started=True)
            self._leave_slot(held)
            self.on_body_end(held)
        reason = held.signal.reason
        if reason is not None:
            await self._outcomes.settle_cancelled(held, handle, reason, input)
            return
        if suspension is not None:
            await self._outcomes.suspend(held, suspension)
            return
        if error is not None:
            await self._outcomes.settle_error(held, handle, error, input)
            return
        try:
            if isinstance(value, Encoded):  # encoded in its process, with the same checks
                result_json = value.text()
            else:
                result_json = None if value is None else dumps(value)
        except Exception as exc:
            # Terminal: the same result will not be storable on a re-run, which would repeat
            # the body's side effects.
            why = exc.message if isinstance(exc, JobsError) else brief(exc)
            unstorable = ResultInvalidError(f"the result cannot be stored: {why}", detail=job.name)
            unstorable.__cause__ = exc
            await self._outcomes.settle_error(held, handle, unstorable, input)
            return
        held.signal.end(job.id)
        held.settled = True
        ack = Ack(
            job.fence, self._clock.now_ms(), result_json, held.pending_progress(self._worker_id)
        )
        hears = self._outcomes.hears_settled(handle)
        if (
            not hears
            and held.span is None
            and self._outcomes.settler.ack_then(ack, functools.partial(self._acked, held))
        ):
            # Nothing waits on the answer but the count and the run's end, so this task ends
            # here instead of being woken for it. A span (ended by the answer's outcome) or a
            # hook (awaited) takes the waiting way.
            held.acking = True
            return
        landed = await self._outcomes.settler.ack(ack)
        self._outcomes.tally(Outcome.COMPLETED, landed, held)
        if landed and hears:  # the event built only for a hook
            event = SettledEvent(
                job.id,
                job.name,
                job.queue,
                Outcome.COMPLETED,
                job.attempt,
                input,
                loads(result_json) if result_json is not None else None,
                None,
            )
            await self._outcomes.fire_settled(handle, event, tenant)

    async def _body(
        self,
        held: Held,
        handle: JobHandle,
        input: JsonValue,
        input_json: str | None,
        ctx: JobContext,
        tenant: str | None,
        started: asyncio.Event | None,
    ) -> Any:
        """The body's value, run acting for `tenant` (if any) in this task's own context (and a
        thread body's, a copy of it)."""
        with _NO_TENANT if tenant is None else acting_for(tenant):
            if started is None:
                return await handle.fn(input, ctx)
            if handle.is_async:
                started.set()
                return await handle.fn(input, ctx)
            if handle.executor == "process":
                return await self._run_in_process(held, input, input_json, tenant, started)
            return await self._run_in_thread(held, handle, input, ctx, started)

    async def _give_back_unknown(self, held: Held) -> None:
        """Give back a job this worker does not run: `SHED`, no attempt spent, due again in
        `UNKNOWN_NAME_DELAY_MS`; never failed for it (an older worker in a rolling deploy)."""
        job = held.job
        held.signal.end(job.id)
        held.settled = True
        now = self._clock.now_ms()
        self._stats.unknown_name += 1
        warned = self._unknown_warned.get(job.name)
        if warned is None or now - warned >= UNKNOWN_NAME_WARN_EVERY_MS:
            self._unknown_warned[job.name] = now
            log.warning(
                "jobs.run.unknown_name %s %s: this worker does not run %r; given back for %d s",
                job.name,
                job.id,
                job.name,
                UNKNOWN_NAME_DELAY_MS // 1000,
                extra=job_fields(self._worker_id, job),
            )
        landed = await self._outcomes.settler.nack(
            Nack(job.fence, NackKind.SHED, now, now + UNKNOWN_NAME_DELAY_MS)
        )
        if not landed:
            self._outcomes.tally(Outcome.SHED, landed, held)

    async def _run_in_thread(
        self,
        held: Held,
        handle: JobHandle,
        input: JsonValue,
        ctx: JobContext,
        started: asyncio.Event,
    ) -> Any:
        """Run a `def` body on a thread free when it is submitted (`BodyThreads`).

        `started` is set when the body starts on its thread. A run that ends while the thread
        still runs (deadline, cancel) leaves it to finish on its own: counted in
        `threads_overrun`, logged once, and it never takes a thread from the next body.
        """
        if self.executor is None:
            self.executor = BodyThreads(self._concurrency, "ujobs-body")
        context = contextvars.copy_context()
        loop = asyncio.get_running_loop()

        def run() -> Any:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(started.set)
            return context.run(handle.fn, input, ctx)

        thread_run = self.executor.submit(run)
        try:
            return await asyncio.wrap_future(thread_run)
        except asyncio.CancelledError:
            if not thread_run.done():
                self._thread_overran(held, thread_run, loop)
            raise

    async def _run_in_process(
        self,
        held: Held,
        input: JsonValue,
        input_json: str | None,
        tenant: str | None,
        started: asyncio.Event,
    ) -> Encoded:
        """Run a `def` body declared `executor="process"` in a child of the worker's processes
        (`BodyProcesses`); `started` is set when a child takes it. A run that ends while the body
        runs (deadline, cancel, lost lease, drain) kills its child: counted in
        `processes_killed` and logged once; a child that died fails the attempt
        (`X_JOB_PROCESS_DIED`, counted in `processes_died`)."""
        if self.processes is None:
            self.processes = BodyProcesses(self._process_pool_size, self._process_preload)
        job = held.job
        handle = self._handles[job.name]
        ctx = ProcessContext(
            job.id, job.run_id, job.name, job.queue, job.attempt, job.max_attempts, tenant
        )
        began = False

        def start() -> None:
            nonlocal began
            began = True
            started.set()

        text = input_json if input_json is not None else dumps(input)
        try:
            return await self.processes.run(handle.fn, text, ctx, start)
        except asyncio.CancelledError:
            if began:
                self._stats.processes_killed += 1
                reason = held.signal.reason
                log.warning(
                    "jobs.run.process_killed %s %s: the run ended (%s) while its body ran; its "
                    "process was killed",
                    job.name,
                    job.id,
                    reason.code if reason is not None else "cancelled",
                    extra=job_fields(self._worker_id, job),
                )
            raise
        except ProcessDiedError:
            self._stats.processes_died += 1
            raise

    def _thread_overran(
        self, held: Held, thread_run: Future[Any], loop: asyncio.AbstractEventLoop
    ) -> None:
        self._stats.threads_overrun += 1
        self._stats.threads_overrunning += 1
        reason = held.signal.reason
        log.warning(
            "jobs.run.thread_overrun %s %s: the run ended (%s) but its thread still runs; "
            "it keeps that thread until it returns",
            held.job.name,
            held.job.id,
            reason.code if reason is not None else "cancelled",
            extra=job_fields(self._worker_id, held.job),
        )

        def returned() -> None:
            self._stats.threads_overrunning -= 1

        def on_done(_: Future[Any]) -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(returned)

        thread_run.add_done_callback(on_done)

    async def _deadline(self, held: Held, ms: int, started: asyncio.Event) -> None:
        """Fire the run's signal `ms` after its body STARTED (not from when it was claimed or
        waited for a thread)."""
        await started.wait()
        await self._clock.sleep_ms(ms)
        held.signal.fire(JobTimeoutError(f"deadline of {ms} ms passed", detail=held.job.id))
