"""The reclaim grace after a store outage, under a fake clock: a worker back from an outage leaves
the leases that lapsed in it to their holders (`StoreWatch`, `ClaimParams.reclaim_until_ms`),
for `RECLAIM_GRACE_MS` after the store answers again, then takes them as ever. The same on real
servers stopped and started: `tests/outage.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import Capabilities
from jobs_core.errors import DriverUnavailableError
from jobs_core.facade import Jobs
from jobs_core.records import (
    Ack,
    ClaimParams,
    ClaimResult,
    EnqueueResult,
    Heartbeat,
    Nack,
    NewJob,
    WorkerBeat,
)
from jobs_core.retry import Retry
from jobs_core.settle import Settler
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import new_job
from jobs_core.worker import RECLAIM_GRACE_MS, Worker, WorkerStats
from jobs_core.worker.outage import StoreWatch
from jobs_memory import MemoryDriver
from tests.core.support import declare


class _Wake:
    def is_live(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class Outages(MemoryDriver):
    """A memory store every worker loses at once while `down`, with an in-process wake: an
    enqueue wakes every claim loop, as a NOTIFY does (the first claim after an outage is
    then the one a producer's enqueue triggers, not the next backoff step)."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self._woken: list[Callable[[str], None]] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(wake=True)

    async def wake_subscribe(self, queues: Sequence[str], on_wake: Callable[[str], None]) -> _Wake:
        self._woken.append(on_wake)
        return _Wake()

    def _reachable(self) -> None:
        if self.down:
            raise DriverUnavailableError(detail="down")

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        self._reachable()
        return await super()._job_claim(params)

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        self._reachable()
        return await super()._job_heartbeat(beats)

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        self._reachable()
        return await super()._job_ack(acks)

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        self._reachable()
        return await super()._job_nack(nacks)

    async def _worker_beat(self, beat: WorkerBeat) -> None:
        self._reachable()
        await super()._worker_beat(beat)

    async def _job_enqueue(self, job: NewJob) -> EnqueueResult:
        self._reachable()
        answer = await super()._job_enqueue(job)
        for on_wake in self._woken:
            on_wake(job.queue)
        return answer


@pytest.mark.parametrize(
    ("lease_s", "down_at_ms", "down_ms"),
    [
        # Down before the first heartbeat (at 1.33 s): the lease ends at about 4 s, in the outage.
        (4.0, 1_000, 3_300),
        # Down 9 s after the last renewal (at 20 s) for 25 s: the store answers again 4 s past
        # the lease's end, so the holder must still be retrying its ack then.
        (30.0, 29_000, 25_000),
    ],
)
async def test_a_body_finished_in_an_outage_is_completed_though_its_lease_lapsed_meanwhile(
    lease_s: float, down_at_ms: int, down_ms: int
) -> None:
    """The holder's final attempt ends at the start of an outage shorter than its lease in which
    the lease lapses; as the store returns a producer's enqueue wakes every claim loop at once.
    No claim buries the lapsed lease before the holder's retried ack lands: completed, attempt
    1, nothing buried."""
    clock = FakeClock()
    store = Outages()
    finish = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> str:
        if input["n"] == 0:
            await finish.wait()
        return "done"

    h = declare(body, retry=Retry(attempts=1))
    jobs = Jobs(store, clock=clock)
    held = await jobs.enqueue(h, {"n": 0})
    start = clock.now_ms()
    holder = Worker(store, [h], clock=clock, lease=lease_s, poll_floor=0.05)
    await holder.start()
    await clock.advance(100, step_ms=10)
    row = (await store.job_get_many([held.id]))[held.id]
    assert row.claimed_by == holder.worker_id
    other = Worker(store, [h], clock=clock, lease=lease_s, poll_floor=0.05)
    await other.start()
    await clock.advance(start + down_at_ms - clock.now_ms(), step_ms=50)
    store.down = True
    finish.set()
    await clock.advance(down_ms, step_ms=50)
    row = (await store.job_get_many([held.id]))[held.id]
    assert row.lease_until_ms is not None and row.lease_until_ms <= clock.now_ms(), row
    store.down = False
    later = await jobs.enqueue(h, {"n": 1})
    await clock.advance(10_000, step_ms=50)
    rows = await store.job_get_many([held.id, later.id])
    await asyncio.gather(holder.stop(), other.stop())
    assert (rows[held.id].state, rows[held.id].attempt) == (JobState.COMPLETED, 1), rows
    assert rows[later.id].state is JobState.COMPLETED
    assert holder.stats.buried == other.stats.buried == 0
    assert holder.stats.unowned == other.stats.unowned == 0
    assert holder.stats.completed + other.stats.completed == 2


async def test_a_lease_whose_holder_is_gone_is_buried_once_the_grace_has_passed() -> None:
    """A holder that died during the outage: the worker back from it buries its lapsed final
    attempt at the first claim after `RECLAIM_GRACE_MS` from the store's return, not before."""
    clock = FakeClock()
    store = Outages()
    h = declare(lambda i, c: None, retry=Retry(attempts=1))
    await Jobs(store, clock=clock).enqueue(h, {"n": 0})
    start = clock.now_ms()
    gone = await store.job_claim(ClaimParams(("default",), "gone", 1, 2_000, start))
    (job,) = gone.jobs
    worker = Worker(store, [h], clock=clock, lease=4.0, poll_floor=0.05, wake_ceiling=0.2)
    await worker.start()
    await clock.advance(1_000, step_ms=50)
    store.down = True
    await clock.advance(2_000, step_ms=50)  # the lease ends at 2 s, in the outage
    store.down = False
    down_until = clock.now_ms()
    while worker.stats.store_ok_ms < down_until:  # the worker's first claim back
        await clock.advance(50)
    back = worker.stats.store_ok_ms
    while (await store.job_get_many([job.id]))[job.id].state is JobState.RUNNING:
        assert clock.now_ms() < back + RECLAIM_GRACE_MS + 1_000, "never buried"
        await clock.advance(50)
    buried_at = clock.now_ms()
    await worker.stop()
    row = (await store.job_get_many([job.id]))[job.id]
    assert row.state is JobState.DEAD and worker.stats.buried == 1
    # Every claim within the grace left it, though its lease had lapsed before the first.
    assert buried_at >= back + RECLAIM_GRACE_MS, (buried_at - back, RECLAIM_GRACE_MS)


def test_the_bound_is_the_last_answer_before_the_outage_and_holds_through_its_grace() -> None:
    clock = FakeClock(5_000)
    watch = StoreWatch(clock, WorkerStats(), grace_ms=4_000)
    watch.answered(5_000)
    clock.set(9_000)
    assert watch.reclaim_until(clock.now_ms()) is None  # past the first answer's grace
    watch.answered(9_000)
    watch.unavailable(9_500)
    watch.unavailable(9_800)
    assert watch.reclaim_until(9_900) == 9_000  # down: the last answer before the outage
    watch.answered(9_400)  # sent before the failures: no proof the store is back
    clock.set(12_000)
    assert watch.reclaim_until(12_000) == 9_000
    watch.answered(11_900)
    assert watch.reclaim_until(15_999) == 9_000  # the grace: 4 s from the answer, at 12 s
    # A second outage within the grace keeps the first bound and starts its own grace.
    watch.unavailable(13_000)
    clock.set(14_000)
    watch.answered(14_000)
    assert watch.reclaim_until(17_999) == 9_000
    assert watch.reclaim_until(18_000) is None
    # The next outage has its own bound.
    watch.answered(18_500)
    watch.unavailable(19_000)
    assert watch.reclaim_until(19_000) == 18_500


@pytest.mark.parametrize("first_call_failed", [True, False])
def test_a_new_worker_reclaims_no_lapsed_lease_until_the_grace_after_its_first_answer(
    first_call_failed: bool,
) -> None:
    # It cannot tell an outage that began before it started (its first call may even hang
    # through one and then succeed): every lease may have lapsed in it.
    clock = FakeClock(10_000)
    watch = StoreWatch(clock, WorkerStats(), grace_ms=4_000)
    assert watch.reclaim_until(10_000) == 0
    if first_call_failed:
        watch.unavailable(10_000)
        assert watch.reclaim_until(10_500) == 0
    clock.set(11_000)
    watch.answered(10_000)
    assert watch.reclaim_until(11_000) == 0
    assert watch.reclaim_until(14_999) == 0
    assert watch.reclaim_until(15_000) is None
    # An outage within that grace keeps the bound at 0 and restarts the grace.
    watch.unavailable(12_000)
    clock.set(13_000)
    watch.answered(13_000)
    assert watch.reclaim_until(16_999) == 0
    assert watch.reclaim_until(17_000) is None


async def test_a_call_that_finds_the_store_back_ends_the_settle_backoff_at_once() -> None:
    clock = FakeClock(10_000)
    watch = StoreWatch(clock, WorkerStats(), grace_ms=4_000)
    driver = Outages()
    settler = Settler(driver, clock, seen=watch)
    watch.on_back(settler.store_back)
    heard: list[int] = []
    watch.on_back(lambda: heard.append(clock.now_ms()))
    watch.answered(clock.now_ms())  # its first answer
    await driver.job_enqueue(new_job("j", run_at_ms=0, created_at_ms=0))
    claimed = await driver.job_claim(
        ClaimParams(queues=("q",), worker_id="w", limit=1, lease_ms=60_000, now_ms=10_000)
    )
    clock.set(20_000)
    watch.answered(20_000)
    assert heard == [10_000] and watch.reclaim_until(20_000) is None
    driver.down = True
    landed = asyncio.ensure_future(settler.ack(Ack(claimed.jobs[0].fence, 20_000)))
    # The settle's tries fail (the first kick, from the first answer, costs one early try);
    # after 3.6 s the lane waits out a 2 s step of its backoff.
    await clock.advance(3_600, step_ms=50)
    assert not landed.done() and watch.reclaim_until(23_600) == 20_000
    driver.down = False
    watch.answered(23_600)  # a heartbeat or claim of this worker was answered
    assert await asyncio.wait_for(asyncio.shield(landed), 1) is True
    assert heard == [10_000, 23_600] and clock.now_ms() == 23_600


class _Beats(Outages):
    """`Outages` that notes the clock of every heartbeat the store answered."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.beats: list[int] = []

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        answers = await super()._job_heartbeat(beats)
        self.beats.append(self.clock.now_ms())
        return answers


async def test_a_heartbeat_waiting_to_retry_goes_as_soon_as_a_claim_finds_the_store_back() -> None:
    """The heartbeat failed in an outage and waits a second to retry; the store returns and an
    enqueue's wake has the claim loop reach it first: the renewal goes then, no time passing."""
    clock = FakeClock()
    store = _Beats(clock)
    release = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> str:
        await release.wait()
        return "done"

    h = declare(body)
    jobs = Jobs(store, clock=clock)
    await jobs.enqueue(h, {"n": 0})
    worker = Worker(store, [h], clock=clock, lease=3.0, poll_floor=0.05, concurrency=2)
    await worker.start()
    await clock.advance(100, step_ms=10)
    assert worker.stats.claimed == 1
    store.down = True
    # The heartbeat (every second) fails at about 1 s; its retry waits until about 2 s.
    await clock.advance(1_300, step_ms=50)
    assert store.beats == []
    store.down = False
    await jobs.enqueue(h, {"n": 1})
    back_at = clock.now_ms()
    await clock.advance(0)
    assert store.beats == [back_at], store.beats
    release.set()
    await clock.advance(2_000, step_ms=50)
    await worker.stop()
