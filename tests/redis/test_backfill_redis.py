"""`backfill(pages=...)` with its ledger in the Redis driver: a tenant's sweep killed in a batch,
finished by a real worker (the killed batch handled again, counted once, nothing of the other
tenant read), then read back by `ujobs backfills` on the store's URL."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from click.testing import CliRunner

from jobs_core.cli import main
from jobs_core.clock import FakeClock, SystemClock
from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.factories.backfill import BackfillRegistry, backfill
from jobs_core.job import JobRegistry
from jobs_core.jsonform import loads
from jobs_core.records import ClaimParams
from jobs_core.states import JobState
from jobs_core.tenant import acting_for, current_tenant
from jobs_core.worker import Worker
from jobs_redis import RedisDriver
from tests.core.support import fresh_store, until
from tests.redis.conftest import REDIS_URL

ROWS = {"org-a": [f"a{i}" for i in range(23)], "org-b": [f"b{i}" for i in range(9)]}


class Crash(BaseException):
    """A process killed where it stands."""


async def test_a_tenants_pages_sweep_killed_mid_batch_is_finished_by_a_worker_and_listed() -> None:
    asked: set[tuple[str, str | None]] = set()
    handled: list[list[str]] = []

    def pages(cursor: Any, scope: str, limit: int) -> tuple[list[str], Any]:
        asked.add((scope, current_tenant()))
        start = 0 if cursor is None else int(cursor)
        mine = ROWS.get(scope, [])
        return mine[start : start + limit], (start + limit if start + limit < len(mine) else None)

    def handle(rows: list[str]) -> None:
        handled.append(rows)
        if len(handled) == 2:
            raise Crash  # the first worker dies in batch:1

    bf = backfill(
        name="orgs",
        tenant=lambda i: i["org"],
        handle=handle,
        pages=pages,
        batch=5,
        count=len(ROWS["org-a"]),
        registry=JobRegistry(),
        backfills=BackfillRegistry(),
    )
    async with fresh_store("redis") as driver:
        assert isinstance(driver, RedisDriver)
        # A clock in the past: the killed run's lease has lapsed for the worker's real one.
        clock = FakeClock(SystemClock().now_ms() - 60_000)
        done = await bf.enqueue({"org": "org-a"}, client=Jobs(driver, clock=clock))
        (job,) = (
            await driver.job_claim(ClaimParams(("default",), "w0", 1, 1_000, clock.now_ms()))
        ).jobs
        ctx = JobContext.for_test(job, driver, tenant="org-a", clock=clock)
        try:
            with acting_for("org-a"):
                await bf.fn(loads(job.input_json), ctx)
        except Crash:
            pass
        worker = Worker(driver, [bf], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
        await worker.start()

        async def finished() -> bool:
            return (await driver.job_get_many([done.id]))[done.id].state is JobState.COMPLETED

        try:
            await until(finished, within=15)
        finally:
            await worker.stop()
        pages_of = [ROWS["org-a"][i : i + 5] for i in range(0, 23, 5)]
        assert handled == [pages_of[0], pages_of[1], *pages_of[1:]]
        assert asked == {("org-a", "org-a")}
        (entry,) = await driver.sweep_list("orgs", 10)
        assert (entry.status, entry.rows, entry.batches, entry.expected, entry.scope) == (
            "completed",
            23,
            5,
            23,
            "org-a",
        )
        url = f"{REDIS_URL}?prefix={driver.keys.prefix}"
        shown = await asyncio.to_thread(
            CliRunner().invoke, main, ["backfills", "show", "orgs", "--driver", url, "--json"]
        )
        assert shown.exit_code == 0, shown.output
        (run,) = json.loads(shown.output)["entries"]
        assert (run["run_id"], run["status"], run["rows"], run["progress"]) == (
            entry.run_id,
            "completed",
            23,
            1.0,
        )
        listed = await asyncio.to_thread(
            CliRunner().invoke, main, ["backfills", "list", "--driver", url]
        )
        assert listed.exit_code == 0, listed.output
        assert "org-a" in listed.output and "23 of 23 (100%)" in listed.output
