"""A multi-chunk `enqueue_many` is one transaction: cut, aborted or retried, never half written.

Another session's uncommitted row holds a key of the second chunk, so the call waits there with
its first chunk already inserted (uncommitted). Then the test terminates the call's backend or
lets the call outlive `call_timeout_s` (nothing may stay), or makes the call the victim of a
deadlock (the driver starts the whole transaction over; with no retries left it answers
X_DRIVER_CONFLICT and nothing stays).
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from jobs_core.errors import JobsError
from jobs_core.records import EnqueueResult, NewJob
from jobs_pg import PgDriver
from tests.core.support import new_job
from tests.pg.conftest import PG_URL, admin
from tests.pg.support import wait_for_lock_wait

N = 1_500  # two chunks


def job(i: int) -> NewJob:
    return new_job(f"j{i:05}", f"k{i:05}", run_id=f"r{i}", max_attempts=3)


async def hold_key(conn: psycopg.AsyncConnection[Any], schema: str, row_id: str, key: str) -> None:
    """Insert a live row holding `key` in `conn`'s open transaction (uncommitted)."""
    await conn.execute(
        f'INSERT INTO "{schema}".jobs (id, run_id, name, queue, idempotency_key, input_json,'
        " state, priority, attempt, max_attempts, claims, run_at_ms, created_at_ms)"
        " VALUES (%s, %s, 'n', 'other', %s, '{}', 'ready', 0, 0, 1, 0, 0, 0)",
        (row_id, row_id, key),
    )


async def stored(d: PgDriver) -> int:
    return len(await d.job_get_many([job(i).id for i in range(N)]))


async def test_a_backend_cut_mid_batch_leaves_nothing(pg: PgDriver) -> None:
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    try:
        await hold_key(other, pg.schema, "x1", job(1_200).idempotency_key)
        call = asyncio.create_task(pg.job_enqueue_many([job(i) for i in range(N)]))
        pid = (await wait_for_lock_wait(pg.schema))[0]
        with admin() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(JobsError) as err:
            await asyncio.wait_for(call, 20)
        assert err.value.code == "X_DRIVER_UNAVAILABLE", str(err.value)
        await other.rollback()
        assert await stored(pg) == 0
        # The driver goes on, and the same batch then lands whole.
        got = await pg.job_enqueue_many([job(i) for i in range(N)])
        assert got == [EnqueueResult(job(i).id, deduped=False) for i in range(N)]
    finally:
        await other.close()


async def deadlocked_batch(d: PgDriver) -> Any:
    """Run the batch into a deadlock it loses: its outcome (answers or the error)."""
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    try:
        await other.execute("SET deadlock_timeout = '30s'")  # the driver's session is the victim
        await hold_key(other, d.schema, "x1", job(1_200).idempotency_key)
        call = asyncio.create_task(d.job_enqueue_many([job(i) for i in range(N)]))
        await wait_for_lock_wait(d.schema)
        # Waits on the batch's own uncommitted first chunk: a cycle, the batch is aborted.
        await hold_key(other, d.schema, "x2", job(500).idempotency_key)
        await other.commit()
        return await asyncio.wait_for(call, 20)
    except BaseException as exc:
        return exc
    finally:
        await other.close()


async def test_a_deadlocked_batch_is_retried_whole(pg: PgDriver) -> None:
    d = PgDriver(PG_URL, schema=pg.schema, pool_size=2)
    try:
        got = await deadlocked_batch(d)
        assert d.conflicts_seen == 1
        assert isinstance(got, list), got
        # The keys the other session committed first are deduped to its rows; all else landed.
        expect = [EnqueueResult(job(i).id, deduped=False) for i in range(N)]
        expect[500] = EnqueueResult("x2", deduped=True)
        expect[1_200] = EnqueueResult("x1", deduped=True)
        assert got == expect
        assert await stored(d) == N - 2
    finally:
        await d.close()


async def test_a_deadlocked_batch_past_the_retries_leaves_nothing(pg: PgDriver) -> None:
    d = PgDriver(PG_URL, schema=pg.schema, pool_size=2, conflict_retries=0)
    try:
        got = await deadlocked_batch(d)
        assert isinstance(got, JobsError), got
        assert got.code == "X_DRIVER_CONFLICT"
        assert "40P01" in str(got)
        assert await stored(d) == 0
    finally:
        await d.close()


async def test_a_batch_past_its_call_timeout_leaves_nothing(pg_schema: str) -> None:
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, call_timeout_s=1.0)
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    try:
        await hold_key(other, pg_schema, "x1", job(1_200).idempotency_key)
        with pytest.raises(JobsError) as err:
            await asyncio.wait_for(d.job_enqueue_many([job(i) for i in range(N)]), 20)
        assert err.value.code == "X_DRIVER_UNAVAILABLE", str(err.value)
        await other.rollback()
        assert await stored(d) == 0
        got = await d.job_enqueue_many([job(i) for i in range(N)])
        assert got == [EnqueueResult(job(i).id, deduped=False) for i in range(N)]
    finally:
        await other.close()
        await d.close()
