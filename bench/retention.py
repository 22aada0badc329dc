"""Retention figures: does a table full of finished rows slow the claim and the drain, and how
fast does the purge empty it (docs/bench.md, "Retention").

    .venv/bin/python -m bench.retention [--rows 1000000] [--drain 10000] [--concurrency 50]

On Postgres, in a schema of its own (dropped at the end): the claim latency (p50/p99 of one
`job_claim` of 10) as the finished rows grow to 10k, 100k and `--rows`; a drain of `--drain`
no-op jobs by one in-process worker at each `--concurrency` (median of `--runs`) on an empty
table, with those rows in the table, right after the workers' purge removed them, and after a
VACUUM; and the purge's
rate (`job_purge` of 1,000 rows a call, what a worker does). On Redis, under a prefix of its
own (deleted at the end), the purge's rate over `--redis-rows` finished jobs. The finished
rows are bulk-loaded with one `INSERT … SELECT generate_series` per step, not through the
driver, so the setup takes seconds. Results: printed, and `bench/results/retention-<stamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.job import JobRegistry, job
from jobs_core.records import Ack, ClaimParams, NewJob
from jobs_core.retention import Retention
from jobs_core.worker import Worker
from jobs_pg import PgDriver
from jobs_pg.migrate import upgrade
from jobs_pg.urls import libpq_url
from jobs_redis import RedisDriver

PG_URL = os.environ.get("JOBS_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("JOBS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
RESULTS = Path(__file__).resolve().parent / "results"
DAY_MS = 24 * 3600 * 1000

# Finished rows as a worker leaves them: mostly completed, a tenth dead, a tenth failed, all
# finished eight days ago (past every default retention), finish times spread over a second.
# With `ready` true, the same rows as an enqueue leaves them instead: ready, due at `at`, never
# claimed (`bench.pg_growth`'s backlog).
_FILL = """
INSERT INTO {jobs} (id, run_id, name, queue, tenant_id, idempotency_key, input_json, state,
    priority, attempt, max_attempts, claims, claimed_by, lease_until_ms, run_at_ms,
    created_at_ms, finished_at_ms, last_error, progress_json, result_json, enqueued_by)
SELECT %(prefix)s || lpad(g::text, 9, '0'), 'run-' || g, 'noop', 'bench', NULL, %(prefix)s || g,
    '{{"n": 1}}', f.state, 0, f.attempt, 3, f.attempt,
    CASE WHEN f.done THEN 'bench-worker' END, NULL, %(at)s, %(at)s,
    CASE WHEN f.done THEN %(at)s + g %% 1000 END,
    CASE WHEN f.done AND g %% 10 < 2 THEN '{{"code": "X"}}' END, NULL,
    CASE WHEN f.done THEN '{{"ok": true}}' END, NULL
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g,
LATERAL (SELECT NOT %(ready)s AS done,
    CASE WHEN %(ready)s THEN 'ready' WHEN g %% 10 = 0 THEN 'dead'
         WHEN g %% 10 = 1 THEN 'failed' ELSE 'completed' END AS state,
    CASE WHEN %(ready)s THEN 0 ELSE 1 END AS attempt) AS f
