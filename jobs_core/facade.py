"""The one enqueue implementation, usable from async code and from plain sync code.

`Jobs(driver)` builds each row (ids, key, tenant, JSON form, time) in `build_record`, the only
place a `NewJob` is made for a handle; the sync methods run the same coroutine on a private
event-loop thread, so a Flask view or a script never manages a loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import MAX_ENQUEUE_BATCH, MAX_TIME_MS, PRIORITY_MAX, PRIORITY_MIN, JobDriver
from jobs_core.errors import BatchTooLargeError, DeclarationInvalidError
from jobs_core.ids import new_id
from jobs_core.job import JobHandle
from jobs_core.jsonform import JsonValue, dumps
from jobs_core.options import count
from jobs_core.records import EnqueueResult, NewJob
from jobs_core.states import Outcome
from jobs_core.tenant import current_tenant

T = TypeVar("T")
_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class SettledEvent:
    """What `on_settled` hears: one job's ending, after its settle landed."""

    job_id: str
    name: str
    queue: str
    outcome: Outcome
    attempt: int
    #: The run's input; None for a row buried by a claim (its body never ran here).
    input: JsonValue
    result: JsonValue
    error: str | None


class Jobs:
    """Enqueue jobs on one driver, from async code (`enqueue`) or sync code (`enqueue_sync`)."""

    def __init__(self, driver: JobDriver, *, clock: Clock | None = None) -> None:
        self.driver = driver
        self.clock = clock or SystemClock()
        self._portal: _Portal | None = None
        self._portal_lock = threading.Lock()

    def build_record(
        self,
        handle: JobHandle,
        input: Any,
        *,
        key: str | None = None,
        tenant_id: str | None = _UNSET,
        run_at_ms: int | None = None,
        delay_ms: int | None = None,
        priority: int | None = None,
        queue: str | None = None,
        id: str | None = None,
        run_id: str | None = None,
        enqueued_by: str | None = None,
    ) -> NewJob:
        """The row for one enqueue; every refusal (key, tenant, JSON, range) raised here."""
        input_json = dumps(input)
        now = self.clock.now_ms()
        if run_at_ms is not None and delay_ms is not None:
            raise DeclarationInvalidError("give run_at_ms or delay_ms, not both", detail="run_at")
        if delay_ms is not None:
            run_at = now + count(delay_ms, "delay_ms", minimum=0, maximum=MAX_TIME_MS - now)
        elif run_at_ms is not None:
            run_at = count(run_at_ms, "run_at_ms", minimum=0, maximum=MAX_TIME_MS)
        else:
            run_at = now
        handle.tenant_for(input)  # refuse an input whose org cannot be derived, before any write
        return NewJob(
            id=id or new_id(),
            run_id=run_id or new_id(),
            name=handle.name,
            queue=queue or handle.queue,
            tenant_id=current_tenant() if tenant_id is _UNSET else tenant_id,
            idempotency_key=handle.key_for(input, key),
            input_json=input_json,
            priority=(
                handle.priority
                if priority is None
                else count(priority, "priority", minimum=PRIORITY_MIN, maximum=PRIORITY_MAX)
            ),
            run_at_ms=run_at,
            max_attempts=handle.retry.attempts,
            created_at_ms=now,
            enqueued_by=enqueued_by,
        )

    async def enqueue(self, handle: JobHandle, input: Any, **options: Any) -> EnqueueResult:
        """Insert one job, or answer `deduped` with the live row holding its key."""
        return await self.driver.job_enqueue(self.build_record(handle, input, **options))

    async def enqueue_many(
        self, handle: JobHandle, inputs: Sequence[Any], **options: Any
    ) -> list[EnqueueResult]:
        """Insert many jobs of one handle; one answer per input, in order.

        Every record is built (and so every refusal made) before the first write.
        """
        if len(inputs) > MAX_ENQUEUE_BATCH:
            raise BatchTooLargeError(detail=f"{len(inputs)} > {MAX_ENQUEUE_BATCH}")
        records = [self.build_record(handle, i, **options) for i in inputs]
        return await self.driver.job_enqueue_many(records)

    def enqueue_sync(self, handle: JobHandle, input: Any, **options: Any) -> EnqueueResult:
        """`enqueue` from sync code; refuses to block a running event loop."""
        return self._run_sync(self.enqueue(handle, input, **options))

    def enqueue_many_sync(
        self, handle: JobHandle, inputs: Sequence[Any], **options: Any
    ) -> list[EnqueueResult]:
        """`enqueue_many` from sync code."""
        return self._run_sync(self.enqueue_many(handle, inputs, **options))

    def _run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("called from a running event loop: await the async method instead")
        with self._portal_lock:
            if self._portal is None:
                self._portal = _Portal()
        return self._portal.run(coro)

    def close_sync(self) -> None:
        """Close the driver on the portal loop and stop it (for sync users)."""
        if self._portal is not None:
            self._portal.run(self.driver.close())
            self._portal.stop()
            self._portal = None


class _Portal:
    """A private event loop on a daemon thread, so the driver keeps one loop for sync callers."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="ujobs-portal", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


_default: Jobs | None = None


def configure(driver: JobDriver | str, *, clock: Clock | None = None) -> Jobs:
    """Set the client that `handle.enqueue()` uses; a string is a driver URL."""
    global _default
    if isinstance(driver, str):
        from jobs_core.urls import driver_from_url

        driver = driver_from_url(driver)
    _default = Jobs(driver, clock=clock)
    return _default


class LoopJobs(Jobs):
    """A client whose sync methods run on `loop`, the loop the driver already serves.

    A worker hands one to its bodies: a `def` body's `enqueue_sync` runs on the worker's loop
    (the thread waits for the answer), so the driver is never used from a second event loop.
    """

    def __init__(
        self, driver: JobDriver, *, loop: asyncio.AbstractEventLoop, clock: Clock | None = None
    ) -> None:
        super().__init__(driver, clock=clock)
        self._loop = loop

    def _run_sync(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("called from a running event loop: await the async method instead")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()


#: The client of the code running now (a worker sets it around each body and hook).
_RUNNING: contextvars.ContextVar[Jobs | None] = contextvars.ContextVar("ujobs_client", default=None)


@contextmanager
def bound_client(client: Jobs) -> Iterator[None]:
    """Inside the block (and the threads it copies its context to), `default_client()` is
    `client`, ahead of any `configure`d one."""
    token = _RUNNING.set(client)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def default_client() -> Jobs:
    """The client bound to the running code (a body's worker), else the configured one.

    `X_JOB_DECLARATION_INVALID` when neither exists.
    """
    running = _RUNNING.get()
    if running is not None:
        return running
    if _default is None:
        raise DeclarationInvalidError(
            "no jobs client: call jobs_core.configure(driver_or_url) first", detail="configure"
        )
    return _default
