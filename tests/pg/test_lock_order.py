"""The two deadlocks batches used to make, raced for seconds on real Postgres: none happens.

* A worker's heartbeat batch (claim order) and its ack batch (completion order, here reversed)
  over the same rows, at the same time.
* Two producers running `enqueue_many` over the same keys in opposite orders, at the same time
  (batches of one statement and batches of several chunks in one transaction).
* Two workers on one counter shard acking jobs of two names in opposite orders (the counter
  rows every ack upserts are locked in key order, after the job rows).

Every batch statement locks its rows in one order (ids for settles, the namespace for
enqueues), so they wait for each other and never deadlock. The drivers run with
`conflict_retries=0` and count every deadlock or serialization failure they meet
(`conflicts_seen`), so a deadlock cannot hide behind the retry: the count must stay 0.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import psycopg

from jobs_core.records import (
    Ack,
    ClaimParams,
    CounterReadParams,
    EnqueueResult,
    Heartbeat,
    NewJob,
)
from jobs_pg import PgDriver
from jobs_pg.driver import counter_shard
from tests.core.support import T0, new_job
from tests.pg.conftest import PG_URL
from tests.pg.support import wait_for_lock_wait

LEASE = 60_000
#: How long both races run side by side.
RACE_S = 6.0


def deadlocks(errors: list[BaseException]) -> list[BaseException]:
    return [e for e in errors if "40P01" in str(e) or "deadlock" in str(e)]


async def settle_race(
    d: PgDriver, acker: PgDriver, until: float, stats: dict[str, int]
) -> list[BaseException]:
    """Rounds of: claim 60 jobs, then heartbeat them in claim order while acking in reverse."""
    errors: list[BaseException] = []
    r = 0
    while time.monotonic() < until:
        r += 1
        await d.job_enqueue_many(
            [new_job(f"s{r}-{i:03}", f"s{r}-{i}", queue="s") for i in range(60)]
        )
        got = await d.job_claim(ClaimParams(("s",), "w", 60, LEASE, T0))
        assert len(got.jobs) == 60
        beats = [Heartbeat(j.fence, LEASE, T0 + 1) for j in got.jobs]
        acks = [Ack(j.fence, T0 + 2, None) for j in reversed(got.jobs)]
        for _ in range(3):
            hb, ack = await asyncio.gather(
                d.job_heartbeat(beats), acker.job_ack(acks), return_exceptions=True
            )
            errors += [e for e in (hb, ack) if isinstance(e, BaseException)]
            if not isinstance(ack, BaseException):
                # Every fence held until the ack, which lands whatever the heartbeat did.
                assert ack == [True] * 60
                stats["acked"] += sum(ack)
                break
        stats["settle_rounds"] += 1
    return errors


async def enqueue_race(
    p1: PgDriver, p2: PgDriver, until: float, stats: dict[str, int]
) -> list[BaseException]:
    """Rounds of: two producers enqueue the same keys, one ascending, one descending."""
    errors: list[BaseException] = []
    r = 0
    while time.monotonic() < until:
        r += 1
        # Every fourth round spans two chunks: the all-or-nothing transaction path.
        n = 1_100 if r % 4 == 0 else 120
        keys = [f"e{r}-{i:05}" for i in range(n)]
        up = [new_job(f"a{r}-{i}", k, queue="e") for i, k in enumerate(keys)]
        down = [new_job(f"b{r}-{i}", k, queue="e") for i, k in reversed(list(enumerate(keys)))]
        a, b = await asyncio.gather(
            p1.job_enqueue_many(up), p2.job_enqueue_many(down), return_exceptions=True
        )
        errors += [e for e in (a, b) if isinstance(e, BaseException)]
        if isinstance(a, list) and isinstance(b, list):
            check_one_holder_per_key(up, a, down, b)
        stats["enqueue_rounds"] += 1
    return errors


def check_one_holder_per_key(
    up: list[NewJob], a: list[EnqueueResult], down: list[NewJob], b: list[EnqueueResult]
) -> None:
    """Each key was inserted by exactly one producer, and both answer that holder's id."""
    holder: dict[str, str] = {}
    for jobs, answers in ((up, a), (down, b)):
        assert len(answers) == len(jobs)
        for j, ans in zip(jobs, answers, strict=True):
            if not ans.deduped:
                assert ans.id == j.id
                assert holder.setdefault(j.idempotency_key, j.id) == j.id
    for jobs, answers in ((up, a), (down, b)):
        for j, ans in zip(jobs, answers, strict=True):
            assert ans.id == holder[j.idempotency_key]


