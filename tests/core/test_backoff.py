"""The idle wait: cut short by a kick, else over once its time of the clock passed."""

from __future__ import annotations

import asyncio

import pytest

from jobs_core.backoff import wait_kick
from jobs_core.clock import Clock, FakeClock, SystemClock


async def test_a_kick_ends_the_wall_clocks_wait_and_is_left_set() -> None:
    kick = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, kick.set)
    async with asyncio.timeout(5):
        await wait_kick(kick, SystemClock(), 60_000)
    assert kick.is_set()


@pytest.mark.parametrize("ms", [0, -5, 20])
async def test_the_wall_clocks_wait_ends_unkicked_when_its_time_passed(ms: int) -> None:
    kick = asyncio.Event()
    async with asyncio.timeout(5):
        await wait_kick(kick, SystemClock(), ms)
    assert not kick.is_set()


async def test_a_cancel_reaches_the_waiter_through_the_wall_clocks_wait() -> None:
    kick = asyncio.Event()
    task = asyncio.get_running_loop().create_task(wait_kick(kick, SystemClock(), 60_000))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_another_clocks_wait_is_its_own() -> None:
    clock = FakeClock()
    kick = asyncio.Event()
    waiter = asyncio.get_running_loop().create_task(wait_kick(kick, clock, 1_000))
    for _ in range(10):  # the wait's own tasks start
        await asyncio.sleep(0)
    assert not waiter.done() and clock.pending_sleepers() == 1
    await clock.advance(1_000)
    async with asyncio.timeout(5):
        await waiter
    assert not kick.is_set()


async def test_no_time_waits_for_the_kick_alone() -> None:
    clock: Clock = SystemClock()
    kick = asyncio.Event()
    waiter = asyncio.get_running_loop().create_task(wait_kick(kick, clock, None))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    kick.set()
    async with asyncio.timeout(5):
        await waiter
