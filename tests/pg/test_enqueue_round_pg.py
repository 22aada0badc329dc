"""A lone enqueue (`job_enqueue`, outside a transaction) goes as one `wire.Round` on libpq, as a
lone claim or ack does (`PgDriver._alone`): prepared once a session under the round's names, an
id a concurrent insert won run again and answered deduped, a serialization failure run again
(`conflict_retries`), a server error typed and named, a
session cut after the commit told (`X_DRIVER_UNAVAILABLE`) so a retry under the same id answers
deduped. Inside `job_enqueue_many`'s transaction it stays on psycopg's cursor (tests/pg,
tests/parity)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobs_core.errors import DriverUnavailableError
from jobs_core.records import EnqueueResult
from jobs_pg import PgDriver
from tests.pg.conftest import PG_URL
from tests.pg.proxy import Proxy
from tests.pg.support import wait_for_lock_wait
from tests.pg.test_claim_lost_answer import READY
from tests.pg.test_lone_round_pg import _named, _ours, serializable_driver
from tests.pg.test_sqlstate import URL, Conn, job, outcome, url_with


async def test_a_lone_enqueue_is_prepared_once_a_session_under_the_rounds_names(
    pg_schema: str,
) -> None:
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=False)  # one session
    try:
        assert await d.job_enqueue(job(1)) == EnqueueResult("j001", deduped=False)
        held = await _ours(d)
        assert held == [d._q["JOB_ENQUEUE_QUIET"].text]
        assert await d.job_enqueue(job(2)) == EnqueueResult("j002", deduped=False)
        assert await d.job_enqueue(job(1)) == EnqueueResult("j001", deduped=True)
        assert await _ours(d) == held
    finally:
        await d.close()


async def test_a_lone_waking_enqueue_goes_on_the_round_too(pg_schema: str) -> None:
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=True)
    try:
        assert await d.job_enqueue(job(1)) == EnqueueResult("j001", deduped=False)
        assert await _ours(d) == [d._q["JOB_ENQUEUE"].text]
    finally:
        await d.close()


async def test_a_trailing_wake_and_a_probe_go_on_the_round_too(pg_schema: str) -> None:
    # A burst's every slot ends with a trailing NOTIFY: it goes as a lone enqueue does.
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=True)
    try:
        await d._send_trail("q")
        held = await _ours(d)
        assert held == [d._q["WAKE_PROBE"].text]
        await d.send_probe("p")
        assert await _ours(d) == held
    finally:
        await d.close()


async def test_a_lone_enqueue_whose_answer_is_cut_off_is_told_and_a_retry_answers_deduped(
    pg_schema: str, proxy: Proxy
) -> None:
    """The session cut once the enqueue committed, its answer unread: X_DRIVER_UNAVAILABLE,
    what its round kept of the dead session goes with it, and the producer's retry under the
    same id finds the row its first call wrote."""
    d = PgDriver(proxy.url(URL), schema=pg_schema, pool_size=1, wake=False)
    try:
        await d.job_enqueue(job(1))  # prepared: the answer lost is the enqueue's own
        pool = await d._ready()
        (dead,) = pool.sessions
        proxy.drop_next_reply(until=READY)
        with pytest.raises(DriverUnavailableError):
            await d.job_enqueue(job(2))
        assert proxy.dropped == 1
        assert dead.closed and dead not in pool.sessions
        assert await d.job_enqueue(job(2)) == EnqueueResult("j002", deduped=True)
        assert len(await d.job_get_many(["j002"])) == 1
    finally:
        await d.close()


async def test_a_lone_enqueue_cancelled_by_the_server_is_typed_and_names_it(
    pg_schema: str,
) -> None:
    d = PgDriver(url_with(statement_timeout="200"), schema=pg_schema, pool_size=2, wake=True)
    try:
        await d.job_enqueue_many([job(9)])  # the schema's tables exist before the lock

        async def scenario(other: Conn) -> Any:
            await other.execute(f'LOCK TABLE "{pg_schema}".jobs IN SHARE MODE')
            return await asyncio.wait_for(d.job_enqueue(job(1)), 20)

        _named(await outcome(scenario), "X_DRIVER_CANCELLED", "57014", "JOB_ENQUEUE")
        assert await d.job_enqueue(job(1)) == EnqueueResult("j001", deduped=False)
    finally:
        await d.close()


async def _insert_copy(other: Conn, schema: str, changed: str) -> None:
    """`other` inserts, uncommitted, a copy of row j009 with `changed` (a JSON object) over it."""
    await other.execute(
        f'INSERT INTO "{schema}".jobs SELECT (jsonb_populate_record('
        f'NULL::"{schema}".jobs, to_jsonb(j) || %s::jsonb)).*'
        f' FROM "{schema}".jobs j WHERE id = %s',
        (changed, "j009"),
    )


async def _enqueue_beside_key_winner(d: PgDriver, schema: str) -> Any:
    """Under SERIALIZABLE, another session's row of job(1)'s key commits while the driver's
    lone enqueue of job(1) waits on it: the server cannot serialize the enqueue after it."""
    await d.job_enqueue(job(9))

    async def scenario(other: Conn) -> Any:
        await _insert_copy(other, schema, '{"id": "jx", "run_id": "rx", "idempotency_key": "k1"}')
        call = asyncio.create_task(d.job_enqueue(job(1)))
        await wait_for_lock_wait(schema)
        await other.commit()
        return await asyncio.wait_for(call, 20)

    return await outcome(scenario)


async def test_a_lone_enqueue_that_meets_a_serialization_failure_runs_again(
    pg_schema: str,
) -> None:
    d = serializable_driver(pg_schema)
    try:
        got = await _enqueue_beside_key_winner(d, pg_schema)
        assert got == EnqueueResult("jx", deduped=True)  # run again, it names the key's holder
        assert d.conflicts_seen == 1
    finally:
        await d.close()


async def test_a_lone_enqueue_past_its_conflict_retries_is_a_conflict_naming_it(
    pg_schema: str,
) -> None:
    d = serializable_driver(pg_schema, conflict_retries=0)
    try:
        got = await _enqueue_beside_key_winner(d, pg_schema)
        _named(got, "X_DRIVER_CONFLICT", "40001", "JOB_ENQUEUE_QUIET")
        assert await d.job_enqueue(job(1)) == EnqueueResult("jx", deduped=True)
    finally:
        await d.close()


async def test_a_lone_enqueue_whose_id_a_concurrent_insert_won_answers_deduped(
    pg_schema: str,
) -> None:
    """Another session's insert of the same id (another key) commits while the enqueue waits
    on it: the enqueue's unique violation on `jobs_pkey` runs it again, and the fresh snapshot
    answers the id deduped."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, wake=False)
    try:
        await d.job_enqueue(job(9))

        async def scenario(other: Conn) -> Any:
            changed = '{"id": "j001", "run_id": "rx", "idempotency_key": "kx"}'
            await _insert_copy(other, pg_schema, changed)
            call = asyncio.create_task(d.job_enqueue(job(1)))
            await wait_for_lock_wait(pg_schema)
            await other.commit()
            return await asyncio.wait_for(call, 20)

        assert await outcome(scenario) == EnqueueResult("j001", deduped=True)
        (row,) = (await d.job_get_many(["j001"])).values()
        assert row.idempotency_key == "kx"  # the other session's row; ours wrote nothing
    finally:
        await d.close()
