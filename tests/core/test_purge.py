"""`purge()` (jobs_core/factories/purge.py): one pass over every target on each driver, a pass
replayed after a crash between a target's purge and its record, the declaration's refusals, a
driver lacking a family, and the purge fired once by a `task()` and run by the real worker."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from jobs_core import FakeClock, JobContext, Jobs
from jobs_core.driver import Capabilities, JobDriver
from jobs_core.errors import CapabilityMissingError, JobsError
from jobs_core.factories.purge import (
    PurgeTarget,
    event_target,
    job_target,
    lease_target,
    purge,
    worker_target,
)
from jobs_core.job import JobHandle, JobRegistry
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    CounterReadParams,
    EventRecord,
    LeaseTake,
    StepPut,
    WebhookAttemptListParams,
    WorkerBeat,
)
from jobs_core.retention import Retention
from jobs_core.scheduler import Scheduler, TaskRegistry, task
from jobs_core.semantics import HOUR_MS, MINUTE_MS
from jobs_core.states import Outcome
from jobs_core.testing import ujobs_for
from jobs_core.testing.scenarios.support import new_job
from jobs_memory import MemoryDriver
from tests.core.support import fresh_store
from tests.core.webhook_support import record_attempts

T0 = 1_800_000_000_000
#: Far enough on that the minute bucket of T0 folds into its hour (`fold_before`).
LATER = T0 + 3 * HOUR_MS
#: A time to live that outlasts `LATER`.
LASTING = 4 * HOUR_MS
KEEP_A_MINUTE = Retention(completed=60, cancelled=60, failed=60, dead=60, webhook_attempts=60)


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as store:
        yield store


async def claim_purge(driver: JobDriver, handle: JobHandle, now: int) -> ClaimedJob:
    """The purge job's row claimed at `now` (reclaimed once its lease lapsed)."""
    got = await driver.job_claim(ClaimParams((handle.queue,), "w-purge", 1, 1000, now))
    (claimed,) = got.jobs
    return claimed


async def run_pass(
    driver: JobDriver, handle: JobHandle, claimed: ClaimedJob, clock: FakeClock
) -> Any:
    """The purge's body on `claimed`, its steps recorded in `driver`, fenced on that claim."""
    return await handle.fn(None, JobContext.for_test(claimed, driver, clock=clock))


async def stock(driver: JobDriver) -> None:
    """For every target, what has expired by `LATER` beside what has not: a job completed at T0
    with a step (and the minute counter its ack moved) and a live job; events; lease holdings
    (one a rate stamp); registry rows; webhook attempts (one made exactly a minute before)."""
    await driver.job_enqueue(new_job("done"))
    (held,) = (await driver.job_claim(ClaimParams(("q",), "w1", 1, 60_000, T0))).jobs
    assert await driver.step_put([StepPut(held.fence, "s", "1", T0)]) == [True]
    assert await driver.job_ack([Ack(held.fence, T0 + 1)]) == [True]
    await driver.job_enqueue(new_job("live", run_at_ms=LATER * 2))
    for i, ttl in enumerate((10, 10, LASTING)):
        assert await driver.event_publish(EventRecord(f"e{i}", "ev", "{}", T0, T0 + ttl)) == 0
    takes = [LeaseTake(f"k{i}", "h", 1, 10, i == 0) for i in range(3)]
    assert None not in await driver.lease_take([*takes, LeaseTake("lasting", "h", 1, LASTING)], T0)
    for w, ttl in (("dead-1", 10), ("dead-2", 10), ("alive", LASTING)):
        await driver.worker_beat(WorkerBeat(w, "{}", ttl, T0))
    await record_attempts(driver, 2, T0, "old")
    await record_attempts(driver, 1, LATER - 60_000, "edge")


