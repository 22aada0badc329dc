"""What every family's scenarios share: a valid record, one claim pass, refusal checks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, TypeAlias, TypeVar

from jobs_core.driver import JobDriver, WakeSubscription
from jobs_core.errors import CapabilityMissingError, JobsError
from jobs_core.records import BuriedJob, ClaimedJob, ClaimParams, JobRecord, NewJob
from jobs_core.testing.compare import typed_json

Scenario: TypeAlias = Callable[[JobDriver], Awaitable[None]]
T = TypeVar("T")

T0 = 1_800_000_000_000


def new_job(job_id: str, **fields: Any) -> NewJob:
    """A valid record: unique key per id, queue `q`, due at `T0`, three attempts."""
    base = NewJob(
        id=job_id,
        run_id=f"run-{job_id}",
        name="n",
        queue="q",
        tenant_id=None,
        idempotency_key=f"key-{job_id}",
        input_json=json.dumps({"id": job_id}),
        priority=0,
        run_at_ms=T0,
        max_attempts=3,
        created_at_ms=T0,
    )
    return replace(base, **fields)


async def claim(
    driver: JobDriver,
    now: int,
    *queues: str,
    worker: str = "w1",
    limit: int = 10,
    lease_ms: int = 1000,
    drop_exhausted: frozenset[str] = frozenset(),
    reclaim_until_ms: int | None = None,
) -> tuple[list[ClaimedJob], list[BuriedJob]]:
    """One claim pass over `queues` (default `q`); the claimed and the buried, as lists."""
    result = await driver.job_claim(
        ClaimParams(
            queues=queues or ("q",),
            worker_id=worker,
            limit=limit,
            lease_ms=lease_ms,
            now_ms=now,
            drop_exhausted=drop_exhausted,
            reclaim_until_ms=reclaim_until_ms,
        )
    )
    return list(result.jobs), list(result.buried)


async def row(driver: JobDriver, job_id: str) -> JobRecord:
    """The row of `job_id`, which must exist."""
    rows = await driver.job_get_many([job_id])
    assert job_id in rows, f"{job_id!r} is missing"
    return rows[job_id]


async def refused(code: str, call: Awaitable[object]) -> None:
    """Await `call` and assert it raised the `JobsError` carrying `code` (a call of a family the
    driver does not declare is refused for that first: its refusal ends the scenario)."""
    try:
        answer = await call
    except CapabilityMissingError:
        if code == CapabilityMissingError.code:
            return
        raise
    except JobsError as exc:
        assert exc.code == code, f"raised {exc.code} ({exc}), expected {code}"
        return
    raise AssertionError(f"answered {answer!r}, expected a refusal {code}")


async def accepted(call: Awaitable[T], what: str) -> T:
    """Await `call`, asserting it is not refused (a refusal fails as an assertion naming it; a
    call of a family the driver does not declare ends the scenario, as `refused` says)."""
    try:
        return await call
    except CapabilityMissingError:
        raise
    except JobsError as exc:
        raise AssertionError(f"{what}: refused with {exc.code} ({exc})") from exc


def ids(jobs: list[ClaimedJob]) -> list[str]:
    """The claimed ids, in claim order."""
    return [j.id for j in jobs]


def exactly(count: int, items: Sequence[T], what: str) -> list[T]:
    """`items` as a list, asserting there are `count` of them (a clear failure, not an unpack
    error, when a driver answers more or fewer)."""
    got = list(items)
    assert len(got) == count, f"expected {count} {what}, got {len(got)}: {got!r}"
    return got


async def claim_one(driver: JobDriver, now: int, *queues: str, **options: Any) -> ClaimedJob:
    """A claim pass that must claim exactly one job and bury nothing; that job."""
    jobs, buried = await claim(driver, now, *queues, **options)
    assert buried == [], f"buried {buried!r}, expected nothing buried"
    return exactly(1, jobs, "claimed job")[0]


def same_json(text: str | None, expected: str) -> bool:
    """`text` means the same JSON as `expected`, types included (`1`, `1.0`, `true` differ)."""
    return text is not None and typed_json(text) == typed_json(expected)


async def until_live(sub: WakeSubscription, within_s: float, what: str) -> None:
    """Wait (bounded) for a subscription to go live: a channel is a hint from then on, not
    before (a LISTEN session connects in the background)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while not sub.is_live():
        assert loop.time() < deadline, f"the {what} channel was not live after {within_s} s"
        await asyncio.sleep(0.02)
