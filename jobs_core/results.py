"""Waiting for a job's result: `Jobs.result` and the one finish subscription a client shares.

A waiter never busy-polls. It registers for its id, makes sure the client's subscription is
open (`finish_subscribe`, once per client), marks the row watched and reads it in one call
(`job_watch`: a row already finished answers at once), then sleeps until the id's finish is
announced OR a bounded poll comes due (`RESULT_POLL_FLOOR_S`, doubling to
`RESULT_POLL_CEILING_S`) and reads the row again. The announcement is only a hint (it may be
lost, or the store may have none); the poll is the guarantee.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Final

from jobs_core.driver import JobDriver, WakeSubscription, name_refusal
from jobs_core.errors import (
    JobNotFoundError,
    RecordInvalidError,
    ResultFailedError,
    ResultTimeoutError,
)
from jobs_core.jsonform import JsonValue, loads
from jobs_core.options import finite_number
from jobs_core.records import JobRecord
from jobs_core.states import FINISHED_STATES, JobState

#: The first and the longest pause of a result's poll (the guarantee behind the announcement).
RESULT_POLL_FLOOR_S: Final = 0.05
RESULT_POLL_CEILING_S: Final = 1.0
#: The longest `timeout=` a result wait takes (seconds; 30 days).
RESULT_TIMEOUT_MAX_S: Final = 30 * 86_400.0


def answer_of(row: JobRecord) -> JsonValue:
    """The result of a `completed` row (its stored JSON parsed; None when it stored none).

    `X_RESULT_FAILED` (`ResultFailedError`: job_id, state, error) for a row that finished
    without completing: dead, failed or cancelled."""
    if row.state is JobState.COMPLETED:
        return None if row.result_json is None else loads(row.result_json)
    raise ResultFailedError(
        f"job {row.id} ended {row.state.value}",
        job_id=row.id,
        state=row.state.value,
        error=row.last_error,
    )


def finished(row: JobRecord) -> bool:
    """Whether the row is in a final state (its result, or its failure, is known)."""
    return row.state in FINISHED_STATES


class _Waiter:
    """One waiter's wake-up: set from whatever thread delivers the announcement."""

    __slots__ = ("event", "loop")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.event = asyncio.Event()

    def wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the waiter's loop has closed: nobody waits
            self.loop.call_soon_threadsafe(self.event.set)


class FinishWaits:
    """The finish announcements of one client, shared by all its waiters.

    The subscription is opened on first use (from the first waiter's loop) and closed by
    `close`. Announcements may come from any thread: the registry of waiters is guarded by a
    thread lock, and each waiter is woken on its own loop."""

    def __init__(self, driver: JobDriver) -> None:
        self._driver = driver
        self._lock = threading.Lock()
        self._waiters: dict[str, set[_Waiter]] = {}
        self._opening: asyncio.Task[WakeSubscription | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self.floor_s = RESULT_POLL_FLOOR_S
        self.ceiling_s = RESULT_POLL_CEILING_S

    def _announced(self, job_id: str) -> None:
        with self._lock:
            waiters = list(self._waiters.get(job_id, ()))
        for w in waiters:
            w.wake()

    async def _subscribed(self) -> None:
        """Open the subscription once; waiters on its loop wait for it to be open (so their
        `job_watch` comes after it), waiters on another loop go on with their poll."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                return
            if self._opening is None:
                self._loop = loop
                self._opening = loop.create_task(self._driver.finish_subscribe(self._announced))
            opening, its_loop = self._opening, self._loop
        if its_loop is loop:
            # Shielded: a waiter cancelled meanwhile does not cancel the others' subscription.
            with contextlib.suppress(Exception):
                await asyncio.shield(opening)

    async def wait(self, job_id: str, timeout: float | None) -> JsonValue:  # noqa: ASYNC109 - the result's documented deadline
        """The result of `job_id` once it finished (`answer_of`); `X_RESULT_TIMEOUT` after
        `timeout` seconds (None: no end); `X_JOB_NOT_FOUND` for an id naming no row."""
        if timeout is not None:
            timeout = finite_number(timeout, "timeout", minimum=0.0, maximum=RESULT_TIMEOUT_MAX_S)
        if (why := name_refusal(job_id)) is not None:
            # Before the waiters' table hashes it (a list: TypeError) or the store sees it.
            raise RecordInvalidError(f"a job id {why}", detail="job_id")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        waiter = _Waiter()
        with self._lock:
            self._waiters.setdefault(job_id, set()).add(waiter)
        try:
            await self._subscribed()
            rows = await self._driver.job_watch([job_id])
            pause = self.floor_s
            while True:
                row = rows.get(job_id)
                if row is None:
                    raise JobNotFoundError(detail=job_id)
                if finished(row):
                    return answer_of(row)
                nap = pause
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        raise ResultTimeoutError(
                            f"job {job_id} is {row.state.value} after {timeout} s", detail=job_id
                        )
                    nap = min(nap, left)
                # Woken by the announcement, or at the poll: either way the row is read again.
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.event.wait(), nap)
                waiter.event.clear()
                pause = min(pause * 2, self.ceiling_s)
                rows = await self._driver.job_get_many([job_id])
        finally:
            with self._lock:
                held = self._waiters.get(job_id)
                if held is not None:
                    held.discard(waiter)
                    if not held:
                        del self._waiters[job_id]

    def close_call(self) -> tuple[asyncio.AbstractEventLoop, Coroutine[Any, Any, None]] | None:
        """The coroutine that closes the subscription and the loop it must run on; None when
        none was opened. No subscription opens after this."""
        with self._lock:
            self._closed = True
            opening, loop = self._opening, self._loop
            self._opening = None
        if opening is None or loop is None:
            return None

        async def close() -> None:
            sub = None
            with contextlib.suppress(BaseException):
                sub = await opening
            if sub is not None:
                await sub.close()

        return loop, close()


def run_on(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, None]
) -> Callable[[], Coroutine[Any, Any, None]]:
    """An awaitable maker that runs `coro` on `loop`, from that loop or from another."""

    async def go() -> None:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - always called inside a loop
            here = None
        if here is loop:
            await coro
        elif loop.is_closed() or not loop.is_running():
            coro.close()  # its loop is over: what it opened went with it
        else:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))

    return go
