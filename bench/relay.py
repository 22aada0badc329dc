"""What the outbox relay moves (README, "Transactional outbox"): staged rows per second from an
app's Postgres outbox through one `ujobs relay` process to ready jobs, into Postgres and Redis.

    .venv/bin/python -m bench.relay [--rows 20000] [--runs 3] [--targets pg,redis] [--batch 500]

Each run: `--rows` jobs staged on the app's side (a Postgres schema of its own, migrated, in
transactions of 1,000 rows through `PgOutbox.stage_records` on a plain psycopg connection, as an
app commits them), then ONE `ujobs relay --outbox … --driver … --batch N` process started on
them. The window runs from the first row the outbox shows gone to the last (the harness counts
the outbox table every 20 ms), so the process's start-up is not in it; the target must then hold
every job, ready. The jobs go to a Postgres schema of their own on the same server, or under a
Redis key prefix of their own; all dropped at the end. Also reported: the relay process's CPU
seconds per 1,000 rows, and every `postgres` process's (the outbox's work and, for the Postgres
target, the jobs'), read from /proc at the window's edges. Results: printed, and
`bench/results/relay-<stamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.cpu import postgres_cpu, process_cpu
from bench.steps import PG_URL, REDIS_URL, save
from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.outbox import staged_record
from jobs_core.urls import driver_from_url
from jobs_pg.migrate import upgrade
from jobs_pg.outbox import PgOutbox
from jobs_pg.urls import libpq_url

ROOT = Path(__file__).resolve().parents[1]
#: Rows one staging transaction commits (and one `stage_records` call writes).
STAGE_TX = 1_000


async def noop(input: Any, ctx: JobContext) -> None:
    return None


NOOP: JobHandle = job(
    noop,
    name="bench_noop",
    tenant="none",
    idempotency_key=lambda i: str(i["n"]),
    registry=JobRegistry(),
)


def admin() -> psycopg.Connection[Any]:
    return psycopg.connect(libpq_url(PG_URL), autocommit=True)


@contextmanager
def pg_schema(prefix: str) -> Iterator[str]:
    """A migrated schema of its own (the jobs' tables and the outbox), dropped afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    upgrade(PG_URL, schema)
    try:
        yield schema
    finally:
        with admin() as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def target(kind: str) -> Iterator[str]:
    """The URL of a fresh, empty store of `kind` for the jobs, dropped afterwards."""
    if kind == "pg":
        with pg_schema("bench_relay_jobs") as schema:
            yield f"{PG_URL}?schema={schema}"
        return
    url = f"{REDIS_URL}?prefix=bench-relay-{uuid.uuid4().hex[:8]}"
    try:
        yield url
    finally:
        asyncio.run(_purge(url))


async def _purge(url: str) -> None:
    driver: Any = driver_from_url(url)
    async with driver:
        client = driver.client
        keys = [k async for k in client.scan_iter(match=driver.keys.pattern(), count=1000)]
        for i in range(0, len(keys), 1000):
            await client.delete(*keys[i : i + 1000])


def stage(schema: str, rows: int, run: int) -> float:
    """Stage `rows` jobs in transactions of `STAGE_TX` on one app connection; answers seconds."""
    outbox = PgOutbox(schema=schema)
    clock = SystemClock()
    started = time.perf_counter()
    with psycopg.connect(libpq_url(PG_URL)) as conn:
        for first in range(0, rows, STAGE_TX):
            records = [
                staged_record(NOOP, {"n": f"{run}-{i}"}, clock=clock)
                for i in range(first, min(rows, first + STAGE_TX))
            ]
            with conn.transaction():
                outbox.stage_records(conn, records)
    return time.perf_counter() - started


def left(conn: psycopg.Connection[Any], schema: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.outbox").format(sql.Identifier(schema))
    row = conn.execute(query).fetchone()
    assert row is not None
    return int(row[0])


async def ready(url: str) -> int:
    driver: JobDriver = driver_from_url(url)
    async with driver:
        demand = await driver.queue_demand([NOOP.queue], SystemClock().now_ms())
    return demand.get(NOOP.queue, 0)


def one_run(kind: str, rows: int, batch: int, run: int) -> dict[str, Any]:
    with pg_schema("bench_relay_app") as app, target(kind) as url:
        stage_s = stage(app, rows, run)
        with admin() as conn:
            conn.execute(sql.SQL("ANALYZE {}.outbox").format(sql.Identifier(app)))
            assert left(conn, app) == rows
            env = {**os.environ, "PYTHONPATH": str(ROOT), "UJOBS_DRIVER": url}
            env["UJOBS_OUTBOX"] = f"{PG_URL}?schema={app}"
            proc = subprocess.Popen(
                [sys.executable, "-m", "jobs_core.cli", "relay", "--batch", str(batch)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                # The window opens at the first row gone and closes at the last.
                while (n := left(conn, app)) == rows:
                    assert proc.poll() is None, proc.communicate()[0]
                    time.sleep(0.005)
                opened = time.perf_counter()
                cpu0, server0 = process_cpu(proc.pid), postgres_cpu()
                first_seen = rows - n
                while left(conn, app):
                    assert proc.poll() is None, proc.communicate()[0]
                    time.sleep(0.02)
                took = time.perf_counter() - opened
                cpu1, server1 = process_cpu(proc.pid), postgres_cpu()
            finally:
                proc.send_signal(signal.SIGTERM)
                out = proc.communicate(timeout=60)[0]
        assert proc.returncode == 0, out
        jobs_ready = asyncio.run(ready(url))
        assert jobs_ready == rows, (jobs_ready, rows)
    # The rows gone before the window opened were moved before it: they are not in its rate.
    moved = rows - first_seen
    return {
        "rows_s": moved / took,
        "seconds": took,
        "stage_rows_s": rows / stage_s,
        "relay_cpu_s_per_1k": (cpu1 - cpu0) / moved * 1000,
        "postgres_cpu_s_per_1k": (server1 - server0) / moved * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--targets", default="pg,redis")
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for kind in args.targets.split(","):
        runs = [one_run(kind, args.rows, args.batch, run) for run in range(args.runs)]
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        results[kind] = {"median": med, "runs": runs}
        each = " · ".join(f"{r['rows_s']:,.0f}" for r in runs)
        print(
            f"{kind:6s} relay {med['rows_s']:8,.0f} rows/s (runs: {each})"
            f"  relay CPU {med['relay_cpu_s_per_1k']:.3f} s/1k"
            f"  postgres CPU {med['postgres_cpu_s_per_1k']:.3f} s/1k"
            f"  staging {med['stage_rows_s']:,.0f} rows/s"
        )
    path = save(
        "relay", {"rows": args.rows, "runs": args.runs, "batch": args.batch, "results": results}
    )
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
