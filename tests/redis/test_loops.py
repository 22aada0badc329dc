"""One driver, several event loops (issue 7, item 10), on Redis: `enqueue_sync` (the portal's
loop) beside `async def` callers on the main loop, and several `asyncio.run()` in a row. Every
call answers right, and each job is written once (before, a sync call wrote its job and then
failed with "Future attached to a different loop")."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_redis import RedisDriver
from tests.redis.conftest import REDIS_URL, fresh_prefix, purge


async def body(input: Any, ctx: Any) -> None:
    return None


def declare() -> JobHandle:
    handle: JobHandle = job(
        body, name="hit", tenant="none", idempotency_key=lambda i: f"k{i}", registry=JobRegistry()
    )
    return handle


async def keys_stored(driver: RedisDriver) -> list[str]:
    """Every idempotency key stored, one entry per row (so a second row shows twice)."""
    rows = await driver.client.hvals(driver.keys.state)
    return sorted(str(r).split("\x00")[12] for r in rows)


async def clients_named(name: str) -> int:
    """Connections the server holds for clients of this test (closing must leave none)."""
    from redis.asyncio import Redis

    admin = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        for _ in range(100):
            listed = await admin.client_list()
            held = sum(1 for c in listed if c.get("name") == name)
            if held == 0:
                return 0
            await asyncio.sleep(0.05)  # the server notices a closed socket a moment later
        return held
    finally:
        await admin.aclose()


def named(prefix: str) -> str:
    return f"{REDIS_URL}?client_name={prefix}"


def test_sync_and_async_callers_alternate_on_one_driver() -> None:
    prefix = fresh_prefix()
    driver = RedisDriver(named(prefix), prefix=prefix)
    jobs = Jobs(driver, enqueue_retry_s=0)  # the driver alone must answer every call
    h = declare()

    async def call(n: int) -> tuple[int, str, bool]:
        if n % 2:
            # A `def` endpoint: the server runs it on a thread, it enqueues through the portal.
            r = await asyncio.to_thread(jobs.enqueue_sync, h, n % 15)
        else:
            r = await jobs.enqueue(h, n % 15)
        return n % 15, r.id, r.deduped

    async def app() -> tuple[list[tuple[int, str, bool]], list[str]]:
        out = list(await asyncio.gather(*(call(n) for n in range(30))))
        many = await jobs.enqueue_many(h, [40, 41])
        many_sync = await asyncio.to_thread(jobs.enqueue_many_sync, h, [42, 41])
        out += [
            (k, r.id, r.deduped) for k, r in zip([40, 41, 42, 41], [*many, *many_sync], strict=True)
        ]
        stored = await keys_stored(driver)
        await purge(driver)
        await driver.close()
        return out, stored

    answers, stored = asyncio.run(app())
    jobs.close_sync()
    by_key: dict[int, set[str]] = {}
    for k, job_id, _ in answers:
        by_key.setdefault(k, set()).add(job_id)
    assert all(len(ids) == 1 for ids in by_key.values())  # every answer names the key's one row
    assert sum(not deduped for _, _, deduped in answers) == len(by_key) == 18
    assert stored == sorted(f"k{k}" for k in by_key)
    assert asyncio.run(clients_named(prefix)) == 0


def test_consecutive_asyncio_runs_share_one_driver() -> None:
    prefix = fresh_prefix()
    driver = RedisDriver(named(prefix), prefix=prefix)
    jobs = Jobs(driver, enqueue_retry_s=0)
    h = declare()
    answers = [asyncio.run(jobs.enqueue(h, n)) for n in range(4)]
    answers += asyncio.run(jobs.enqueue_many(h, [4, 0]))
    other: list[Any] = []
    t = threading.Thread(target=lambda: other.append(asyncio.run(jobs.enqueue(h, 5))))
    t.start()
    t.join()
    answers += [*other, jobs.enqueue_sync(h, 6)]

    async def finish() -> list[str]:
        stored = await keys_stored(driver)
        await purge(driver)
        await driver.close()
        return stored

    stored = asyncio.run(finish())
    jobs.close_sync()
    assert [r.deduped for r in answers] == [False] * 5 + [True, False, False]
    assert answers[5].id == answers[0].id
    assert stored == [f"k{n}" for n in range(7)]
    assert asyncio.run(clients_named(prefix)) == 0
