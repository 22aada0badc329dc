"""The flows family on real Postgres: the finish rule under races the memory driver cannot have.

The rules themselves are the parity scenarios' (`jobs_core.testing.scenarios.flows`, run here by
`test_parity.py`). This file races separate connections at the moments that matter, made exact
with a row lock held by a bystander session (`pg_stat_activity` tells when the racers queue):

* the last two dependencies of one waiter finishing at once release it exactly once, at 0;
* `join_enqueue` racing a dependency's ack, in both lock orders, never leaves the waiter parked
  (the ack's snapshot predates the edge: only a fresh snapshot, the trigger's, sees it);
* a watched row's finish reaches `finish_subscribe`, an unwatched one's does not;
* remove and cancel of a dependency count as not completed, and a PARK nack's join.
Drivers run with `conflict_retries=0` and must meet no deadlock (`conflicts_seen`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    JobFilter,
    JobListParams,
    JoinEnqueue,
    JoinPolicy,
    JoinState,
    Nack,
    NackKind,
)
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import until_live
from jobs_pg import PgDriver
from jobs_pg.driver import wake_channel
from tests.core.support import T0, new_job
from tests.pg.conftest import PG_URL, admin
from tests.pg.support import wait_for_lock_wait

LEASE = 60_000


@pytest.fixture
async def two(pg_schema: str) -> AsyncIterator[tuple[PgDriver, PgDriver]]:
    """Two drivers (two pools) on the test's schema, neither retrying a deadlock."""
    a = PgDriver(PG_URL, schema=pg_schema, pool_size=4, conflict_retries=0)
    b = PgDriver(PG_URL, schema=pg_schema, pool_size=4, conflict_retries=0)
    async with a, b:
        yield a, b
        assert a.conflicts_seen == 0
        assert b.conflicts_seen == 0


async def claim_all(d: PgDriver, n: int, now: int = T0) -> dict[str, ClaimedJob]:
    got = await d.job_claim(ClaimParams(("q",), "w", n, LEASE, now))
    return {j.id: j for j in got.jobs}


def edges(schema: str) -> list[tuple[str, str]]:
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT dep_id, waiter_id FROM {} ORDER BY 1, 2").format(
                sql.Identifier(schema, "joins")
            )
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


def row_locker(schema: str, job_id: str) -> psycopg.Connection[tuple[object, ...]]:
    """A bystander session holding `job_id`'s row lock until it commits."""
    conn = admin()
    conn.autocommit = False
    got = conn.execute(
        sql.SQL("SELECT id FROM {} WHERE id = %s FOR UPDATE").format(
            sql.Identifier(schema, "jobs")
        ),
        (job_id,),
    ).fetchall()
    assert got == [(job_id,)]
    return conn


async def test_a_join_counts_each_finish_and_the_claim_answers_it(pg: PgDriver) -> None:
    await pg.job_enqueue_many([new_job("a", "a"), new_job("b", "b")])
    [ans] = await pg.join_enqueue([JoinEnqueue(new_job("w", "w"), ("a", "b"))])
    assert ans.enqueued is not None and not ans.enqueued.deduped
    w = (await pg.job_get_many(["w"]))["w"]
    assert (w.state, w.run_at_ms) == (JobState.PARKED, None)
    assert w.join == JoinState(2, 2, 0, JoinPolicy.SUCCESS)
    held = await claim_all(pg, 2)
    assert set(held) == {"a", "b"}  # the parked waiter is not due
    assert await pg.job_ack([Ack(held["a"].fence, T0 + 5)]) == [True]
    assert (await pg.job_get_many(["w"]))["w"].join == JoinState(2, 1, 0, JoinPolicy.SUCCESS)
    fail = Nack(held["b"].fence, NackKind.FAIL, T0 + 9, error="boom")
    assert await pg.job_nack([fail]) == [True]
    w = (await pg.job_get_many(["w"]))["w"]
    assert (w.state, w.run_at_ms) == (JobState.READY, T0 + 9)
    assert w.join == JoinState(2, 0, 1, JoinPolicy.SUCCESS)
    assert edges(pg.schema) == []
    [claimed] = (await claim_all(pg, 5, T0 + 9)).values()
    assert (claimed.id, claimed.join) == ("w", JoinState(2, 0, 1, JoinPolicy.SUCCESS))


