"""Paired drains of two trees on Postgres: is a change faster, and by how much?

    .venv/bin/python -m bench.pg_pair OLD_TREE NEW_TREE [--jobs 10000] [--concurrency 10,50]
        [--pairs 3] [--loops OLD_LOOP,NEW_LOOP] [--store pg|redis]

OLD_TREE and NEW_TREE are checkouts of this repository (e.g. `git worktree add --detach
../base main`). Per concurrency and pair, each tree in turn (the order alternates pair to
pair) runs one drain in a process of its own: a fresh schema on `--pg-url`, `--jobs` no-op jobs
enqueued with `enqueue_many`, ANALYZE, then ONE in-process `Worker` at that concurrency (its
other settings the defaults) drains them; the drain's rate, the worker's CPU and every
`postgres` process's CPU per job. Prints each drain and, per concurrency, each tree's median
and the median (lowest–highest) of the pairs' ratios NEW/OLD. The pairs are what to read on a
shared machine: both drains of a pair meet about the same load.

`--loops asyncio,uvloop` runs the OLD tree's drains on the first event loop and the NEW tree's
on the second (the same tree twice, `. .`, compares the loops alone); without it each drain
runs under `asyncio.run`. `--store redis` drains on `--redis-url` (a fresh prefix) instead,
the server CPU then being redis-server's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _run(main: Any, loop: str | None) -> Any:
    """`main` to its end on the loop named (None: `asyncio.run`'s); built here, not by the
    tree's `run_role`, so a tree older than `--loop` can be measured on either loop."""
    if loop is None:
        return asyncio.run(main)
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


async def _redis_drain(url: str, jobs: int, concurrency: int) -> dict[str, float]:
    """One drain on Redis in this process: a fresh prefix, removed after."""
    import redis.asyncio as aioredis

    from bench.cpu import process_cpu
    from bench.peers.ours_peer import noop
    from jobs_core.driver import MAX_ENQUEUE_BATCH
    from jobs_core.facade import Jobs
    from jobs_core.worker import Worker
    from jobs_redis import RedisDriver

    prefix = "pair_" + uuid.uuid4().hex[:10]
    admin = aioredis.from_url(url)
    try:
        server_pid = int((await admin.info("server"))["process_id"])
        async with RedisDriver(url, prefix=prefix) as driver:
            inputs = [{"k": str(i)} for i in range(jobs)]
            for start in range(0, jobs, MAX_ENQUEUE_BATCH):
                await Jobs(driver).enqueue_many(noop, inputs[start : start + MAX_ENQUEUE_BATCH])
            worker = Worker(driver, [noop], concurrency=concurrency)
            return await _timed(worker, jobs, lambda: process_cpu(server_pid))
    finally:
        keys = [k async for k in admin.scan_iter(match=f"*{prefix}*", count=1000)]
        for start in range(0, len(keys), 500):
            await admin.delete(*keys[start : start + 500])
        await admin.aclose()


async def _timed(worker: Any, jobs: int, server_cpu: Callable[[], float]) -> dict[str, float]:
    """Start `worker`, wait until it completed `jobs`, stop it: its rate, and this process's and
    the server's CPU a job in µs (`server_cpu`: the server's CPU seconds so far)."""
    cpu, server, began = time.process_time(), server_cpu(), time.perf_counter()
    await worker.start()
    while worker.stats.completed < jobs:  # noqa: ASYNC110 - a hook would sit in the timed path
        await asyncio.sleep(0.005)
    took = time.perf_counter() - began
    cpu, server = time.process_time() - cpu, server_cpu() - server
    await worker.stop()
    return {
        "per_s": jobs / took,
        "client_us": cpu * 1e6 / jobs,
        "server_us": server * 1e6 / jobs,
    }


@asynccontextmanager
async def filled(url: str, jobs: int, prefix: str) -> AsyncIterator[str]:
    """A fresh schema named `prefix`…, holding `jobs` no-op jobs enqueued with `enqueue_many`
    and analysed; dropped after."""
    import psycopg

    from bench.peers.ours_peer import noop
    from jobs_core.driver import MAX_ENQUEUE_BATCH
    from jobs_core.facade import Jobs
    from jobs_pg import PgDriver
    from jobs_pg.migrate import upgrade

    schema = prefix + uuid.uuid4().hex[:10]
    upgrade(url, schema)
    try:
        async with PgDriver(url, schema=schema) as driver:
            inputs = [{"k": str(i)} for i in range(jobs)]
            for start in range(0, jobs, MAX_ENQUEUE_BATCH):
                await Jobs(driver).enqueue_many(noop, inputs[start : start + MAX_ENQUEUE_BATCH])
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'ANALYZE "{schema}".jobs')
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


