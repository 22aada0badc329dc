"""What a fleet-wide limit costs (README, "Limits"): one in-process worker (concurrency 50)
drains no-op jobs with no limit, with `concurrency=50` declared, and with a keyed limit of 1
over 100 keys, on each driver, the three interleaved within each run.

    .venv/bin/python -m bench.limits [--jobs 10000] [--runs 3] [--drivers memory,pg,redis]

Per driver: the median jobs/s of each variant, each limited variant's ratio to the unlimited
one (the goal: at most 15 % slower), and the lease calls per drained job. Postgres runs in a
schema of its own, Redis under a prefix of its own, both dropped at the end. Results: printed,
and `bench/results/limits-<stamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
from collections import Counter
from typing import Any

from bench.steps import counted, drain, save, store
from jobs_core.context import JobContext
from jobs_core.job import JobHandle, JobRegistry, job

VARIANTS = ("none", "concurrency=50", "keyed 100×1")
KEYS = 100


def handle(variant: str) -> JobHandle:
    async def noop(input: Any, ctx: JobContext) -> None:
        return None

    options: dict[str, Any] = {}
    if variant == "concurrency=50":
        options["concurrency"] = 50
    elif variant.startswith("keyed"):
        options["concurrency"] = {"key": lambda i: i["k"], "limit": 1}
    return job(
        noop,
        tenant="none",
        idempotency_key=lambda i: str(i["n"]),
        registry=JobRegistry(),
        **options,
    )


async def one(kind: str, n: int, runs: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    calls: dict[str, dict[str, float]] = {}
    for run in range(runs):
        for variant in VARIANTS:
            inputs = [{"n": f"{run}-{i}", "k": f"k{i % KEYS}"} for i in range(n)]
            async with store(kind) as driver:
                tally: Counter[str] = Counter()
                if run == 0:
                    counted(driver, tally)
                took = await drain(driver, handle(variant), inputs)
                rates[variant].append(n / took)
                if run == 0:
                    calls[variant] = {
                        k: round(v / n, 3) for k, v in sorted(tally.items()) if "lease" in k
                    }
    medians = {v: statistics.median(r) for v, r in rates.items()}
    return {
        "jobs_s": medians,
        "ratio_to_none": {v: medians[v] / medians["none"] for v in VARIANTS},
        "lease_calls_per_job": calls,
        "runs": rates,
    }


async def main() -> None:
    logging.getLogger("jobs").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drivers", default="memory,pg,redis")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for kind in args.drivers.split(","):
        results[kind] = r = await one(kind, args.jobs, args.runs)
        cells = "  ".join(
            f"{v} {r['jobs_s'][v]:7.0f}/s ({r['ratio_to_none'][v]:.2f})" for v in VARIANTS
        )
        print(f"{kind:7s} {cells}  lease calls/job {r['lease_calls_per_job']}")
    save("limits", {"jobs": args.jobs, "runs": args.runs, "results": results})


if __name__ == "__main__":
    asyncio.run(main())
