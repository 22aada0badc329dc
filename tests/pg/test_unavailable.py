"""A server that is down or goes away mid-call: X_DRIVER_UNAVAILABLE, never a hang, nothing lost.

The connection is cut by a proxy while a claim (and then an ack) waits inside the server on a
lock another session holds, so the cut lands mid-statement. Whether the server then finished
the statement or not, every job stays accounted for: a claim whose answer was lost gives its
rows back, or leaves them `running` under a lease that lapses and is claimed again
(tests/pg/test_claim_lost_answer.py tells which); an ack whose answer was lost either
landed (a retry answers False) or did not (a retry lands). No job is lost, none is done twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
import pytest

from jobs_core.errors import DriverUnavailableError
from jobs_core.records import Ack, ClaimParams, NewJob
from jobs_core.states import JobState
from jobs_pg import PgDriver
from tests.core.support import T0, new_job
from tests.pg.conftest import PG_URL
from tests.pg.proxy import Proxy
from tests.pg.support import wait_for_lock_wait

LEASE = 30_000
N = 12
T = TypeVar("T")


def job(i: int) -> NewJob:
    return new_job(f"j{i:03}", f"k{i}", run_id=f"r{i}")


async def _eventually(call: Callable[[], Awaitable[T]], tries: int = 4) -> T:
    """The driver recovers by itself: a few calls at most fail on connections the cut killed."""
    for _ in range(tries - 1):
        try:
            return await call()
        except DriverUnavailableError:
            await asyncio.sleep(0.2)
    return await call()


async def test_server_down_is_unavailable_not_a_hang() -> None:
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        d = PgDriver(
            f"postgresql://postgres:topsecret@127.0.0.1:{port}/test",
            schema="nowhere",
            connect_timeout_s=1.0,
        )
        started = time.monotonic()
        with pytest.raises(DriverUnavailableError) as err:
            await d.job_enqueue(job(1))
        await d.close()
    assert time.monotonic() - started < 5
    assert err.value.code == "X_DRIVER_UNAVAILABLE"
    assert "topsecret" not in str(err.value)


async def test_cut_mid_claim_then_mid_ack_loses_and_doubles_nothing(
    pg_schema: str, proxy: Proxy
) -> None:
    d = PgDriver(proxy.url(PG_URL), schema=pg_schema, pool_size=2, connect_timeout_s=2.0)
    direct = PgDriver(PG_URL, schema=pg_schema, pool_size=2)
    ids = [job(i).id for i in range(N)]
    try:
        await d.job_enqueue_many([job(i) for i in range(N)])

        # -- mid-claim: the claim waits on the pauses table, locked by another session --------
        locker = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
        await locker.execute(f'LOCK TABLE "{pg_schema}".pauses IN ACCESS EXCLUSIVE MODE')
        claim = asyncio.create_task(d.job_claim(ClaimParams(("q",), "w1", N, LEASE, T0)))
        await wait_for_lock_wait(pg_schema)
        proxy.cut()
        with pytest.raises(DriverUnavailableError):
            await asyncio.wait_for(claim, 10)
        await locker.commit()  # the orphaned claim may now run to its commit, or not
        await locker.close()
        await asyncio.sleep(0.3)

        # Every job is either still ready or running under the lost claim's lease.
        rows = await direct.job_get_many(ids)
        assert set(rows) == set(ids)
        assert {r.state for r in rows.values()} <= {JobState.READY, JobState.RUNNING}
        # After the lease lapses, the same driver (recovered) claims every job exactly once.
        later = T0 + LEASE
        got = await _eventually(lambda: d.job_claim(ClaimParams(("q",), "w2", N, LEASE, later)))
        assert sorted(j.id for j in got.jobs) == ids

        # -- mid-ack: one row is locked by another session, so the batched ack waits ---------
        locker = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
        await locker.execute(
            f'SELECT id FROM "{pg_schema}".jobs WHERE id = %s FOR UPDATE', (ids[-1],)
        )
        acks = [Ack(j.fence, later + 1, '"done"') for j in got.jobs]
        ack = asyncio.create_task(d.job_ack(acks))
        await wait_for_lock_wait(pg_schema)
        proxy.cut()
        with pytest.raises(DriverUnavailableError):
            await asyncio.wait_for(ack, 10)
        await locker.commit()
        await locker.close()
        await asyncio.sleep(0.3)

        # Retrying the very same fenced acks: each lands at most once across both attempts.
        retried = await _eventually(lambda: d.job_ack(acks))
        rows = await direct.job_get_many(ids)
        assert {r.state for r in rows.values()} == {JobState.COMPLETED}
        assert all(
            r.claims == got_j.claims
            for r, got_j in zip((rows[j.id] for j in got.jobs), got.jobs, strict=True)
        )
        assert all(r.result_json == '"done"' for r in rows.values())
        # Nothing claimable is left, and a stale re-ack lands nowhere.
        assert (await direct.job_claim(ClaimParams(("q",), "w3", N, LEASE, later * 2))).jobs == ()
        assert await direct.job_ack(acks) == [False] * N
        assert len(retried) == N
    finally:
        await d.close()
        await direct.close()


async def test_server_gone_fails_fast_and_recovers(pg_schema: str, proxy: Proxy) -> None:
    d = PgDriver(proxy.url(PG_URL), schema=pg_schema, pool_size=2, connect_timeout_s=1.0)
    try:
        await d.job_enqueue(job(1))
        await proxy.stop()
        started = time.monotonic()
        for _ in range(3):
            with pytest.raises(DriverUnavailableError):
                await d.job_claim(ClaimParams(("q",), "w", 1, LEASE, T0))
        assert time.monotonic() - started < 10  # each call bounded by the connect timeout
        await proxy.start()  # the server is back, on the same port
        got = await _eventually(lambda: d.job_claim(ClaimParams(("q",), "w", 1, LEASE, T0)))
        assert [j.id for j in got.jobs] == [job(1).id]
    finally:
        await d.close()
