"""Where a Postgres drain's time goes (issue 14, item 2): per statement, per drained job.

    .venv/bin/python -m bench.pg_profile [--jobs 10000] [--concurrency 10,50] [--profile]

Starts a throwaway Postgres of its own (`tests.pg.server.PgServer`: a temp dir, a spare port,
initdb as `postgres` when run as root; never the server on 5432) with `pg_stat_statements`
preloaded and `track_io_timing` on. For each concurrency, in a fresh schema: enqueue `--jobs`
no-op jobs with `enqueue_many`, ANALYZE, reset `pg_stat_statements` and the shared WAL counters,
then drain them with ONE in-process `Worker` (the `ujobs worker` defaults but the concurrency,
as `bench/peers/ours_peer.py` runs it) and close the driver. Reports, per drained job: each
statement's calls, rows, exec time, shared blocks and WAL; commits (`xact_commit`); WAL bytes
(LSN difference); the worker process's CPU (`time.process_time`) and the throwaway server's CPU
(from /proc). `--profile` adds one more drain per concurrency under cProfile (its CPU is not the
measured one). Results: printed, and `bench/results/pg-profile-<stamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import platform
import pstats
import re
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.cpu import cluster_cpu
from bench.peers.ours_peer import noop
from bench.pg_server import postmaster_pid, settle_stats, throwaway_server
from jobs_core.driver import MAX_ENQUEUE_BATCH
from jobs_core.facade import Jobs
from jobs_core.worker import Worker
from jobs_pg import PgDriver
from jobs_pg.driver import STATEMENTS
from jobs_pg.urls import libpq_url
from tests.pg.server import PgServer

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = RESULTS.parent.parent

# Which part of the worker each statement serves; a name not listed is reported as "other".
FAMILIES = {
    "JOB_CLAIM": "claim",
    "JOB_ACK": "settle",
    "JOB_NACK": "settle",
    "JOB_HEARTBEAT": "heartbeat",
    "JOB_PROGRESS": "heartbeat",
    "LEASE_RENEW": "heartbeat",
    "WORKER_BEAT": "registry",
    "WORKER_FORGET": "registry",
    "WAKE_PROBE": "wake",
    "LISTEN": "wake",
    "UNLISTEN": "wake",
    "JOB_PURGE": "purge",
}

_STATEMENT_COLUMNS = (
    "calls",
    "rows",
    "plans",
    "total_plan_time",
    "total_exec_time",
    "shared_blks_hit",
    "shared_blks_read",
    "shared_blks_dirtied",
    "shared_blks_written",
    "blk_read_time",
    "blk_write_time",
    "wal_records",
    "wal_fpi",
    "wal_bytes",
)


def _shape(text: str) -> str:
    """A statement's text with every parameter and constant as `?`, whitespace collapsed.

    pg_stat_statements shows a statement with its constants replaced by `$n`, and psycopg sends
    our `%b` placeholders as `$n`: both sides reduce to the same shape."""
    text = re.sub(r"'(?:[^']|'')*'", "?", text)
    text = re.sub(r"%b|\$\d+", "?", text)
    text = re.sub(r"\b(?:\d+(?:\.\d+)?|true|false|null)\b", "?", text, flags=re.IGNORECASE)
    return " ".join(text.split()).lower()


def statement_names(schema: str) -> dict[str, str]:
    """The shape of each of the driver's statements, rendered for `schema`, to its name."""
    return {_shape(sql.render(schema)): name for name, sql in STATEMENTS.items()}


def name_of(query: str, names: dict[str, str]) -> str:
    """The driver's name for a pg_stat_statements query, else its first word (LISTEN, BEGIN…)."""
    shape = _shape(query)
    if shape in names:
        return names[shape]
    word = query.split(None, 1)[0].upper() if query.strip() else "?"
    if word in {"LISTEN", "UNLISTEN", "BEGIN", "COMMIT", "ROLLBACK", "SET", "SHOW", "DISCARD"}:
        return word
    return "unmatched: " + " ".join(query.split())[:80]


