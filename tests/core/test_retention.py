"""Retention on the memory driver: the options, the `Purger`, and the worker applying them."""

from __future__ import annotations

import logging
import math
from datetime import timedelta

import pytest

from jobs_core.clock import FakeClock
from jobs_core.driver import MAX_PURGE_LIMIT
from jobs_core.errors import DriverUnavailableError, JobsError
from jobs_core.facade import Jobs
from jobs_core.records import PurgeParams
from jobs_core.retention import DAY, Purger, Retention
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.retention_support import (
    finish,
    noop_job,
    purgers_at_once_remove_each_row_once,
    worker_purges_old_finished_rows,
)
from tests.core.support import counting


async def _advance(clock: FakeClock, ms: int) -> None:
    await clock.advance(ms)


def test_defaults_are_rivers() -> None:
    p = Retention().params(now_ms=5, limit=7)
    assert (p.now_ms, p.limit) == (5, 7)
    assert (p.completed_ms, p.cancelled_ms) == (DAY * 1000, DAY * 1000)
    assert (p.failed_ms, p.dead_ms) == (7 * DAY * 1000, 7 * DAY * 1000)


def test_seconds_timedelta_and_none() -> None:
    r = Retention(completed=1.5, cancelled=timedelta(minutes=2), failed=None, dead=0)
    p = r.params(0, 1)
    assert (p.completed_ms, p.cancelled_ms, p.failed_ms, p.dead_ms) == (1500, 120_000, None, 0)
    assert not r.keeps_everything
    assert Retention(None, None, None, None).keeps_everything


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("completed", -1),
        ("cancelled", math.nan),
        ("failed", math.inf),
        ("dead", True),
        ("completed", "1d"),
        ("dead", timedelta(days=-1)),
        ("failed", 200 * 365 * DAY),
        ("webhook_attempts", -1),
    ],
)
def test_bad_values_are_refused_naming_the_option(option: str, value: object) -> None:
    with pytest.raises(JobsError) as info:
        Retention(**{option: value})  # type: ignore[arg-type]
    assert info.value.code == "X_JOB_OPTION_INVALID"
    assert info.value.detail == f"retention.{option}"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (PurgeParams(0, 0, 1, 1, 1, 1), "limit"),
        (PurgeParams(0, MAX_PURGE_LIMIT + 1, 1, 1, 1, 1), "limit"),
        (PurgeParams(-1, 1, 1, 1, 1, 1), "now_ms"),
        (PurgeParams(0, 1, 1, -5, 1, 1), "cancelled_ms"),
        (PurgeParams(0, 1, 1, 1, 1.5, 1), "failed_ms"),  # type: ignore[arg-type]
    ],
)
async def test_job_purge_refuses_bad_params_before_any_write(
    params: PurgeParams, field: str
) -> None:
    driver = MemoryDriver()
    await finish(driver, ["a"], JobState.COMPLETED, 0)
    with pytest.raises(JobsError) as info:
        await driver.job_purge(params)
    assert (info.value.code, info.value.detail) == ("X_JOB_RECORD_INVALID", field)
    assert list(await driver.job_get_many(["a"])) == ["a"]


async def test_a_round_goes_batch_after_batch_while_they_come_back_full() -> None:
    driver = counting(MemoryDriver)()
    clock = FakeClock()
    await finish(driver, [f"j{i:03d}" for i in range(250)], JobState.DEAD, 0)
    driver.calls.clear()
    purger = Purger(driver, Retention(dead=0), clock, batch=100)
    assert await purger.purge() == 250
    # 100, 100, then 50 (short): the round stops there.
    assert driver.calls == ["_job_purge"] * 3
    assert purger.purged == 250


class FailingPurge(MemoryDriver):
    async def _job_purge(self, params: PurgeParams) -> int:
        raise DriverUnavailableError(detail="down")


async def test_a_failed_purge_is_logged_and_the_worker_keeps_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    driver = FailingPurge()
    h = noop_job()
    worker = Worker(driver, [h], clock=clock)
    await worker.start()
    caplog.set_level(logging.WARNING, logger="jobs")
    await clock.advance(70_000)
    queued = await Jobs(driver, clock=clock).enqueue(h, {})
    await clock.advance(5_000)
    await worker.stop()
    assert any("jobs.purge.failed" in r.getMessage() for r in caplog.records)
    assert (await driver.job_get_many([queued.id]))[queued.id].state is JobState.COMPLETED