async def _drain(url: str, jobs: int, concurrency: int) -> dict[str, float]:
    """One drain in this process, on the tree it was started from (its PYTHONPATH)."""
    from bench.cpu import postgres_cpu
    from bench.peers.ours_peer import noop
    from jobs_core.worker import Worker
    from jobs_pg import PgDriver

    async with filled(url, jobs, "pair_") as schema, PgDriver(url, schema=schema) as driver:
        worker = Worker(driver, [noop], concurrency=concurrency)
        return await _timed(worker, jobs, postgres_cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.pg_pair", description=__doc__.split("\n")[0])
    parser.add_argument("old", nargs="?", type=Path)
    parser.add_argument("new", nargs="?", type=Path)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", default="10,50")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--pg-url", default=DEFAULT_URL)
    parser.add_argument("--out", help="also write the drains as JSON here")
    parser.add_argument("--loops", help="OLD_LOOP,NEW_LOOP: asyncio or uvloop each")
    parser.add_argument("--store", choices=("pg", "redis"), default="pg")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL)
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--loop", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        if args.store == "redis":
            drained = _redis_drain(args.redis_url, *args.one)
        else:
            drained = _drain(args.pg_url, *args.one)
        print(json.dumps(_run(drained, args.loop)))
        return 0
    if args.old is None or args.new is None:
        parser.error("name the OLD and the NEW tree")
    from bench.pairs import alternate, in_tree, ratios

    given = list(argv if argv is not None else sys.argv[1:])
    if "--out" in given:  # where the JSON goes is no part of what was measured
        del given[given.index("--out") : given.index("--out") + 2]
    args.raw_argv = given
    results: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    trees = {"old": args.old, "new": args.new}
    loops: dict[str, list[str]] = {"old": [], "new": []}
    if args.loops:
        old_loop, _, new_loop = args.loops.partition(",")
        loops = {"old": ["--loop", old_loop], "new": ["--loop", new_loop]}
    for concurrency in (int(c) for c in args.concurrency.split(",")):

        def drain(name: str, concurrency: int = concurrency) -> dict[str, float]:
            # This file runs as a script, so an older tree without it can be measured;
            # everything it imports comes from the tree (its PYTHONPATH).
            argv = ["--one", str(args.jobs), str(concurrency), "--pg-url", args.pg_url]
            argv += ["--store", args.store, "--redis-url", args.redis_url, *loops[name]]
            row = in_tree(__file__, trees[name], argv)
            print(f"c{concurrency} {name}: " + json.dumps(row), flush=True)
            return row

        seen = alternate(args.pairs, ("old", "new"), drain)
        per_pair = ratios(seen["old"], seen["new"], "per_s")
        for name, rows in seen.items():
            med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
            print(
                f"c{concurrency} {name}: {med['per_s']:,.0f} jobs/s, client {med['client_us']:.0f}"
                f" µs/job, server {med['server_us']:.0f} µs/job"
            )
        print(
            f"c{concurrency} new/old: {statistics.median(per_pair):.2f}"
            f" ({min(per_pair):.2f}–{max(per_pair):.2f}) over {len(per_pair)} pairs; load"
            f" {os.getloadavg()[0]:.2f}"
        )
        for key in ("client_us", "server_us"):
            per = ratios(seen["old"], seen["new"], key)
            print(
                f"c{concurrency} new/old {key}: {statistics.median(per):.2f}"
                f" ({min(per):.2f}–{max(per):.2f})"
            )
        if args.out:
            results.append(
                {
                    "concurrency": concurrency,
                    "old": seen["old"],
                    "new": seen["new"],
                    "load_after": os.getloadavg(),
                }
            )
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "command": "python -m bench.pg_pair " + " ".join(args.raw_argv),
                    "store": args.store,
                    "jobs": args.jobs,
                    "load_before": load_before,
                    "runs": results,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
