"""The worker's CPU a job on its run path, two trees in interleaved pairs (issue 29).

    .venv/bin/python -m bench.run_path OLD_TREE NEW_TREE [--store null,memory,redis]
        [--jobs 20000] [--concurrency 10,50] [--pairs 5]
    .venv/bin/python -m bench.run_path --profile memory --concurrency 50 [--jobs 20000]

Per store, concurrency and pair, each tree in turn (the order alternates pair to pair) drains
`--jobs` no-op jobs (`bench.peers.ours_peer.noop`) with ONE in-process `Worker` at that
concurrency, its other settings the defaults, in a process of its own: on `null`, the memory
driver with a claim handing out rows made beforehand and an ack that only answers (no store
work: what is measured is the worker alone), on the memory driver, or on Redis (a fresh key
prefix on `--redis-url`, deleted after). The jobs are enqueued and `gc.freeze()` called before
the clock starts, as `ujobs worker` freezes what it built before it runs. Per drain: jobs/s and
the process's CPU a job (`time.process_time`, the store's in-process share included on memory);
per store and concurrency, each tree's median and the median (lowest–highest) of the pairs'
ratios NEW/OLD of the CPU a job. `--profile` runs one drain of this tree under cProfile and
prints the functions by own time, and by cumulative time.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

DEFAULT_REDIS = "redis://127.0.0.1:6379/0"


async def _drain(
    store: str, jobs: int, concurrency: int, url: str, profile: bool
) -> dict[str, float]:
    """One drain in this process, on the tree it was started from (its PYTHONPATH)."""
    from bench.peers.ours_peer import noop
    from jobs_core.driver import MAX_ENQUEUE_BATCH
    from jobs_core.facade import Jobs
    from jobs_core.worker import Worker

    driver: Any
    if store == "null":
        driver = _null_driver(jobs)
    elif store == "memory":
        from jobs_memory import MemoryDriver

        driver = MemoryDriver()
    else:
        from jobs_redis import RedisDriver

        driver = RedisDriver(url, prefix="runpath_" + uuid.uuid4().hex[:10])
    try:
        async with driver:
            inputs = [{"k": str(i)} for i in range(jobs)]
            for start in range(0 if store != "null" else jobs, jobs, MAX_ENQUEUE_BATCH):
                await Jobs(driver).enqueue_many(noop, inputs[start : start + MAX_ENQUEUE_BATCH])
            worker_id = NULL_WORKER if store == "null" else None
            worker = Worker(driver, [noop], concurrency=concurrency, worker_id=worker_id)
            gc.collect()
            gc.freeze()
            profiler = None
            if profile:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            cpu, began = time.process_time(), time.perf_counter()
            await worker.start()
            while worker.stats.completed < jobs:  # noqa: ASYNC110 - a hook would sit in the timed path
                await asyncio.sleep(0.005)
            took = time.perf_counter() - began
            cpu = time.process_time() - cpu
            if profiler is not None:
                profiler.disable()
                import pstats

                stats = pstats.Stats(profiler, stream=sys.stderr)
                stats.sort_stats("tottime").print_stats(45)
                stats.sort_stats("cumulative").print_stats(60)
            await worker.stop()
    finally:
        if store == "redis":
            await _drop_prefix(driver)
    return {"per_s": jobs / took, "cpu_us": cpu * 1e6 / jobs}


NULL_WORKER = "runpath-null"


def _null_driver(jobs: int) -> Any:
    """The memory driver with a claim that hands out `jobs` rows made beforehand and an ack
    that lands every item at once: no store work at all, so only the worker's is measured."""
    from collections import deque

    from jobs_core.records import ClaimedJob, ClaimResult
    from jobs_memory import MemoryDriver

    class NullDriver(MemoryDriver):
        def __init__(self) -> None:
            super().__init__()
            far = 2**50  # a lease that never lapses in a drain
            self.rows: deque[ClaimedJob] = deque(
                ClaimedJob(
                    id=f"{i:026d}",
                    run_id=f"r{i:025d}",
                    name="noop",
                    queue="default",
                    tenant_id=None,
                    idempotency_key=str(i),
                    input_json=f'{{"k": "{i}"}}',
                    priority=0,
                    attempt=1,
                    max_attempts=3,
                    claims=1,
                    worker_id=NULL_WORKER,
                    lease_until_ms=far,
                    created_at_ms=1,
                    enqueued_by=None,
                )
                for i in range(jobs)
            )

        async def _job_claim(self, params: Any) -> ClaimResult:
            rows = self.rows
            return ClaimResult(tuple(rows.popleft() for _ in range(min(params.limit, len(rows)))))

        async def _job_ack(self, acks: Any) -> list[bool]:
            return [True] * len(acks)

    return NullDriver()


async def _drop_prefix(driver: Any) -> None:
    import redis.asyncio as redis

    client = redis.Redis.from_url(driver.url)
    try:
        keys = [k async for k in client.scan_iter(match=driver.keys.pattern(), count=1000)]
        for start in range(0, len(keys), 1000):
            await client.delete(*keys[start : start + 1000])
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run_path", description=__doc__.split("\n")[0])
    parser.add_argument("old", nargs="?", type=Path)
    parser.add_argument("new", nargs="?", type=Path)
    parser.add_argument("--store", default="null,memory,redis")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", default="10,50")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--redis-url", default=DEFAULT_REDIS)
    parser.add_argument("--profile", choices=("null", "memory", "redis"))
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        store, jobs, concurrency = args.one[0], int(args.one[1]), int(args.one[2])
        row = asyncio.run(_drain(store, jobs, concurrency, args.redis_url, False))
        print(json.dumps(row))
        return 0
    if args.profile:
        for c in (int(c) for c in args.concurrency.split(",")):
            row = asyncio.run(_drain(args.profile, args.jobs, c, args.redis_url, True))
            print(f"{args.profile} c{c}: " + json.dumps(row), flush=True)
        return 0
    if args.old is None or args.new is None:
        parser.error("name the OLD and the NEW tree")
    from bench.pairs import alternate, in_tree, ratios

    trees = {"old": args.old, "new": args.new}
    summary: list[str] = []
    for store in args.store.split(","):
        for concurrency in (int(c) for c in args.concurrency.split(",")):

            def drain(
                name: str, store: str = store, concurrency: int = concurrency
            ) -> dict[str, float]:
                # Run as a script, so a tree without this file can be measured; everything it
                # imports comes from the tree (its PYTHONPATH).
                argv = [
                    "--one",
                    store,
                    str(args.jobs),
                    str(concurrency),
                    "--redis-url",
                    args.redis_url,
                ]
                row = in_tree(__file__, trees[name], argv)
                print(f"{store} c{concurrency} {name}: " + json.dumps(row), flush=True)
                return row

            seen = alternate(args.pairs, ("old", "new"), drain)
            cpu = ratios(seen["old"], seen["new"], "cpu_us")
            rate = ratios(seen["old"], seen["new"], "per_s")
            med = {n: statistics.median(r["cpu_us"] for r in rows) for n, rows in seen.items()}
            line = (
                f"{store} c{concurrency}: CPU µs a job old {med['old']:.1f} new {med['new']:.1f};"
                f" new/old CPU {statistics.median(cpu):.2f} ({min(cpu):.2f}–{max(cpu):.2f}),"
                f" drain {statistics.median(rate):.2f} ({min(rate):.2f}–{max(rate):.2f})"
                f" over {len(cpu)} pairs; load {os.getloadavg()[0]:.2f}"
            )
            print(line, flush=True)
            summary.append(line)
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
