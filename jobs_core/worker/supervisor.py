"""`ujobs worker --processes N`: one supervisor process keeping N worker processes alive.

Each child is the same `ujobs worker` a person would start by hand, started by fork+exec of
this very CLI (`python -m jobs_core.cli worker MODULE ... --supervised-by PID`), never a bare
fork: the supervisor runs an event loop, threads and (with metrics) a store connection, none
of which survives a fork, and a fresh interpreter imports the app module as a hand-started
worker would (no import-time state, pool or socket shared by accident). The children share
nothing but the store.

The supervisor
- starts the children in their own process group, so a terminal's Ctrl-C reaches it alone and
  it forwards one SIGTERM per signal it gets (the first drains every child within
  `--drain-timeout`, a second forces their exit, as for one worker);
- knows when a child has really started: each child inherits the write end of a pipe of its
  own (its number in `STARTED_FD_ENV`) and writes one line on it once its worker announced
  itself to the store and began claiming (and its `--with-scheduler`/`--with-relay` roles
  started), then closes it. A pipe, not a line on stdout: it needs no output parsing or
  flushing, works for a child started by exec, and a line written just before the child died
  is still read after its exit (the supervisor reads what the pipe holds once it reaped it);
- restarts a child that dies (a non-zero exit or a signal) after a backoff, `RestartPolicy`:
  0.5 s doubling up to 30 s for the slot, reset once a child of that slot ran 10 s past its
  start; a started child that exits 0 on its own (recycled by `--max-jobs-per-process`) is
  replaced at once;
- gives up, drains the others and exits 1 when it cannot keep them alive: 5 children in a row
  died before they started (whatever their timing: an import that fails after 30 s, a store
  that refuses after a long wait — a child that never started is no proof the group can run;
  an exit 0 before the start counts too, and so does a spawn that raised: no process at all,
  or one that began but could not be watched, ended and reaped then; the error logged as its
  exit), refused to start (exit 2, the CLI's refusal: its
  module, an option or the store's schema refused it), or died within 10 s of their start,
  while no child ran past those 10 s after its start (a module that crashes on import in a
  child, a bad environment). Only a child that started and then ran the whole window resets
  the count: a child still importing when the window would have passed does not. A store that
  is down is no reason: a worker waits for its store without exiting (and is restarted by no
  one meanwhile). `START_WINDOW_ENV` (seconds, default 10) sets the window;
- after a stop, exits 0 when every child drained and exited 0, else 1 (a child that failed its
  drain, or one still running `EXIT_GRACE_S` past the drain deadline, or past a second signal,
  then killed);
- with `--metrics-port`, serves the whole group on that one port: the children write their
  counters, histogram and live gauges through prometheus-client's multiprocess mode into a
  directory the supervisor owns (removed at exit; a dead child's live gauges are dropped with
  `mark_process_dead`, its counts kept so the group's counters never go back), and the
  supervisor adds the store's gauges once, read by itself.

A child watches its supervisor (`watch_parent`): on Linux the kernel sends it SIGTERM when the
supervisor dies (`PR_SET_PDEATHSIG`), elsewhere it polls its parent pid each second; either way
a `kill -9` of the supervisor makes every child drain and exit rather than run orphaned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Final

from jobs_core.errors import CliUsageInvalidError, OptionInvalidError
from jobs_core.options import ascii_decimal, ascii_whole

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

    from jobs_core.driver import JobDriver
    from jobs_core.operator.metrics import WorkerMetrics
    from jobs_core.worker import Worker

log = logging.getLogger("jobs")

#: The most processes one supervisor starts (a typo's guard, not a tuning limit).
MAX_PROCESSES: Final = 1_024
#: Beyond the drain deadline, how long the supervisor waits for its children before SIGKILL.
EXIT_GRACE_S: Final = 10.0
#: A child's exit status when the CLI refused it before it started (`jobs_core.cli.base._fail`).
REFUSED_EXIT: Final = 2
#: The environment variable prometheus-client's multiprocess mode reads in each child.
MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
#: The environment variable naming, in a child, the pipe it writes its start on (`ChildHooks`).
STARTED_FD_ENV: Final = "UJOBS_SUPERVISOR_STARTED_FD"
#: The environment variable setting the supervisor's start window in seconds (`RestartPolicy`).
START_WINDOW_ENV: Final = "UJOBS_SUPERVISOR_START_WINDOW"
#: The longest start window: a day.
MAX_START_WINDOW_S: Final = 86_400.0
#: What a child writes on its pipe once it started.
STARTED_LINE: Final = b"started\n"


def processes_from(text: str) -> int:
    """The number of processes `--processes` asks for: a whole number from 1 to
    `MAX_PROCESSES` in ASCII digits, or `auto` (the CPUs this process may run on); else
    `X_JOB_OPTION_INVALID` naming `--processes`."""
    text = text.strip()
    if text.lower() == "auto":
        return available_cpus()
    n = ascii_whole(text) or 0
    if not 1 <= n <= MAX_PROCESSES:
        raise OptionInvalidError(
            f"must be a whole number of processes from 1 to {MAX_PROCESSES}, or 'auto'",
            detail="--processes",
        )
    return n


def max_jobs_from(n: int | None) -> int | None:
    """`--max-jobs-per-process` checked: None (never recycle) or at least 1."""
    if n is not None and n < 1:
        raise OptionInvalidError(
            "must be 1 or more jobs (leave it out to never recycle)",
            detail="--max-jobs-per-process",
        )
    return n


def shared_store(driver: JobDriver, flag: str) -> None:
    """Refuse (`X_CLI_USAGE_INVALID`, naming `flag`: the option that asked for processes) a
    store that worker processes cannot share: the memory driver lives inside one process, so
    each worker would have a store of its own."""
    if type(driver).__module__.split(".")[0] == "jobs_memory":
        raise CliUsageInvalidError(
            "--processes and --max-jobs-per-process need a store the processes share"
            " (Postgres, Redis); the memory driver lives inside one process",
            detail=flag,
        )


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity where the OS tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not every OS has affinity
        return os.cpu_count() or 1


@dataclass
class RestartPolicy:
    """When a dead child is restarted, and when the supervisor gives up (module docstring)."""

    base_s: float = 0.5
    cap_s: float = 30.0
    start_window_s: float = 10.0
    max_early_deaths: int = 5
    #: Children in a row, group-wide, that died before they started, refused to start, or died
    #: within `start_window_s` of their start.
    early_deaths: int = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RestartPolicy:
        """The default policy, its start window taken from `START_WINDOW_ENV` when set (a
        positive number of seconds in ASCII digits, at most a day; else `X_JOB_OPTION_INVALID`
        naming the variable)."""
        text = env.get(START_WINDOW_ENV, "").strip()
        if not text:
            return cls()
        window = ascii_decimal(text) or 0.0
        if not 0 < window <= MAX_START_WINDOW_S:
            raise OptionInvalidError(
                f"must be a positive number of seconds in ASCII digits, at most"
                f" {MAX_START_WINDOW_S:g}",
                detail=START_WINDOW_ENV,
            )
        return cls(start_window_s=window)

    def survived(self) -> None:
        """A child ran past the start window after its start: the group is not crash-looping."""
        self.early_deaths = 0

    def died(
        self, failures: int, lived_s: float, refused: bool = False, started: bool = True
    ) -> float | None:
        """Seconds to wait before restarting a slot whose child died (its `failures`-th death
        in a row; `lived_s`: how long it ran after its start; `refused`: it exited 2, refused
        before it started; `started`: it said it started), or None to give up."""
        if refused or not started or lived_s < self.start_window_s:
            self.early_deaths += 1
            if self.early_deaths >= self.max_early_deaths:
                return None
        else:
            self.survived()
        return float(min(self.cap_s, self.base_s * 2 ** max(0, failures - 1)))


@dataclass
class _Slot:
    index: int
    proc: asyncio.subprocess.Process | None = None
    failures: int = 0
    #: When its child was spawned (monotonic).
    spawned_at: float = 0.0
    #: When its child said it started (monotonic), None until then.
    started_at: float | None = None
    #: The read end of the child's start pipe while it is open.
    pipe: int | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Supervisor:
    """Keeps `processes` children running `argv` (with `env`) until a signal, then drains them."""

    argv: Sequence[str]
    env: Mapping[str, str]
    processes: int
    drain_timeout_s: float
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    #: The group's multiprocess metrics directory (None: no metrics).
    metrics_dir: str | None = None
    started: int = 0
    restarts: int = 0
    recycled: int = 0
    gave_up: bool = False
    _slots: list[_Slot] = field(default_factory=list)
    _stopping: bool = False
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _unclean: list[int] = field(default_factory=list)
    #: When children still running after a stop are killed (loop time); set by the stop.
    _kill_at: float = float("inf")
    #: Set when `_kill_at` moved closer (a forcing signal).
    _hurry: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def stopping(self) -> bool:
        """A stop began (a signal, or giving up): no child starts any more."""
        return self._stopping

    @property
    def alive(self) -> list[int]:
        """Pids of the children running now."""
        return [s.proc.pid for s in self._slots if s.proc is not None and s.proc.returncode is None]

    async def run(self) -> int:
        """Run the group until SIGTERM/SIGINT (then drain) or a crash loop; the exit status:
        0 when every child drained cleanly, 1 when one did not or the supervisor gave up."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_signal, sig)
        self._slots = [_Slot(i) for i in range(self.processes)]
        tasks = [
            asyncio.create_task(self._keep(s), name=f"ujobs-slot-{s.index}") for s in self._slots
        ]
        for task in tasks:
            task.add_done_callback(self._slot_ended)
        await self._stop.wait()
        self._kill_at = min(self._kill_at, loop.time() + self.drain_timeout_s + EXIT_GRACE_S)
        late = await self._wait_out(set(tasks))
        if late:
            for pid in self.alive:
                log.error(
                    "jobs.supervisor.killed pid=%d: still running past the stop's deadline"
                    " (--drain-timeout plus %g s, or %g s after a forcing signal)",
                    pid,
                    EXIT_GRACE_S,
                    EXIT_GRACE_S,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            await asyncio.wait(late)  # each slot counts its killed child unclean
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if self.gave_up:
            return 1
        if self._unclean:
            log.error("jobs.supervisor.unclean_exit pids=%s", ",".join(map(str, self._unclean)))
            return 1
        return 0

    async def _wait_out(self, tasks: set[asyncio.Task[None]]) -> set[asyncio.Task[None]]:
        """Wait for `tasks` until `_kill_at`, which a forcing signal may bring closer; answers
        those still running then."""
        loop = asyncio.get_running_loop()
        while tasks and (left := self._kill_at - loop.time()) > 0:
            self._hurry.clear()
            hurry = asyncio.ensure_future(self._hurry.wait())
            await asyncio.wait({*tasks, hurry}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            hurry.cancel()
            tasks = {t for t in tasks if not t.done()}
        return tasks

    def _slot_ended(self, task: asyncio.Task[None]) -> None:
        """A slot whose keeping raised has nobody restarting its child: the group cannot be
        kept whole, so the supervisor gives up (drains the others, exits 1), never runs short."""
        if task.cancelled() or (exc := task.exception()) is None:
            return
        log.error(
            "jobs.supervisor.gave_up: %s stopped keeping its child; draining the others",
            task.get_name(),
            exc_info=exc,
        )
        self.gave_up = True
        self._begin_stop()

    def _on_signal(self, sig: signal.Signals) -> None:
        if not self._stopping:
            log.warning(
                "jobs.supervisor.draining on %s: %d children (again to force the exit)",
                sig.name,
                len(self.alive),
            )
        else:
            log.warning("jobs.supervisor.forcing on %s", sig.name)
            # Forced: a child that does not end within the grace (a loop blocked by a body
            # ignores its signals) is killed then, not at the end of the whole drain.
            with contextlib.suppress(RuntimeError):
                now = asyncio.get_running_loop().time()
                self._kill_at = min(self._kill_at, now + EXIT_GRACE_S)
                self._hurry.set()
        self._begin_stop()

    def _begin_stop(self) -> None:
        """Every child drains (a second call: forces) and none starts any more."""
        self._stopping = True
        self._stop.set()
        for pid in self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    async def _keep(self, slot: _Slot) -> None:
        while not self._stopping:
            rc: int | str
            try:
                proc = await self._spawn(slot)
            except Exception as exc:
                # No process started (the OS refused a fork or an exec, the loop refused an
                # argument): a death before its start, retried and counted like any other.
                pid, rc, lived, started = 0, f"none: {type(exc).__name__}: {exc}", 0.0, False
            else:
                if self.stopping:  # the stop came while this child was starting
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGTERM)
                exited = asyncio.ensure_future(proc.wait())
                ready = asyncio.ensure_future(slot.ready.wait())
                await asyncio.wait({exited, ready}, return_when=asyncio.FIRST_COMPLETED)
                ready.cancel()
                if not exited.done():  # it started: the window runs from its start
                    try:
                        await asyncio.wait_for(asyncio.shield(exited), self.policy.start_window_s)
                    except TimeoutError:
                        slot.failures = 0
                        self.policy.survived()
                pid, rc = proc.pid, await exited
                self._close_pipe(slot)  # a start written just before the exit still counts
                started = slot.started_at is not None
                lived = time.monotonic() - slot.started_at if slot.started_at is not None else 0.0
                self._dead(pid)
                if self.stopping:
                    # A child stopped before its signal handlers were in place dies of the
                    # SIGTERM: it had claimed nothing yet.
                    if rc not in (0, -signal.SIGTERM):
                        self._unclean.append(pid)
                    return
                if rc == 0 and started:  # it ended on its own: recycled after its share of jobs
                    self.recycled += 1
                    log.info("jobs.supervisor.recycled slot=%d pid=%d", slot.index, pid)
                    continue
            slot.failures += 1
            refused = rc == REFUSED_EXIT
            delay = self.policy.died(slot.failures, lived, refused=refused, started=started)
            age = time.monotonic() - slot.spawned_at
            how = f"ran {lived:.1f} s after its start" if started else "never started"
            how += f", exited {age:.1f} s after its spawn"
            if delay is None:
                log.error(
                    "jobs.supervisor.gave_up: %d children in a row died before they started or"
                    " within %g s of their start, or refused to start (the last: pid=%d exit=%s,"
                    " %s); draining the others",
                    self.policy.early_deaths,
                    self.policy.start_window_s,
                    pid,
                    rc,
                    how,
                )
                self.gave_up = True
                self._begin_stop()
                return
            log.warning(
                "jobs.supervisor.child_died slot=%d pid=%d exit=%s, %s; restart in %g s",
                slot.index,
                pid,
                rc,
                how,
                delay,
            )
            self.restarts += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)

    async def _spawn(self, slot: _Slot) -> asyncio.subprocess.Process:
        # Its own process group: a terminal's Ctrl-C reaches the supervisor alone, which
        # forwards it once (the same signal twice to a worker would force its exit).
        slot.started_at, slot.spawned_at = None, time.monotonic()
        slot.ready.clear()
        r, w = os.pipe()  # both ends close-on-exec: only this child gets `w` (pass_fds)
        try:
            env = {**self.env, STARTED_FD_ENV: str(w)}
            proc = await asyncio.create_subprocess_exec(
                *self.argv, env=env, process_group=0, pass_fds=(w,)
            )
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)  # the child's copy alone: its exit ends the pipe
        slot.proc, slot.pipe = proc, r
        try:
            os.set_blocking(r, False)
            asyncio.get_running_loop().add_reader(r, self._read_pipe, slot)
        except BaseException:
            # The child runs but cannot be watched: it is ended (and reaped) here, or it would
            # run on untracked beside its replacement; the raise counts as a failed start.
            await self._end_unwatched(slot, proc)
            raise
        self.started += 1
        log.info("jobs.supervisor.child_started slot=%d pid=%d", slot.index, proc.pid)
        return proc

    async def _end_unwatched(self, slot: _Slot, proc: asyncio.subprocess.Process) -> None:
        """End a child whose spawn raised after it began: SIGTERM (it drains what it may have
        claimed), SIGKILL past the drain's budget; it is reaped before this returns."""
        pipe, slot.pipe = slot.pipe, None
        if pipe is not None:
            with contextlib.suppress(Exception):  # it may never have been registered
                asyncio.get_running_loop().remove_reader(pipe)
            os.close(pipe)
        log.error("jobs.supervisor.spawn_failed slot=%d pid=%d: ending it", slot.index, proc.pid)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), self.drain_timeout_s + EXIT_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        self._dead(proc.pid)

    def _read_pipe(self, slot: _Slot) -> None:
        """Take the child's start line if its pipe holds it; the pipe is closed once it gave
        the line or ended (nothing else is ever written on it)."""
        if slot.pipe is None:
            return
        try:
            data = os.read(slot.pipe, len(STARTED_LINE))
        except BlockingIOError:  # nothing yet
            return
        except OSError:
            data = b""
        if data == STARTED_LINE and slot.started_at is None:
            slot.started_at = time.monotonic()
            slot.ready.set()
            pid = slot.proc.pid if slot.proc is not None else 0
            log.info("jobs.supervisor.child_ready slot=%d pid=%d", slot.index, pid)
        self._shut_pipe(slot)

    def _close_pipe(self, slot: _Slot) -> None:
        """After the child's exit: what it wrote before it died is still in the pipe, read
        now (its exit may be seen before the pipe's readiness), then the pipe is closed."""
        self._read_pipe(slot)
        self._shut_pipe(slot)

    def _shut_pipe(self, slot: _Slot) -> None:
        if slot.pipe is None:
            return
        asyncio.get_running_loop().remove_reader(slot.pipe)
        os.close(slot.pipe)
        slot.pipe = None

    def _dead(self, pid: int) -> None:
        if self.metrics_dir is not None:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, self.metrics_dir)  # type: ignore[no-untyped-call]


