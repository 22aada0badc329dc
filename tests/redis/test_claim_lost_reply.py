"""A claim whose script ran on the server but whose reply the driver never read (the connection
dropped after the send). The caller gets X_DRIVER_UNAVAILABLE; the rows the script took are given
back (`ready` at once, the attempt given back) rather than held by nobody until their lease ends;
a store out past that lease end leaves them to lapse, the attempt spent (the bound)."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace

import pytest

from jobs_core.attempts import AttemptOutcome
from jobs_core.errors import DriverUnavailableError
from jobs_core.lost_claims import RETRY_S as _RETRY_S
from jobs_core.records import BuriedJob, ClaimParams, JobRecord
from jobs_core.states import JobState
from jobs_redis import RedisDriver
from tests.pg.test_driver import T0, job
from tests.redis.conftest import CONNECT_TIMEOUT_S, REDIS_URL, fresh_prefix, purge
from tests.redis.proxy import RedisProxy

LEASE_MS = 5_000


def _claim(now_ms: int, worker: str = "w") -> ClaimParams:
    return ClaimParams(("q",), worker, 3, LEASE_MS, now_ms)


async def _lost_claim(driver: RedisDriver, proxy: RedisProxy, at: int, lease_ms: int) -> None:
    """`id-0` claimed by "w" at `at`, then `id-1` and `id-2` (on its final attempt) by a claim
    of "w" at `at` too, whose reply is lost."""
    # The script loaded first (the reply lost must be the claim's, not a NOSCRIPT's).
    await driver.job_claim(replace(_claim(T0), queues=("other",)))
    await driver.job_enqueue_many([job(0), job(1), replace(job(2), max_attempts=1)])
    # A claim of the same worker in the same millisecond, answered: its row is not the lost one's.
    held = await driver.job_claim(replace(_claim(at), limit=1, lease_ms=lease_ms))
    assert [j.id for j in held.jobs] == ["id-0"]
    proxy.drop_next_reply()
    with pytest.raises(DriverUnavailableError):
        await driver.job_claim(replace(_claim(at), lease_ms=lease_ms))
    assert proxy.dropped == 1


async def test_a_claim_whose_reply_is_lost_gives_its_rows_back(proxy: RedisProxy) -> None:
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix())
    try:
        at = T0 + 1_000
        await _lost_claim(driver, proxy, at, LEASE_MS)
        for _ in range(100):
            rows = await driver.job_get_many(["id-1", "id-2"])
            if all(r.state is JobState.READY for r in rows.values()):
                break
            await asyncio.sleep(0.02)
        for r in rows.values():
            # Given back as a drain gives back what it held unstarted: no attempt spent.
            assert r.state is JobState.READY and r.attempt == 0 and r.claims == 1, r
            (attempt,) = r.attempts
            assert (attempt.worker_id, attempt.outcome) == ("w", AttemptOutcome.INTERRUPTED)
            assert attempt.claimed_at_ms == at <= attempt.settled_at_ms == r.run_at_ms
        kept = (await driver.job_get_many(["id-0"]))["id-0"]
        assert kept.state is JobState.RUNNING and kept.claimed_by == "w" and kept.attempt == 1
        got = await driver.job_claim(_claim(at + 1_000, "w2"))
        assert sorted((j.id, j.attempt) for j in got.jobs) == [("id-1", 1), ("id-2", 1)]
        assert got.buried == ()
    finally:
        with contextlib.suppress(Exception):
            await purge(driver)
        await driver.close()


async def test_rows_a_later_claim_of_the_same_millisecond_took_are_not_given_back(
    proxy: RedisProxy,
) -> None:
    """The give-back tells the lost claim's rows by worker, lease end and claim time: a claim of
    the same worker and millisecond answered after the loss, before the give-back got through,
    took rows that look the same. They stay with it, running; only the lost claim's go back."""
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix(), connect_timeout=0.2)
    direct = RedisDriver(REDIS_URL, prefix=driver.keys.prefix, connect_timeout=CONNECT_TIMEOUT_S)
    try:
        at = T0 + 1_000
        await _lost_claim(driver, proxy, at, LEASE_MS)
        await proxy.stop()  # the give-back waits out the store's absence, retrying
        await direct.job_enqueue_many([job(3)])
        await proxy.start()
        later = await driver.job_claim(replace(_claim(at), limit=1))
        (taken,) = [j.id for j in later.jobs]
        for _ in range(150):
            rows = await direct.job_get_many(["id-1", "id-2", "id-3"])
            if sum(r.state is JobState.READY for r in rows.values()) == 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(_RETRY_S + 0.1)  # a retry more, had one been pending
        rows = await direct.job_get_many(["id-1", "id-2", "id-3"])
        held = rows.pop(taken)
        assert held.state is JobState.RUNNING and held.claimed_by == "w", held
        assert {r.state for r in rows.values()} == {JobState.READY}, rows
    finally:
        with contextlib.suppress(Exception):
            await purge(direct)
        await direct.close()
        await driver.close()


