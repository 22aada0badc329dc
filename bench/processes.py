"""Scaling with worker processes: drains on Postgres and Redis with `--processes 1, 2, ...`,
beside PgQueuer with as many worker processes.

    bench/run.sh processes [--jobs 5000] [--processes 1,2] [--runs 1] [--concurrency 10]
    make bench-processes ARGS="--processes 1,2,4,8 --jobs 40000"

Stores: a throwaway Postgres (initdb's defaults, fsync on, as `bench/run.sh pg` starts) and a
throwaway redis-server (no persistence), each on a spare loopback port, stopped at the end:
the store's CPU is that server's alone, never another client's of the shared ones.

One drain: a fresh schema (Postgres) or key prefix (Redis); the workers are started on the
empty queue and waited for (ours: P workers in the registry; PgQueuer: P connections more on
the server), then `--jobs` no-op jobs are enqueued in bulk (ours: `enqueue_many` in batches of
1,000 from this process; PgQueuer: one `Queries.enqueue` call with lists, from its own
virtualenv). The window runs from the first job seen in the store to the last one finished, so
the enqueue overlaps the drain for both. Per drain: jobs/s, jobs/s per process, the store's CPU
per job (the server's processes, from /proc) and the workers' CPU per job (ours: the children
of the supervisor; the supervisor itself does no per-job work). Ours runs `ujobs worker
--processes P --concurrency C`; PgQueuer runs P processes of what `pgq run` runs with
`batch_size` = C (its batch is what our concurrency is matched with in `bench/run.sh pg`).

Writes bench/results/processes-<UTC stamp>.json and prints a table. On a machine shared with
other work the numbers move with its load: the load average is recorded beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PGQUEUER_PYTHON = ROOT / "bench" / ".venvs" / "pgqueuer" / "bin" / "python"
UP_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 600.0


@dataclass
class Drain:
    backend: str
    system: str
    processes: int
    concurrency: int
    jobs: int
    seconds: float
    per_s: float
    per_s_per_process: float
    store_us_per_job: float
    workers_us_per_job: float
    load: float


@dataclass
class Store:
    backend: str
    url: str  # what our driver reads, without a namespace
    admin: str  # libpq URL (Postgres) or the port (Redis)
    server_cpu: Callable[[], float]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), **(extra or {})}


def _wait(check: Callable[[], bool], within: float, what: str, every: float = 0.01) -> float:
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"bench.processes: never {what}")
        time.sleep(every)
    return time.perf_counter()


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _children(pid: int) -> list[int]:
    from bench.cpu import _stat

    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
                if int(_stat(int(entry.name))[1][1]) == pid:
                    found.append(int(entry.name))
    return found


def _cpu_of(pids: list[int]) -> float:
    from bench.cpu import process_cpu

    total = 0.0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += process_cpu(pid)
    return total


def _ours(store: Store, processes: int, concurrency: int, jobs: int) -> Drain:
    """One drain of ours at `processes` processes."""
    from jobs_core.driver import MAX_ENQUEUE_BATCH
    from jobs_core.facade import Jobs
    from jobs_core.urls import driver_from_url

    ns = "procs_" + uuid.uuid4().hex[:8]
    if store.backend == "pg":
        from jobs_pg.migrate import upgrade

        upgrade(store.url, ns)
        url = f"{store.url}?schema={ns}"
    else:
        url = f"{store.url}?prefix={ns}"
    probe, done = _probe(store, ns, jobs)
    argv = [sys.executable, "-m", "jobs_core.cli", "worker", "bench.peers.ours_peer", "--quiet"]
    argv += ["--processes", str(processes), "--concurrency", str(concurrency)]
    sup = subprocess.Popen(argv, env=_env({"UJOBS_DRIVER": url}), stdout=subprocess.DEVNULL)
    try:

        async def registered() -> int:
            async with driver_from_url(url) as driver:
                return len(await driver.worker_list(time.time_ns() // 1_000_000))

        _wait(lambda: asyncio.run(registered()) >= processes, UP_TIMEOUT_S, "up", every=0.2)
        # With one process there is no supervisor: the worker is the process started.
        workers = _children(sup.pid) if processes > 1 else [sup.pid]
        time.sleep(0.5)  # each worker's first claim pass is behind it

        async def fill() -> None:
            from bench.peers.ours_peer import noop

            async with driver_from_url(url) as driver:
                inputs = [{"k": f"{ns}-{i}"} for i in range(jobs)]
                for start in range(0, jobs, MAX_ENQUEUE_BATCH):
                    batch = inputs[start : start + MAX_ENQUEUE_BATCH]
                    await Jobs(driver).enqueue_many(noop, batch)

        filler = _in_thread(lambda: asyncio.run(fill()))
        return _measure(store, "ours", processes, concurrency, jobs, probe, done, workers, filler)
    finally:
        _stop([sup])
        _drop(store, ns)


def _pgqueuer(store: Store, processes: int, concurrency: int, jobs: int) -> Drain:
    """One drain of PgQueuer at `processes` processes of its worker."""
    env = _env({"BENCH_URL": store.admin, "BENCH_BATCH_SIZE": str(concurrency)})
    env["BENCH_TAG"] = uuid.uuid4().hex[:8]
    cli = [str(PGQUEUER_PYTHON), "-m", "bench.peers.cli", "pgqueuer"]
    probe, done = _probe(store, "", jobs)
    before = _connections(store)
    procs = [
        subprocess.Popen(
            [*cli, "worker"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]
    try:
        _wait(lambda: _connections(store) >= before + processes, UP_TIMEOUT_S, "up", every=0.2)
        time.sleep(0.5)
        filler = _in_thread(
            lambda: subprocess.run(
                [*cli, "fill", str(jobs)], env=env, cwd=ROOT, check=True, capture_output=True
            )
        )
        pids = [p.pid for p in procs]
        return _measure(store, "pgqueuer", processes, concurrency, jobs, probe, done, pids, filler)
    finally:
        _stop(procs)


def _in_thread(fn: Callable[[], Any]) -> _Filler:
    """Start `fn` on a thread now; answers its join (which re-raises what it raised)."""
    import threading

    errors: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as exc:  # re-raised by the join
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    return _Filler(t, errors)


@dataclass
class _Filler:
    thread: Any
    errors: list[BaseException]

    def filled(self) -> bool:
        return not self.thread.is_alive()

    def __call__(self) -> None:
        self.thread.join()
        if self.errors:
            raise self.errors[0]


def _measure(
    store: Store,
    system: str,
    processes: int,
    concurrency: int,
    jobs: int,
    seen: Callable[[], bool],
    done: Callable[[], bool],
    workers: list[int],
    filler: _Filler,
) -> Drain:
    server0, client0 = store.server_cpu(), _cpu_of(workers)
    began = _wait(seen, DRAIN_TIMEOUT_S, "a job in the store", every=0.002)
    # Drained: every job enqueued (the store may run dry between two batches) and finished.
    ended = _wait(lambda: filler.filled() and done(), DRAIN_TIMEOUT_S, "drained", every=0.01)
    server, client = store.server_cpu() - server0, _cpu_of(workers) - client0
    filler()
    took = ended - began
    return Drain(
        backend=store.backend,
        system=system,
        processes=processes,
        concurrency=concurrency,
        jobs=jobs,
        seconds=round(took, 3),
        per_s=round(jobs / took),
        per_s_per_process=round(jobs / took / processes),
        store_us_per_job=round(server * 1e6 / jobs, 1),
        workers_us_per_job=round(client * 1e6 / jobs, 1),
        load=round(os.getloadavg()[0], 2),
    )


def _probe(store: Store, ns: str, jobs: int) -> tuple[Callable[[], bool], Callable[[], bool]]:
    """(a job is in the store, all `jobs` are finished) for ours in `ns`, or PgQueuer (no ns)."""
    if store.backend == "redis":
        import redis

        client = redis.Redis(port=int(store.admin))
        tag = "{" + ns + "}"

        def live() -> int:
            return int(client.hlen(f"{tag}:job:live"))

        # `job:live` holds every job not yet finished.
        return (lambda: live() > 0), (lambda: live() == 0)
    import psycopg

    conn = psycopg.connect(store.admin, autocommit=True)
    if ns:
        q_seen = f'SELECT EXISTS (SELECT 1 FROM "{ns}".jobs)'
        q_done = f"SELECT count(*) FILTER (WHERE state = 'completed') = {jobs} FROM \"{ns}\".jobs"
    else:  # PgQueuer: a finished job leaves its table for the log
        q_seen = "SELECT EXISTS (SELECT 1 FROM pgqueuer) OR EXISTS (SELECT 1 FROM pgqueuer_log)"
        q_done = (
            "SELECT NOT EXISTS (SELECT 1 FROM pgqueuer WHERE status IN ('queued', 'picked'))"
            " AND EXISTS (SELECT 1 FROM pgqueuer_log)"
        )

    def ask(q: str) -> bool:
        row = conn.execute(q).fetchone()
        return bool(row and row[0])

    return (lambda: ask(q_seen)), (lambda: ask(q_done))


def _connections(store: Store) -> int:
    import psycopg

    with psycopg.connect(store.admin, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        ).fetchone()
    return int(row[0]) if row else 0


def _drop(store: Store, ns: str) -> None:
    if store.backend == "pg":
        import psycopg

        with psycopg.connect(store.admin, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{ns}" CASCADE')
    else:
        import redis

        client = redis.Redis(port=int(store.admin))
        for key in client.scan_iter(match="{" + ns + "}*", count=1000):
            client.delete(key)


def _pgqueuer_reset(store: Store) -> None:
    """PgQueuer's tables installed afresh (its `setup`), its log emptied between drains."""
    import psycopg

    env = _env({"BENCH_URL": store.admin, "BENCH_TAG": "setup"})
    with psycopg.connect(store.admin, autocommit=True) as conn:
        there = conn.execute("SELECT to_regclass('pgqueuer') IS NOT NULL").fetchone()
        if there and there[0]:
            conn.execute("TRUNCATE pgqueuer, pgqueuer_log")
            return
    cmd = [str(PGQUEUER_PYTHON), "-m", "bench.peers.cli", "pgqueuer", "setup"]
    subprocess.run(cmd, env=env, cwd=ROOT, check=True, capture_output=True)


