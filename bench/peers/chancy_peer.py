"""chancy: an async `@job` on a queue run by its AsyncExecutor (its default executor is a
process pool, for `def` bodies); `push` one by one, `push_many` in bulk. A queue's settings
live in the database, so the worker (`python -m bench.peers.cli chancy worker`) first declares
the queue with the variant's concurrency (BENCH_CONCURRENCY; chancy's own default, None, sizes
it by the core count) and eager polling, then runs what `chancy worker start` runs."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from chancy import Chancy, Queue, Worker, job

from bench.peers.cli import Input, record_start

QUEUE = "default"


def _app() -> Chancy:
    return Chancy(os.environ["BENCH_URL"])


@job(queue=QUEUE)
async def noop(**inp: object) -> None:
    record_start(dict(inp))


def _queue() -> Queue:
    size = os.environ.get("BENCH_CONCURRENCY")
    return Queue(
        QUEUE,
        concurrency=None if size is None else int(size),
        executor="chancy.executors.asyncex.AsyncExecutor",
        # Otherwise a worker takes one batch a polling interval (5 s): a drain of 10,000 jobs
        # at concurrency 10 would take over an hour. Chancy documents this for queues whose
        # jobs are continuously available.
        eager_polling=True,
    )


async def _work() -> None:
    async with _app() as chancy:
        await chancy.declare(_queue(), upsert=True)
        async with Worker(chancy) as worker:
            await worker.wait_for_shutdown()


def run_worker() -> None:
    """`chancy worker start`'s body, after the queue's declaration."""
    logging.getLogger().setLevel(logging.INFO)
    asyncio.run(_work())


class _Client:
    def __init__(self, chancy: Chancy) -> None:
        self.chancy = chancy

    async def setup(self) -> None:
        await self.chancy.migrate()
        await self.chancy.declare(_queue(), upsert=True)

    async def enqueue(self, inp: Input) -> None:
        await self.chancy.push(noop.job.with_kwargs(**inp))

    async def enqueue_many(self, inps: list[Input]) -> None:
        # An async generator of references, one batch at a time: drained, nothing kept.
        async for _ in self.chancy.push_many([noop.job.with_kwargs(**inp) for inp in inps]):
            pass


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    async with _app() as chancy:
        yield _Client(chancy)
