"""`python -m bench.flows`: one parent fans out to N no-op children and gathers them — ours
(`ctx.step.enqueue_many` + `ctx.step.gather` in a durable body) on Postgres and on Redis,
against a Celery chord of N no-op tasks plus a callback on the same Redis, in one run.

    .venv/bin/python -m bench.flows [--dry-run] [--runs 5] [--sizes 1000,10000]
                                    [--systems ours-pg,ours-redis,celery-prefork,celery-threads]

Every measurement gets a fresh store and a fresh worker process, warmed by one flow of 10
children, then ONE flow of N children is timed from the call that enqueues the parent (ours:
`Jobs.enqueue` of the parent; Celery: `chord(header)(callback)`, which also sends the N child
messages) to its completion as the store shows it (polled every 5 ms, the moment taken as the
midpoint between the poll that saw it and the one before). The parent's wake cost is read from
the stored finish times: from the last child's finish to the parent's (the callback's); ours
stores the moment a body ended, Celery the moment its result was stored. It is split in two
with the times the bodies write to a side file: the release (the last child's finish to the
parent's replay starting, or the callback starting: the last child's ack, the join, the wake or
the poll, the claim) and, for ours, the replay up to `gather`'s answer (the step list, the
children's rows read, the results recorded as a step).

Workers, each a subprocess:
- ours: `ujobs worker bench.peers.flows_ours --driver <url> --quiet`: one process, concurrency
  50 (its default; `--concurrency` sets it);
- celery-prefork: `celery worker --pool prefork --concurrency 2` (Celery's default pool, and its
  default concurrency on this 2-core machine: one process per core);
- celery-threads: `celery worker --pool threads --concurrency 50` (one process, 50 bodies at
  once, as ours).
Celery runs from its own virtualenv, bench/.venvs/celery, built from
bench/requirements/celery.txt when missing or changed (as bench/run.sh builds the peers').

Stores: a throwaway Postgres (as `bench/run.sh pg` starts: initdb's defaults, fsync on) and a
throwaway redis-server (no persistence), both on spare loopback ports, stopped at the end. Ours
on Redis and Celery share that one Redis (ours db 0, Celery's broker db 1 and backend db 2).
The order of sizes and systems rotates from run to run; ratios are paired within one run.
Results: printed, and bench/results/flows-<stamp>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import redis
from psycopg import sql

from bench.chaos.servers import RedisStore
from bench.harness import WorkerProcess
from bench.pg_server import throwaway_server
from bench.report import BUSY_LOAD
from bench.stores import BenchError
from bench.systems import OURS_PYTHON, ROOT, VENVS
from jobs_core.driver import MAX_BULK_IDS, JobDriver
from jobs_core.facade import Jobs
from jobs_core.ids import derived_id
from jobs_core.records import JobRecord
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_pg.urls import libpq_url

RESULTS = ROOT / "bench" / "results"
CELERY_VENV = VENVS / "celery"
CELERY_REQUIREMENTS = ROOT / "bench" / "requirements" / "celery.txt"
POLL_SECONDS = 0.005
WARM_CHILDREN = 10
TIMEOUT_SECONDS = 600.0
# Our schema on Postgres, our key prefix on Redis.
NAMESPACE = "bench"
PG_DATABASE = "bench_flows"
FINISHED = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED})


@dataclass(frozen=True)
class Config:
    runs: int
    sizes: tuple[int, ...]
    concurrency: int  # ours' worker, and Celery's threads pool


FULL = Config(runs=5, sizes=(1_000, 10_000), concurrency=50)
# Every system at two small sizes, once: proves the benchmark end to end in about a minute.
DRY = replace(FULL, runs=1, sizes=(50, 200))


@dataclass(frozen=True)
class System:
    name: str
    label: str
    backend: str  # "pg" or "redis": where its jobs live
    settings: str  # its worker's settings, for the table


def systems(config: Config) -> dict[str, System]:
    c = config.concurrency
    return {
        s.name: s
        for s in (
            System("ours-pg", "ultimat3-jobs, Postgres", "pg", f"`ujobs worker`, concurrency {c}"),
            System(
                "ours-redis", "ultimat3-jobs, Redis", "redis", f"`ujobs worker`, concurrency {c}"
            ),
            System(
                "celery-prefork",
                "Celery chord, Redis",
                "redis",
                "`celery worker --pool prefork --concurrency 2`",
            ),
            System(
                "celery-threads",
                "Celery chord, Redis",
                "redis",
                f"`celery worker --pool threads --concurrency {c}`",
            ),
        )
    }


# Each of ours over each Celery worker: the time ratio Celery ÷ ours (above 1: ours is faster).
PAIRS = (
    ("ours-redis", "celery-threads"),
    ("ours-redis", "celery-prefork"),
    ("ours-pg", "celery-threads"),
    ("ours-pg", "celery-prefork"),
)


def ensure_celery_venv() -> Path:
    """bench/.venvs/celery, (re)built from its requirements when they changed; its python."""
    built_from = CELERY_VENV / "built-from.txt"
    wanted = CELERY_REQUIREMENTS.read_bytes()
    if not built_from.exists() or built_from.read_bytes() != wanted:
        print(f"bench: building {CELERY_VENV}", file=sys.stderr, flush=True)
        subprocess.run(["rm", "-rf", str(CELERY_VENV)], check=True)
        subprocess.run([str(OURS_PYTHON), "-m", "venv", str(CELERY_VENV)], check=True)
        subprocess.run(
            [
                str(CELERY_VENV / "bin" / "pip"),
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
                str(CELERY_REQUIREMENTS),
            ],
            check=True,
        )
        built_from.write_bytes(wanted)
    return CELERY_VENV / "bin" / "python"


@dataclass
class Stores:
    pg_admin: str  # libpq URL of the throwaway server's `test` database
    pg_version: str
    redis_port: int
    redis_version: str

    @property
    def pg_url(self) -> str:
        server = self.pg_admin.rsplit("/", 1)[0].removeprefix("postgresql://")
        return f"postgresql+psycopg://{server}/{PG_DATABASE}?schema={NAMESPACE}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0?prefix={NAMESPACE}"

    def redis_db(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/{db}"

    def fresh(self, backend: str) -> None:
        """An empty store for the next measurement (no worker runs): a new database and our
        schema on Postgres; every Redis db flushed (ours' and Celery's alike)."""
        with redis.Redis(port=self.redis_port) as client:
            client.flushall()
        if backend != "pg":
            return
        with psycopg.connect(self.pg_admin, autocommit=True) as conn:
            name = sql.Identifier(PG_DATABASE)
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
            conn.execute(sql.SQL("CREATE DATABASE {}").format(name))
        from jobs_pg import migrate

        migrate.upgrade(self.pg_url.split("?")[0], NAMESPACE)


@contextmanager
def throwaway_stores() -> Iterator[Stores]:
    with (
        throwaway_server(fsync=True) as pg,
        tempfile.TemporaryDirectory(prefix="bench-flows-") as tmp,
    ):
        store = RedisStore(Path(tmp), aof=False)
        try:
            admin = libpq_url(pg.url)
            with psycopg.connect(admin) as conn:
                row = conn.execute("SELECT current_setting('server_version')").fetchone()
            with redis.Redis(port=store.port) as client:
                version = client.info("server")["redis_version"]
            assert row is not None
            yield Stores(admin, f"PostgreSQL {row[0]}", store.port, f"Redis {version}")
        finally:
            store.close()


def _phases(side: Path, key: str) -> dict[str, list[float]]:
    """The side file's wall times for one flow: phase -> times, in the order written."""
    out: dict[str, list[float]] = {}
    if side.exists():
        for line in side.read_text().splitlines():
            phase, k, _attempt, at = line.split()
            if k == key:
                out.setdefault(phase, []).append(float(at))
    return out


