"""An enqueue whose script ran but whose reply was lost is retried under the same ids: one job,
one run, and the caller is answered with the original id (issue 7, item 7)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_redis import RedisDriver
from tests.core.support import until
from tests.redis.conftest import REDIS_URL, fresh_prefix, purge
from tests.redis.proxy import RedisProxy


@pytest.fixture
async def proxy() -> AsyncIterator[RedisProxy]:
    p = RedisProxy(REDIS_URL)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


def declare(ran: list[int]) -> JobHandle:
    async def body(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle: JobHandle = job(
        body,
        name="mail",
        tenant="none",
        idempotency_key=lambda i: f"k{i['n']}",
        registry=JobRegistry(),
    )
    return handle


async def keys_held(driver: RedisDriver) -> list[str]:
    """Every idempotency key stored, one entry per row (so a second row shows twice)."""
    rows = await driver.client.hvals(driver.keys.state)
    return sorted(str(r).split("\x00")[12] for r in rows)


@pytest.mark.parametrize("mode", ["one", "many", "sync"])
async def test_an_enqueue_whose_reply_is_lost_after_the_script_ran_inserts_once(
    proxy: RedisProxy, mode: str
) -> None:
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix())
    ran: list[int] = []
    handle = declare(ran)
    jobs = Jobs(driver)
    try:
        # The connection exists and the script is loaded, so the next reply is the write's.
        if mode == "many":
            warm = (await jobs.enqueue_many(handle, [{"n": 0}]))[0]
        elif mode == "sync":  # a `def` caller: the facade's portal loop, its own connection
            warm = await asyncio.to_thread(jobs.enqueue_sync, handle, {"n": 0})
        else:
            warm = await jobs.enqueue(handle, {"n": 0})
        proxy.drop_next_reply()
        if mode == "many":
            got = await jobs.enqueue_many(handle, [{"n": 1}, {"n": 2}, {"n": 3}])
        elif mode == "sync":
            got = [await asyncio.to_thread(jobs.enqueue_sync, handle, {"n": 1})]
        else:
            got = [await jobs.enqueue(handle, {"n": 1})]
        assert proxy.dropped == 1
        keys = [f"k{n}" for n in range(1, len(got) + 1)]
        assert await keys_held(driver) == ["k0", *keys]
        rows = await driver.job_get_many([r.id for r in got])
        assert [rows[r.id].idempotency_key for r in got] == keys
        assert all(r.deduped for r in got)  # the retry found the first try's rows by id
        worker = Worker(driver, [handle], concurrency=4, poll_floor=0.01)
        await worker.start()
        ids = [warm.id, *(r.id for r in got)]

        async def done() -> bool:
            rows = await driver.job_get_many(ids)
            return all(r.state is JobState.COMPLETED for r in rows.values())

        try:
            await until(done, within=20)
        finally:
            await worker.stop()
        assert sorted(ran) == list(range(len(got) + 1))
        assert await keys_held(driver) == ["k0", *keys]
    finally:
        await asyncio.to_thread(jobs.close_sync)  # the portal's loop, if a sync call made it
        with contextlib.suppress(Exception):
            await purge(driver)
        await driver.close()
