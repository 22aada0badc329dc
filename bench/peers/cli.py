"""The client side every system shares: the same commands, inputs and clock for each, so what
differs between systems is only the call that enqueues.

Run as `python -m bench.peers.cli SYSTEM COMMAND [ARGS]` with that system's own interpreter
(each peer lives in its own virtualenv; this module and the peer modules import only the
standard library and the system under test). It prints one JSON object as its last line.
BENCH_URL names the store; BENCH_TAG makes job keys unique per invocation, because ours
deduplicates on them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

Input = dict[str, Any]


class Client(Protocol):
    """What a peer module's `open_client()` yields, connected."""

    # None where the system has no bulk enqueue API: the table says so instead of a rate.
    enqueue_many: Callable[[list[Input]], Awaitable[None]] | None

    async def setup(self) -> None: ...

    async def enqueue(self, inp: Input) -> None: ...


def record_start(inp: Input) -> None:
    """The job body of every system: a latency job appends "enqueued started" wall times to
    BENCH_LATENCY_FILE; a drain job does nothing."""
    if "t" in inp:
        started = time.time()
        with open(os.environ["BENCH_LATENCY_FILE"], "a") as side_channel:
            side_channel.write(f"{inp['t']} {started}\n")


def _inputs(n: int) -> list[Input]:
    tag = os.environ["BENCH_TAG"]
    return [{"k": f"{tag}-{i}"} for i in range(n)]


async def _warm(client: Client) -> None:
    # Connecting and preparing statements is not part of an enqueue rate.
    await client.enqueue({"k": f"{os.environ['BENCH_TAG']}-warm"})


async def _enqueue(client: Client, n: int) -> dict[str, Any]:
    inps = _inputs(n)
    await _warm(client)
    started = time.perf_counter()
    for inp in inps:
        await client.enqueue(inp)
    return {"seconds": time.perf_counter() - started}


async def _bulk(client: Client, n: int) -> dict[str, Any]:
    if client.enqueue_many is None:
        return {"unsupported": True}
    inps = _inputs(n)
    await _warm(client)
    started = time.perf_counter()
    await client.enqueue_many(inps)
    return {"seconds": time.perf_counter() - started}


async def _fill(client: Client, n: int) -> dict[str, Any]:
    """Pre-enqueue exactly n jobs for a drain, by the fastest API the system has."""
    inps = _inputs(n)
    if client.enqueue_many is not None:
        await client.enqueue_many(inps)
    else:
        for inp in inps:
            await client.enqueue(inp)
    return {"jobs": n}


async def _latency(client: Client, rate: float, seconds: float) -> dict[str, Any]:
    """Enqueue at a steady rate, each job carrying its enqueue wall time; answers too each
    call's stamp and return (`returned`), so a pickup splits at the enqueue's return."""
    inps = _inputs(round(rate * seconds))
    returned: list[tuple[float, float]] = []
    started = time.perf_counter()
    for i, inp in enumerate(inps):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        inp["t"] = time.time()
        await client.enqueue(inp)
        returned.append((inp["t"], time.time()))
    return {"jobs": len(inps), "returned": returned}


async def _run(peer: Any, args: argparse.Namespace) -> dict[str, Any]:
    opened: AbstractAsyncContextManager[Client] = peer.open_client()
    async with opened as client:
        if args.command == "setup":
            await client.setup()
            return {"setup": True}
        if args.command == "enqueue":
            return await _enqueue(client, args.n)
        if args.command == "bulk":
            return await _bulk(client, args.n)
        if args.command == "fill":
            return await _fill(client, args.n)
        return await _latency(client, args.rate, args.seconds)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.cli")
    parser.add_argument("system")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("setup", help="install the system's schema in the store")
    commands.add_parser("worker", help="run PgQueuer's worker (its own command cannot start)")
    for name in ("enqueue", "bulk", "fill"):
        commands.add_parser(name).add_argument("n", type=int)
    latency = commands.add_parser("latency")
    latency.add_argument("rate", type=float)
    latency.add_argument("seconds", type=float)
    args = parser.parse_args()
    peer = importlib.import_module(f"bench.peers.{args.system}_peer")
    if args.command == "worker":
        # Blocking, on the event loop the system's own worker command would use, until SIGTERM.
        peer.run_worker()
        return
    print(json.dumps(asyncio.run(_run(peer, args))), flush=True)


if __name__ == "__main__":
    main()
