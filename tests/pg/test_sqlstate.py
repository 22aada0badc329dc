"""Postgres failures reported by their real cause (SQLSTATE), each produced for real on the server.

A deadlock between the driver and a session the test drives, a serialization failure under
SERIALIZABLE, a statement timeout, a terminated backend, a lock timeout, an index row past
btree's limit and a value out of bigint's range: each becomes its own `X_*` code, names its
SQLSTATE, and never shows the URL's password. A deadlock or serialization failure is retried
inside the driver (the server rolled the statement back) before it is reported.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from jobs_core.errors import JobsError
from jobs_core.records import ClaimedJob, ClaimParams, Heartbeat, NewJob
from jobs_pg import PgDriver
from tests.core.support import T0, new_job
from tests.pg.conftest import PG_URL, admin
from tests.pg.support import wait_for_lock_wait

LEASE = 60_000
SECRET = "topsecret-pw"
#: The test server trusts every connection: the password only proves it never leaks.
URL = PG_URL.replace("postgres@", f"postgres:{SECRET}@")


def url_with(**settings: str) -> str:
    """The server URL with session settings (libpq `options=-c name=value …`)."""
    opts = " ".join(f"-c {k}={v}" for k, v in settings.items())
    return f"{URL}?options={quote(opts)}"


def job(i: int, *, key: str | None = None, tenant: str | None = None) -> NewJob:
    return new_job(f"j{i:03}", key if key is not None else f"k{i}", run_id=f"r{i}", tenant=tenant)


@pytest.fixture
async def running(pg: PgDriver) -> AsyncIterator[tuple[str, list[ClaimedJob]]]:
    """Two jobs of the test's schema, claimed (so heartbeats land on them)."""
    await pg.job_enqueue_many([job(1), job(2)])
    got = await pg.job_claim(ClaimParams(("q",), "w", 2, LEASE, T0))
    assert [j.id for j in got.jobs] == ["j001", "j002"]
    yield pg.schema, list(got.jobs)


Conn = psycopg.AsyncConnection[tuple[Any, ...]]


async def raw() -> Conn:
    return await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))


async def lock_row(conn: Conn, schema: str, job_id: str) -> None:
    """`conn` holds row `job_id`'s lock until it commits (or closes)."""
    await conn.execute(f'SELECT 1 FROM "{schema}".jobs WHERE id = %s FOR UPDATE', (job_id,))


async def outcome(scenario: Callable[[Conn], Awaitable[Any]]) -> Any:
    """What `scenario` answered or raised, driven beside a session of the test's own (closed
    after, so its locks and its open transaction end with it)."""
    other = await raw()
    try:
        return await scenario(other)
    except BaseException as exc:
        return exc
    finally:
        await other.close()


def beats(jobs: list[ClaimedJob]) -> list[Heartbeat]:
    return [Heartbeat(j.fence, LEASE, T0 + 1) for j in jobs]


def assert_clean(err: object, code: str, sqlstate: str) -> None:
    """`err` is the driver error `code` naming `sqlstate`, and says nothing of the password."""
    assert isinstance(err, JobsError), err
    assert err.code == code, str(err)
    assert f"SQLSTATE {sqlstate}" in str(err)
    assert " in JOB_HEARTBEAT: " in str(err)
    assert SECRET not in str(err)


async def deadlock_against(d: PgDriver, schema: str, jobs: list[ClaimedJob]) -> Any:
    """Make the driver's heartbeat over both rows the victim of a real deadlock; its answer.

    The test's session locks the second row; the driver (locking in id order) takes the first
    and waits for the second; the test's session then asks for the first. The test's session
    waits 30 s before it checks for deadlocks, the driver's session 1 s: the driver's is the
    session the server aborts.
    """

    async def scenario(other: Conn) -> Any:
        await other.execute("SET deadlock_timeout = '30s'")
        await lock_row(other, schema, "j002")
        call = asyncio.create_task(d.job_heartbeat(beats(jobs)))
        await wait_for_lock_wait(schema)
        second = asyncio.create_task(lock_row(other, schema, "j001"))
        await asyncio.wait_for(second, 20)  # the driver's statement was aborted: ours got through
        await other.commit()
        return await asyncio.wait_for(call, 20)

    return await outcome(scenario)


async def test_a_deadlock_is_retried_then_answers(running: tuple[str, list[ClaimedJob]]) -> None:
    schema, jobs = running
    d = PgDriver(URL, schema=schema, pool_size=2)
    try:
        got = await deadlock_against(d, schema, jobs)
        assert got == [True, True]
        assert d.conflicts_seen == 1
    finally:
        await d.close()


async def test_a_deadlock_past_the_retries_is_a_conflict(
    running: tuple[str, list[ClaimedJob]],
) -> None:
    schema, jobs = running
    d = PgDriver(URL, schema=schema, pool_size=2, conflict_retries=0)
    try:
        got = await deadlock_against(d, schema, jobs)
        assert_clean(got, "X_DRIVER_CONFLICT", "40P01")
        assert d.conflicts_seen == 1
        # Nothing of the aborted statement landed, and the driver goes on.
        assert await d.job_heartbeat(beats(jobs)) == [True, True]
    finally:
        await d.close()


