"""The relay through outages of REAL throwaway servers, each stopped and started under it.

First the outbox's own Postgres goes away while the relay runs, then the jobs' Redis does while
rows wait to be published. Each time every committed stage ends up a job exactly once, an
outage never counts as a failed publish on a row, and the relay is still running afterwards.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import psycopg
import pytest

from jobs_core.driver import JobDriver
from jobs_core.outbox import Relay
from jobs_core.records import JobListParams
from jobs_memory import MemoryDriver
from jobs_pg import PgOutbox
from jobs_pg.urls import libpq_url
from jobs_redis import RedisDriver
from tests.core.support import declare, until
from tests.outage import throwaway_pg, throwaway_redis
from tests.pg.conftest import PG_URL, drop_schema, fresh_schema, migrate
from tests.pg.server import PgServer
from tests.redis.conftest import RedisServer, fresh_prefix, purge


async def _noop(input: object, ctx: object) -> None:
    return None


SEND = declare(_noop, name="send")


def stage(url: str, schema: str, first: int, n: int) -> list[str]:
    """Stage `n` jobs in one committed transaction of the outbox at `url`; their ids."""
    outbox = PgOutbox(schema=schema)
    with psycopg.connect(libpq_url(url)) as conn:  # the `with` commits
        return [outbox.stage(conn, SEND, {"n": i}).id for i in range(first, first + n)]


async def listed(driver: JobDriver) -> list[str]:
    """Every job id the driver holds, one entry per row (a row published twice shows twice)."""
    page = await driver.job_list(JobListParams(limit=500))
    return [j.id for j in page.jobs]


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PgServer]:
    with throwaway_pg() as s:
        yield s


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with throwaway_redis(tmp_path / "redis") as s:
        yield s


async def test_the_outbox_going_down_under_a_running_relay_loses_nothing(
    pg_server: PgServer,
) -> None:
    schema = fresh_schema()
    pg_server.migrate(schema)
    driver = MemoryDriver()
    async with PgOutbox(f"{pg_server.url}?connect_timeout=1", schema=schema) as outbox:
        relay = Relay(outbox, driver, poll=0.2)
        running = asyncio.ensure_future(relay.run())
        try:
            first = stage(pg_server.url, schema, 0, 20)
            await until(lambda: relay.published == 20, within=30)
            pg_server.stop("immediate")  # a crash: the relay's sessions and its LISTEN die
            await asyncio.sleep(1.0)  # claims fail meanwhile; the loop backs off, alive
            assert not running.done()
            pg_server.start()
            second = stage(pg_server.url, schema, 20, 20)
            await until(lambda: relay.published == 40, within=30)
            assert sorted(await listed(driver)) == sorted(first + second)
            assert await outbox.outbox_pending(10) == []
            assert not running.done()
        finally:
            assert await relay.stop(timeout=10)
            await asyncio.wait_for(running, 10)


@asynccontextmanager
async def relay_over_redis(
    redis_server: RedisServer,
) -> AsyncIterator[tuple[str, PgOutbox, RedisDriver, Relay, asyncio.Future[None]]]:
    """A running relay from a fresh Postgres outbox schema to a fresh prefix on `redis_server`:
    (schema, outbox, driver, relay, its run); stopped, purged and dropped after."""
    schema = fresh_schema()
    migrate(schema)
    driver = RedisDriver(redis_server.url, prefix=fresh_prefix(), connect_timeout=0.5)
    try:
        async with PgOutbox(PG_URL, schema=schema) as outbox, driver:
            relay = Relay(outbox, driver, poll=0.2)
            running = asyncio.ensure_future(relay.run())
            try:
                yield schema, outbox, driver, relay, running
            finally:
                assert await relay.stop(timeout=10)
                await asyncio.wait_for(running, 10)
            await purge(driver)
    finally:
        drop_schema(schema)


async def test_the_jobs_store_going_down_hands_rows_back_in_order_then_publishes_each_once(
    redis_server: RedisServer,
) -> None:
    async with relay_over_redis(redis_server) as (schema, outbox, driver, relay, running):
        redis_server.stop()
        ids = stage(PG_URL, schema, 0, 30)
        # The relay tries, finds Redis gone and hands every row back, in stage order.
        await asyncio.sleep(1.5)
        waiting = await outbox.outbox_pending(100)
        assert [r.job.id for r in waiting] == ids
        # An outage is not a failed publish: no row carries an error or an attempt.
        assert {(r.attempts, r.last_error) for r in waiting} == {(0, None)}
        assert relay.published == 0 and not running.done()
        redis_server.start()
        await until(lambda: relay.published == 30, within=30)
        assert sorted(await listed(driver)) == sorted(ids)
        assert await outbox.outbox_pending(10) == []


async def test_stages_committed_while_the_jobs_store_is_down_do_not_cut_the_relays_backoff(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Each committed stage wakes the relay; through an outage of the jobs' store a wake that
    # started a pass at once made the relay claim, fail and hand back the outbox's rows once
    # per commit of the app (every 45 ms in the chaos run's relay family), not on its backoff.
    async with relay_over_redis(redis_server) as (schema, _, driver, relay, _running):
        await until(lambda: relay.wake is not None and relay.wake.is_live(), within=10)
        redis_server.stop()
        caplog.set_level("WARNING", logger="jobs")
        ids: list[str] = []
        for i in range(30):  # 30 commits over 1.5 s, each a wake
            ids += stage(PG_URL, schema, i, 1)
            await asyncio.sleep(0.05)
        passes = [r for r in caplog.records if "jobs.relay.batch_failed" in r.message]
        # The outage's backoff (0.1, 0.2, 0.4, 0.8 s) allows five passes in 1.5 s.
        assert len(passes) <= 6, len(passes)
        redis_server.start()
        await until(lambda: relay.published == 30, within=30)
        assert sorted(await listed(driver)) == sorted(ids)
