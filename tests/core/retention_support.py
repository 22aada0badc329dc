"""Retention checks every driver's tests run: a worker purges old finished rows and nothing else,
and purgers running at once remove each row once."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.job import JobRegistry, job
from jobs_core.records import Ack, ClaimParams, Nack, NackKind, NewJob
from jobs_core.retention import DAY, HOUR, Purger, Retention
from jobs_core.states import JobState
from jobs_core.worker import Worker

Advance = Callable[[FakeClock, int], Awaitable[None]]


def new_job(job_id: str, at_ms: int, queue: str = "q", run_at_ms: int | None = None) -> NewJob:
    return NewJob(
        id=job_id,
        run_id=f"run-{job_id}",
        name="noop",
        queue=queue,
        tenant_id=None,
        idempotency_key=job_id,
        input_json="{}",
        priority=0,
        run_at_ms=at_ms if run_at_ms is None else run_at_ms,
        max_attempts=3,
        created_at_ms=at_ms,
    )


async def finish(driver: JobDriver, ids: Sequence[str], state: JobState, at_ms: int) -> None:
    """Store `ids` as rows that reached final `state` at `at_ms`, through the driver's calls."""
    for start in range(0, len(ids), 1000):
        chunk = list(ids[start : start + 1000])
        await driver.job_enqueue_many([new_job(i, at_ms, queue="fin") for i in chunk])
        if state is JobState.CANCELLED:
            for i in chunk:
                await driver.job_cancel(i, at_ms)
            continue
        got = await driver.job_claim(ClaimParams(("fin",), "setup", len(chunk), 1000, at_ms))
        assert sorted(j.id for j in got.jobs) == sorted(chunk)
        if state is JobState.COMPLETED:
            landed = await driver.job_ack([Ack(j.fence, at_ms) for j in got.jobs])
        else:
            dead = state is JobState.DEAD
            landed = await driver.job_nack(
                [Nack(j.fence, NackKind.FAIL, at_ms, dead_letter=dead) for j in got.jobs]
            )
        assert all(landed)


async def noop(input: Any, ctx: JobContext) -> None:
    return None


def noop_job() -> Any:
    """A no-op job named `noop` in queue `default`, in a registry of its own."""
    return job(
        noop, name="noop", tenant="none", idempotency_key=lambda i: "k", registry=JobRegistry()
    )


async def worker_purges_old_finished_rows(
    driver: JobDriver, clock: FakeClock, advance: Advance
) -> None:
    """With the default retention a worker removes what outlived it, keeps the rest."""
    now = clock.now_ms()
    await finish(driver, ["c-old", "c-old2"], JobState.COMPLETED, now - 25 * HOUR * 1000)
    await finish(driver, ["c-young"], JobState.COMPLETED, now - HOUR * 1000)
    await finish(driver, ["x-old"], JobState.CANCELLED, now - 2 * DAY * 1000)
    await finish(driver, ["f-kept"], JobState.FAILED, now - 2 * DAY * 1000)
    await finish(driver, ["d-old"], JobState.DEAD, now - 8 * DAY * 1000)
    # Live rows in a queue the worker does not serve, however old, are never purged.
    ancient = now - 30 * DAY * 1000
    await driver.job_enqueue(new_job("running-old", ancient, queue="other"))
    await driver.job_claim(ClaimParams(("other",), "w9", 1, 1000, ancient))
    await driver.job_enqueue(new_job("ready-old", ancient, queue="other"))
    ids = ["c-old", "c-old2", "c-young", "x-old", "f-kept", "d-old", "ready-old", "running-old"]
    worker = Worker(driver, [noop_job()], queues=["q"], clock=clock)
    await worker.start()
    try:
        # The first round comes within a minute of the start.
        await advance(clock, 70_000)
        left = await driver.job_get_many(ids)
    finally:
        await worker.stop()
    assert sorted(left) == ["c-young", "f-kept", "ready-old", "running-old"], sorted(left)
    assert left["running-old"].state is JobState.RUNNING
    assert left["ready-old"].state is JobState.READY


async def purgers_at_once_remove_each_row_once(
    drivers: Sequence[JobDriver], clock: FakeClock, rows: int = 1500
) -> None:
    """Several purgers over one store, at the same time: the counts add up to the rows, once."""
    ids = [f"p{i:05d}" for i in range(rows)]
    await finish(drivers[0], ids, JobState.COMPLETED, clock.now_ms() - 2 * DAY * 1000)
    purgers = [Purger(d, Retention(), clock, batch=64) for d in drivers]
    counts = await asyncio.gather(*(p.purge() for p in purgers))
    assert sum(counts) == rows, counts
    assert await drivers[0].job_get_many(ids) == {}
