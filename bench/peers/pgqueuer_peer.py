"""PgQueuer: `Queries.enqueue` with one job, or with lists for bulk; its worker is what
`pgq run bench.peers.pgqueuer_peer:create` runs, the shape its README shows."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer
from pgqueuer.adapters.cli.cli import asyncio_run
from pgqueuer.core.logconfig import LogLevel, setup_fancy_logger
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from bench.peers.cli import Input, record_start


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    """The `pgq run` factory."""
    connection = await asyncpg.connect(os.environ["BENCH_URL"])
    pgq = PgQueuer(AsyncpgDriver(connection))

    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        record_start(json.loads(job.payload or b"{}"))

    try:
        yield pgq
    finally:
        await connection.close()


def run_worker() -> None:
    """What `pgq run` does with its defaults (uvloop, INFO logs), but the batch size where
    BENCH_BATCH_SIZE sets one (`pgq run --batch-size`). The command itself cannot start in
    1.6.0: its --log-level default reaches the logger setup as a string."""
    setup_fancy_logger(LogLevel.INFO)
    size = os.environ.get("BENCH_BATCH_SIZE")
    # Unset, PgQueuer's own default applies: the harness's default variant passes nothing.
    settings = {} if size is None else {"batch_size": int(size)}
    asyncio_run(pgqueuer.run(create, **settings))


class _Client:
    def __init__(self, queries: Queries) -> None:
        self.queries = queries

    async def setup(self) -> None:
        await self.queries.install()

    async def enqueue(self, inp: Input) -> None:
        await self.queries.enqueue("noop", json.dumps(inp).encode())

    async def enqueue_many(self, inps: list[Input]) -> None:
        await self.queries.enqueue(
            ["noop"] * len(inps), [json.dumps(inp).encode() for inp in inps], [0] * len(inps)
        )


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    connection = await asyncpg.connect(os.environ["BENCH_URL"])
    try:
        yield _Client(Queries(AsyncpgDriver(connection)))
    finally:
        await connection.close()