@asynccontextmanager
async def _driver(url: str) -> AsyncIterator[JobDriver]:
    async with driver_from_url(url) as driver:
        yield driver


async def _flow(driver: JobDriver, n: int, key: str) -> tuple[float, float, JobRecord]:
    """Enqueue one parent of `n` children and poll until it finished: (its enqueue's wall
    time, the seconds to its completion as seen, its record)."""
    from bench.peers.flows_ours import parent

    jobs = Jobs(driver)
    sent_at = time.time()
    began = time.perf_counter()
    done = await jobs.enqueue(parent, {"k": key, "n": n})
    before = began
    while True:
        polled = time.perf_counter()
        record = (await driver.job_get_many([done.id]))[done.id]
        if record.state in FINISHED:
            break
        if polled - began > TIMEOUT_SECONDS:
            raise BenchError(f"ours: parent {done.id} not finished after {TIMEOUT_SECONDS:.0f} s")
        before = polled
        await asyncio.sleep(POLL_SECONDS)
    if record.state is not JobState.COMPLETED or json.loads(record.result_json or "{}") != {
        "children": n
    }:
        raise BenchError(f"ours: the parent ended {record.state.value}: {record.last_error}")
    return sent_at, (before + polled) / 2 - began, record


async def _children(driver: JobDriver, record: JobRecord, n: int) -> list[JobRecord]:
    ids = [derived_id(record.run_id, "children", i) for i in range(n)]
    rows: list[JobRecord] = []
    for at in range(0, n, MAX_BULK_IDS):
        got = await driver.job_get_many(ids[at : at + MAX_BULK_IDS])
        rows += got.values()
    if len(rows) != n or any(r.finished_at_ms is None for r in rows):
        raise BenchError(f"ours: {n} children enqueued, {len(rows)} found finished")
    return rows


