"""`Snapshot`: one shared, recent answer of an expensive read, for every viewer at once.

The queues page counts rows by queue and state: on Postgres a count of every row the table
keeps (docs/dashboard.md). Read per view, a million rows cost each viewer about a third of a
second and the database one count per viewer per refresh. Read through a snapshot, a view
answers from the last count at once while one background read, whoever asked, replaces it;
the page says how old its numbers are. Oban Web's counts (Oban.Met) work the same way.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")

log = logging.getLogger("jobs.dashboard")


class Snapshot(Generic[T]):
    """The last answer of `read`. `get` answers it at once while it is younger than `fresh_s`;
    older, but younger than `stale_s`, it still answers it at once and starts ONE background
    read to replace it; older than that (nobody looked for a while), or after a read failed, it
    waits for a read, which raises what the read raises. Reads never overlap."""

    def __init__(
        self,
        read: Callable[[], Awaitable[T]],
        *,
        fresh_s: float,
        stale_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self.fresh_s = fresh_s
        self.stale_s = stale_s
        self._clock = clock
        self._value: T | None = None
        self._taken = 0.0
        self._failed = False
        self._reading: asyncio.Task[None] | None = None
        #: `expire` calls so far, and how many had been made when the value's read started.
        self._wanted = 0
        self._generation = 0
        #: Reads started so far.
        self._starts = 0

    async def get(self) -> tuple[T, float]:
        """The value and its age in seconds."""
        entered = self._starts
        while (
            self._value is None
            or self._failed
            or self._clock() - self._taken >= self.stale_s
            or self._generation < self._wanted
        ):
            reading = self._start()
            # A read that began after this call answers it, however long it took; one already
            # under way may have begun too early, and is waited for, then followed by one more.
            ours = self._starts > entered
            # Shielded: a viewer who leaves does not cancel the read the others wait for.
            await asyncio.shield(reading)
            if ours:
                break
        if self._clock() - self._taken >= self.fresh_s:
            self._start()
        assert self._value is not None
        return self._value, max(0.0, self._clock() - self._taken)

    def expire(self) -> None:
        """What was read is out of date (an action changed it): the next `get` waits for a read
        that started after this call."""
        self._wanted += 1

    def warm(self) -> None:
        """Start a read now (an app's startup), so the first view finds it done or under way."""
        self._start()

    def _start(self) -> asyncio.Task[None]:
        if self._reading is None:
            self._starts += 1
            self._reading = asyncio.create_task(self._read_once())
            self._reading.add_done_callback(self._done)
        return self._reading

    def _done(self, task: asyncio.Task[None]) -> None:
        self._reading = None
        if not task.cancelled() and task.exception() is not None:
            self._failed = True
            log.warning("dashboard: a read for the queues page failed: %s", task.exception())

    async def _read_once(self) -> None:
        started, generation = self._clock(), self._wanted
        value = await self._read()
        self._value, self._taken, self._failed = value, started, False
        self._generation = generation
