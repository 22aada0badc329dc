"""The chaos run: N jobs, K `ujobs worker` processes, kill -9 and SIGTERM on a timeline, the store
stopped and started mid-run, every body's runs in a ledger outside the store; then every row read
back and the findings printed (docs/chaos.md says what each figure means).

    python -m bench.chaos.run --backend pg,redis-aof,redis-nopersist --jobs 2000 --workers 3

It starts its own throwaway store on a spare loopback port (never the shared 5432/6379) and stops
everything it started at the end, on Ctrl-C too. Exit code 1 when a hard figure is not 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from bench.chaos.figures import (
    DRAIN_MARGIN_S,
    LIVE,
    Config,
    Life,
    Row,
    analyse,
    read_answers,
    read_ledger,
    render,
    row_from_record,
)
from bench.chaos.jobs import LEDGER_ENV
from bench.chaos.proxy import AnswerDropper
from bench.chaos.servers import ROOT, PgStore, RedisStore, Store, StoreError

BACKENDS: Final = ("pg", "redis-aof", "redis-nopersist")
#: A drain still alive this long past its deadline + margin is hung: the run kills it.
HUNG_GRACE_S: Final = 10.0
#: A worker that exited on its own is replaced after this long, at most this many times.
REPLACE_AFTER_S: Final = 1.0
MAX_REPLACEMENTS: Final = 40
TICK_S: Final = 0.05
#: Answers are lost only this long after the store came back (its clients have reconnected).
LOSE_AFTER_UP_S: Final = 3.0


def now_ms() -> float:
    return time.time() * 1000


@dataclass(frozen=True)
class Event:
    """One step of the timeline, `at` seconds after the workers start."""

    at: float
    kind: str


def timeline(seconds: float, outage: float, rng: random.Random) -> list[Event]:
    """The faults of one run, in order; the same seed gives the same timeline."""

    def at(lo: float, hi: float) -> float:
        return round(rng.uniform(lo, hi) * seconds, 2)

    stop = at(0.30, 0.35)
    crash = at(0.55, 0.60)
    events = [
        Event(at(0.10, 0.15), "kill9"),
        # Answers lost while the store is up: a window that opens on a store coming back loses
        # only reconnects, which write nothing (run_backend defers it).
        Event(at(0.16, 0.19), "lose_answers"),
        Event(at(0.20, 0.25), "sigterm"),
        # The store comes back `outage` seconds after it went down (see run_backend).
        Event(stop, "store_stop"),
        Event(at(0.42, 0.48), "kill9"),
        Event(crash, "store_crash"),
        # A drain that must finish while the store is down; its replacement starts into it.
        Event(crash + min(1.0, outage / 3), "sigterm"),
        Event(at(0.50, 0.53), "lose_answers"),
        Event(at(0.80, 0.84), "lose_answers"),
        Event(at(0.72, 0.78), "store_restart"),
        Event(at(0.85, 0.90), "kill9"),
    ]
    return sorted(events, key=lambda e: e.at)


class Fleet:
    """The worker processes: started, killed, drained, replaced, each one's life recorded."""

    def __init__(self, url: str, rundir: Path, ledger: Path, args: argparse.Namespace) -> None:
        ujobs = Path(sys.executable).parent / "ujobs"
        self._cmd = [
            str(ujobs) if ujobs.exists() else (shutil.which("ujobs") or "ujobs"),
            "worker",
            "bench.chaos.jobs",
            "--driver",
            url,
            "--lease",
            str(args.lease),
            "--drain-timeout",
            str(args.drain_timeout),
            "--concurrency",
            str(args.concurrency),
            "--quiet",
        ]
        self._env = dict(os.environ, PYTHONUNBUFFERED="1", **{LEDGER_ENV: str(ledger)})
        self._rundir = rundir
        self._drain_timeout = args.drain_timeout
        self.lives: list[Life] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._replaced: set[int] = set()
        self._stopping = False
        self.replacements = 0

    def spawn(self) -> Life:
        n = len(self.lives)
        log = (self._rundir / f"worker-{n}.log").open("ab")
        proc = subprocess.Popen(
            self._cmd,
            cwd=ROOT,
            env=self._env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a Ctrl-C reaches the run, which stops its workers itself
        )
        log.close()
        life = Life(n=n, pid=proc.pid, started_t=now_ms())
        self.lives.append(life)
        self._procs[n] = proc

        def watch() -> None:
            life.rc = proc.wait()
            life.exit_t = now_ms()

        threading.Thread(target=watch, daemon=True).start()
        return life

    def active(self) -> list[Life]:
        """Workers running with no signal from the run."""
        return [
            lf
            for lf in self.lives
            if lf.exit_t is None and lf.killed_t is None and lf.term_t is None
        ]

    def kill9(self, life: Life) -> None:
        life.killed_t = now_ms()
        with contextlib.suppress(ProcessLookupError):
            self._procs[life.n].send_signal(signal.SIGKILL)

    def term(self, life: Life, store_down: bool, final: bool = False) -> None:
        life.term_t = now_ms()
        life.store_down_at_term = store_down
        life.final = final
        with contextlib.suppress(ProcessLookupError):
            self._procs[life.n].send_signal(signal.SIGTERM)

    def tick(self) -> None:
        """Replace workers that exited on their own; kill drains that hung."""
        t = now_ms()
        for lf in self.lives:
            on_own = lf.exit_t is not None and lf.killed_t is None and lf.term_t is None
            if (
                on_own
                and not self._stopping
                and lf.n not in self._replaced
                and t - (lf.exit_t or t) >= REPLACE_AFTER_S * 1000
            ):
                self._replaced.add(lf.n)
                if self.replacements < MAX_REPLACEMENTS:
                    self.replacements += 1
                    self.spawn()
            bound = (self._drain_timeout + DRAIN_MARGIN_S + HUNG_GRACE_S) * 1000
            alive = lf.term_t is not None and lf.exit_t is None and not lf.hung
            if alive and t - (lf.term_t or t) > bound:
                lf.hung = True
                with contextlib.suppress(ProcessLookupError):
                    self._procs[lf.n].send_signal(signal.SIGKILL)

    def stop_all(self, store_down: bool) -> None:
        """SIGTERM every running worker at once and wait for each (bounded by `tick`)."""
        self._stopping = True
        for lf in self.active():
            self.term(lf, store_down, final=True)
        deadline = time.monotonic() + self._drain_timeout + DRAIN_MARGIN_S + HUNG_GRACE_S + 5
        while time.monotonic() < deadline and any(lf.exit_t is None for lf in self.lives):
            self.tick()
            time.sleep(TICK_S)

    def close(self) -> None:
        """Kill whatever is still alive (the end of the run, or a Ctrl-C)."""
        for proc in self._procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for proc in self._procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        for lf in self.lives:
            log = self._rundir / f"worker-{lf.n}.log"
            if log.exists():
                tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
                lf.last_lines = " | ".join(line.strip()[:160] for line in tail[-2:])


