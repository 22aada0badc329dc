"""A claim whose transaction committed but whose answer the driver never read (the connection
dropped right after the server sent it). The caller gets X_DRIVER_UNAVAILABLE; the rows the claim
took are given back (`ready` at once, the attempt given back) rather than held by nobody until
their lease ends, when the lapse would spend the attempt and bury a final one never run; a
store out past that lease end leaves them to lapse (the bound). Redis's twin:
tests/redis/test_claim_lost_reply.py."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any

import psycopg
import pytest

from jobs_core.attempts import AttemptOutcome
from jobs_core.errors import DriverUnavailableError
from jobs_core.lost_claims import RETRY_S as _RETRY_S
from jobs_core.records import Ack, BuriedJob, ClaimParams, JobRecord
from jobs_core.states import JobState
from jobs_pg import PgDriver
from tests.pg.conftest import PG_URL
from tests.pg.proxy import Proxy
from tests.pg.support import wait_for_lock_wait
from tests.pg.test_driver import T0, job

#: Postgres's ReadyForQuery: the end of an answer, sent after the implicit transaction committed.
READY = b"Z\x00\x00\x00\x05"
LEASE_MS = 10_000


def _claim(now_ms: int, worker: str = "w") -> ClaimParams:
    return ClaimParams(("q",), worker, 3, LEASE_MS, now_ms)


def _driver(proxy: Proxy, schema: str) -> PgDriver:
    # One connection: no pool growth in the background puts its traffic beside the claim's, so
    # the answer swallowed is the claim's. No wake: nothing else is sent on its own.
    return PgDriver(
        proxy.url(PG_URL), schema=schema, pool_size=1, connect_timeout_s=1.0, wake=False
    )


async def _lost_claim(driver: PgDriver, proxy: Proxy, at: int, lease_ms: int) -> None:
    """`id-0` claimed by "w" at `at`, then `id-1` and `id-2` (on its final attempt) by a claim
    of "w" at `at` too, whose answer is lost after its commit."""
    # The claim prepared first (the answer lost must be the claim's, not its PREPARE's).
    await driver.job_claim(replace(_claim(T0), queues=("other",)))
    await driver.job_enqueue_many([job(0), job(1), replace(job(2), max_attempts=1)])
    # A claim of the same worker in the same millisecond, answered: its row is not the lost one's.
    held = await driver.job_claim(replace(_claim(at), limit=1, lease_ms=lease_ms))
    assert [j.id for j in held.jobs] == ["id-0"]
    proxy.drop_next_reply(until=READY)
    with pytest.raises(DriverUnavailableError):
        await driver.job_claim(replace(_claim(at), lease_ms=lease_ms))
    assert proxy.dropped == 1


async def _rows(schema: str, ids: list[str]) -> dict[str, JobRecord]:
    """The rows as the server holds them, read past the proxy."""
    async with PgDriver(PG_URL, schema=schema, pool_size=1) as direct:
        return await direct.job_get_many(ids)


async def _until_ready(schema: str, ids: list[str], count: int, within_s: float) -> None:
    for _ in range(round(within_s / 0.02)):
        rows = await _rows(schema, ids)
        if sum(r.state is JobState.READY for r in rows.values()) >= count:
            return
        await asyncio.sleep(0.02)


async def test_a_claim_whose_answer_is_lost_gives_its_rows_back(
    pg_schema: str, proxy: Proxy
) -> None:
    driver = _driver(proxy, pg_schema)
    try:
        at = T0 + 1_000
        await _lost_claim(driver, proxy, at, LEASE_MS)
        await _until_ready(pg_schema, ["id-1", "id-2"], 2, 8.0)
        rows = await _rows(pg_schema, ["id-1", "id-2"])
        for r in rows.values():
            # Given back as a drain gives back what it held unstarted: no attempt spent.
            assert r.state is JobState.READY and r.attempt == 0 and r.claims == 1, r
            (attempt,) = r.attempts
            assert (attempt.worker_id, attempt.outcome) == ("w", AttemptOutcome.INTERRUPTED)
            assert attempt.claimed_at_ms == at <= attempt.settled_at_ms == r.run_at_ms
        kept = (await _rows(pg_schema, ["id-0"]))["id-0"]
        assert kept.state is JobState.RUNNING and kept.claimed_by == "w" and kept.attempt == 1
        got = await driver.job_claim(_claim(at + 1_000, "w2"))
        # The final-attempt job runs: not buried, never having run.
        assert sorted((j.id, j.attempt) for j in got.jobs) == [("id-1", 1), ("id-2", 1)]
        assert got.buried == ()
    finally:
        await driver.close()


async def test_a_claim_whose_answer_is_lost_beside_an_ack_gives_its_rows_back(
    pg_schema: str, proxy: Proxy
) -> None:
    """A worker's ack flush and its next claim go out as one pipeline, one commit: its answer
    lost, both callers get X_DRIVER_UNAVAILABLE, the ack has landed and the claim's rows come
    back as a lone lost claim's do."""
    driver = _driver(proxy, pg_schema)
    try:
        at = T0 + 1_000
        await driver.job_claim(replace(_claim(T0), queues=("other",)))
        await driver.job_enqueue_many([job(0), job(1), job(2)])
        (held,) = (await driver.job_claim(replace(_claim(at), limit=1))).jobs
        proxy.drop_next_reply(until=READY)
        got = await asyncio.gather(
            driver.job_ack([Ack(held.fence, at + 1, None)]),
            driver.job_claim(_claim(at + 1)),
            return_exceptions=True,
        )
        assert [type(g) for g in got] == [DriverUnavailableError] * 2, got
        assert proxy.dropped == 1
        await _until_ready(pg_schema, ["id-1", "id-2"], 2, 8.0)
        rows = await _rows(pg_schema, ["id-0", "id-1", "id-2"])
        # Both committed under the one answer lost: the ack landed, the claim's rows went back.
        assert rows.pop("id-0").state is JobState.COMPLETED
        for r in rows.values():
            assert (r.state, r.attempt) == (JobState.READY, 0), r
            assert [(a.claimed_at_ms, a.outcome) for a in r.attempts] == [
                (at + 1, AttemptOutcome.INTERRUPTED)
            ]
    finally:
        await driver.close()


