"""`python -m bench.factories_floor`: the floor under a backfill's checkpoint on this stack — what
ONE durable write a batch costs a keyset loop before any of the factory's own code.

    .venv/bin/python -m bench.factories_floor [--rows 300000] [--batch 1000] [--pairs 8]
        [--pg-url URL] [--out DIR]

Two loops over the same table `bench.factories` makes (the same keyset selects on the same
`AsyncEngine`, a connection per batch, the same no-op): `bench.factories`' bare loop, and the
same loop that, after each batch, awaits ONE minimal durable commit (a one-row UPDATE,
prepared, autocommit) on an async psycopg connection — no step, no ledger, no worker, no fence.
Pairs alternate their order; each pair's ratio is the committing loop's over the bare loop's,
in the process's CPU seconds and in wall seconds. A factory that persists a checkpoint every
batch on an async driver spends at least this; issue 27 asks the whole factory to stay within
10 % of the bare loop. Results: printed, and `bench/results/factories-floor-<stamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.factories import FULL, PG_URL, RESULTS, Config, Places, _git, keyset_sweep, places
from jobs_pg.urls import libpq_url


async def _loop(
    p: Places, config: Config, conn: psycopg.AsyncConnection[Any] | None, update: sql.Composed
) -> tuple[float, float, int]:
    """One sweep of the table: (CPU seconds, wall seconds, rows); with `conn`, one durable
    commit after each batch."""
    commit = None if conn is None else functools.partial(conn.execute, update)
    sweep = await keyset_sweep(p, config, commit)
    return sweep.cpu_s, sweep.wall_s, sweep.rows


async def run(config: Config, pg_url: str) -> dict[str, Any]:
    async with places(pg_url, config, ("backfill",)) as p:
        update = sql.SQL("UPDATE {}.probe SET n = n + 1 WHERE id = 1").format(
            sql.Identifier(p.data_schema)
        )
        conn = await psycopg.AsyncConnection.connect(
            libpq_url(pg_url), autocommit=True, prepare_threshold=0
        )
        try:
            await _loop(p, config, None, update)  # warms the table into the caches both read
            pairs: list[dict[str, Any]] = []
            for i in range(config.pairs):
                got: dict[str, tuple[float, float, int]] = {}
                for side in ("commit", "bare") if i % 2 == 0 else ("bare", "commit"):
                    load = os.getloadavg()[0]
                    got[side] = await _loop(p, config, conn if side == "commit" else None, update)
                (c_cpu, c_wall, c_rows), (b_cpu, b_wall, b_rows) = got["commit"], got["bare"]
                if c_rows != config.rows or b_rows != config.rows:
                    raise RuntimeError(f"rows read {c_rows} and {b_rows}, not {config.rows}")
                batches = config.rows // config.batch + 1
                pair = {
                    "cpu_ratio": c_cpu / b_cpu,
                    "wall_ratio": c_wall / b_wall,
                    "bare_cpu_ms_per_batch": b_cpu / batches * 1000,
                    "commit_cpu_ms_per_batch": (c_cpu - b_cpu) / batches * 1000,
                    "load": load,
                }
                pairs.append(pair)
                print(
                    f"floor: pair {i + 1} CPU x{pair['cpu_ratio']:.3f} wall"
                    f" x{pair['wall_ratio']:.3f}, bare CPU {pair['bare_cpu_ms_per_batch']:.2f}"
                    f" ms a batch, the commit's {pair['commit_cpu_ms_per_batch']:+.3f} ms, load"
                    f" {load:.1f}",
                    flush=True,
                )
        finally:
            await conn.close()
    summary = {
        k: {
            "median": statistics.median(x[k] for x in pairs),
            "min": min(x[k] for x in pairs),
            "max": max(x[k] for x in pairs),
        }
        for k in ("cpu_ratio", "wall_ratio", "bare_cpu_ms_per_batch", "commit_cpu_ms_per_batch")
    }
    return {
        "config": {"rows": config.rows, "batch": config.batch, "pairs": config.pairs},
        "machine": {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "nproc": os.cpu_count(),
            "python": sys.version.split()[0],
            "psycopg": psycopg.__version__,
            "commit": _git("describe", "--always", "--dirty"),
        },
        "pairs": pairs,
        "summary": summary,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.factories_floor", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=300_000, help="the table's rows")
    parser.add_argument("--batch", type=int, default=FULL.batch, help="rows per batch")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--pg-url", default=PG_URL, help="the server (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(argv)
    config = replace(FULL, rows=args.rows, batch=args.batch, pairs=args.pairs)
    result = asyncio.run(run(config, args.pg_url))
    s = result["summary"]
    print(
        f"floor: one durable commit a batch, CPU x{s['cpu_ratio']['median']:.3f}"
        f" ({s['cpu_ratio']['min']:.3f}-{s['cpu_ratio']['max']:.3f}), wall"
        f" x{s['wall_ratio']['median']:.3f} over the bare loop, {config.pairs} pairs"
    )
    result["command"] = " ".join(["python -m bench.factories_floor", *(argv or sys.argv[1:])])
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"factories-floor-{stamp}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"(results: {path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
