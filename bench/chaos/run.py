"""The chaos run: a family's workload (plain jobs, durable steps, sleeps and event waits, limits,
the scheduler, the outbox's relay) on its processes, with kill -9 and SIGTERM on a timeline, the
store stopped and started mid-run, and every side effect in a ledger outside the store; then
every row read back and the findings printed (docs/chaos.md says what each figure means).

    python -m bench.chaos.run --family jobs,steps --backend pg,redis-aof

It starts its own throwaway stores on spare loopback ports (never the shared 5432/6379) and stops
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
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from bench.chaos.families import (
    SIDECAR_ENV,
    TRAP_ENV,
    Evidence,
    Family,
    Urls,
    families,
    pick_any,
)
from bench.chaos.figures import (
    DRAIN_MARGIN_S,
    LIVE,
    Config,
    Findings,
    Life,
    Row,
    life_figures,
    render,
    row_from_record,
)
from bench.chaos.ledger import LEDGER_ENV, read_lines
from bench.chaos.proxy import AnswerDropper
from bench.chaos.servers import ROOT, PgStore, RedisStore, Store, StoreError

BACKENDS: Final = ("pg", "redis-aof", "redis-nopersist")
#: A drain still alive this long past its deadline + margin is hung: the run kills it.
HUNG_GRACE_S: Final = 10.0
#: A process that exited on its own is replaced after this long, at most this many times.
REPLACE_AFTER_S: Final = 1.0
MAX_REPLACEMENTS: Final = 40
TICK_S: Final = 0.05
#: The final drain waits for a process started this recently (see `Fleet.stop_all`).
STARTUP_S: Final = 2.0
#: Answers are lost only this long after the store came back (its clients have reconnected).
LOSE_AFTER_UP_S: Final = 3.0
#: How long a trap set for a relay may wait for one to publish before a plain kill -9 instead.
TRAP_WAIT_S: Final = 5.0
#: With an outbox, the store faults alternate between the jobs' store and the app's Postgres.
OUTBOX_TARGETS: Final = {
    "store_stop": ("jobs",),
    "store_crash": ("outbox",),
    "store_restart": ("jobs", "outbox"),
}


def now_ms() -> float:
    return time.time() * 1000


@dataclass(frozen=True)
class Event:
    """One step of the timeline, `at` seconds after the processes start."""

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
        # only reconnects, which write nothing (the run defers it).
        Event(at(0.16, 0.19), "lose_answers"),
        Event(at(0.20, 0.25), "sigterm"),
        # The store comes back `outage` seconds after it went down (see `Chaos.loop`).
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
    """The family's processes (workers, schedulers or relays): started, killed, drained,
    replaced, each one's life recorded."""

    def __init__(
        self, cmd: list[str], env: dict[str, str], rundir: Path, args: argparse.Namespace
    ) -> None:
        ujobs = Path(sys.executable).parent / "ujobs"
        self._cmd = [str(ujobs) if ujobs.exists() else (shutil.which("ujobs") or "ujobs"), *cmd]
        self._env = env
        self._rundir = rundir
        self._drain_timeout = args.drain_timeout
        self.lives: list[Life] = []
        self._procs: dict[int, subprocess.Popen[bytes]] = {}
        self._replaced: set[int] = set()
        self._stopping = False
        self.replacements = 0

    def spawn(self) -> Life:
        n = len(self.lives)
        log = (self._rundir / f"process-{n}.log").open("ab")
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
        """Processes running with no signal from the run."""
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
        """Replace processes that exited on their own; kill drains that hung."""
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
        """SIGTERM every running process at once and wait for each (bounded by `tick`).

        A process started moments ago is let finish starting first (bounded): one still
        importing has no handler yet, and dies of the signal without draining anything."""
        deadline = time.monotonic() + STARTUP_S * 5
        while time.monotonic() < deadline and not all(self.started(lf) for lf in self.active()):
            self.tick()
            time.sleep(TICK_S)
        self._stopping = True
        for lf in self.active():
            self.term(lf, store_down, final=True)
        deadline = time.monotonic() + self._drain_timeout + DRAIN_MARGIN_S + HUNG_GRACE_S + 5
        while time.monotonic() < deadline and any(lf.exit_t is None for lf in self.lives):
            self.tick()
            time.sleep(TICK_S)

    def started(self, lf: Life) -> bool:
        """Started `STARTUP_S` ago or more, and printed its banner (its handlers come next)."""
        log = self._rundir / f"process-{lf.n}.log"
        return (
            now_ms() - lf.started_t >= STARTUP_S * 1000
            and log.exists()
            and bool(log.stat().st_size)
        )

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
            log = self._rundir / f"process-{lf.n}.log"
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


