"""Paired drains of two trees on Postgres: is a change faster, and by how much?

    .venv/bin/python -m bench.pg_pair OLD_TREE NEW_TREE [--jobs 10000] [--concurrency 10,50]
        [--pairs 3]

OLD_TREE and NEW_TREE are checkouts of this repository (e.g. `git worktree add --detach
../base main`). Per concurrency and pair, each tree in turn (the order alternates pair to
pair) runs one drain in a process of its own: a fresh schema on `--pg-url`, `--jobs` no-op jobs
enqueued with `enqueue_many`, ANALYZE, then ONE in-process `Worker` at that concurrency (its
other settings the defaults) drains them; the drain's rate, the worker's CPU and every
`postgres` process's CPU per job. Prints each drain and, per concurrency, each tree's median
and the median (lowest–highest) of the pairs' ratios NEW/OLD. The pairs are what to read on a
shared machine: both drains of a pair meet about the same load.
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
from pathlib import Path

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


async def _drain(url: str, jobs: int, concurrency: int) -> dict[str, float]:
    """One drain in this process, on the tree it was started from (its PYTHONPATH)."""
    import psycopg

    from bench.cpu import postgres_cpu
    from bench.peers.ours_peer import noop
    from jobs_core.driver import MAX_ENQUEUE_BATCH
    from jobs_core.facade import Jobs
    from jobs_core.worker import Worker
    from jobs_pg import PgDriver
    from jobs_pg.migrate import upgrade

    schema = "pair_" + uuid.uuid4().hex[:10]
    upgrade(url, schema)
    try:
        async with PgDriver(url, schema=schema) as driver:
            inputs = [{"k": str(i)} for i in range(jobs)]
            for start in range(0, jobs, MAX_ENQUEUE_BATCH):
                await Jobs(driver).enqueue_many(noop, inputs[start : start + MAX_ENQUEUE_BATCH])
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'ANALYZE "{schema}".jobs')
        async with PgDriver(url, schema=schema) as driver:
            worker = Worker(driver, [noop], concurrency=concurrency)
            cpu, server, began = time.process_time(), postgres_cpu(), time.perf_counter()
            await worker.start()
            while worker.stats.completed < jobs:  # noqa: ASYNC110 - a hook would sit in the timed path
                await asyncio.sleep(0.005)
            took = time.perf_counter() - began
            cpu, server = time.process_time() - cpu, postgres_cpu() - server
            await worker.stop()
    finally:
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return {
        "per_s": jobs / took,
        "client_us": cpu * 1e6 / jobs,
        "server_us": server * 1e6 / jobs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.pg_pair", description=__doc__.split("\n")[0])
    parser.add_argument("old", nargs="?", type=Path)
    parser.add_argument("new", nargs="?", type=Path)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", default="10,50")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--pg-url", default=DEFAULT_URL)
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(asyncio.run(_drain(args.pg_url, *args.one))))
        return 0
    if args.old is None or args.new is None:
        parser.error("name the OLD and the NEW tree")
    from bench.pairs import alternate, in_tree, ratios

    trees = {"old": args.old, "new": args.new}
    for concurrency in (int(c) for c in args.concurrency.split(",")):

        def drain(name: str, concurrency: int = concurrency) -> dict[str, float]:
            # This file runs as a script, so an older tree without it can be measured;
            # everything it imports comes from the tree (its PYTHONPATH).
            argv = ["--one", str(args.jobs), str(concurrency), "--pg-url", args.pg_url]
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
