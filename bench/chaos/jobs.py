"""The chaos run's jobs: each body writes one ledger line when it starts and one when it ends,
to a file of its own process, fsynced before the body goes on, so the ledger outlives a kill -9
and a store that lost its rows.

Input: `{"i": intent, "k": key, "ms": sleep, "fail": attempts to fail}`; `chaos` retries,
`chaos_once` has a single attempt (a settle lost on it cannot be hidden by a retry).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from typing import Any, Final

from jobs_core import JobContext, Retry, job

#: The directory the ledger files go to; set by `bench/chaos/run.py` for every worker.
LEDGER_ENV: Final = "CHAOS_LEDGER_DIR"


class ChaosFailure(Exception):
    """A deliberate failure of an early attempt: the retry path under chaos."""


class _Ledger:
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


ledger = _Ledger()


async def _body(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    run = uuid.uuid4().hex[:16]
    base = {
        "r": run,
        "job": ctx.job_id,
        "name": ctx.name,
        "i": inp["i"],
        "k": inp["k"],
        "attempt": ctx.attempt,
        "pid": os.getpid(),
    }
    ledger.write({**base, "ev": "start", "t": time.time() * 1000})
    try:
        await asyncio.sleep(inp["ms"] / 1000)
    except asyncio.CancelledError:
        # A drain, a lost lease or a deadline: the body did not return.
        ledger.write({**base, "ev": "end", "how": "cancelled", "t": time.time() * 1000})
        raise
    if ctx.attempt <= inp["fail"]:
        ledger.write({**base, "ev": "end", "how": "fail", "t": time.time() * 1000})
        raise ChaosFailure(f"attempt {ctx.attempt} fails on purpose")
    ledger.write({**base, "ev": "end", "how": "ok", "t": time.time() * 1000})
    return {"i": inp["i"], "attempt": ctx.attempt, "pid": os.getpid()}


@job(
    name="chaos",
    queue="chaos",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=Retry(attempts=4, base_ms=100, cap_ms=1_000, jitter="full"),
)
async def chaos(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return await _body(inp, ctx)


@job(
    name="chaos_once",
    queue="chaos",
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=Retry(attempts=1),
)
async def chaos_once(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return await _body(inp, ctx)