def _no_live_rows(stores: Mapping[str, Store], timeline_t: float) -> bool:
    try:
        return not any(s in LIVE for s in stores["jobs"].list_rows().values())
    except Exception:
        return False


def _driver_hook(tmp: Path, scheme: str, target: str) -> Path:
    """A directory declaring the driver scheme `scheme` (entry point `target`) to every process
    that has it on its path: how a relay's publishes are observed (and trapped)."""
    dist = tmp / "hooks" / "chaoshook-1.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: chaoshook\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[ujobs.drivers]\n{scheme} = {target}\n")
    return dist.parent


class Chaos:
    """One family's run on one backend: set up, the timeline, the end, the figures."""

    def __init__(self, family: Family, backend: str, args: argparse.Namespace) -> None:
        self.family = family
        self.backend = backend
        self.args = args
        self.seconds = float(args.seconds or family.seconds)
        self.jobs = int(args.jobs or family.jobs)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.rundir = ROOT / "bench" / "results" / "raw" / f"chaos-{family.name}-{backend}-{stamp}"
        self.ledger = self.rundir / "ledger"
        self.ledger.mkdir(parents=True)
        self.trap = self.rundir / "trap"
        self.tmp = Path(tempfile.mkdtemp(prefix="ujobs-chaos-"))
        self.rng = random.Random(args.seed)
        self.events = timeline(self.seconds, args.outage, self.rng)
        self.stores: dict[str, Store] = {}
        self.fleet: Fleet | None = None
        self.feeder: subprocess.Popen[bytes] | None = None
        self.sidecar: subprocess.Popen[bytes] | None = None
        self.dropper: AnswerDropper | None = None
        #: Stores down now, by role: (monotonic since, wall ms since, what was done).
        self.down: dict[str, tuple[float, float, str]] = {}
        self.back_at = 0.0
        self.trap_until: float | None = None
        self.outages: list[str] = []
        #: When the jobs' store was down (wall ms): settles lost then may be excused.
        self.windows: list[tuple[float, float]] = []
        self.log: list[str] = []
        self.started_wall = time.time()

    def note(self, text: str) -> None:
        line = f"[{time.time() - self.started_wall:6.1f}s] {text}"
        self.log.append(line)
        print(f"chaos {self.family.name} {self.backend} {line}", flush=True)

    def run(self) -> bool:
        """True when every hard figure is 0; everything started is stopped, whatever happens."""
        try:
            return self._run()
        finally:
            if self.feeder is not None and self.feeder.poll() is None:
                self.feeder.kill()
                self.feeder.wait(timeout=10)
            if self.fleet is not None:
                self.fleet.close()
            if self.sidecar is not None and self.sidecar.poll() is None:
                self.sidecar.kill()
                self.sidecar.wait(timeout=10)
            if self.dropper is not None:
                self.dropper.close()
            for store in self.stores.values():
                with contextlib.suppress(Exception):
                    store.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _run(self) -> bool:
        fam, args = self.family, self.args
        jobs_store = self.stores["jobs"] = make_store(self.backend, self.tmp)
        self.note(f"store up on {jobs_store.url.split('@')[-1]}")
        if fam.outbox:
            self.stores["outbox"] = PgStore(self.tmp, "outbox")
            self.note(f"the app's Postgres (the outbox) up on port {self.stores['outbox'].port}")
        self.dropper = AnswerDropper(jobs_store.port)
        self.dropper.start()
        proxied = jobs_store.url.replace(
            f"127.0.0.1:{jobs_store.port}", f"127.0.0.1:{self.dropper.port}"
        )
        outbox = self.stores.get("outbox")
        urls = Urls(jobs_store.url, proxied, outbox.url if outbox else None, str(self.rundir))
        path = [str(ROOT)]
        if fam.driver_hook is not None:
            path.append(str(_driver_hook(self.tmp, *fam.driver_hook)))
        env = dict(
            os.environ,
            PYTHONUNBUFFERED="1",
            PYTHONPATH=os.pathsep.join(path),
            **{LEDGER_ENV: str(self.ledger), TRAP_ENV: str(self.trap)},
        )
        if fam.sidecar:
            env[SIDECAR_ENV] = self.start_sidecar(fam.sidecar, env)
        cmd, more_env = fam.fleet(urls, args)
        self.fleet = Fleet(cmd, {**env, **more_env}, self.rundir, args)
        for _ in range(fam.fleet_size or args.workers):
            self.fleet.spawn()
        answers_path = self.rundir / "answers.jsonl"
        if fam.feed:
            feed_url = urls.proxied if fam.feed_proxied else (urls.outbox or urls.jobs)
            with (self.rundir / "feed.log").open("ab") as flog:
                self.feeder = subprocess.Popen(
                    [
                        sys.executable,
                        *fam.feed,
                        "--url",
                        feed_url,
                        "--jobs",
                        str(self.jobs),
                        "--seconds",
                        str(self.seconds * 0.9),
                        "--seed",
                        str(args.seed),
                        "--out",
                        str(answers_path),
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=flog,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        started_t = now_ms()
        self.loop()
        timeline_t = now_ms()
        fleet = self.fleet
        if self.feeder is not None:
            feeder = self.feeder
            self.note("timeline done; waiting for the feed")
            _bounded(
                "the feed's end", self.seconds + 120, lambda: feeder.poll() is not None, fleet.tick
            )
            self.note(f"feed exited rc={feeder.poll()}; waiting for what is left to finish")
        drained = fam.drained or _no_live_rows
        _bounded("the drain", args.drain_wait, lambda: drained(self.stores, timeline_t), fleet.tick)
        self.note("stopping the processes (SIGTERM, store up)")
        ended_t = now_ms()
        fleet.stop_all(store_down=False)
        fleet.close()
        answers = [
            json.loads(line)
            for line in (
                answers_path.read_text(encoding="utf-8").splitlines()
                if answers_path.exists()
                else []
            )
        ]
        lines, torn = read_lines(self.ledger)
        ids = set(jobs_store.list_rows())
        ids |= {str(a["id"]) for a in answers if a.get("id")}
        ids |= {str(d["job"]) for d in lines if d.get("job")}
        rows = asyncio.run(read_rows(jobs_store.url, ids))
        extra = fam.gather(urls, self.stores) if fam.gather else {}
        cfg = Config(
            self.backend,
            jobs_store.durable,
            args.lease,
            args.drain_timeout,
            args.outage,
            tuple(self.windows),
            fam.name,
            started_t,
            ended_t,
            timeline_t,
        )
        own = fam.analyse(Evidence(cfg, answers, rows, lines, fleet.lives, extra))
        found = Findings(own.figures + life_figures(cfg, fleet.lives), own.breakdowns)
        states = sorted(Counter(r.state for r in rows.values()).items())
        report = render(
            cfg,
            found,
            [
                f"rows read back: {len(rows):,} ({', '.join(f'{s} {n:,}' for s, n in states)});"
                f" ledger: {len(lines):,} lines, {torn} torn",
                f"outages: {'; '.join(self.outages)}",
                f"processes started: {len(fleet.lives)} ({fleet.replacements} replacing ones"
                " that exited on their own)",
                f"run: {time.time() - self.started_wall:.0f} s; evidence: "
                f"{self.rundir.relative_to(ROOT)}/ (ledger, answers, process logs, summary.json)",
            ],
        )
        print(report, flush=True)
        (self.rundir / "summary.json").write_text(
            json.dumps(
                {
                    "family": fam.name,
                    "backend": self.backend,
                    "config": asdict(cfg),
                    "extra": extra,
                    "args": vars(args),
                    "events": [asdict(e) for e in self.events],
                    "log": self.log,
                    "figures": [asdict(f) for f in found.figures],
                    "breakdowns": found.breakdowns,
                    "lives": [asdict(lf) for lf in fleet.lives],
                    "passed": not found.failed,
                },
                indent=1,
            )
        )
        (self.rundir / "report.md").write_text(report)
        with (self.rundir / "rows.jsonl").open("w") as out:
            for row in rows.values():
                out.write(json.dumps(asdict(row)) + "\n")
        return not found.failed

    def start_sidecar(self, module_args: tuple[str, ...], env: dict[str, str]) -> str:
        """Start the family's sidecar on a spare loopback port; answers its URL once it
        listens (bounded)."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with (self.rundir / "sidecar.log").open("ab") as slog:
            self.sidecar = subprocess.Popen(
                [sys.executable, *module_args, "--port", str(port), "--seed", str(self.args.seed)],
                cwd=ROOT,
                env=env,
                stdout=slog,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        def listening() -> bool:
            with socket.socket() as s, contextlib.suppress(OSError):
                s.settimeout(0.5)
                s.connect(("127.0.0.1", port))
                return True
            return False

        if not _bounded("the sidecar's start", 20, listening, lambda: None):
            raise StoreError("the family's sidecar did not listen")
        self.note(f"sidecar up on 127.0.0.1:{port}")
        return f"http://127.0.0.1:{port}"

    def loop(self) -> None:
        """The timeline: each event when due, the stores back `--outage` seconds after each
        stop, a trap sprung, dead processes replaced; bounded in time."""
        assert self.fleet is not None
        t0 = time.monotonic()
        pending = list(self.events)
        while pending or self.down or self.trap_until or time.monotonic() - t0 < self.seconds:
            if time.monotonic() - t0 > self.seconds + 120:
                self.note("timeline overran its bound; going on to the end")
                break
            while pending and time.monotonic() - t0 >= pending[0].at:
                if self.down and pending[0].kind.startswith("store"):
                    break  # a store fault waits for the stores to be back
                settling = self.down or time.monotonic() - self.back_at < LOSE_AFTER_UP_S
                if settling and pending[0].kind == "lose_answers":
                    break
                self.fire(pending.pop(0))
            for role, (since, wall, what) in list(self.down.items()):
                if time.monotonic() >= since + self.args.outage:
                    self.stores[role].start()
                    del self.down[role]
                    self.back_at = time.monotonic()
                    if role == "jobs":
                        self.windows.append((wall, now_ms()))
                    took = time.monotonic() - since
                    self.outages.append(f"{self._label(role)}{what}: down {took:.1f} s")
                    self.note(f"{self._label(role)}store up again after {took:.1f} s")
            self.spring_trap()
            self.fleet.tick()
            time.sleep(TICK_S)

    def _label(self, role: str) -> str:
        return "" if role == "jobs" or not self.family.outbox else f"{role} "

    def fire(self, ev: Event) -> None:
        assert self.fleet is not None and self.dropper is not None
        fleet, fam = self.fleet, self.family
        targets = OUTBOX_TARGETS.get(ev.kind, ("jobs",)) if fam.outbox else ("jobs",)
        if ev.kind == "kill9" and fam.trap:
            self.trap.write_text("set")
            self.trap_until = time.monotonic() + TRAP_WAIT_S
            self.note("trap set: the next relay to publish hangs before its mark")
        elif ev.kind in ("kill9", "sigterm"):
            # A drain is timed on a process that has started: one still importing has no
            # handler yet, and dies of the signal.
            active = fleet.active()
            if ev.kind == "sigterm":
                active = [lf for lf in active if fleet.started(lf)] or active
            victim = fam.pick(ev.kind, active, self.rundir, self.rng)
            if victim is None:
                return
            if ev.kind == "kill9":
                fleet.kill9(victim)
            else:
                fleet.term(victim, bool(self.down))
            fleet.spawn()
            self.note(
                f"{'kill -9' if ev.kind == 'kill9' else 'SIGTERM'} process {victim.n}"
                f" (pid {victim.pid}){' while the store is down' if self.down else ''};"
                " started a replacement"
            )
        elif ev.kind in ("store_stop", "store_crash"):
            for role in targets:
                store = self.stores[role]
                what = store.graceful_stop_text if ev.kind == "store_stop" else store.crash_text
                # Down from the moment the stop begins: a fast stop cuts sessions at once.
                self.down[role] = (time.monotonic(), now_ms(), what)
                (store.stop_graceful if ev.kind == "store_stop" else store.crash)()
                self.note(f"{self._label(role)}store down: {what}")
        elif ev.kind == "lose_answers" and self.args.lose_answers > 0:
            self.dropper.lose_answers(self.args.lose_answers)
            self.note(
                f"the link through the proxy drops the store's answers for"
                f" {self.args.lose_answers:g} s, then cuts its connections"
            )
        elif ev.kind == "store_restart":
            for role in targets:
                store = self.stores[role]
                began, began_wall = time.monotonic(), now_ms()
                store.restart()
                self.back_at = time.monotonic()
                if role == "jobs":
                    self.windows.append((began_wall, now_ms()))
                took = time.monotonic() - began
                self.outages.append(f"{self._label(role)}{store.restart_text}: down {took:.1f} s")
                self.note(
                    f"{self._label(role)}store restarted ({store.restart_text}) in {took:.1f} s"
                )

    def spring_trap(self) -> None:
        """Kill -9 the relay that fell into the trap (between its publish and its mark); one
        that never published within `TRAP_WAIT_S` gets a plain kill -9 instead."""
        if self.trap_until is None:
            return
        assert self.fleet is not None
        fleet = self.fleet
        for caught in self.rundir.glob("trap.[0-9]*"):
            pid = int(caught.suffix[1:])
            victim = next((lf for lf in fleet.lives if lf.pid == pid), None)
            caught.unlink()
            self.trap_until = None
            if victim is not None and victim.exit_t is None:
                fleet.kill9(victim)
                fleet.spawn()
                self.note(
                    f"kill -9 relay {victim.n} (pid {victim.pid}) between its publish and its"
                    " mark; started a replacement"
                )
            return
        if time.monotonic() < self.trap_until:
            return
        try:
            self.trap.rename(self.rundir / "trap-unsprung")
        except FileNotFoundError:
            return  # a relay fell in just now: the next tick kills it
        self.trap_until = None
        victim = pick_any("kill9", fleet.active(), self.rundir, self.rng)
        if victim is not None:
            fleet.kill9(victim)
            fleet.spawn()
            self.note(
                f"no relay published within {TRAP_WAIT_S:g} s: kill -9 relay {victim.n}"
                f" (pid {victim.pid}) anywhere; started a replacement"
            )


def reanalyse(rundir: Path) -> tuple[Config, Findings]:
    """The figures of a finished run again, from the evidence it left in `rundir` (after a
    change to a family's figures, or to read one figure's examples in full)."""
    summary = json.loads((rundir / "summary.json").read_text())
    c = summary["config"]
    cfg = Config(**{**c, "outages": tuple(tuple(w) for w in c["outages"])})
    lives = [Life(**lf) for lf in summary["lives"]]
    answers_path = rundir / "answers.jsonl"
    answers = (
        [json.loads(line) for line in answers_path.read_text().splitlines()]
        if answers_path.exists()
        else []
    )
    rows = {
        r["id"]: Row(**r) for r in map(json.loads, (rundir / "rows.jsonl").read_text().splitlines())
    }
    lines, _ = read_lines(rundir / "ledger")
    own = families()[summary["family"]].analyse(
        Evidence(cfg, answers, rows, lines, lives, summary.get("extra") or {})
    )
    return cfg, Findings(own.figures + life_figures(cfg, lives), own.breakdowns)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    known = families()
    ap = argparse.ArgumentParser(
        prog="bench.chaos.run",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
        epilog="families:\n"
        + "\n".join(f"  {f.name}: {f.title} (on {', '.join(f.backends)})" for f in known.values()),
    )
    ap.add_argument(
        "--family",
        default=",".join(known),
        help=f"comma-separated: {', '.join(known)} (default: all, in turn)",
    )
    ap.add_argument(
        "--backend",
        default=",".join(BACKENDS),
        help="comma-separated: pg, redis-aof, redis-nopersist (default: all three, in turn;"
        " a family runs on those it names)",
    )
    ap.add_argument(
        "--jobs", type=int, default=None, help="jobs (or stages) fed (default: the family's)"
    )
    ap.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    ap.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="timeline length (default: the family's, 60 for jobs, 30 for the others)",
    )
    ap.add_argument("--seed", type=int, default=7, help="the timeline's and the feed's seed")
    ap.add_argument("--outage", type=float, default=3.0, help="seconds a store stays down")
    ap.add_argument(
        "--lease",
        type=float,
        default=6.0,
        help="--lease of every process (default 6: two thirds of it outlast a 3 s outage)",
    )
    ap.add_argument(
        "--lose-answers",
        type=float,
        default=2.0,
        help="seconds the proxy drops the store's answers, 3 times a run (0: never)",
    )
    ap.add_argument("--drain-timeout", type=float, default=3.0, help="--drain-timeout")
    ap.add_argument("--concurrency", type=int, default=20, help="worker --concurrency")
    ap.add_argument(
        "--drain-wait", type=float, default=60.0, help="bound on waiting for the work to finish"
    )
    ap.add_argument(
        "--self-check", action="store_true", help="prove every figure can be non-zero, then exit"
    )
    ap.add_argument(
        "--reanalyse",
        metavar="RUNDIR",
        type=Path,
        help="print the figures of a finished run again from its evidence, then exit",
    )
    a = ap.parse_args(argv)
    if (a.jobs is not None and not 1 <= a.jobs <= 100_000) or not 1 <= a.workers <= 20:
        ap.error("--jobs must be 1..100000 and --workers 1..20")
    if (a.seconds is not None and not 10 <= a.seconds <= 1_800) or not 0 <= a.outage <= 120:
        ap.error("--seconds must be 10..1800 and --outage 0..120")
    a.families = [f.strip() for f in a.family.split(",") if f.strip()]
    a.backends = [b.strip() for b in a.backend.split(",") if b.strip()]
    for f in a.families:
        if f not in known:
            ap.error(f"unknown family {f!r}: one of {', '.join(known)}")
    for b in a.backends:
        if b not in BACKENDS:
            ap.error(f"unknown backend {b!r}: one of {', '.join(BACKENDS)}")
    return a


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.self_check:
        from bench.chaos.selfcheck import main as check

        return check([families()[f] for f in args.families])
    if args.reanalyse is not None:
        cfg, found = reanalyse(args.reanalyse)
        print(render(cfg, found, [f"(again, from {args.reanalyse})"]))
        return 1 if found.failed else 0
    # A SIGTERM to the run unwinds like a Ctrl-C, so every `finally` stops what it started.
    signal.signal(signal.SIGTERM, _interrupt)
    results: dict[str, bool] = {}
    known = families()
    try:
        for name in args.families:
            family = known[name]
            for b in args.backends:
                if b not in family.backends:
                    runs_on = ", ".join(family.backends)
                    print(f"chaos {name} {b}: not run (the family runs on {runs_on})")
                    continue
                try:
                    results[f"{name} on {b}"] = Chaos(family, b, args).run()
                except StoreError as exc:
                    print(f"chaos {name} {b}: {exc}", flush=True)
                    results[f"{name} on {b}"] = False
    except KeyboardInterrupt:
        print("chaos: interrupted; everything it started is stopped", flush=True)
        return 130
    for what, ok in results.items():
        print(f"chaos {what}: {'passed' if ok else 'FAILED'}")
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
