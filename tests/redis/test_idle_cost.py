"""An idle worker on Redis, on a fake clock: store round-trips per idle minute.

Polling alone, the claim runs at the 2 s ceiling (at most 30 a minute); with the pub/sub wake
proven live, at the 5 s ceiling (at most 12). The registry beat rides a claim and the wake's
probe is sent when it dials, so nothing else reaches the store while idle.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from jobs_core import FakeClock, JobContext, Worker, job
from jobs_core.driver import Capabilities
from jobs_core.job import JobRegistry
from jobs_redis import RedisDriver
from tests.core.support import advance_quietly
from tests.redis.conftest import REDIS_URL, fresh_prefix, purge


class CommandCounter:
    """Counts what the driver sends on its main client (scripts, PUBLISH, anything)."""

    def __init__(self, client: Any) -> None:
        self.sent: list[str] = []
        original = client.execute_command

        async def counted(*args: Any, **options: Any) -> Any:
            self.sent.append(str(args[0]))
            return await original(*args, **options)

        client.execute_command = counted


class PollingRedis(RedisDriver):
    """The Redis driver offering no wake channel: the worker polls alone."""

    def capabilities(self) -> Capabilities:
        return Capabilities()


async def noop(input: Any, ctx: JobContext) -> None:
    return None


@pytest.mark.parametrize(("wake", "budget"), [(False, 30), (True, 12)])
async def test_an_idle_minute_on_redis_stays_within_budget(wake: bool, budget: int) -> None:
    driver = (RedisDriver if wake else PollingRedis)(REDIS_URL, prefix=fresh_prefix())
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)
    handle = job(noop, tenant="none", idempotency_key=lambda i: "k", registry=JobRegistry())
    try:
        async with driver:
            counter = CommandCounter(driver.client)
            worker = Worker(driver, [handle], clock=clock)
            await worker.start()
            if wake:
                deadline = time.monotonic() + 10
                while not (worker._wake is not None and worker._wake.is_live()):
                    assert time.monotonic() < deadline, "the wake never proved live"
                    await asyncio.sleep(0.01)
            await advance_quietly(clock, 120_000, sleepers=2)
            counter.sent.clear()
            await advance_quietly(clock, 60_000, sleepers=2)
            spent = list(counter.sent)
            await worker.stop()
            await purge(driver)
    finally:
        await driver.close()
    assert 0 < len(spent) <= budget, spent
    assert set(spent) == {"EVALSHA"}, spent
