"""What one single-job enqueue costs the store and the client, ours beside PgQueuer (or
oban-py: `--systems ours,oban`), each through its bench producer (`python -m bench.peers.cli
SYSTEM ...`, as `bench.pickup_pairs` enqueues): `.venv/bin/python -m bench.enqueue_wal [--loop
500] [--rate 50 --seconds 8] [--rounds 4] [--systems ours,pgqueuer]`.

On a throwaway Postgres with fsync on (the pickup bench's), a database per system:

- `--loop N` enqueues back to back, after a CHECKPOINT and without one: per enqueue the WAL
  bytes (`pg_current_wal_lsn` before and after), records, full-page images and flushes
  (`pg_stat_wal`), each statement's calls and mean execution (`pg_stat_statements`: a BEGIN,
  COMMIT or SET would show there) and `pg_waldump --stats=record` of the span (which heap and
  index records, and how many of each);
- then `--rounds` of the producer's paced loop (`latency RATE SECONDS`, the systems' order
  rotating each round): the enqueue call's wall p50/p95/p99 (its stamp to its return), the
  client's CPU a call (the process's, less a 0.1 s run's for its start-up) and the WAL a call.

The server is this tool's alone; the client's figures move with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

import psycopg

from bench.pg_server import STATS_SETTLE_SECONDS, throwaway_server
from bench.systems import ROOT, VENVS
from jobs_pg.urls import libpq_url
from scripts.with_services import find

#: The two systems compared unless `--systems` names others (ours first).
SYSTEMS = ("ours", "pgqueuer")


def _python(system: str) -> str:
    return sys.executable if system == "ours" else str(VENVS / system / "bin" / "python")


def _cli(system: str, url: str, *args: str) -> tuple[dict[str, Any], float]:
    """Run the producer's command; its JSON answer and the CPU seconds the process took."""
    env = dict(os.environ, BENCH_URL=url, BENCH_TAG=uuid.uuid4().hex[:8], PYTHONPATH=str(ROOT))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(
        [_python(system), "-m", "bench.peers.cli", system, *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        raise SystemExit(f"{system} {args[0]} failed:\n{out.stderr}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return json.loads(out.stdout.strip().splitlines()[-1]), cpu


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _statements(conn: psycopg.Connection[Any]) -> list[tuple[int, float, str]]:
    rows = conn.execute(
        "SELECT calls, mean_exec_time, left(regexp_replace(query, '\\s+', ' ', 'g'), 90)"
        " FROM pg_stat_statements WHERE calls >= 3 AND query NOT LIKE '%%pg_stat%%'"
        " ORDER BY calls DESC"
    ).fetchall()
    return [(int(c), round(float(m), 3), str(q)) for c, m, q in rows]


def _waldump(data: str, start: str, end: str) -> list[str]:
    tool = find("pg_waldump")
    if tool is None:
        return ["(no pg_waldump on this machine)"]
    out = subprocess.run(
        [tool, "-p", os.path.join(data, "pg_wal"), "-s", start, "-e", end, "--stats=record"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in out.stdout.splitlines() if "/" in line.split(" ", 1)[0]]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.enqueue_wal", description=__doc__)
    parser.add_argument("--loop", type=int, default=500)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="two, ours first")
    args = parser.parse_args()
    systems = tuple(args.systems.split(","))
    if len(systems) != 2 or systems[0] != "ours":
        raise SystemExit("--systems: ours and one peer, e.g. ours,oban")
    with throwaway_server(fsync=True) as server:
        admin = libpq_url(server.url)
        urls: dict[str, str] = {}
        with psycopg.connect(admin, autocommit=True) as conn:
            for system in systems:
                conn.execute(f"CREATE DATABASE bench_{system}")
        for system in systems:
            urls[system] = admin.rsplit("/", 1)[0] + f"/bench_{system}"
            if system == "ours":
                urls[system] += "?schema=bench"
            _cli(system, urls[system], "setup")
            _cli(system, urls[system], "enqueue", "200")  # the tables and indexes warm
        n = args.loop + 1  # the producer's warm-up call is one more
        for checkpoint in (True, False):
            for system in systems:
                with psycopg.connect(admin, autocommit=True) as conn:
                    if checkpoint:
                        conn.execute("CHECKPOINT")
                    conn.execute("SELECT pg_stat_statements_reset()")
                    conn.execute("SELECT pg_stat_reset_shared('wal')")
                    time.sleep(STATS_SETTLE_SECONDS + 0.1)
                    start = str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]
                    _cli(system, urls[system], "enqueue", str(args.loop))
                    time.sleep(STATS_SETTLE_SECONDS + 0.2)
                    end = str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]
                    span = conn.execute("SELECT pg_wal_lsn_diff(%s, %s)", (end, start)).fetchone()
                    wal = conn.execute(
                        "SELECT wal_records, wal_fpi, wal_sync FROM pg_stat_wal"
                    ).fetchone()
                    statements = _statements(conn)
                assert span is not None and wal is not None
                print(
                    f"loop {system} (checkpoint before: {checkpoint}), a call:"
                    f" WAL {float(span[0]) / n:.0f} B, records {wal[0] / n:.1f},"
                    f" FPI {wal[1] / n:.2f}, flushes {wal[2] / n:.2f}"
                )
                for calls, mean_ms, text in statements:
                    print(f"    {calls} calls, {mean_ms} ms: {text}")
                for line in _waldump(str(server.data), start, end):
                    print("    " + line)
        base = {s: _cli(s, urls[s], "latency", str(args.rate), "0.1")[1] for s in systems}
        rows: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
        for r in range(args.rounds):
            for system in systems[r % 2 :] + systems[: r % 2]:
                with psycopg.connect(admin, autocommit=True) as conn:
                    conn.execute("SELECT pg_stat_statements_reset()")
                    time.sleep(STATS_SETTLE_SECONDS + 0.1)
                    start = str(conn.execute("SELECT pg_current_wal_lsn()").fetchone()[0])  # type: ignore[index]
                    out, cpu = _cli(
                        system, urls[system], "latency", str(args.rate), str(args.seconds)
                    )
                    time.sleep(STATS_SETTLE_SECONDS + 0.2)
                    span = conn.execute(
                        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", (start,)
                    ).fetchone()
                    statements = _statements(conn)
                assert span is not None
                ms = [(back - sent) * 1000 for sent, back in out["returned"]]
                row = {
                    "p50_ms": statistics.median(ms),
                    "p95_ms": _pct(ms, 0.95),
                    "p99_ms": _pct(ms, 0.99),
                    "cpu_us": (cpu - base[system]) / len(ms) * 1e6,
                    "wal_b": float(span[0]) / len(ms),
                }
                rows[system].append(row)
                shown = {k: round(v, 2) for k, v in row.items()}
                print(f"paced {r} {system} {shown} {[(c, m) for c, m, _ in statements]}")
        for system in systems:
            medians = {k: round(statistics.median(x[k] for x in rows[system]), 2) for k in row}
            print(f"paced {system}, median of rounds: {medians}")
        ratios = {
            k: round(statistics.median(a[k] / b[k] for a, b in zip(*rows.values(), strict=True)), 2)
            for k in row
        }
        print(f"paced ours / {systems[1]}, median of the rounds' ratios: {ratios}")


if __name__ == "__main__":
    main()