async def test_a_claim_cut_while_it_waits_on_a_lock_gives_its_rows_back_once_it_commits(
    pg_schema: str, proxy: Proxy
) -> None:
    """The connection cut while the claim waits inside the server on a lock: the server runs it
    to its commit once the lock is free, after the caller got X_DRIVER_UNAVAILABLE. The look for
    its rows waits for that (a session of the driver's in a transaction begun before the loss),
    so it does not find nothing, give up, and leave them to lapse."""
    driver = _driver(proxy, pg_schema)
    try:
        await driver.job_enqueue_many([job(1), replace(job(2), max_attempts=1)])
        locker = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
        try:
            await locker.execute(f'LOCK TABLE "{pg_schema}".pauses IN ACCESS EXCLUSIVE MODE')
            claim = asyncio.ensure_future(driver.job_claim(_claim(T0 + 1_000)))
            await wait_for_lock_wait(pg_schema)
            proxy.cut()
            with pytest.raises(DriverUnavailableError):
                await asyncio.wait_for(claim, 10)
            await asyncio.sleep(0.3)  # the give-back's first look is over by now
            rows = await _rows(pg_schema, ["id-1", "id-2"])
            assert {r.state for r in rows.values()} == {JobState.READY}  # not committed yet
            await locker.commit()  # the orphaned claim runs to its commit
        finally:
            await locker.close()
        for _ in range(400):
            rows = await _rows(pg_schema, ["id-1", "id-2"])
            if {r.attempts for r in rows.values()} != {()}:
                break
            await asyncio.sleep(0.02)
        assert {(r.state, r.attempt) for r in rows.values()} == {(JobState.READY, 0)}, rows
        assert {a.outcome for r in rows.values() for a in r.attempts} == {
            AttemptOutcome.INTERRUPTED
        }
    finally:
        await driver.close()


async def test_rows_a_later_claim_of_the_same_millisecond_took_are_not_given_back(
    pg_schema: str, proxy: Proxy
) -> None:
    """The give-back tells the lost claim's rows by worker, lease end and claim time: a claim of
    the same worker and millisecond answered after the loss, before the give-back got through,
    took rows that look the same. They stay with it, running (a nack would have handed them to
    another worker while this one runs them: a double run); only the lost claim's go back."""
    driver = _driver(proxy, pg_schema)
    try:
        at = T0 + 1_000
        await _lost_claim(driver, proxy, at, LEASE_MS)
        await proxy.stop()  # the give-back waits out the store's absence, retrying
        async with PgDriver(PG_URL, schema=pg_schema, pool_size=1) as direct:
            await direct.job_enqueue_many([job(3)])
        await proxy.start()
        later = await driver.job_claim(replace(_claim(at), limit=1))
        (taken,) = [j.id for j in later.jobs]
        ids = ["id-1", "id-2", "id-3"]
        await _until_ready(pg_schema, ids, 2, 8.0)
        await asyncio.sleep(_RETRY_S + 0.1)  # a retry more, had one been pending
        rows = await _rows(pg_schema, ids)
        held = rows.pop(taken)
        assert held.state is JobState.RUNNING and held.claimed_by == "w", held
        assert {r.state for r in rows.values()} == {JobState.READY}, rows
    finally:
        await driver.close()