async def _ours(url: str, n: int, key: str, side: Path) -> dict[str, Any]:
    async with _driver(url) as driver:
        await _flow(driver, WARM_CHILDREN, f"{key}-warm")
        sent_at, total, record = await _flow(driver, n, key)
        rows = await _children(driver, record, n)
    finished = [r.finished_at_ms / 1000 for r in rows if r.finished_at_ms is not None]
    assert record.finished_at_ms is not None
    parent_done = record.finished_at_ms / 1000
    last = max(finished)
    marks = _phases(side, key)
    if len(marks.get("start", [])) != 2 or len(marks.get("gathered", [])) != 1:
        raise BenchError(f"ours: the parent's body ran {marks}, not once to park and once more")
    (first_start, replay), (enqueued, _) = marks["start"], marks["enqueued"]
    return {
        "total_s": total,
        "sent_at": sent_at,
        "enqueue_children_s": enqueued - first_start,
        "first_child_done": min(finished),
        "last_child_done": last,
        "parent_done": parent_done,
        "wake_s": parent_done - last,
        "release_s": replay - last,
        "replay_s": marks["gathered"][0] - replay,
    }


def _celery(python: Path, stores: Stores, n: int, key: str, side: Path) -> dict[str, Any]:
    done = subprocess.run(
        [str(python), "-m", "bench.peers.flows_celery", str(n), key],
        env=_celery_env(stores, side),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS + 60,
        check=False,
    )
    if done.returncode != 0:
        raise BenchError(f"celery client failed:\n{done.stderr[-3000:]}")
    got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if got["children"] != n:
        raise BenchError(f"celery: {n} children sent, {got['children']} results read")
    marks = _phases(side, key)
    callback = marks.get("callback", [])
    if len(callback) != 1:
        raise BenchError(f"celery: the callback ran {len(callback)} times")
    got["wake_s"] = got["parent_done"] - got["last_child_done"]
    got["enqueue_children_s"] = got.pop("send_s")
    got["release_s"] = callback[0] - got["last_child_done"]
    return got


def _celery_env(stores: Stores, side: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "BENCH_CELERY_BROKER": stores.redis_db(1),
        "BENCH_CELERY_BACKEND": stores.redis_db(2),
        "BENCH_FLOWS_FILE": str(side),
    }


def _worker_argv(system: System, stores: Stores, config: Config, celery: Path) -> list[str]:
    if system.name.startswith("ours"):
        url = stores.pg_url if system.backend == "pg" else stores.redis_url
        ujobs = str(OURS_PYTHON.parent / "ujobs")
        c = str(config.concurrency)
        return [
            ujobs,
            "worker",
            "bench.peers.flows_ours",
            "--driver",
            url,
            "--quiet",
            "--concurrency",
            c,
        ]
    pool = (
        ["--pool", "prefork", "--concurrency", "2"]
        if system.name == "celery-prefork"
        else ["--pool", "threads", "--concurrency", str(config.concurrency)]
    )
    celery_bin = str(celery.parent / "celery")
    return [celery_bin, "-A", "bench.peers.flows_celery", "worker", *pool, "--loglevel", "WARNING"]


