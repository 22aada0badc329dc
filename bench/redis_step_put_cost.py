"""What one Redis `step_put` costs as a run's recorded steps grow (docs/redis.md, "Steps").

`PYTHONPATH=<tree> .venv/bin/python bench/redis_step_put_cost.py [--url redis://…] [--steps 8000]`
(run by path, so `<tree>` can be a tree without this file: the baseline).

Each measurement uses a fresh key prefix (deleted at the end). "0 earlier": one `step_put` of a
single step into each of `--samples` runs with no step yet. "N earlier": one run gets `--steps`
steps (recorded 500 per call), then `--samples` more single-step calls into it, one by one.
Prints the median and p90 wall time of one call (client round trip included) for each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from bench.retention import new_job
from jobs_core.records import ClaimParams, StepPut
from jobs_redis import RedisDriver

T = 1_800_000_000_000


def _stats(xs: list[float]) -> str:
    xs = sorted(xs)
    return f"median {statistics.median(xs) * 1e3:.3f} ms, p90 {xs[int(len(xs) * 0.9)] * 1e3:.3f} ms"


async def run(url: str, steps: int, samples: int) -> None:
    d = RedisDriver(url, prefix="bench-" + uuid.uuid4().hex[:8])
    async with d:
        try:
            await d.job_enqueue_many([new_job(f"j{i:07d}", "q", T) for i in range(samples + 1)])
            held = (await d.job_claim(ClaimParams(("q",), "w", samples + 1, 600_000, T))).jobs
            fences = [j.fence for j in held]
            empty: list[float] = []
            for f in fences[1:]:
                t0 = time.perf_counter()
                await d.step_put([StepPut(f, "s-first", '{"n":1}', T)])
                empty.append(time.perf_counter() - t0)
            big = fences[0]
            for start in range(0, steps, 500):
                batch = range(start, min(start + 500, steps))
                await d.step_put([StepPut(big, f"step-{i:06d}", '{"n":1}', T) for i in batch])
            full: list[float] = []
            for i in range(samples):
                t0 = time.perf_counter()
                await d.step_put([StepPut(big, f"extra-{i:06d}", '{"n":1}', T)])
                full.append(time.perf_counter() - t0)
            assert len(await d.step_list(held[0].run_id)) == steps + samples
            print(f"step_put, 0 earlier steps:      {_stats(empty)}")
            print(f"step_put, {steps} earlier steps: {_stats(full)}")
        finally:
            found = [k async for k in d.client.scan_iter(match=d.keys.pattern(), count=1000)]
            if found:
                await d.client.delete(*found)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--steps", type=int, default=8000)
    p.add_argument("--samples", type=int, default=200)
    a = p.parse_args()
    asyncio.run(run(a.url, a.steps, a.samples))


if __name__ == "__main__":
    main()