@contextlib.contextmanager
def _stores(backends: list[str]) -> Iterator[dict[str, Store]]:
    from bench.chaos.servers import RedisStore
    from bench.cpu import cluster_cpu, process_cpu
    from bench.pg_server import postmaster_pid, throwaway_server
    from jobs_pg.urls import libpq_url

    with contextlib.ExitStack() as stack:
        stores: dict[str, Store] = {}
        if "pg" in backends:
            pg = stack.enter_context(throwaway_server(fsync=True))
            master = postmaster_pid(pg)
            stores["pg"] = Store("pg", pg.url, libpq_url(pg.url), lambda: cluster_cpu(master))
        if "redis" in backends:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-procs-"))
            rs = RedisStore(Path(tmp), aof=False)
            stack.callback(rs.close)
            pid = rs._proc.pid if rs._proc is not None else 0
            stores["redis"] = Store(
                "redis", f"redis://127.0.0.1:{rs.port}/0", str(rs.port), lambda: process_cpu(pid)
            )
        yield stores


def _table(rows: list[Drain]) -> str:
    head = "| store | system | processes | jobs/s | per process | store µs/job | workers µs/job |"
    lines = [head, "|---|---|---:|---:|---:|---:|---:|"]
    keyed: dict[tuple[str, str, int], list[Drain]] = {}
    for r in rows:
        keyed.setdefault((r.backend, r.system, r.processes), []).append(r)
    for (backend, system, n), runs in keyed.items():

        def med(attr: str, runs: list[Drain] = runs) -> float:
            return float(statistics.median(getattr(r, attr) for r in runs))

        lines.append(
            f"| {backend} | {system} | {n} | {med('per_s'):,.0f} | {med('per_s_per_process'):,.0f}"
            f" | {med('store_us_per_job'):.0f} | {med('workers_us_per_job'):.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.processes", description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--processes", default="1,2", help="comma-separated, e.g. 1,2,4,8")
    parser.add_argument("--concurrency", type=int, default=10, help="ours; PgQueuer's batch size")
    parser.add_argument("--runs", type=int, default=1, help="drains per cell (the median shown)")
    parser.add_argument("--backends", default="pg,redis")
    parser.add_argument("--no-pgqueuer", action="store_true", help="ours alone")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    backends = args.backends.split(",")
    peer = not args.no_pgqueuer and "pg" in backends
    if peer and not PGQUEUER_PYTHON.exists():
        parser.error("PgQueuer's virtualenv is missing: run through bench/run.sh processes")
    rows: list[Drain] = []
    started = datetime.now(UTC)
    with _stores(backends) as stores:
        for run in range(args.runs):
            for n in counts:
                for backend in backends:
                    # The order alternates run to run: neither meets the machine's load first.
                    systems = ["ours", "pgqueuer"] if backend == "pg" and peer else ["ours"]
                    for system in systems if run % 2 == 0 else systems[::-1]:
                        store = stores[backend]
                        if system == "pgqueuer":
                            _pgqueuer_reset(store)
                            row = _pgqueuer(store, n, args.concurrency, args.jobs)
                        else:
                            row = _ours(store, n, args.concurrency, args.jobs)
                        print(json.dumps(asdict(row)), flush=True)
                        rows.append(row)
    table = _table(rows)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"processes-{stamp}.json"
    doc = {
        "when": started.isoformat(timespec="seconds"),
        "command": "bench/run.sh processes " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg()[0],
        "drains": [asdict(r) for r in rows],
        "table": table,
    }
    out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
