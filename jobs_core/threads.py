"""Threads for `def` bodies: a body never waits for a thread another body still holds.

A thread cannot be stopped from outside, so a `def` body that overruns its deadline (or ignores
a cancel) keeps its thread after the worker has settled its job and moved on. A fixed pool would
then queue the next body behind it, where its deadline could pass before it ever ran. Here a
submitted body takes an idle thread or, when none is idle, a new one; at most `keep_idle` idle
threads are kept. The worker's slots already bound how many bodies run at once, so the threads
alive are at most the slots plus the overrunning threads.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import itertools
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

_Item = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class BodyThreads(Executor):
    """An executor that starts each submitted call at once, on an idle or a new thread.

    Its threads are daemons: a body still overrunning when the worker has stopped does not hold
    the process at exit (its job was settled or handed back already).
    """

    def __init__(self, keep_idle: int, name_prefix: str = "ujobs-body") -> None:
        self._keep_idle = keep_idle
        self._prefix = name_prefix
        self._work: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        # Threads waiting for work, less the submits that already reserved one of them.
        self._idle = 0
        self._shutdown = False
        self._threads: set[threading.Thread] = set()
        self._names = itertools.count(1)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        """Run `fn(*args, **kwargs)` on a thread that is free now; refused after `shutdown`."""
        fut: Future[T] = Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot run a body after shutdown")
            if self._idle > 0:
                self._idle -= 1
            else:
                thread = threading.Thread(
                    target=self._serve, name=f"{self._prefix}-{next(self._names)}", daemon=True
                )
                self._threads.add(thread)
                thread.start()
            self._work.put((fut, fn, args, kwargs))
        return fut

    def _serve(self) -> None:
        try:
            while True:
                item = self._work.get()
                if item is None:
                    return
                fut, fn, args, kwargs = item
                del item
                if fut.set_running_or_notify_cancel():
                    try:
                        result = fn(*args, **kwargs)
                    except BaseException as exc:
                        fut.set_exception(exc)
                    else:
                        fut.set_result(result)
                del fut, fn, args, kwargs
                with self._lock:
                    if self._shutdown or self._idle >= self._keep_idle:
                        return
                    self._idle += 1
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop the idle threads; busy ones end when their call returns. `wait` joins them all.

        Every call has a thread of its own from the moment it is submitted, so none waits to
        be cancelled: `cancel_futures` is accepted for the `Executor` interface and cancels
        nothing (cancelling a call whose thread is about to start it would lose a body).
        """
        with self._lock:
            self._shutdown = True
            idle, self._idle = self._idle, 0
            threads = list(self._threads)
        for _ in range(idle):
            self._work.put(None)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    def alive(self) -> int:
        """Threads alive now (busy or idle)."""
        with self._lock:
            return len(self._threads)


async def in_thread(
    threads: Executor, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs
) -> T:
    """`fn(*args, **kwargs)` on one of `threads`, in a copy of the caller's context (the tenant
    and the client it acts with), as a `def` body runs; answers when it returns."""
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
    return await asyncio.wrap_future(threads.submit(call))
