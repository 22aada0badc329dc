"""Outages of a REAL Redis: a throwaway server of this test's own (AOF on), stopped and started.

The same scenarios as on Postgres (`tests/outage.py`): settles ride the outage out, a worker
waits for a server that is down at start, the claim loop backs off, a drain begun during the
outage hands every claim back once the server returns, in time.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jobs_core.driver import JobDriver
from jobs_redis import RedisDriver
from tests import outage
from tests.redis.conftest import RedisServer, fresh_prefix


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with outage.throwaway_redis(tmp_path / "redis") as s:
        yield s


def store(server: RedisServer) -> outage.Store:
    prefix = fresh_prefix()

    @contextlib.asynccontextmanager
    async def driver() -> AsyncIterator[JobDriver]:
        d = RedisDriver(server.url, prefix=prefix, connect_timeout=0.5)
        try:
            yield d
        finally:
            await d.close()

    return outage.Store(stop=server.stop, start=server.start, driver=driver)


async def test_a_body_finishing_during_an_outage_is_completed_once(server: RedisServer) -> None:
    await outage.body_finishing_during_an_outage_completes_once(store(server))


async def test_a_worker_started_while_redis_is_down_waits_for_it(server: RedisServer) -> None:
    await outage.worker_started_while_the_store_is_down_waits_for_it(store(server))


async def test_a_drain_during_an_outage_hands_every_claim_back(server: RedisServer) -> None:
    await outage.drain_with_the_store_back_hands_every_claim_back(store(server))


async def test_limited_runs_ride_out_an_outage(server: RedisServer) -> None:
    await outage.limited_runs_ride_out_an_outage(store(server))


async def test_finished_final_attempts_outlive_an_outage_shorter_than_the_lease(
    server: RedisServer,
) -> None:
    await outage.finished_final_attempts_outlive_a_short_outage(store(server))
