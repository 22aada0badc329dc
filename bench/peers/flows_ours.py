"""Ours in `bench/flows.py`: one durable parent that fans out to N no-op children with
`ctx.step.enqueue_many` and `ctx.step.gather`s them; worked by
`ujobs worker bench.peers.flows_ours --driver <url>`.

The parent's body appends "<phase> <key> <attempt> <wall time>" lines to BENCH_FLOWS_FILE as
it passes each point (it runs twice: once to enqueue and park, once, released, to gather), so
the harness can split the parent's wake into its parts."""

from __future__ import annotations

import os
import time
from typing import Any

from jobs_core.context import JobContext
from jobs_core.job import job


def mark(phase: str, key: str, attempt: int) -> None:
    """One line of the side file, if the harness asked for one."""
    path = os.environ.get("BENCH_FLOWS_FILE")
    if path:
        with open(path, "a") as side:
            side.write(f"{phase} {key} {attempt} {time.time()}\n")


# No key function: a child's key is its derived id (ctx.step.enqueue_many gives it one).
@job(name="flows.child", queue="default", tenant="none")
async def child(inp: Any, ctx: JobContext) -> None:
    return None


@job(name="flows.parent", queue="default", tenant="none", idempotency_key=lambda i: i["k"])
async def parent(inp: Any, ctx: JobContext) -> dict[str, int]:
    key = str(inp["k"])
    mark("start", key, ctx.attempt)
    ids = await ctx.step.enqueue_many("children", child, [{"i": i} for i in range(int(inp["n"]))])
    mark("enqueued", key, ctx.attempt)
    results = await ctx.step.gather("all", ids)
    mark("gathered", key, ctx.attempt)
    # The chord's callback does the same with its list: counts it.
    return {"children": len(results)}