def measure_one(
    system: System, stores: Stores, config: Config, celery: Path, n: int, run: int, raw: Path
) -> dict[str, Any]:
    """One flow of `n` children on a fresh store and a fresh worker."""
    stem = f"{system.name}-n{n}-run{run}"
    side = raw / f"{stem}.side"
    key = f"r{run}-n{n}"
    stores.fresh(system.backend)
    argv = _worker_argv(system, stores, config, celery)
    env = (
        _celery_env(stores, side)
        if system.name.startswith("celery")
        else {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_FLOWS_FILE": str(side)}
    )
    worker = WorkerProcess(argv, env, raw / f"{stem}.log")
    load = os.getloadavg()[0]
    try:
        if system.name.startswith("ours"):
            url = stores.pg_url if system.backend == "pg" else stores.redis_url
            got = asyncio.run(_ours(url, n, key, side))
        else:
            got = _celery(celery, stores, n, key, side)
        worker.check()
    finally:
        worker.stop()
    return {
        "run": run,
        "system": system.name,
        "children": n,
        "load_1m": load,
        "per_s": n / got["total_s"],
        **got,
    }


def measure(
    stores: Stores, config: Config, celery: Path, chosen: list[System], raw: Path
) -> list[dict[str, Any]]:
    """Every run: each size, each system in turn, both orders rotated by one from run to run."""
    records: list[dict[str, Any]] = []
    began = time.perf_counter()
    for run in range(1, config.runs + 1):
        shift = (run - 1) % len(chosen)
        turn = chosen[shift:] + chosen[:shift]
        sizes = list(config.sizes)
        sizes = sizes[(run - 1) % len(sizes) :] + sizes[: (run - 1) % len(sizes)]
        for n in sizes:
            for system in turn:
                try:
                    record = measure_one(system, stores, config, celery, n, run, raw)
                except BenchError as exc:
                    print(f"bench: run {run} {system.name} n={n} FAILED: {exc}", file=sys.stderr)
                    records.append(
                        {"run": run, "system": system.name, "children": n, "error": str(exc)}
                    )
                    continue
                records.append(record)
                print(
                    f"bench: run {run} {system.name:14s} n={n:>6,}: {record['total_s']:7.3f} s"
                    f" ({record['per_s']:7,.0f} children/s), wake {record['wake_s'] * 1000:6.1f}"
                    f" ms, load {record['load_1m']:.2f}",
                    flush=True,
                )
        print(
            f"bench: run {run} of {config.runs} done, {(time.perf_counter() - began) / 60:.1f}"
            " min so far",
            flush=True,
        )
    return records


def _range(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


SUMMARISED = (
    "total_s",
    "per_s",
    "enqueue_children_s",
    "wake_s",
    "release_s",
    "replay_s",
)


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Per system and size, each figure's median and range over the good runs; per pair and
    size, the time ratio Celery ÷ ours taken within each run, then its median and range."""
    good = [r for r in result["runs"] if "error" not in r]
    medians: dict[str, dict[str, Any]] = {}
    for name in result["systems"]:
        for n in result["config"]["sizes"]:
            mine = [r for r in good if r["system"] == name and r["children"] == n]
            if not mine:
                continue
            medians[f"{name}:{n}"] = {
                "runs": len(mine),
                **{k: _range([r[k] for r in mine]) for k in SUMMARISED if k in mine[0]},
            }
    ratios: list[dict[str, Any]] = []
    for ours, theirs in PAIRS:
        if ours not in result["systems"] or theirs not in result["systems"]:
            continue
        for n in result["config"]["sizes"]:
            per_run = []
            for run in sorted({r["run"] for r in good}):
                a = [r for r in good if (r["run"], r["system"], r["children"]) == (run, ours, n)]
                b = [r for r in good if (r["run"], r["system"], r["children"]) == (run, theirs, n)]
                if a and b:
                    per_run.append(b[0]["total_s"] / a[0]["total_s"])
            if per_run:
                ratios.append(
                    {
                        "ours": ours,
                        "celery": theirs,
                        "children": n,
                        **_range(per_run),
                        "per_run": per_run,
                    }
                )
    return {"medians": medians, "ratios": ratios}


def _ms(cell: dict[str, float] | None) -> str:
    return "" if cell is None else f"{cell['median'] * 1000:,.0f}"


def render(result: dict[str, Any]) -> str:
    about = result["machine"]
    lines = [
        f"**Fan-out / fan-in: {about['date'][:10]}, {about['nproc']} cores, load"
        f" {about['load_before'][0]:.2f} before and {about['load_after'][0]:.2f} after,"
        f" Python {about['python']}, {about['pg']}, {about['redis']}, ours at"
        f" {about['commit']}, Celery {about['celery']}, median of {result['config']['runs']}"
        " runs (orders rotated)**",
        "",
        "| system | worker | children | parent enqueue → parent done, s | children/s |"
        " children enqueued, ms | wake: last child → parent done, ms | release, ms |"
        " replay to gather, ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    summary = result["summary"]["medians"]
    for name, described in result["systems"].items():
        for n in result["config"]["sizes"]:
            cell = summary.get(f"{name}:{n}")
            if cell is None:
                lines.append(f"| {described['label']} | {described['settings']} | {n:,} | failed |")
                continue
            total = cell["total_s"]
            lines.append(
                f"| {described['label']} | {described['settings']} | {n:,} |"
                f" {total['median']:.2f} ({total['min']:.2f}–{total['max']:.2f}) |"
                f" {cell['per_s']['median']:,.0f} | {_ms(cell.get('enqueue_children_s'))} |"
                f" {_ms(cell['wake_s'])} ({cell['wake_s']['min'] * 1000:,.0f}–"
                f"{cell['wake_s']['max'] * 1000:,.0f}) | {_ms(cell.get('release_s'))} |"
                f" {_ms(cell.get('replay_s'))} |"
            )
    lines += [
        "",
        "| ours / Celery (time ratio Celery ÷ ours, above 1: ours faster) | children |"
        " median | range | per run |",
        "|---|---:|---:|---|---|",
    ]
    for ratio in result["summary"]["ratios"]:
        ours = result["systems"][ratio["ours"]]
        theirs = result["systems"][ratio["celery"]]
        lines.append(
            f"| {ours['label']} / {theirs['label']} ({theirs['settings']}) |"
            f" {ratio['children']:,} | {ratio['median']:.2f} |"
            f" {ratio['min']:.2f}–{ratio['max']:.2f} |"
            f" {' · '.join(f'{r:.2f}' for r in ratio['per_run'])} |"
        )
    return "\n".join(lines)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.flows", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="one run at 50 and 200 children (numbers mean nothing)",
    )
    parser.add_argument("--runs", type=int, help=f"default {FULL.runs}, dry run {DRY.runs}")
    parser.add_argument("--sizes", help="children per flow, comma-separated (default 1000,10000)")
    parser.add_argument("--concurrency", type=int, help="ours' worker and Celery's threads pool")
    parser.add_argument("--systems", help=f"comma-separated subset of {','.join(systems(FULL))}")
    args = parser.parse_args(argv)
    config = DRY if args.dry_run else FULL
    if args.runs:
        config = replace(config, runs=args.runs)
    if args.sizes:
        config = replace(config, sizes=tuple(int(s) for s in args.sizes.split(",")))
    if args.concurrency:
        config = replace(config, concurrency=args.concurrency)
    known = systems(config)
    wanted = args.systems.split(",") if args.systems else list(known)
    if set(wanted) - set(known):
        parser.error(f"unknown systems: {', '.join(sorted(set(wanted) - set(known)))}")
    chosen = [known[name] for name in wanted]

    celery = ensure_celery_venv()
    load = os.getloadavg()
    if load[0] >= BUSY_LOAD:
        print(f"bench: load average {load[0]:.2f}: other work shares the cores, numbers wander")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = RESULTS / "raw" / f"flows-{stamp}"
    raw.mkdir(parents=True)
    commit = _git("describe", "--always", "--dirty")
    with throwaway_stores() as stores:
        about = {
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "nproc": os.cpu_count(),
            "python": platform.python_version(),
            "pg": stores.pg_version,
            "redis": stores.redis_version,
            "celery": subprocess.run(
                [str(celery), "-c", "import celery; print(celery.__version__)"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip(),
            "commit": commit,
            "load_before": load,
        }
        runs = measure(stores, config, celery, chosen, raw)
    about["load_after"] = os.getloadavg()
    about["commit_after"] = _git("describe", "--always", "--dirty")
    result: dict[str, Any] = {
        "dry_run": args.dry_run,
        "command": " ".join([".venv/bin/python -m bench.flows", *(argv or sys.argv[1:])]),
        "config": asdict(config),
        "machine": about,
        "systems": {s.name: {"label": s.label, "settings": s.settings} for s in chosen},
        "runs": runs,
    }
    result["summary"] = summarise(result)
    path = RESULTS / f"flows-{stamp}{'-dry' if args.dry_run else ''}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(render(result))
    print(f"\n(results: {path.relative_to(ROOT)}; worker logs: {raw.relative_to(ROOT)})")
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