"""


def fill(conn: psycopg.Connection[Any], jobs: str, lo: int, hi: int, at: int, ready: bool) -> float:
    """Rows `lo`..`hi` (finished, or `ready`) in queue `bench`, then VACUUM ANALYZE; seconds."""
    started = time.perf_counter()
    prefix = "rdy-" if ready else "old-"
    args = {"prefix": prefix, "at": at, "lo": lo, "hi": hi, "ready": ready}
    conn.execute(sql.SQL(_FILL).format(jobs=sql.SQL(jobs)), args)
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.SQL(jobs)))
    return time.perf_counter() - started


async def noop(input: Any, ctx: JobContext) -> None:
    return None


NOOP = job(noop, name="noop", tenant="none", idempotency_key=lambda i: str(i["n"]),
           queue="bench", registry=JobRegistry())  # fmt: skip


def new_job(job_id: str, queue: str, now: int) -> NewJob:
    return NewJob(job_id, f"run-{job_id}", "noop", queue, None, job_id, '{"n": 1}', 0, now, 3, now)


def quantile(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


async def claim_latency(
    driver: PgDriver, conn: psycopg.Connection[Any], jobs: str
) -> dict[str, float]:
    """p50/p99 (ms) of 300 sequential claims of 10 from a queue of 3,000 ready jobs."""
    now = SystemClock().now_ms()
    tag = uuid.uuid4().hex[:6]
    await driver.job_enqueue_many([new_job(f"lat-{tag}-{i:05d}", "lat", now) for i in range(3000)])
    conn.execute(sql.SQL("ANALYZE {}").format(sql.SQL(jobs)))
    out = await claim_samples(driver, "lat", 300)
    conn.execute(sql.SQL("DELETE FROM {} WHERE queue = 'lat'").format(sql.SQL(jobs)))
    return out


async def claim_samples(driver: PgDriver, queue: str, calls: int) -> dict[str, float]:
    """p50/p99 (ms) of `calls` sequential claims of 10 from `queue`; each must get its 10."""
    now = SystemClock().now_ms()
    samples: list[float] = []
    for _ in range(calls):
        started = time.perf_counter()
        got = await driver.job_claim(ClaimParams((queue,), "bench", 10, 600_000, now))
        samples.append((time.perf_counter() - started) * 1000)
        assert len(got.jobs) == 10
    return {"p50_ms": round(quantile(samples, 0.5), 3), "p99_ms": round(quantile(samples, 0.99), 3)}


async def drains(
    driver: PgDriver, n: int, label: str, runs: int, concurrency: int = 50
) -> dict[str, Any]:
    """The median and every run of `drain`, `runs` times in a row."""
    got = [await drain(driver, n, f"{label}r{r}", concurrency) for r in range(runs)]
    return {"median_per_s": sorted(got)[len(got) // 2], "runs_per_s": got}


async def drain(driver: PgDriver, n: int, label: str, concurrency: int = 50) -> float:
    """Jobs/s of one worker draining `n` no-op jobs enqueued just before it starts."""
    now = SystemClock().now_ms()
    await driver.job_enqueue_many([new_job(f"{label}-{i:06d}", "bench", now) for i in range(n)])
    return await run_worker(driver, n, concurrency)


async def run_worker(driver: PgDriver, n: int, concurrency: int) -> float:
    """Jobs/s of one worker (default options but `concurrency`, no retention of its own) from
    its start to its `n`th completion on queue `bench`; then it stops (what it holds, it runs)."""
    worker = Worker(driver, [NOOP], concurrency=concurrency, retention=None)
    started = time.perf_counter()
    await worker.start()
    while worker.stats.completed < n:  # noqa: ASYNC110 - a hook would sit in the timed path
        await asyncio.sleep(0.002)
    took = time.perf_counter() - started
    await worker.stop()
    return round(n / took)


async def purge_all(driver: JobDriver) -> tuple[int, float]:
    """Purge with the default retention, 1,000 rows a call, until a call comes back short."""
    total = 0
    started = time.perf_counter()
    while True:
        n = await driver.job_purge(Retention().params(SystemClock().now_ms(), 1000))
        total += n
        if n < 1000:
            break
    return total, time.perf_counter() - started


async def pg_figures(
    rows: int, drain_n: int, runs: int, concurrencies: tuple[int, ...] = (50,), schema: str = ""
) -> dict[str, Any]:
    schema = schema or f"bench_retention_{uuid.uuid4().hex[:8]}"
    await asyncio.to_thread(upgrade, PG_URL, schema)
    conn = psycopg.connect(libpq_url(PG_URL), autocommit=True)
    jobs = f'"{schema}".jobs'
    out: dict[str, Any] = {"claim": {}, "drain": {}}

    async def drained(state: str, label: str) -> None:
        out["drain"][state] = {
            f"concurrency {c}": await drains(driver, drain_n, f"{label}c{c}", runs, c)
            for c in concurrencies
        }
        print(f"pg: drains, {state}: {out['drain'][state]}")

    try:
        driver = PgDriver(PG_URL, schema=schema)
        async with driver:
            await drained("empty table", "d0")
            old = SystemClock().now_ms() - 8 * DAY_MS
            loaded = 0
            for size in sorted({s for s in (10_000, 100_000) if s < rows} | {rows}):
                took = fill(conn, jobs, loaded + 1, size, old, ready=False)
                print(f"pg: {size:,} finished rows loaded in {took:.1f} s")
                loaded = size
                out["claim"][f"{size:,} finished"] = await claim_latency(driver, conn, jobs)
                print(
                    f"pg: claim of 10, {size:,} finished rows: {out['claim'][f'{size:,} finished']}"
                )
            await drained(f"{rows:,} finished rows", "d1")
            purged, took = await purge_all(driver)
            out["purge"] = {
                "rows": purged,
                "seconds": round(took, 2),
                "rows_per_s": round(purged / took),
            }
            print(f"pg: purged {purged:,} rows in {took:.1f} s")
            await drained("right after the purge", "d2")
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.SQL(jobs)))
            await drained("after the purge and a VACUUM", "d3")
            out["claim"]["after the purge and a VACUUM"] = await claim_latency(driver, conn, jobs)
    finally:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.close()
    return out


async def redis_figures(rows: int) -> dict[str, Any]:
    prefix = f"bench-retention-{uuid.uuid4().hex[:8]}"
    driver = RedisDriver(REDIS_URL, prefix=prefix)
    old = SystemClock().now_ms() - 8 * DAY_MS
    try:
        for start in range(0, rows, 1000):
            ids = [f"old-{i:08d}" for i in range(start, min(rows, start + 1000))]
            await driver.job_enqueue_many([new_job(i, "bench", old) for i in ids])
            got = await driver.job_claim(ClaimParams(("bench",), "bench", 1000, 600_000, old))
            await driver.job_ack([Ack(j.fence, old, '{"ok": true}') for j in got.jobs])
        purged, took = await purge_all(driver)
        out = {"rows": purged, "seconds": round(took, 2), "rows_per_s": round(purged / took)}
        print(f"redis: purged {purged:,} rows in {took:.1f} s")
        return {"purge": out}
    finally:
        client: Any = driver.client
        keys = [k async for k in client.scan_iter(match=driver.keys.pattern(), count=1000)]
        if keys:
            await client.delete(*keys)
        await driver.close()


def about(module: str, args: dict[str, Any]) -> dict[str, Any]:
    """A result's head: its stamp, the command, the commit measured and the machine."""
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, check=False
    )
    RESULTS.mkdir(exist_ok=True)
    return {
        "stamp": time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()),
        "command": f"python -m {module} "
        + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items()),
        "commit": done.stdout.strip(),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_before": os.getloadavg(),
        },
    }


def write(result: dict[str, Any], name: str) -> None:
    """Print `result` and write it to `bench/results/<name>-<stamp>.json`."""
    result["machine"]["load_after"] = os.getloadavg()
    path = RESULTS / f"{name}-{result['stamp']}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"written: {path.relative_to(RESULTS.parent.parent)}")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="finished rows on Postgres")
    ap.add_argument("--drain", type=int, default=10_000, help="no-op jobs per drain")
    ap.add_argument("--redis-rows", type=int, default=100_000, help="finished jobs on Redis")
    ap.add_argument("--runs", type=int, default=3, help="drains per table state (median)")
    ap.add_argument("--concurrency", default="50", help="the workers' concurrency, one drain each")
    args = ap.parse_args()
    concurrencies = tuple(int(c) for c in args.concurrency.split(","))
    result = about("bench.retention", vars(args))
    result["pg"] = await pg_figures(args.rows, args.drain, args.runs, concurrencies)
    result["redis"] = await redis_figures(args.redis_rows)
    write(result, "retention")


if __name__ == "__main__":
    asyncio.run(main())
