"""RQ: `Queue.enqueue` one by one, `enqueue_many` in bulk; its worker is its own CLI
(`rq worker`, the default Worker class, which forks a work horse per job). RQ's client is
synchronous: its calls block the loop, which has nothing else to do here."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis import Redis
from rq import Queue

from bench.peers.cli import Input, record_start

# By dotted path: the worker imports the job function by the name the client stored.
_NOOP = "bench.peers.rq_peer.noop"


def noop(inp: Input) -> None:
    record_start(inp)


class _Client:
    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    async def setup(self) -> None:
        """RQ keeps no schema."""

    async def enqueue(self, inp: Input) -> None:
        self.queue.enqueue(_NOOP, inp)

    async def enqueue_many(self, inps: list[Input]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(_NOOP, args=(inp,)) for inp in inps])


@asynccontextmanager
async def open_client() -> AsyncIterator[_Client]:
    connection = Redis.from_url(os.environ["BENCH_URL"])
    try:
        yield _Client(Queue("default", connection=connection))
    finally:
        connection.close()
