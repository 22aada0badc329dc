"""What a durable step costs (README, "Durable steps"): a job of 10 no-op steps against 10 no-op
jobs, on each driver, drained by one in-process worker.

    .venv/bin/python -m bench.steps [--jobs 1000] [--runs 3] [--drivers memory,pg,redis]

For each driver: jobs/s and steps/s of `--jobs` jobs that each run 10 no-op steps, against
jobs/s of 10 × `--jobs` no-op jobs; and the store round-trips of one job's first attempt and of
a replay (an attempt that finds its 10 steps recorded): the goal is one round-trip per executed
step and none per replayed one (one `step_list` per attempt). Postgres runs in a schema of its
own, Redis under a prefix of its own, both dropped at the end. Results: printed, and
`bench/results/steps-<stamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import statistics
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.worker import Worker

PG_URL = os.environ.get("JOBS_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("JOBS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
RESULTS = Path(__file__).resolve().parent / "results"
STEPS = 10


@asynccontextmanager
async def store(kind: str) -> AsyncIterator[JobDriver]:
    """A fresh, empty driver of `kind`, dropped afterwards."""
    if kind == "memory":
        from jobs_memory import MemoryDriver

        async with MemoryDriver() as driver:
            yield driver
    elif kind == "pg":
        from jobs_pg import PgDriver
        from jobs_pg.migrate import upgrade

        schema = f"bench_steps_{uuid.uuid4().hex[:8]}"
        await asyncio.to_thread(upgrade, PG_URL, schema)
        try:
            async with PgDriver(PG_URL, schema=schema, pool_size=8) as driver:
                yield driver
        finally:
            import psycopg

            from jobs_pg.urls import libpq_url

            with psycopg.connect(libpq_url(PG_URL), autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    else:
        from jobs_redis import RedisDriver

        driver = RedisDriver(REDIS_URL, prefix=f"bench-steps-{uuid.uuid4().hex[:8]}")
        async with driver:
            try:
                yield driver
            finally:
                client: Any = driver.client
                keys = [k async for k in client.scan_iter(match=driver.keys.pattern())]
                if keys:
                    await client.delete(*keys)


def counted(driver: JobDriver, tally: Counter[str]) -> None:
    """Count every store call `driver` makes from now on (its `_` methods), into `tally`."""
    for name in dir(type(driver)):
        if name.startswith(
            ("_job_", "_step_", "_event_", "_worker_", "_queue_", "_counter_", "_lease_")
        ):
            original: Callable[..., Awaitable[Any]] = getattr(driver, name)

            def wrap(f: Callable[..., Awaitable[Any]], n: str) -> Callable[..., Awaitable[Any]]:
                async def call(*a: Any, **kw: Any) -> Any:
                    tally[n] += 1
                    return await f(*a, **kw)

                return call

            setattr(driver, name, wrap(original, name))


def handles() -> tuple[JobHandle, JobHandle]:
    async def stepped(input: Any, ctx: JobContext) -> None:
        for i in range(STEPS):
            await ctx.step.run(f"s{i}", lambda: None)
        if input.get("fail_once") and ctx.attempt == 1:
            raise RuntimeError("once more: the next attempt replays every step")

    async def noop(input: Any, ctx: JobContext) -> None:
        return None

    registry = JobRegistry()
    key = lambda i: str(i["n"])  # noqa: E731
    return (
        job(
            stepped,
            tenant="none",
            idempotency_key=key,
            retry=Retry(attempts=3, base_ms=1, cap_ms=1),
            registry=registry,
        ),
        job(noop, tenant="none", idempotency_key=key, registry=registry),
    )


async def drain(driver: JobDriver, handle: JobHandle, inputs: list[dict[str, Any]]) -> float:
    jobs = Jobs(driver)
    ids: list[str] = []
    for i in range(0, len(inputs), 1000):
        ids += [r.id for r in await jobs.enqueue_many(handle, inputs[i : i + 1000])]
    worker = Worker(driver, [handle], concurrency=50, poll_floor=0.001, poll_ceiling=0.05)
    started = time.perf_counter()
    await worker.start()
    while worker.stats.completed < len(ids):  # noqa: ASYNC110 - polling a counter, as a user would
        await asyncio.sleep(0.005)
    took = time.perf_counter() - started
    await worker.stop()
    return took


async def one(kind: str, n: int, runs: int) -> dict[str, Any]:
    stepped, noop = handles()
    rates: dict[str, list[float]] = {"stepped_jobs_s": [], "noop_jobs_s": []}
    for run in range(runs):
        async with store(kind) as driver:
            took = await drain(driver, stepped, [{"n": f"{run}-{i}"} for i in range(n)])
            rates["stepped_jobs_s"].append(n / took)
        async with store(kind) as driver:
            took = await drain(driver, noop, [{"n": f"{run}-{i}"} for i in range(n * STEPS)])
            rates["noop_jobs_s"].append(n * STEPS / took)
    # Round-trips of one job: a first attempt that fails after its steps, then the replay.
    async with store(kind) as driver:
        tally: Counter[str] = Counter()
        done = await Jobs(driver).enqueue(stepped, {"n": "probe", "fail_once": True})
        counted(driver, tally)
        worker = Worker(driver, [stepped], concurrency=1, poll_floor=0.001, poll_ceiling=0.01)
        await worker.start()
        while (await driver.job_get_many([done.id]))[done.id].state is not JobState.COMPLETED:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        await worker.stop()
    out = {k: statistics.median(v) for k, v in rates.items()}
    out["steps_s"] = out["stepped_jobs_s"] * STEPS
    out["step_writes_per_executed_step"] = tally["_step_put"] / STEPS
    out["step_reads_per_attempt"] = tally["_step_list"] / 2
    out["calls"] = dict(tally)
    return out


async def main() -> None:
    logging.getLogger("jobs").setLevel(logging.CRITICAL)  # the probe's one failure is on purpose
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--drivers", default="memory,pg,redis")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for kind in args.drivers.split(","):
        results[kind] = await one(kind, args.jobs, args.runs)
        r = results[kind]
        print(
            f"{kind:7s} 10-step jobs {r['stepped_jobs_s']:8.0f}/s ({r['steps_s']:8.0f} steps/s)"
            f"  no-op jobs {r['noop_jobs_s']:8.0f}/s"
            f"  puts/executed step {r['step_writes_per_executed_step']:.2f}"
            f"  lists/attempt {r['step_reads_per_attempt']:.1f}"
        )
    save("steps", {"jobs": args.jobs, "runs": args.runs, "results": results})


def save(kind: str, doc: dict[str, Any]) -> Path:
    """Write `doc` to `bench/results/<kind>-<UTC stamp>.json` with the date, host, Python and
    the one-minute load the run saw; answers the path."""
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        with open("/proc/loadavg") as f:
            load: float | None = float(f.read().split()[0])
    except OSError:
        load = None
    meta = {"date": stamp, "host": platform.node(), "python": platform.python_version()}
    path = RESULTS / f"{kind}-{stamp}.json"
    path.write_text(json.dumps({**meta, "load_1m": load, **doc}, indent=2))
    return path


if __name__ == "__main__":
    asyncio.run(main())
