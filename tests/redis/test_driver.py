"""Redis-specific behaviour beyond the parity suite: names, key layout, refusals, wake, costs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from jobs_core.errors import DriverError, DriverUnavailableError, JobsError, RecordInvalidError
from jobs_core.records import (
    Ack,
    ClaimParams,
    EnqueueResult,
    Heartbeat,
    Nack,
    NackKind,
    NewJob,
    Pause,
    Progress,
)
from jobs_core.states import JobState
from jobs_memory import MemoryDriver
from jobs_redis import RedisDriver
from tests.redis.conftest import Factory, RedisServer, fresh_prefix, purge, spare_port

T0 = 1_800_000_000_000
ODD = ("q'uo%te\n☃", "{brace}", "a}b{c", "ключ", "tab\there", "💥", " ", "%s%d")


def new_job(
    i: int | str,
    *,
    name: str = "n",
    queue: str = "q",
    key: str | None = None,
    run_at: int = T0,
    priority: int = 0,
    tenant: str | None = None,
    attempts: int = 3,
    created: int = T0,
) -> NewJob:
    return NewJob(
        id=f"id-{i}",
        run_id=f"run-{i}",
        name=name,
        queue=queue,
        tenant_id=tenant,
        idempotency_key=key if key is not None else f"k-{i}",
        input_json=json.dumps({"i": i}),
        priority=priority,
        run_at_ms=run_at,
        max_attempts=attempts,
        created_at_ms=created,
    )


def claim(
    queues: tuple[str, ...], now: int = T0, limit: int = 100, worker: str = "w"
) -> ClaimParams:
    return ClaimParams(queues, worker, limit, 1000, now)


async def test_special_names_round_trip(driver: RedisDriver) -> None:
    """Quotes, %, newlines, braces and non-ASCII in every string survive unchanged."""
    jobs = [
        NewJob(
            id=f"id{odd}",
            run_id=f"run{odd}",
            name=odd,
            queue=odd,
            tenant_id=odd,
            idempotency_key=odd,
            input_json=json.dumps({"v": odd}, ensure_ascii=False),
            priority=7,
            run_at_ms=T0,
            max_attempts=2,
            created_at_ms=T0,
            enqueued_by=odd,
        )
        for odd in ODD
    ]
    assert [r.deduped for r in await driver.job_enqueue_many(jobs)] == [False] * len(jobs)
    got = await driver.job_get_many([j.id for j in jobs])
    for j in jobs:
        r = got[j.id]
        assert (r.name, r.queue, r.tenant_id, r.idempotency_key, r.input_json, r.enqueued_by) == (
            j.name,
            j.queue,
            j.tenant_id,
            j.idempotency_key,
            j.input_json,
            j.enqueued_by,
        )
    assert await driver.queue_demand(list(ODD), T0) == {q: 1 for q in ODD}
    assert await driver.pause_add(Pause("name", ODD[0]))
    assert await driver.pause_add(Pause("queue", ODD[1]))
    assert await driver.pause_list() == sorted([Pause("name", ODD[0]), Pause("queue", ODD[1])])
    res = await driver.job_claim(claim(ODD))
    assert sorted(c.queue for c in res.jobs) == sorted(ODD[2:])
    ok = await driver.job_nack(
        [Nack(c.fence, NackKind.RETRY, T0, T0 + 5, ODD[0]) for c in res.jobs]
    )
    assert all(ok)
    again = await driver.job_get_many([c.id for c in res.jobs])
    assert {r.last_error for r in again.values()} == {ODD[0]}


async def test_every_key_shares_the_prefix_slot(make_driver: Factory) -> None:
    """Cluster safety: every key the driver writes carries the `{prefix}` hash tag."""
    async with make_driver() as d:
        await d.job_enqueue_many([new_job(i, queue=ODD[i % len(ODD)]) for i in range(20)])
        res = await d.job_claim(claim(ODD, limit=5))
        await d.job_nack([Nack(res.jobs[0].fence, NackKind.PARK, T0, T0 + 9)])
        await d.job_ack([Ack(c.fence, T0, '{"r":1}', "[1]") for c in res.jobs[1:]])
        await d.pause_add(Pause("queue", "x"))
        found = [k async for k in d.client.scan_iter(match=d.keys.pattern())]
        assert len(found) > 10
        assert {key_slot(k.encode()) for k in found} == {key_slot(d.keys.state.encode())}


async def test_prefixes_do_not_see_each_other(make_driver: Factory) -> None:
    async with make_driver() as a:
        b = RedisDriver("shared", prefix=fresh_prefix(), client=a.client)
        await a.job_enqueue(new_job(1))
        assert await b.job_get_many(["id-1"]) == {}
        assert (await b.job_enqueue(new_job(1))).deduped is False
        assert len((await a.job_claim(claim(("q",)))).jobs) == 1
        assert len((await b.job_claim(claim(("q",)))).jobs) == 1
        await purge(b)


async def test_settles_from_another_driver_instance(make_driver: Factory) -> None:
    """A nack, cancel or requeue by a driver that did not claim reads the row's queue first."""
    async with make_driver() as a:
        b = RedisDriver("same", prefix=a.keys.prefix, client=a.client)
        await a.job_enqueue_many([new_job(i) for i in range(3)])
        held = (await a.job_claim(claim(("q",)))).jobs
        assert await b.job_nack([Nack(held[0].fence, NackKind.SHED, T0, None)]) == [True]
        assert await b.job_heartbeat([Heartbeat(held[1].fence, 500, T0)]) == [True]
        assert await b.job_progress([Progress(held[1].fence, "[2]", T0)]) == [True]
        assert await b.job_ack([Ack(held[1].fence, T0)]) == [True]
        assert await b.job_ack([Ack(held[1].fence, T0)]) == [False]
        assert (await b.job_cancel(held[2].id, T0)).value == "cancelled"
        await b.job_requeue(held[2].id, T0)
        rows = await a.job_get_many([h.id for h in held])
        assert [rows[h.id].state for h in held] == [
            JobState.READY,
            JobState.COMPLETED,
            JobState.READY,
        ]
        assert await a.queue_demand(["q"], T0) == {"q": 2}


