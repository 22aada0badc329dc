"""Redis specifics of the step and event families, beyond the parity suite: the wake an event
sends idle workers, waits and steps leaving no key behind their row, a publisher that never saw
the waiting queues, and a publish racing a park on two connections.

The match's exactness (1 vs 1.0 vs true) is `test_event_match_property.py`.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable

import pytest

from jobs_core.driver import JobDriver
from jobs_core.records import (
    Ack,
    ClaimParams,
    CounterReadParams,
    EventRecord,
    EventWait,
    Nack,
    NackKind,
    NewJob,
    PurgeParams,
    RemoveAnswer,
    StepPut,
)
from jobs_core.states import JobState
from jobs_memory import MemoryDriver
from jobs_redis import RedisDriver
from tests.core.support import until
from tests.redis.conftest import Factory, factory_for

T0 = 1_800_000_000_000
DAY = 86_400_000
#: Queue names a key pattern could confuse with the durable keys' own names.
ODD_QUEUES = ("q", "x}:wait", "wait:index")


def new_job(i: int | str, queue: str = "q", run_id: str | None = None) -> NewJob:
    return NewJob(
        id=f"id-{i}",
        run_id=run_id or f"run-{i}",
        name="n",
        queue=queue,
        tenant_id=None,
        idempotency_key=f"k-{i}",
        input_json=json.dumps({"i": i}),
        priority=0,
        run_at_ms=T0,
        max_attempts=3,
        created_at_ms=T0,
    )


def claim(queues: tuple[str, ...], now: int = T0, worker: str = "w") -> ClaimParams:
    return ClaimParams(queues, worker, 100, 60_000, now)


def event(event_id: str, name: str, data: str, at: int) -> EventRecord:
    return EventRecord(event_id, name, data, at, at + DAY)


def sibling(d: RedisDriver) -> RedisDriver:
    """Another driver instance on the same prefix and connection: it has seen nothing."""
    return type(d)("same", prefix=d.keys.prefix, client=d.client)


async def durable_keys_left(d: RedisDriver) -> dict[str, int]:
    """The durable keys that still exist, with their sizes (HLEN / ZCARD)."""
    k = d.keys
    out: dict[str, int] = {}
    for key in (k.wait, k.step_out, k.event):
        if n := await d.client.hlen(key):
            out[key] = n
    for key in (k.wait_index, k.step_index, k.event_name, k.event_expiry):
        if n := await d.client.zcard(key):
            out[key] = n
    return out


async def test_an_event_wakes_the_idle_workers_of_each_woken_queue(
    make_waking_driver: Factory,
) -> None:
    """The publish that wakes parked rows PUBLISHes each woken row's queue once, so an idle
    worker claims at once; a queue with no woken row hears nothing. The publisher here never saw
    a row wait (another driver instance), so it learns the queues from the script first."""
    async with make_waking_driver() as d:
        await d.job_enqueue_many([new_job(i, ODD_QUEUES[i % 3]) for i in range(6)])
        await d.job_enqueue(new_job("other", "other"))
        held = (await d.job_claim(claim((*ODD_QUEUES, "other")))).jobs
        paid_1 = EventWait("paid", '{"order":1}', T0)
        paid_2 = EventWait("paid", '{"order":2}', T0)
        parks = [
            Nack(j.fence, NackKind.PARK, T0, None, wait=paid_2 if j.queue == "other" else paid_1)
            for j in held
        ]
        assert await d.job_nack(parks) == [True] * 7
        woken: list[str] = []
        sub = await d.wake_subscribe([*ODD_QUEUES, "other"], woken.append)
        assert sub is not None
        await until(sub.is_live, within=5)
        publisher = sibling(d)
        assert await publisher.event_publish(event("e1", "paid", '{"order":1.0}', T0 + 5)) == 6
        await until(lambda: len(woken) >= 3, within=5)
        await asyncio.sleep(0.2)
        assert sorted(woken) == sorted(ODD_QUEUES)
        # Woken rows are due at the event's time; the one waiting for order 2 stays parked.
        got = await d.job_claim(claim((*ODD_QUEUES, "other"), T0 + 5))
        assert sorted(j.id for j in got.jobs) == sorted(f"id-{i}" for i in range(6))
        assert (await d.job_get_many(["id-other"]))["id-other"].state is JobState.PARKED
        # A publish that wakes nothing tells no one.
        assert await publisher.event_publish(event("e2", "paid", '{"order":3}', T0 + 6)) == 0
        await asyncio.sleep(0.2)
        assert len(woken) == 3
        await sub.close()


async def test_rows_take_their_waits_and_steps_with_them(make_driver: Factory) -> None:
    """A wait goes when its row leaves `parked` by a claim at its timeout, a cancel or a wake;
    steps go when their row is purged; purged events go from every index: no key is left."""
    async with make_driver() as d:
        await d.job_enqueue_many([new_job(i, ODD_QUEUES[i]) for i in range(3)])
        held = {j.id: j for j in (await d.job_claim(claim(ODD_QUEUES))).jobs}
        w = EventWait("go", "{}", T0)
        for i, run_at in ((0, T0 + 10), (1, None), (2, None)):
            fence = held[f"id-{i}"].fence
            await d.step_put([StepPut(fence, "a", '{"n":1}', T0), StepPut(fence, "b", "2", T0)])
            await d.job_nack([Nack(fence, NackKind.PARK, T0, run_at, wait=w)])
        assert (await durable_keys_left(d))[d.keys.wait] == 3
        # Claimed at its timeout: its wait goes.
        again = (await d.job_claim(claim(ODD_QUEUES, T0 + 10))).jobs
        assert [j.id for j in again] == ["id-0"]
        assert await d.client.hkeys(d.keys.wait) == ["id-1", "id-2"]
        # Cancelled: its wait goes.
        assert (await d.job_cancel("id-1", T0 + 11)).value == "cancelled"
        assert await d.client.hkeys(d.keys.wait) == ["id-2"]
        # Woken: its wait goes.
        assert await d.event_publish(event("e", "go", "[]", T0 + 12)) == 1
        left = await durable_keys_left(d)
        assert d.keys.wait not in left and d.keys.wait_index not in left
        # Everything finishes and is purged: the steps go with the rows, the events by expiry.
        await d.job_ack([Ack(again[0].fence, T0 + 13)])
        for j in (await d.job_claim(claim(ODD_QUEUES, T0 + 13))).jobs:
            await d.job_ack([Ack(j.fence, T0 + 13)])
        assert len(await d.step_list("run-0")) == 2
        assert await d.job_purge(PurgeParams(T0 + 100, 100, 0, 0, 0, 0)) == 3
        assert [await d.step_list(f"run-{i}") for i in range(3)] == [[], [], []]
        assert await d.event_purge(T0 + 12 + DAY, 100) == 1
        assert await durable_keys_left(d) == {}


async def test_a_wait_stored_without_its_json_text_shows_from_its_lines(
    make_driver: Factory,
) -> None:
    """`job_get_many` shows a wait's match as the nack gave it; a wait parked by an earlier
    version (event, since and match lines only, indexed by event name alone) shows the same match
    rebuilt from its lines — `1.0` comes back as `1` — for no tenant and with no end. An event
    for no tenant reads only the name's waits indexed for no tenant, so it leaves that older
    entry to its run's poll; one for every tenant reads all of the name's: it wakes it, and the
    wait goes from both keys."""
    async with make_driver() as d:
        await d.job_enqueue(new_job(1))
        f = (await d.job_claim(claim(("q",)))).jobs[0].fence
        match = '{"order":1.0,"to":"ü\\"x","n":null,"a":[1,true]}'
        w = EventWait("paid", match, T0, "t1", T0 + DAY)
        assert await d.job_nack([Nack(f, NackKind.PARK, T0, None, wait=w)]) == [True]
        assert (await d.job_get_many(["id-1"]))["id-1"].wait == w
        stored = await d.client.hget(d.keys.wait, "id-1")
        await d.client.hset(d.keys.wait, "id-1", "\x00".join(stored.split("\x00")[:3]))
        assert await d.client.zrem(d.keys.wait_index, "paid\x00t1\x00id-1") == 1
        await d.client.zadd(d.keys.wait_index, {"paid\x00id-1": 0})
        got = (await d.job_get_many(["id-1"]))["id-1"].wait
        assert got is not None
        assert (got.event, got.since_ms, got.tenant_id, got.until_ms) == ("paid", T0, None, None)
        rebuilt = json.loads(got.match_json)
        assert rebuilt == {"order": 1, "to": 'ü"x', "n": None, "a": [1, True]}
        assert type(rebuilt["order"]) is int
        data = '{"order":1,"to":"ü\\"x","n":null,"a":[1,true],"more":0}'
        assert await d.event_publish(event("e0", "paid", data, T0 + 1)) == 0
        everyone = EventRecord("e", "paid", data, T0 + 1, T0 + DAY, None, True)
        assert await d.event_publish(everyone) == 1
        assert (await d.job_get_many(["id-1"]))["id-1"].wait is None
        assert await d.client.zcard(d.keys.wait_index) == 0


async def test_steps_of_one_run_across_its_rows_and_calls(make_driver: Factory) -> None:
    """Steps are the run's: a second item of one name keeps the first record, and the steps
    come back in one read in recording order with their times and exact JSON text."""
    async with make_driver() as d:
        await d.job_enqueue(new_job(1))
        f = (await d.job_claim(claim(("q",)))).jobs[0].fence
        outputs = ["1.0", '{"a":[1,true,null]}', '"x}:wait\\t"', "1e999", '"☃"']
        puts = [StepPut(f, f"s{i}{ODD_QUEUES[i % 3]}", o, T0 + i) for i, o in enumerate(outputs)]
        assert await d.step_put([*puts, StepPut(f, puts[0].name, "2", T0 + 9)]) == [True] * 6
        steps = await d.step_list("run-1")
        assert [(s.name, s.output_json, s.recorded_at_ms) for s in steps] == [
            (p.name, p.output_json, p.now_ms) for p in puts
        ]


@pytest.mark.parametrize("backend", ["real", "cluster"])
async def test_a_publish_racing_a_park_never_loses_the_wake(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """A park with a wait and the publish of its event, sent at once on two connections, in
    either order: the row always ends `ready` — woken by the publish (run at the event's time),
    or made ready by the park that found the event (run at the park's time) — never parked."""
    factory = factory_for(backend, request)
    rng = random.Random(2024)
    orders: set[str] = set()
    async with factory() as parker, factory(prefix=parker.keys.prefix) as publisher:
        for i in range(200):
            await parker.job_enqueue(new_job(i))
            job = (await parker.job_claim(claim(("q",)))).jobs[0]
            wait = EventWait(f"e{i}", '{"k":1}', T0)
            park = parker.job_nack([Nack(job.fence, NackKind.PARK, T0 + 2, None, wait=wait)])
            publish = publisher.event_publish(event(f"ev{i}", f"e{i}", '{"k":1,"o":2}', T0 + 1))
            if rng.random() < 0.5:
                parked, woke = await asyncio.gather(park, publish)
            else:
                woke, parked = await asyncio.gather(publish, park)
            assert parked == [True]
            r = (await parker.job_get_many([job.id]))[job.id]
            assert r.state is JobState.READY, (i, woke, r)
            if woke == 1:
                assert r.run_at_ms == T0 + 1
                orders.add("park first")
            else:
                assert (woke, r.run_at_ms) == (0, T0 + 2)
                orders.add("publish first")
            # Out of the way of the next round's claim.
            again = (await parker.job_claim(claim(("q",), T0 + 2))).jobs[0]
            await parker.job_ack([Ack(again.fence, T0 + 3)])
        assert await durable_keys_left(parker) == {
            parker.keys.event: 200,
            parker.keys.event_name: 200,
            parker.keys.event_expiry: 200,
        }
    # Both orders happened, so both branches were raced.
    assert orders == {"park first", "publish first"}


async def test_both_families_in_one_store_answer_as_the_memory_driver(
    make_driver: Factory,
) -> None:
    """The operator family's counts beside the durable family's writes: a publish that runs its
    script twice (its driver never saw the waiting queues) moves rows parked -> ready with no
    count of its own, and a remove or a bulk cancel takes the row's wait (and, for a remove, its
    run's steps) — the queue stats, the settle counters and the rows equal the memory driver's
    after the same calls, and no durable key outlives its row."""
    memory = MemoryDriver()
    async with make_driver() as d:
        publisher = sibling(d)

        async def both(call: Callable[[JobDriver], Awaitable[object]]) -> object:
            got, want = await call(d), await call(memory)
            assert got == want
            return got

        jobs = [new_job(i, ODD_QUEUES[i % 3]) for i in range(9)]
        await both(lambda x: x.job_enqueue_many(jobs))
        held = sorted((await d.job_claim(claim(ODD_QUEUES))).jobs, key=lambda j: j.id)
        mem_held = sorted((await memory.job_claim(claim(ODD_QUEUES))).jobs, key=lambda j: j.id)
        assert [j.id for j in held] == [j.id for j in mem_held]
        # Every run records a step; then every row parks on "go" (id-0 also with a timeout).
        await both(lambda x: x.step_put([StepPut(j.fence, "s", "1", T0 + 1) for j in held]))
        go = EventWait("go", '{"n":1}', T0)
        parks = [
            Nack(j.fence, NackKind.PARK, T0 + 2, T0 + 50 if j.id == "id-0" else None, wait=go)
            for j in held
        ]
        await both(lambda x: x.job_nack(parks))
        assert (await durable_keys_left(d))[d.keys.wait] == 9
        # A bulk cancel and a remove of parked rows drop their waits (the remove: the steps too).
        await both(lambda x: x.job_cancel_many(["id-1", "id-2", "nobody"], T0 + 3))
        await both(lambda x: x.job_remove(["id-3", "id-4"]))
        assert await d.client.hlen(d.keys.wait) == 5
        assert await both(lambda x: x.step_list("run-3")) == []
        assert await both(lambda x: x.step_list("run-1")) != []
        # The publisher learns the queues from the script, then wakes the five left.
        woke = await publisher.event_publish(event("e1", "go", '{"n":1.0}', T0 + 4))
        assert woke == await memory.event_publish(event("e1", "go", '{"n":1.0}', T0 + 4)) == 5
        assert await both(lambda x: x.queue_stats(T0 + 4))
        assert await both(lambda x: x.queue_stats(T0 + 100))
        window = CounterReadParams(T0 - DAY, T0 + DAY)
        assert await both(lambda x: x.counter_read(window))
        ids = [j.id for j in jobs]
        rows = await d.job_get_many(ids)
        assert rows == await memory.job_get_many(ids)
        assert sorted(i for i, r in rows.items() if r.state is JobState.READY) == [
            "id-0",
            "id-5",
            "id-6",
            "id-7",
            "id-8",
        ]
        # Claimed, run and removed: no wait, step or index entry is left of any row.
        again = (await d.job_claim(claim(ODD_QUEUES, T0 + 5))).jobs
        assert sorted(j.id for j in again) == ["id-0", "id-5", "id-6", "id-7", "id-8"]
        await d.job_ack([Ack(j.fence, T0 + 6) for j in again])
        await d.job_remove(ids)
        assert await durable_keys_left(d) == {
            d.keys.event: 1,
            d.keys.event_name: 1,
            d.keys.event_expiry: 1,
        }
        assert await d.queue_stats(T0 + 6) == []
        assert await d.client.zcard(d.keys.created) == 0


#: Run ids whose step ranges touch: one a prefix of another, a byte 1 right after the prefix
#: (the range's exclusive end), the largest code point.
NEIGHBOUR_RUNS = ("r", "r\x01", "r-1", "r-10", "r\U0010ffff", "r\x01\x01")


async def step_members(d: RedisDriver) -> tuple[list[str], list[str]]:
    """The step:index members and the step:out fields, both sorted."""
    index = await d.client.zrange(d.keys.step_index, 0, -1)
    out = await d.client.hkeys(d.keys.step_out)
    return sorted(index), sorted(out)


async def test_a_rows_steps_leave_with_it_by_purge_and_remove_and_no_neighbours(
    make_driver: Factory,
) -> None:
    """Purge and remove take a row's run's steps from step:out AND step:index (one lex range
    per run), and only those: runs whose ids share a prefix, or whose range ends where another
    begins, keep every step; no member or field outlives its row."""
    names = ("a", "\x01", "\U0010ffff", "b\x01c", "r-1")
    async with make_driver() as d:
        jobs = [new_job(i, run_id=r) for i, r in enumerate(NEIGHBOUR_RUNS)]
        await d.job_enqueue_many(jobs)
        held = {j.run_id: j for j in (await d.job_claim(claim(("q",)))).jobs}
        for run in NEIGHBOUR_RUNS:
            f = held[run].fence
            assert await d.step_put([StepPut(f, n, '"x"', T0) for n in names]) == [True] * 5
        # Finished one by one, so the purge (oldest finished first) takes the first two.
        for i, run in enumerate(NEIGHBOUR_RUNS):
            await d.job_ack([Ack(held[run].fence, T0 + 1 + i)])
        index, out = await step_members(d)
        assert index == out and len(index) == 5 * len(NEIGHBOUR_RUNS)

        def expect(runs: tuple[str, ...]) -> list[str]:
            return sorted(f"{r}\x00{n}" for r in runs for n in names)

        assert await d.job_purge(PurgeParams(T0 + 100, 2, 0, 0, 0, 0)) == 2
        assert await step_members(d) == (expect(NEIGHBOUR_RUNS[2:]),) * 2
        assert await d.job_remove(["id-3", "id-5"]) == [RemoveAnswer.REMOVED] * 2
        assert await step_members(d) == (expect(("r-1", "r\U0010ffff")),) * 2
        for run in NEIGHBOUR_RUNS:
            got = sorted(s.name for s in await d.step_list(run))
            assert got == (sorted(names) if run in ("r-1", "r\U0010ffff") else [])
        assert await d.job_remove(["id-2"]) == [RemoveAnswer.REMOVED]
        assert await d.job_purge(PurgeParams(T0 + 100, 100, 0, 0, 0, 0)) == 1
        assert await durable_keys_left(d) == {}


async def test_a_long_run_records_a_step_by_one_index_member(make_driver: Factory) -> None:
    """A run with 2,000 recorded steps records one more as one more step:index member (ZCARD
    + 1): no key holds the run's names in one value that each put reads and rewrites."""
    async with make_driver() as d:
        await d.job_enqueue_many([new_job(1), new_job(2)])
        fences = {j.id: j.fence for j in (await d.job_claim(claim(("q",)))).jobs}
        f = fences["id-1"]
        for start in range(0, 2_000, 500):
            puts = [StepPut(f, f"step-{i:05d}", "1", T0) for i in range(start, start + 500)]
            assert await d.step_put(puts) == [True] * 500
        await d.step_put([StepPut(fences["id-2"], "other", "1", T0)])
        before = await d.client.zcard(d.keys.step_index)
        assert before == 2_001
        assert await d.step_put([StepPut(f, "one-more", "2", T0 + 1)]) == [True]
        assert await d.client.zcard(d.keys.step_index) == before + 1
        # A repeat keeps the first record and adds no member.
        assert await d.step_put([StepPut(f, "one-more", "3", T0 + 2)]) == [True]
        assert await d.client.zcard(d.keys.step_index) == before + 1
        # No value of any key grows with the run: every string, field and member is short.
        longest = 0
        async for key in d.client.scan_iter(match=d.keys.pattern(), count=1000):
            kind = await d.client.type(key)
            if kind == "string":
                longest = max(longest, len(await d.client.get(key)))
            elif kind == "hash":
                for field, value in (await d.client.hgetall(key)).items():
                    longest = max(longest, len(field), len(value))
            elif kind == "zset":
                longest = max([longest, *map(len, await d.client.zrange(key, 0, -1))])
        assert longest < 200
        steps = await d.step_list("run-1")
        assert len(steps) == 2_001
        assert (steps[-1].name, steps[-1].output_json) == ("one-more", "2")
