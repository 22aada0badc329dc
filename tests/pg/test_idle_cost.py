"""An idle worker on real Postgres, on a fake clock: store round-trips per idle minute.

Without the wake it polls at its 2 s ceiling (at most 30 a minute); with the LISTEN wake proven
live it slows to 5 s (at most 12). The registry beat rides a claim, and the wake's probe is sent
at dial time only, so nothing else reaches the store while idle.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from jobs_core import FakeClock, JobContext, Worker, job
from jobs_core.job import JobRegistry
from jobs_pg import PgDriver
from tests.core.support import advance_quietly, counting
from tests.pg.conftest import PG_URL

CountingPg = counting(PgDriver, "send_probe")


async def noop(input: Any, ctx: JobContext) -> None:
    return None


@pytest.mark.parametrize(("wake", "budget"), [(False, 30), (True, 12)])
async def test_an_idle_minute_on_postgres_stays_within_budget(
    pg_schema: str, wake: bool, budget: int
) -> None:
    driver: Any = CountingPg(PG_URL, schema=pg_schema, pool_size=2, wake=wake)
    clock = FakeClock(start_ms=time.time_ns() // 1_000_000)
    handle = job(noop, tenant="none", idempotency_key=lambda i: "k", registry=JobRegistry())
    async with driver:
        worker = Worker(driver, [handle], clock=clock)
        await worker.start()
        if wake:
            deadline = time.monotonic() + 10
            while not (worker._wake is not None and worker._wake.is_live()):
                assert time.monotonic() < deadline, "the wake never proved live"
                await asyncio.sleep(0.01)
        # Two loops wait on the clock when idle: the claim loop and the heartbeat loop.
        await advance_quietly(clock, 120_000, sleepers=2)
        driver.calls.clear()
        await advance_quietly(clock, 60_000, sleepers=2)
        spent = list(driver.calls)
        await worker.stop()
    assert 0 < len(spent) <= budget, spent
    assert set(spent) == {"_job_claim"}, spent
