"""`executor="process"` bodies for the process tests: top-level functions, so that a spawned child
imports them by module and name. Each writes what a test must see outside the store (its pid,
when it ran) to files the test names in its input."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jobs_core.errors import TerminalError
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.processes import ProcessContext
from jobs_core.retry import Retry
from jobs_core.tenant import current_tenant

#: Their own registry: a test declares more handles on these names without a clash.
registry = JobRegistry()
RETRY_ONCE = Retry(attempts=2, base_ms=1, cap_ms=1, jitter="none")


def _key(input: Any) -> str:
    return str(input["n"])


def _hold_the_gil() -> None:
    """A few milliseconds of arithmetic in one C call, which never lets go of the GIL."""
    _ = 3**200_000


def hog(input: dict[str, Any], ctx: ProcessContext) -> dict[str, float]:
    """CPU-bound, holding the GIL: until the file `stop` exists (at most 20 s), or for
    `seconds` without once letting another thread of its process run. Answers when it ran."""
    if "stop" in input:
        t0 = time.time()
        stop = Path(input["stop"])
        Path(input["mark"]).write_text(str(t0))
        while not stop.exists() and time.time() - t0 < 20:
            _hold_the_gil()
        return {"t0": t0, "t1": time.time()}
    # No other thread may run until the switch interval passes: the worker's loop waits.
    before = sys.getswitchinterval()
    sys.setswitchinterval(1_000.0)
    try:
        time.sleep(0.01)  # every thread now waiting for the GIL waits under the long interval
        t0 = time.time()
        while time.time() - t0 < float(input["seconds"]):
            _hold_the_gil()
        t1 = time.time()
    finally:
        sys.setswitchinterval(before)
    return {"t0": t0, "t1": t1}


def runaway(input: dict[str, Any], ctx: ProcessContext) -> dict[str, Any]:
    """First attempt: writes its pid, then spins forever. Second: answers its pid."""
    if ctx.attempt == 1:
        Path(input["pid"]).write_text(str(os.getpid()))
        while True:
            _hold_the_gil()
    return {"pid": os.getpid(), "attempt": ctx.attempt, "tenant": ctx.tenant}


def crash(input: dict[str, Any], ctx: ProcessContext) -> int:
    """First attempt: dies as `how` says (an exit, a segfault); second: answers its pid."""
    if ctx.attempt == 1:
        if input["how"] == "exit":
            os._exit(7)
        os.kill(os.getpid(), signal.SIGSEGV)
    return os.getpid()


class _Unpicklable(Exception):
    """Carries a lock: it cannot be pickled back to the worker."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class _Unprintable(Exception):
    """Its message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def fails(input: dict[str, Any], ctx: ProcessContext) -> Any:
    """Ends as `how` says: a result with no JSON form, an exception that cannot be pickled or
    whose message cannot be read, a library error marked terminal, `sys.exit`."""
    how = input["how"]
    if how == "unprintable":
        raise _Unprintable()
    if how == "set":
        return {1, 2}
    if how == "unpicklable":
        raise _Unpicklable("held a lock")
    if how == "terminal":
        raise TerminalError("no point retrying", detail=ctx.job_id)
    sys.exit(3)


def forks(input: dict[str, Any], ctx: ProcessContext) -> dict[str, Any]:
    """First attempt: forks a process that outlives it by far (holding all its process had, the
    pipe to the worker among them; its pid written to the file `grandchild`), then dies.
    Second: answers its pid and the tenant it acts for."""
    if ctx.attempt == 1:
        pid = os.fork()
        if pid == 0:
            time.sleep(30)
            os._exit(0)
        Path(input["grandchild"]).write_text(str(pid))
        os._exit(5)
    return {"pid": os.getpid(), "tenant": ctx.tenant, "current": current_tenant()}


def forks_and_returns(input: dict[str, Any], ctx: ProcessContext) -> dict[str, Any]:
    """Forks, and the fork returns from the body as well (a careless body's would); the body
    waits for the fork to end, then answers."""
    pid = os.fork()
    if pid == 0:
        return {"from": "fork", "n": input["n"]}
    os.waitpid(pid, 0)
    return {"from": "child", "n": input["n"]}


def deafens(input: dict[str, Any], ctx: ProcessContext) -> int:
    """First attempt: writes its pid to the file `pid`, closes every descriptor past stdio (as
    a library that daemonizes does: its pipe to the worker among them) and sleeps 30 s.
    Second: answers its pid."""
    if ctx.attempt == 1:
        Path(input["pid"]).write_text(str(os.getpid()))
        os.closerange(3, 4096)
        time.sleep(30)
    return os.getpid()


def answers_then_dies(input: dict[str, Any], ctx: ProcessContext) -> int:
    """Answers its pid; a second later its process is killed (SIGKILL), idle in the pool."""

    def die() -> None:
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die, daemon=True).start()
    return os.getpid()


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def hostile(input: dict[str, Any], ctx: ProcessContext) -> Any:
    """Answers or raises what `how` names: results no store holds (a NUL, a lone surrogate,
    nested too deep, too long, a generator), an error whose message holds a NUL and a lone
    surrogate, one whose argument is nested past what pickle and repr can walk, one whose class
    exists in this process alone (the worker cannot unpickle it)."""
    how = input["how"]
    if how == "nul":
        return {"a": "x\x00y"}
    if how == "surrogate":
        return {"a": "\ud800"}
    if how == "deep":
        return _deep(50_000)
    if how == "huge":
        return "x" * 2_000_000
    if how == "generator":
        return (i for i in range(3))
    if how == "raise-text":
        raise ValueError("bad \x00 and \udc80 text")
    if how == "raise-deep":
        raise ValueError(_deep(50_000))
    here_only = type("HereOnly", (Exception,), {"__module__": __name__})
    globals()["HereOnly"] = here_only  # found by name here, never in the worker
    raise here_only("made in the child")


def _in_process(fn: Any, tenant: Any = "none", **options: Any) -> JobHandle:
    """`fn` declared `executor="process"` in this module's registry, keyed by `n`."""
    handle: JobHandle = job(
        fn, tenant=tenant, idempotency_key=_key, executor="process", registry=registry, **options
    )
    return handle


def _by_org(input: Any) -> str:
    return str(input["org"])


h_hog = _in_process(hog)
h_runaway = _in_process(runaway, _by_org, timeout=0.3, retry=RETRY_ONCE)
h_crash = _in_process(crash, retry=RETRY_ONCE)
h_fails = _in_process(fails, retry=RETRY_ONCE)
h_forks = _in_process(forks, _by_org, retry=RETRY_ONCE)
h_deafens = _in_process(deafens, retry=RETRY_ONCE)
h_answers_then_dies = _in_process(answers_then_dies)
h_hostile = _in_process(hostile, retry=Retry(attempts=1, dead_letter=False))


def _pipe_to_the_worker() -> Any:
    """This child's end of its pipe to the worker (held by the child's main loop)."""
    import gc
    from multiprocessing.connection import Connection

    (conn,) = [o for o in gc.get_objects() if isinstance(o, Connection) and not o.closed]
    return conn


def dies_mid_answer(input: dict[str, Any], ctx: ProcessContext) -> int:
    """Forks a process that outlives it by far (holding the pipe to the worker; its pid written
    to the file `grandchild`), writes the first 70 KB of a 200 KB answer, then ends as a kill
    while it wrote an answer larger than the pipe holds would end it: `how` "dies" exits at
    once, "hangs" sleeps until the worker kills it (a deadline, a cancel)."""
    import struct

    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    Path(input["grandchild"]).write_text(str(pid))
    os.write(_pipe_to_the_worker().fileno(), struct.pack("!i", 200_000) + b"x" * 70_000)
    if input["how"] == "dies":
        os._exit(9)
    time.sleep(30)
    return 0


def forks_and_answers(input: dict[str, Any], ctx: ProcessContext) -> int:
    """Forks a process that outlives it by far (holding the pipe to the worker; its pid written
    to the file `grandchild`), then answers its own pid."""
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    Path(input["grandchild"]).write_text(str(pid))
    return os.getpid()