async def test_a_released_waiter_wakes_its_queue_at_the_finishing_commit(pg: PgDriver) -> None:
    """The trigger NOTIFYs the released waiter's queue, as an enqueue does: an idle worker of
    it claims the waiter now, not at its next poll; a finish that releases nothing is silent.
    A PARK on finished rows (ready at once) wakes its queue too."""
    woken: list[str] = []
    sub = await pg.wake_subscribe(["wq", "q2"], woken.append)
    try:
        await until_live(sub, 10, "wake")
        await pg.job_enqueue_many([new_job("a", "a"), new_job("b", "b")])
        waiter = new_job("w", "w", queue="wq")
        [ans] = await pg.join_enqueue([JoinEnqueue(waiter, ("a", "b"))])
        assert ans.enqueued is not None
        held = await claim_all(pg, 2)
        assert await pg.job_ack([Ack(held["a"].fence, T0 + 5)]) == [True]
        await asyncio.sleep(0.5)  # a wake for w's queue, were there one, would be here by now
        assert "wq" not in woken
        assert await pg.job_ack([Ack(held["b"].fence, T0 + 6)]) == [True]
        for _ in range(500):
            if "wq" in woken:
                break
            await asyncio.sleep(0.01)
        assert woken.count("wq") == 1 and "q2" not in woken, woken
        # A PARK on a join whose rows all finished already is ready now: its queue is told too.
        await pg.job_enqueue(new_job("p", "p", queue="q2"))
        for _ in range(500):  # the enqueue's own wake first
            if "q2" in woken:
                break
            await asyncio.sleep(0.01)
        woken.clear()
        [p] = (await pg.job_claim(ClaimParams(("q2",), "w1", 1, LEASE, T0 + 7))).jobs
        assert await pg.job_nack([Nack(p.fence, NackKind.PARK, T0 + 8, join=("a", "b"))]) == [True]
        for _ in range(500):
            if "q2" in woken:
                break
            await asyncio.sleep(0.01)
        assert "q2" in woken, woken
        assert (await pg.job_get_many(["p"]))["p"].state is JobState.READY
    finally:
        await sub.close()


async def test_the_last_two_dependencies_finishing_at_once_release_exactly_once(
    two: tuple[PgDriver, PgDriver],
) -> None:
    a, b = two
    schema = a.schema
    for r in range(5):
        d1, d2, w = f"d1-{r}", f"d2-{r}", f"w-{r}"
        await a.job_enqueue_many([new_job(d1, d1), new_job(d2, d2)])
        await a.join_enqueue([JoinEnqueue(new_job(w, w), (d1, d2), JoinPolicy.ALWAYS)])
        held = await claim_all(a, 2)
        # Both acks finish their dependency, then queue on the waiter's row, held by a bystander.
        locker = await asyncio.to_thread(row_locker, schema, w)
        try:
            racing = asyncio.gather(
                a.job_ack([Ack(held[d1].fence, T0 + 10)]),
                b.job_ack([Ack(held[d2].fence, T0 + 20)]),
            )
            await wait_for_lock_wait(schema, count=2)
        finally:
            locker.commit()
            locker.close()
        assert list(await racing) == [[True], [True]]
        row = (await a.job_get_many([w]))[w]
        assert row.state is JobState.READY
        assert row.join == JoinState(2, 0, 0, JoinPolicy.ALWAYS)
        assert row.run_at_ms in (T0 + 10, T0 + 20)
        assert edges(schema) == []
        [claimed] = (await claim_all(a, 5, T0 + 20)).values()
        assert await a.job_ack([Ack(claimed.fence, T0 + 30)]) == [True]


