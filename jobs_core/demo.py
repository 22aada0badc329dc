"""The example app `ujobs demo` runs: jobs that succeed, retry then succeed, die, and time out.

Each kind's share of the inputs is fixed, so the demo knows the outcome it promises for every
job and checks the store against it at the end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from jobs_core.context import JobContext
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.retry import Retry

registry = JobRegistry()


@job(tenant="none", idempotency_key=lambda i: f"noop:{i['n']}", registry=registry)
async def noop(input: dict[str, Any], ctx: JobContext) -> None:
    """Succeeds at once: the throughput floor."""


@job(
    tenant=lambda i: i["org"],
    idempotency_key=lambda i: f"flaky:{i['n']}",
    retry=Retry(attempts=4, base_ms=5, cap_ms=50, jitter="full"),
    registry=registry,
)
async def flaky(input: dict[str, Any], ctx: JobContext) -> dict[str, int]:
    """Fails its first two attempts, then succeeds (retries with backoff and jitter)."""
    if ctx.attempt <= 2:
        raise ConnectionError(f"upstream hiccup on attempt {ctx.attempt}")
    return {"attempts": ctx.attempt}


@job(
    tenant="none",
    idempotency_key=lambda i: f"doomed:{i['n']}",
    retry=Retry(attempts=2, base_ms=5, jitter="none"),
    registry=registry,
)
def doomed(input: dict[str, Any], ctx: JobContext) -> None:
    """Always fails (a plain `def`, run in a thread): dead-lettered after two attempts."""
    raise ValueError("this input can never be processed")


@job(
    tenant="none",
    idempotency_key=lambda i: f"slowpoke:{i['n']}",
    timeout=0.05,
    retry=Retry(attempts=2, base_ms=5, jitter="none", dead_letter=False),
    registry=registry,
)
async def slowpoke(input: dict[str, Any], ctx: JobContext) -> None:
    """Overruns its 50 ms deadline every time: cancelled, then dropped (`dead_letter=False`)."""
    await asyncio.sleep(10)


@dataclass(frozen=True)
class Kind:
    handle: JobHandle
    share: float
    #: The state every job of this kind must end in.
    final_state: str
    #: Attempts each job of this kind spends.
    attempts: int


KINDS: tuple[Kind, ...] = (
    Kind(noop, 0.90, "completed", 1),
    Kind(flaky, 0.06, "completed", 3),
    Kind(doomed, 0.03, "dead", 2),
    Kind(slowpoke, 0.01, "failed", 2),
)


def plan(total: int, *, only_noop: bool = False) -> list[tuple[Kind, list[dict[str, Any]]]]:
    """The inputs of each kind, adding up to `total`."""
    if only_noop:
        return [(KINDS[0], [{"n": n} for n in range(total)])]
    out: list[tuple[Kind, list[dict[str, Any]]]] = []
    left = total
    for i, kind in enumerate(KINDS):
        n = left if i == len(KINDS) - 1 else round(total * kind.share)
        n = min(n, left)
        left -= n
        out.append((kind, [{"n": k, "org": f"org-{k % 7}"} for k in range(n)]))
    return out


def stamp() -> float:
    return time.perf_counter()