async def test_claim_order_matches_memory_across_queues_and_pauses(make_driver: Factory) -> None:
    """Priorities, run_at, byte-ordered ids across two queues, name pauses: memory's order."""
    ids = ["b", "B", "é", "_", "a", "☃", "ab", "a\nb", "Z", "%"]
    jobs = [
        new_job(
            i,
            queue=("q1", "q2")[n % 2],
            priority=(0, 5)[n % 3 == 0],
            run_at=T0 - (n % 4),
            name=("keep", "paused")[n % 5 == 4],
        )
        for n, i in enumerate(ids)
    ]
    jobs.append(new_job("future", run_at=T0 + 10, queue="q1"))
    memory = MemoryDriver()
    async with make_driver() as d:
        for drv in (memory, d):
            await drv.job_enqueue_many(jobs)
            await drv.pause_add(Pause("name", "paused"))
        for limit in (3, 100):
            want = await memory.job_claim(claim(("q1", "q2"), limit=limit))
            got = await d.job_claim(claim(("q1", "q2"), limit=limit))
            assert got == want
            assert want.jobs


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
async def test_unavailable_at_once(scheme: str) -> None:
    """A refused connection is X_DRIVER_UNAVAILABLE within the connect timeout, never a wait."""
    d = RedisDriver(f"{scheme}://:s3cret@127.0.0.1:{spare_port()}/0", prefix=fresh_prefix())
    started = time.monotonic()
    with pytest.raises(DriverUnavailableError) as exc:
        await d.open()
    with pytest.raises(DriverUnavailableError):
        await d.job_claim(claim(("q",)))
    with pytest.raises(DriverUnavailableError):
        await d.job_enqueue(new_job(1))
    assert time.monotonic() - started < 3
    assert "s3cret" not in str(exc.value)
    assert "s3cret" not in d.describe()
    await d.close()