@pytest.mark.parametrize("first", ["join", "ack"])
async def test_join_enqueue_racing_the_dependency_ack_never_parks_forever(
    two: tuple[PgDriver, PgDriver], first: str
) -> None:
    """Both queue on the dependency's row lock; whichever the lock lets in first, the waiter
    ends ready. With the join first, the ack's snapshot predates the edge it must move."""
    a, b = two
    schema = a.schema
    for r in range(3):
        d, w = f"d-{r}", f"w-{r}"
        await a.job_enqueue(new_job(d, d))
        held = await claim_all(a, 1)
        locker = await asyncio.to_thread(row_locker, schema, d)
        try:
            item = [JoinEnqueue(new_job(w, w), (d,))]
            acks = [Ack(held[d].fence, T0 + 7)]
            if first == "join":
                joined = asyncio.ensure_future(b.join_enqueue(item))
                await wait_for_lock_wait(schema, count=1)
                acked = asyncio.ensure_future(a.job_ack(acks))
            else:
                acked = asyncio.ensure_future(a.job_ack(acks))
                await wait_for_lock_wait(schema, count=1)
                joined = asyncio.ensure_future(b.join_enqueue(item))
            await wait_for_lock_wait(schema, count=2)
        finally:
            locker.commit()
            locker.close()
        assert await acked == [True]
        [ans] = await joined
        assert ans.enqueued is not None and not ans.enqueued.deduped
        row = (await a.job_get_many([w]))[w]
        assert row.state is JobState.READY, row
        assert row.join is not None and row.join.pending == 0 and row.join.failed == 0
        assert edges(schema) == []
        [claimed] = (await claim_all(a, 5, T0 + 7)).values()
        assert claimed.id == w
        assert await a.job_ack([Ack(claimed.fence, T0 + 8)]) == [True]


async def ack_all(d: PgDriver, held: list[ClaimedJob]) -> None:
    for job in held:
        assert await d.job_ack([Ack(job.fence, T0 + 3)]) == [True]


async def join_all(d: PgDriver, items: list[JoinEnqueue]) -> None:
    for item in items:
        [ans] = await d.join_enqueue([item])
        assert ans.enqueued is not None


async def test_joins_and_acks_racing_freely_leave_no_waiter_behind(
    two: tuple[PgDriver, PgDriver],
) -> None:
    """Rounds of ten dependencies acked one by one while waiters join on overlapping halves."""
    a, b = two
    for r in range(8):
        deps = [f"r{r}-d{i}" for i in range(10)]
        await a.job_enqueue_many([new_job(d, d) for d in deps])
        held = await claim_all(a, 10)
        joins = [
            JoinEnqueue(new_job(f"r{r}-w{i}", f"r{r}-w{i}"), tuple(deps[i : i + 5]))
            for i in range(6)
        ]

        await asyncio.gather(ack_all(a, [held[d] for d in reversed(deps)]), join_all(b, joins))
        rows = await a.job_get_many([j.job.id for j in joins])
        assert {i: (x.state, x.join and x.join.pending) for i, x in rows.items()} == {
            j.job.id: (JobState.READY, 0) for j in joins
        }
        assert edges(a.schema) == []
        await a.job_remove([j.job.id for j in joins])


