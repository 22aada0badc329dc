"""What a lease call costs, two trees compared in interleaved pairs (the key's clock: every take,
renewal and release upserts its key's clock first).

`.venv/bin/python -m bench.lease_cost pg|redis --a TREE [--b TREE] [--pairs 5] [--calls 300]`

Each run (a fresh process, its imports from the tree it measures: PYTHONPATH=TREE) makes its own
store (`bench.steps.store`: a schema of its own on Postgres, a key prefix on Redis, dropped
after) and times, one call after another on one key of limit 10,000: `--calls` takes
of one item (each a new holder: the key's live holdings grow to `--calls`), a renewal of each,
a release of each. Per call kind: the median wall µs. Pairs alternate which tree runs first;
the answer is each tree's median and the median of the per-pair ratios B/A.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

METRICS = ("take_us", "renew_us", "release_us")


def run(kind: str, calls: int) -> dict[str, float]:
    import asyncio
    import time

    from bench.steps import store
    from jobs_core.records import LeaseRef, LeaseRenew, LeaseTake

    async def main() -> dict[str, float]:
        spent: dict[str, list[float]] = {m: [] for m in METRICS}
        async with store(kind) as driver:
            now = int(time.time() * 1000)
            await driver.lease_take([LeaseTake("warm", "w", 1, 1000)], now)
            held = []
            for i in range(calls):
                t = time.perf_counter()
                (got,) = await driver.lease_take([LeaseTake("k", f"h{i}", 10_000, 600_000)], now)
                spent["take_us"].append(time.perf_counter() - t)
                assert got is not None
                held.append(got)
            for h in held:
                t = time.perf_counter()
                await driver.lease_renew([LeaseRenew("k", h.token, 600_000)], now + 1)
                spent["renew_us"].append(time.perf_counter() - t)
            for h in held:
                t = time.perf_counter()
                await driver.lease_release([LeaseRef("k", h.token)], now + 2)
                spent["release_us"].append(time.perf_counter() - t)
        return {m: statistics.median(v) * 1e6 for m, v in spent.items()}

    return asyncio.run(main())


def pairs(args: argparse.Namespace) -> None:
    from pathlib import Path

    from bench.pairs import alternate, in_tree, ratios

    def once(side: str) -> dict[str, float]:
        tree = args.a if side == "A" else (args.b or args.a)
        argv = [args.kind, "--run", "--calls", str(args.calls)]
        return in_tree(os.path.abspath(__file__), Path(tree), argv)

    got = alternate(args.pairs, ("A", "B"), once)
    for m in METRICS:
        a = [r[m] for r in got["A"]]
        b = [r[m] for r in got["B"]]
        per_pair = ratios(got["A"], got["B"], m)
        print(
            f"{args.kind} {m:10s} A {statistics.median(a):8.1f}  B {statistics.median(b):8.1f}"
            f"  B/A {statistics.median(per_pair):.3f}  pairs {[round(r, 3) for r in per_pair]}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("kind", choices=("pg", "redis"))
    parser.add_argument("--run", action="store_true", help="one measurement of PYTHONPATH's tree")
    parser.add_argument("--a", default=".")
    parser.add_argument("--b")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=300)
    ns = parser.parse_args()
    if ns.run:
        print(json.dumps(run(ns.kind, ns.calls)))
    else:
        pairs(ns)
