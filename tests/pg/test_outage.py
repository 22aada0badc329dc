"""Outages of a REAL Postgres: a throwaway server of this test's own, stopped and started.

Settles ride the outage out, a worker waits for a server that is down at start, the claim loop
backs off, and a drain ends on time with the server up or down — in process and for a real
`ujobs worker` getting SIGTERM while Postgres is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.states import JobState
from jobs_pg import PgDriver
from tests import outage
from tests.pg.conftest import fresh_schema
from tests.pg.server import PgServer
from tests.test_drain_subprocess import handles, start_worker


@pytest.fixture(scope="module")
def owned_server() -> Iterator[PgServer]:
    """One throwaway server for the module (an initdb costs seconds); each test its own schema."""
    with outage.throwaway_pg() as s:
        yield s


@pytest.fixture
def server(owned_server: PgServer) -> PgServer:
    """The module's server, running: a test that failed mid-outage leaves it stopped."""
    if not owned_server.running():
        owned_server.start()
    return owned_server


def store(server: PgServer, mode: str = "fast") -> outage.Store:
    schema = fresh_schema()
    server.migrate(schema)

    @contextlib.asynccontextmanager
    async def driver() -> AsyncIterator[JobDriver]:
        # A call waits at most 0.5 s for a connection: an outage is seen as one, not a slow call.
        d = PgDriver(server.url, schema=schema, pool_size=4, connect_timeout_s=0.5)
        try:
            yield d
        finally:
            await d.close()

    return outage.Store(stop=lambda: server.stop(mode), start=server.start, driver=driver)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_body_finishing_during_an_outage_is_completed_once(
    server: PgServer, mode: str
) -> None:
    await outage.body_finishing_during_an_outage_completes_once(store(server, mode))


async def test_a_worker_started_while_postgres_is_down_waits_for_it(server: PgServer) -> None:
    await outage.worker_started_while_the_store_is_down_waits_for_it(store(server))


async def test_a_drain_during_an_outage_hands_every_claim_back(server: PgServer) -> None:
    await outage.drain_with_the_store_back_hands_every_claim_back(store(server))


async def test_a_drain_with_postgres_down_ends_within_its_budget(server: PgServer) -> None:
    await outage.drain_while_the_store_stays_down_ends_in_time(store(server))


async def test_ujobs_worker_gets_sigterm_while_postgres_is_stopped_and_exits_in_time(
    server: PgServer, tmp_path: Path
) -> None:
    schema = fresh_schema()
    server.migrate(schema)
    url = f"{server.url}?schema={schema}"
    driver = PgDriver(server.url, schema=schema, pool_size=2)
    try:
        _, endless = handles()
        ids = [r.id for r in await Jobs(driver).enqueue_many(endless, [{"n": i} for i in range(3)])]
        proc = await start_worker(url, tmp_path, concurrency=2, max_in_flight=3, drain_timeout=2)
        try:
            await outage.until(
                lambda: outage.rows_in(driver, ids, JobState.RUNNING), 30, "all claimed"
            )
            await driver.close()
            await asyncio.to_thread(server.stop, "fast")
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(proc.communicate(), 60)
            took = time.monotonic() - started
        finally:
            if proc.returncode is None:
                proc.kill()
        assert proc.returncode == 0, output.decode()
        # --drain-timeout 2, plus the bounded teardown and the interpreter's own exit.
        assert took < 2 + 2.5, (took, output.decode()[-2000:])
    finally:
        await driver.close()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_every_call_after_a_restart_is_served_none_fails_on_a_stale_connection(
    server: PgServer, mode: str
) -> None:
    schema = fresh_schema()
    server.migrate(schema)
    d = PgDriver(server.url, schema=schema, pool_size=3, connect_timeout_s=2.0)
    try:
        # Three calls at once: the hot connection and two pooled ones are open, then idle.
        await asyncio.gather(*(d.job_get_many(["x"]) for _ in range(3)))
        await asyncio.to_thread(server.restart, mode)  # type: ignore[arg-type]
        # Writes (never retried blindly) at once and one after another: each must land.
        _, endless = handles()
        jobs = Jobs(d)
        first = await asyncio.gather(*(jobs.enqueue(endless, {"n": i}) for i in range(5)))
        later = [await jobs.enqueue(endless, {"n": i}) for i in range(5, 8)]
        rows = await d.job_get_many([r.id for r in first + later])
        assert len(rows) == 8
    finally:
        await d.close()


async def test_limited_runs_ride_out_an_outage(server: PgServer) -> None:
    await outage.limited_runs_ride_out_an_outage(store(server))


async def test_finished_final_attempts_outlive_an_outage_shorter_than_the_lease(
    server: PgServer,
) -> None:
    # A crash (`immediate`): every connection of the three workers' pools dies at once.
    await outage.finished_final_attempts_outlive_a_short_outage(store(server, "immediate"))


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_the_wake_session_rides_out_a_restart_and_delivers_again(
    server: PgServer, mode: str
) -> None:
    """The LISTEN session, read from the event loop, ends with the server's restart (its
    socket closed under it, mid-read), re-dials once the server is back, is proven again and
    delivers the next wake; while the server is down it is not trusted."""
    schema = fresh_schema()
    server.migrate(schema)
    d = PgDriver(server.url, schema=schema, pool_size=2, connect_timeout_s=0.5)
    try:
        woken: list[str] = []
        sub = await d.wake_subscribe(["q"], woken.append)
        assert sub is not None
        await outage.until(sub.is_live, 10, "proven")
        await asyncio.to_thread(server.stop, mode)  # type: ignore[arg-type]
        await outage.until(lambda: not sub.is_live(), 10, "distrusted in the outage")
        await asyncio.to_thread(server.start)
        await outage.until(sub.is_live, 20, "proven again")
        await d.send_probe("q:q")
        await outage.until(lambda: woken == ["q"], 10, "woken after the restart")
        await sub.close()
    finally:
        await d.close()