async def test_a_lost_claim_past_its_lease_end_with_the_store_out_lapses(
    proxy: RedisProxy,
) -> None:
    """The bound: the store unreachable until the lease ended, the rows lapse as a dead worker's
    do: the next claim takes them, the lost claim's attempt spent and recorded `abandoned`, and
    the one on its final attempt is buried, never having run."""
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix(), connect_timeout=0.2)
    direct = RedisDriver(REDIS_URL, prefix=driver.keys.prefix, connect_timeout=CONNECT_TIMEOUT_S)
    try:
        at = T0 + 1_000
        await _lost_claim(driver, proxy, at, 300)
        await proxy.stop()  # the store out: the give-back never reaches it
        await asyncio.sleep(0.6)  # past the lease end: the give-back gave up
        rows = await direct.job_get_many(["id-0", "id-1", "id-2"])
        assert {r.state for r in rows.values()} == {JobState.RUNNING}
        got = await direct.job_claim(_claim(at + 300, "w2"))
        # (`id-0`, answered, lapses too here: its worker never heartbeats.)
        assert [(j.id, j.attempt) for j in got.jobs] == [("id-0", 2), ("id-1", 2)]
        assert got.buried == (BuriedJob("id-2", "n", "q", JobState.DEAD),)
        history = (await direct.job_get_many(["id-1"]))["id-1"].attempts
        assert [(a.worker_id, a.outcome) for a in history] == [("w", AttemptOutcome.ABANDONED)]
    finally:
        with contextlib.suppress(Exception):
            await purge(direct)
        await direct.close()
        await driver.close()


async def test_a_driver_closed_with_a_lost_claim_pending_opens_no_client_again(
    proxy: RedisProxy,
) -> None:
    """The give-back stops at the driver's close (a worker's stop closes its driver): no call
    after it opens a client that nobody would close."""
    # The calls before the cut connect through the proxy: 0.2 s failed one under the test
    # command's load. After it the port is closed, so a retry's connect is refused at once.
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix(), connect_timeout=2.0)
    try:
        await _lost_claim(driver, proxy, T0 + 1_000, LEASE_MS)
        await proxy.stop()  # the store out: the give-back waits to retry
        await driver.close()
        await asyncio.sleep(1.2)  # two retries' time
        assert driver._loops.peek() is None
    finally:
        await driver.close()
        direct = RedisDriver(
            REDIS_URL, prefix=driver.keys.prefix, connect_timeout=CONNECT_TIMEOUT_S
        )
        with contextlib.suppress(Exception):
            await purge(direct)
        await direct.close()


async def test_a_claim_cancelled_before_its_reply_was_read_gives_its_rows_back(
    proxy: RedisProxy,
) -> None:
    """Its caller gone (a worker's drain cancels the claim it waited out too long) after the
    script ran: its rows go back to `ready`, not left `running` for nobody until the lease."""
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix())
    try:
        await driver.job_claim(replace(_claim(T0), queues=("other",)))
        await driver.job_enqueue_many([job(1), job(2)])
        proxy.drop_next_reply(until=b"never in a reply")  # held back until the cut
        claim = asyncio.ensure_future(driver.job_claim(_claim(T0 + 1_000)))
        for _ in range(100):
            rows = await direct_rows(driver.keys.prefix)
            if all(r.state is JobState.RUNNING for r in rows.values()):
                break
            await asyncio.sleep(0.02)
        claim.cancel()
        with pytest.raises(asyncio.CancelledError):
            await claim
        for _ in range(100):
            rows = await driver.job_get_many(["id-1", "id-2"])
            if all(r.state is JobState.READY for r in rows.values()):
                break
            await asyncio.sleep(0.02)
        assert {(r.state, r.attempt) for r in rows.values()} == {(JobState.READY, 0)}
    finally:
        with contextlib.suppress(Exception):
            await purge(driver)
        await driver.close()


async def direct_rows(prefix: str) -> dict[str, JobRecord]:
    """The rows as the server holds them, read past the proxy."""
    direct = RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S)
    try:
        return await direct.job_get_many(["id-1", "id-2"])
    finally:
        await direct.close()


async def test_rows_a_lost_claim_buried_are_reported_with_the_next_claim(
    proxy: RedisProxy,
) -> None:
    """As on Postgres (tests/pg/test_claim_lost_answer.py): the lapsed final attempt the lost
    claim buried is reported, once, with its worker's next claim."""
    from tests.pg.test_claim_lost_answer import _reported

    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix())
    try:
        await driver.job_claim(replace(_claim(T0), queues=("other",)))
        await driver.job_enqueue(replace(job(3), max_attempts=1))
        dying = await driver.job_claim(replace(_claim(T0, "w0"), lease_ms=100))
        assert [j.id for j in dying.jobs] == ["id-3"]
        proxy.drop_next_reply()
        with pytest.raises(DriverUnavailableError):
            await driver.job_claim(_claim(T0 + 1_000))
        assert proxy.dropped == 1
        assert (await direct_rows_of(driver.keys.prefix, ["id-3"]))["id-3"].state is JobState.DEAD
        reported = await _reported(driver, "w", T0 + 2_000)
        assert reported == [BuriedJob("id-3", "n", "q", JobState.DEAD)]
    finally:
        with contextlib.suppress(Exception):
            await purge(driver)
        await driver.close()


async def direct_rows_of(prefix: str, ids: list[str]) -> dict[str, JobRecord]:
    direct = RedisDriver(REDIS_URL, prefix=prefix)
    try:
        return await direct.job_get_many(ids)
    finally:
        await direct.close()
