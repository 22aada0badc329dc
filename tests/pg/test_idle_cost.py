"""An idle worker on real Postgres, on a fake clock: store round-trips per idle minute.

Without the wake it polls at its 2 s ceiling (at most 30 a minute); with the LISTEN wake proven
live it slows to 5 s (at most 12). The registry beat rides a claim, the wake's probe is sent at
dial time only, and a retention round takes the slot of one poll, so nothing else reaches the
store while idle — but for the upkeep every ~10 minutes (`counter_fold` and, the driver keeping
events and webhook attempts, `event_purge` and `webhook_attempt_purge`), which rides a retention
round and is measured here too.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from jobs_core import FakeClock, Worker
from jobs_pg import PgDriver
from tests.core.support import advance_quietly, counting, limited_noop
from tests.pg.conftest import PG_URL

CountingPg = counting(PgDriver, "send_probe")


@pytest.mark.parametrize(("wake", "budget"), [(False, 30), (True, 12)])
async def test_an_idle_minute_on_postgres_stays_within_budget(
    pg_schema: str, wake: bool, budget: int
) -> None:
    driver: Any = CountingPg(PG_URL, schema=pg_schema, pool_size=2, wake=wake)
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)
    handle = limited_noop()
    async with driver:
        worker = Worker(driver, [handle], clock=clock)
        await worker.start()
        if wake:
            deadline = time.monotonic() + 10
            while not (worker._wake is not None and worker._wake.is_live()):
                assert time.monotonic() < deadline, "the wake never proved live"
                await asyncio.sleep(0.01)
        # Three loops wait on the clock when idle: claim, heartbeat and retention.
        await advance_quietly(clock, 120_000, sleepers=3)
        driver.calls.clear()
        # Calls made by each 100 ms step, over twelve minutes (so one upkeep round, due every 10
        # to 11 minutes, falls inside): every 60 s window within budget.
        made: list[list[str]] = []
        for _ in range(7200):
            before = len(driver.calls)
            await advance_quietly(clock, 100, sleepers=3)
            made.append(driver.calls[before:])
        spent = list(driver.calls)
        await worker.stop()
    # The upkeep (`counter_fold`, then `event_purge` and `webhook_attempt_purge`: this driver
    # keeps events and webhook attempts) is allowed beside
    # the budget, which is the polling's: it comes once per ~10 minutes, not per minute — one
    # call each, as a batch that comes back short ends its round and an idle store's are short
    # at once — and it keeps counters and events bounded on a worker that keeps every row. So
    # the minute that holds it may reach the budget plus these three calls, and no other minute
    # holds any.
    upkeep = {"_counter_fold", "_event_purge", "_webhook_attempt_purge"}
    polls = [sum(1 for c in step if c not in upkeep) for step in made]
    worst = max(sum(polls[i : i + 600]) for i in range(len(polls) - 600))
    assert 0 < worst <= budget, (worst, spent)
    assert set(spent) == {"_job_claim", "_job_purge", *upkeep}, spent
    assert (
        spent.count("_counter_fold")
        == spent.count("_event_purge")
        == spent.count("_webhook_attempt_purge")
        == 1
    ), spent
    # The retention rounds (one every 60 to 100 s) fit inside the budget.
    assert spent.count("_job_purge") >= 2, spent.count("_job_purge")
