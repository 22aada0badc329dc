"""The claim chain: a worker holding 100 jobs or more claims in halves, and sends the next half
while the one before is on its way, within `max_in_flight`; a drain waits out both claims."""

from __future__ import annotations

import asyncio
from typing import Any

from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.records import ClaimParams, ClaimResult
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.runpath_cases import declare
from tests.core.support import until


class _SlowClaims(MemoryDriver):
    """Each claim takes `delay` seconds on its way (after `gate`, when it is cleared), and
    records its limit, how many claims were on their way, and what the worker then held."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay
        self.gate = asyncio.Event()
        self.gate.set()
        self.worker: Worker | None = None
        self.on_way = 0
        self.peak = 0
        self.limits: list[int] = []
        #: Per claim sent: the jobs held or asked for by claims on their way, not counting
        #: settling ones, and counting them.
        self.bound: list[tuple[int, int]] = []

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        assert self.worker is not None
        loop = self.worker._claims
        held = len(loop._held) + loop._asked
        self.bound.append((held - loop._settling, held))
        self.limits.append(params.limit)
        self.on_way += 1
        self.peak = max(self.peak, self.on_way)
        try:
            await asyncio.sleep(self.delay)
            await self.gate.wait()
            return await super()._job_claim(params)
        finally:
            self.on_way -= 1


async def _noop(input: Any, ctx: JobContext) -> None:
    return None


NOOP = declare(_noop)


async def _fill(driver: MemoryDriver, jobs: int) -> list[str]:
    return [r.id for r in await Jobs(driver).enqueue_many(NOOP, [{"n": i} for i in range(jobs)])]


def _worker(driver: _SlowClaims, concurrency: int) -> Worker:
    worker = Worker(
        driver,
        [NOOP],
        concurrency=concurrency,
        poll_floor=0.001,
        poll_ceiling=0.01,
        lease=5.0,
    )
    driver.worker = worker
    return worker


async def _states(driver: MemoryDriver, ids: list[str]) -> dict[JobState, int]:
    rows = await driver.job_get_many(ids)
    counts: dict[JobState, int] = {}
    for r in rows.values():
        counts[r.state] = counts.get(r.state, 0) + 1
    return counts


async def test_a_second_claim_goes_while_the_first_is_on_its_way_within_max_in_flight() -> None:
    driver = _SlowClaims(delay=0.01)
    ids = await _fill(driver, 600)
    worker = _worker(driver, concurrency=100)
    await worker.start()
    await until(lambda: worker.stats.completed == 600)
    await worker.stop()
    assert driver.peak == 2  # the next half claimed while the one before was on its way
    assert max(driver.limits) == 50  # half of max_in_flight a claim
    # Never more held (or asked for) than promised: `max_in_flight` not counting settling
    # jobs, twice it counting them.
    assert all(live <= 100 and held <= 200 for live, held in driver.bound)
    assert worker.stats.claimed == 600
    assert await _states(driver, ids) == {JobState.COMPLETED: 600}


async def test_below_twice_the_smallest_half_a_claim_asks_for_all_and_goes_alone() -> None:
    driver = _SlowClaims(delay=0.005)
    ids = await _fill(driver, 200)
    worker = _worker(driver, concurrency=10)
    await worker.start()
    await until(lambda: worker.stats.completed == 200)
    await worker.stop()
    assert driver.peak == 1 and set(driver.limits) == {10}
    assert await _states(driver, ids) == {JobState.COMPLETED: 200}


async def test_a_drain_waits_out_the_claim_sent_ahead_and_loses_no_job() -> None:
    """A drain that begins while two claims are on their way: both land, what they claimed
    is run or given back, and the drain's end leaves no job leased."""
    driver = _SlowClaims(delay=0.01)
    ids = await _fill(driver, 1000)
    worker = _worker(driver, concurrency=100)
    await worker.start()
    await until(lambda: driver.on_way == 2)
    driver.gate.clear()  # both claims wait: the drain begins with two on their way
    await asyncio.sleep(0.02)
    assert driver.on_way == 2
    stopping = asyncio.create_task(worker.stop())
    await asyncio.sleep(0.02)
    assert not stopping.done()  # waiting out the claims
    driver.gate.set()
    await stopping
    assert driver.on_way == 0
    states = await _states(driver, ids)
    assert set(states) <= {JobState.COMPLETED, JobState.READY}
    assert states[JobState.COMPLETED] == worker.stats.completed == worker.stats.claimed
