"""How an idle polling loop waits: a floor, doubling on each empty pass, to a ceiling; and the
wait itself, cut short by a kick (a wake, a freed slot, a stop)."""

from __future__ import annotations

import asyncio
from typing import Any

from jobs_core.clock import Clock, SystemClock


class IdleBackoff:
    """Floor → doubling → ceiling. `reset()` on work or a wake; `next_ms()` after an empty pass."""

    def __init__(self, floor_ms: int, ceiling_ms: int) -> None:
        self.floor_ms = floor_ms
        self.ceiling_ms = ceiling_ms
        self._current = floor_ms

    def reset(self) -> None:
        self._current = self.floor_ms

    def next_ms(self, ceiling_ms: int | None = None) -> int:
        """The wait before the next pass; the one after it doubles, up to the ceiling."""
        cap = ceiling_ms if ceiling_ms is not None else self.ceiling_ms
        wait = min(self._current, cap)
        self._current = min(self._current * 2, cap)
        return wait


async def wait_kick(kick: asyncio.Event, clock: Clock, ms: int | None) -> None:
    """Until `kick` is set or `ms` of `clock` passed (None: only the kick); at once when `kick`
    is already set. The kick is left set: the caller clears it where its pass begins."""
    if kick.is_set():
        return
    if ms is None:
        await kick.wait()
        return
    if type(clock).sleep_ms is SystemClock.sleep_ms:
        # The loop's own timer, as the system clock's sleep is: no task for the sleep nor for the
        # kick's wait (a busy worker waits here once per claim round).
        try:
            async with asyncio.timeout(max(ms, 0) / 1000):
                await kick.wait()
        except TimeoutError:
            pass
        return
    waiter = asyncio.ensure_future(kick.wait())
    waits: list[asyncio.Future[Any]] = [waiter]
    if ms is not None:
        waits.append(asyncio.ensure_future(clock.sleep_ms(ms)))
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
