"""oban-py (`oban` on PyPI, the Python port of Oban): a `@worker` class, `Oban.enqueue` with
one job, `enqueue_many` in bulk; its worker is its own CLI (`oban start --dsn … --queues
default:N`), which finds the class by the name stored on each job. It needs Python 3.12 or
newer, so its virtualenv is built with the interpreter bench/run.sh names for it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from oban import Oban, worker
from oban.schema import install

from bench.peers.cli import Input, record_start


@worker(queue="default")
class Noop:
    async def process(self, job: Any) -> None:
        record_start(job.args)


class _Client:
    def __init__(self, oban: Oban, pool: Any) -> None:
        self.oban = oban
        self.pool = pool

    async def setup(self) -> None:
        await install(self.pool)

    async def enqueue(self, inp: Input) -> None:
        await self.oban.enqueue(Noop.new(inp))

    async def enqueue_many(self, inps: list[Input]) -> None:
        await self.oban.enqueue_many([Noop.new(inp) for inp in inps])


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    pool = await Oban.create_pool(os.environ["BENCH_URL"], min_size=1, max_size=1)
    try:
        # No queues: a client-mode instance, which only inserts.
        yield _Client(Oban(pool=pool), pool)
    finally:
        await pool.close()