async def test_a_lost_claim_past_its_lease_end_with_the_store_out_lapses(
    pg_schema: str, proxy: Proxy
) -> None:
    """The bound: the store unreachable until the lease ended, the rows lapse as a dead worker's
    do: the next claim takes them, the lost claim's attempt spent and recorded `abandoned`, and
    the one on its final attempt is buried, never having run."""
    driver = _driver(proxy, pg_schema)
    try:
        at = T0 + 1_000
        await _lost_claim(driver, proxy, at, 300)
        await proxy.stop()  # the store out: the give-back never reaches it
        await asyncio.sleep(0.8)  # past the lease end: the give-back gave up
        rows = await _rows(pg_schema, ["id-0", "id-1", "id-2"])
        assert {r.state for r in rows.values()} == {JobState.RUNNING}
        async with PgDriver(PG_URL, schema=pg_schema, pool_size=1) as direct:
            got = await direct.job_claim(_claim(at + 300, "w2"))
        # (`id-0`, answered, lapses too here: its worker never heartbeats.)
        assert [(j.id, j.attempt) for j in got.jobs] == [("id-0", 2), ("id-1", 2)]
        assert got.buried == (BuriedJob("id-2", "n", "q", JobState.DEAD),)
        history = (await _rows(pg_schema, ["id-1"]))["id-1"].attempts
        assert [(a.worker_id, a.outcome) for a in history] == [("w", AttemptOutcome.ABANDONED)]
    finally:
        await driver.close()


async def test_a_driver_closed_with_a_lost_claim_pending_opens_no_pool_again(
    pg_schema: str, proxy: Proxy
) -> None:
    """The give-back stops at the driver's close (a worker's stop closes its driver): no call
    after it opens a pool that nobody would close."""
    driver = _driver(proxy, pg_schema)
    try:
        await _lost_claim(driver, proxy, T0 + 1_000, LEASE_MS)
        await proxy.stop()  # the store out: the give-back waits to retry
        await driver.close()
        await asyncio.sleep(2 * _RETRY_S + 0.2)  # two retries' time
        here = driver._loops.peek()
        assert here is None or here.pool is None
        rows = await _rows(pg_schema, ["id-1", "id-2"])
        assert {r.state for r in rows.values()} == {JobState.RUNNING}
    finally:
        with contextlib.suppress(Exception):
            await driver.close()


async def _reported(driver: PgDriver | Any, worker: str, start: int) -> list[BuriedJob]:
    """What the next claims of `worker` report buried, claimed until one reports something
    (the lost claim's look runs in the background) and once more after (nothing twice)."""
    got: list[BuriedJob] = []
    for n in range(250):
        answer = await driver.job_claim(_claim(start + n, worker))
        got += answer.buried
        if got:
            answer = await driver.job_claim(_claim(start + n + 1, worker))
            return got + list(answer.buried)
        await asyncio.sleep(0.02)
    return got


async def test_rows_a_lost_claim_buried_are_reported_with_the_next_claim(
    pg_schema: str, proxy: Proxy
) -> None:
    """The claim whose answer was lost buried a lapsed final attempt: the answer that named
    it was lost, so nobody counted, logged, hooked or unwound that dead letter. Its worker's
    next claim reports it in `buried` (the worker's burial path then runs for it), once."""
    driver = _driver(proxy, pg_schema)
    try:
        await driver.job_claim(replace(_claim(T0), queues=("other",)))
        await driver.job_enqueue(replace(job(3), max_attempts=1))
        dying = await driver.job_claim(replace(_claim(T0, "w0"), lease_ms=100))
        assert [j.id for j in dying.jobs] == ["id-3"]
        proxy.drop_next_reply(until=READY)
        with pytest.raises(DriverUnavailableError):
            await driver.job_claim(_claim(T0 + 1_000))
        assert proxy.dropped == 1
        assert (await _rows(pg_schema, ["id-3"]))["id-3"].state is JobState.DEAD
        reported = await _reported(driver, "w", T0 + 2_000)
        assert reported == [BuriedJob("id-3", "n", "q", JobState.DEAD)]
    finally:
        await driver.close()
