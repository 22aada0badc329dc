"""Ours: `Jobs.enqueue` one by one, `Jobs.enqueue_many` in bulk, on the driver BENCH_URL names
(its `?schema=` or `?prefix=` included, as `ujobs --driver` reads it); the worker is
`ujobs worker bench.peers.ours_peer --driver <the same URL>`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from bench.peers.cli import Input, record_start
from jobs_core.driver import MAX_ENQUEUE_BATCH, JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import job
from jobs_core.urls import driver_from_url


@job(name="noop", queue="default", idempotency_key=lambda inp: inp["k"], tenant="none")
async def noop(inp: Input, ctx: Any) -> None:
    record_start(inp)


class _Client:
    def __init__(self, driver: JobDriver) -> None:
        self.jobs = Jobs(driver)

    async def setup(self) -> None:
        url = os.environ["BENCH_URL"]
        if url.startswith("postgres"):
            from jobs_pg import migrate
            from jobs_pg.urls import split_options

            plain, options = split_options(url)
            migrate.upgrade(plain, options["schema"])

    async def enqueue(self, inp: Input) -> None:
        await self.jobs.enqueue(noop, inp)

    async def enqueue_many(self, inps: list[Input]) -> None:
        for start in range(0, len(inps), MAX_ENQUEUE_BATCH):
            await self.jobs.enqueue_many(noop, inps[start : start + MAX_ENQUEUE_BATCH])


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    async with driver_from_url(os.environ["BENCH_URL"]) as driver:
        yield _Client(driver)