async def test_batches_never_deadlock(pg_schema: str) -> None:
    worker = PgDriver(PG_URL, schema=pg_schema, pool_size=4, conflict_retries=0, wake=False)
    acker = PgDriver(PG_URL, schema=pg_schema, pool_size=2, conflict_retries=0, wake=False)
    p1 = PgDriver(PG_URL, schema=pg_schema, pool_size=2, conflict_retries=0)
    p2 = PgDriver(PG_URL, schema=pg_schema, pool_size=2, conflict_retries=0)
    stats = {"settle_rounds": 0, "enqueue_rounds": 0, "acked": 0}
    try:
        until = time.monotonic() + RACE_S
        settle_errors, enqueue_errors = await asyncio.gather(
            settle_race(worker, acker, until, stats), enqueue_race(p1, p2, until, stats)
        )
        seen = sum(d.conflicts_seen for d in (worker, acker, p1, p2))
        print(f"lock-order race: {RACE_S} s, {stats}, 40P01/40001 seen: {seen}")
        assert deadlocks(settle_errors) == []
        assert deadlocks(enqueue_errors) == []
        assert settle_errors == [] and enqueue_errors == []
        assert seen == 0
        # The races really ran (each round collides on every row or key it touches).
        assert stats["settle_rounds"] >= 3 and stats["enqueue_rounds"] >= 3
        assert stats["acked"] == 60 * stats["settle_rounds"]
    finally:
        await worker.close()
        await acker.close()
        await p1.close()
        await p2.close()


async def test_heartbeat_and_ack_in_opposite_orders_wait_for_each_other(pg: PgDriver) -> None:
    """The middle row held by a third session makes both batches stop halfway: locking in the
    caller's order, each then held the half the other needed next (a certain deadlock)."""
    jobs = [new_job(f"m{i:02}", f"m{i}", queue="m") for i in range(40)]
    await pg.job_enqueue_many(jobs)
    got = (await pg.job_claim(ClaimParams(("m",), "w", 40, LEASE, T0))).jobs
    acker = PgDriver(PG_URL, schema=pg.schema, pool_size=2, conflict_retries=0)
    beater = PgDriver(PG_URL, schema=pg.schema, pool_size=2, conflict_retries=0)
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    try:
        await other.execute(
            f'SELECT 1 FROM "{pg.schema}".jobs WHERE id = %s FOR UPDATE', (got[20].id,)
        )
        beat = asyncio.create_task(
            beater.job_heartbeat([Heartbeat(j.fence, LEASE, T0 + 1) for j in got])
        )
        ack = asyncio.create_task(
            acker.job_ack([Ack(j.fence, T0 + 2, None) for j in reversed(got)])
        )
        await wait_for_lock_wait(pg.schema, count=2)
        await other.commit()
        beat_answer, ack_answer = await asyncio.wait_for(
            asyncio.gather(beat, ack, return_exceptions=True), 30
        )
        assert not isinstance(beat_answer, BaseException), beat_answer
        assert ack_answer == [True] * 40
        assert beater.conflicts_seen + acker.conflicts_seen == 0
    finally:
        await other.close()
        await acker.close()
        await beater.close()


async def test_enqueues_in_opposite_orders_wait_for_each_other(pg: PgDriver) -> None:
    """A third session's uncommitted row holds the middle key: both producers stop halfway.
    Inserting in the caller's order, each then held keys the other needed next."""
    keys = [f"k{i:02}" for i in range(40)]
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    p1 = PgDriver(PG_URL, schema=pg.schema, pool_size=2, conflict_retries=0)
    p2 = PgDriver(PG_URL, schema=pg.schema, pool_size=2, conflict_retries=0)
    try:
        await other.execute(
            f'INSERT INTO "{pg.schema}".jobs (id, run_id, name, queue, idempotency_key,'
            " input_json, state, priority, attempt, max_attempts, claims, run_at_ms,"
            " created_at_ms) VALUES ('x', 'x', 'n', 'e', %s, '{}', 'ready', 0, 0, 1, 0, 0, 0)",
            (keys[20],),
        )
        up = [new_job(f"a{i}", k, queue="e") for i, k in enumerate(keys)]
        down = [new_job(f"b{i}", k, queue="e") for i, k in reversed(list(enumerate(keys)))]
        a = asyncio.create_task(p1.job_enqueue_many(up))
        b = asyncio.create_task(p2.job_enqueue_many(down))
        await wait_for_lock_wait(pg.schema, count=2)
        await other.rollback()  # the middle key is free again: both go on
        got_a, got_b = await asyncio.wait_for(asyncio.gather(a, b, return_exceptions=True), 30)
        assert isinstance(got_a, list), got_a
        assert isinstance(got_b, list), got_b
        check_one_holder_per_key(up, got_a, down, got_b)
        assert p1.conflicts_seen + p2.conflicts_seen == 0
    finally:
        await other.close()
        await p1.close()
        await p2.close()