def _one(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    row = conn.execute(query, args or None).fetchone()
    assert row is not None
    return row[0] if len(row) == 1 else row


_COUNTERS = """
SELECT pg_current_wal_lsn()::text AS lsn, d.xact_commit, d.xact_rollback, t.n_tup_ins,
    t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del, t.autovacuum_count, t.autoanalyze_count
FROM pg_stat_database d, pg_stat_user_tables t
WHERE d.datname = current_database() AND t.schemaname = %s AND t.relname = 'jobs'
"""


def counters(probe: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    """The cumulative counters a drain is measured by, read in one statement (one transaction
    of the probe's own) once every backend's pending stats are flushed."""
    settle_stats(probe)
    cur = probe.execute(_COUNTERS, (schema,))
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return dict(zip((c.name for c in cur.description), row, strict=True))


async def _enqueue(driver: PgDriver, n: int, tag: str) -> None:
    jobs = Jobs(driver)
    inputs: list[dict[str, Any]] = [{"k": f"{tag}-{i}"} for i in range(n)]
    for start in range(0, n, MAX_ENQUEUE_BATCH):
        await jobs.enqueue_many(noop, inputs[start : start + MAX_ENQUEUE_BATCH])


async def _drain(
    driver: PgDriver, n: int, concurrency: int, server_clock: Callable[[], float]
) -> tuple[float, float, float]:
    """(wall seconds, worker process CPU seconds, server CPU seconds) of one Worker draining
    `n` jobs, from its start to its last completion; the stop is outside the window."""
    worker = Worker(driver, [noop], concurrency=concurrency)
    cpu, server, started = time.process_time(), server_clock(), time.perf_counter()
    await worker.start()
    while worker.stats.completed < n:  # noqa: ASYNC110 - a hook would sit in the timed path
        await asyncio.sleep(0.01)
    took, cpu = time.perf_counter() - started, time.process_time() - cpu
    server = server_clock() - server
    await worker.stop()
    return took, cpu, server


async def one_drain(
    server: PgServer, probe: psycopg.Connection[Any], n: int, concurrency: int, *, profile: bool
) -> dict[str, Any]:
    """One fresh schema, `n` jobs enqueued then drained at `concurrency`; per-job figures of the
    drain alone (the enqueue runs before the counters are reset)."""
    schema = f"prof_c{concurrency}{'_cprofile' if profile else ''}"
    await asyncio.to_thread(server.migrate, schema)
    filler = PgDriver(server.url, schema=schema)
    async with filler:
        await _enqueue(filler, n, schema)
    # As bench/stores.py's settle: plans over 10,000 fresh rows without statistics are guesses
    # no running queue lives with for long.
    probe.execute(f'ANALYZE "{schema}".jobs')
    postmaster = postmaster_pid(server)
    # The probe's own transactions count in xact_commit: an empty window measures them.
    quiet = counters(probe, schema), counters(probe, schema)
    probe_commits = quiet[1]["xact_commit"] - quiet[0]["xact_commit"]
    probe.execute("SELECT pg_stat_statements_reset()")
    probe.execute("SELECT pg_stat_reset_shared('wal')")
    before = counters(probe, schema)
    profiler = cProfile.Profile(time.process_time) if profile else None
    driver = PgDriver(server.url, schema=schema)
    async with driver:
        if profiler is not None:
            profiler.enable()
        took, cpu, server_s = await _drain(driver, n, concurrency, lambda: cluster_cpu(postmaster))
        if profiler is not None:
            profiler.disable()
    after = counters(probe, schema)
    delta = {k: after[k] - before[k] for k in before if k != "lsn"}
    wal_bytes = _one(probe, "SELECT %s::pg_lsn - %s::pg_lsn", after["lsn"], before["lsn"])
    wal = probe.execute("SELECT wal_records, wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
    assert wal is not None
    names = statement_names(schema)
    per: dict[str, dict[str, float]] = {}
    rows = probe.execute(
        f"SELECT query, {', '.join(_STATEMENT_COLUMNS)} FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    ).fetchall()
    for query, *values in rows:
        # The probe's own reads (this function's) are not the worker's.
        if "pg_stat" in query or "pg_lsn" in query or query.startswith("ANALYZE"):
            continue
        name = name_of(query, names)
        slot = per.setdefault(name, dict.fromkeys(_STATEMENT_COLUMNS, 0.0))
        for col, value in zip(_STATEMENT_COLUMNS, values, strict=True):
            slot[col] += float(value)
    table = []
    for name, s in sorted(per.items(), key=lambda kv: -kv[1]["total_exec_time"]):
        calls = s["calls"] or 1.0
        table.append(
            {
                "statement": name,
                "family": FAMILIES.get(name, "other"),
                "calls_per_job": s["calls"] / n,
                "rows_per_call": s["rows"] / calls,
                "plans_per_call": s["plans"] / calls,
                "mean_plan_ms": s["total_plan_time"] / calls,
                "plan_us_per_job": s["total_plan_time"] * 1000 / n,
                "mean_exec_ms": s["total_exec_time"] / calls,
                "total_exec_ms": s["total_exec_time"],
                "exec_us_per_job": s["total_exec_time"] * 1000 / n,
                "blks_hit_per_job": s["shared_blks_hit"] / n,
                "blks_read_per_job": s["shared_blks_read"] / n,
                "blks_dirtied_per_job": s["shared_blks_dirtied"] / n,
                "blks_written_per_job": s["shared_blks_written"] / n,
                "io_ms": s["blk_read_time"] + s["blk_write_time"],
                "wal_records_per_job": s["wal_records"] / n,
                "wal_fpi_per_job": s["wal_fpi"] / n,
                "wal_bytes_per_job": s["wal_bytes"] / n,
                "raw": s,
            }
        )
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "jobs": n,
        "schema": schema,
        "profiled": profile,
        "drain_s": took,
        "drain_per_s": n / took,
        "worker_cpu_us_per_job": cpu * 1e6 / n,
        "server_cpu_us_per_job": server_s * 1e6 / n,
        "commits_per_job": (delta["xact_commit"] - probe_commits) / n,
        "commits_raw": delta["xact_commit"],
        "probe_commits_subtracted": probe_commits,
        "rollbacks": delta["xact_rollback"],
        "autovacuum_runs": delta["autovacuum_count"],
        "autoanalyze_runs": delta["autoanalyze_count"],
        "statements_per_job": sum(s["calls"] for s in per.values()) / n,
        "statement_exec_us_per_job": sum(s["total_exec_time"] for s in per.values()) * 1000 / n,
        "statement_plan_us_per_job": sum(s["total_plan_time"] for s in per.values()) * 1000 / n,
        "wal_bytes_per_job_lsn": float(wal_bytes) / n,
        "pg_stat_wal_per_job": {
            "records": wal[0] / n,
            "fpi": wal[1] / n,
            "bytes": float(wal[2]) / n,
        },
        "jobs_table": {
            k: delta[k] for k in ("n_tup_ins", "n_tup_upd", "n_tup_hot_upd", "n_tup_del")
        },
        "indexes": [
            {"index": r[0], "bytes": r[1], "idx_scan": r[2], "idx_tup_read": r[3], "def": r[4]}
            for r in probe.execute(
                "SELECT indexrelname, pg_relation_size(indexrelid), idx_scan, idx_tup_read,"
                " pg_get_indexdef(indexrelid)"
                " FROM pg_stat_user_indexes WHERE schemaname = %s AND relname = 'jobs'"
                " ORDER BY indexrelname",
                (schema,),
            ).fetchall()
        ],
        "statements": table,
    }
    if profiler is not None:
        out["cprofile"] = {
            "cumulative": _top(profiler, pstats.SortKey.CUMULATIVE),
            "tottime": _top(profiler, pstats.SortKey.TIME),
        }
    return out


def _top(profiler: cProfile.Profile, key: pstats.SortKey) -> str:
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).strip_dirs().sort_stats(key).print_stats(20)
    return buf.getvalue()


def render(run: dict[str, Any]) -> str:
    """One drain's markdown: the headline figures, then the statement table."""
    t = run["jobs_table"]
    hot_share = t["n_tup_hot_upd"] / t["n_tup_upd"] if t["n_tup_upd"] else 0.0
    lines = [
        f"concurrency {run['concurrency']}: {run['jobs']:,} jobs drained in"
        f" {run['drain_s']:.2f} s ({run['drain_per_s']:,.0f}/s); per job: worker CPU"
        f" {run['worker_cpu_us_per_job']:.0f} µs, server CPU {run['server_cpu_us_per_job']:.0f} µs,"
        f" statement plan {run['statement_plan_us_per_job']:.0f} µs,"
        f" exec {run['statement_exec_us_per_job']:.0f} µs,"
        f" {run['statements_per_job']:.3f} statements, {run['commits_per_job']:.3f} commits,"
        f" {run['wal_bytes_per_job_lsn']:.0f} WAL bytes (LSN);"
        f" jobs table: {t['n_tup_upd']:,} updates, {t['n_tup_hot_upd']:,} HOT ({hot_share:.0%}),"
        f" {t['n_tup_del']:,} deletes",
        "",
        "| statement | family | calls/job | rows/call | plans/call | plan µs/job | mean exec ms"
        " | total exec ms | exec µs/job"
        " | hit/job | read/job | dirtied/job | written/job | WAL rec/job | WAL FPI/job"
        " | WAL bytes/job |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for s in run["statements"]:
        lines.append(
            f"| {s['statement']} | {s['family']} | {s['calls_per_job']:.4f}"
            f" | {s['rows_per_call']:.2f} | {s['plans_per_call']:.2f} | {s['plan_us_per_job']:.1f}"
            f" | {s['mean_exec_ms']:.3f} | {s['total_exec_ms']:.0f}"
            f" | {s['exec_us_per_job']:.1f} | {s['blks_hit_per_job']:.2f}"
            f" | {s['blks_read_per_job']:.3f} | {s['blks_dirtied_per_job']:.3f}"
            f" | {s['blks_written_per_job']:.3f} | {s['wal_records_per_job']:.2f}"
            f" | {s['wal_fpi_per_job']:.3f} | {s['wal_bytes_per_job']:.0f} |"
        )
    return "\n".join(lines)


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=False)
    return done.stdout.strip()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", type=int, default=10_000, help="no-op jobs per drain")
    ap.add_argument("--concurrency", default="10,50", help="comma-separated, one drain each")
    ap.add_argument(
        "--profile", action="store_true", help="one more drain per concurrency under cProfile"
    )
    args = ap.parse_args()
    # A SIGTERM (a timeout, a kill) unwinds as Ctrl-C does, so the throwaway server goes too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    levels = [int(c) for c in args.concurrency.split(",")]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    result: dict[str, Any] = {
        "stamp": stamp,
        "command": "python -m bench.pg_profile"
        f" --jobs {args.jobs} --concurrency {args.concurrency}"
        + (" --profile" if args.profile else ""),
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "commit": _git("describe", "--always", "--dirty"),
            "load_before": os.getloadavg(),
        },
        "runs": [],
    }
    with (
        throwaway_server() as server,
        psycopg.connect(libpq_url(server.url), autocommit=True) as probe,
    ):
        result["machine"]["server"] = _one(probe, "SELECT version()")
        result["machine"]["settings"] = dict(
            probe.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('fsync',"
                " 'synchronous_commit', 'shared_buffers', 'wal_level', 'full_page_writes',"
                " 'track_io_timing', 'shared_preload_libraries',"
                " 'pg_stat_statements.track_planning')"
            ).fetchall()
        )
        for c in levels:
            run = await one_drain(server, probe, args.jobs, c, profile=False)
            result["runs"].append(run)
            print(render(run), end="\n\n", flush=True)
        if args.profile:
            for c in levels:
                run = await one_drain(server, probe, args.jobs, c, profile=True)
                result["runs"].append(run)
                print(f"cProfile, concurrency {c} (this drain's timings are inflated):")
                print(run["cprofile"]["cumulative"], flush=True)
                print(run["cprofile"]["tottime"], flush=True)
    result["machine"]["load_after"] = os.getloadavg()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"pg-profile-{stamp}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"written: {path.relative_to(ROOT)}")


if __name__ == "__main__":
    asyncio.run(main())