async def test_a_worker_purges_old_finished_rows_and_keeps_the_rest() -> None:
    await worker_purges_old_finished_rows(MemoryDriver(), FakeClock(), _advance)


async def test_no_retention_means_no_purge_at_all() -> None:
    driver = counting(MemoryDriver)()
    clock = FakeClock()
    await finish(driver, ["old"], JobState.COMPLETED, clock.now_ms() - 30 * DAY * 1000)
    for retention in (None, Retention(None, None, None, None)):
        worker = Worker(driver, [noop_job()], clock=clock, retention=retention)
        await worker.start()
        await clock.advance(300_000)
        await worker.stop()
    assert "_job_purge" not in driver.calls
    assert list(await driver.job_get_many(["old"])) == ["old"]


async def test_purgers_at_once_remove_each_row_once() -> None:
    driver = MemoryDriver()
    await purgers_at_once_remove_each_row_once([driver, driver, driver], FakeClock())


async def test_two_workers_purging_one_store_remove_each_row_once() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    ids = [f"r{i:05d}" for i in range(3000)]
    await finish(driver, ids, JobState.COMPLETED, clock.now_ms() - 2 * DAY * 1000)
    workers = [Worker(driver, [noop_job()], clock=clock) for _ in range(2)]
    for w in workers:
        await w.start()
    await clock.advance(200_000)
    for w in workers:
        await w.stop()
    purged = [w._purger.purged for w in workers if w._purger is not None]
    assert sum(purged) == 3000, purged
    assert await driver.job_get_many(ids) == {}


async def test_the_upkeep_folds_counters_and_purges_expired_events_whatever_the_retention() -> None:
    from jobs_core.records import CounterReadParams, EventRecord, EventWait
    from jobs_core.semantics import HOUR_MS

    driver = counting(MemoryDriver)()
    clock = FakeClock()
    for i in range(5):
        await driver.event_publish(EventRecord(f"e{i}", "paid", "{}", 0, 1_000 + i))
    await driver.event_publish(EventRecord("kept", "paid", "{}", 0, clock.now_ms() + HOUR_MS))
    await finish(driver, ["old"], JobState.COMPLETED, clock.now_ms() - 3 * HOUR_MS)
    driver.calls.clear()
    purger = Purger(driver, None, clock, batch=2)  # keeps every row: still folds and purges
    assert await purger.purge() == 0 and "_job_purge" not in driver.calls
    assert await purger.fold() == 1  # the old minute bucket, into its hour
    assert purger.events_purged == 5  # in batches of 2: 2, 2, then 1 (short) ends it
    left = await driver.event_find(EventWait("paid", "{}", 0), clock.now_ms())
    assert left is not None and left.id == "kept"
    buckets = await driver.counter_read(CounterReadParams(0, clock.now_ms() + 1))
    assert [b.width_ms for b in buckets] == [HOUR_MS]


async def test_the_upkeep_purges_webhook_attempts_past_their_retention() -> None:
    """The upkeep round deletes attempts made more than `webhook_attempts` ago, batch after
    batch (one made exactly that long ago stays), and leaves the endpoint's streak; a retention
    keeping them (None), or no retention at all, makes no such call."""
    from jobs_core.records import WebhookAttemptListParams
    from tests.core.webhook_support import record_attempts

    clock = FakeClock()
    now = clock.now_ms()
    keep = Retention(webhook_attempts=3600)
    for retention in (None, Retention(webhook_attempts=None)):
        driver = counting(MemoryDriver)()
        await record_attempts(driver, 2, 0)
        driver.calls.clear()
        await Purger(driver, retention, clock).fold()
        assert "_webhook_attempt_purge" not in driver.calls, retention
    driver = counting(MemoryDriver)()
    await record_attempts(driver, 5, now - 3_600_001, "old")
    await record_attempts(driver, 1, now - 3_600_000, "edge")
    before = await driver.webhook_endpoint_get("t1", "orders")
    driver.calls.clear()
    purger = Purger(driver, keep, clock, batch=2)
    await purger.fold()
    assert purger.attempts_purged == 5  # in batches of 2: 2, 2, then 1 (short) ends it
    assert driver.calls.count("_webhook_attempt_purge") == 3
    left = await driver.webhook_attempt_list(WebhookAttemptListParams("t1", "orders", 10))
    assert [a.job_id for a in left] == ["edge00000"]
    assert await driver.webhook_endpoint_get("t1", "orders") == before
    assert keep.attempts_before(1000) == 0  # a bound before every attempt: nothing goes
