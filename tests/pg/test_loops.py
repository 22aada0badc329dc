"""One driver, several event loops (issue 7, item 10): a FastAPI-like app enqueues from `def`
endpoints (`enqueue_sync`, the portal's loop) and `async def` ones (the main loop), and a script
calls `asyncio.run()` several times; every call answers right, and each row is written once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from jobs_core.facade import Jobs
from jobs_pg import PgDriver
from tests.loops_cases import (
    Backend,
    consecutive_asyncio_runs_share_one_driver,
    declare,
    sync_and_async_callers_alternate,
)
from tests.pg.conftest import PG_URL, admin
from tests.pg.support import keys_stored


def app_url(schema: str) -> str:
    """The test server's URL, its sessions tagged so the test can count them."""
    return f"{PG_URL}?application_name={schema}"


def sessions(schema: str) -> int:
    """Server sessions still open for the driver of `schema` (closing must leave none).

    A backend leaves `pg_stat_activity` a moment after its client hung up: wait a little.
    """
    deadline = time.monotonic() + 5
    while True:
        with admin() as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (schema,)
            ).fetchone()
        assert row is not None
        if row[0] == 0 or time.monotonic() > deadline:
            return int(row[0])
        time.sleep(0.05)


def backend(schema: str, pool_size: int) -> Backend:
    driver = PgDriver(app_url(schema), schema=schema, pool_size=pool_size)

    async def finish() -> list[str]:
        # The schema is the test's own and dropped after it: nothing to clean up but the pool.
        await driver.close()
        return await asyncio.to_thread(keys_stored, schema)

    return Backend(driver, finish, lambda: sessions(schema))


def test_sync_and_async_callers_alternate_on_one_driver(pg_schema: str) -> None:
    sync_and_async_callers_alternate(backend(pg_schema, pool_size=2))


def test_consecutive_asyncio_runs_share_one_driver(pg_schema: str) -> None:
    consecutive_asyncio_runs_share_one_driver(backend(pg_schema, pool_size=4))


def test_a_wake_session_lives_on_its_loop_and_close_from_another_ends_it(pg_schema: str) -> None:
    # A worker's loop on a thread holds the LISTEN session; an app on the main thread enqueues
    # through its own pool, wakes the worker, then closes the driver from its own loop.
    driver = PgDriver(app_url(pg_schema), schema=pg_schema, pool_size=2)
    jobs = Jobs(driver, enqueue_retry_s=0)
    h = declare()
    worker_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=worker_loop.run_forever, daemon=True)
    thread.start()
    woken = threading.Event()

    async def subscribe() -> Any:
        return await driver.wake_subscribe(["default"], lambda q: woken.set())

    try:
        sub = asyncio.run_coroutine_threadsafe(subscribe(), worker_loop).result(10)
        deadline = time.monotonic() + 20
        while not sub.is_live():
            assert time.monotonic() < deadline, "the wake never became live"
            time.sleep(0.02)

        async def app() -> None:
            await jobs.enqueue(h, 1)
            await asyncio.to_thread(woken.wait, 10)
            await driver.close()

        asyncio.run(app())
        assert woken.is_set()
        assert not sub.is_live()  # closed on its own loop by the main loop's close()
        assert sessions(pg_schema) == 0
    finally:
        worker_loop.call_soon_threadsafe(worker_loop.stop)
        thread.join(5)
        worker_loop.close()
