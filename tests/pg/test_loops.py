"""One driver, several event loops (issue 7, item 10): a FastAPI-like app enqueues from `def`
endpoints (`enqueue_sync`, the portal's loop) and `async def` ones (the main loop), and a script
calls `asyncio.run()` several times; every call answers right, and each row is written once."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from psycopg import sql

from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_pg import PgDriver
from tests.pg.conftest import PG_URL, admin


async def body(input: Any, ctx: Any) -> None:
    return None


def declare() -> JobHandle:
    handle: JobHandle = job(
        body, name="hit", tenant="none", idempotency_key=lambda i: f"k{i}", registry=JobRegistry()
    )
    return handle


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


def keys_stored(schema: str) -> list[str]:
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT idempotency_key FROM {}.jobs").format(sql.Identifier(schema))
        ).fetchall()
    return sorted(k for (k,) in rows)


def test_sync_and_async_callers_alternate_on_one_driver(pg_schema: str) -> None:
    driver = PgDriver(app_url(pg_schema), schema=pg_schema, pool_size=2)
    jobs = Jobs(driver, enqueue_retry_s=0)  # the driver alone must answer every call
    h = declare()

    async def call(n: int) -> tuple[int, str, bool]:
        if n % 2:
            # A `def` endpoint: the server runs it on a thread, it enqueues through the portal.
            r = await asyncio.to_thread(jobs.enqueue_sync, h, n % 15)
        else:
            r = await jobs.enqueue(h, n % 15)
        return n % 15, r.id, r.deduped

    async def app() -> list[tuple[int, str, bool]]:
        # Requests overlap, more of them than the pool has connections.
        out = list(await asyncio.gather(*(call(n) for n in range(30))))
        many = await jobs.enqueue_many(h, [40, 41])
        many_sync = await asyncio.to_thread(jobs.enqueue_many_sync, h, [42, 41])
        out += [
            (k, r.id, r.deduped) for k, r in zip([40, 41, 42, 41], [*many, *many_sync], strict=True)
        ]
        await driver.close()
        return out

    answers = asyncio.run(app())
    jobs.close_sync()
    by_key: dict[int, set[str]] = {}
    for k, job_id, _ in answers:
        by_key.setdefault(k, set()).add(job_id)
    assert all(len(ids) == 1 for ids in by_key.values())  # every answer names the key's one row
    assert sum(not deduped for _, _, deduped in answers) == len(by_key) == 18
    assert keys_stored(pg_schema) == sorted(f"k{k}" for k in by_key)
    assert sessions(pg_schema) == 0


def test_consecutive_asyncio_runs_share_one_driver(pg_schema: str) -> None:
    driver = PgDriver(app_url(pg_schema), schema=pg_schema, pool_size=4)
    jobs = Jobs(driver, enqueue_retry_s=0)  # the driver alone must answer every call
    h = declare()
    answers = [asyncio.run(jobs.enqueue(h, n)) for n in range(4)]
    answers += asyncio.run(jobs.enqueue_many(h, [4, 0]))
    # A loop on another thread, while this one's is gone, then a sync call through the portal.
    other: list[Any] = []
    t = threading.Thread(target=lambda: other.append(asyncio.run(jobs.enqueue(h, 5))))
    t.start()
    t.join()
    answers += [*other, jobs.enqueue_sync(h, 6)]
    asyncio.run(driver.close())
    jobs.close_sync()
    assert [r.deduped for r in answers] == [False] * 5 + [True, False, False]
    assert answers[5].id == answers[0].id
    assert keys_stored(pg_schema) == [f"k{n}" for n in range(7)]
    assert sessions(pg_schema) == 0


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