# -- the child's side --


def watch_parent(parent_pid: int) -> None:
    """Make this process get SIGTERM (a drain) when the supervisor `parent_pid` dies; a parent
    already gone exits it now. Linux: `PR_SET_PDEATHSIG`; elsewhere `ChildHooks` polls."""
    from jobs_core.processes import signal_on_parent_death

    signal_on_parent_death(signal.SIGTERM)
    if os.getppid() != parent_pid:  # died before the watch was set: nothing would tell us
        raise SystemExit(1)


def _started_fd(environ: MutableMapping[str, str]) -> int | None:
    """The start pipe the supervisor handed this child, taken out of the environment so that
    nothing this worker runs (the app, its subprocesses) inherits it; None when not given."""
    text = environ.pop(STARTED_FD_ENV, None)
    if text is None:
        return None
    try:
        fd = int(text)
        # Only the pipe the supervisor made: a number naming stdio or a file (a variable set
        # by hand) must be neither written to nor closed.
        if fd <= 2 or not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        os.set_inheritable(fd, False)  # a process the app starts must not hold it
    except (ValueError, OSError):
        return None
    return fd


@dataclass
class ChildHooks:
    """What a supervised worker adds to itself: recycling once it claimed `max_jobs` jobs
    (so it runs at most that many), its metrics written for the group, and the watch of its
    supervisor."""

    parent_pid: int
    max_jobs: int | None = None
    #: The pipe the supervisor reads this child's start on (None: not told, nothing to say).
    started_fd: int | None = field(default_factory=lambda: _started_fd(os.environ))
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def say_started(self) -> None:
        """Tell the supervisor this worker started (announced to its store, claiming): a death
        from now on is judged by the restart rules, no longer as a failed start. Once."""
        fd, self.started_fd = self.started_fd, None
        if fd is None:
            return
        try:
            os.write(fd, STARTED_LINE)
        except OSError as exc:  # the supervisor is gone: its death signal drains this worker
            log.warning("jobs.worker.supervisor_unreachable: %s", exc)
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)

    def attach(self, w: Worker) -> None:
        """Hook into `w` (call on its event loop, after its signal handlers are installed)."""
        if self.max_jobs is not None:
            w.limit_claims(self.max_jobs, lambda: self._recycle(w))
        if os.environ.get(MULTIPROC_ENV):
            from jobs_core.operator.metrics import WorkerMetrics

            metrics = WorkerMetrics(w, asyncio.get_running_loop(), group_child=True)
            self._tasks.append(asyncio.create_task(self._live_gauges(w, metrics)))
        self._tasks.append(asyncio.create_task(self._parent_gone(w)))

    def _recycle(self, w: Worker) -> None:
        if w.draining:
            return
        log.info(
            "jobs.worker.recycling %s after %d jobs (--max-jobs-per-process)",
            w.worker_id,
            self.max_jobs,
        )
        # Claims stopped at the Mth job and its run ended: the drain a deploy gets finds nothing
        # running (so a long body is never cut short by a recycle) and exits 0.
        os.kill(os.getpid(), signal.SIGTERM)

    async def _live_gauges(self, w: Worker, metrics: WorkerMetrics) -> None:
        stopped = asyncio.ensure_future(w._stopped.wait())
        try:
            while True:
                metrics.running.set(w.stats.running)
                metrics.in_flight.set(w.stats.in_flight)
                metrics.sync()
                if stopped.done():  # written once more after the drain: what it killed counts
                    return
                await asyncio.wait([stopped], timeout=0.5)
        finally:
            stopped.cancel()

    async def _parent_gone(self, w: Worker) -> None:
        # Where PR_SET_PDEATHSIG is missing; on Linux the kernel's SIGTERM comes first.
        while os.getppid() == self.parent_pid:  # noqa: ASYNC110 - no event tells of a new parent
            await asyncio.sleep(1.0)
        if not w.draining:
            log.warning("jobs.worker.orphaned %s: the supervisor died; draining", w.worker_id)
            os.kill(os.getpid(), signal.SIGTERM)