async def test_script_error_is_typed_and_names_the_script(make_driver: Factory) -> None:
    async with make_driver() as d:
        await d.client.set(d.keys.state, "not a hash")
        with pytest.raises(DriverError) as exc:
            await d.job_enqueue(new_job(1))
        assert exc.value.code == "X_DRIVER_ERROR"
        assert exc.value.detail == "job_enqueue"
        assert "job_enqueue" in str(exc.value)


async def test_noscript_reloads_transparently() -> None:
    import fakeredis

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    d = RedisDriver("fake", prefix=fresh_prefix(), client=client)
    await d.job_enqueue(new_job(1))
    await client.script_flush()
    assert (await d.job_enqueue(new_job(2))).deduped is False
    assert await client.script_exists(d._scripts["job_enqueue"].sha) == [True]
    await client.aclose()


async def test_noscript_reloads_before_a_pipelined_batch_goes_on() -> None:
    """A batch of several chunks meeting a server without the script: the first chunk, alone,
    loads it and is sent again; the chunks after it (the second packed meanwhile) follow in
    order, each written once."""
    import fakeredis

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    d = RedisDriver("fake", prefix=fresh_prefix(), client=client)
    await d.job_enqueue(new_job("warm"))
    await client.script_flush()
    jobs = [new_job(i) for i in range(2500)]
    jobs[2300] = new_job("dup", key="k-7")  # dedupes on a record of the first chunk
    got = await d.job_enqueue_many(jobs)
    assert got[2300] == EnqueueResult("id-7", deduped=True)
    assert sum(r.deduped for r in got) == 1
    assert await client.hlen(d.keys.state) == 2500
    assert await client.script_exists(d._scripts["job_enqueue_many"].sha) == [True]
    await client.aclose()


# -- the wake --------------------------------------------------------------------------------------


