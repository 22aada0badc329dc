"""Settles and outages under a fake clock: one bad settle never sinks its batch; heartbeats, claims,
start-up and `stop(0)` behave while the store is unreachable. Real-server outages are in
`tests/pg/test_outage.py` and `tests/redis/test_outage.py`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from jobs_core.clock import FakeClock, SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import MAX_TIME_MS
from jobs_core.errors import (
    DriverError,
    DriverUnavailableError,
    OptionInvalidError,
    RateLimitedError,
)
from jobs_core.facade import Jobs
from jobs_core.records import (
    Ack,
    ClaimParams,
    ClaimResult,
    Fence,
    Heartbeat,
    Nack,
    NackKind,
    StepPut,
    WorkerBeat,
)
from jobs_core.retry import Retry
from jobs_core.settle import Settler
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import cancel_recorder, declare


class Flaky(MemoryDriver):
    """A memory store whose calls can be made unreachable, each family on its own."""

    def __init__(self) -> None:
        super().__init__()
        self.claims_down = False
        self.beats_down = False
        self.heartbeats_down = False
        self.refuse_ids: set[str] = set()
        self.claim_calls = 0

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        self.claim_calls += 1
        if self.claims_down:
            raise DriverUnavailableError(detail="down")
        return await super()._job_claim(params)

    async def _worker_beat(self, beat: WorkerBeat) -> None:
        if self.beats_down:
            raise DriverUnavailableError(detail="down")
        await super()._worker_beat(beat)

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        if self.heartbeats_down:
            raise DriverUnavailableError(detail="down")
        return await super()._job_heartbeat(beats)

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        # A refusal only this store makes (the shared checks let it through).
        if any(n.fence.job_id in self.refuse_ids for n in nacks):
            raise DriverError("refused by the store", detail="nack")
        return await super()._job_nack(nacks)


# -- item 4: one bad settle never sinks its batch -------------------------------------------------


def test_rate_limited_takes_a_float_of_ms_and_refuses_what_is_not_a_duration() -> None:
    err = RateLimitedError(retry_after_ms=1.5e3)
    assert err.retry_after_ms == 1500 and type(err.retry_after_ms) is int
    assert RateLimitedError().retry_after_ms == 1000
    for bad in (math.nan, math.inf, -1, -0.5, True, "5", None):
        with pytest.raises(OptionInvalidError) as info:
            RateLimitedError(retry_after_ms=bad)  # type: ignore[arg-type]
        assert info.value.code == "X_JOB_OPTION_INVALID" and info.value.detail == "retry_after_ms"


async def test_a_batch_the_store_refuses_is_retried_one_by_one_so_only_the_bad_item_fails() -> None:
    driver = Flaky()
    h = declare(lambda i, c: None)
    await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(3)])
    claimed = (await driver.job_claim(ClaimParams(("default",), "w", 3, 30_000, _now()))).jobs
    driver.refuse_ids = {claimed[1].id}
    settler = Settler(driver, SystemClock())
    now = _now()
    answers = await asyncio.gather(
        *(settler.nack(Nack(c.fence, NackKind.INTERRUPT, now)) for c in claimed)
    )
    assert answers == [True, False, True]
    rows = await driver.job_get_many([c.id for c in claimed])
    assert [rows[c.id].state for c in claimed] == [JobState.READY, JobState.RUNNING, JobState.READY]


async def test_acks_answered_by_callback_land_and_one_that_raises_sinks_no_other_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = Flaky()
    h = declare(lambda i, c: None)
    await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(3)])
    claimed = (await driver.job_claim(ClaimParams(("default",), "w", 3, 30_000, _now()))).jobs
    settler = Settler(driver, SystemClock())
    heard: dict[str, bool] = {}

    def hear(job_id: str) -> Callable[[bool], None]:
        def then(landed: bool) -> None:
            heard[job_id] = landed
            if job_id == claimed[0].id:
                raise RuntimeError("a bookkeeper that crashes")

        return then

    now = _now()
    stale = Fence(claimed[2].id, claimed[2].claims + 1, "w")  # a claim this row no longer has
    fences = [claimed[0].fence, claimed[1].fence, stale]
    assert all([settler.ack_then(Ack(f, now), hear(f.job_id)) for f in fences])
    assert heard == {}  # never before `ack_then` returns: the caller finishes its own work first
    await settler.join()
    assert heard == {claimed[0].id: True, claimed[1].id: True, claimed[2].id: False}
    assert "jobs.settle.answer_crashed" in caplog.text
    rows = await driver.job_get_many([c.id for c in claimed])
    assert [rows[c.id].state for c in claimed] == [
        JobState.COMPLETED,
        JobState.COMPLETED,
        JobState.RUNNING,
    ]


async def test_ack_then_queues_nothing_it_cannot_send_as_it_is_and_ack_then_settles_it() -> None:
    driver = Flaky()
    h = declare(lambda i, c: None)
    await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(2)])
    claimed = (await driver.job_claim(ClaimParams(("default",), "w", 2, 30_000, _now()))).jobs
    settler = Settler(
        driver,
        SystemClock(),
        replace_invalid=lambda item, exc: Nack(item.fence, NackKind.FAIL, _now(), error="bad"),
    )
    heard: list[bool] = []
    # Refused by the driver's checks (a time before the epoch): replaced by the awaited way.
    refused = Ack(claimed[0].fence, -1)
    assert not settler.ack_then(refused, heard.append)
    assert await settler.ack(refused)
    # A step record of its job still on its way: the ack must wait for it, so it cannot go now.
    put = asyncio.ensure_future(settler.step_put(StepPut(claimed[1].fence, "s", "1", _now())))
    await asyncio.sleep(0)
    assert not settler.ack_then(Ack(claimed[1].fence, _now()), heard.append)
    assert await put
    assert settler.ack_then(Ack(claimed[1].fence, _now()), heard.append)
    await settler.join()
    assert heard == [True]
    rows = await driver.job_get_many([c.id for c in claimed])
    assert [rows[c.id].state for c in claimed] == [JobState.DEAD, JobState.COMPLETED]


async def test_rate_limited_with_a_float_delay_sheds_every_job_of_the_batch() -> None:
    clock = FakeClock()
    driver = MemoryDriver()
    runs: list[int] = []

    async def limited(input: Any, ctx: JobContext) -> None:
        runs.append(input["n"])
        if runs.count(input["n"]) == 1:
            raise RateLimitedError(retry_after_ms=1.5e3)

    h = declare(limited)
    queued = await Jobs(driver, clock=clock).enqueue_many(h, [{"n": i} for i in range(4)])
    worker = Worker(driver, [h], clock=clock, concurrency=4)
    await worker.start()
    await clock.advance(5_000, step_ms=50)
    rows = await driver.job_get_many([q.id for q in queued])
    await worker.stop()
    # Shed, not spent: each ran twice, completed on attempt 1, nothing left to its lease.
    assert all(r.state is JobState.COMPLETED and r.attempt == 1 for r in rows.values()), rows
    assert sorted(runs) == sorted([0, 1, 2, 3] * 2)
    assert worker.stats.shed == 4 and worker.stats.unowned == 0


async def test_a_settle_the_driver_would_refuse_fails_its_own_job_with_the_typed_error() -> None:
    # Ten minutes before the last time a store keeps: a retry an hour on is past it, refused.
    # Its replacement was a retry refused the same way, and not sent: the claim was left to its
    # lease. (A rate limit past that time made the refused settle here before: it now defers
    # to that time, test_worker.py.)
    clock = FakeClock(MAX_TIME_MS - 600_000)
    driver = MemoryDriver()

    async def too_far(input: Any, ctx: JobContext) -> None:
        if input["n"] == 0:
            raise RuntimeError("retried past any time a store keeps")
        return None

    hour = 3_600_000
    h = declare(too_far, retry=Retry(attempts=2, base_ms=hour, cap_ms=hour, jitter="none"))
    queued = await Jobs(driver, clock=clock).enqueue_many(h, [{"n": i} for i in range(3)])
    worker = Worker(driver, [h], clock=clock, concurrency=3)
    await worker.start()
    await clock.advance(1_000, step_ms=50)
    rows = await driver.job_get_many([q.id for q in queued])
    await worker.stop()
    bad, *good = (rows[q.id] for q in queued)
    assert bad.state is JobState.DEAD and "X_JOB_RECORD_INVALID" in (bad.last_error or "")
    assert all(r.state is JobState.COMPLETED for r in good)


# -- items 5 and 6 under a fake clock ------------------------------------------------------------


async def test_a_store_back_before_the_lease_ends_has_it_renewed_in_time_not_lost() -> None:
    clock = FakeClock()
    start = clock.now_ms()
    driver = Flaky()
    reasons: list[str] = []

    h = declare(cancel_recorder(reasons, lambda: clock.sleep_ms(40_000)), name="long")
    queued = await Jobs(driver, clock=clock).enqueue(h, {"n": 1})
    worker = Worker(driver, [h], clock=clock, lease=30.0)
    await worker.start()
    await clock.advance(5_000, step_ms=100)
    driver.heartbeats_down = True  # down from 5 s to 28.5 s; the lease runs out at 30 s
    await clock.advance(23_500, step_ms=100)
    driver.heartbeats_down = False
    await clock.advance(1_000, step_ms=100)
    # Renewed within a second of the store's return, not at the next period (30 s): too late.
    r = (await driver.job_get_many([queued.id]))[queued.id]
    assert r.lease_until_ms is not None and r.lease_until_ms > start + 50_000, r
    await clock.advance(20_000, step_ms=100)
    r = (await driver.job_get_many([queued.id]))[queued.id]
    await worker.stop()
    assert reasons == [] and worker.stats.lost == 0
    assert r.state is JobState.COMPLETED and r.attempt == 1 and r.claims == 1


async def test_a_claim_loop_facing_an_outage_backs_off_and_logs_a_bounded_number_of_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    driver = Flaky()
    worker = Worker(driver, [declare(lambda i, c: None)], clock=clock)
    await worker.start()
    await clock.advance(1_000)
    driver.claims_down = True
    driver.claim_calls = 0
    with caplog.at_level(logging.WARNING, logger="jobs"):
        await clock.advance(30_000, step_ms=50)
    failed = [r for r in caplog.records if "jobs.claim.failed" in r.getMessage()]
    calls = driver.claim_calls
    driver.claims_down = False
    await clock.advance(6_000, step_ms=50)
    await worker.stop()
    # 0.1 s doubling to 5 s: about a dozen tries in 30 s (at the 50 ms floor it was ~600).
    assert 0 < calls <= 15, calls
    assert 0 < len(failed) <= 10, [r.getMessage() for r in failed]


async def test_a_worker_started_while_the_store_is_down_waits_for_it() -> None:
    clock = FakeClock()
    driver = Flaky()
    done: list[int] = []

    async def body(input: Any, ctx: JobContext) -> None:
        done.append(input["n"])

    h = declare(body)
    await Jobs(driver, clock=clock).enqueue_many(h, [{"n": i} for i in range(3)])
    driver.beats_down = True
    worker = Worker(driver, [h], clock=clock)
    starting = asyncio.create_task(worker.start())
    await clock.advance(2_000, step_ms=50)
    assert not starting.done()
    driver.beats_down = False
    await clock.advance(5_000, step_ms=50)
    await starting  # no error: the store came back
    await clock.advance(1_000, step_ms=50)
    await worker.stop()
    assert sorted(done) == [0, 1, 2]


async def test_a_stop_while_start_waits_for_the_store_ends_start_and_run() -> None:
    clock = FakeClock()
    driver = Flaky()
    driver.beats_down = True
    worker = Worker(driver, [declare(lambda i, c: None)], clock=clock)
    running = asyncio.create_task(worker.run())
    await clock.advance(1_000, step_ms=50)
    assert not running.done()
    stopping = asyncio.create_task(worker.stop(1))
    await clock.advance(3_000, step_ms=50)
    await asyncio.wait_for(asyncio.gather(running, stopping), 5)
    assert driver.claim_calls == 0  # it never began to claim


async def test_stop_zero_aborts_running_bodies_at_once_and_hands_their_claims_back() -> None:
    seen: list[str] = []

    driver = MemoryDriver()
    h = declare(cancel_recorder(seen), name="endless")
    queued = await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(3)])
    worker = Worker(driver, [h], concurrency=2, max_in_flight=3, poll_floor=0.001)
    await worker.start()
    deadline = time.monotonic() + 10
    while worker.stats.running < 2:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.005)
    started = time.monotonic()
    await worker.stop(0)
    assert time.monotonic() - started < 1.0
    assert seen == ["X_DRAINING", "X_DRAINING"]
    rows = await driver.job_get_many([q.id for q in queued])
    assert all(r.state is JobState.READY and r.attempt == 0 for r in rows.values())
    assert worker.stats.interrupted == 3


def _now() -> int:
    return time.time_ns() // 1_000_000
