"""Cost as the work grows on Postgres (issue 14, item 5; docs/pg.md, "Cost as the work grows").

    .venv/bin/python -m bench.pg_growth [--ready 10000,100000,1000000] [--rows 1000000]
        [--drain 10000] [--runs 3] [--concurrency 10,50] [--calls 300] [--explain-only]

Two dimensions, each in a schema of its own (`growth_<hex>…`, dropped at the end):

* A READY backlog. `--ready` sizes, loaded in turn (one `INSERT … SELECT generate_series` each,
  `bench.retention.fill`, then VACUUM ANALYZE), all due, in queue `bench`. At each size: one
  EXPLAIN (ANALYZE, BUFFERS) of a claim of 10 as the driver runs it (its generic plan) and with
  its values (a custom plan), each in a transaction rolled back, with the server's JIT on and
  off (`--explain-only` stops there); the latency of one `job_claim` of 10 (p50/p99 over
  `--calls` sequential calls, taken from the backlog's head); then
  per `--concurrency`, `--runs` timed runs of one in-process `Worker` (default options but the
  concurrency and no retention) from its start to its `--drain`th completion. After each of
  those, every row claimed or completed is put back to ready and the table VACUUM ANALYZEd, so
  every measurement starts from the same backlog.
* FINISHED rows: `bench.retention.pg_figures` at the same concurrencies (claim latency as the
  finished rows grow to `--rows`, drains before, with them, after the purge and after a VACUUM,
  and the purge's rate).

Results: printed, and `bench/results/pg-growth-<stamp>.json` (the commit measured included).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from bench.retention import (
    PG_URL,
    about,
    claim_samples,
    fill,
    pg_figures,
    run_worker,
    write,
)
from jobs_core.clock import SystemClock
from jobs_core.records import ClaimParams
from jobs_pg import PgDriver
from jobs_pg.driver import GENERIC_PLAN_SETTINGS, STATEMENTS
from jobs_pg.migrate import upgrade
from jobs_pg.urls import libpq_url

# Every row a claim or a drain took, back to what the fill made it.
_RESET = """
UPDATE {jobs} SET state = 'ready', attempt = 0, claims = 0, claimed_by = NULL,
    lease_until_ms = NULL, finished_at_ms = NULL, result_json = NULL, progress_json = NULL
WHERE queue = 'bench' AND state IN ('running', 'completed')
"""
_EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, TIMING off, FORMAT JSON) "


class _Spy(PgDriver):
    """Runs nothing: keeps the arguments the driver binds to its claim."""

    args: list[Any]

    async def _coalesced(
        self, stmt: Any, args: Sequence[Any], lazy: bool, rows: int, claim: Any
    ) -> list[Any]:
        self.args = list(args)
        return []


def reset(conn: psycopg.Connection[Any], jobs: str) -> None:
    conn.execute(sql.SQL(_RESET).format(jobs=sql.SQL(jobs)))
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.SQL(jobs)))


def shape(node: dict[str, Any], depth: int = 0) -> list[str]:
    """One line a plan node: what it reads, its rows, loops and shared buffers (hit/read)."""
    label = " ".join(
        part
        for part in (
            node.get("Subplan Name", ""),
            node["Node Type"],
            f"using {node['Index Name']}" if "Index Name" in node else "",
            f"on {node['Relation Name']}" if "Relation Name" in node else "",
        )
        if part
    )
    line = (
        f"{'  ' * depth}{label} (rows={node.get('Actual Rows')} loops={node.get('Actual Loops')}"
        f" hit={node.get('Shared Hit Blocks')} read={node.get('Shared Read Blocks')})"
    )
    return [line] + [s for child in node.get("Plans", []) for s in shape(child, depth + 1)]


def summary(explained: Any) -> dict[str, Any]:
    top = explained[0]
    plan = top["Plan"]
    lines = shape(plan)
    return {
        "execution_ms": top.get("Execution Time"),
        "planning_ms": top.get("Planning Time"),
        "shared_hit": plan.get("Shared Hit Blocks"),
        "shared_read": plan.get("Shared Read Blocks"),
        "seq_scan_on_jobs": any("Seq Scan on jobs" in line for line in lines),
        # The plan's estimated cost, and the JIT compilation it bought past `jit_above_cost`.
        "total_cost": plan.get("Total Cost"),
        "jit": top.get("JIT"),
        "shape": lines,
    }


async def explain_claim(schema: str, jit: bool = True) -> dict[str, Any]:
    """The claim of 10 from `bench`, EXPLAIN ANALYZEd generic (as the driver runs it) and custom;
    each in a transaction rolled back, so the backlog stays as it was. On a connection of its
    own that prepares nothing itself: psycopg answers a rollback on a connection holding its own
    prepared statements with DEALLOCATE ALL, which would drop ours too. `jit=False`: with the
    server's JIT compilation off for that session."""
    spy = _Spy(PG_URL, schema=schema)
    now = SystemClock().now_ms()
    await spy.job_claim(ClaimParams(("bench",), "bench", 10, 600_000, now))
    st = STATEMENTS["JOB_CLAIM"]
    text, args = st.render(schema), spy.args
    numbers = iter(range(1, len(args) + 1))
    prepared = text if st.raw else re.sub("%b", lambda _: f"${next(numbers)}", text)
    out: dict[str, Any] = {}
    with psycopg.connect(libpq_url(PG_URL), autocommit=True, prepare_threshold=None) as conn:
        literals = ", ".join(sql.Literal(a).as_string(conn) for a in args)
        if not jit:
            conn.execute("SET jit = off")
        # One prepared statement each: a generic plan keeps the JIT decision of its planning.
        conn.execute(f"PREPARE growth_claim AS {prepared}")
        conn.execute(f"PREPARE growth_claim_jit AS {prepared}")
        with conn.transaction(force_rollback=True):
            conn.execute(GENERIC_PLAN_SETTINGS)  # what the driver sends with the claim: JIT off
            row = conn.execute(f"{_EXPLAIN}EXECUTE growth_claim({literals})").fetchone()
            out["generic (as the driver runs it)"] = summary(row[0] if row else None)
        with conn.transaction(force_rollback=True):
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            row = conn.execute(f"{_EXPLAIN}EXECUTE growth_claim_jit({literals})").fetchone()
            out["generic, the session's JIT"] = summary(row[0] if row else None)
        with conn.transaction(force_rollback=True):
            cur = psycopg.RawCursor(conn) if st.raw else conn.cursor()  # its text has $n
            row = cur.execute(_EXPLAIN + text, args).fetchone()
            out["custom (with its values)"] = summary(row[0] if row else None)
    return out


