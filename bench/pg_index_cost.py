"""What an index on `jobs` costs the hot path: in-process drains over variants of the schema.

`.venv/bin/python -m bench.pg_index_cost [--jobs 40000] [--runs 5] [--heartbeats 0]
[--ack-batch 50]`

Each run migrates a schema of its own, changes its indexes as the variant says, enqueues the
jobs (`job_enqueue_many`, 10,000 a call), VACUUM ANALYZEs, then drains them the way a worker
does: `job_claim` of 250, optionally `--heartbeats` heartbeat batches over the claimed jobs,
then `job_ack` in batches of `--ack-batch`. It reports jobs/s of the enqueue and of the drain
and the server CPU per job of the drain (user + system time of the backends serving this
process, from /proc), the median over the runs; the variants are interleaved (their order
alternates run by run) so a noisy minute hurts them alike. Docs: docs/pg.md, "What the operator
family cost".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid

import psycopg
from psycopg import sql

from bench.cpu import backend_cpu
from jobs_core.records import Ack, ClaimParams, Heartbeat, NewJob
from jobs_pg import PgDriver
from jobs_pg.migrate import upgrade
from jobs_pg.urls import libpq_url

URL = os.environ.get("JOBS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
T0 = 1_800_000_000_000
_LISTING = "(created_at_ms, id) INCLUDE (queue, state)"

#: Variant name -> the DDL run on top of the migrated schema (`{s}` is the quoted schema).
VARIANTS: dict[str, list[str]] = {
    "no listing index": ["DROP INDEX {s}.jobs_listing"],
    "as migrated (partial, INCLUDE)": [],
    "listing not partial": [
        "DROP INDEX {s}.jobs_listing",
        f"CREATE INDEX jobs_listing ON {{s}}.jobs {_LISTING}",
    ],
    "plus a (queue, state) index": [
        "CREATE INDEX jobs_states ON {s}.jobs (queue, state) WHERE state <> 'running'"
    ],
}


def _admin() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(libpq_url(URL), autocommit=True)


def _backends(schema: str) -> list[int]:
    """The backends whose last statement named `schema`: the driver's connections."""
    with _admin() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE position(%s in query) > 0"
            " AND pid <> pg_backend_pid()",
            (schema,),
        ).fetchall()
    return sorted(int(r[0]) for r in rows)


async def one_run(
    variant: str, jobs: int, heartbeats: int, ack_batch: int
) -> tuple[float, float, float]:
    """(enqueue jobs/s, drain jobs/s, drain server CPU µs per job) of one fresh schema."""
    schema = "bench_ix_" + uuid.uuid4().hex[:10]
    upgrade(URL, schema)
    try:
        with _admin() as conn:
            quoted = sql.Identifier(schema).as_string(conn)
            for ddl in VARIANTS[variant]:
                conn.execute(ddl.format(s=quoted))
        async with PgDriver(URL, schema=schema, pool_size=4, wake=False) as d:
            records = [
                NewJob(
                    f"{uuid.uuid4()}",
                    f"r{i}",
                    "bench.noop",
                    "default",
                    None,
                    f"k{i}",
                    '{"k": 1}',
                    0,
                    T0,
                    3,
                    T0 + i,
                )
                for i in range(jobs)
            ]
            started = time.perf_counter()
            for i in range(0, jobs, 10_000):
                await d.job_enqueue_many(records[i : i + 10_000])
            enqueue_rate = jobs / (time.perf_counter() - started)
            with _admin() as conn:
                conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(schema)))
            # One call first, so the hot connection exists and its backend can be watched.
            await d.job_claim(ClaimParams(("nothing",), "w", 1, 60_000, T0))
            pids = _backends(schema)
            cpu0 = sum(backend_cpu(p) for p in pids)
            started = time.perf_counter()
            done = 0
            while done < jobs:
                got = (await d.job_claim(ClaimParams(("default",), "w", 250, 60_000, T0 + 1))).jobs
                for _ in range(heartbeats):
                    await d.job_heartbeat([Heartbeat(j.fence, 60_000, T0 + 2) for j in got])
                acks = [Ack(j.fence, T0 + 3) for j in got]
                for k in range(0, len(acks), ack_batch):
                    await d.job_ack(acks[k : k + ack_batch])
                done += len(got)
            elapsed = time.perf_counter() - started
            if _backends(schema) != pids:
                raise SystemExit("the driver used another connection: its CPU was not watched")
            cpu = sum(backend_cpu(p) for p in pids) - cpu0
            return enqueue_rate, jobs / elapsed, cpu / jobs * 1e6
    finally:
        with _admin() as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--heartbeats", type=int, default=0, help="heartbeat batches per claim")
    parser.add_argument("--ack-batch", type=int, default=50, help="acks per job_ack call")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    names = list(VARIANTS)
    results: dict[str, list[tuple[float, float, float]]] = {v: [] for v in names}
    for run in range(args.runs):
        for variant in names if run % 2 == 0 else names[::-1]:
            results[variant].append(
                await one_run(variant, args.jobs, args.heartbeats, args.ack_batch)
            )
            print(f"run {run + 1} {variant}: {results[variant][-1]}", file=sys.stderr)
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print(
        f"\n{args.jobs:,} jobs, {args.runs} runs, claims of 250, acks of {args.ack_batch},"
        f" {args.heartbeats} heartbeat batch(es) a claim, medians\n"
    )
    print("| variant | enqueue jobs/s | drain jobs/s | drain server CPU µs/job (runs) |")
    print("|---|---:|---:|---|")
    for variant, rows in results.items():
        enq = statistics.median(r[0] for r in rows)
        drain = statistics.median(r[1] for r in rows)
        cpu = statistics.median(r[2] for r in rows)
        each = " · ".join(f"{r[2]:.0f}" for r in rows)
        print(f"| {variant} | {enq:,.0f} | {drain:,.0f} | {cpu:.1f} ({each}) |")


if __name__ == "__main__":
    asyncio.run(main())
