"""The operator family on real Postgres, where the contract cannot see the difference: counter
shards summed, folds racing, a requeue racing an enqueue of its key, calls of one statement."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from psycopg import sql

from jobs_core.driver import MAX_TIME_MS
from jobs_core.records import (
    Ack,
    ClaimParams,
    CounterReadParams,
    CounterRow,
    RequeueAnswer,
    RequeueParams,
)
from jobs_core.semantics import HOUR_MS, MINUTE_MS, minute_of
from jobs_core.states import JobState
from jobs_pg import PgDriver
from jobs_pg.driver import counter_shard
from jobs_pg.schema import COUNTER_SHARDS
from tests.core.support import T0, new_job
from tests.pg.conftest import PG_URL, admin
from tests.pg.support import wait_for_lock_wait

EVERYTHING = CounterReadParams(0, MAX_TIME_MS)


def workers_on_shards(count: int, *, same: bool = False) -> list[str]:
    """`count` worker ids on `count` different counter shards (or all on one shard)."""
    found: dict[int, str] = {}
    same_shard: list[str] = []
    for n in range(10_000):
        w = f"w{n}"
        s = counter_shard(w)
        if same:
            if s == counter_shard("w0"):
                same_shard.append(w)
            if len(same_shard) == count:
                return same_shard
        else:
            found.setdefault(s, w)
            if len(found) == count:
                return list(found.values())
    raise AssertionError("no such worker ids")


def counter_rows(schema: str) -> list[tuple[Any, ...]]:
    """The raw counter rows: (width, bucket, name, queue, shard, completed)."""
    with admin() as conn:
        return conn.execute(
            sql.SQL(
                "SELECT width_ms, bucket_ms, name, queue, shard, completed FROM {}.counters"
                " ORDER BY width_ms, bucket_ms, name, queue, shard"
            ).format(sql.Identifier(schema))
        ).fetchall()


async def ack_as(d: PgDriver, worker: str, job_ids: list[str], now: int, queue: str) -> None:
    """Claim `job_ids` (the whole queue) as `worker` and ack them at `now`."""
    got = await d.job_claim(ClaimParams((queue,), worker, len(job_ids), 60_000, now))
    assert sorted(j.id for j in got.jobs) == sorted(job_ids)
    assert await d.job_ack([Ack(j.fence, now) for j in got.jobs]) == [True] * len(job_ids)


async def test_workers_add_to_their_own_shard_and_a_read_sums_them(pg: PgDriver) -> None:
    workers = workers_on_shards(3)
    t = T0 + 30_000
    for n, w in enumerate(workers):
        ids = [f"{w}-{i}" for i in range(n + 1)]
        await pg.job_enqueue_many([new_job(i, i, queue="q") for i in ids])
        await ack_as(pg, w, ids, t, queue="q")
    # The same name in another queue is another bucket.
    await pg.job_enqueue(new_job("other", "other", queue="r"))
    await ack_as(pg, workers[0], ["other"], t, queue="r")
    rows = [r for r in counter_rows(pg.schema) if r[3] == "q"]
    # One row per worker's shard for the one contract bucket (name n, queue q, this minute)...
    assert [(r[4], r[5]) for r in rows] == sorted(
        (counter_shard(w), n + 1) for n, w in enumerate(workers)
    )
    assert {(r[0], r[1], r[2]) for r in rows} == {(MINUTE_MS, minute_of(t), "n")}
    # ...answered as one bucket, the shards summed.
    assert await pg.counter_read(EVERYTHING) == [
        CounterRow("n", "q", minute_of(t), MINUTE_MS, completed=6),
        CounterRow("n", "r", minute_of(t), MINUTE_MS, completed=1),
    ]
    assert await pg.counter_read(CounterReadParams(0, MAX_TIME_MS, queues=("r",))) == [
        CounterRow("n", "r", minute_of(t), MINUTE_MS, completed=1),
    ]
    # The fold makes each one hour row (shard 0) and counts two buckets, not four rows.
    assert await pg.counter_fold(t + 3 * HOUR_MS, 10) == 2
    assert counter_rows(pg.schema) == [
        (HOUR_MS, t - t % HOUR_MS, "n", "q", 0, 6),
        (HOUR_MS, t - t % HOUR_MS, "n", "r", 0, 1),
    ]
    assert 0 <= min(counter_shard(w) for w in workers) < COUNTER_SHARDS


async def seed_minute_buckets(pg: PgDriver, buckets: int, shards: int) -> int:
    """`buckets` old minute buckets of name n in queue q, each spread over `shards` shard rows
    (written straight to the table, as the settles would have); answers the total count."""
    total = 0
    with admin() as conn:
        for b in range(buckets):
            for s in range(shards):
                n = b * 10 + s + 1
                total += n
                conn.execute(
                    sql.SQL(
                        "INSERT INTO {}.counters (width_ms, bucket_ms, name, queue, shard,"
                        " completed, retried, dead_lettered, dropped, refused, interrupted, shed,"
                        " suspended, cancelled)"
                        " VALUES (%s, %s, 'n', 'q', %s, %s, 0, 0, 0, 0, 0, 0, 0, 0)"
                    ).format(sql.Identifier(pg.schema)),
                    (MINUTE_MS, T0 - T0 % HOUR_MS + b * MINUTE_MS, s, n),
                )
    return total


async def test_two_folds_racing_fold_each_bucket_once(pg: PgDriver) -> None:
    """A third session holds one shard row of the first bucket: both folders stop there, the
    first holding the rows before it. Once it lets go, one folds every bucket, whole; the
    other folds none of them twice and never half of one."""
    total = await seed_minute_buckets(pg, buckets=6, shards=3)
    folders = [PgDriver(PG_URL, schema=pg.schema, pool_size=2) for _ in range(2)]
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    now = T0 + 3 * HOUR_MS
    try:
        await other.execute(
            sql.SQL(
                "SELECT 1 FROM {}.counters WHERE shard = 1 AND bucket_ms = %s FOR UPDATE"
            ).format(sql.Identifier(pg.schema)),
            (T0 - T0 % HOUR_MS,),
        )
        folds = [asyncio.create_task(f.counter_fold(now, 100)) for f in folders]
        await wait_for_lock_wait(pg.schema, count=2)
        await other.commit()
        answers = await asyncio.wait_for(asyncio.gather(*folds), 30)
    finally:
        await other.close()
        for f in folders:
            await f.close()
    assert sorted(answers) == [0, 6]
    assert counter_rows(pg.schema) == [(HOUR_MS, T0 - T0 % HOUR_MS, "n", "q", 0, total)]


async def test_many_folds_at_once_add_up_to_the_buckets(pg: PgDriver) -> None:
    """Folders in small steps, side by side: their answers add up to the buckets, and the hour
    row holds every count once."""
    total = await seed_minute_buckets(pg, buckets=40, shards=4)
    folders = [PgDriver(PG_URL, schema=pg.schema, pool_size=2) for _ in range(4)]
    now = T0 + 3 * HOUR_MS

    async def fold_all(d: PgDriver) -> int:
        done = 0
        for _ in range(200):
            n = await d.counter_fold(now, 3)
            done += n
            if n == 0:
                return done
        raise AssertionError("the fold never ran dry")

    try:
        answers = await asyncio.gather(*(fold_all(f) for f in folders))
    finally:
        for f in folders:
            await f.close()
    assert sum(answers) == 40
    assert counter_rows(pg.schema) == [(HOUR_MS, T0 - T0 % HOUR_MS, "n", "q", 0, total)]


async def test_a_key_taken_after_the_snapshot_makes_that_requeue_a_duplicate(
    pg: PgDriver,
) -> None:
    """The requeue statement is held at its first row lock (a third session holds `a`) after
    its snapshot was taken; meanwhile an enqueue takes the key of `b`. The statement's write of
    `b` then meets that live row: `b` answers DUPLICATE, `a` and `c` are requeued all the same."""
    await pg.job_enqueue_many([new_job(i, f"k-{i}") for i in ("a", "b", "c")])
    assert len(await pg.job_cancel_many(["a", "b", "c"], T0)) == 3
    requeuer = PgDriver(PG_URL, schema=pg.schema, pool_size=2)
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    try:
        await other.execute(
            sql.SQL("SELECT 1 FROM {}.jobs WHERE id = 'a' FOR UPDATE").format(
                sql.Identifier(pg.schema)
            )
        )
        params = RequeueParams(("c", "b", "a", "b"), T0 + 1)
        requeue = asyncio.create_task(requeuer.job_requeue_many(params))
        await wait_for_lock_wait(pg.schema)
        taken = await pg.job_enqueue(new_job("b2", "k-b"))
        assert not taken.deduped
        await other.commit()
        answers = await asyncio.wait_for(requeue, 30)
    finally:
        await other.close()
        await requeuer.close()
    assert answers == [
        RequeueAnswer.REQUEUED,
        RequeueAnswer.DUPLICATE,
        RequeueAnswer.REQUEUED,
        RequeueAnswer.DUPLICATE,
    ]
    rows = await pg.job_get_many(["a", "b", "b2", "c"])
    assert {i: r.state for i, r in rows.items()} == {
        "a": JobState.READY,
        "b": JobState.CANCELLED,
        "b2": JobState.READY,
        "c": JobState.READY,
    }


async def test_each_bulk_call_is_one_round_trip_for_a_thousand_ids(pg_schema: str) -> None:
    """1,000 ids (repeats included) cost each bulk call one statement, counters and all."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2)
    statements: list[str] = []
    real = d._execute

    async def spy(conn: Any, text: str, args: Any, **kw: Any) -> Any:
        statements.append(d._name_of(text))
        return await real(conn, text, args, **kw)

    d._execute = spy  # type: ignore[method-assign]
    try:
        await d.job_enqueue_many([new_job(f"j{i:04}", f"k{i}") for i in range(900)])
        ids = [f"j{i:04}" for i in range(900)] + [f"j{i:04}" for i in range(50)] + ["x"] * 50
        calls = (
            d.job_promote(ids, T0),
            d.job_cancel_many(ids, T0),
            d.job_requeue_many(RequeueParams(tuple(ids), T0 + 1)),
            d.job_requeue_many(
                RequeueParams(tuple(ids), T0 + 2, tuple(f"r{n}" for n in range(len(ids))))
            ),
            d.job_remove(ids),
        )
        for call in calls:
            statements.clear()
            answers = await call
            assert len(answers) == 1_000
            assert len(statements) == 1, statements
    finally:
        await d.close()
