"""What an enqueue costs the client and the store, two trees compared in interleaved pairs.

`.venv/bin/python -m bench.enqueue_cost pg|redis --a TREE [--b TREE] [--pairs 5]
[--a-env K=V,…] [--b-env K=V,…] [--one 2000] [--bulk 20000] [--chunk 1000]`

Each run (a fresh process, its imports from the tree it measures: PYTHONPATH=TREE) makes its own
schema `enq_<random>` on Postgres 127.0.0.1:5432/test or key prefix on Redis 127.0.0.1:6379,
drops it after, and measures `Jobs.enqueue` one by one (`--one`) then `Jobs.enqueue_many` of
`--bulk` jobs in calls of `--chunk`, the no-op job of `bench/peers/ours_peer.py` (key a function
of the input, no tenant). Per phase: jobs/s and the client's CPU µs per job. Pairs alternate which
tree runs first; the answer is each tree's median and the median of the per-pair ratios B/A.
`--a-env NO_HIREDIS=1` hides hiredis from redis-py (its Python packer and parser then run).
On Redis also `bulk_srv_us`: the server's CPU µs per bulk job (`INFO cpu`, user + sys, around the
bulk phase) — the whole server's, so give `--redis redis://127.0.0.1:PORT/0` of a private
`redis-server` when others share the default one.
Postgres runs with `synchronous_commit=off` (PGOPTIONS) unless given: the WAL flush of a commit
would hide the client, as the bench's throwaway server (fsync off) does not.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

PG = "postgresql://postgres@127.0.0.1:5432/test"
REDIS = os.environ.get("ENQ_REDIS", "redis://127.0.0.1:6379/0")
METRICS = ("one_per_s", "bulk_per_s", "one_cpu_us", "bulk_cpu_us", "bulk_srv_us")


def run(kind: str, n_one: int, n_bulk: int, chunk: int) -> dict[str, float]:
    if os.environ.get("NO_HIREDIS"):
        sys.modules["hiredis"] = None  # type: ignore[assignment]
    import asyncio
    import time
    import uuid

    from jobs_core.facade import Jobs
    from jobs_core.job import JobRegistry, job

    @job(
        name="noop",
        queue="default",
        idempotency_key=lambda inp: inp["k"],
        tenant="none",
        registry=JobRegistry(),
    )
    async def noop(inp: Any, ctx: Any) -> None:
        return None

    async def main() -> dict[str, float]:
        tag = uuid.uuid4().hex[:8]
        driver: Any
        if kind == "pg":
            from jobs_pg import PgDriver, migrate

            migrate.upgrade(PG, f"enq_{tag}")
            driver = PgDriver(PG, schema=f"enq_{tag}")
        else:
            from jobs_redis import RedisDriver

            driver = RedisDriver(REDIS, prefix=f"enq{tag}")
        out: dict[str, float] = {}
        try:
            async with driver:
                jobs = Jobs(driver)
                await jobs.enqueue(noop, {"k": "warm"})
                await jobs.enqueue_many(noop, [{"k": f"warm{i}"} for i in range(chunk)])
                for phase, n in (("one", n_one), ("bulk", n_bulk)):
                    inputs = [{"k": f"{phase}-{i}"} for i in range(n)]
                    server = await _server_cpu(driver) if kind == "redis" else 0.0
                    wall, cpu = time.perf_counter(), time.process_time()
                    if phase == "one":
                        for inp in inputs:
                            await jobs.enqueue(noop, inp)
                    else:
                        for start in range(0, n, chunk):
                            await jobs.enqueue_many(noop, inputs[start : start + chunk])
                    out[f"{phase}_per_s"] = n / (time.perf_counter() - wall)
                    out[f"{phase}_cpu_us"] = (time.process_time() - cpu) / n * 1e6
                    if kind == "redis" and phase == "bulk":
                        out["bulk_srv_us"] = (await _server_cpu(driver) - server) / n * 1e6
        finally:
            if kind == "pg":
                import psycopg

                with psycopg.connect(PG, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA "enq_{tag}" CASCADE')
            else:
                import redis

                client = redis.Redis.from_url(REDIS)
                keys = list(client.scan_iter(f"{{enq{tag}}}*", count=1000))
                if keys:
                    client.delete(*keys)
        return out

    return asyncio.run(main())


async def _server_cpu(driver: Any) -> float:
    """The Redis server's CPU seconds so far (user + sys)."""
    info = await driver.client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def pairs(args: argparse.Namespace) -> None:
    from pathlib import Path

    from bench.pairs import alternate, in_tree, ratios

    def once(side: str) -> dict[str, float]:
        tree, extra = (args.a, args.a_env) if side == "A" else (args.b or args.a, args.b_env)
        env = {"PGOPTIONS": os.environ.get("PGOPTIONS", "-c synchronous_commit=off")}
        if args.redis:
            env["ENQ_REDIS"] = args.redis
        for kv in filter(None, extra.split(",")):
            key, value = kv.split("=", 1)
            env[key] = value
        argv = [args.kind, "--run", "--one", str(args.one), "--bulk", str(args.bulk)]
        return in_tree(
            os.path.abspath(__file__), Path(tree), [*argv, "--chunk", str(args.chunk)], env
        )

    got = alternate(args.pairs, ("A", "B"), once)
    for m in METRICS:
        if m not in got["A"][0]:
            continue
        a = [r[m] for r in got["A"]]
        b = [r[m] for r in got["B"]]
        per_pair = ratios(got["A"], got["B"], m)
        print(
            f"{args.kind} {m:11s} A {statistics.median(a):9.1f}  B {statistics.median(b):9.1f}"
            f"  B/A {statistics.median(per_pair):.3f}  pairs {[round(r, 3) for r in per_pair]}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("pg", "redis"))
    parser.add_argument("--run", action="store_true", help="one measurement of PYTHONPATH's tree")
    parser.add_argument("--a", default=".")
    parser.add_argument("--b")
    parser.add_argument("--a-env", default="")
    parser.add_argument("--b-env", default="")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--one", type=int, default=2000)
    parser.add_argument("--bulk", type=int, default=20_000)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--redis", default="", help=f"the Redis URL (default: {REDIS})")
    ns = parser.parse_args()
    if ns.run:
        print(json.dumps(run(ns.kind, ns.one, ns.bulk, ns.chunk)))
    else:
        pairs(ns)