# -- the group's metrics --


class GroupMetrics:
    """The group's `/metrics`: what every child wrote (multiprocess mode) plus the store's
    gauges, read by the supervisor itself through `reader` (an unstarted worker)."""

    def __init__(
        self, supervisor: Supervisor, reader: Worker, loop: asyncio.AbstractEventLoop
    ) -> None:
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        from jobs_core.operator.metrics import store_collectors

        assert supervisor.metrics_dir is not None
        self.supervisor = supervisor
        self.registry = CollectorRegistry()
        MultiProcessCollector(self.registry, path=supervisor.metrics_dir)  # type: ignore[no-untyped-call]
        collectors: Iterator[Collector] = store_collectors(reader, loop)
        for c in collectors:
            self.registry.register(c)

    def render(self) -> bytes:
        from prometheus_client.exposition import generate_latest

        return generate_latest(self.registry)

    def health(self) -> tuple[int, bytes]:
        s = self.supervisor
        alive = s.alive
        ok = len(alive) == s.processes and not s.stopping
        doc = {
            "status": "ok" if ok else "unhealthy",
            "processes": s.processes,
            "alive": len(alive),
            "pids": alive,
            "restarts": s.restarts,
            "recycled": s.recycled,
            "draining": s.stopping,
        }
        return (200 if ok else 503), json.dumps(doc).encode()


