"""Retention on Redis: the finished index stays exact, a purge leaves no trace of a row, the
worker purges, and purgers racing on one server remove each row once."""

from __future__ import annotations

import time
from typing import Any

from jobs_core.clock import FakeClock
from jobs_core.records import Ack, CancelAnswer, ClaimParams, Nack, NackKind, PurgeParams
from jobs_core.states import FINISHED_STATES, LIVE_STATES, JobState
from jobs_redis import RedisDriver
from tests.core.retention_support import (
    finish,
    new_job,
    purgers_at_once_remove_each_row_once,
    worker_purges_old_finished_rows,
)
from tests.core.support import advance_quietly
from tests.redis.conftest import CONNECT_TIMEOUT_S, REDIS_URL, Factory, fresh_prefix, purge

T = 1_800_000_000_000


def _clock() -> FakeClock:
    return FakeClock(start_ms=time.time_ns() // 1_000_000)


async def _index_is_exact(driver: RedisDriver) -> dict[str, str]:
    """Every finished row is in its state's zset scored by finished_at, and nothing else is."""
    client: Any = driver.client
    rows = await client.hgetall(driver.keys.state)
    states = {i: r.split("\x00") for i, r in rows.items()}
    for state in FINISHED_STATES:
        indexed = dict(await client.zrange(driver.keys.finished(state), 0, -1, withscores=True))
        want = {i: float(f[6]) for i, f in states.items() if f[0] == state.value}
        assert indexed == want, (state, indexed, want)
    return {i: f[0] for i, f in states.items()}


async def test_every_finishing_script_keeps_the_finished_index(make_driver: Factory) -> None:
    async with make_driver() as d:
        ids = ["ack", "fail", "drop", "refuse", "cancel", "bury", "again", "live"]
        await d.job_enqueue_many([new_job(i, T) for i in ids])
        got = await d.job_claim(ClaimParams(("q",), "w", 10, 1000, T))
        f = {j.id: j.fence for j in got.jobs}
        assert await d.job_ack([Ack(f["ack"], T + 1), Ack(f["again"], T + 1)]) == [True, True]
        assert (
            await d.job_nack(
                [
                    Nack(f["fail"], NackKind.FAIL, T + 2, error="e"),
                    Nack(f["drop"], NackKind.FAIL, T + 3, dead_letter=False),
                    Nack(f["refuse"], NackKind.REFUSE, T + 4),
                    Nack(f["live"], NackKind.RETRY, T + 5, run_at_ms=T + 10**6),
                ]
            )
            == [True] * 4
        )
        await d.job_cancel("cancel", T + 6)
        # "bury" is reclaimed as its lease lapses, until the lapse of its third (final) attempt.
        for at in (T + 2000, T + 4000):
            again = await d.job_claim(ClaimParams(("q",), "w", 10, 1000, at))
            assert [j.id for j in again.jobs] == ["bury"]
        last = await d.job_claim(ClaimParams(("q",), "w", 10, 1000, T + 10_000))
        assert [b.id for b in last.buried] == ["bury"] and not last.jobs
        await d.job_requeue("again", T + 20)
        states = await _index_is_exact(d)
        assert states["bury"] == "dead" and states["again"] == "ready", states
        assert states["refuse"] == "failed" and states["drop"] == "failed", states

        # Purge everything finished: no field of any hash and no zset member names them.
        n = await d.job_purge(PurgeParams(T + 10**9, 100, 0, 0, 0, 0))
        gone = {i for i, s in states.items() if JobState(s) in FINISHED_STATES}
        assert n == len(gone) == 6
        client: Any = d.client
        for key in [k async for k in client.scan_iter(match=d.keys.pattern())]:
            kind = await client.type(key)
            if kind == "hash":
                members = set(await client.hkeys(key))
            elif kind == "zset":
                members = set(await client.zrange(key, 0, -1))
            else:
                continue
            assert not members & gone, (key, members & gone)
        left = await _index_is_exact(d)
        assert sorted(left) == ["again", "live"]
        assert all(JobState(s) in LIVE_STATES for s in left.values())


async def test_a_worker_purges_old_finished_rows_and_keeps_the_rest(make_driver: Factory) -> None:
    async def advance(clock: FakeClock, ms: int) -> None:
        await advance_quietly(clock, ms, sleepers=3, step_ms=500)

    async with make_driver() as d:
        await worker_purges_old_finished_rows(d, _clock(), advance)
        await _index_is_exact(d)


async def test_purgers_on_several_clients_remove_each_row_once() -> None:
    prefix = fresh_prefix()
    drivers = [
        RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S) for _ in range(3)
    ]
    try:
        await purgers_at_once_remove_each_row_once(list(drivers), _clock(), rows=3000)
        await _index_is_exact(drivers[0])
    finally:
        await purge(drivers[0])
        for d in drivers:
            await d.close()


async def test_upgrade_indexes_rows_that_finished_before_the_index(make_driver: Factory) -> None:
    async with make_driver() as d:
        await finish(d, [f"c{i:04d}" for i in range(1500)], JobState.COMPLETED, T)
        await finish(d, ["x"], JobState.CANCELLED, T)
        await d.job_enqueue(new_job("live", T))
        client: Any = d.client
        # What a store written by the previous version holds: rows, and no finished index.
        for state in FINISHED_STATES:
            await client.delete(d.keys.finished(state))
        await d.migrate()
        await d.migrate()  # idempotent
        await _index_is_exact(d)
        assert await d.job_purge(PurgeParams(T + 1, 10_000, 0, 0, 0, 0)) == 1501


async def test_a_purged_id_reused_in_another_queue_is_cancelled_by_a_stale_client() -> None:
    prefix = fresh_prefix()
    a, b = (
        RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S),
        RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S),
    )
    try:
        await a.job_enqueue(new_job("x", T, queue="q1"))
        await a.job_claim(ClaimParams(("q1",), "w", 1, 1000, T))
        # Another client cancels, purges and reuses the id in another queue; `a` still
        # remembers the queue of its claim.
        assert await b.job_cancel("x", T + 1) is CancelAnswer.CANCELLED
        assert await b.job_purge(PurgeParams(T + 2, 10, None, 0, None, None)) == 1
        await b.job_enqueue(new_job("x", T + 3, queue="q2"))
        assert await a.job_cancel("x", T + 5) is CancelAnswer.CANCELLED
        assert (await a.job_get_many(["x"]))["x"].queue == "q2"
        await _index_is_exact(a)
    finally:
        await purge(a)
        await a.close()
        await b.close()
