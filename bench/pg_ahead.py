"""Claim-ahead on Postgres: does a worker holding a buffer (`max_in_flight` above `concurrency`)
drain faster, because its next claim is on the server while its bodies run?

    .venv/bin/python -m bench.pg_ahead [--jobs 10000] [--concurrency 10,50,100]
        [--ahead 1,1.5,2] [--rounds 5] [--no-fsync]

A factor may name a refill point too: `2:0.25` holds twice the concurrency and claims again
once a quarter of the buffer beyond the slots is free (the worker's own point is a half).

On a throwaway server (`bench.pg_server.throwaway_server`, fsync on as the harness runs it
unless `--no-fsync`), per concurrency and round, each `max_in_flight` = concurrency × `--ahead`
factor drains in turn in a process of its own, the order rotating round to round:
`bench.pg_pair`'s drain (a fresh schema, `--jobs` no-op jobs enqueued, ANALYZE, ONE in-process
`Worker`, its other settings the defaults). Each drain's rate, the worker's CPU and that
cluster's CPU a job (`bench.cpu.cluster_cpu`), and what its claims did: how many, their mean
rows, their median time on the wire, the share that came back to a worker with no job left to
start or run (every slot sat free on that claim: "starved"), and the share of the drain's time
the worker so sat idle, from its last body's end (or the claim's send, if later) to the claim's
answer ("idle_share"). Prints each drain, each factor's medians and the median
(lowest–highest) of the rounds' ratios against the first factor; writes
`bench/results/pg-ahead-<stamp>.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
KEYS = (
    "per_s",
    "client_us",
    "server_us",
    "claims",
    "rows_per_claim",
    "claim_ms",
    "starved",
    "idle_share",
)


async def _drain(
    url: str, jobs: int, concurrency: int, max_in_flight: int, refill: int, postmaster: int
) -> dict[str, float]:
    """One drain in this process; its rate, CPU a job and what its claims did."""
    from bench.cpu import cluster_cpu
    from bench.peers.ours_peer import noop
    from bench.pg_pair import filled
    from jobs_core.records import ClaimParams, ClaimResult
    from jobs_core.worker import Worker
    from jobs_pg import PgDriver

    claims: list[tuple[float, int, bool, float]] = []
    async with filled(url, jobs, "ahead_") as schema, PgDriver(url, schema=schema) as driver:
        worker = Worker(driver, [noop], concurrency=concurrency, max_in_flight=max_in_flight)
        if refill:
            worker._claims._refill_at = refill
        held = worker._claims._held
        claim = driver.job_claim
        body_end = worker._runner.on_body_end
        last_end = [0.0]

        def ended(h: Any) -> None:
            last_end[0] = time.perf_counter()
            body_end(h)

        worker._runner.on_body_end = ended

        async def timed(params: ClaimParams) -> ClaimResult:
            sent = time.perf_counter()
            result = await claim(params)
            back = time.perf_counter()
            # No held job left whose body has not ended: every slot sat free on this claim,
            # from the last body's end (or the claim's send) until its answer.
            starved = all(h.body_ended for h in held.values())
            idle = back - max(sent, last_end[0]) if starved else 0.0
            claims.append((back - sent, len(result.jobs), starved, idle))
            return result

        driver.job_claim = timed  # type: ignore[method-assign]
        cpu, server, began = time.process_time(), cluster_cpu(postmaster), time.perf_counter()
        await worker.start()
        while worker.stats.completed < jobs:  # noqa: ASYNC110 - a hook would sit in the timed path
            await asyncio.sleep(0.005)
        took = time.perf_counter() - began
        cpu, server = time.process_time() - cpu, cluster_cpu(postmaster) - server
        await worker.stop()
    busy = [c for c in claims if c[1]]
    return {
        "per_s": jobs / took,
        "client_us": cpu * 1e6 / jobs,
        "server_us": server * 1e6 / jobs,
        "claims": len(busy),
        "rows_per_claim": statistics.mean(c[1] for c in busy),
        "claim_ms": statistics.median(c[0] for c in busy) * 1000,
        "starved": sum(c[2] for c in busy) / len(busy),
        "idle_share": sum(c[3] for c in claims) / took,
    }


def _summary(seen: dict[str, list[dict[str, float]]], base: str) -> dict[str, Any]:
    out: dict[str, Any] = {"drains": seen}
    for key in KEYS:
        medians = {n: statistics.median(r[key] for r in rows) for n, rows in seen.items()}
        ratios = {
            n: [
                b[key] / a[key] if a[key] else float("nan")
                for a, b in zip(seen[base], rows, strict=True)
            ]
            for n, rows in seen.items()
            if n != base
        }
        out[key] = {"medians": medians, "ratios": ratios}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.pg_ahead", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--concurrency", default="10,50,100")
    parser.add_argument("--ahead", default="1,1.5,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-fsync", action="store_true", help="the server with fsync off")
    parser.add_argument("--one", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        url, jobs, concurrency, mif, refill, postmaster = args.one
        row = asyncio.run(
            _drain(url, int(jobs), int(concurrency), int(mif), int(refill), int(postmaster))
        )
        print(json.dumps(row))
        return 0
    from bench.pairs import in_tree
    from bench.pg_server import postmaster_pid, throwaway_server
    from jobs_pg.urls import libpq_url

    tree = Path(__file__).resolve().parent.parent
    factors = [a.strip() for a in args.ahead.split(",")]
    began = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out: dict[str, Any] = {
        "command": f"python -m bench.pg_ahead --jobs {args.jobs} --concurrency"
        f" {args.concurrency} --ahead {args.ahead} --rounds {args.rounds}"
        + (" --no-fsync" if args.no_fsync else ""),
        "began": began,
        "load_before": os.getloadavg()[0],
    }
    runs: dict[str, Any] = {}
    with throwaway_server(fsync=not args.no_fsync) as server:
        url = libpq_url(server.url)
        postmaster = str(postmaster_pid(server))
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            seen: dict[str, list[dict[str, float]]] = {f: [] for f in factors}
            loads = []
            for r in range(args.rounds):
                order = factors[r % len(factors) :] + factors[: r % len(factors)]
                for f in order:
                    factor, _, part = f.partition(":")
                    mif = max(concurrency, round(concurrency * float(factor)))
                    refill = max(1, round((mif - concurrency) * float(part))) if part else 0
                    one = [url, str(args.jobs), str(concurrency), str(mif), str(refill), postmaster]
                    row = in_tree(__file__, tree, ["--one", *one])
                    seen[f].append(row)
                    print(f"c{concurrency} x{f}: " + json.dumps(row), flush=True)
                loads.append(os.getloadavg()[0])
            summary = _summary(seen, factors[0])
            summary["load"] = loads
            for key in KEYS:
                line = " ".join(f"x{f} {summary[key]['medians'][f]:,.2f}" for f in factors)
                for f, rs in summary[key]["ratios"].items():
                    line += (
                        f"; x{f}/x{factors[0]} {statistics.median(rs):.3f}"
                        f" ({min(rs):.2f}–{max(rs):.2f})"
                    )
                print(f"c{concurrency} {key}: {line}", flush=True)
            print(f"c{concurrency} load {min(loads):.1f}–{max(loads):.1f}", flush=True)
            runs[f"c{concurrency}"] = summary
    out["runs"] = runs
    out["load_after"] = os.getloadavg()[0]
    path = RESULTS / f"pg-ahead-{began}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"written: bench/results/{path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
