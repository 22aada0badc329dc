"""What a running body sees: its input's metadata, its cancellation signal, its progress."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs_core.errors import JobsError

if TYPE_CHECKING:
    from jobs_core.steps.api import StepApi, SyncStepApi


class CancelSignal:
    """The signal one run is cancelled by; owned and fired by the worker, readable from any thread.

    An async body is also cancelled as a task; a thread body must look at `cancelled` (or call
    `raise_if_cancelled()`): a thread cannot be stopped from outside.
    """

    __slots__ = ("_callbacks", "_reason")

    def __init__(self) -> None:
        # Fired on the worker's loop only; a body thread reads `_reason` (one attribute read).
        self._reason: JobsError | None = None
        self._callbacks: list[Callable[[], None]] = []

    @property
    def cancelled(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> JobsError | None:
        """Why the run was cancelled (`X_JOB_TIMEOUT`, `X_JOB_LEASE_LOST`, `X_DRAINING`…)."""
        return self._reason

    def fire(self, reason: JobsError) -> bool:
        """Cancel with `reason` and run the callbacks; True the first time only."""
        if self._reason is not None:
            return False
        self._reason = reason
        callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()
        return True

    def on_fire(self, callback: Callable[[], None]) -> None:
        """Call `callback` when the signal fires (at once if it already has)."""
        if self._reason is not None:
            callback()
        else:
            self._callbacks.append(callback)

    def raise_if_cancelled(self) -> None:
        if self._reason is not None:
            raise self._reason

    async def wait(self) -> JobsError:
        """Return the reason once the signal fires."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.on_fire(lambda: None if fut.done() else fut.set_result(None))
        await fut
        assert self._reason is not None
        return self._reason


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
    #: Durable steps, sleeps and event waits, for an `async def` body (`jobs_core.steps`).
    step: StepApi = field(repr=False)
    #: The same, blocking, for a `def` body.
    sync_step: SyncStepApi = field(repr=False)

    @property
    def final_attempt(self) -> bool:
        return self.attempt >= self.max_attempts

    def progress(self, value: Any) -> None:
        """Record progress (any JSON value); throttled, and flushed with the settle."""
        self._report(value)