async def ready_figures(
    sizes: list[int],
    drain_n: int,
    runs: int,
    concurrencies: tuple[int, ...],
    calls: int,
    schema: str,
    explain_only: bool = False,
) -> dict[str, Any]:
    await asyncio.to_thread(upgrade, PG_URL, schema)
    conn = psycopg.connect(libpq_url(PG_URL), autocommit=True)
    jobs = f'"{schema}".jobs'
    out: dict[str, Any] = {}
    try:
        async with PgDriver(PG_URL, schema=schema) as driver:
            loaded = 0
            for size in sizes:
                took = fill(conn, jobs, loaded + 1, size, SystemClock().now_ms() - 60_000, True)
                loaded = size
                print(f"pg: {size:,} ready jobs loaded in {took:.1f} s")
                at: dict[str, Any] = {"load_s": round(took, 1)}
                out[f"{size:,} ready"] = at
                at["explain"] = await explain_claim(schema)
                at["explain, jit off"] = await explain_claim(schema, jit=False)
                if explain_only:
                    continue
                at["claim"] = await claim_samples(driver, "bench", calls)
                reset(conn, jobs)
                print(f"pg: claim of 10, {size:,} ready: {at['claim']}")
                at["drain"] = {}
                for c in concurrencies:
                    got = []
                    for _ in range(runs):
                        got.append(await run_worker(driver, min(drain_n, size), c))
                        reset(conn, jobs)
                    at["drain"][f"concurrency {c}"] = {
                        "median_per_s": sorted(got)[len(got) // 2],
                        "runs_per_s": got,
                    }
                print(f"pg: drains of {min(drain_n, size):,}, {size:,} ready: {at['drain']}")
    finally:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ready", default="10000,100000,1000000", help="ready backlog sizes")
    ap.add_argument("--rows", type=int, default=1_000_000, help="finished rows")
    ap.add_argument("--drain", type=int, default=10_000, help="completions timed per drain")
    ap.add_argument("--runs", type=int, default=3, help="drains per state and concurrency")
    ap.add_argument("--concurrency", default="10,50", help="the workers' concurrency")
    ap.add_argument("--calls", type=int, default=300, help="claims of 10 per latency figure")
    ap.add_argument(
        "--explain-only", action="store_true", help="the claim's plans at each size, nothing else"
    )
    args = ap.parse_args()
    sizes = sorted(int(s) for s in args.ready.split(","))
    concurrencies = tuple(int(c) for c in args.concurrency.split(","))
    if sizes[0] < 10 * args.calls:
        ap.error("every --ready size must hold --calls claims of 10")
    result = about("bench.pg_growth", vars(args))
    tag = uuid.uuid4().hex[:8]
    result["ready"] = await ready_figures(
        sizes, args.drain, args.runs, concurrencies, args.calls, f"growth_{tag}", args.explain_only
    )
    if not args.explain_only:
        result["finished"] = await pg_figures(
            args.rows, args.drain, args.runs, concurrencies, f"growth_{tag}_finished"
        )
    write(result, "pg-growth")


if __name__ == "__main__":
    asyncio.run(main())
