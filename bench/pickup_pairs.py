"""Pickup alone, paired: `python -m bench.pickup_pairs --rounds 3 ours:c10 ours:lazy oban:q10`.

The harness's latency and stream phases (`bench.harness.SystemRun.latency` / `.stream`: an idle
worker fed 50 jobs/s, then 200 jobs/s; pickup = the producer's stamp to the body's start) and
nothing else (no enqueue, bulk or drain phase), for the variants named, in rounds whose order
rotates by one, on a throwaway Postgres (fsync on) or `--pg-url`'s. Each round also reads the
worker's CPU per job over each phase. `ours:lazy` is ours at concurrency 10 with the driver's
`lazy_claim=1` (off by default, see docs/pg.md "Durability"); `ours:nosync` is ours at
concurrency 10 with no commit of the worker's or the producer's waiting for its WAL flush (a
measure of the flushes' share, not a setting to run); `ours:aio` is ours at concurrency
10 on the standard library's event loop (`--loop asyncio`; `ours:c10` runs on the default,
uvloop where installed). `ours:base` is ours at concurrency 10 on another checkout's code
(`--base TREE`, e.g. a detached worktree of main): old and new tree in the same rotating rounds,
read as ours:c10 ÷ ours:base. Each row also splits its pickups at the producer's enqueue call's
return (`idle_enqueue_p50_ms`: the stamp to the return; `idle_after_p50_ms`: the return to the
body's start; the same at p95 and for the stream). Writes
bench/results/pickup-<stamp>.json and prints each round's figures and ours ÷ each peer per round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import FULL, RESULTS, SystemRun
from bench.pg_server import postmaster_pid, throwaway_server
from bench.pickup_phases import medians
from bench.stores import PgServer
from bench.systems import SYSTEMS, System, Variant
from jobs_pg.urls import libpq_url

LAZY = Variant(
    "lazy",
    "concurrency 10, lazy claim",
    args=("--concurrency", "10", "--driver", "{url}&lazy_claim=1"),
    passed="`--concurrency 10 --driver <url>&lazy_claim=1`",
)
AIO = Variant(
    "aio",
    "concurrency 10, asyncio loop",
    args=("--concurrency", "10", "--loop", "asyncio"),
    passed="`--concurrency 10 --loop asyncio`",
)
#: Not a setting to run with: every commit of the worker's and the producer's sessions waits for
#: no WAL flush (libpq's PGOPTIONS), to show what the two flushes an idle pickup waits for (the
#: enqueue's, the claim's) cost beside `lazy` (the claim's alone).
NOSYNC = Variant(
    "nosync",
    "concurrency 10, no commit waits for its flush",
    args=("--concurrency", "10"),
    env=(("PGOPTIONS", "-c synchronous_commit=off"),),
    passed="`--concurrency 10`, PGOPTIONS `-c synchronous_commit=off` (worker and producer)",
)
#: Ours' variants that only this bench runs.
EXTRA = {"lazy": LAZY, "aio": AIO, "nosync": NOSYNC}


def _variant(key: str, base: str | None) -> tuple[System, Variant]:
    systems = {s.name: s for s in SYSTEMS["pg"]}
    name, _, variant = key.partition(":")
    system = systems[name]
    if (name, variant) == ("ours", "base"):
        if base is None:
            raise SystemExit("ours:base needs --base TREE")
        c10 = system.variant("c10")
        # The worker and the producer import jobs_* (and the peer) from the other checkout.
        return system, replace(c10, name="base", env=(("PYTHONPATH", base),))
    if name == "ours" and variant in EXTRA:
        return system, EXTRA[variant]
    return system, system.variant(variant)


def _is_peer(key: str) -> bool:
    """A row ours are divided by: another system's, or ours on the base tree."""
    return not key.startswith("ours:") or key == "ours:base"


@contextmanager
def _server(pg_url: str | None) -> Iterator[PgServer]:
    if pg_url:
        yield PgServer(libpq_url(pg_url))
        return
    with throwaway_server(fsync=True) as pg:
        yield PgServer(libpq_url(pg.url), postmaster_pid(pg))


