"""What the Redis driver's accounting costs the hot path: in-process enqueues and drains.

`PYTHONPATH=<tree> .venv/bin/python -m bench.redis_counter_cost [--url redis://…] [--jobs 10000]`

Runs against a server this process may fill (each run uses a fresh key prefix and deletes it):
2,000 `job_enqueue` calls one by one, the rest through `job_enqueue_many`, then a drain the way a
worker does it (`job_claim` of 100, `job_ack` in batches of 50). Prints jobs/s of each phase and
the server's CPU (INFO cpu, user + system) per 1,000 jobs of it: give the server to this bench
alone, or the CPU column counts others. Point PYTHONPATH at the tree to measure, so two trees
(or a tree with `count_settle` / `count_rows` in `lua/includes/account.lua` made no-ops) compare
on one server, interleaved. Docs: docs/redis.md, "What the operator family cost".
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

import redis

from bench.retention import new_job
from jobs_core.records import Ack, ClaimParams
from jobs_redis import RedisDriver

T = 1_800_000_000_000


def _server_cpu(url: str) -> float:
    info = redis.Redis.from_url(url).info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def run(url: str, n: int) -> str:
    d = RedisDriver(url, prefix="bench-" + uuid.uuid4().hex[:8])
    one = min(2_000, n // 2)
    jobs = [new_job(f"j{i:07d}", "q", T) for i in range(n)]
    async with d:
        try:
            c0, t0 = _server_cpu(url), time.perf_counter()
            for j in jobs[:one]:
                await d.job_enqueue(j)
            c1, t1 = _server_cpu(url), time.perf_counter()
            for start in range(one, n, 10_000):
                await d.job_enqueue_many(jobs[start : start + 10_000])
            c2, t2 = _server_cpu(url), time.perf_counter()
            done = 0
            while done < n:
                got = await d.job_claim(ClaimParams(("q",), "w", 100, 60_000, T + 1))
                for s in range(0, len(got.jobs), 50):
                    await d.job_ack([Ack(j.fence, T + 2) for j in got.jobs[s : s + 50]])
                done += len(got.jobs)
            c3, t3 = _server_cpu(url), time.perf_counter()
        finally:
            keys = [k async for k in d.client.scan_iter(match=d.keys.pattern(), count=1000)]
            if keys:
                await d.client.delete(*keys)
    return (
        f"enqueue {one / (t1 - t0):,.0f}/s server {1000 * (c1 - c0) / one:.4f} s/1k | "
        f"bulk {(n - one) / (t2 - t1):,.0f}/s server {1000 * (c2 - c1) / (n - one):.4f} s/1k | "
        f"drain {n / (t3 - t2):,.0f}/s server {1000 * (c3 - c2) / n:.4f} s/1k"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--jobs", type=int, default=10_000)
    args = p.parse_args()
    print(asyncio.run(run(args.url, args.jobs)))


if __name__ == "__main__":
    main()
