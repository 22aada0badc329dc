"""Retention on real Postgres: the worker purges, purgers race safely, the purge reads an index."""

from __future__ import annotations

import json
import time

from jobs_core.clock import FakeClock
from jobs_core.states import JobState
from jobs_pg import PgDriver
from jobs_pg.driver import STATEMENTS
from tests.core.retention_support import (
    finish,
    purgers_at_once_remove_each_row_once,
    worker_purges_old_finished_rows,
)
from tests.core.support import advance_quietly
from tests.pg.conftest import PG_URL, admin


def _clock() -> FakeClock:
    return FakeClock(start_ms=time.time_ns() // 1_000_000)


async def _advance(clock: FakeClock, ms: int) -> None:
    # Claim, heartbeat and retention loops wait on the clock when idle.
    await advance_quietly(clock, ms, sleepers=3, step_ms=500)


async def test_a_worker_purges_old_finished_rows_and_keeps_the_rest(pg: PgDriver) -> None:
    await worker_purges_old_finished_rows(pg, _clock(), _advance)


async def test_purgers_on_several_connections_remove_each_row_once(pg_schema: str) -> None:
    drivers = [PgDriver(PG_URL, schema=pg_schema, pool_size=2) for _ in range(3)]
    try:
        for d in drivers:
            await d.open()
        await purgers_at_once_remove_each_row_once(drivers, _clock(), rows=3000)
    finally:
        for d in drivers:
            await d.close()


async def test_the_purge_reads_the_finished_index_not_the_table(pg: PgDriver) -> None:
    now = _clock().now_ms()
    await finish(pg, [f"c{i:05d}" for i in range(3000)], JobState.COMPLETED, now - 10_000)
    await finish(pg, [f"d{i:05d}" for i in range(500)], JobState.DEAD, now - 10_000)
    with admin() as conn:
        conn.execute(f'ANALYZE "{pg.schema}".jobs')
        text = STATEMENTS["JOB_PURGE"].render(pg.schema).replace("%b", "%s")
        args = STATEMENTS["JOB_PURGE"].args(
            {
                "limit": 100,
                "completed_before": now,
                "cancelled_before": None,
                "failed_before": now,
                "dead_before": now,
            }
        )
        row = conn.execute("EXPLAIN (FORMAT JSON) " + text, args).fetchone()
    assert row is not None
    plan = row[0]
    scans = _scans(plan if isinstance(plan, list) else json.loads(plan))
    on_jobs = [s for s in scans if s.get("Relation Name") == "jobs"]
    assert on_jobs, scans
    assert all(s["Node Type"] != "Seq Scan" for s in on_jobs), on_jobs
    assert {s.get("Index Name") for s in on_jobs if "Index Name" in s} >= {"jobs_finished"}


def _scans(plan: object) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    if isinstance(plan, list):
        for p in plan:
            out += _scans(p)
    elif isinstance(plan, dict):
        if "Node Type" in plan:
            out.append(plan)
        for v in plan.values():
            if isinstance(v, list | dict):
                out += _scans(v)
    return out
