"""The chaos run's ledger: what the bodies (and the schedulers' and relays' hooks) really did,
one JSON line per fact in an append-only file per process, fsynced before the code goes on, so
it outlives a kill -9 and a store that lost its rows.

Every body run writes a `start` line and, unless its process dies first, an `end` line saying
how it ended: `ok` (returned), `fail` (raised), `cancelled` (a drain, a lost lease or slot, a
deadline) or `parked` (a durable sleep or event wait suspended it). Families add lines of their
own (a step's side effect, a wake, a fire, a publish) with `note`.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from jobs_core import JobContext
from jobs_core.errors import AbortedError
from jobs_core.steps.suspend import StepSuspension

#: The directory the ledger files go to; set by `bench/chaos/run.py` for every process.
LEDGER_ENV: Final = "CHAOS_LEDGER_DIR"

T = TypeVar("T")


class Ledger:
    """One append-only file per process; every line is on disk before `write` returns."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def write(self, doc: dict[str, Any]) -> None:
        line = (json.dumps(doc, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None or self._pid != os.getpid():
                directory = os.environ.get(LEDGER_ENV)
                if not directory:
                    raise RuntimeError(f"{LEDGER_ENV} is not set: the chaos jobs need a ledger")
                self._pid = os.getpid()
                path = os.path.join(directory, f"ledger-{self._pid}.jsonl")
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            # One write per line: O_APPEND keeps lines whole; only a kill -9 mid-write tears one.
            os.write(self._fd, line)
            os.fsync(self._fd)


ledger = Ledger()


def now_ms() -> float:
    return time.time() * 1000


def note(ev: str, **fields: Any) -> None:
    """One fact, stamped with this process and the wall clock (ms)."""
    ledger.write({"ev": ev, **fields, "pid": os.getpid(), "t": now_ms()})


async def logged(
    inp: dict[str, Any], ctx: JobContext, body: Callable[[dict[str, Any]], Awaitable[T]]
) -> T:
    """Run `body(run)` between a `start` and an `end` line; `run` holds the fields every line of
    this run carries (its run id `r`, job, name, intent `i`, key `k`, attempt)."""
    run = {
        "r": uuid.uuid4().hex[:16],
        "job": ctx.job_id,
        "name": ctx.name,
        "i": inp["i"],
        "k": inp["k"],
        "attempt": ctx.attempt,
    }
    note("start", **run)
    try:
        result = await body(run)
    except StepSuspension:
        note("end", **run, how="parked")
        raise
    except (asyncio.CancelledError, AbortedError):
        # A drain, a lost lease or slot, a deadline: the body did not return.
        note("end", **run, how="cancelled")
        raise
    except Exception:
        note("end", **run, how="fail")
        raise
    note("end", **run, how="ok")
    return result


def read_lines(directory: Path) -> tuple[list[dict[str, Any]], int]:
    """Every line of the ledger files, and how many were torn (a kill -9 mid-write)."""
    lines: list[dict[str, Any]] = []
    torn = 0
    for path in sorted(directory.glob("ledger-*.jsonl")):
        for raw in path.read_bytes().decode("utf-8", "replace").splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                torn += 1
    return lines, torn
