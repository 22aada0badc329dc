"""arq: `enqueue_job` one by one (arq has no bulk enqueue); its worker is its own CLI
(`arq bench.peers.arq_peer.WorkerSettings`) with arq's defaults."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from bench.peers.cli import Input, record_start

_SETTINGS = RedisSettings.from_dsn(os.environ["BENCH_URL"])


async def noop(ctx: dict[str, Any], inp: Input) -> None:
    record_start(inp)


class WorkerSettings:
    functions = (noop,)
    redis_settings = _SETTINGS


class _Client:
    enqueue_many = None

    def __init__(self, pool: ArqRedis) -> None:
        self.pool = pool

    async def setup(self) -> None:
        """arq keeps no schema."""

    async def enqueue(self, inp: Input) -> None:
        await self.pool.enqueue_job("noop", inp)


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    pool = await create_pool(_SETTINGS)
    try:
        yield _Client(pool)
    finally:
        await pool.aclose()
