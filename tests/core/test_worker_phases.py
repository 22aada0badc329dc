"""A phase of the worker driven alone, with no `Worker` around it: the heartbeat, on the fake
clock, renews what it holds, stops a run whose claim was taken, and beats when no claim did."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from jobs_core.clock import FakeClock
from jobs_core.errors import LeaseLostError
from jobs_core.leases.admit import Gate
from jobs_core.records import ClaimParams
from jobs_core.worker.heartbeat import HeartbeatLoop
from jobs_core.worker.held import Held
from jobs_core.worker.outage import StoreWatch
from jobs_core.worker.registry import Registry
from jobs_core.worker.stats import WorkerStats
from jobs_memory import MemoryDriver
from tests.core.support import T0, new_job

LEASE_MS = 30_000
EVERY_MS = 10_000


async def claim(driver: MemoryDriver, clock: FakeClock, worker_id: str) -> Held:
    result = await driver.job_claim(
        ClaimParams(
            queues=("q",), worker_id=worker_id, limit=1, lease_ms=LEASE_MS, now_ms=clock.now_ms()
        )
    )
    return Held(result.jobs[0], last_landed_ms=clock.now_ms())


class Phase:
    """One heartbeat loop over one held job, running as its own task on a fake clock."""

    def __init__(self, driver: MemoryDriver, clock: FakeClock, held: Held) -> None:
        self.driver = driver
        self.clock = clock
        self.held = held
        self.registry = Registry("w1", ("q",), 1, ttl_ms=60_000)
        self.registry.sent(clock.now_ms())
        self.stats = WorkerStats()
        self.loop = HeartbeatLoop(
            driver,
            clock,
            {held.job.id: held},
            self.registry,
            Gate(driver, clock, {}, (), lease_ms=LEASE_MS),
            StoreWatch(clock, self.stats),
            worker_id="w1",
            lease_ms=LEASE_MS,
            heartbeat_ms=EVERY_MS,
            progress_every_ms=1_000,
        )


@pytest.fixture
async def phase() -> AsyncIterator[Phase]:
    clock = FakeClock(T0)
    driver = MemoryDriver()
    await driver.job_enqueue(new_job("j1", "k1"))
    p = Phase(driver, clock, await claim(driver, clock, "w1"))
    task = asyncio.create_task(p.loop.run())
    try:
        yield p
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_each_period_renews_the_lease_and_flushes_the_progress_reported(
    phase: Phase,
) -> None:
    phase.held.report_progress({"done": 1})
    await phase.clock.advance(EVERY_MS)
    row = (await phase.driver.job_get_many(["j1"]))["j1"]
    assert row.lease_until_ms == T0 + EVERY_MS + LEASE_MS
    assert row.progress_json is not None and json.loads(row.progress_json) == {"done": 1}
    assert phase.held.last_landed_ms == T0 + EVERY_MS
    assert not phase.held.signal.cancelled


async def test_a_claim_taken_by_another_worker_stops_the_run_at_the_next_renewal(
    phase: Phase,
) -> None:
    phase.clock.set(T0 + LEASE_MS)  # the lease lapsed unrenewed: the row is claimable again
    await claim(phase.driver, phase.clock, "w2")
    await phase.clock.advance(EVERY_MS)
    assert isinstance(phase.held.signal.reason, LeaseLostError)


async def test_the_registry_beat_goes_alone_only_once_no_claim_carried_it(phase: Phase) -> None:
    due = phase.registry.next_at
    await phase.clock.advance(due - T0)
    assert await phase.driver.worker_list(phase.clock.now_ms()) == []
    await phase.clock.advance(EVERY_MS)
    assert [w.worker_id for w in await phase.driver.worker_list(phase.clock.now_ms())] == ["w1"]
    assert phase.registry.next_at > due
