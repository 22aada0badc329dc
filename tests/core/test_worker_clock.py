"""The worker under a fake clock: idle cost, backlog, lease loss; and the two-phase drain."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import pytest

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import Capabilities
from jobs_core.errors import DriverUnavailableError, JobsError
from jobs_core.facade import Jobs
from jobs_core.records import Heartbeat
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.worker import RECLAIM_GRACE_MS, Worker
from jobs_memory import MemoryDriver
from tests.core.support import cancel_recorder, counting, declare, until


class CountingDriver(counting(MemoryDriver)):  # type: ignore[misc]
    """Counts every store round-trip; its heartbeats can be made to fail (a partition)."""

    calls: list[str]

    def __init__(self) -> None:
        super().__init__()
        self.heartbeats_fail = False

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        if self.heartbeats_fail:
            self.calls.append("_job_heartbeat")
            raise DriverUnavailableError(detail="partitioned")
        return await super()._job_heartbeat(beats)


class _LiveWake:
    def is_live(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class WakingDriver(CountingDriver):
    """A driver whose wake channel is proven live (the poll may slow to its wake ceiling)."""

    def capabilities(self) -> Capabilities:
        return replace(super().capabilities(), wake=True)

    async def wake_subscribe(
        self, queues: Sequence[str], on_wake: Callable[[str], None]
    ) -> _LiveWake:
        return _LiveWake()


async def noop(input: Any, ctx: JobContext) -> None:
    return None


class LatestRng(random.Random):
    """Every jittered wait at its longest, so a worker's maintenance task first runs a whole
    interval (60 s) after its start: its first round folds the counters even without a
    retention, and it takes an idle poll's slot whenever it falls due."""

    def randint(self, a: int, b: int) -> int:
        return b


@pytest.mark.parametrize(("driver_cls", "budget"), [(CountingDriver, 30), (WakingDriver, 12)])
async def test_an_idle_minute_costs_at_most_its_budget_of_round_trips(
    driver_cls: type[CountingDriver], budget: int
) -> None:
    clock = FakeClock()
    driver = driver_cls()
    worker = Worker(driver, [declare(noop)], clock=clock)
    await worker.start()
    await clock.advance(120_000)  # past the backoff ramp and a few registry beats
    driver.calls.clear()
    # Calls made by each 100 ms step, over five minutes: every 60 s window within budget.
    made: list[int] = []
    for _ in range(3000):
        before = len(driver.calls)
        await clock.advance(100)
        made.append(len(driver.calls) - before)
    spent = list(driver.calls)
    await worker.stop()
    worst = max(sum(made[i : i + 600]) for i in range(len(made) - 600))
    assert 0 < worst <= budget, worst
    assert set(spent) == {"_job_claim", "_job_purge"}, "registry beats ride the claims"
    # The retention rounds (one every 60 to 100 s) fit inside the budget.
    assert spent.count("_job_purge") >= 2, spent.count("_job_purge")


async def test_a_full_pass_marks_a_backlog_so_a_freed_slot_claims_at_once() -> None:
    clock = FakeClock()
    driver = CountingDriver()
    gate = asyncio.Event()
    started: list[int] = []

    async def gated(input: Any, ctx: JobContext) -> None:
        started.append(input["n"])
        if input["n"] == 0:
            await gate.wait()

    h = declare(gated)
    await Jobs(driver, clock=clock).enqueue_many(h, [{"n": 0}, {"n": 1}])
    worker = Worker(driver, [h], clock=clock, concurrency=1)
    await worker.start()
    await clock.advance(0)
    assert started == [0]
    gate.set()
    await clock.advance(0)  # no time passes: the freed slot claims at once
    assert started == [0, 1]
    await worker.stop()