async def test_remove_and_cancel_finish_without_completing(pg: PgDriver) -> None:
    await pg.job_enqueue_many([new_job(x, x) for x in ("a", "b", "c")])
    await pg.join_enqueue([JoinEnqueue(new_job("w", "w"), ("a", "b", "c"), JoinPolicy.ALWAYS)])
    held = await claim_all(pg, 1)
    assert list(held) == ["a"]
    await pg.job_cancel_many(["b"], T0 + 4)
    assert (await pg.job_get_many(["w"]))["w"].join == JoinState(3, 2, 1, JoinPolicy.ALWAYS)
    await pg.job_remove(["c"])
    assert (await pg.job_get_many(["w"]))["w"].join == JoinState(3, 1, 2, JoinPolicy.ALWAYS)
    assert await pg.job_ack([Ack(held["a"].fence, T0 + 6)]) == [True]
    w = (await pg.job_get_many(["w"]))["w"]
    assert (w.state, w.run_at_ms, w.join) == (
        JobState.READY,
        T0 + 6,
        JoinState(3, 0, 2, JoinPolicy.ALWAYS),
    )


async def test_a_removal_releasing_a_waiter_makes_it_due_at_its_creation(pg: PgDriver) -> None:
    await pg.job_enqueue(new_job("a", "a"))
    await pg.join_enqueue([JoinEnqueue(new_job("w", "w"), ("a",))])
    await pg.job_remove(["a"])
    w = (await pg.job_get_many(["w"]))["w"]
    assert (w.state, w.run_at_ms, w.join) == (
        JobState.READY,
        w.created_at_ms,
        JoinState(1, 0, 1, JoinPolicy.SUCCESS),
    )


async def test_a_park_nack_joins_and_a_claim_at_its_timeout_leaves_the_join(
    pg: PgDriver,
) -> None:
    await pg.job_enqueue_many([new_job("a", "a"), new_job("x", "x")])
    held = await claim_all(pg, 2)
    park = Nack(held["x"].fence, NackKind.PARK, T0 + 1, run_at_ms=T0 + 50, join=("a", "gone"))
    assert await pg.job_nack([park]) == [True]
    x = (await pg.job_get_many(["x"]))["x"]
    assert (x.state, x.run_at_ms, x.join) == (
        JobState.PARKED,
        T0 + 50,
        JoinState(2, 1, 1, JoinPolicy.ALWAYS),
    )
    # Its timeout comes first: claimed, it leaves the join; a's later ack moves it no more.
    [again] = (await claim_all(pg, 5, T0 + 50)).values()
    assert again.id == "x" and again.join == JoinState(2, 1, 1, JoinPolicy.ALWAYS)
    assert await pg.job_nack([Nack(again.fence, NackKind.PARK, T0 + 51)]) == [True]
    assert await pg.job_ack([Ack(held["a"].fence, T0 + 60)]) == [True]
    x = (await pg.job_get_many(["x"]))["x"]
    assert (x.state, x.run_at_ms, x.join) == (
        JobState.PARKED,
        None,
        JoinState(2, 1, 1, JoinPolicy.ALWAYS),
    )


async def test_a_park_on_finished_dependencies_goes_on_at_once(pg: PgDriver) -> None:
    await pg.job_enqueue_many([new_job("a", "a"), new_job("x", "x")])
    held = await claim_all(pg, 2)
    assert await pg.job_ack([Ack(held["a"].fence, T0 + 1)]) == [True]
    park = Nack(held["x"].fence, NackKind.PARK, T0 + 2, join=("a",))
    assert await pg.job_nack([park]) == [True]
    x = (await pg.job_get_many(["x"]))["x"]
    assert (x.state, x.run_at_ms, x.join) == (
        JobState.READY,
        T0 + 2,
        JoinState(1, 0, 0, JoinPolicy.ALWAYS),
    )


async def test_join_enqueue_refuses_unknown_dependencies_and_writes_nothing(
    pg: PgDriver,
) -> None:
    await pg.job_enqueue(new_job("a", "a"))
    answers = await pg.join_enqueue(
        [
            JoinEnqueue(new_job("w1", "w1"), ("nope", "a", "nada")),
            JoinEnqueue(new_job("w2", "w2"), ("a",)),
            JoinEnqueue(new_job("w3", "w3"), ("w2",)),
        ]
    )
    assert answers[0].enqueued is None and answers[0].missing == ("nope", "nada")
    assert answers[1].enqueued is not None and answers[2].enqueued is not None
    rows = await pg.job_get_many(["w1", "w2", "w3"])
    assert set(rows) == {"w2", "w3"}
    assert edges(pg.schema) == [("a", "w2"), ("w2", "w3")]


