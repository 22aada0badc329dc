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
from jobs_core.job import JobRegistry, job
from jobs_core.processes import ProcessContext
from jobs_core.retry import Retry

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


h_hog = job(hog, tenant="none", idempotency_key=_key, executor="process", registry=registry)
h_runaway = job(
    runaway,
    tenant=lambda i: str(i["org"]),
    idempotency_key=_key,
    executor="process",
    timeout=0.3,
    retry=RETRY_ONCE,
    registry=registry,
)
h_crash = job(
    crash,
    tenant="none",
    idempotency_key=_key,
    executor="process",
    retry=RETRY_ONCE,
    registry=registry,
)
h_fails = job(
    fails,
    tenant="none",
    idempotency_key=_key,
    executor="process",
    retry=RETRY_ONCE,
    registry=registry,
)
