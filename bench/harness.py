"""`bench/run.sh pg|redis`: ours and the peers in one run against one server, median of 3.

For each run, each system in turn, each phase in a store of its own:
- enqueue: N jobs, one call each, after one untimed call (connecting is not enqueueing);
- bulk: the system's bulk API (ours: `enqueue_many`), where it has one;
- drain: pre-enqueued no-op jobs, one worker process started on them; the window runs from
  the first claim the store shows to the last finish it shows, both read by polling the store
  (a poll's moment is the midpoint between it and the poll before), with the worker's CPU
  (its own and its reaped children's) and the server's CPU read at the window's edges;
- latency: an idle worker (a warm-up job done, then a pause), then jobs at a steady rate, each
  carrying its enqueue wall time; the job body writes its start time to a side file.
Results go to bench/results/<backend>-<stamp>.json; the markdown table is printed.
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
from pathlib import Path
from typing import Any

from bench.cpu import process_cpu
from bench.report import BUSY_LOAD, METRICS, render
from bench.stores import BenchError, PgServer, Progress, RedisServer, Target
from bench.systems import ROOT, SYSTEMS, System

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
    latency_rate: float  # jobs per second
    latency_seconds: float
    poll_seconds: float  # between two reads of the store's progress
    stall_seconds: float  # the longest the store may show no change before the run fails


FULL = Config(
    runs=3,
    enqueue_jobs=2_000,
    bulk_jobs=20_000,
    drain_jobs=10_000,
    latency_rate=50.0,
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
    """The four phases of one system in one run."""

    def __init__(
        self, system: System, server: PgServer | RedisServer, config: Config, raw: Path, run: int
    ) -> None:
        self.system = system
        self.server = server
        self.config = config
        self.raw = raw
        self.run = run

    def _url(self, target: Target) -> str:
        return target.url + self.system.url_options

    def _env(self, target: Target, **extra: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_URL": self._url(target), **extra}

    def _client(self, target: Target, command: str, *args: object) -> dict[str, Any]:
        argv = [str(self.system.python), "-m", "bench.peers.cli", self.system.name, command]
        try:
            done = subprocess.run(
                [*argv, *map(str, args)],
                env=self._env(target, BENCH_TAG=command),
                cwd=ROOT,
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

    @contextmanager
    def _worker(
        self, target: Target, phase: str, side_file: Path | None = None
    ) -> Iterator[WorkerProcess]:
        argv = [part.replace("{url}", self._url(target)) for part in self.system.worker]
        env = self._env(target)
        if side_file is not None:
            env["BENCH_LATENCY_FILE"] = str(side_file)
        worker = WorkerProcess(
            argv, env, self.raw / f"{self.system.name}-run{self.run}-{phase}.log"
        )
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

    def drain(self) -> dict[str, float]:
        jobs = min(self.config.drain_jobs, self.system.drain_cap or self.config.drain_jobs)

        def started(p: Progress) -> bool:
            return p.unfinished < jobs or (p.untouched is not None and p.untouched < jobs)

        with self._store() as target:
            self._client(target, "fill", jobs)
            target.settle()
            with self._worker(target, "drain") as worker:
                before, seen, first = self._wait(target, worker, jobs, started)
                client_cpu, server_cpu = worker.cpu(), target.server_cpu()
                opened = (before + seen) / 2
                before, seen, _ = self._wait(
                    target, worker, jobs, lambda p: p.unfinished == 0, slowing=True
                )
                client_cpu = worker.cpu() - client_cpu
                server_cpu = target.server_cpu() - server_cpu
                closed = (before + seen) / 2
        # The CPU window opened at a poll, when `first.unfinished` jobs were still to finish.
        per_1k = 1000 / first.unfinished
        return {
            "drain_jobs": jobs,
            "drain_per_s": jobs / (closed - opened),
            "client_cpu_s_per_1k": client_cpu * per_1k,
            "server_cpu_s_per_1k": server_cpu * per_1k,
        }

    def latency(self) -> dict[str, float]:
        side_file = self.raw / f"{self.system.name}-run{self.run}-latency.txt"
        with self._store() as target, self._worker(target, "latency", side_file) as worker:
            # The warm-up call enqueues two jobs: its untimed first call and one timed one.
            self._client(target, "enqueue", 1)
            self._wait(target, worker, 2, lambda p: p.unfinished == 0)
            time.sleep(IDLE_SECONDS)
            sent = self._client(
                target, "latency", self.config.latency_rate, self.config.latency_seconds
            )["jobs"]
            self._wait(target, worker, 2 + sent, lambda p: p.unfinished == 0)
        pairs = [line.split() for line in side_file.read_text().splitlines()]
        if len(pairs) != sent:
            raise BenchError(f"{self.system.name}: {sent} latency jobs sent, {len(pairs)} seen")
        millis = [(float(started) - float(enqueued)) * 1000 for enqueued, started in pairs]
        cuts = statistics.quantiles(millis, n=100, method="inclusive")
        return {"p50_ms": cuts[49], "p99_ms": cuts[98]}

    def all(self) -> dict[str, Any]:
        return {
            "enqueue_per_s": self.enqueue(),
            "bulk_per_s": self.bulk(),
            **self.drain(),
            **self.latency(),
        }


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
            s.label: _run_text([str(s.python), "-c", version_of, s.package]).strip()
            for s in systems
        },
        "environments": {
            s.label: _run_text([str(s.python), "-m", "pip", "freeze", "--all"]).split()
            for s in systems
        },
    }


def medians(runs: list[dict[str, Any]], systems: list[System]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for system in systems:
        mine = [r for r in runs if r["system"] == system.label]
        good = [r for r in mine if "error" not in r]
        row: dict[str, Any] = {"failed_runs": len(mine) - len(good)}
        if good:
            for key in [*METRICS, "drain_jobs"]:
                values = [r[key] for r in good if r[key] is not None]
                row[key] = statistics.median(values) if values else None
        out[system.label] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/run.sh", description=__doc__.split("\n")[0])
    parser.add_argument("backend", choices=sorted(SYSTEMS))
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="one small run of every phase (proves the harness; its numbers mean nothing);"
        " skips ours with a message while our driver or worker is missing",
    )
    parser.add_argument("--runs", type=int, help="runs per system (default 3, dry run 1)")
    parser.add_argument("--systems", help="comma-separated subset, e.g. ours,pgqueuer")
    parser.add_argument(
        "--pg-url",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="a database to connect to; each system gets a fresh database beside it",
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

    systems = list(SYSTEMS[args.backend])
    if args.systems:
        wanted = set(args.systems.split(","))
        unknown = wanted - {s.name for s in systems}
        if unknown:
            parser.error(f"unknown systems for {args.backend}: {', '.join(sorted(unknown))}")
        systems = [s for s in systems if s.name in wanted]
    missing = ours_missing(args.backend) if any(s.name == "ours" for s in systems) else None
    if missing is not None:
        if not args.dry_run:
            print(f"bench: ours cannot run: {missing} (--systems runs the peers alone)")
            return 1
        print(f"bench: SKIPPING ours in this dry run: {missing}")
        systems = [s for s in systems if s.name != "ours"]

    load = os.getloadavg()[0]
    if load >= BUSY_LOAD:
        print(f"bench: load average {load:.2f}: other work shares the cores, numbers are noise")
    server: PgServer | RedisServer = (
        PgServer(args.pg_url) if args.backend == "pg" else RedisServer(args.redis_url)
    )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = RESULTS / "raw" / f"{args.backend}-{stamp}"
    raw.mkdir(parents=True)
    about = machine(server, systems)

    runs: list[dict[str, Any]] = []
    for run in range(1, config.runs + 1):
        for system in systems:
            began = time.perf_counter()
            try:
                row = SystemRun(system, server, config, raw, run).all()
            except BenchError as exc:
                # One system failing does not void the others' numbers; the table says so.
                print(f"bench: run {run} {system.label} FAILED: {exc}", file=sys.stderr)
                runs.append({"run": run, "system": system.label, "error": str(exc)})
                continue
            runs.append({"run": run, "system": system.label, **row})
            print(
                f"bench: run {run} {system.label} in {time.perf_counter() - began:.0f} s: "
                + ", ".join(f"{k} {v:.4g}" for k, v in row.items() if v is not None),
                flush=True,
            )
    about["load_after"] = os.getloadavg()
    # Ours runs from the working tree: a commit landing mid-run changes what later runs measure.
    about["commit_after"] = _run_text(["git", "describe", "--always", "--dirty"]).strip()

    result = {
        "backend": args.backend,
        "dry_run": args.dry_run,
        "config": asdict(config),
        "machine": about,
        "workers": {s.label: s.worker_note for s in systems},
        "runs": runs,
        "median": medians(runs, systems),
    }
    path = RESULTS / f"{args.backend}-{stamp}{'-dry' if args.dry_run else ''}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(render(result))
    print(f"\n(results: {path.relative_to(ROOT)}; worker logs: {raw.relative_to(ROOT)})")
    return 1 if any("error" in r for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