async def test_one_pass_purges_every_target(driver: JobDriver) -> None:
    """Every built-in target on each driver: what expired at the pass's one clock reading goes
    in bounded calls (a batch of 2 for 3 holdings: a second call), the rest stays; a purged job
    takes its steps; the result counts each target."""
    await stock(driver)
    handle = purge(retention=KEEP_A_MINUTE, batch=2, registry=JobRegistry())
    clock = FakeClock(LATER)
    await Jobs(driver, clock=clock).enqueue(handle, None)
    result = await run_pass(driver, handle, await claim_purge(driver, handle, LATER), clock)
    assert result == {
        "now_ms": LATER,
        "purged": {
            "jobs": 1,
            "events": 2,
            "leases": 3,
            "workers": 2,
            "counters": 1,
            "webhook_attempts": 2,
        },
        "capped": [],
    }
    assert await driver.job_get_many(["done"]) == {}
    assert await driver.step_list("run-done") == []
    assert set(await driver.job_get_many(["live"])) == {"live"}
    assert await driver.event_purge(LATER, 100) == 0  # e2 is still live
    assert [h.key for h in await driver.lease_holders("lasting", LATER)] == ["lasting"]
    assert await driver.lease_purge(LATER, 100) == 0
    assert [w.worker_id for w in await driver.worker_list(LATER)] == ["alive"]
    assert await driver.worker_purge(LATER, 100) == 0
    (hour,) = await driver.counter_read(CounterReadParams(0, LATER))
    assert (hour.bucket_ms, hour.width_ms, hour.completed) == (T0 - T0 % HOUR_MS, HOUR_MS, 1)
    left = await driver.webhook_attempt_list(WebhookAttemptListParams("t1", "orders", 10))
    assert [a.job_id for a in left] == ["edge00000"]
    endpoint = await driver.webhook_endpoint_get("t1", "orders")
    assert endpoint is not None and endpoint.failures == 3


class Crash(Exception):
    """The process dying between a target's purge and its step's record."""


def crashing_once(target: PurgeTarget, calls: list[tuple[str, int]]) -> PurgeTarget:
    """`target`, each call noted (name, now_ms); its first call lands, then the attempt dies."""
    crashed: list[bool] = []

    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        calls.append((target.name, now_ms))
        n = await target.purge(driver, now_ms, limit)
        if not crashed:
            crashed.append(True)
            raise Crash(f"{target.name} purged {n}, not recorded")
        return n

    return replace(target, purge=call)


def noted(target: PurgeTarget, calls: list[tuple[str, int]]) -> PurgeTarget:
    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        calls.append((target.name, now_ms))
        return await target.purge(driver, now_ms, limit)

    return replace(target, purge=call)


async def test_a_pass_replayed_after_a_crash_keeps_its_clock_and_counts_once(
    driver: JobDriver,
) -> None:
    """Attempt 1 purges the events (recorded), then the leases, and dies before the leases'
    record. Attempt 2, an hour later, replays `now` (the same reading: what expired since is
    left for the next pass) and the events' step (not called again, counted once), runs the
    leases' step again at that reading (what attempt 1 removed is gone and uncounted), then the
    workers'."""
    calls: list[tuple[str, int]] = []
    handle = purge(
        targets=[
            noted(event_target(), calls),
            crashing_once(lease_target(), calls),
            noted(worker_target(), calls),
        ],
        registry=JobRegistry(),
    )
    for i in range(2):
        await driver.event_publish(EventRecord(f"e{i}", "ev", "{}", T0, T0 + 10))
    await driver.lease_take([LeaseTake(f"k{i}", "h", 1, 10) for i in range(3)], T0)
    await driver.worker_beat(WorkerBeat("dead", "{}", 10, T0))
    clock = FakeClock(T0 + 100)
    await Jobs(driver, clock=clock).enqueue(handle, None)
    first = await claim_purge(driver, handle, T0 + 100)
    with pytest.raises(Crash):
        await run_pass(driver, handle, first, clock)
    assert await driver.lease_purge(T0 + 100, 100) == 0, "attempt 1's lease purge landed"
    steps = [s.name for s in await driver.step_list(first.run_id)]
    assert sorted(steps) == ["now", "purge:events"]
    # Meanwhile more expires, all of it after the first reading.
    await driver.event_publish(EventRecord("late", "ev", "{}", T0 + 100, T0 + 200))
    await driver.lease_take([LeaseTake("late", "h", 1, 100)], T0 + 100)
    await driver.worker_beat(WorkerBeat("late", "{}", 100, T0 + 100))
    await clock.advance(HOUR_MS)
    second = await claim_purge(driver, handle, T0 + 100 + HOUR_MS)
    assert (second.run_id, second.attempt) == (first.run_id, 2)
    result = await run_pass(driver, handle, second, clock)
    assert result == {
        "now_ms": T0 + 100,
        "purged": {"events": 2, "leases": 0, "workers": 1},
        "capped": [],
    }
    assert calls == [
        ("events", T0 + 100),
        ("leases", T0 + 100),
        ("leases", T0 + 100),
        ("workers", T0 + 100),
    ]
    now = clock.now_ms()
    assert await driver.event_purge(now, 100) == 1
    assert await driver.lease_purge(now, 100) == 1
    assert await driver.worker_purge(now, 100) == 1