async def test_links_are_stored_listed_and_filtered(pg: PgDriver) -> None:
    from dataclasses import replace

    await pg.job_enqueue_many(
        [
            replace(new_job("c1", "c1"), parent_id="p", batch_id="b1"),
            replace(new_job("c2", "c2"), parent_id="p"),
            new_job("c3", "c3"),
        ]
    )
    rows = await pg.job_get_many(["c1", "c2", "c3"])
    assert [(r.parent_id, r.batch_id, r.join) for r in rows.values()] == [
        ("p", "b1", None),
        ("p", None, None),
        (None, None, None),
    ]
    by_parent = await pg.job_list(JobListParams(JobFilter(parent_id="p")))
    assert sorted(s.id for s in by_parent.jobs) == ["c1", "c2"]
    by_batch = await pg.job_list(JobListParams(JobFilter(batch_id="b1")))
    assert [(s.id, s.parent_id, s.batch_id) for s in by_batch.jobs] == [("c1", "p", "b1")]


async def test_a_watched_finish_is_announced_and_an_unwatched_one_is_not(pg: PgDriver) -> None:
    seen: list[str] = []
    arrived = asyncio.Event()

    def on_finish(job_id: str) -> None:
        seen.append(job_id)
        arrived.set()

    sub = await pg.finish_subscribe(on_finish)
    assert sub is not None
    try:
        deadline = time.monotonic() + 20
        while not sub.is_live():
            assert time.monotonic() < deadline, "the finish channel never proved live"
            await asyncio.sleep(0.05)
        await pg.job_enqueue_many([new_job("a", "a"), new_job("b", "b")])
        watched = await pg.job_watch(["a", "nope"])
        assert list(watched) == ["a"] and watched["a"].state is JobState.READY
        held = await claim_all(pg, 2)
        assert await pg.job_ack([Ack(held["b"].fence, T0 + 1)]) == [True]
        assert await pg.job_ack([Ack(held["a"].fence, T0 + 2)]) == [True]
        await asyncio.wait_for(arrived.wait(), 10)
        await asyncio.sleep(0.3)  # b's announcement, were there one, would have come first
        assert seen == ["a"]
    finally:
        await sub.close()


def test_the_trigger_announces_on_the_channel_the_driver_listens_to() -> None:
    """The version script spells the channel out (frozen history); the driver's must agree, for
    a short schema name and for a long one (hashed)."""
    from importlib import import_module

    script = import_module("jobs_pg.migrations.versions.0010_flows")
    for schema in ("ujobs", "s" * 80, "q'u\"o%te ☃"):
        for family in ("finish", "wake"):
            assert script._channel(schema, family) == wake_channel(schema, family)


async def test_a_reused_id_does_not_inherit_the_edges_of_a_removed_waiter(pg: PgDriver) -> None:
    await pg.job_enqueue_many([new_job("a", "a"), new_job("b", "b")])
    await pg.join_enqueue([JoinEnqueue(new_job("w", "w"), ("a",))])
    await pg.job_remove(["w"])
    assert edges(pg.schema) == [("a", "w")]  # left for a's finish to clear
    await pg.join_enqueue([JoinEnqueue(new_job("w", "w2"), ("b",))])
    assert edges(pg.schema) == [("b", "w")]
    held = await claim_all(pg, 2)
    assert await pg.job_ack([Ack(held["a"].fence, T0 + 1)]) == [True]
    w = (await pg.job_get_many(["w"]))["w"]
    assert (w.state, w.join) == (JobState.PARKED, JoinState(1, 1, 0, JoinPolicy.SUCCESS))
