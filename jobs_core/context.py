"""What a running body sees: its input's metadata, its cancellation signal, its progress."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs_core.errors import DeclarationInvalidError, JobCancelledError, JobsError

if TYPE_CHECKING:
    from jobs_core.clock import Clock
    from jobs_core.driver import JobDriver
    from jobs_core.records import ClaimedJob, JoinState
    from jobs_core.steps.api import StepApi, SyncStepApi

#: Held while a context makes its step API (`JobContext.step`), rarely: once per run at most.
_MAKING = threading.Lock()


class CancelSignal:
    """The signal one run is cancelled by; owned and fired by the worker, readable from any thread.

    An async body is also cancelled as a task; a thread body must look at `cancelled` (or call
    `raise_if_cancelled()`): a thread cannot be stopped from outside.
    """

    __slots__ = ("_callbacks", "_reason")

    def __init__(self) -> None:
        # Fired on the worker's loop only; a body thread reads `_reason` (one attribute read).
        # A str: the run has ended (`end`), the job's id; its error is made when first read.
        self._reason: JobsError | str | None = None
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> JobsError | None:
        """Why the run was cancelled (`X_JOB_TIMEOUT`, `X_JOB_LEASE_LOST`, `X_DRAINING`…)."""
        reason = self._reason
        if isinstance(reason, str):
            reason = self._reason = JobCancelledError("the run has ended", detail=reason)
        return reason

    def fire(self, reason: JobsError) -> bool:
        """Cancel with `reason` and run the callbacks; True the first time only."""
        if self._reason is not None:
            return False
        self._reason = reason
        self._run_callbacks()
        return True

    def end(self, job_id: str) -> None:
        """Fire, unless it has, because the run of `job_id` has ended (its settle is made): the
        reason is `X_JOB_CANCELLED` "the run has ended", made only if it is read (every run
        ends so, and hardly any reads why)."""
        if self._reason is None:
            self._reason = job_id
            self._run_callbacks()

    def _run_callbacks(self) -> None:
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def on_fire(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the signal fires (at once if it already has)."""
        if self._reason is not None:
            callback()
        else:
            self._callbacks.append(callback)

    def raise_if_cancelled(self) -> None:
        if self._reason is not None:
            reason = self.reason
            if reason is not None:
                raise reason

    async def wait(self) -> JobsError:
        """Return the reason once the signal fires."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_fire(lambda: None if fut.done() else fut.set_result(None))
        await fut
        reason = self.reason
        assert reason is not None
        return reason


@dataclass(slots=True)
class JobContext:
    """Passed to every body beside its input."""

    job_id: str
    run_id: str
    name: str
    queue: str
    attempt: int
    max_attempts: int
    #: The org this run acts for (from the declaration's `tenant`), or None for `'none'`.
    tenant: str | None
    #: The enqueuer's tenant as stored on the row (the rate limiter's bucket; not authority).
    enqueued_tenant: str | None
    enqueued_by: str | None
    signal: CancelSignal
    _report: Callable[[Any], None] = field(repr=False)
    #: Makes `step` the first time it is read: a body that never reads it never pays for it.
    _make_step: Callable[[], StepApi] = field(repr=False)
    #: The loop `sync_step` blocks on (the worker's).
    _loop: asyncio.AbstractEventLoop = field(repr=False)
    #: flows: the join this run was released from (`after=` dependencies, a batch's members, a
    #: gather's children), as it stood at the claim — `total`, `failed` (did not complete),
    #: `policy`; None for a run that never waited for other jobs.
    join: JoinState | None = None
    _step: StepApi | None = field(default=None, repr=False)
    _sync_step: SyncStepApi | None = field(default=None, repr=False)

    @property
    def step(self) -> StepApi:
        """Durable steps, sleeps and event waits, for an `async def` body (`jobs_core.steps`)."""
        step = self._step
        if step is None:
            with _MAKING:  # one per run, though a body's threads may ask at once
                step = self._step
                if step is None:
                    step = self._step = self._make_step()
        return step

    @property
    def sync_step(self) -> SyncStepApi:
        """The same, blocking, for a `def` body."""
        sync = self._sync_step
        if sync is None:
            step = self.step
            with _MAKING:
                sync = self._sync_step
                if sync is None:
                    from jobs_core.steps.api import SyncStepApi

                    sync = self._sync_step = SyncStepApi(step, self._loop)
        return sync

    @classmethod
    def for_test(
        cls,
        job: ClaimedJob,
        driver: JobDriver,
        *,
        tenant: str | None = None,
        clock: Clock | None = None,
        signal: CancelSignal | None = None,
        on_progress: Callable[[Any], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        step_timeout_ms: int | None = None,
        event_poll_ms: int | None = None,
    ) -> JobContext:
        """The context a worker would hand `job`'s body, for calling that body yourself (a test).

        `job` is a claim made on `driver` (`job_claim`): `ctx.step` records there, fenced on that
        claim, exactly as under a worker, so steps replay and refuse as they do in production.
        `ctx.sync_step` blocks on `loop` (default: the running loop), so a `def` body must run on
        another thread than that loop's. `ctx.progress` calls `on_progress` (default: drops the
        value). `signal` is fired only by the caller (default: a new one). `tenant` is the org
        the run acts for (`handle.tenant_for(input)`); nothing here sets it as the current one.
        """
        from jobs_core.clock import SystemClock
        from jobs_core.steps.api import StepApi

        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                raise DeclarationInvalidError(
                    "the steps need an event loop: call it inside one, or pass loop=",
                    detail="loop",
                ) from None
        signal = signal if signal is not None else CancelSignal()
        steps = StepApi(
            driver,
            clock if clock is not None else SystemClock(),
            job,
            signal,
            step_timeout_ms=step_timeout_ms,
            event_poll_ms=event_poll_ms,
            tenant=tenant,
        )
        return cls._of_claim(
            job,
            tenant=tenant,
            signal=signal,
            report=on_progress if on_progress is not None else _drop,
            make_step=lambda: steps,
            loop=loop,
        )

    @classmethod
    def _of_claim(
        cls,
        job: ClaimedJob,
        *,
        tenant: str | None,
        signal: CancelSignal,
        report: Callable[[Any], None],
        make_step: Callable[[], StepApi],
        loop: asyncio.AbstractEventLoop,
    ) -> JobContext:
        """The context of one run of the claim `job`: its row's metadata, with these parts (the
        one constructor of the worker's run and of `for_test`, so the two cannot differ);
        `make_step` is called once, when the body first reads `step` or `sync_step`."""
        # By position, in the fields' order: a third of the cost by keyword, on every run.
        return cls(
            job.id,
            job.run_id,
            job.name,
            job.queue,
            job.attempt,
            job.max_attempts,
            tenant,
            job.tenant_id,
            job.enqueued_by,
            signal,
            report,
            make_step,
            loop,
            job.join,
        )

    @property
    def final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def progress(self, value: Any) -> None:
        """Record progress (any JSON value); throttled, and flushed with the settle."""
        self._report(value)


def _drop(value: Any) -> None:
    """Progress nobody listens to."""