async def serialization_failure(d: PgDriver, schema: str, jobs: list[ClaimedJob]) -> Any:
    """The driver's heartbeat (SERIALIZABLE) waits on a row another session updated, then
    commits: the server cannot serialize the heartbeat after that update."""

    async def scenario(other: Conn) -> Any:
        await other.execute(
            f"UPDATE \"{schema}\".jobs SET progress_json = '1' WHERE id = %s", ("j001",)
        )
        call = asyncio.create_task(d.job_heartbeat(beats(jobs)))
        await wait_for_lock_wait(schema)
        await other.commit()
        return await asyncio.wait_for(call, 20)

    return await outcome(scenario)


async def test_a_serialization_failure_is_retried_or_a_conflict(
    running: tuple[str, list[ClaimedJob]],
) -> None:
    schema, jobs = running
    serializable = url_with(default_transaction_isolation="serializable")
    once = PgDriver(serializable, schema=schema, pool_size=2, conflict_retries=0)
    again = PgDriver(serializable, schema=schema, pool_size=2)
    try:
        got = await serialization_failure(once, schema, jobs)
        assert_clean(got, "X_DRIVER_CONFLICT", "40001")
        assert await serialization_failure(again, schema, jobs) == [True, True]
        assert again.conflicts_seen == 1
    finally:
        await once.close()
        await again.close()


async def locked_call(d: PgDriver, schema: str, jobs: list[ClaimedJob]) -> Any:
    """The driver's heartbeat while another session holds the first row's lock; its outcome."""

    async def scenario(other: Conn) -> Any:
        await lock_row(other, schema, "j001")
        return await asyncio.wait_for(d.job_heartbeat(beats(jobs)), 20)

    return await outcome(scenario)


async def test_a_statement_timeout_is_cancelled(running: tuple[str, list[ClaimedJob]]) -> None:
    schema, jobs = running
    d = PgDriver(url_with(statement_timeout="200"), schema=schema, pool_size=2)
    try:
        got = await locked_call(d, schema, jobs)
        assert_clean(got, "X_DRIVER_CANCELLED", "57014")
        assert d.conflicts_seen == 0
    finally:
        await d.close()


async def test_a_lock_timeout_is_a_driver_error_naming_its_sqlstate(
    running: tuple[str, list[ClaimedJob]],
) -> None:
    schema, jobs = running
    d = PgDriver(url_with(lock_timeout="200"), schema=schema, pool_size=2)
    try:
        got = await locked_call(d, schema, jobs)
        assert_clean(got, "X_DRIVER_ERROR", "55P03")
    finally:
        await d.close()


async def test_connection_failures_are_unavailable_and_the_driver_recovers(
    running: tuple[str, list[ClaimedJob]],
) -> None:
    schema, jobs = running
    d = PgDriver(URL, schema=schema, pool_size=2)
    other = await raw()
    try:
        await lock_row(other, schema, "j001")
        call = asyncio.create_task(d.job_heartbeat(beats(jobs)))
        (pid,) = await wait_for_lock_wait(schema)
        with admin() as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(JobsError) as err:
            await asyncio.wait_for(call, 20)
        assert_clean(err.value, "X_DRIVER_UNAVAILABLE", "57P01")
        await other.commit()
        assert await d.job_heartbeat(beats(jobs)) == [True, True]

        # No pooled connection within the connect timeout: unavailable too.
        one = PgDriver(URL, schema=schema, pool_size=1, connect_timeout_s=0.5)
        try:
            await lock_row(other, schema, "j001")
            busy = asyncio.create_task(one.job_heartbeat(beats(jobs)))  # holds its connection
            await wait_for_lock_wait(schema)
            with pytest.raises(JobsError) as err:
                await one.job_heartbeat(beats(jobs))
            assert err.value.code == "X_DRIVER_UNAVAILABLE"
            assert SECRET not in str(err.value)
            await other.commit()
            assert await asyncio.wait_for(busy, 20) == [True, True]
        finally:
            await one.close()
    finally:
        await other.close()
        await d.close()


def incompressible(n: int, seed: int) -> str:
    """`n` random non-ASCII characters (random, so the server cannot compress them small)."""
    rnd = random.Random(seed)
    return "".join(chr(rnd.randrange(0x4E00, 0x9FFF)) for _ in range(n))


async def test_an_index_row_past_btree_names_the_fields(pg: PgDriver) -> None:
    # Past the contract's byte limits (so the driver's own method, which trusts its caller):
    # the server's refusal is a limit naming the idempotency namespace, not an outage.
    big = job(1, key=incompressible(700, 1), tenant=incompressible(200, 2))
    with pytest.raises(JobsError) as err:
        await pg._job_enqueue(big)
    assert err.value.code == "X_DRIVER_LIMIT", str(err.value)
    assert "SQLSTATE 54000" in str(err.value)
    assert "name, tenant_id, idempotency_key" in str(err.value)
    assert await pg.job_get_many(["j001"]) == {}


async def test_a_value_out_of_range_is_a_limit(running: tuple[str, list[ClaimedJob]]) -> None:
    schema, jobs = running
    d = PgDriver(URL, schema=schema, pool_size=2)
    try:
        with pytest.raises(JobsError) as err:
            await d._job_heartbeat([Heartbeat(jobs[0].fence, LEASE, 2**63)])
        assert_clean(err.value, "X_DRIVER_LIMIT", "22003")
    finally:
        await d.close()