def serve_group(metrics: GroupMetrics, host: str, port: int) -> ThreadingHTTPServer:
    """`/metrics` and `/healthz` of the group over HTTP, on a daemon thread; `/healthz` is 200
    while every child is alive and the group is not draining."""
    from jobs_core.operator.metrics import metrics_http_server

    server = metrics_http_server(metrics, host, port)
    threading.Thread(target=server.serve_forever, name="ujobs-metrics", daemon=True).start()
    return server


async def _open_reader(reader: Worker, stop: asyncio.Event) -> None:
    """Open the metrics reader's store, retrying while it is down (its gauges say `up 0`)."""
    from jobs_core.errors import DriverUnavailableError

    while not stop.is_set():
        try:
            await reader.driver.open()
            return
        except DriverUnavailableError as exc:
            log.warning("jobs.supervisor.metrics_store_unavailable: %s", exc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 2.0)


async def supervise_group(
    sup: Supervisor,
    reader: Worker,
    metrics_host: str,
    metrics_port: int | None,
    announce: object = None,
) -> int:
    """Run `sup` with the group's metrics on `metrics_host:metrics_port` when a port is given;
    `announce(port)` is called once the port is bound. Answers the exit status."""
    server = None
    opener = None
    if metrics_port is not None:
        metrics = GroupMetrics(sup, reader, asyncio.get_running_loop())
        server = serve_group(metrics, metrics_host, metrics_port)
        if callable(announce):
            announce(server.server_address[1])
        opener = asyncio.create_task(_open_reader(reader, sup._stop))
    try:
        return await sup.run()
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
        if opener is not None:
            opener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await opener
            with contextlib.suppress(Exception):
                await reader.driver.close()


def metrics_dir() -> str:
    """A fresh directory for the group's multiprocess metrics, owned by this process."""
    return tempfile.mkdtemp(prefix="ujobs-metrics-")


def remove_metrics_dir(path: str | None) -> None:
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