async def _until(cond: Any, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


async def test_wake_publishes_once_per_queue_per_slot(make_waking_driver: Factory) -> None:
    async with make_waking_driver(wake_slot_ms=1000) as d:
        assert d.capabilities().wake
        woken: list[str] = []
        sub = await d.wake_subscribe(["q", ODD[0]], woken.append)
        assert sub is not None
        await _until(sub.is_live)
        await d.job_enqueue(new_job(1, created=T0))
        await d.job_enqueue(new_job(2, created=T0 + 10))  # same slot: no second PUBLISH
        await d.job_enqueue(new_job(3, run_at=T0 + 5000, created=T0 + 2000))  # not due: none
        await d.job_enqueue_many([new_job(4, queue=ODD[0]), new_job(5, queue=ODD[0])])
        await d.job_enqueue(new_job(6, queue="other", created=T0 + 5000))  # not subscribed
        await _until(lambda: len(woken) >= 2)
        await d.job_enqueue(new_job(7, created=T0 + 1000))  # next slot
        await _until(lambda: len(woken) >= 3)
        await asyncio.sleep(0.2)
        assert woken == ["q", ODD[0], "q"]
        await sub.close()
        assert not sub.is_live()


async def test_a_due_job_that_went_in_quiet_gets_one_publish_at_its_slots_end(
    make_waking_driver: Factory,
) -> None:
    """A due job whose slot's PUBLISH went out already gets one more at the slot's end (one for
    all the quiet jobs of a slot); a PUBLISH of ours begun after it went in stands for that."""
    async with make_waking_driver(wake_slot_ms=1000) as d:
        woken: list[str] = []
        sub = await d.wake_subscribe(["q"], woken.append)
        assert sub is not None
        await _until(sub.is_live)
        await d.job_enqueue(new_job(1, created=T0))
        await d.job_enqueue(new_job(2, created=T0 + 1))  # quiet: one more at the slot's end…
        await d.job_enqueue(new_job(3, created=T0 + 2))  # …for both
        await d.job_enqueue(new_job(4, run_at=T0 + 9000, created=T0 + 3))  # not due: none
        await asyncio.sleep(0.2)
        assert woken == ["q"]
        await _until(lambda: len(woken) == 2)
        trails = d._loops.get().trails
        assert trails is not None
        sent = trails.sent
        await d.job_enqueue(new_job(5, created=T0 + 1000))  # the next slot: published…
        await d.job_enqueue(new_job(6, created=T0 + 1001))  # …and quiet…
        assert "q" in trails._pending  # …its trailing one due at the slot's end…
        await d.job_enqueue(new_job(7, created=T0 + 2000))  # …but this one published after it
        await _until(lambda: len(woken) >= 4)
        # The slot's end came (a second after the enqueues' own publishes, long since here) and
        # found job 6 covered: nothing sent then, nor pending to be sent later.
        await _until(lambda: "q" not in trails._pending)
        assert trails.sent == sent
        assert woken == ["q"] * 4


async def test_an_idle_worker_starts_a_job_that_went_in_quiet_without_its_poll(
    make_waking_driver: Factory,
) -> None:
    """Two due jobs in one slot, the second enqueued after the worker claimed the first: the
    second starts on the slot's trailing PUBLISH, not on the worker's poll (30 s here)."""
    from jobs_core.job import JobRegistry, job
    from jobs_core.worker import Worker

    registry = JobRegistry()
    started: list[int] = []

    @job(tenant="none", name="note", queue="q", registry=registry)
    async def note(payload: Any, ctx: Any) -> None:
        started.append(payload["i"])

    async with make_waking_driver(wake_slot_ms=1000) as d:
        worker = Worker(d, [note], poll_floor=30, poll_ceiling=30, wake_ceiling=30)
        await worker.start()
        try:
            wake = worker._wake
            assert wake is not None
            await _until(wake.is_live)
            slot = int(time.time()) * 1000  # the start of the current one-second slot
            await d.job_enqueue(new_job(1, name="note", run_at=slot, created=slot))
            await _until(lambda: started == [1])
            await d.job_enqueue(new_job(2, name="note", run_at=slot, created=slot + 1))
            await _until(lambda: started == [1, 2], 10)
        finally:
            await worker.stop()


# -- costs -----------------------------------------------------------------------------------------


class CommandCounter:
    """Counts the commands a client sends (each is one round-trip: the driver never pipelines)."""

    def __init__(self, client: Any) -> None:
        self.count = 0
        #: PUBLISH commands among them (the trailing wakes: an enqueue's publish is in its script).
        self.publishes = 0
        inner = client.execute_command

        async def counted(*args: Any, **kw: Any) -> Any:
            self.count += 1
            self.publishes += args[:1] == ("PUBLISH",)
            return await inner(*args, **kw)

        client.execute_command = counted


async def test_round_trips_per_processed_job(make_driver: Factory) -> None:
    """A job enqueued alone, claimed in a batch of 100 and acked in a batch: 1.02 round-trips.

    The worker adds its own heartbeats and registry beats on top; `test_worker_round_trips`
    pins the whole loop.
    """
    async with make_driver() as d:
        # Warm the server's script cache, so NOSCRIPT reloads are not counted.
        await d.job_enqueue(new_job("warm", queue="warm"))
        await d.job_ack([Ack(c.fence, T0) for c in (await d.job_claim(claim(("warm",)))).jobs])
        counter = CommandCounter(d.client)
        started = time.monotonic()
        n = 300
        for i in range(n):
            await d.job_enqueue(new_job(i))
        done = 0
        while True:
            res = await d.job_claim(claim(("q",), limit=100))
            if not res.jobs:
                break
            assert all(await d.job_ack([Ack(c.fence, T0) for c in res.jobs]))
            done += len(res.jobs)
        assert done == n
        # The enqueues all fall in one wake slot (created T0) while the wall clock moves on: the
        # quiet ones get trailing PUBLISHes, one a slot's length of wall time at most.
        assert counter.publishes <= (time.monotonic() - started) * 1000 / d.wake_slot_ms + 2
        # n enqueues + 3 claims + 3 acks + the final empty claim, besides those
        assert counter.count - counter.publishes == n + 7
        assert (counter.count - counter.publishes) / n < 1.03


async def test_worker_round_trips(make_driver: Factory) -> None:
    """The real worker, end to end: the amortised round-trips per processed job stay small."""
    from jobs_core.job import JobRegistry, job
    from jobs_core.worker import Worker

    registry = JobRegistry()

    @job(tenant="none", name="noop", queue="q", registry=registry)
    async def noop(payload: Any, ctx: Any) -> None:
        return None

    async with make_driver() as d:
        n = 400
        now = int(time.time() * 1000)
        await d.job_enqueue_many(
            [new_job(i, name="noop", run_at=now, created=now) for i in range(n)]
        )
        counter = CommandCounter(d.client)
        worker = Worker(d, [noop], concurrency=50, max_in_flight=200, poll_floor=0.01)
        await worker.start()
        await _until(lambda: worker.stats.completed >= n, 60)
        await worker.stop()
        per_job = counter.count / n
        print(f"worker: {counter.count} round-trips for {n} jobs = {per_job:.3f} per job")
        assert per_job < 0.25


async def test_enqueue_many_across_pipelined_chunks_matches_memory(driver: RedisDriver) -> None:
    """Chunks after the first are pipelined on one connection; order and dedupes still hold."""
    jobs = [new_job(i) for i in range(2500)]
    jobs[2001] = new_job("dup-key", key="k-5")  # a later chunk dedupes on an earlier key
    jobs[2400] = new_job(10)  # and on an earlier id
    jobs[1500] = new_job("late", run_at=T0 + 10, priority=3)
    memory = MemoryDriver()
    want = await memory.job_enqueue_many(jobs)
    assert await driver.job_enqueue_many(jobs) == want
    assert want[2001] == EnqueueResult("id-5", deduped=True)
    assert want[2400] == EnqueueResult("id-10", deduped=True)
    ids = [j.id for j in jobs]
    assert await driver.job_get_many(ids) == await memory.job_get_many(ids)
    assert await driver.queue_demand(["q"], T0) == await memory.queue_demand(["q"], T0)


async def _stored(d: RedisDriver) -> dict[str, Any]:
    """Every key of `d`'s prefix (its name without the prefix) and what it holds."""
    client: Any = d.client
    out: dict[str, Any] = {}
    async for key in client.scan_iter(match=d.keys.pattern(), count=1000):
        kind = await client.type(key)
        name = key.replace(d.keys.prefix, "P", 1)
        if kind == "hash":
            out[name] = await client.hgetall(key)
        elif kind == "zset":
            out[name] = await client.zrange(key, 0, -1, withscores=True)
        else:
            out[name] = await client.get(key)
    return out


async def test_enqueue_many_of_columns_stores_what_its_records_store(make_driver: Factory) -> None:
    """A batch as columns (`NewJobs`, the facade's) is packed apart from a list of records:
    both store the same keys, fields and scores, and answer alike (chunks, dedupes, non-ASCII
    ids and keys, orgs, flow links, a future run time)."""
    from jobs_core.records import NewJobs

    shared = dataclasses.replace(
        new_job(0, queue=ODD[3], tenant="tén", priority=4, run_at=T0 + 5),
        enqueued_by="me",
        traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        batch_id="b-1",
    )
    n = 1200
    ids = [f"id-{i}" if i % 7 else f"íd-{i}" for i in range(n)]
    keys = [f"k-{i}" if i % 5 else f"ключ-{i}" for i in range(n)]
    keys[1100] = keys[3]  # dedupes, in a later chunk, on an earlier record's key
    ids[1150] = ids[4]  # and on an earlier id
    texts = [json.dumps({"i": i, "s": "ü" * (i % 3)}) for i in range(n)]
    acts = [None if i % 3 else f"org-{i}é" for i in range(n)]
    batch = NewJobs(shared, ids, [f"run-{i}" for i in range(n)], keys, texts, acts)
    async with make_driver() as a, make_driver() as b:
        want = await a.job_enqueue_many(list(batch))
        assert await b.job_enqueue_many(batch) == want
        assert want[1100] == EnqueueResult(ids[3], deduped=True)
        assert want[1150] == EnqueueResult(ids[4], deduped=True)
        stored = await _stored(a)
        assert len(stored["{P}:job:state"]) == n - 2
        assert await _stored(b) == stored


async def test_enqueue_many_of_large_records_spans_several_packs(make_driver: Factory) -> None:
    """A call's records travel in packs of about 1 MB (`_Packs`): records of 300 KB of JSON,
    ASCII and not, as columns and as a list, cross pack bounds and read back as stored."""
    from jobs_core.records import NewJobs

    texts = [
        json.dumps({"i": i, "pad": ("é" if i % 2 else "x") * 300_000}, ensure_ascii=False)
        for i in range(9)
    ]
    records = [dataclasses.replace(new_job(i), input_json=texts[i]) for i in range(9)]
    shared = records[0]
    batch = NewJobs(
        shared,
        [r.id for r in records],
        [r.run_id for r in records],
        [f"k-{i}" for i in range(9)],
        texts,
    )
    # The list spans two queues: each queue's name, channel and wake slot ride after the packs.
    mixed = [r if i % 3 else dataclasses.replace(r, queue="q2") for i, r in enumerate(records)]
    ids = [r.id for r in records]
    for given, want_woken in ((mixed, {"q", "q2"}), (batch, {"q"})):
        memory = MemoryDriver()
        want = await memory.job_enqueue_many(list(given))
        async with make_driver() as d:
            assert await d.job_enqueue_many(given) == want
            assert await d.job_get_many(ids) == await memory.job_get_many(ids)
            for q in ("q", "q2"):
                assert await d.queue_demand([q], T0) == await memory.queue_demand([q], T0)
            woken = await d.client.hgetall(d.keys.wake)
            assert woken == dict.fromkeys(want_woken, str(T0 // d.wake_slot_ms))


def test_injected_client_must_decode() -> None:
    import fakeredis

    raw = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    with pytest.raises(RecordInvalidError):
        RedisDriver("fake", client=raw)


async def test_wrong_password_is_typed_and_masked(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "auth", "--requirepass", "right-one")
    server.start()
    try:
        d = RedisDriver(f"redis://:wr0ng-s3cret@127.0.0.1:{server.port}/0", prefix="x")
        with pytest.raises(JobsError) as exc:
            await d.open()
        assert exc.value.code in ("X_DRIVER_UNAVAILABLE", "X_DRIVER_ERROR")
        assert "wr0ng-s3cret" not in str(exc.value)
        assert "wr0ng-s3cret" not in d.describe()
        await d.close()
        ok = RedisDriver(f"redis://:right-one@127.0.0.1:{server.port}/0", prefix="x")
        await ok.open()
        assert (await ok.job_enqueue(new_job(1))).deduped is False
        await ok.close()
    finally:
        server.stop()


async def test_enqueue_many_of_columns_at_every_byte_limit(make_driver: Factory) -> None:
    """The two encoders agree at the edges: every name, id, key, org and link at its byte
    bound in 4-byte characters, JSON texts of exactly `MAX_JSON_BYTES` (one per pack) and
    nesting `MAX_JSON_DEPTH` deep, escapes of NUL's neighbours, markup, and a key colliding
    inside the batch; a value one byte over any bound is refused alike before a write."""
    from jobs_core.driver import MAX_KEY_BYTES, MAX_NAME_BYTES
    from jobs_core.jsonform import MAX_JSON_BYTES, MAX_JSON_DEPTH
    from jobs_core.records import NewJobs

    def at(limit: int, ch: str, tag: str) -> str:
        # `tag` then 4-byte characters then ASCII: exactly `limit` UTF-8 bytes.
        body = limit - len(tag)
        return tag + ch * (body // 4) + "x" * (body % 4)

    big = '["' + "😀" * ((MAX_JSON_BYTES - 4) // 4) + '"]'
    assert len(big.encode()) == MAX_JSON_BYTES
    deep = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    odd = json.dumps({"<script>": '\u0001\u001f"\\</b>\ufffe\U0010ffff'}, ensure_ascii=False)
    shared = NewJob(
        id=at(MAX_NAME_BYTES, "😀", "i0"),
        run_id=at(MAX_NAME_BYTES, "é", "r0"),
        name=at(MAX_NAME_BYTES, "ж", "n"),
        queue=at(MAX_NAME_BYTES, "💥", "q"),
        tenant_id=at(MAX_NAME_BYTES, "𝄞", "t"),
        idempotency_key=at(MAX_KEY_BYTES, "😀", "k0"),
        input_json=big,
        priority=100,
        run_at_ms=2**42 - 1,
        max_attempts=1000,
        created_at_ms=2**42 - 1,
        enqueued_by=at(MAX_NAME_BYTES, "é", "b"),
        traceparent="00-" + "f" * 32 + "-" + "f" * 16 + "-ff",
        batch_id=at(MAX_NAME_BYTES, "😀", "B"),
        acts_for=at(MAX_NAME_BYTES, "😀", "o0"),
    )
    n = 12
    ids = [at(MAX_NAME_BYTES, "😀", f"i{i}") for i in range(n)]
    run_ids = [at(MAX_NAME_BYTES, "é", f"r{i}") for i in range(n)]
    keys = [at(MAX_KEY_BYTES, "😀", f"k{i}") for i in range(n)]
    keys[7] = keys[2]  # dedupes on an earlier record's key, in another pack
    texts = [big if i % 4 == 0 else (deep if i % 2 else odd) for i in range(n)]
    acts = [None if i % 3 == 1 else at(MAX_NAME_BYTES, "😀", f"o{i}") for i in range(n)]
    batch = NewJobs(shared, ids, run_ids, keys, texts, acts)
    memory = MemoryDriver()
    want = await memory.job_enqueue_many(list(batch))
    assert want[7] == EnqueueResult(ids[2], deduped=True)
    async with make_driver() as a, make_driver() as b:
        assert await a.job_enqueue_many(list(batch)) == want
        assert await b.job_enqueue_many(batch) == want
        assert await _stored(b) == await _stored(a)
        assert await b.job_get_many(ids) == await memory.job_get_many(ids)
        over = [
            NewJobs(shared, [ids[0] + "x", *ids[1:]], run_ids, keys, texts, acts),
            NewJobs(shared, ids, run_ids, [*keys[:5], keys[5] + "x", *keys[6:]], texts, acts),
            NewJobs(shared, ids, run_ids, keys, [*texts[:-1], big[:-1] + " ]"], acts),
            NewJobs(shared, ids, run_ids, keys, [*texts[:3], "[" + deep + "]", *texts[4:]], acts),
            NewJobs(shared, ids, run_ids, keys, texts, [*acts[:-1], acts[0] + "x"]),
            NewJobs(shared, ids, [*run_ids[:9], "r\ud800", *run_ids[10:]], keys, texts, acts),
        ]
        before = await _stored(b)
        for bad in over:
            refusals = []
            for d in (memory, a, b):
                for given in (list(bad), bad):
                    with pytest.raises(RecordInvalidError) as caught:
                        await d.job_enqueue_many(given)
                    refusals.append((caught.value.code, caught.value.detail))
            assert len(set(refusals)) == 1, refusals
        assert await _stored(b) == before


async def test_a_facade_batch_sent_again_finds_its_rows_by_id(make_driver: Factory) -> None:
    """The facade's batch has ids no row holds, so its first sending skips looking them up
    (`NewJobs.take_fresh`); the same batch sent again — a retry after its first try wrote —
    still finds its rows by id, even once they finished and their keys are free."""
    from jobs_core.clock import FakeClock
    from jobs_core.facade import build_records
    from jobs_core.job import JobRegistry, job

    async def body(inp: Any, ctx: Any) -> None:
        return None

    key = lambda inp: f"k{inp['i']}"  # noqa: E731
    handle = job(
        body, name="n", queue="q", tenant="none", idempotency_key=key, registry=JobRegistry()
    )
    batch = build_records(handle, [{"i": i} for i in range(3)], clock=FakeClock(T0))
    async with make_driver() as d:
        first = await d.job_enqueue_many(batch)
        assert [r.deduped for r in first] == [False] * 3
        held = (await d.job_claim(claim(("q",)))).jobs
        assert await d.job_ack([Ack(h.fence, T0) for h in held]) == [True] * 3
        assert await d.job_enqueue_many(batch) == [EnqueueResult(r.id, True) for r in first]
        rows = await d.job_get_many([r.id for r in first])
        assert [rows[r.id].state for r in first] == [JobState.COMPLETED] * 3
        assert await d.queue_demand(["q"], T0) == {"q": 0}


async def test_a_prefix_is_dropped_by_unlink_never_by_del(tmp_path: Path) -> None:
    """The suite's purge and the shipped scratch store remove a prefix's keys with UNLINK (the
    server frees them off its main thread: a DEL of a prefix of 100,000 jobs held the shared
    server for over half a second), and leave every other prefix's keys alone."""
    from jobs_core.urls import driver_from_url
    from jobs_redis.scratch import RedisScratch
    from tests.redis.conftest import purge

    server = RedisServer(tmp_path / "purge")
    server.start()
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        scratch = RedisScratch(url)
        mine: Any = driver_from_url(scratch.url)
        async with mine, RedisDriver(url, prefix="kept") as kept:
            for d in (mine, kept):
                await d.job_enqueue_many([new_job(n) for n in range(3)])
            await purge(mine)
            await mine.job_enqueue_many([new_job(n) for n in range(3, 5)])
        await scratch.drop()
        stats = server.cli("info", "commandstats")
        assert "cmdstat_unlink:" in stats and "cmdstat_del:" not in stats, stats
        assert all(k.startswith("{kept}:") for k in server.cli("--scan").split()), server.cli(
            "--scan"
        )
        assert server.cli("--scan").split()
    finally:
        server.stop()


async def test_a_read_of_thousands_of_ids_holds_the_server_a_slice_at_a_time(
    make_driver: Factory,
) -> None:
    """`job_get_many` of 2,500 ids (some absent) answers every stored row, one script call per
    1,000 ids: one call for them all would hold the server for nine reads an id."""
    async with make_driver() as d:
        await d.job_enqueue_many([new_job(i) for i in range(1_200)])
        asked = [f"id-{i}" for i in range(2_500)]
        await d.job_get_many(["id-0"])  # loads the script: no NOSCRIPT reload counted below
        counter = CommandCounter(d.client)
        rows = await d.job_get_many(asked)
        assert counter.count == 3
        assert sorted(rows) == sorted(f"id-{i}" for i in range(1_200))
        assert all(r.id == i and r.state is JobState.READY for i, r in rows.items())
