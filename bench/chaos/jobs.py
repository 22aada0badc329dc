"""The chaos run's plain jobs: each body writes a ledger line when it starts and one when it
ends (`bench/chaos/ledger.py`), so the ledger outlives a kill -9 and a store that lost its rows.

Input: `{"i": intent, "k": key, "ms": sleep, "fail": attempts to fail}`; `chaos` retries,
`chaos_once` has a single attempt (a settle lost on it cannot be hidden by a retry).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from bench.chaos.ledger import logged
from jobs_core import JobContext, Retry, job


class ChaosFailure(Exception):
    """A deliberate failure of an early attempt: the retry path under chaos."""


async def _body(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    async def body(run: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(inp["ms"] / 1000)
        if ctx.attempt <= inp["fail"]:
            raise ChaosFailure(f"attempt {ctx.attempt} fails on purpose")
        return {"i": inp["i"], "attempt": ctx.attempt, "pid": os.getpid()}

    return await logged(inp, ctx, body)


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
