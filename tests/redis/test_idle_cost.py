"""An idle worker on Redis, on a fake clock: store round-trips per idle minute.

Polling alone, the claim runs at the 2 s ceiling (at most 30 a minute); with the pub/sub wake
proven live, at the 5 s ceiling (at most 12). The registry beat rides a claim, the wake's probe
is sent when it dials, and a retention round takes the slot of one poll, so nothing else
reaches the store while idle.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import Any

import pytest

from jobs_core import FakeClock, Worker
from jobs_core.driver import Capabilities
from jobs_redis import RedisDriver
from jobs_redis.scripts import load_all
from tests.core.support import advance_quietly, limited_noop
from tests.redis.conftest import REDIS_URL, fresh_prefix, purge


class CommandCounter:
    """Counts what the driver sends on its main client (scripts, PUBLISH, anything)."""

    def __init__(self, client: Any) -> None:
        self.sent: list[str] = []
        #: The script each EVALSHA ran, by name.
        self.scripts: list[str] = []
        by_sha = {s.sha: s.name for s in load_all().values()}
        original = client.execute_command

        async def counted(*args: Any, **options: Any) -> Any:
            self.sent.append(str(args[0]))
            if args[0] == "EVALSHA":
                self.scripts.append(by_sha.get(str(args[1]), "?"))
            return await original(*args, **options)

        client.execute_command = counted


class PollingRedis(RedisDriver):
    """The Redis driver offering no wake channel: the worker polls alone."""

    def capabilities(self) -> Capabilities:
        return replace(super().capabilities(), wake=False)


@pytest.mark.parametrize(("wake", "budget"), [(False, 30), (True, 12)])
async def test_an_idle_minute_on_redis_stays_within_budget(wake: bool, budget: int) -> None:
    driver = (RedisDriver if wake else PollingRedis)(REDIS_URL, prefix=fresh_prefix())
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)
    handle = limited_noop()
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
            # Three loops wait on the clock when idle: claim, heartbeat and retention.
            await advance_quietly(clock, 120_000, sleepers=3)
            counter.sent.clear()
            counter.scripts.clear()
            # Commands sent in each 100 ms step, over five minutes: every 60 s window in budget.
            made: list[int] = []
            for _ in range(3000):
                before = len(counter.sent)
                await advance_quietly(clock, 100, sleepers=3)
                made.append(len(counter.sent) - before)
            spent, scripts = list(counter.sent), list(counter.scripts)
            await worker.stop()
            await purge(driver)
    finally:
        await driver.close()
    worst = max(sum(made[i : i + 600]) for i in range(len(made) - 600))
    assert 0 < worst <= budget, (worst, spent)
    assert set(spent) == {"EVALSHA"}, spent
    assert set(scripts) == {"job_claim", "job_purge"}, scripts
    # The retention rounds (one every 60 to 100 s) fit inside the budget.
    assert scripts.count("job_purge") >= 2, scripts.count("job_purge")
