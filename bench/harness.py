"""`bench/run.sh pg|redis`: ours and the peers against one server, at matched worker settings
and at each system's defaults, in one interleaved run; the median of 5 runs, and paired ratios.

Each system has variants (its worker's settings, `bench/systems.py`). In each run every
variant comes up in turn, the order rotated by one from run to run; each phase gets a store of
its own:
- enqueue: N jobs, one call each, after one untimed call (connecting is not enqueueing), and
- bulk: the system's bulk API (ours: `enqueue_many`), where it has one: both once per system
  and run, when the system first comes up (the worker's settings do not enter them);
- drain, per variant: pre-enqueued no-op jobs, one worker process started on them; the window
  runs from the first claim the store shows to the last finish it shows, both read by polling
  the store (a poll's moment is the midpoint between it and the poll before), with the
  worker's CPU (its own and its reaped children's) and the server's CPU read at the window's
  edges; on Postgres also WAL bytes (LSN difference), statements (pg_stat_statements) and
  commits (xact_commit) per job, from the worker's start to its exit, the harness's own
  statements subtracted;
- latency, per variant: an idle worker (a warm-up job done, then a pause), then jobs at a
  steady low rate (50/s), each carrying its enqueue wall time; the job body writes its start
  time to a side file;
- stream, per variant: the same at 200 jobs/s, the rate of an external benchmark's pickup test.
Postgres is a throwaway server of the harness's own unless `--pg-url` names one. Pairs (ours
over a peer, `PAIRS`) are divided within each run, then summarised over the runs.
Results go to bench/results/<backend>-<stamp>.json; the markdown tables are printed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench.cpu import process_cpu
from bench.pg_server import postmaster_pid, throwaway_server
from bench.pickup_phases import phases
from bench.report import BEST, BUSY_LOAD, medians, ratios, render
from bench.stores import BenchError, PgServer, Progress, RedisServer, Target
from bench.systems import PAIRS, ROOT, SYSTEMS, System, Variant
from jobs_core.urls import mask_url
from jobs_pg.urls import libpq_url

RESULTS = ROOT / "bench" / "results"
# How long a worker sits idle before the latency jobs start: past its start-up bursts, into
# whatever it does when there is nothing to do (its wake, or its poll).
IDLE_SECONDS = 1.0
STOP_GRACE_SECONDS = 20.0
CLIENT_TIMEOUT_SECONDS = 300.0
# A URL of each backend, only to ask whether our driver for it is installed (nothing connects).
EXAMPLE_URLS = {"pg": "postgresql://localhost/bench", "redis": "redis://localhost/0"}


@dataclass(frozen=True)
class Config:
    runs: int
    enqueue_jobs: int
    bulk_jobs: int
    drain_jobs: int
    latency_rate: float  # jobs per second, to an idle worker
    stream_rate: float  # jobs per second, a steady stream
    latency_seconds: float
    poll_seconds: float  # between two reads of the store's progress
    stall_seconds: float  # the longest the store may show no change before the run fails


FULL = Config(
    runs=5,
    enqueue_jobs=2_000,
    bulk_jobs=20_000,
    drain_jobs=10_000,
    latency_rate=50.0,
    stream_rate=200.0,
    latency_seconds=10.0,
    poll_seconds=0.01,
    stall_seconds=60.0,
)
# Every phase of every system, small: proves the harness end to end in a minute or two.
DRY = replace(FULL, runs=1, enqueue_jobs=200, bulk_jobs=1_000, drain_jobs=500, latency_seconds=2.0)


class WorkerProcess:
    """One worker process of a system, its output in a log file."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                argv, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )

    def cpu(self) -> float:
        return process_cpu(self.proc.pid)

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise BenchError(f"worker exited ({self.proc.returncode}), {self.log}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class SystemRun:
    """The phases of one system in one run: enqueue and bulk once, drain and latency per
    variant of its worker."""

    def __init__(
        self, system: System, server: PgServer | RedisServer, config: Config, raw: Path, run: int
    ) -> None:
        self.system = system
        self.server = server
        self.config = config
        self.raw = raw
        self.run = run
        #: The worker's CPU per job sent over the last pickup phase, µs (bench/pickup_pairs.py).
        self.cpu_us_per_job = 0.0
        #: The last pickup phase's jobs split at the enqueue call's return (`_pickups`).
        self.split: dict[str, list[float]] = {}
        #: ... and its parts from the worker's probes, when BENCH_PROBE is set (pickup_phases).
        self.phases: dict[str, list[float]] = {}

    def _url(self, target: Target) -> str:
        return target.url + self.system.url_options

    def _env(self, target: Target, **extra: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_URL": self._url(target), **extra}

    def _client(
        self, target: Target, command: str, *args: object, variant: Variant | None = None
    ) -> dict[str, Any]:
        """Run one client command; with `variant`, under its environment too (`ours:base`'s
        PYTHONPATH: the producer enqueues with the other checkout's code, as its worker runs)."""
        argv = [str(self.system.python), "-m", "bench.peers.cli", self.system.name, command]
        extra = dict(variant.env) if variant is not None else {}
        try:
            done = subprocess.run(
                [*argv, *map(str, args)],
                env=self._env(target, BENCH_TAG=command, **extra),
                # `-m` puts the working directory first on the path, ahead of PYTHONPATH.
                cwd=extra.get("PYTHONPATH", ROOT),
                capture_output=True,
                text=True,
                timeout=CLIENT_TIMEOUT_SECONDS,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"{self.system.name} {command} took over {CLIENT_TIMEOUT_SECONDS:.0f} s"
            ) from None
        if done.returncode != 0:
            raise BenchError(f"{self.system.name} {command} failed:\n{done.stderr[-3000:]}")
        answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return answer

    @contextmanager
    def _store(self) -> Iterator[Target]:
        with self.server.fresh(self.system) as target:
            self._client(target, "setup")
            yield target

    def _name(self, variant: Variant, phase: str) -> str:
        """The stem of one phase's files under the raw directory."""
        return f"{self.system.name}-{variant.name}-run{self.run}-{phase}"

    @contextmanager
    def _worker(
        self, target: Target, variant: Variant, phase: str, side_file: Path | None = None
    ) -> Iterator[WorkerProcess]:
        argv = [
            part.replace("{url}", self._url(target))
            for part in (*self.system.worker, *variant.args)
        ]
        env = self._env(target, **dict(variant.env))
        if side_file is not None:
            env["BENCH_LATENCY_FILE"] = str(side_file)
            if os.environ.get("BENCH_PROBE"):
                # The worker loads bench/probe_site/sitecustomize.py (bench/pickup_phases.py).
                env["PYTHONPATH"] = f"{ROOT / 'bench' / 'probe_site'}:{env['PYTHONPATH']}"
                env["BENCH_PROBE_FILE"] = str(side_file.with_suffix(".probe"))
        worker = WorkerProcess(argv, env, self.raw / f"{self._name(variant, phase)}.log")
        try:
            yield worker
        finally:
            worker.stop()

    def _wait(
        self,
        target: Target,
        worker: WorkerProcess,
        expected: int,
        until: Callable[[Progress], bool],
        *,
        slowing: bool = False,
    ) -> tuple[float, float, Progress]:
        """Poll the store until `until` holds: (the poll before, the poll that saw it, what
        it saw). Each poll's time is taken as it is sent. `slowing` spaces the polls out to 1 %
        of the time waited so far: the moment seen stays within 0.5 % of the wait, and a slow
        drain does not carry thousands of the harness's own reads. Fails once the store shows
        no change for `stall_seconds` (a worker that errors on every claim keeps running)."""
        began = before = time.perf_counter()
        stalled_at = began + self.config.stall_seconds
        last: Progress | None = None
        while True:
            sent = time.perf_counter()
            progress = target.progress(expected)
            if until(progress):
                return before, sent, progress
            worker.check()
            if progress != last:
                last, stalled_at = progress, sent + self.config.stall_seconds
            elif sent > stalled_at:
                raise BenchError(
                    f"{self.system.name}: stuck at {progress} of {expected} jobs for"
                    f" {self.config.stall_seconds:.0f} s; see {worker.log}"
                )
            before = sent
            time.sleep(max(self.config.poll_seconds, (sent - began) / 100 if slowing else 0))

    def enqueue(self) -> float:
        with self._store() as target:
            seconds = float(self._client(target, "enqueue", self.config.enqueue_jobs)["seconds"])
        return self.config.enqueue_jobs / seconds

    def bulk(self) -> float | None:
        with self._store() as target:
            answer = self._client(target, "bulk", self.config.bulk_jobs)
        return None if answer.get("unsupported") else self.config.bulk_jobs / answer["seconds"]

    def drain(self, variant: Variant) -> dict[str, float | None]:
        """The drain's rate and CPU over its window; on Postgres also WAL bytes, statements and
        commits per job, from the worker's start to its exit: the commit count is flushed up
        to a second late by a running backend and exactly when it exits, and the three share
        one window."""
        jobs = min(self.config.drain_jobs, self.system.drain_cap or self.config.drain_jobs)

        def started(p: Progress) -> bool:
            return p.unfinished < jobs or (p.untouched is not None and p.untouched < jobs)

        with self._store() as target:
            self._client(target, "fill", jobs)
            target.settle()
            counted = target.counters()
            with self._worker(target, variant, "drain") as worker:
                before, seen, first = self._wait(target, worker, jobs, started)
                client_cpu, server_cpu = worker.cpu(), target.server_cpu()
                opened = (before + seen) / 2
                before, seen, _ = self._wait(
                    target, worker, jobs, lambda p: p.unfinished == 0, slowing=True
                )
                client_cpu = worker.cpu() - client_cpu
                server_cpu = target.server_cpu() - server_cpu
                closed = (before + seen) / 2
            recounted = target.counters()
        # The CPU window opened at a poll, when `first.unfinished` jobs were still to finish.
        per_1k = 1000 / first.unfinished
        return {
            "drain_jobs": jobs,
            "drain_per_s": jobs / (closed - opened),
            "client_cpu_s_per_1k": client_cpu * per_1k,
            "server_cpu_s_per_1k": server_cpu * per_1k,
            **(counted.per_job(recounted, jobs) if counted and recounted else {}),
        }

    def latency(self, variant: Variant) -> dict[str, float]:
        """Pickup on an idle worker: jobs at a low steady rate after a pause."""
        millis = self._pickups(
            variant, "latency", self.config.latency_rate, self.config.latency_seconds
        )
        cuts = statistics.quantiles(millis, n=100, method="inclusive")
        return {"p50_ms": cuts[49], "p95_ms": cuts[94], "p99_ms": cuts[98]}

    def stream(self, variant: Variant) -> dict[str, float]:
        """Pickup under a steady stream (the rate an external benchmark used: 200 jobs/s)."""
        millis = self._pickups(
            variant, "stream", self.config.stream_rate, self.config.latency_seconds
        )
        cuts = statistics.quantiles(millis, n=100, method="inclusive")
        return {"stream_p50_ms": cuts[49], "stream_p95_ms": cuts[94]}

    def _pickups(self, variant: Variant, phase: str, rate: float, seconds: float) -> list[float]:
        """Each job's enqueue-to-start time in ms, jobs sent at `rate` for `seconds` to a worker
        that has done a warm-up job and then sat idle."""
        side_file = self.raw / f"{self._name(variant, phase)}.txt"
        with (
            self._store() as target,
            self._worker(target, variant, phase, side_file) as worker,
        ):
            # The warm-up call enqueues two jobs: its untimed first call and one timed one.
            self._client(target, "enqueue", 1, variant=variant)
            self._wait(target, worker, 2, lambda p: p.unfinished == 0)
            time.sleep(IDLE_SECONDS)
            cpu = worker.cpu()
            answer = self._client(target, "latency", rate, seconds, variant=variant)
            sent = answer["jobs"]
            self._wait(target, worker, 2 + sent, lambda p: p.unfinished == 0)
            self.cpu_us_per_job = (worker.cpu() - cpu) / sent * 1e6
        pairs = [line.split() for line in side_file.read_text().splitlines()]
        if len(pairs) != sent:
            raise BenchError(f"{self.system.name}: {sent} {phase} jobs sent, {len(pairs)} seen")
        returned = {float(t): float(r) for t, r in answer.get("returned", ())}
        # Each job's stamp to its enqueue call's return, and that return to its body's start.
        self.split = (
            {
                "enqueue": [(returned[float(t)] - float(t)) * 1000 for t, _ in pairs],
                "after": [(float(s) - returned[float(t)]) * 1000 for t, s in pairs],
            }
            if returned
            else {}
        )
        probe = side_file.with_suffix(".probe")
        self.phases = (
            phases(probe, [(float(t), returned[float(t)], float(s)) for t, s in pairs])
            if probe.exists() and returned
            else {}
        )
        return [(float(started) - float(enqueued)) * 1000 for enqueued, started in pairs]

    def enqueueing(self) -> dict[str, float | None]:
        return {"enqueue_per_s": self.enqueue(), "bulk_per_s": self.bulk()}

    def working(self, variant: Variant) -> dict[str, float | None]:
        return {**self.drain(variant), **self.latency(variant), **self.stream(variant)}


def ours_missing(backend: str) -> str | None:
    """Why our side cannot run yet on `backend` (no driver installed for its URL scheme, or no
    worker API), else None."""
    try:
        importlib.import_module("bench.peers.ours_peer")
        from jobs_core.errors import JobsError
        from jobs_core.urls import driver_from_url
    except ImportError as exc:
        return str(exc)
    try:
        driver_from_url(EXAMPLE_URLS[backend])
    except JobsError as exc:
        return exc.message
    return None


def _run_text(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, cwd=ROOT).stdout


def _frozen(python: Path) -> list[str]:
    """`pip freeze` of an interpreter's environment; an editable install is named by its
    repository (`.`), not by where a checkout sits on the machine (a worktree's venv can point
    at another checkout than this one)."""
    lines = _run_text([str(python), "-m", "pip", "freeze", "--all"]).split()
    return ["." if line.startswith("/") and Path(line).is_dir() else line for line in lines]


def machine(server: PgServer | RedisServer, systems: list[System]) -> dict[str, Any]:
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    version_of = "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))"
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu": cpu_model,
        "python": platform.python_version(),
        "server": server.version(),
        "commit": _run_text(["git", "describe", "--always", "--dirty"]).strip(),
        "load_before": os.getloadavg(),
        "versions": {
            s.name: _run_text([str(s.python), "-c", version_of, s.package]).strip() for s in systems
        },
        "environments": {s.label: _frozen(s.python) for s in systems},
    }


def _describe(
    systems: list[System], variants: list[tuple[System, Variant]], about: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The result's `systems` (name: label, version, note) and `rows` (variant key: its
    system, name, settings, whether it is the default, how it is passed), in the table's
    order."""
    described = {
        s.name: {"label": s.label, "version": about["versions"][s.name], "note": s.worker_note}
        for s in systems
    }
    rows = {
        system.key(v): {
            "system": system.name,
            "variant": v.name,
            "settings": v.settings,
            "default": v.default,
            "passed": v.passed,
        }
        for system, v in variants
    }
    return described, rows


def _pairs(backend: str, rows: dict[str, Any], systems: list[System]) -> list[dict[str, str]]:
    """The backend's pairs whose both sides are measured in this run."""
    names = {s.name for s in systems}

    def measured(row: str) -> bool:
        system, _, variant = row.partition(":")
        return row in rows or (variant in ("", BEST) and system in names)

    return [asdict(p) for p in PAIRS[backend] if measured(p.num) and measured(p.den)]


def _selected(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> list[tuple[System, Variant]]:
    """The variants `--systems` and `--variants` leave, in the table's order."""
    systems = SYSTEMS[args.backend]
    known = {s.key(v): (s, v) for s in systems for v in s.variants}
    wanted = set(args.systems.split(",")) if args.systems else {s.name for s in systems}
    unknown = wanted - {s.name for s in systems}
    if unknown:
        parser.error(f"unknown systems for {args.backend}: {', '.join(sorted(unknown))}")
    keys = set(args.variants.split(",")) if args.variants else set(known)
    if keys - set(known):
        parser.error(
            f"unknown variants for {args.backend}: {', '.join(sorted(keys - set(known)))}"
            f" (known: {', '.join(known)})"
        )
    return [(s, v) for key, (s, v) in known.items() if key in keys and s.name in wanted]


@contextmanager
def _server(args: argparse.Namespace) -> Iterator[tuple[PgServer | RedisServer, str]]:
    """The server the run measures on, and a note on it for the report."""
    if args.backend == "redis":
        yield RedisServer(args.redis_url), f"the Redis at {args.redis_url}, as it is configured"
    elif args.pg_url:
        given = PgServer(args.pg_url)
        statements = "pg_stat_statements" if given.has_statements else "n/a: no pg_stat_statements"
        yield (
            given,
            (
                f"the given server ({mask_url(args.pg_url)}), as it is configured; WAL bytes are"
                f" the whole server's (other databases' writes count); statements: {statements}"
            ),
        )
    else:
        with throwaway_server(fsync=True) as pg:
            note = (
                "a throwaway Postgres the harness started for this run alone (initdb's"
                " defaults, fsync on, pg_stat_statements preloaded with planning tracked,"
                " track_io_timing on); server CPU is its processes alone"
            )
            yield PgServer(libpq_url(pg.url), postmaster_pid(pg)), note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run.sh", description=__doc__.split("\n")[0])
    parser.add_argument("backend", choices=sorted(SYSTEMS))
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="one small run of every phase (proves the harness; its numbers mean nothing);"
        " skips ours with a message while our driver or worker is missing",
    )
    parser.add_argument(
        "--runs", type=int, help=f"runs of every variant (default {FULL.runs}, dry run 1)"
    )
    parser.add_argument("--systems", help="comma-separated subset, e.g. ours,pgqueuer")
    parser.add_argument(
        "--variants", help="comma-separated subset of system:variant, e.g. ours:c10,pgqueuer:b10"
    )
    parser.add_argument(
        "--pg-url",
        help="measure on this server instead of a throwaway one (each system gets a fresh"
        " database beside the one named; statements per job need pg_stat_statements there)",
    )
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379",
        help="a server whose db numbers 10-13 the benchmark may flush",
    )
    args = parser.parse_args(argv)
    config = DRY if args.dry_run else FULL
    if args.runs:
        config = replace(config, runs=args.runs)

    variants = _selected(parser, args)
    missing = ours_missing(args.backend) if any(s.name == "ours" for s, _ in variants) else None
    if missing is not None:
        if not args.dry_run:
            print(f"bench: ours cannot run: {missing} (--systems runs the peers alone)")
            return 1
        print(f"bench: SKIPPING ours in this dry run: {missing}")
        variants = [(s, v) for s, v in variants if s.name != "ours"]
    systems = list({s.name: s for s, _ in variants}.values())

    load = os.getloadavg()[0]
    if load >= BUSY_LOAD:
        print(f"bench: load average {load:.2f}: other work shares the cores, numbers are noise")
    # A SIGTERM (a timeout, a kill) unwinds as Ctrl-C does, so a throwaway server goes too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = RESULTS / "raw" / f"{args.backend}-{stamp}"
    raw.mkdir(parents=True)
    with _server(args) as (server, server_note):
        about = {**machine(server, systems), "server_note": server_note}
        runs, order = measure(server, config, raw, variants)
    about["load_after"] = os.getloadavg()
    # Ours runs from the working tree: a commit landing mid-run changes what later runs measure.
    about["commit_after"] = _run_text(["git", "describe", "--always", "--dirty"]).strip()

    described, rows = _describe(systems, variants, about)
    result: dict[str, Any] = {
        "backend": args.backend,
        "dry_run": args.dry_run,
        "config": asdict(config),
        "machine": about,
        "systems": described,
        "rows": rows,
        "pairs": _pairs(args.backend, rows, systems),
        "order": order,
        "runs": runs,
    }
    result["median"] = medians(result)
    result["ratios"] = ratios(result)
    path = RESULTS / f"{args.backend}-{stamp}{'-dry' if args.dry_run else ''}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(render(result))
    print(f"\n(results: {path.relative_to(ROOT)}; worker logs: {raw.relative_to(ROOT)})")
    return 1 if any("error" in r for r in runs) else 0