def test_the_declaration_refuses_before_registering() -> None:
    registry = JobRegistry()
    refusals: list[tuple[Any, str]] = [
        ({"targets": [event_target(), event_target()]}, "X_PURGE_DECLARATION_INVALID"),
        ({"targets": []}, "X_PURGE_DECLARATION_INVALID"),
        ({"targets": event_target()}, "X_PURGE_DECLARATION_INVALID"),
        ({"targets": [PurgeTarget("", event_target().purge)]}, "X_PURGE_DECLARATION_INVALID"),
        ({"targets": [PurgeTarget("x\x00", event_target().purge)]}, "X_PURGE_DECLARATION_INVALID"),
        (
            {"targets": [PurgeTarget("x", event_target().purge, ("nope",))]},  # type: ignore[arg-type]
            "X_PURGE_DECLARATION_INVALID",
        ),
        (
            {"targets": [event_target()], "retention": KEEP_A_MINUTE},
            "X_PURGE_DECLARATION_INVALID",
        ),
        ({"batch": 0}, "X_JOB_OPTION_INVALID"),
        ({"batch": 10_001}, "X_JOB_OPTION_INVALID"),
        ({"max_batches": 0}, "X_JOB_OPTION_INVALID"),
    ]
    for options, code in refusals:
        with pytest.raises(JobsError) as caught:
            purge(registry=registry, **options)
        assert caught.value.code == code, (options, caught.value)
    assert registry.names() == []
    handle = purge(targets=[event_target(), job_target(KEEP_A_MINUTE)], registry=registry)
    assert registry.names() == ["ujobs.purge"] and handle.tenant == "none"


class NoRegistry(MemoryDriver):
    def capabilities(self) -> Capabilities:
        return replace(super().capabilities(), workers=False)


async def test_a_target_the_driver_cannot_serve_refuses_the_pass_before_any_step() -> None:
    """The pass checks every target's families first: nothing is purged, not even the clock
    recorded, and the refusal (terminal) names the family."""
    driver = NoRegistry()
    handle = purge(targets=[event_target(), worker_target()], registry=JobRegistry())
    clock = FakeClock(LATER)
    await driver.event_publish(EventRecord("e", "ev", "{}", T0, T0 + 10))
    await Jobs(driver, clock=clock).enqueue(handle, None)
    claimed = await claim_purge(driver, handle, LATER)
    with pytest.raises(CapabilityMissingError) as caught:
        await run_pass(driver, handle, claimed, clock)
    assert caught.value.capability == "workers" and caught.value.terminal
    assert await driver.step_list(claimed.run_id) == []
    assert await driver.event_purge(LATER, 10) == 1


async def test_scheduled_as_a_task_it_fires_once_and_the_worker_runs_it() -> None:
    """`task("purge", cron="*/15 * * * *", job=purge())`: the scheduler's first round arms it,
    the round after the quarter hour fires one purge job, and the real worker runs the pass."""
    with ujobs_for("memory") as ujobs:
        handle = purge(targets=[event_target(), lease_target()], registry=JobRegistry())
        every_quarter = task(
            "purge", cron="*/15 * * * *", tz="UTC", job=handle, registry=TaskRegistry()
        )
        driver, clock = ujobs.driver, ujobs.clock
        clock.set(T0 - T0 % HOUR_MS)  # an hour's start
        start = clock.now_ms()
        await driver.event_publish(EventRecord("e", "ev", "{}", start, start + 10))
        await driver.lease_take([LeaseTake("k", "h", 1, 10)], start)
        scheduler = Scheduler(driver, [every_quarter], clock=clock, lease_ttl=3600)
        assert await scheduler.tick() == []
        clock.set(start + 16 * MINUTE_MS)
        (fired,) = await scheduler.tick()
        assert await scheduler.tick() == []
        (outcome,) = await ujobs.drain([handle])
        assert (outcome.job_id, outcome.outcome) == (fired.job_id, Outcome.COMPLETED)
        assert outcome.result == {
            "now_ms": start + 16 * MINUTE_MS,
            "purged": {"events": 1, "leases": 1},
            "capped": [],
        }
