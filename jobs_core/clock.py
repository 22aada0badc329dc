"""Time as the contract sees it: integer epoch milliseconds from an injectable clock.

Every decision a driver makes takes `now_ms` from its caller, so one `FakeClock` drives every
backend in tests and no store's own clock is ever read.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """A source of epoch milliseconds and a way to wait on it."""

    def now_ms(self) -> int:
        """The current time, integer epoch milliseconds."""
        ...

    async def sleep_ms(self, ms: int) -> None:
        """Return once `ms` milliseconds of this clock have passed (at once when `ms <= 0`)."""
        ...


class SystemClock:
    """Wall-clock time; sleeps on the running event loop."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep_ms(self, ms: int) -> None:
        await asyncio.sleep(max(ms, 0) / 1000)


class FakeClock:
    """A clock that moves only when told to; `sleep_ms` waits for `advance` to pass its end.

    Sleepers are woken in deadline order, each after the clock reads its deadline, so code
    under test sees the same sequence of times on every run.
    """

    def __init__(self, start_ms: int = 1_800_000_000_000) -> None:
        self._now = start_ms
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        """Jump to `now_ms` without waking sleepers (for pure model tests)."""
        self._now = now_ms

    async def sleep_ms(self, ms: int) -> None:
        if ms <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + ms, next(self._seq), fut))
        await fut

    def pending_sleepers(self) -> int:
        """How many `sleep_ms` calls are waiting."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    async def advance(self, ms: int, *, step_ms: int | None = None) -> None:
        """Move time forward by `ms`, waking each sleeper at its own deadline in order.

        Between wake-ups the event loop runs until it is quiet, so the woken code reacts
        before time moves on. `step_ms` bounds each jump for code that polls in loops.
        """
        target = self._now + ms
        while True:
            await _settle()
            next_due = self._sleepers[0][0] if self._sleepers else None
            bound = min(target, self._now + step_ms) if step_ms is not None else target
            if next_due is not None and next_due <= bound:
                self._now = max(self._now, next_due)
                while self._sleepers and self._sleepers[0][0] <= self._now:
                    _, _, fut = heapq.heappop(self._sleepers)
                    if not fut.done():
                        fut.set_result(None)
                continue
            self._now = bound
            if bound >= target:
                await _settle()
                return


async def _settle(rounds: int = 20) -> None:
    # A handful of loop turns lets chained callbacks (a woken task awaiting another) run.
    for _ in range(rounds):
        await asyncio.sleep(0)
