"""A lone claim or ack (a trickle's every statement) goes as one `wire.Round` on libpq, its plan
settings ahead of it, with what a statement run through psycopg's cursors got: prepared once a
session, a conflict run again, a server error typed and named, a lost session told and dropped
(`PgDriver._alone`). The lost-answer and pooler cases: tests/pg/test_claim_lost_answer.py,
tests/pg/test_driver.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobs_core.errors import DriverUnavailableError, JobsError
from jobs_core.records import Ack, ClaimedJob, ClaimParams
from jobs_pg import PgDriver
from tests.core.support import T0
from tests.pg.conftest import PG_URL
from tests.pg.proxy import Proxy
from tests.pg.support import wait_for_lock_wait
from tests.pg.test_claim_lost_answer import READY, _until_ready
from tests.pg.test_sqlstate import SECRET, URL, Conn, job, lock_row, outcome, url_with


def _claim(worker: str = "w", at: int = T0) -> ClaimParams:
    return ClaimParams(("q",), worker, 1, 60_000, at)


def _ack(j: ClaimedJob) -> Ack:
    return Ack(j.fence, T0 + 1, None)


async def _ours(d: PgDriver) -> list[str]:
    """The statements the driver's one session holds prepared under the rounds' names."""
    pool = await d._ready()
    async with pool.connection() as conn:
        cur = await conn.execute(
            "SELECT statement FROM pg_prepared_statements WHERE name LIKE '\\_ujobs\\_%'"
            " ORDER BY name"
        )
        return [r[0] for r in await cur.fetchall()]


async def test_a_lone_claim_and_ack_are_prepared_once_a_session_under_the_rounds_names(
    pg_schema: str,
) -> None:
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=False)  # one session
    try:
        await d.job_enqueue_many([job(1), job(2)])
        (first,) = (await d.job_claim(_claim())).jobs
        assert await d.job_ack([_ack(first)]) == [True]
        held = await _ours(d)
        # The claim's plan settings, the claim, the ack: each parsed once, by name.
        assert [s.startswith("SELECT set_config('plan_cache_mode'") for s in held] == [
            True,
            False,
            False,
        ]
        assert held[1:] == [d._q["JOB_CLAIM"].text, d._q["JOB_ACK"].text]
        (second,) = (await d.job_claim(_claim())).jobs
        assert await d.job_ack([_ack(second)]) == [True]
        assert await _ours(d) == held
    finally:
        await d.close()


async def _claimed(d: PgDriver) -> ClaimedJob:
    await d.job_enqueue_many([job(1)])
    (j,) = (await d.job_claim(_claim())).jobs
    return j


async def _ack_after_concurrent_update(d: PgDriver, schema: str, j: ClaimedJob) -> Any:
    """The driver's lone ack (SERIALIZABLE) waits on the row another session updated, then
    commits: the server cannot serialize the ack after that update. Its answer or error."""

    async def scenario(other: Conn) -> Any:
        await other.execute(
            f"UPDATE \"{schema}\".jobs SET progress_json = '1' WHERE id = %s", (j.id,)
        )
        call = asyncio.create_task(d.job_ack([_ack(j)]))
        await wait_for_lock_wait(schema)
        await other.commit()
        return await asyncio.wait_for(call, 20)

    return await outcome(scenario)


def serializable_driver(schema: str, **kwargs: Any) -> PgDriver:
    """A driver of two sessions, no wake, whose every transaction is SERIALIZABLE."""
    url = url_with(default_transaction_isolation="serializable")
    return PgDriver(url, schema=schema, pool_size=2, wake=False, **kwargs)


def _named(err: object, code: str, sqlstate: str, statement: str) -> None:
    assert isinstance(err, JobsError), err
    assert err.code == code, str(err)
    assert f"SQLSTATE {sqlstate}" in str(err)
    assert f" in {statement}: " in str(err)
    assert SECRET not in str(err)


async def test_a_lone_ack_that_meets_a_serialization_failure_runs_again(pg_schema: str) -> None:
    d = serializable_driver(pg_schema)
    try:
        j = await _claimed(d)
        assert await _ack_after_concurrent_update(d, pg_schema, j) == [True]
        assert d.conflicts_seen == 1
    finally:
        await d.close()


async def test_a_lone_ack_past_its_conflict_retries_is_a_conflict_naming_it(
    pg_schema: str,
) -> None:
    d = serializable_driver(pg_schema, conflict_retries=0)
    try:
        j = await _claimed(d)
        got = await _ack_after_concurrent_update(d, pg_schema, j)
        _named(got, "X_DRIVER_CONFLICT", "40001", "JOB_ACK")
        assert d.conflicts_seen == 1
        # Nothing of it landed, and the driver goes on.
        assert await d.job_ack([_ack(j)]) == [True]
    finally:
        await d.close()


async def test_a_lone_ack_cancelled_by_the_server_is_typed_and_names_it(pg_schema: str) -> None:
    d = PgDriver(url_with(statement_timeout="200"), schema=pg_schema, pool_size=2, wake=False)
    try:
        j = await _claimed(d)

        async def scenario(other: Conn) -> Any:
            await lock_row(other, pg_schema, j.id)
            return await asyncio.wait_for(d.job_ack([_ack(j)]), 20)

        _named(await outcome(scenario), "X_DRIVER_CANCELLED", "57014", "JOB_ACK")
        assert await d.job_ack([_ack(j)]) == [True]
    finally:
        await d.close()


async def test_a_lone_claim_whose_answer_is_cut_off_drops_its_session_and_gives_back(
    pg_schema: str, proxy: Proxy
) -> None:
    """The session cut once the claim committed, its answer unread: X_DRIVER_UNAVAILABLE,
    what its round kept of the dead session goes with it, the job it took comes back
    (`LostClaims`) and the next claim, on a new session, takes it."""
    d = PgDriver(proxy.url(URL), schema=pg_schema, pool_size=1, wake=False)
    try:
        assert (await d.job_claim(_claim("other"))).jobs == ()  # prepared: the answer lost is
        await d.job_enqueue_many([job(1)])  # the claim's own
        pool = await d._ready()
        (dead,) = pool.sessions
        proxy.drop_next_reply(until=READY)
        with pytest.raises(DriverUnavailableError):
            await d.job_claim(_claim())
        assert proxy.dropped == 1
        assert dead.closed and dead not in pool.sessions
        await _until_ready(pg_schema, ["j001"], 1, 8.0)
        # Given back at the claim's clock moved on by the call's time (`_interrupt`).
        later = _claim("w2", T0 + 10_000)
        assert [j.id for j in (await d.job_claim(later)).jobs] == ["j001"]
        assert len(pool.sessions) == 1
    finally:
        await d.close()