def make_store(backend: str, tmp: Path) -> Store:
    if backend == "pg":
        return PgStore(tmp)
    if backend in ("redis-aof", "redis-nopersist"):
        return RedisStore(tmp, aof=backend == "redis-aof")
    raise SystemExit(f"unknown backend {backend!r}: one of {', '.join(BACKENDS)}")


async def read_rows(url: str, ids: set[str]) -> dict[str, Row]:
    """Every row of `ids` that exists, read through the driver."""
    from jobs_core.urls import driver_from_url

    driver = driver_from_url(url)
    rows: dict[str, Row] = {}
    async with driver:
        ordered = sorted(ids)
        for at in range(0, len(ordered), 500):
            found = await driver.job_get_many(ordered[at : at + 500])
            rows.update({i: row_from_record(rec) for i, rec in found.items()})
    return rows


def _bounded(what: str, seconds: float, done: Callable[[], bool], tick: Callable[[], None]) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if done():
            return True
        tick()
        time.sleep(0.25)
    print(f"chaos: {what} did not happen within {seconds:.0f} s", flush=True)
    return False


def run_backend(backend: str, args: argparse.Namespace) -> bool:
    """One run on one backend; True when every hard figure is 0."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    rundir = ROOT / "bench" / "results" / "raw" / f"chaos-{backend}-{stamp}"
    ledger = rundir / "ledger"
    ledger.mkdir(parents=True)
    # The ledger is written by the workers; on root they run as root too, so no chown needed.
    tmp = Path(tempfile.mkdtemp(prefix="ujobs-chaos-"))
    rng = random.Random(args.seed)
    events = timeline(args.seconds, args.outage, rng)
    store: Store | None = None
    fleet: Fleet | None = None
    producer: subprocess.Popen[bytes] | None = None
    dropper: AnswerDropper | None = None
    store_down = False
    outages: list[str] = []
    windows: list[tuple[float, float]] = []
    log: list[str] = []
    started_wall = time.time()

    def note(text: str) -> None:
        line = f"[{time.time() - started_wall:6.1f}s] {text}"
        log.append(line)
        print(f"chaos {backend} {line}", flush=True)

    try:
        store = make_store(backend, tmp)
        note(f"store up on {store.url.split('@')[-1]}")
        # The producer reaches the store through a proxy that can lose its answers.
        dropper = AnswerDropper(store.port)
        dropper.start()
        producer_url = store.url.replace(f"127.0.0.1:{store.port}", f"127.0.0.1:{dropper.port}")
        fleet = Fleet(store.url, rundir, ledger, args)
        for _ in range(args.workers):
            fleet.spawn()
        answers_path = rundir / "answers.jsonl"
        with (rundir / "producer.log").open("ab") as plog:
            producer = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.chaos.producer",
                    "--url",
                    producer_url,
                    "--jobs",
                    str(args.jobs),
                    "--seconds",
                    str(args.seconds * 0.9),
                    "--seed",
                    str(args.seed),
                    "--out",
                    str(answers_path),
                ],
                cwd=ROOT,
                stdout=plog,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        t0 = time.monotonic()
        pending = list(events)
        down_since = down_wall = up_at = back_at = 0.0
        what = ""
        while pending or store_down or time.monotonic() - t0 < args.seconds:
            if time.monotonic() - t0 > args.seconds + 120:
                note("timeline overran its bound; going on to the end")
                break
            while pending and time.monotonic() - t0 >= pending[0].at:
                if store_down and pending[0].kind.startswith("store"):
                    break  # a store fault waits for the store to be back
                settling = store_down or time.monotonic() - back_at < LOSE_AFTER_UP_S
                if settling and pending[0].kind == "lose_answers":
                    break
                ev = pending.pop(0)
                active = fleet.active()
                if ev.kind == "kill9" and active:
                    victim = rng.choice(active)
                    fleet.kill9(victim)
                    fleet.spawn()
                    note(f"kill -9 worker {victim.n} (pid {victim.pid}); started a replacement")
                elif ev.kind == "sigterm" and active:
                    victim = rng.choice(active)
                    fleet.term(victim, store_down)
                    fleet.spawn()
                    note(
                        f"SIGTERM worker {victim.n} (pid {victim.pid})"
                        f"{' while the store is down' if store_down else ''};"
                        " started a replacement"
                    )
                elif ev.kind in ("store_stop", "store_crash"):
                    down_since, down_wall = time.monotonic(), now_ms()
                    store_down = True
                    (store.stop_graceful if ev.kind == "store_stop" else store.crash)()
                    what = store.graceful_stop_text if ev.kind == "store_stop" else store.crash_text
                    up_at = down_since + args.outage
                    note(f"store down: {what}")
                elif ev.kind == "lose_answers" and args.lose_answers > 0:
                    dropper.lose_answers(args.lose_answers)
                    note(
                        f"the producer's link drops the store's answers for"
                        f" {args.lose_answers:g} s, then cuts its connections"
                    )
                elif ev.kind == "store_restart":
                    began, began_wall = time.monotonic(), now_ms()
                    store.restart()
                    back_at = time.monotonic()
                    windows.append((began_wall, now_ms()))
                    took = time.monotonic() - began
                    outages.append(f"{store.restart_text}: down {took:.1f} s")
                    note(f"store restarted ({store.restart_text}) in {took:.1f} s")
            if store_down and time.monotonic() >= up_at:
                store.start()
                store_down = False
                back_at = time.monotonic()
                windows.append((down_wall, now_ms()))
                outages.append(f"{what}: down {time.monotonic() - down_since:.1f} s")
                note(f"store up again after {time.monotonic() - down_since:.1f} s")
            fleet.tick()
            time.sleep(TICK_S)
        note("timeline done; waiting for the producer")
        proc = producer
        _bounded(
            "the producer's end", args.seconds + 120, lambda: proc.poll() is not None, fleet.tick
        )
        note(f"producer exited rc={producer.poll()}; waiting for the queue to drain")

        def drained() -> bool:
            try:
                return not any(s in LIVE for s in store.list_rows().values())
            except Exception:
                return False

        _bounded("the queue's drain", args.drain_wait, drained, fleet.tick)
        note("stopping the workers (SIGTERM, store up)")
        fleet.stop_all(store_down=False)
        fleet.close()
        answers = read_answers(answers_path)
        runs, torn = read_ledger(ledger)
        ids = set(store.list_rows())
        ids |= {a.id for a in answers if a.id is not None} | {r.job for r in runs}
        rows = asyncio.run(read_rows(store.url, ids))
        cfg = Config(
            backend, store.durable, args.lease, args.drain_timeout, args.outage, tuple(windows)
        )
        found = analyse(cfg, answers, rows, runs, fleet.lives)
        states = sorted(Counter(r.state for r in rows.values()).items())
        extra = [
            f"rows read back: {len(rows):,} ({', '.join(f'{s} {n:,}' for s, n in states)});"
            f" ledger: {len(runs):,} runs, {torn} torn lines",
            f"outages: {'; '.join(outages)}",
            f"workers started: {len(fleet.lives)} ({fleet.replacements} replacing ones that"
            " exited on their own)",
            f"run: {time.time() - started_wall:.0f} s; evidence: "
            f"{rundir.relative_to(ROOT)}/ (ledger, answers, worker logs, summary.json)",
        ]
        report = render(cfg, found, extra)
        print(report, flush=True)
        (rundir / "summary.json").write_text(
            json.dumps(
                {
                    "backend": backend,
                    "args": vars(args),
                    "events": [asdict(e) for e in events],
                    "log": log,
                    "figures": [asdict(f) for f in found.figures],
                    "breakdowns": found.breakdowns,
                    "lives": [asdict(lf) for lf in fleet.lives],
                    "passed": not found.failed,
                },
                indent=1,
            )
        )
        (rundir / "report.md").write_text(report)
        with (rundir / "rows.jsonl").open("w") as out:
            for row in rows.values():
                out.write(json.dumps(asdict(row)) + "\n")
        return not found.failed
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(timeout=10)
        if fleet is not None:
            fleet.close()
        if dropper is not None:
            dropper.close()
        if store is not None:
            with contextlib.suppress(Exception):
                store.close()
        shutil.rmtree(tmp, ignore_errors=True)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="bench.chaos.run", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument(
        "--backend",
        default=",".join(BACKENDS),
        help="comma-separated: pg, redis-aof, redis-nopersist (default: all three, in turn)",
    )
    ap.add_argument("--jobs", type=int, default=2_000, help="intents to enqueue (default 2000)")
    ap.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    ap.add_argument("--seconds", type=float, default=60.0, help="timeline length (default 60)")
    ap.add_argument("--seed", type=int, default=7, help="the timeline's and the producer's seed")
    ap.add_argument("--outage", type=float, default=3.0, help="seconds the store stays down")
    ap.add_argument(
        "--lease",
        type=float,
        default=6.0,
        help="worker --lease seconds (default 6: two thirds of it outlast a 3 s outage)",
    )
    ap.add_argument(
        "--lose-answers",
        type=float,
        default=2.0,
        help="seconds the producer's link drops the store's answers, 3 times a run (0: never)",
    )
    ap.add_argument("--drain-timeout", type=float, default=3.0, help="worker --drain-timeout")
    ap.add_argument("--concurrency", type=int, default=20, help="worker --concurrency")
    ap.add_argument(
        "--drain-wait", type=float, default=60.0, help="bound on waiting for the queue to drain"
    )
    ap.add_argument(
        "--self-check", action="store_true", help="prove every figure can be non-zero, then exit"
    )
    a = ap.parse_args(argv)
    if not 1 <= a.jobs <= 100_000 or not 1 <= a.workers <= 20:
        ap.error("--jobs must be 1..100000 and --workers 1..20")
    if not 10 <= a.seconds <= 1_800 or not 0 <= a.outage <= 120:
        ap.error("--seconds must be 10..1800 and --outage 0..120")
    return a


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.self_check:
        from bench.chaos.selfcheck import main as check

        return check()
    backends = [b.strip() for b in args.backend.split(",") if b.strip()]
    for b in backends:
        if b not in BACKENDS:
            raise SystemExit(f"unknown backend {b!r}: one of {', '.join(BACKENDS)}")
    # A SIGTERM to the run unwinds like a Ctrl-C, so every `finally` stops what it started.
    signal.signal(signal.SIGTERM, _interrupt)
    results: dict[str, bool] = {}
    try:
        for b in backends:
            try:
                results[b] = run_backend(b, args)
            except StoreError as exc:
                print(f"chaos {b}: {exc}", flush=True)
                results[b] = False
    except KeyboardInterrupt:
        print("chaos: interrupted; everything it started is stopped", flush=True)
        return 130
    for b, ok in results.items():
        print(f"chaos {b}: {'passed' if ok else 'FAILED'}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
