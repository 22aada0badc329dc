"""procrastinate: an async task, `defer_async` one by one, `batch_defer_async` in bulk; its
worker is its own CLI (`procrastinate --app=bench.peers.procrastinate_peer.app worker`)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import procrastinate

from bench.peers.cli import Input, record_start

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_URL"]))


@app.task(name="noop", queue="default")
async def noop(**inp: Any) -> None:
    record_start(inp)


class _Client:
    async def setup(self) -> None:
        await app.schema_manager.apply_schema_async()

    async def enqueue(self, inp: Input) -> None:
        await noop.defer_async(**inp)

    async def enqueue_many(self, inps: list[Input]) -> None:
        await noop.batch_defer_async(*inps)


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    async with app.open_async():
        yield _Client()
