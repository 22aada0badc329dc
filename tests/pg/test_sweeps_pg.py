"""The sweep ledger on Postgres: the cases every driver runs (tests/core/sweep_cases.py), racing
advances on several connections, and a start that waits for a finish in flight."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from psycopg import sql

from jobs_core.records import SweepFinish, SweepStartAnswer
from jobs_pg import PgDriver
from tests.core import sweep_cases as cases
from tests.core.support import T0, until
from tests.pg.conftest import PG_URL, admin


@pytest.fixture
def pg(pg_shared: PgDriver) -> PgDriver:
    """These cases share one migrated schema (`tests/pg/conftest.py`'s `pg_shared`)."""
    return pg_shared


async def test_a_run_records_each_batch_once(pg: PgDriver) -> None:
    await cases.a_run_records_each_batch_once(pg)


async def test_a_lost_fence_writes_nothing(pg: PgDriver) -> None:
    await cases.a_lost_fence_writes_nothing(pg)


async def test_a_held_fence_of_another_run_writes_nothing(pg: PgDriver) -> None:
    await cases.a_held_fence_of_another_run_writes_nothing(pg)


async def test_only_a_completed_run_of_the_same_sweep_blocks(pg: PgDriver) -> None:
    await cases.only_a_completed_run_of_the_same_sweep_blocks(pg)


async def test_hostile_values_come_back_exactly(pg: PgDriver) -> None:
    await cases.hostile_values_come_back_exactly(pg)


async def test_the_listing_is_newest_first_then_run_id_descending(pg: PgDriver) -> None:
    await cases.the_listing_is_newest_first_then_run_id_descending(pg)


async def test_concurrent_advances_on_several_connections_move_a_batch_once(
    pg: PgDriver,
) -> None:
    drivers = [pg, *(PgDriver(PG_URL, schema=pg.schema, pool_size=3) for _ in range(2))]
    try:
        for d in drivers:
            await d.open()
        await cases.concurrent_advances_move_a_batch_once(drivers, per=3)
    finally:
        for d in drivers[1:]:
            await d.close()


async def test_a_start_waits_for_a_finish_in_flight_and_is_blocked_by_it(pg: PgDriver) -> None:
    """Another run's finish, not committed yet, of the same sweep: the start waits for it (the
    entries' row locks) and then reads the entry as the finish left it. A start that read its
    snapshot alone would answer `running` at once, and two runs of the sweep would go on."""
    f = await cases.held(pg, "first")
    first = cases.starting(f, "first", T0 + 1)
    assert (await pg.sweep_start(first)).record is not None
    probe = cases.starting(await cases.held(pg, "second"), "second", T0 + 3)
    with admin() as session:
        session.autocommit = False
        # What SWEEP_FINISH writes, in a transaction held open.
        session.execute(
            sql.SQL(
                "UPDATE {}.sweeps SET status = 'completed', finished_at_ms = %s,"
                " updated_at_ms = %s WHERE run_id = 'first'"
            ).format(sql.Identifier(pg.schema)),
            (T0 + 2, T0 + 2),
        )
        holder = session.info.backend_pid
        start = asyncio.create_task(pg.sweep_start(probe))

        def waiting() -> bool:
            with admin() as look:
                row = look.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    (holder,),
                ).fetchone()
            return row is not None and row[0] > 0

        await until(lambda: start.done() or waiting())
        assert not start.done(), start.result()
        session.commit()
    finished = replace(
        cases.fresh(first), status="completed", finished_at_ms=T0 + 2, updated_at_ms=T0 + 2
    )
    assert await start == SweepStartAnswer(None, blocked_by=finished)
    assert not await pg.sweep_finish(SweepFinish(f, "first", "failed", "X_A", T0 + 4))
