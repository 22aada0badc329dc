"""The flow family on Redis: random walks of joins, finishes and removals answered exactly as the
memory driver answers them (every backend), the finish channel, and what a plain row costs."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from typing import Any

import pytest

from jobs_core.driver import JobDriver
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    JobFilter,
    JobListParams,
    JoinEnqueue,
    JoinPolicy,
    Nack,
    NackKind,
    NewJob,
    PurgeParams,
    RemoveAnswer,
    RequeueParams,
)
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import until_live
from jobs_memory import MemoryDriver
from jobs_redis import RedisDriver
from tests.redis.conftest import Factory


def _job(job_id: str, at: int, queue: str, parent: str | None, batch: str | None) -> NewJob:
    return NewJob(
        id=job_id,
        run_id=f"run-{job_id}",
        name="flow",
        queue=queue,
        tenant_id=None,
        idempotency_key=job_id,
        input_json="{}",
        priority=0,
        run_at_ms=at,
        max_attempts=2,
        created_at_ms=at,
        parent_id=parent,
        batch_id=batch,
    )


class _Walk:
    """One seeded walk, applied to two drivers call by call; every answer must be equal."""

    def __init__(self, seed: int, a: JobDriver, b: JobDriver) -> None:
        self.rng = random.Random(seed)
        self.drivers = (a, b)
        self.now = 1_000
        self.ids: list[str] = []
        self.held: dict[str, ClaimedJob] = {}
        self.waiting: set[str] = set()
        self.released = self.failed = 0

    async def both(self, call: str, *args: Any) -> Any:
        got = [await getattr(d, call)(*args) for d in self.drivers]
        assert got[0] == got[1], (call, args, got)
        return got[0]

    def some(self, k: int) -> tuple[str, ...]:
        pool = [*self.ids, "ghost"]
        return tuple(self.rng.sample(pool, min(k, len(pool))))

    async def step(self) -> None:
        rng, self.now = self.rng, self.now + self.rng.choice((0, 1, 5, 40))
        op = rng.choice(
            (
                *("enqueue", "enqueue", "enqueue", "join", "join", "join", "claim", "claim"),
                *("claim", "settle", "settle", "settle", "settle", "cancel", "remove"),
                *("requeue", "purge", "watch", "list"),
            )
        )
        if op == "enqueue":
            i = f"j{len(self.ids)}"
            parent = rng.choice((None, None, *self.ids[-3:]))
            batch = rng.choice((None, "b1", "b2"))
            q = rng.choice(("q1", "q2"))
            job = _job(i, self.now, q, parent, batch)
            if rng.random() < 0.5:
                await self.both("job_enqueue", job)
            else:  # its namespace found past the flow fields (job_enqueue_many.lua's tail)
                await self.both("job_enqueue_many", [job, replace(job, id=f"{i}-again")])
            self.ids.append(i)
        elif op == "join":
            i = f"j{len(self.ids)}"
            after = self.some(rng.randint(1, 4))
            policy = rng.choice(tuple(JoinPolicy))
            job = _job(i, self.now, rng.choice(("q1", "q2")), None, rng.choice((None, "b1")))
            item = JoinEnqueue(job, after, policy)
            (answer,) = await self.both("join_enqueue", [item])
            if answer.enqueued is not None:
                self.ids.append(i)
        elif op == "claim":
            params = ClaimParams(("q1", "q2"), "w", rng.randint(1, 3), 30, self.now)
            got = await self.both("job_claim", params)
            for c in got.jobs:
                self.held[c.id] = c
        elif op == "settle" and self.held:
            c = self.held.pop(rng.choice(sorted(self.held)))
            kind = rng.choice(("ack", "ack", "ack", "fail", "refuse", "park_join", "park", "retry"))
            if kind == "ack":
                await self.both("job_ack", [Ack(c.fence, self.now, "1")])
                return
            nack = Nack(c.fence, NackKind.RETRY, self.now, run_at_ms=self.now + 3, error="e")
            if kind == "fail":
                nack = replace(nack, kind=NackKind.FAIL, dead_letter=rng.random() < 0.5)
            elif kind == "refuse":
                nack = replace(nack, kind=NackKind.REFUSE)
            elif kind == "park_join":
                run_at = rng.choice((None, self.now + 20))
                join = self.some(rng.randint(1, 3))
                if rng.random() < 0.2:
                    join = (c.id, *(j for j in join if j != c.id))
                nack = replace(nack, kind=NackKind.PARK, run_at_ms=run_at, join=join, error=None)
            elif kind == "park":
                nack = replace(nack, kind=NackKind.PARK, run_at_ms=self.now + 10, error=None)
            await self.both("job_nack", [nack])
        elif op == "cancel":
            await self.both("job_cancel_many", self.some(2), self.now)
        elif op == "remove":
            await self.both("job_remove", self.some(1))
        elif op == "requeue":
            await self.both("job_requeue_many", RequeueParams(self.some(2), self.now))
        elif op == "purge":
            await self.both("job_purge", PurgeParams(self.now, 5, 300, 300, 300, 300))
        elif op == "watch":
            await self.both("job_watch", self.some(2))
        elif op == "list":
            f = JobFilter(parent_id=rng.choice((None, *self.ids[-3:])), batch_id="b1")
            await self.both("job_list", JobListParams(f, 20, None, 200))
        rows = await self.both("job_get_many", [*self.ids, "ghost"])
        for r in rows.values():
            if r.join is not None and r.join.pending > 0 and r.state is JobState.PARKED:
                self.waiting.add(r.id)
            elif r.id in self.waiting and r.join is not None and r.join.pending == 0:
                self.waiting.discard(r.id)
                self.released += 1
                self.failed += r.join.failed > 0


@pytest.mark.parametrize("seed", range(6))
async def test_flow_walks_answer_as_the_memory_driver(make_driver: Factory, seed: int) -> None:
    async with make_driver() as redis_driver:
        walk = _Walk(seed, MemoryDriver(), redis_driver)
        for _ in range(250):
            await walk.step()
        # The walk reached what it is for: waiters released by a finish, and failed counts.
        assert walk.released and walk.failed


async def test_a_long_join_counts_each_dependency_once(make_driver: Factory) -> None:
    """A join on 2,000 children released by the last finish, and not moved by a child finished,
    requeued and finished again."""
    async with make_driver() as d:
        kids = [_job(f"k{i}", 1, "q", "p", None) for i in range(2_000)]
        await d.job_enqueue_many(kids)
        (answer,) = await d.join_enqueue(
            [JoinEnqueue(_job("p", 1, "q", None, None), tuple(k.id for k in kids))]
        )
        assert answer.enqueued is not None and not answer.enqueued.deduped
        claimed = (await d.job_claim(ClaimParams(("q",), "w", 1_000, 60_000, 5))).jobs
        claimed += (await d.job_claim(ClaimParams(("q",), "w", 1_000, 60_000, 5))).jobs
        assert not (await d.job_claim(ClaimParams(("q",), "w", 1_000, 60_000, 5))).jobs
        assert {c.id for c in claimed} == {k.id for k in kids}  # the parent is parked
        first, rest = claimed[0], claimed[1:]
        await d.job_ack([Ack(first.fence, 6)])
        await d.job_requeue_many(RequeueParams((first.id,), 7))
        (again,) = (await d.job_claim(ClaimParams(("q",), "w", 1, 60_000, 8))).jobs
        await d.job_nack([Nack(again.fence, NackKind.FAIL, 9, error="x")])
        parent = (await d.job_get_many(["p"]))["p"]
        assert parent.join is not None and (parent.join.pending, parent.join.failed) == (1999, 0)
        await d.job_ack([Ack(c.fence, 10) for c in rest])
        parent = (await d.job_get_many(["p"]))["p"]
        assert parent.state.value == "ready" and parent.run_at_ms == 10
        assert parent.join is not None and (parent.join.pending, parent.join.failed) == (0, 0)
        assert parent.parent_id is None and (await d.job_get_many(["k7"]))["k7"].parent_id == "p"


async def test_a_watched_finish_reaches_the_finish_channel(make_waking_driver: Factory) -> None:
    async with make_waking_driver() as d:
        await d.job_enqueue_many([_job("a", 1, "q", None, None), _job("b", 1, "q", None, None)])
        got: list[str] = []
        sub = await d.finish_subscribe(got.append)
        assert sub is not None
        try:
            for _ in range(100):
                if sub.is_live():
                    break
                await asyncio.sleep(0.05)
            assert sub.is_live()
            watched = await d.job_watch(["a", "nope"])
            assert set(watched) == {"a"}
            jobs = (await d.job_claim(ClaimParams(("q",), "w", 2, 60_000, 2))).jobs
            await d.job_ack([Ack(c.fence, 3) for c in jobs])
            for _ in range(100):
                if got:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.1)
            assert got == ["a"]  # "b" is not watched
        finally:
            await sub.close()


async def test_a_released_waiter_and_a_park_on_finished_rows_wake_their_queue(
    make_waking_driver: Factory,
) -> None:
    """A row made due by the flow rule wakes its queue (an idle worker claims it now, not at its
    next poll): a waiter released by its last dependency's finish, and a PARK on a join whose
    rows all finished already (a gather of children done before the parent parked)."""
    async with make_waking_driver() as d:
        woken: list[str] = []
        sub = await d.wake_subscribe(["wq", "pq"], woken.append)
        assert sub is not None
        try:
            await until_live(sub, 10, "wake")
            await d.job_enqueue_many(
                [_job("a", 1, "q", None, None), _job("p", 1, "pq", None, None)]
            )
            await d.join_enqueue([JoinEnqueue(_job("w", 1, "wq", None, None), ("a",))])
            held = {
                c.id: c for c in (await d.job_claim(ClaimParams(("q",), "w", 1, 60_000, 2))).jobs
            }
            assert await d.job_ack([Ack(held["a"].fence, 3)]) == [True]
            await _heard(woken, "wq")
            (p,) = (await d.job_claim(ClaimParams(("pq",), "w", 1, 60_000, 4))).jobs
            woken.clear()
            assert await d.job_nack([Nack(p.fence, NackKind.PARK, 5, join=("a",))]) == [True]
            await _heard(woken, "pq")
            assert (await d.job_get_many(["p"]))["p"].state is JobState.READY
        finally:
            await sub.close()


async def _heard(woken: list[str], queue: str) -> None:
    for _ in range(200):
        if queue in woken:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no wake for {queue!r}: {woken!r}")


async def test_a_row_outside_the_family_stays_as_it_was(make_driver: Factory) -> None:
    """A plain row keeps its 13 fields through a claim and an ack, and no flow key is made: an
    ack of it runs no extra Redis call (`flow_flags` reads the row already in hand)."""
    async with make_driver() as d:
        assert isinstance(d, RedisDriver)
        await d.job_enqueue(_job("a", 1, "q", None, None))
        (c,) = (await d.job_claim(ClaimParams(("q",), "w", 1, 60_000, 2))).jobs
        assert c.join is None
        assert await d.job_ack([Ack(c.fence, 3)]) == [True]
        raw = await d.client.hget(d.keys.state, "a")
        assert raw.count("\x00") == 12
        assert await d.client.exists(d.keys.join_waiters, d.keys.join_pending) == 0


async def test_removed_and_purged_rows_take_their_edges(make_driver: Factory) -> None:
    async with make_driver() as d:
        assert isinstance(d, RedisDriver)
        await d.job_enqueue_many([_job(f"k{i}", 1, "q", None, None) for i in range(3)])
        await d.join_enqueue([JoinEnqueue(_job("w1", 1, "q", None, None), ("k0", "k1"))])
        await d.join_enqueue([JoinEnqueue(_job("w2", 1, "q", None, None), ("k1", "k2"))])
        assert await d.job_remove(["w1"]) == [RemoveAnswer.REMOVED]
        await d.job_cancel_many(["w2"], 5)
        assert await d.job_purge(PurgeParams(10, 10, 0, 0, 0, 0)) == 1
        assert await d.client.exists(d.keys.join_waiters, d.keys.join_pending) == 0
        k1 = (await d.job_get_many(["k1"]))["k1"]
        assert k1.state.value == "ready" and k1.join is None
