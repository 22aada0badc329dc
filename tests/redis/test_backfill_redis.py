"""`backfill(pages=...)` with its ledger in the Redis driver, in windows of two batches: a
tenant's sweep killed right after a window's checkpoint landed resumes after it (replayed from
its record, nothing handled again, each batch counted once, nothing of the other tenant read);
another tenant's, under a real worker, fails an attempt in its window's second batch and resumes
at the window's start; `ujobs backfills` reads both back on the store's URL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner

from jobs_core.cli import main
from jobs_core.clock import FakeClock, SystemClock
from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.factories.backfill import Backfill, BackfillRegistry, backfill
from jobs_core.job import JobRegistry
from jobs_core.jsonform import loads
from jobs_core.records import ClaimParams, SweepCheckpoint
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.tenant import acting_for, current_tenant
from jobs_core.worker import Worker
from jobs_redis import RedisDriver
from tests.core.support import fresh_store, until
from tests.redis.conftest import REDIS_URL

ROWS = {"org-a": [f"a{i}" for i in range(23)], "org-b": [f"b{i}" for i in range(9)]}
LEASE_MS = 1_000


class Crash(BaseException):
    """A process killed where it stands."""


async def attempt(driver: RedisDriver, clock: FakeClock, handle: Backfill) -> Any:
    """Claim the sweep's job (its previous lease lapsed) and run its body as a worker would."""
    clock.set(clock.now_ms() + LEASE_MS)
    got = await driver.job_claim(ClaimParams(("default",), "w", 1, LEASE_MS, clock.now_ms()))
    (job,) = got.jobs
    value = loads(job.input_json)
    tenant = handle.tenant_for(value)
    ctx = JobContext.for_test(job, driver, tenant=tenant, clock=clock)
    with acting_for(tenant):
        return await handle.fn(value, ctx)


async def test_a_tenants_pages_sweep_resumes_where_it_stopped_and_counts_each_batch_once() -> None:
    asked: set[tuple[str, str | None]] = set()
    handled: list[list[str]] = []

    def pages(cursor: Any, scope: str, limit: int) -> tuple[list[str], Any]:
        asked.add((scope, current_tenant()))
        start = 0 if cursor is None else int(cursor)
        mine = ROWS.get(scope, [])
        return mine[start : start + limit], (start + limit if start + limit < len(mine) else None)

    def handle(rows: list[str]) -> None:
        handled.append(rows)
        if rows[0].startswith("a"):
            clock.set(clock.now_ms() + 600)  # a window of a second holds two batches
        if rows == ROWS["org-b"][5:] and sum(h == rows for h in handled) == 1:
            raise RuntimeError("org-b's first attempt fails in batch 1, its window's second")

    bf = backfill(
        name="orgs",
        tenant=lambda i: i["org"],
        handle=handle,
        pages=pages,
        count=len(ROWS["org-a"]),
        retry=Retry(attempts=2, base_ms=1, cap_ms=1),
        registry=JobRegistry(),
        backfills=BackfillRegistry(),
        batch=5,
        checkpoint_s=1,
    )
    async with fresh_store("redis") as driver:
        assert isinstance(driver, RedisDriver)
        checkpoint = driver._sweep_checkpoint

        async def killed_as_it_lands(c: SweepCheckpoint) -> bool:
            landed = await checkpoint(c)
            if c.step.name == "batch:2" and len(handled) == 4:
                raise Crash  # batches 2 and 3 handled, recorded and counted; the run never knew
            return landed

        driver._sweep_checkpoint = killed_as_it_lands  # type: ignore[method-assign]
        # The clock is an hour back: its runs' leases are long over for the worker's below.
        clock = FakeClock(SystemClock().now_ms() - 3_600_000)
        await bf.enqueue({"org": "org-a"}, client=Jobs(driver, clock=clock))
        with pytest.raises(Crash):
            await attempt(driver, clock, bf)
        (entry,) = await driver.sweep_list("orgs", 10)
        assert (entry.status, entry.batches, entry.rows, entry.cursor_json) == (
            "running",
            4,
            20,
            "20",
        )
        assert (await attempt(driver, clock, bf))["rows"] == 23
        a_pages = [ROWS["org-a"][i : i + 5] for i in range(0, 23, 5)]
        assert handled == a_pages  # the window at batch:2 replayed from its record, counted once
        steps = [s.name for s in await driver.step_list(entry.run_id)]
        assert sorted(steps) == ["batch:0", "batch:2", "batch:4"], steps
        # org-b under a real worker: batch 1 fails the first attempt — both batches run well
        # within a second, one window —, the retry resumes at the window's start.
        handled.clear()
        # org-b has 9 rows where the declaration expects 23: it ends stalled, failed for good.
        done = await Jobs(driver).enqueue(bf, {"org": "org-b"})
        worker = Worker(driver, [bf], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
        await worker.start()

        async def ended() -> bool:
            return (await driver.job_get_many([done.id]))[done.id].state is JobState.DEAD

        try:
            await until(ended, within=15)
        finally:
            await worker.stop()
        b_pages = [ROWS["org-b"][i : i + 5] for i in range(0, 9, 5)]
        assert handled == [b_pages[0], b_pages[1], b_pages[0], b_pages[1]]
        assert asked == {("org-a", "org-a"), ("org-b", "org-b")}
        url = f"{REDIS_URL}?prefix={driver.keys.prefix}"
        shown = await asyncio.to_thread(
            CliRunner().invoke, main, ["backfills", "show", "orgs", "--driver", url, "--json"]
        )
        assert shown.exit_code == 0, shown.output
        runs = {e["scope"]: e for e in json.loads(shown.output)["entries"]}
        assert (runs["org-a"]["status"], runs["org-a"]["rows"], runs["org-a"]["batches"]) == (
            "completed",
            23,
            5,
        )
        assert (runs["org-b"]["status"], runs["org-b"]["error"], runs["org-b"]["rows"]) == (
            "failed",
            "X_BACKFILL_STALLED",
            9,
        )