async def test_acks_of_two_workers_on_one_counter_shard_wait_for_each_other(pg: PgDriver) -> None:
    """Two workers whose settles share a counter shard ack jobs of two names, listed in opposite
    orders, while a third session holds the counter row of the first name: both stop there.
    Upserting counters in the caller's order, one would hold the second name's row by then and
    each would wait for the other (a certain deadlock); in key order both wait on the first."""
    w1, w2 = workers_on_one_shard()
    names = ("n-a", "n-b")
    jobs = [
        # One queue: a counter bucket is (name, queue), and the race needs both on one row.
        replace(new_job(f"{w}-{n}-{i}", f"{w}-{n}-{i}", queue="q"), name=n)
        for w in (w1, w2)
        for n in names
        for i in range(3)
    ]
    await pg.job_enqueue_many(jobs)
    # Each claims six of the twelve: the six least ids, three of each name, then the rest.
    held = {w: (await pg.job_claim(ClaimParams(("q",), w, 6, LEASE, T0))).jobs for w in (w1, w2)}
    assert all(sorted(j.name for j in h) == ["n-a"] * 3 + ["n-b"] * 3 for h in held.values())
    # A first ack of each name creates the counter rows the race then contends on.
    first = [held[w1][0], next(j for j in held[w1] if j.name == "n-b")]
    assert await pg.job_ack([Ack(j.fence, T0) for j in first]) == [True, True]
    rest = {w: [j for j in jobs_ if j not in first] for w, jobs_ in held.items()}
    a1 = PgDriver(PG_URL, schema=pg.schema, pool_size=2, conflict_retries=0)
    a2 = PgDriver(PG_URL, schema=pg.schema, pool_size=2, conflict_retries=0)
    other = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    try:
        await other.execute(f"SELECT 1 FROM \"{pg.schema}\".counters WHERE name = 'n-a' FOR UPDATE")
        by_name = {w: sorted(rest[w], key=lambda j: j.name) for w in (w1, w2)}
        # The batch listing n-a first queues on n-a's row first; the other comes second, so in
        # the caller's order it would be holding n-b's row when n-a's is let go.
        ack1 = asyncio.create_task(a1.job_ack([Ack(j.fence, T0) for j in by_name[w1]]))
        await wait_for_lock_wait(pg.schema, count=1)
        ack2 = asyncio.create_task(a2.job_ack([Ack(j.fence, T0) for j in reversed(by_name[w2])]))
        await wait_for_lock_wait(pg.schema, count=2)
        await other.commit()
        got1, got2 = await asyncio.wait_for(asyncio.gather(ack1, ack2, return_exceptions=True), 30)
        assert got1 == [True] * len(by_name[w1]), got1
        assert got2 == [True] * len(by_name[w2]), got2
        assert a1.conflicts_seen + a2.conflicts_seen == 0
    finally:
        await other.close()
        await a1.close()
        await a2.close()
    counts = {r.name: r.completed for r in await pg.counter_read(CounterReadParams(0, T0 + 1))}
    assert counts == {"n-a": 6, "n-b": 6}


def workers_on_one_shard() -> tuple[str, str]:
    """Two worker ids whose settles count on the same counter shard."""
    by_shard: dict[int, str] = {}
    for n in range(1_000):
        w = f"w{n}"
        s = counter_shard(w)
        if s in by_shard:
            return by_shard[s], w
        by_shard[s] = w
    raise AssertionError("no two worker ids share a shard")
