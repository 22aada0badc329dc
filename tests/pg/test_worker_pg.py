"""The worker on Postgres end to end: a backlog drains with batched claims and settles, and an
idle worker is woken by the LISTEN channel long before its poll would have found the job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_pg import PgDriver
from jobs_pg.wake import PgWakeSubscription


def declare(fn: Any, name: str) -> JobHandle:
    handle: JobHandle = job(
        fn,
        name=name,
        registry=JobRegistry(),
        tenant="none",
        idempotency_key=lambda i: str(i["n"]),
    )
    return handle


async def _until(cond: Any, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while not await cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def test_a_backlog_drains_every_job_once(pg: PgDriver) -> None:
    ran: list[int] = []

    async def body(input: Any, ctx: JobContext) -> int:
        ran.append(input["n"])
        return int(input["n"])

    handle = declare(body, "count")
    results = await Jobs(pg).enqueue_many(handle, [{"n": n} for n in range(400)])
    ids = [r.id for r in results]
    worker = Worker(pg, [handle], concurrency=20, max_in_flight=120, poll_floor=0.01)
    await worker.start()

    async def all_done() -> bool:
        rows = await pg.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    try:
        await _until(all_done)
    finally:
        await worker.stop()
    assert sorted(ran) == list(range(400))
    rows = await pg.job_get_many(ids)
    assert {r.claims for r in rows.values()} == {1}
    assert {r.result_json for r in rows.values()} == {str(n) for n in range(400)}


async def test_an_idle_worker_is_woken_by_the_listen_channel(pg: PgDriver) -> None:
    async def body(input: Any, ctx: JobContext) -> None:
        return None

    handle = declare(body, "ping")
    worker = Worker(pg, [handle], poll_floor=1.0, poll_ceiling=2.0, wake_ceiling=30.0)
    await worker.start()
    try:
        sub = worker._wake  # the worker's own subscription: proven before we rely on it
        assert isinstance(sub, PgWakeSubscription)
        deadline = time.monotonic() + 10
        while not sub.is_live():
            assert time.monotonic() < deadline, "the wake never became live"
            await asyncio.sleep(0.02)
        # Idle waits of 1, 2, 4 s…: at 3.5 s the worker is inside a 4 s wait (a poll would find
        # the job only ~3.5 s later), so a finish within 2 s proves the wake did it.
        await asyncio.sleep(3.5)
        started = time.monotonic()
        r = await Jobs(pg).enqueue(handle, {"n": 1})

        async def done() -> bool:
            return (await pg.job_get_many([r.id]))[r.id].state is JobState.COMPLETED

        await _until(done, within=10)
        assert time.monotonic() - started < 2.0  # woken, not polled
    finally:
        await worker.stop()
