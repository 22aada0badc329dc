"""Paired drains of two trees on a Postgres of their own: what a change does to the server's CPU.

    .venv/bin/python -m bench.pg_pair_server OLD_TREE NEW_TREE [--jobs 10000]
        [--concurrency 100,10] [--pairs 6]

`bench.pg_pair`'s drain (a fresh schema, `--jobs` no-op jobs enqueued, ANALYZE, ONE in-process
`Worker` at the concurrency draining them), each tree in turn in a process of its own, the order
alternating pair to pair — but on a throwaway server (`bench.pg_server.throwaway_server`: a temp
dir, a spare port, `fsync=off`), and its "server µs a job" counts that cluster's processes only
(`bench.cpu.cluster_cpu`), not every `postgres` on the machine: on a machine shared with other
work the server at 5432 serves others' tests, and their CPU lands in `bench.pg_pair`'s figure.
Prints each drain and, per concurrency, each tree's medians and the median (lowest–highest) of
the pairs' ratios NEW/OLD; writes `bench/results/pg-pair-server-<stamp>.json` (the trees named by
their commits, never by path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
KEYS = ("per_s", "client_us", "server_us")


def _one(url: str, jobs: int, concurrency: int, postmaster: int) -> None:
    """One drain in this process, on the tree it was started from (its PYTHONPATH)."""
    import bench.cpu
    from bench.pg_pair import _drain

    bench.cpu.postgres_cpu = lambda: bench.cpu.cluster_cpu(postmaster)
    print(json.dumps(asyncio.run(_drain(url, jobs, concurrency))))


def _commit(tree: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=tree, capture_output=True, text=True, check=True
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + ("-dirty" if git("status", "--porcelain") else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bench.pg_pair_server", description=__doc__.split("\n")[0]
    )
    parser.add_argument("old", nargs="?", type=Path)
    parser.add_argument("new", nargs="?", type=Path)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", default="100,10")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        url, jobs, concurrency, postmaster = args.one
        _one(url, int(jobs), int(concurrency), int(postmaster))
        return 0
    if args.old is None or args.new is None:
        parser.error("name the OLD and the NEW tree")
    from bench.pairs import alternate, in_tree, ratios
    from bench.pg_server import throwaway_server
    from jobs_pg.urls import libpq_url

    trees = {"old": args.old, "new": args.new}
    began = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out: dict[str, object] = {
        "command": "python -m bench.pg_pair_server OLD NEW "
        f"--jobs {args.jobs} --concurrency {args.concurrency} --pairs {args.pairs}",
        "trees": {name: _commit(tree) for name, tree in trees.items()},
        "began": began,
        "load_before": os.getloadavg()[0],
        "runs": {},
    }
    runs: dict[str, object] = {}
    with throwaway_server() as server:
        url = libpq_url(server.url)
        postmaster = (server.data / "postmaster.pid").read_text().split()[0]
        for concurrency in (int(c) for c in args.concurrency.split(",")):

            def drain(name: str, concurrency: int = concurrency) -> dict[str, float]:
                one = [url, str(args.jobs), str(concurrency), postmaster]
                row = in_tree(__file__, trees[name], ["--one", *one])
                print(f"c{concurrency} {name}: " + json.dumps(row), flush=True)
                return row

            seen = alternate(args.pairs, ("old", "new"), drain)
            summary: dict[str, object] = {"drains": seen}
            for key in KEYS:
                per_pair = ratios(seen["old"], seen["new"], key)
                medians = {n: statistics.median(r[key] for r in rows) for n, rows in seen.items()}
                summary[key] = {"medians": medians, "ratios": per_pair}
                print(
                    f"c{concurrency} {key}: old {medians['old']:,.1f} new {medians['new']:,.1f};"
                    f" new/old {statistics.median(per_pair):.3f}"
                    f" ({min(per_pair):.2f}–{max(per_pair):.2f}) over {len(per_pair)} pairs",
                    flush=True,
                )
            runs[f"c{concurrency}"] = summary
    out["runs"] = runs
    out["load_after"] = os.getloadavg()[0]
    print(f"load {out['load_before']:.2f} before, {out['load_after']:.2f} after")
    path = RESULTS / f"pg-pair-server-{began}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written: bench/results/{path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