FIGURES = ("p50_ms", "p95_ms", "stream_p50_ms", "stream_p95_ms")


def _split(phase: str, split: dict[str, list[float]]) -> dict[str, float]:
    """p50 and p95 of each part of a pickup (the producer's stamp to its enqueue call's return,
    and that return to the body's start), e.g. `idle_enqueue_p50_ms`."""
    out = {}
    for part, millis in split.items():
        cuts = statistics.quantiles(millis, n=100, method="inclusive")
        out[f"{phase}_{part}_p50_ms"] = cuts[49]
        out[f"{phase}_{part}_p95_ms"] = cuts[94]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pickup_pairs")
    parser.add_argument("variants", nargs="+", help="system:variant, ours first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=FULL.latency_seconds)
    parser.add_argument("--pg-url")
    parser.add_argument("--base", help="the checkout `ours:base` runs (its jobs_* packages)")
    parser.add_argument(
        "--probe",
        action="store_true",
        help="probe each worker and split its pickups into parts (bench/pickup_phases.py)",
    )
    args = parser.parse_args()
    base = None if args.base is None else str(Path(args.base).resolve())
    config = replace(FULL, latency_seconds=args.seconds)
    if args.probe:
        os.environ["BENCH_PROBE"] = "1"
    chosen = [_variant(k, base) for k in args.variants]
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = RESULTS / "raw" / f"pickup-{stamp}"
    raw.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()
    with _server(args.pg_url) as server:
        for r in range(1, args.rounds + 1):
            shift = (r - 1) % len(chosen)
            for system, variant in chosen[shift:] + chosen[:shift]:
                run = SystemRun(system, server, config, raw, r)
                row: dict[str, Any] = {"round": r, "row": system.key(variant)}
                row.update(run.latency(variant))
                row["cpu_us_per_job_idle"] = run.cpu_us_per_job
                row.update(_split("idle", run.split))
                row.update({f"idle_{k}_p50_ms": v for k, v in medians(run.phases).items()})
                row.update(run.stream(variant))
                row["cpu_us_per_job_stream"] = run.cpu_us_per_job
                row.update(_split("stream", run.split))
                row.update({f"stream_{k}_p50_ms": v for k, v in medians(run.phases).items()})
                rows.append(row)
                print(
                    json.dumps(
                        {k: v if isinstance(v, str | int) else round(v, 3) for k, v in row.items()}
                    ),
                    flush=True,
                )
    keys = [s.key(v) for s, v in chosen]
    ratios: dict[str, dict[str, list[float]]] = {}
    for num in (k for k in keys if not _is_peer(k)):
        for den in (k for k in keys if _is_peer(k)):
            per = ratios.setdefault(f"{num} / {den}", {f: [] for f in FIGURES})
            for r in range(1, args.rounds + 1):
                a = next(x for x in rows if x["round"] == r and x["row"] == num)
                b = next(x for x in rows if x["round"] == r and x["row"] == den)
                for f in FIGURES:
                    per[f].append(a[f] / b[f])
    print("\nours ÷ peer per round (above 1: ours slower); median")
    for pair, per in ratios.items():
        cells = "  ".join(
            f"{f} {statistics.median(v):.2f} ({' '.join(f'{x:.2f}' for x in v)})"
            for f, v in per.items()
        )
        print(f"{pair}: {cells}")
    out = RESULTS / f"pickup-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "command": "python -m bench.pickup_pairs --rounds "
                + f"{args.rounds} --seconds {args.seconds:g} "
                + ("--base <base tree> " if args.base else "")
                + ("--probe " if args.probe else "")
                + " ".join(args.variants),
                "config": {"latency_rate": config.latency_rate, "stream_rate": config.stream_rate},
                "load_before": load_before,
                "load_after": os.getloadavg(),
                "rows": rows,
                "ratios": ratios,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"(results: {out.relative_to(RESULTS.parent.parent)})")


if __name__ == "__main__":
    main()
