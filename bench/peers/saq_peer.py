"""SAQ: `Queue.enqueue` one by one (SAQ has no bulk enqueue: `map` waits for results); its
worker is its own CLI (`saq bench.peers.saq_peer.settings`) with SAQ's defaults, but the
concurrency where BENCH_CONCURRENCY sets one."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from saq import Queue

from bench.peers.cli import Input, record_start

queue = Queue.from_url(os.environ["BENCH_URL"])


async def noop(ctx: dict[str, Any], *, inp: Input) -> None:
    record_start(inp)


settings: dict[str, Any] = {"queue": queue, "functions": [noop]}
# Unset, SAQ's own default applies: the harness's default variant passes nothing.
if "BENCH_CONCURRENCY" in os.environ:
    settings["concurrency"] = int(os.environ["BENCH_CONCURRENCY"])


class _Client:
    enqueue_many = None

    async def setup(self) -> None:
        """SAQ keeps no schema."""

    async def enqueue(self, inp: Input) -> None:
        await queue.enqueue("noop", inp=inp)


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    await queue.connect()
    try:
        yield _Client()
    finally:
        await queue.disconnect()
