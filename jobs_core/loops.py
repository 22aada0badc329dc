"""One connection holder per event loop, for drivers used from several loops in one process.

A socket, a pool or a client belongs to the loop that made it: awaiting it from another loop
fails (`Future attached to a different loop`), and once its loop is closed it cannot be used at
all. An app that enqueues from `def` code (the facade's portal loop) and from `async def` code
(its own loop), or a script that calls `asyncio.run()` several times, needs one holder per loop.
`LoopLocal` makes one on a loop's first call, and closes it with the loop: `asyncio.run` (and
`asyncio.Runner`) cancel every task before closing, and a guard task closes the holder then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Final, Generic, TypeVar

S = TypeVar("S")

log = logging.getLogger("jobs.loops")

#: Seconds `close_all` waits for a holder living on another running loop to close there.
CLOSE_ELSEWHERE_S: Final = 10.0
#: Seconds a holder's close may take while its loop shuts down: a library's close that waits on
#: a peer that never answers would otherwise hold `asyncio.run`'s end for ever.
CLOSE_AT_SHUTDOWN_S: Final = 10.0
#: Seconds `cancel_and_wait` gives a cancelled task to end before cancelling it again.
RECANCEL_S: Final = 0.1


class LoopLocal(Generic[S]):
    """A holder `S` per running event loop: made on first use there, closed with that loop.

    `make()` runs inside the loop; `close(s)` runs inside the holder's own loop; `abandon(s)`
    releases a holder synchronously when its loop is gone (closed, or not running to close it).
    """

    def __init__(
        self,
        make: Callable[[], S],
        close: Callable[[S], Awaitable[None]],
        abandon: Callable[[S], None],
    ) -> None:
        self._make = make
        self._close = close
        self._abandon = abandon
        self._by_loop: dict[asyncio.AbstractEventLoop, tuple[S, asyncio.Task[None]]] = {}
        # Loops run on different threads (a portal's, the app's): additions and removals lock.
        self._lock = threading.Lock()

    def get(self) -> S:
        """The running loop's holder, made now if this loop has none."""
        loop = asyncio.get_running_loop()
        held = self._by_loop.get(loop)
        if held is not None:
            return held[0]
        return self._adopt(loop)

    def peek(self) -> S | None:
        """The running loop's holder if it has one (None outside a loop)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        held = self._by_loop.get(loop)
        return None if held is None else held[0]

    def values(self) -> list[S]:
        """Every live holder, whatever its loop."""
        return [value for value, _ in list(self._by_loop.values())]

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> S:
        with self._lock:
            gone = [lp for lp in self._by_loop if lp.is_closed()]
            stale = [_quiet(self._by_loop.pop(lp)) for lp in gone]
            value = self._make()
            guard = loop.create_task(self._guard(loop, value), name="ujobs-loop-guard")
            # A guard destroyed while pending means its loop was abandoned, never shut down (a
            # sync caller's portal on its daemon thread at interpreter exit): there is nothing
            # left to close it on, and asyncio's "Task was destroyed but it is pending!" would
            # end every plain script that enqueued with a line its author cannot act on.
            _mute(guard)
            self._by_loop[loop] = (value, guard)
        for old in stale:
            self._release(old)
        return value

    async def _guard(self, loop: asyncio.AbstractEventLoop, value: S) -> None:
        try:
            await loop.create_future()  # never resolved: the guard only waits to be cancelled
        except asyncio.CancelledError:
            # The loop is shutting down (or `close_all` took the holder first): close it while
            # the loop can still run its I/O.
            if self._forget(loop, value):
                try:
                    await asyncio.wait_for(self._close(value), CLOSE_AT_SHUTDOWN_S)
                except TimeoutError:
                    log.warning(
                        "jobs.loops.close_timed_out: a connection holder's close took over %s s"
                        " as its loop shut down; released without it",
                        CLOSE_AT_SHUTDOWN_S,
                    )
                    self._release(value)
                except BaseException:
                    # A library's close may itself meet the shutdown's cancellation half-way:
                    # whatever it left open is released here.
                    log.debug("jobs.loops.close_failed", exc_info=True)
                    self._release(value)
            raise

    def _forget(self, loop: asyncio.AbstractEventLoop, value: S) -> bool:
        with self._lock:
            held = self._by_loop.get(loop)
            if held is None or held[0] is not value:
                return False
            del self._by_loop[loop]
            return True

    def _release(self, value: S) -> None:
        try:
            self._abandon(value)
        except Exception:  # best effort: the process keeps going without that holder
            log.debug("jobs.loops.abandon_failed", exc_info=True)

    async def close_all(self) -> None:
        """Close every holder: here directly, on another running loop there, else abandon it."""
        here = asyncio.get_running_loop()
        with self._lock:
            held = list(self._by_loop.items())
            self._by_loop.clear()
        mine: S | None = None
        for loop, (value, guard) in held:
            if loop is here:
                guard.cancel()
                mine = value
            elif loop.is_running() and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(guard.cancel)
                    fut = asyncio.run_coroutine_threadsafe(_call(self._close, value), loop)
                    await asyncio.wait_for(asyncio.wrap_future(fut), CLOSE_ELSEWHERE_S)
                except Exception:
                    log.debug("jobs.loops.close_elsewhere_failed", exc_info=True)
                    self._release(value)
            else:
                self._release(_quiet((value, guard)))
        if mine is not None:
            try:
                await self._close(mine)
            except BaseException:
                self._release(mine)
                raise


def _quiet(held: tuple[S, asyncio.Task[None]]) -> S:
    """The holder of a loop that is gone; its guard can never run, so asyncio must not warn
    that it was destroyed pending (a closed loop cannot cancel it)."""
    value, guard = held
    _mute(guard)
    return value


def _mute(guard: asyncio.Task[None]) -> None:
    """No "destroyed but it is pending" warning for `guard` (a private flag of asyncio's tasks,
    absent from other loops' tasks: then nothing to do)."""
    with contextlib.suppress(AttributeError):
        guard._log_destroy_pending = False  # type: ignore[attr-defined]


async def _call(close: Callable[[S], Awaitable[None]], value: S) -> None:
    await close(value)


async def cancel_other_tasks(within_s: float | None = None) -> set[asyncio.Task[Any]]:
    """Cancel every other task of the running loop and wait for them (as `asyncio.run` does),
    at most `within_s` seconds (None: until all ended); answers those still running."""
    me = asyncio.current_task()
    others = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    for t in others:
        t.cancel()
    if not others:
        return set()
    done, pending = await asyncio.wait(others, timeout=within_s)
    for t in done:
        if not t.cancelled():
            t.exception()  # retrieved: an error met while cancelling is moot, not a log line
    return pending


async def cancel_and_wait(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended, cancelling it again every `RECANCEL_S` while
    it runs on; an error it ends with is moot (retrieved, not raised).

    One cancel may be lost: on Python 3.11 `asyncio.wait_for` drops a cancel that lands in the
    turn its inner future completes (CPython gh-86296, fixed in 3.12), and psycopg before 3.3.6
    waits for its socket through `wait_for(event.wait(), 0.1)`. A task cancelled as a reply or
    a notification arrives then runs on as if never cancelled, and a loop that ends only when
    cancelled (a LISTEN session's) never ends: whoever awaits it waits forever. Only for tasks
    whose unwinding awaits nothing a further cancel must not cut short."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=RECANCEL_S)
    if not task.cancelled():
        task.exception()


__all__ = ["CLOSE_ELSEWHERE_S", "RECANCEL_S", "LoopLocal", "cancel_and_wait", "cancel_other_tasks"]