async def test_a_lease_not_renewed_for_a_whole_window_is_lost_and_late_writes_refused() -> None:
    clock = FakeClock()
    driver = CountingDriver()
    reasons: list[str] = []

    h = declare(cancel_recorder(reasons), name="long", retry=Retry(attempts=3))
    queued = await Jobs(driver, clock=clock).enqueue(h, {"n": 1})
    # The reclaim below must come from the first poll after the grace. A maintenance round due
    # anywhere in the first minute (a random draw) took a poll's slot in about one run in
    # thirty, and the reclaim came 2 s later; LatestRng puts it at 60 s.
    worker = Worker(driver, [h], clock=clock, lease=3.0, retention=None, rng=LatestRng())
    await worker.start()
    await clock.advance(2_500, step_ms=100)
    assert (await driver.job_get_many([queued.id]))[queued.id].claims == 1
    driver.heartbeats_fail = True
    await clock.advance(4_000, step_ms=100)
    assert reasons == ["X_JOB_LEASE_LOST"]
    assert worker.stats.lost == 1 and worker.stats.unowned == 0
    driver.heartbeats_fail = False
    # The lease lapsed in the store as well, while this worker's renewals could not reach it:
    # once the grace after that is over, the job is claimed afresh (by this worker's next
    # pass): a new fence, and the lost run never wrote a settle.
    await clock.advance(RECLAIM_GRACE_MS + 2_000, step_ms=100)
    r = (await driver.job_get_many([queued.id]))[queued.id]
    assert r.state is JobState.RUNNING and r.claims == 2 and r.attempt == 2
    stopping = asyncio.create_task(worker.stop(timeout=2))
    await clock.advance(3_000, step_ms=100)
    await stopping
    r = (await driver.job_get_many([queued.id]))[queued.id]
    assert r.state is JobState.READY and r.attempt == 1 and reasons[-1] == "X_DRAINING"


async def test_drain_lets_running_bodies_finish() -> None:
    async def short(input: Any, ctx: JobContext) -> None:
        await asyncio.sleep(0.1)

    driver = MemoryDriver()
    h = declare(short)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = Worker(driver, [h], poll_floor=0.001)
    await worker.start()
    await until(lambda: worker.stats.running == 1)
    await worker.stop(timeout=5)
    r = (await driver.job_get_many([queued.id]))[queued.id]
    assert r.state is JobState.COMPLETED and worker.stats.interrupted == 0


async def test_drain_aborts_at_the_deadline_and_hands_claims_back_uncounted() -> None:
    seen: list[str] = []

    driver = MemoryDriver()
    h = declare(cancel_recorder(seen), name="endless")
    queued = await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(4)])
    ids = [q.id for q in queued]
    worker = Worker(driver, [h], concurrency=2, max_in_flight=4, poll_floor=0.001, drain_margin=0.1)
    await worker.start()
    await until(lambda: worker.stats.claimed == 4 and worker.stats.running == 2)
    started = time.monotonic()
    first, second = (
        asyncio.create_task(worker.stop(timeout=0.4)),
        asyncio.create_task(worker.stop(timeout=99)),
    )
    await asyncio.gather(first, second)
    took = time.monotonic() - started
    assert 0.25 <= took < 3.0, took
    assert seen == ["X_DRAINING", "X_DRAINING"]
    rows = await driver.job_get_many(ids)
    assert all(r.state is JobState.READY and r.attempt == 0 for r in rows.values())
    assert all(r.claims == 1 for r in rows.values())
    assert worker.stats.interrupted == 4
    with pytest.raises(JobsError) as info:
        await worker.start()
    assert info.value.code == "X_DRAINING"
    assert await worker.demand() == {"default": 0}


class SwallowsACancel(MemoryDriver):
    """Its purge call, cancelled mid-flight, answers as if it finished: what Python 3.11's
    `asyncio.wait_for` (redis-py sends each command through it) does when the call beneath
    finished as the cancel came, dropping the cancel."""

    def __init__(self) -> None:
        super().__init__()
        self.purging = asyncio.Event()

    async def _job_purge(self, params: Any) -> int:
        self.purging.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.get_running_loop().create_future()
        return 0


async def test_stop_ends_though_a_store_call_swallowed_the_cancel_of_the_maintenance_loop() -> None:
    # Seen in a Redis drain bench: `await worker.stop()` waited forever, its maintenance task
    # "cancelling" yet asleep until its next purge round, round after round.
    clock = FakeClock()
    driver = SwallowsACancel()
    worker = Worker(driver, [declare(noop)], clock=clock)
    await worker.start()
    for _ in range(400):
        if driver.purging.is_set():
            break
        await clock.advance(1_000)
    assert driver.purging.is_set()
    await asyncio.wait_for(worker.stop(), 5)
