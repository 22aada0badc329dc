"""Redis specifics of the task family, beyond the parity suite: fires racing from several driver
instances (several connections), a refused fire that writes nothing at all, a fire's enqueue
leaving the store exactly as `job_enqueue` would, arms racing, task names of odd text, one
script call per task call, and a 'task' pause kept in its own set, which no claim reads."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest
from redis.crc import key_slot

from jobs_core.errors import RecordInvalidError
from jobs_core.records import NewJob, Pause, TaskFire, TaskMark
from jobs_redis import RedisDriver
from tests.redis.conftest import Factory
from tests.redis.test_driver import ODD, new_job
from tests.redis.test_durable_redis import claim
from tests.redis.test_leases_redis import _other
from tests.redis.test_operator_redis import Sent

T0 = 1_800_000_000_000
#: Task names a codec or a key pattern could get wrong: the NUL-joined mark's neighbours, the
#: hash tag's braces, the key separator, glob characters, non-ASCII, and the family's own key.
ODD_TASKS = (*ODD, "a:b", "{x}", "task", "*?[a-z]^\\", "\n", "名前:{☃}")


async def snapshot(d: RedisDriver) -> dict[str, Any]:
    """Every key of the driver's prefix (its tag stripped) with its whole content."""
    client: Any = d.client
    out: dict[str, Any] = {}
    async for key in client.scan_iter(match=d.keys.pattern(), count=1000):
        kind = await client.type(key)
        if kind == "hash":
            value: Any = await client.hgetall(key)
        elif kind == "zset":
            value = await client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = await client.smembers(key)
        else:
            value = await client.get(key)
        out[key.removeprefix(d.keys.tag)] = (kind, value)
    return out


def fire_of(name: str, expect: int, job: NewJob, step: int = 1, now: int = T0) -> TaskFire:
    return TaskFire(name, expect, expect + step, expect + step, job, now)


async def test_racing_fires_on_several_instances_land_once_each(make_driver: Factory) -> None:
    """16 firers over 4 driver instances, each reading the mark and firing the next occurrence
    on the watermark it read, until the task has fired 30 times. Every firer's job has its own
    id and its own idempotency key, so no dedupe could hide a second landing: exactly one fire
    per watermark lands, each occurrence has exactly one job, and the refused fires answer the
    stored mark."""
    target = 30
    async with make_driver() as base:
        drivers = [base, *(_other(base) for _ in range(3))]
        try:
            (armed,) = await base.task_arm(["t"], T0)
            assert armed == TaskMark("t", T0)
            landed: dict[int, str] = {}
            refused = 0

            async def firer(n: int) -> None:
                nonlocal refused
                rng = random.Random(n)
                d = drivers[n % len(drivers)]
                for i in itertools.count():
                    mark = (await d.task_marks(["t"]))["t"]
                    if mark.watermark_ms >= T0 + target:
                        return
                    job = new_job(f"{n}-{i}", key=f"{n}-{i}")
                    await asyncio.sleep(rng.random() / 1000)
                    got = await d.task_fire(fire_of("t", mark.watermark_ms, job))
                    assert got.mark is not None
                    if got.fired:
                        assert got.enqueued is not None and not got.enqueued.deduped
                        occurrence = mark.watermark_ms + 1
                        assert occurrence not in landed, (occurrence, landed)
                        landed[occurrence] = job.id
                        assert got.mark == TaskMark("t", occurrence, occurrence, job.id, T0)
                    else:
                        refused += 1
                        assert got.mark.watermark_ms > mark.watermark_ms

            async with asyncio.TaskGroup() as tg:
                for n in range(16):
                    tg.create_task(firer(n))
            assert sorted(landed) == [T0 + i for i in range(1, target + 1)]
            assert refused > 0  # the firers did race
            stored = await base.job_get_many(list(landed.values()))
            assert set(stored) == set(landed.values())
            assert await base.client.hlen(base.keys.state) == target
            assert await base.client.zcard(base.keys.due("q")) == target
            got = await base.job_claim(claim(("q",)))
            assert sorted(j.id for j in got.jobs) == sorted(landed.values())
            last = landed[T0 + target]
            assert await base.task_marks(["t"]) == {
                "t": TaskMark("t", T0 + target, T0 + target, last, T0)
            }
        finally:
            for d in drivers[1:]:
                await d.close()


async def test_one_watermark_many_firers_at_once(make_driver: Factory) -> None:
    """64 fires of one watermark sent at once over 4 instances: one lands, one job exists."""
    async with make_driver() as base:
        drivers = [base, *(_other(base) for _ in range(3))]
        try:
            await base.task_arm(["t"], T0)
            fires = [fire_of("t", T0, new_job(i, key=f"k{i}")) for i in range(64)]
            got = await asyncio.gather(*(drivers[i % 4].task_fire(f) for i, f in enumerate(fires)))
            winners = [i for i, g in enumerate(got) if g.fired]
            assert len(winners) == 1
            won = fires[winners[0]].job.id
            assert {g.mark for g in got} == {TaskMark("t", T0 + 1, T0 + 1, won, T0)}
            assert await base.client.hkeys(base.keys.state) == [won]
        finally:
            for d in drivers[1:]:
                await d.close()


