"""An enqueue whose answer was lost after the commit is retried under the same ids: one row,
one run, and the caller is answered with the original id (issue 7, item 7)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg import sql

from jobs_core.context import JobContext
from jobs_core.errors import DriverUnavailableError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_pg import PgDriver
from tests.core.support import until
from tests.pg.conftest import PG_URL, admin
from tests.pg.proxy import Proxy

#: Postgres's ReadyForQuery: the end of an answer, sent after the implicit transaction committed.
READY = b"Z\x00\x00\x00\x05"


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    p = Proxy(PG_URL)
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


def rows_by_key(schema: str) -> dict[str, int]:
    with admin() as conn:
        got = conn.execute(
            sql.SQL("SELECT idempotency_key, count(*) FROM {}.jobs GROUP BY 1").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    return {k: int(n) for k, n in got}


async def run_all(driver: PgDriver, handle: JobHandle, ids: list[str]) -> None:
    worker = Worker(driver, [handle], concurrency=4, poll_floor=0.01)
    await worker.start()

    async def done() -> bool:
        rows = await driver.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    try:
        await until(done, within=20)
    finally:
        await worker.stop()


@pytest.mark.parametrize("mode", ["one", "many", "sync"])
async def test_an_enqueue_whose_answer_is_lost_after_commit_inserts_once(
    pg_schema: str, proxy: Proxy, mode: str
) -> None:
    # No wake: every single enqueue runs the one statement the warm-up prepared (with a wake,
    # a second enqueue inside the same slot runs another, whose first reply is its PREPARE's).
    # One connection: no pool growth in the background puts its traffic beside the write's.
    driver = PgDriver(
        proxy.url(PG_URL), schema=pg_schema, pool_size=1, connect_timeout_s=2.0, wake=False
    )
    ran: list[int] = []
    handle = declare(ran)
    jobs = Jobs(driver)
    async with driver:
        # The connection and its prepared statement exist, so the next reply is the write's.
        if mode == "many":
            warm = (await jobs.enqueue_many(handle, [{"n": 0}]))[0]
        elif mode == "sync":  # a `def` caller: the facade's portal loop, its own connection
            warm = await asyncio.to_thread(jobs.enqueue_sync, handle, {"n": 0})
        else:
            warm = await jobs.enqueue(handle, {"n": 0})
        proxy.drop_next_reply(until=READY)
        if mode == "many":
            got = await jobs.enqueue_many(handle, [{"n": 1}, {"n": 2}, {"n": 3}])
        elif mode == "sync":
            got = [await asyncio.to_thread(jobs.enqueue_sync, handle, {"n": 1})]
        else:
            got = [await jobs.enqueue(handle, {"n": 1})]
        assert proxy.dropped == 1  # the answer really was lost, after the server sent it
        keys = [f"k{n}" for n in range(1, len(got) + 1)]
        assert rows_by_key(pg_schema) == {"k0": 1, **dict.fromkeys(keys, 1)}
        rows = await driver.job_get_many([r.id for r in got])
        # The answer names the records the first try wrote (the retry found them by id).
        assert [rows[r.id].idempotency_key for r in got] == keys
        assert all(r.deduped for r in got)
        await run_all(driver, handle, [warm.id, *(r.id for r in got)])
        await asyncio.to_thread(jobs.close_sync)  # the portal's loop, if a sync call made it
    assert sorted(ran) == list(range(len(got) + 1))
    assert rows_by_key(pg_schema) == {"k0": 1, **dict.fromkeys(keys, 1)}


async def test_an_enqueue_gives_up_after_its_retry_window(pg_schema: str, proxy: Proxy) -> None:
    driver = PgDriver(proxy.url(PG_URL), schema=pg_schema, pool_size=2, connect_timeout_s=1.0)
    handle = declare([])
    async with driver:
        await Jobs(driver).enqueue(handle, {"n": 0})
        await proxy.stop()
        started = time.monotonic()
        with pytest.raises(DriverUnavailableError):
            await Jobs(driver, enqueue_retry_s=0.3).enqueue(handle, {"n": 1})
        # It retried for its window, then gave up (the bound is generous: a busy machine).
        assert 0.3 <= time.monotonic() - started < 10
    assert rows_by_key(pg_schema) == {"k0": 1}