def measure(
    server: PgServer | RedisServer,
    config: Config,
    raw: Path,
    variants: list[tuple[System, Variant]],
) -> tuple[list[dict[str, Any]], dict[int, list[str]]]:
    """Every run: each variant in turn (its system's enqueue and bulk first, when the system
    comes up first in the run), the order rotated by one from run to run so that no variant
    always follows the same one. Returns every record (or its error) and each run's order."""
    records: list[dict[str, Any]] = []
    order: dict[int, list[str]] = {}
    began = time.perf_counter()
    for run in range(1, config.runs + 1):
        shift = (run - 1) % len(variants)
        turn = variants[shift:] + variants[:shift]
        order[run] = [s.key(v) for s, v in turn]
        done: set[str] = set()
        for system, variant in turn:
            phases = SystemRun(system, server, config, raw, run)
            if system.name not in done:
                done.add(system.name)
                records.append(_record(run, system.name, phases.enqueueing))
            records.append(_record(run, system.key(variant), partial(phases.working, variant)))
        took = time.perf_counter() - began
        left = took / run * (config.runs - run)
        print(
            f"bench: run {run} of {config.runs} done, {took / 60:.1f} min so far"
            + (f", about {left / 60:.1f} min to go" if left else ""),
            flush=True,
        )
    return records, order


def _record(run: int, row: str, phases: Callable[[], dict[str, float | None]]) -> dict[str, Any]:
    """One row's figures in one run, or the error that stopped them: one system failing does
    not void the others' numbers, and the table says so."""
    began = time.perf_counter()
    try:
        figures = phases()
    except BenchError as exc:
        print(f"bench: run {run} {row} FAILED: {exc}", file=sys.stderr, flush=True)
        return {"run": run, "row": row, "error": str(exc)}
    print(
        f"bench: run {run} {row} in {time.perf_counter() - began:.0f} s: "
        + ", ".join(f"{k} {v:.4g}" for k, v in figures.items() if v is not None),
        flush=True,
    )
    return {"run": run, "row": row, **figures}


if __name__ == "__main__":
    sys.exit(main())
