"""Ours: `Jobs.enqueue` one by one, `Jobs.enqueue_many` in bulk, on `PgDriver` or `RedisDriver`
as BENCH_URL's scheme says; the worker is one process running `jobs_core.Worker` with the
defaults `ujobs worker` uses (`python -m bench.peers.cli ours worker`), drained by SIGTERM."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from bench.peers.cli import Input, record_start
from jobs_core.driver import MAX_ENQUEUE_BATCH, JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import job
from jobs_core.worker import Worker

# The schema (Postgres) or key prefix (Redis); the harness gives each run a store of its own.
NAMESPACE = "bench"


@job(name="noop", queue="default", idempotency_key=lambda inp: inp["k"], tenant="none")
async def noop(inp: Input, ctx: Any) -> None:
    record_start(inp)


def _url() -> str:
    return os.environ["BENCH_URL"]


def _is_redis() -> bool:
    return _url().startswith("redis")


def _driver() -> JobDriver:
    if _is_redis():
        from jobs_redis import RedisDriver

        return RedisDriver(_url(), prefix=NAMESPACE)
    from jobs_pg import PgDriver

    return PgDriver(_url(), schema=NAMESPACE)


class _Client:
    def __init__(self, driver: JobDriver) -> None:
        self.jobs = Jobs(driver)

    async def setup(self) -> None:
        if not _is_redis():
            from jobs_pg import migrate

            migrate.upgrade(_url(), NAMESPACE)

    async def enqueue(self, inp: Input) -> None:
        await self.jobs.enqueue(noop, inp)

    async def enqueue_many(self, inps: list[Input]) -> None:
        for start in range(0, len(inps), MAX_ENQUEUE_BATCH):
            await self.jobs.enqueue_many(noop, inps[start : start + MAX_ENQUEUE_BATCH])


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    async with _driver() as driver:
        yield _Client(driver)


def run_worker() -> None:
    asyncio.run(_work())


async def _work() -> None:
    async with _driver() as driver:
        worker = Worker(driver, [noop], queues=["default"])
        await worker.start()
        worker.install_signal_handlers()
        await worker.run()
