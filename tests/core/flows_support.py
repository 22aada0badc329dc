"""What the flows tests share: the store kinds that declare `flows`, a fresh store of each, and a
worker run until a condition holds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import pytest

from jobs_core.driver import JobDriver
from jobs_core.job import JobHandle
from jobs_core.records import JobFilter, JobListParams, JobRecord
from jobs_core.retry import Retry
from jobs_core.states import FINISHED_STATES
from jobs_core.worker import Worker
from tests.core.support import fresh_store, until

FAST = Retry(attempts=3, base_ms=1, cap_ms=1)
ONCE = Retry(attempts=1)


def flow_kinds() -> list[str]:
    """Each store kind whose driver declares the flows family (read from an unopened driver,
    so a kind joins these tests the moment its driver declares it)."""
    from jobs_memory import MemoryDriver
    from jobs_pg import PgDriver
    from jobs_redis import RedisDriver
    from tests.pg.conftest import PG_URL
    from tests.redis.conftest import CONNECT_TIMEOUT_S, REDIS_URL

    drivers: dict[str, JobDriver] = {
        "memory": MemoryDriver(),
        "pg": PgDriver(PG_URL, schema="flows_probe"),
        "redis": RedisDriver(REDIS_URL, prefix="flows_probe", connect_timeout=CONNECT_TIMEOUT_S),
    }
    return [kind for kind, d in drivers.items() if d.capabilities().flows]


@pytest.fixture(params=flow_kinds())
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    """A fresh, empty store of each kind that declares flows, dropped after."""
    async with fresh_store(request.param) as store:
        yield store


async def working(
    driver: JobDriver,
    handles: Sequence[JobHandle],
    check: Callable[[], Awaitable[bool]],
    *,
    within: float = 20.0,
    **options: Any,
) -> Worker:
    """Work `handles` until `check()` answers True; the worker is stopped before returning."""
    options.setdefault("poll_floor", 0.001)
    options.setdefault("poll_ceiling", 0.02)
    options.setdefault("lease", 5.0)
    worker = Worker(driver, handles, **options)
    await worker.start()
    try:
        await until(check, within=within)
    finally:
        await worker.stop()
    return worker


async def row(driver: JobDriver, job_id: str) -> JobRecord:
    return (await driver.job_get_many([job_id]))[job_id]


def ended(driver: JobDriver, *job_ids: str) -> Callable[[], Awaitable[bool]]:
    """True once every row of `job_ids` finished (any final state)."""

    async def check() -> bool:
        rows = await driver.job_get_many(list(job_ids))
        return all(i in rows and rows[i].state in FINISHED_STATES for i in job_ids)

    return check


async def listed(driver: JobDriver, f: JobFilter) -> list[JobRecord]:
    """Every row `f` matches (the operator's listing, page by page), read whole."""
    ids: list[str] = []
    cursor = None
    while True:
        page = await driver.job_list(JobListParams(filter=f, limit=500, cursor=cursor))
        ids.extend(s.id for s in page.jobs)
        cursor = page.next_cursor
        if cursor is None:
            break
    rows = await driver.job_get_many(ids)
    return [rows[i] for i in ids]