async def test_a_refused_fire_writes_nothing(make_driver: Factory) -> None:
    """A fire whose expect is not the watermark (behind or ahead) or whose task was never armed
    writes no job, moves no mark, counts nothing and wakes nothing: every key of the prefix is
    as it was, down to the schema mark an enqueue into an empty store would set."""
    async with make_driver() as d:
        await d.task_arm(["t"], T0)
        before = await snapshot(d)
        assert set(before) == {":task"}
        job = new_job(1)
        for fire in (
            fire_of("t", T0 - 1, job),
            fire_of("t", T0 + 1, job),
            fire_of("never", T0, job),
        ):
            got = await d.task_fire(fire)
            assert not got.fired and got.enqueued is None
            assert got.mark == (TaskMark("t", T0) if fire.name == "t" else None)
            assert await snapshot(d) == before
        assert await d.task_marks(["t", "never"]) == {"t": TaskMark("t", T0)}
        # After a landed fire, the old watermark is refused just the same.
        assert (await d.task_fire(fire_of("t", T0, job))).fired
        before = await snapshot(d)
        got = await d.task_fire(fire_of("t", T0, new_job(2)))
        assert not got.fired and got.mark == TaskMark("t", T0 + 1, T0 + 1, job.id, T0)
        assert await snapshot(d) == before


async def test_a_fire_deduped_by_a_live_key_still_moves_the_watermark(
    make_driver: Factory,
) -> None:
    """The occurrence's namespace is held by a live job: the fire lands (the occurrence is dealt
    with), inserts nothing, and records the holder's id; likewise a job id that exists, finished
    or not."""
    async with make_driver() as d:
        holder = new_job("holder", key="daily")
        await d.job_enqueue(holder)
        await d.task_arm(["t"], T0)
        occurrence = new_job("occ-1", key="daily")
        got = await d.task_fire(TaskFire("t", T0, T0 + 10, T0 + 20, occurrence, T0 + 5))
        assert got.fired and got.enqueued is not None
        assert (got.enqueued.id, got.enqueued.deduped) == (holder.id, True)
        assert got.mark == TaskMark("t", T0 + 20, T0 + 10, holder.id, T0 + 5)
        assert await d.task_marks(["t"]) == {"t": got.mark}
        assert list(await d.job_get_many([holder.id, occurrence.id])) == [holder.id]
        # By id: the next occurrence names the holder's id (and a free key).
        again = new_job("holder", key="other")
        got = await d.task_fire(TaskFire("t", T0 + 20, T0 + 30, T0 + 30, again, T0 + 6))
        assert got.fired and got.enqueued is not None
        assert (got.enqueued.id, got.enqueued.deduped) == (holder.id, True)
        assert got.mark == TaskMark("t", T0 + 30, T0 + 30, holder.id, T0 + 6)
        assert await d.client.hlen(d.keys.state) == 1


@pytest.mark.parametrize(
    "case", ["fresh", "due", "later", "deduped by key", "deduped by id", "wake slot taken"]
)
async def test_a_fire_enqueues_exactly_as_job_enqueue(make_driver: Factory, case: str) -> None:
    """Two stores alike; one takes `job_enqueue(job)`, the other `task_fire` of the same job:
    every key of both is the same afterwards (rows, listing, counts, schema mark, wake slot),
    but the task hash."""
    job = new_job(1, run_at=T0 + 60_000 if case == "later" else T0)
    async with make_driver() as plain, make_driver() as fired:
        for d in (plain, fired):
            if case != "fresh":
                await d.job_enqueue(new_job(0, key="other"))
            if case == "deduped by key":
                await d.job_enqueue(new_job("holder", key=job.idempotency_key))
            if case == "deduped by id":
                await d.job_enqueue(new_job(1, key="first"))
            if case == "wake slot taken":
                await d.job_enqueue(new_job(2))
        await fired.task_arm(["t"], T0 - 1)
        want = await plain.job_enqueue(job)
        got = await fired.task_fire(fire_of("t", T0 - 1, job))
        assert got.enqueued == want
        assert got.mark == TaskMark("t", T0, T0, want.id, T0)
        after = await snapshot(fired)
        assert after.pop(":task") == ("hash", {"t": f"{T0}\x00{T0}\x00{want.id}\x00{T0}"})
        assert after == await snapshot(plain)


async def test_a_fired_job_wakes_its_queue(make_waking_driver: Factory) -> None:
    async with make_waking_driver(wake_slot_ms=1000) as d:
        woken: list[str] = []
        sub = await d.wake_subscribe(["q"], woken.append)
        assert sub is not None
        deadline = asyncio.get_running_loop().time() + 5
        while not sub.is_live():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        await d.task_arm(["t"], T0 - 1)
        assert (await d.task_fire(fire_of("t", T0 - 1, new_job(1)))).fired
        while not woken:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        assert woken == ["q"]
        await sub.close()


async def test_racing_arms_store_one_mark_each(make_driver: Factory) -> None:
    """16 callers over 4 instances arm overlapping sets of 20 names, each at its own now: every
    name has one mark, every caller answered it, and a later arm leaves it be."""
    names = [f"task-{i}" for i in range(20)]
    async with make_driver() as base:
        drivers = [base, *(_other(base) for _ in range(3))]
        try:

            async def armer(n: int) -> tuple[list[str], list[TaskMark]]:
                rng = random.Random(n)
                asked = rng.sample(names, rng.randint(1, len(names)))
                await asyncio.sleep(rng.random() / 1000)
                return asked, await drivers[n % 4].task_arm(asked, T0 + n)

            answers = await asyncio.gather(*(armer(n) for n in range(16)))
            seen: dict[str, set[TaskMark]] = {}
            for asked, marks in answers:
                assert [m.name for m in marks] == asked
                for m in marks:
                    seen.setdefault(m.name, set()).add(m)
            assert all(len(marks) == 1 for marks in seen.values()), seen
            stored = await base.task_marks(names)
            assert {n: {m} for n, m in stored.items()} == seen
            assert all(
                T0 <= m.watermark_ms < T0 + 16 and m.fired_ms is None for m in stored.values()
            )
            later = await base.task_arm(names, T0 + 99)
            assert later == [stored.get(n, TaskMark(n, T0 + 99)) for n in names]
        finally:
            for d in drivers[1:]:
                await d.close()


async def test_odd_task_names_round_trip(make_driver: Factory) -> None:
    """Task names of any text arm, fire and read back as they went in, each on its own; every
    key sits in the prefix's slot; a NUL is refused before any script runs."""
    async with make_driver() as d:
        names = list(ODD_TASKS)
        armed = await d.task_arm(names, T0)
        assert armed == [TaskMark(n, T0) for n in names]
        for i, n in enumerate(names):
            got = await d.task_fire(fire_of(n, T0, new_job(i), step=i + 1))
            assert got.fired, n
            assert got.mark == TaskMark(n, T0 + i + 1, T0 + i + 1, f"id-{i}", T0)
        marks = await d.task_marks([*names, "missing"])
        assert marks == {
            n: TaskMark(n, T0 + i + 1, T0 + i + 1, f"id-{i}", T0) for i, n in enumerate(names)
        }
        assert await d.client.hlen(d.keys.task) == len(names)
        found = [k async for k in d.client.scan_iter(match=d.keys.pattern())]
        assert {key_slot(k.encode()) for k in found} == {key_slot(d.keys.state.encode())}
        with pytest.raises(RecordInvalidError):
            await d.task_arm(["a\x00b"], T0)
        with pytest.raises(RecordInvalidError):
            await d.task_fire(fire_of("a\x00b", T0, new_job(99)))


async def test_each_task_call_is_one_script_call(make_driver: Factory) -> None:
    async with make_driver() as d:

        async def every_call(now: int) -> None:
            (mark,) = await d.task_arm(["t"], now)
            await d.task_fire(fire_of("t", mark.watermark_ms, new_job(now)))
            await d.task_marks(["t"])

        await every_call(T0)  # loads the scripts a fresh server lacks
        sent = Sent(d.client)
        await every_call(T0 + 1)
        assert sent.commands == ["task_arm", "task_fire", "task_marks"]


async def test_a_task_pause_round_trips_and_never_pauses_a_claim(make_driver: Factory) -> None:
    """A task paused under a job's name (and queue) leaves that job claimable: the claim reads
    the queue and name sets only. The three kinds of one value are three pauses."""
    async with make_driver() as d:
        job = new_job(1, name="n", queue="n")
        await d.job_enqueue(job)
        assert await d.pause_add(Pause("task", "n")) is True
        assert await d.pause_add(Pause("task", "n")) is False
        assert await d.pause_list() == [Pause("task", "n")]
        client: Any = d.client
        assert await client.smembers(d.keys.pause_task) == {"n"}
        assert await client.exists(d.keys.pause_name, d.keys.pause_queue) == 0
        got = await d.job_claim(claim(("n",)))
        assert [j.id for j in got.jobs] == [job.id]
        assert await d.pause_add(Pause("name", "n")) is True
        assert await d.pause_add(Pause("queue", "n")) is True
        assert await d.pause_list() == [Pause("name", "n"), Pause("queue", "n"), Pause("task", "n")]
        assert await d.pause_remove(Pause("task", "n")) is True
        assert await d.pause_remove(Pause("task", "n")) is False
        assert await d.pause_list() == [Pause("name", "n"), Pause("queue", "n")]
