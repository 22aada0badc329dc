"""Fleet-wide limits as a worker enforces them, on memory, real Postgres and real Redis:
`concurrency=N` across workers, keyed limits that wait or refuse, rate limits per window, tenant
and worker, slots lost and leases handed back, and `with_lock`. The same limits across processes
are `tests/test_leases_processes.py`."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import pytest

from jobs_core import Jobs, Worker
from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import Capabilities, JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import SettledEvent
from jobs_core.leases import Concurrency, RateLimit
from jobs_core.leases.admit import Gate
from jobs_core.leases.lock import with_lock
from jobs_core.records import ClaimParams, Lease, LeaseRef, LeaseTake
from jobs_core.retry import Retry
from jobs_core.states import FINISHED_STATES, JobState, Outcome
from jobs_memory import MemoryDriver
from tests.core.support import T0, counting, declare, fresh_store, until


@pytest.fixture(params=["memory", "pg", "redis"])
def kind(request: pytest.FixtureRequest) -> str:
    """Each store kind, for a test that makes its store itself (`fresh_store`)."""
    kind: str = request.param
    return kind


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    """A fresh, empty store of each kind (a schema, a key prefix of its own), dropped after."""
    async with fresh_store(request.param) as store:
        yield store


class Running:
    """Counts bodies running at once, overall and per key, and the most ever seen."""

    def __init__(self) -> None:
        self.now: dict[str, int] = defaultdict(int)
        self.most: dict[str, int] = defaultdict(int)
        self.starts: list[tuple[float, str]] = []

    async def body(self, key: str, seconds: float) -> None:
        self.starts.append((time.monotonic(), key))
        self.now[key] += 1
        self.most[key] = max(self.most[key], self.now[key])
        try:
            await asyncio.sleep(seconds)
        finally:
            self.now[key] -= 1


async def run_workers(workers: list[Worker], done: Any, within: float = 20.0) -> None:
    for w in workers:
        await w.start()
    try:
        await until(done, within)
    finally:
        await asyncio.gather(*(w.stop() for w in workers))


async def test_concurrency_is_fleet_wide_and_waiting_spends_no_attempt(driver: JobDriver) -> None:
    running = Running()

    async def send(input: Any, ctx: JobContext) -> None:
        await running.body("all", 0.03)

    handle = declare(send, concurrency=2)
    client = Jobs(driver)
    ids = [(await client.enqueue(handle, {"n": i})).id for i in range(12)]
    workers = [Worker(driver, [handle], concurrency=5, poll_floor=0.01) for _ in range(3)]

    async def all_done() -> bool:
        rows = await driver.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    await run_workers(workers, all_done)
    assert running.most["all"] == 2, running.most
    rows = await driver.job_get_many(ids)
    assert {r.attempt for r in rows.values()} == {1}, "waiting for a slot spent an attempt"
    assert sum(w.stats.shed for w in workers) > 0, "no job ever met a full fleet"
    assert await driver.lease_holders("job:send", int(time.time() * 1000)) == [], "a slot kept"


async def test_keyed_limit_waits_per_key(driver: JobDriver) -> None:
    running = Running()

    async def sync(input: Any, ctx: JobContext) -> None:
        await running.body(input["acct"], 0.02)

    handle = declare(sync, concurrency={"key": lambda i: i["acct"], "limit": 1})
    client = Jobs(driver)
    ids = [(await client.enqueue(handle, {"n": i, "acct": f"a{i % 3}"})).id for i in range(12)]
    worker = Worker(driver, [handle], concurrency=10, poll_floor=0.01)

    async def all_done() -> bool:
        rows = await driver.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    await run_workers([worker], all_done)
    assert dict(running.most) == {"a0": 1, "a1": 1, "a2": 1}, running.most
    rows = await driver.job_get_many(ids)
    assert {r.attempt for r in rows.values()} == {1}


async def test_keyed_fail_refuses_only_on_another_runs_evidence(driver: JobDriver) -> None:
    release = asyncio.Event()
    ran: list[int] = []
    settled: list[SettledEvent] = []

    async def charge(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])
        await release.wait()

    handle = declare(
        charge,
        concurrency=Concurrency(1, key=lambda i: i["card"], when_busy="fail"),
        on_settled=settled.append,
    )
    client = Jobs(driver)
    first = (await client.enqueue(handle, {"n": 1, "card": "c1"})).id
    worker = Worker(driver, [handle], concurrency=5, poll_floor=0.01)
    await worker.start()
    try:
        await until(lambda: ran == [1])
        second = (await client.enqueue(handle, {"n": 2, "card": "c1"})).id

        async def refused() -> bool:
            return (await driver.job_get_many([second]))[second].state is JobState.FAILED

        await until(refused)
        row = (await driver.job_get_many([second]))[second]
        assert row.last_error is not None and "concurrency key busy" in row.last_error
        assert row.attempt == 0, "a refusal spends no attempt: the body never ran"
        assert ran == [1]
        # The hook runs after the settle landed, from the worker's own task: wait for it.
        await until(lambda: bool(settled))
        assert [(e.job_id, e.outcome) for e in settled] == [(second, Outcome.REFUSED)]
        assert worker.stats.refused == 1
        release.set()

        async def first_done() -> bool:
            return (await driver.job_get_many([first]))[first].state is JobState.COMPLETED

        await until(first_done)
    finally:
        release.set()
        await worker.stop()


async def test_fail_refuses_only_on_another_run_not_on_a_job_turned_away(
    driver: JobDriver,
) -> None:
    """Two jobs of one key claimed in one round: the first is turned away by its tenant's rate
    window. It never holds the key (its slot is asked only after its stamps), so the second,
    whose window is free, runs: it is not refused on the evidence of a run that never was. Two
    workers run: no grant of the key, by either, ever goes to a job that does not start, so
    neither can see one as another run."""
    ran: list[int] = []
    granted: list[tuple[str, str]] = []
    take = driver._lease_take

    async def recording(takes: Any, now_ms: int) -> list[Any]:
        answers = await take(takes, now_ms)
        granted.extend((t.key, t.holder) for t, a in zip(takes, answers, strict=True) if a)
        return answers

    driver._lease_take = recording  # type: ignore[method-assign]

    async def charge(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle = declare(
        charge,
        tenant=lambda i: i["org"],
        concurrency=Concurrency(1, key=lambda i: i["card"], when_busy="fail"),
        rate_limit=RateLimit(1, per=3600, by="tenant"),
    )
    now = int(time.time() * 1000)
    full = LeaseTake("rate:job:6:charge:tenant:o1", "earlier", 1, 3_600_000, stamp=True)
    assert (await driver.lease_take([full], now))[0] is not None
    client = Jobs(driver)
    first = (await client.enqueue(handle, {"n": 1, "card": "c1", "org": "o1"}, tenant_id="o1")).id
    second = (await client.enqueue(handle, {"n": 2, "card": "c1", "org": "o2"}, tenant_id="o2")).id
    workers = [Worker(driver, [handle], poll_floor=0.01) for _ in range(2)]

    async def decided() -> bool:
        rows = await driver.job_get_many([first, second])
        return rows[first].claims >= 1 and rows[second].state in FINISHED_STATES

    await run_workers(workers, decided)
    rows = await driver.job_get_many([first, second])
    assert rows[second].state is JobState.COMPLETED, rows[second].last_error
    assert ran == [2]
    assert rows[first].state is JobState.READY and rows[first].attempt == 0
    assert sum(w.stats.refused for w in workers) == 0
    key = "job-key:6:charge:c1"
    assert [holder for k, holder in granted if k == key] == [second], granted


async def test_a_run_meets_its_own_leftover_slot(driver: JobDriver) -> None:
    """A slot a crashed run of the same job left behind is no evidence: the job runs."""
    ran: list[int] = []

    async def charge(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle = declare(
        charge, concurrency={"key": lambda i: i["card"], "limit": 1, "when_busy": "fail"}
    )
    job_id = (await Jobs(driver).enqueue(handle, {"n": 1, "card": "c1"})).id
    leftover = await driver.lease_take(
        [LeaseTake("job-key:6:charge:c1", job_id, 1, 3_600_000)], int(time.time() * 1000)
    )
    assert leftover[0] is not None
    worker = Worker(driver, [handle], poll_floor=0.01)
    await run_workers([worker], lambda: ran == [1])
    assert (await driver.job_get_many([job_id]))[job_id].state is JobState.COMPLETED


async def test_an_underivable_key_fails_the_attempt_not_the_round(driver: JobDriver) -> None:
    ran: list[int] = []

    async def sync(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle = declare(
        sync,
        concurrency={"key": lambda i: i["acct"], "limit": 1},
        retry=Retry(attempts=1),
    )
    client = Jobs(driver)
    bad = (await client.enqueue(handle, {"n": 1})).id
    good = (await client.enqueue(handle, {"n": 2, "acct": "a"})).id
    worker = Worker(driver, [handle], poll_floor=0.01)

    async def settled() -> bool:
        rows = await driver.job_get_many([bad, good])
        return rows[bad].state is JobState.DEAD and rows[good].state is JobState.COMPLETED

    await run_workers([worker], settled)
    row = (await driver.job_get_many([bad]))[bad]
    assert row.last_error is not None and "X_JOB_CONCURRENCY_KEY_INVALID" in row.last_error
    assert ran == [2]


async def test_zero_concurrency_is_a_hard_stop(driver: JobDriver) -> None:
    ran: list[int] = []

    async def held_back(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle = declare(held_back, concurrency=0)
    job_id = (await Jobs(driver).enqueue(handle, {"n": 1})).id
    worker = Worker(driver, [handle], poll_floor=0.01)

    async def given_back() -> bool:
        row = (await driver.job_get_many([job_id]))[job_id]
        return row.claims == 1 and row.state is JobState.READY

    await run_workers([worker], given_back)
    row = (await driver.job_get_many([job_id]))[job_id]
    assert ran == [] and row.attempt == 0
    assert row.run_at_ms is not None and row.run_at_ms > int(time.time() * 1000) + 50_000


def test_a_driver_without_leases_refuses_a_declared_limit() -> None:
    class NoLeases(MemoryDriver):
        def capabilities(self) -> Capabilities:
            return replace(super().capabilities(), leases=False)

    handle = declare(lambda i, c: None, name="limited", concurrency=3)
    with pytest.raises(JobsError) as caught:
        Worker(NoLeases(), [handle])
    assert caught.value.code == "X_JOB_CONCURRENCY_UNENFORCEABLE"
    assert "limited" in str(caught.value)
    with pytest.raises(JobsError, match="X_JOB_CONCURRENCY_UNENFORCEABLE"):
        Worker(NoLeases(), [declare(lambda i, c: None)], rate_limits=RateLimit(1, per=1.0))
    Worker(NoLeases(), [declare(lambda i, c: None)])  # no limit: nothing to enforce


async def test_a_lost_slot_cancels_the_run(driver: JobDriver) -> None:
    started = asyncio.Event()
    reasons: list[str] = []

    async def slow(input: Any, ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            reasons.append(ctx.signal.reason.code if ctx.signal.reason else "?")
            raise

    handle = declare(slow, concurrency=1, retry=Retry(attempts=3, base_ms=60_000, jitter="none"))
    job_id = (await Jobs(driver).enqueue(handle, {"n": 1})).id
    # A second job follows the first's slot: a lost slot is handed to nobody, so it goes back
    # to the queue and takes a slot of its own.
    follower = (await Jobs(driver).enqueue(handle, {"n": 2})).id
    worker = Worker(driver, [handle], lease=0.6, heartbeat_every=0.1, poll_floor=0.01)
    await worker.start()
    try:
        await started.wait()
        now = int(time.time() * 1000)
        (slot,) = await driver.lease_holders("job:slow", now)
        started.clear()
        assert await driver.lease_abandon([LeaseRef(slot.key, slot.token)], now) == [True]

        async def retried() -> bool:
            return (await driver.job_get_many([job_id]))[job_id].state is JobState.READY

        await until(retried)
        await until(started.is_set)
        holders = await driver.lease_holders("job:slow", int(time.time() * 1000))
        assert len(holders) == 1 and holders[0].token > slot.token, holders
        running = await driver.job_get_many([follower])
        assert running[follower].state is JobState.RUNNING
    finally:
        await worker.stop(timeout=0)
    row = (await driver.job_get_many([job_id]))[job_id]
    assert reasons[0] == "X_JOB_SLOT_LOST"
    assert row.last_error is not None and "X_JOB_SLOT_LOST" in row.last_error
    assert row.attempt == 1


async def test_a_run_never_starts_on_a_slot_the_store_no_longer_holds(driver: JobDriver) -> None:
    """The README's `send_invoice` (a rate limit beside `concurrency=`): a slot waiting in the
    worker for its next run, while the rate limit turns run after run away, is valid only while
    renewed. It is put back as it was (never as fresh) and handed over only while its last
    renewal covers the new run's first heartbeat, so no run starts on a lapsed slot (which
    another worker could take: the limit passed, then the run cancelled with
    `X_JOB_SLOT_LOST`)."""
    live_at_start: list[int] = []
    client = Jobs(driver)

    async def send_invoice(input: Any, ctx: JobContext) -> None:
        now = int(time.time() * 1000)
        live_at_start.append(len(await driver.lease_holders("job:send_invoice", now)))
        if input["n"] > 0:
            await asyncio.sleep(0.6)  # across heartbeats: a lapsed slot's renewal is refused

    handle = declare(
        send_invoice,
        rate_limit=RateLimit(1, per=1.5),
        concurrency=1,
        retry=Retry(attempts=3, base_ms=60_000, jitter="none"),
    )
    worker = Worker(driver, [handle], lease=0.9, poll_floor=0.01, poll_ceiling=0.02)
    await worker.start()
    try:
        first = (await client.enqueue(handle, {"n": 0})).id
        await until(lambda: live_at_start == [1])
        # Run after run claimed while the window is full: each one turned away, the slot the
        # first run left behind goes back to the worker, for longer than a lease.
        ids = []
        for n in range(1, 50):
            ids.append((await client.enqueue(handle, {"n": n})).id)
            await asyncio.sleep(0.03)

        async def two_done() -> bool:
            rows = await driver.job_get_many(ids)
            return sum(r.state is JobState.COMPLETED for r in rows.values()) >= 2

        await until(two_done, 20)
    finally:
        await worker.stop(timeout=0)
    assert live_at_start[:3] == [1, 1, 1], "a run started on a slot the store no longer held"
    rows = await driver.job_get_many([first, *ids])
    lost = [r.id for r in rows.values() if r.last_error and "X_JOB_SLOT_LOST" in r.last_error]
    assert lost == [], lost


async def test_a_slot_lost_while_its_run_waits_for_a_local_slot_starts_nothing(
    kind: str,
) -> None:
    """A follower handed its key's slot by a run that ended may still wait for one of the
    worker's own slots; the fleet slot is renewed meanwhile, and if it is lost before the body
    starts, the body does not start on it: the job goes back, no attempt spent, and runs later
    on a slot the store holds."""
    async with fresh_store(kind, counted=True) as driver:
        events = {name: asyncio.Event() for name in ("a1", "b", "c")}
        live_at_start: dict[str, int] = {}
        key = "job-key:4:sync:a"

        async def sync(input: Any, ctx: JobContext) -> None:
            now = int(time.time() * 1000)
            live_at_start[input["name"]] = len(await driver.lease_holders(key, now))
            if input["name"] in events:
                await events[input["name"]].wait()

        async def other(input: Any, ctx: JobContext) -> None:
            await events[input["name"]].wait()

        keyed = declare(sync, concurrency={"key": lambda i: "a", "limit": 1})
        free = declare(other)
        client = Jobs(driver)
        worker = Worker(
            driver,
            [keyed, free],
            concurrency=2,
            max_in_flight=4,
            lease=0.6,
            heartbeat_every=0.1,
            poll_floor=0.01,
        )
        await worker.start()
        try:
            await client.enqueue(keyed, {"n": 1, "name": "a1"})
            await until(lambda: "a1" in live_at_start)
            a2 = (await client.enqueue(keyed, {"n": 2, "name": "a2"})).id
            await until(lambda: worker.stats.running == 1 and worker.stats.claimed == 2)
            await client.enqueue(free, {"n": 3, "name": "b"})
            await until(lambda: worker.stats.running == 2)
            await client.enqueue(free, {"n": 4, "name": "c"})
            await until(lambda: worker.stats.claimed == 4)
            # a1 ends: its slot goes to a2, whose turn for a local slot comes after c's.
            events["a1"].set()
            await until(lambda: worker.stats.running == 2 and worker.stats.completed == 1)
            now = int(time.time() * 1000)
            (slot,) = await driver.lease_holders(key, now)
            assert await driver.lease_abandon([LeaseRef(slot.key, slot.token)], now) == [True]
            # The next heartbeat finds it lost: a2 goes back to the queue, no attempt spent,
            # without waiting for a local slot to tell it so.
            await until(lambda: worker.stats.shed == 1)
            events["b"].set()
            events["c"].set()

            async def a2_done() -> bool:
                return (await driver.job_get_many([a2]))[a2].state is JobState.COMPLETED

            await until(a2_done)
        finally:
            for e in events.values():
                e.set()
            await worker.stop()
        row = (await driver.job_get_many([a2]))[a2]
        assert live_at_start == {"a1": 1, "a2": 1}, "a body started on a slot the store lost"
        assert row.attempt == 1 and row.last_error is None, row.last_error


async def test_rate_limit_spaces_starts_and_spends_no_attempt(driver: JobDriver) -> None:
    #: Per run: its rate stamp and its body's start, in epoch seconds.
    stamped: list[tuple[float, float]] = []

    async def call_api(input: Any, ctx: JobContext) -> None:
        started = time.time()
        # The claim that admitted this run took its stamp at the instant its lease starts from
        # (one `now`); no heartbeat comes within the test's second or two to move the lease.
        row = (await driver.job_get_many([ctx.job_id]))[ctx.job_id]
        assert row.lease_until_ms is not None
        stamped.append(((row.lease_until_ms - worker.lease_ms) / 1000, started))

    handle = declare(call_api, rate_limit=RateLimit(2, per=0.4))
    client = Jobs(driver)
    ids = [(await client.enqueue(handle, {"n": i})).id for i in range(7)]
    worker = Worker(driver, [handle], poll_floor=0.01)

    async def all_done() -> bool:
        rows = await driver.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    await run_workers([worker], all_done)
    # The limit counts stamps; a body starts after its own, by a lag a loaded machine stretches
    # unevenly (a window between body starts once measured 0.367 s). So: any 3 consecutive
    # stamps span a whole window, exact to the millisecond, and no body starts before its stamp.
    assert len(stamped) == 7 and all(start >= stamp for stamp, start in stamped), stamped
    stamps = sorted(stamp for stamp, _ in stamped)
    spans = [round(stamps[i + 2] - stamps[i], 3) for i in range(len(stamps) - 2)]
    assert min(spans) >= 0.4, spans
    assert {r.attempt for r in (await driver.job_get_many(ids)).values()} == {1}
    # Deferred to when the window frees, not retried in a loop: a few claims per job at most.
    assert worker.stats.claimed <= 3 * 7, worker.stats.claimed


async def test_a_rate_limit_counts_starts_not_claims(driver: JobDriver) -> None:
    """With a buffer (`max_in_flight` > `concurrency`), a rate-limited job claimed while every
    local slot is busy takes its stamp when it gets a slot and its body starts, not when it was
    claimed: a stamp taken at claim lapsed while the job waited, and `RateLimit(2, per=1.0)` saw
    4 starts within a millisecond."""
    release = asyncio.Event()
    freed_ms: list[int] = []
    #: Per run of `call`: when its stamp was taken (its window's start) and its body started.
    runs: list[tuple[int, int]] = []

    async def block(input: Any, ctx: JobContext) -> None:
        await release.wait()
        freed_ms.append(int(time.time() * 1000))

    async def call(input: Any, ctx: JobContext) -> None:
        started = int(time.time() * 1000)
        stamps = await driver.lease_holders("rate:job:4:call:global:", started)
        mine = [s for s in stamps if s.holder.startswith(f"{ctx.job_id}:")]
        runs.append((mine[-1].expires_at_ms - 1000 if mine else -1, started))

    blocker = declare(block)
    limited = declare(call, rate_limit=RateLimit(2, per=1.0))
    client = Jobs(driver)
    for n in range(4):
        await client.enqueue(blocker, {"n": n})
    worker = Worker(driver, [blocker, limited], concurrency=4, max_in_flight=12, poll_floor=0.01)
    await worker.start()
    try:
        await until(lambda: worker.stats.running == 4)
        ids = [(await client.enqueue(limited, {"n": n})).id for n in range(6)]
        # Claimed into the buffer, then held there past their window by the busy slots.
        await until(lambda: worker.stats.claimed >= 10)
        await asyncio.sleep(1.2)
        release.set()

        async def all_done() -> bool:
            rows = await driver.job_get_many(ids)
            return all(r.state is JobState.COMPLETED for r in rows.values())

        await until(all_done, 20)
    finally:
        release.set()
        await worker.stop()
    assert len(runs) == 6, runs
    first_free = min(freed_ms)
    for stamped, started in runs:
        assert stamped >= first_free, "a stamp was taken before its run could start"
        assert started - stamped < 1000, "a body started after its stamp lapsed"
    assert {r.attempt for r in (await driver.job_get_many(ids)).values()} == {1}


async def test_rate_limit_by_tenant_and_worker_declared(driver: JobDriver) -> None:
    ran: list[str] = []

    async def report(input: Any, ctx: JobContext) -> None:
        ran.append(input["org"])

    handle = declare(report, tenant=lambda i: i["org"])
    client = Jobs(driver)
    ids = {}
    for n, org in enumerate(["o1", "o1", "o2"]):
        ids[n] = (await client.enqueue(handle, {"n": n, "org": org}, tenant_id=org)).id
    worker = Worker(
        driver, [handle], poll_floor=0.01, rate_limits=[RateLimit(1, per=3600, by="tenant")]
    )
    await run_workers([worker], lambda: sorted(ran) == ["o1", "o2"])
    rows = await driver.job_get_many(list(ids.values()))
    waiting = [r for r in rows.values() if r.state is JobState.READY]
    assert len(waiting) == 1 and waiting[0].tenant_id == "o1" and waiting[0].attempt == 0
    # Deferred to when o1's window ends (an hour), not retried meanwhile.
    assert waiting[0].run_at_ms is not None
    assert waiting[0].run_at_ms > int(time.time() * 1000) + 3_500_000


async def test_a_start_that_never_happened_gives_its_stamp_back(driver: JobDriver) -> None:
    """A job that got its rate stamp but not its slot abandons the stamp: the window counts only
    starts that happened."""
    release = asyncio.Event()
    ran: list[int] = []

    async def export(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])
        await release.wait()

    handle = declare(export, concurrency=1, rate_limit=RateLimit(5, per=3600))
    client = Jobs(driver)
    await client.enqueue(handle, {"n": 1})
    worker = Worker(driver, [handle], poll_floor=0.01)
    await worker.start()
    try:
        await until(lambda: ran == [1])
        await client.enqueue(handle, {"n": 2})
        await until(lambda: worker.stats.shed >= 2)
        now = int(time.time() * 1000)
        stamps = await driver.lease_holders("rate:job:6:export:global:", now)
        assert len(stamps) == 1, stamps
    finally:
        release.set()
        await worker.stop()


async def test_with_lock_fences_waits_times_out_and_cancels_when_lost(driver: JobDriver) -> None:
    client = Jobs(driver)
    async with with_lock("nightly", ttl=5, driver=driver, clock=client.clock) as first:
        with pytest.raises(JobsError, match="X_LOCK_TIMEOUT"):
            async with with_lock("nightly", wait=0.1, driver=driver, clock=client.clock):
                raise AssertionError("two holders at once")
    async with with_lock("nightly", driver=driver, clock=client.clock) as second:
        assert second.token > first.token

    with pytest.raises(JobsError, match="X_LOCK_LOST"):
        async with with_lock("nightly", ttl=0.3, driver=driver, clock=client.clock) as lock:
            now = client.clock.now_ms()
            await driver.lease_abandon([LeaseRef("lock:nightly", lock.token)], now)
            await asyncio.sleep(5)
            raise AssertionError("the block outlived its lock")
    assert lock.lost.is_set()
    with pytest.raises(JobsError, match="X_LOCK_LOST"):
        lock.check()


async def test_the_next_job_of_a_key_follows_the_run_holding_it() -> None:
    """A job of a key this worker is running waits for that run's slot (one follower per slot):
    it is not given back, and no lease call is made between the two runs."""
    driver = counting(MemoryDriver)()
    running = Running()

    async def sync(input: Any, ctx: JobContext) -> None:
        await running.body(input["acct"], 0.01)

    handle = declare(sync, concurrency={"key": lambda i: i["acct"], "limit": 1})
    client = Jobs(driver)
    ids = [(await client.enqueue(handle, {"n": i, "acct": "a"})).id for i in range(2)]
    worker = Worker(driver, [handle], concurrency=10, poll_floor=0.01)

    async def all_done() -> bool:
        rows = await driver.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    await run_workers([worker], all_done)
    assert running.most == {"a": 1}
    assert worker.stats.claimed == 2, "claimed again: the follower was given back"
    assert worker.stats.shed == 0, "a job was given back though this worker ran its key"
    assert driver.calls.count("_lease_take") == 1, driver.calls


async def test_a_key_this_worker_fills_costs_no_lease_call(kind: str) -> None:
    """While this worker's own runs hold every slot of a key, a job of that key is refused
    without asking the store (the store would refuse it): it follows one of those runs or goes
    back to the queue, and the claim rounds meanwhile make no lease call."""
    async with fresh_store(kind, counted=True) as driver:
        release = asyncio.Event()
        ran: list[int] = []

        async def export(input: Any, ctx: JobContext) -> None:
            ran.append(input["n"])
            if input["n"] == 0:
                await release.wait()

        handle = declare(export, concurrency=1)
        client = Jobs(driver)
        worker = Worker(driver, [handle], concurrency=5, poll_floor=0.01)
        await worker.start()
        try:
            await client.enqueue(handle, {"n": 0})
            await until(lambda: ran == [0])
            takes = driver.calls.count("_lease_take")
            for n in range(1, 4):
                await client.enqueue(handle, {"n": n})
                await until(lambda n=n: worker.stats.claimed >= n + 1)
            await until(lambda: worker.stats.shed >= 2)
            assert driver.calls.count("_lease_take") == takes, driver.calls
            release.set()
            await until(lambda: sorted(ran) == [0, 1, 2, 3])
        finally:
            release.set()
            await worker.stop()


async def test_a_drain_hands_back_the_jobs_waiting_for_a_slot(driver: JobDriver) -> None:
    release = asyncio.Event()
    ran: list[int] = []

    async def sync(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])
        await release.wait()

    handle = declare(sync, concurrency=1)
    client = Jobs(driver)
    ids = [(await client.enqueue(handle, {"n": i})).id for i in range(3)]
    worker = Worker(driver, [handle], concurrency=5, poll_floor=0.01)
    await worker.start()
    await until(lambda: len(ran) == 1)
    stopping = asyncio.ensure_future(worker.stop(timeout=5))
    await asyncio.sleep(0.05)
    release.set()
    await stopping
    rows = await driver.job_get_many(ids)
    done = [r for r in rows.values() if r.state is JobState.COMPLETED]
    back = [r for r in rows.values() if r.state is JobState.READY]
    assert len(done) == 1 and len(back) == 2, rows
    assert {r.attempt for r in back} == {0}, "a job waiting for a slot spent an attempt"
    assert await driver.lease_holders("job:sync", int(time.time() * 1000)) == []


async def test_a_drain_gives_back_what_a_start_was_granted_after_it_stopped_waiting(
    driver: JobDriver,
) -> None:
    """A job that waited for a local slot takes its stamp as it gets one; a drain that stops
    it while that take is under way hands the job back, and the stamp the take then brings is
    abandoned: a start that never happened is not counted."""
    release = asyncio.Event()
    taking = asyncio.Event()
    answer = asyncio.Event()
    ran: list[str] = []
    take = driver._lease_take

    async def held_take(takes: Any, now_ms: int) -> list[Any]:
        if any(t.stamp for t in takes):
            taking.set()
            await answer.wait()
        return await take(takes, now_ms)

    driver._lease_take = held_take  # type: ignore[method-assign]

    async def hold(input: Any, ctx: JobContext) -> None:
        ran.append("hold")
        await release.wait()

    async def call(input: Any, ctx: JobContext) -> None:
        ran.append("call")

    holder = declare(hold)
    limited = declare(call, rate_limit=RateLimit(5, per=3600))
    client = Jobs(driver)
    worker = Worker(driver, [holder, limited], concurrency=1, max_in_flight=2, poll_floor=0.01)
    await worker.start()
    stopping = None
    try:
        await client.enqueue(holder, {"n": 1})
        await until(lambda: ran == ["hold"])
        job_id = (await client.enqueue(limited, {"n": 2})).id
        await until(lambda: worker.stats.claimed == 2)
        release.set()  # its local slot frees: the job asks for its stamp
        await until(taking.is_set)
        stopping = asyncio.ensure_future(worker.stop(timeout=5))
        await until(lambda: worker.stats.interrupted == 1)
        answer.set()
        await stopping
    finally:
        release.set()
        answer.set()
        if stopping is None:
            await worker.stop()
    row = (await driver.job_get_many([job_id]))[job_id]
    assert ran == ["hold"] and row.state is JobState.READY and row.attempt == 0
    now = int(time.time() * 1000)
    assert await driver.lease_holders("rate:job:4:call:global:", now) == []


async def test_an_admission_that_crashes_gives_the_jobs_back(
    monkeypatch: pytest.MonkeyPatch, driver: JobDriver
) -> None:
    """Whatever raises while a claim round is admitted, its jobs go back to the queue, no attempt
    spent: none is left to its lease."""
    from jobs_core.leases.admit import Gate

    async def broken(self: Gate, jobs: Any, now: int) -> Any:
        raise RuntimeError("a bug in the admission")

    monkeypatch.setattr(Gate, "admit", broken)
    handle = declare(lambda i, c: None, name="limited", concurrency=2)
    job_id = (await Jobs(driver).enqueue(handle, {"n": 1})).id
    worker = Worker(driver, [handle], poll_floor=0.01)

    async def given_back() -> bool:
        row = (await driver.job_get_many([job_id]))[job_id]
        return row.claims >= 1 and row.state is JobState.READY

    await run_workers([worker], given_back)
    row = (await driver.job_get_many([job_id]))[job_id]
    assert row.attempt == 0 and row.run_at_ms is not None
    assert worker.stats.shed >= 1


async def test_a_job_id_at_the_byte_limit_still_takes_its_stamp(driver: JobDriver) -> None:
    """A rate stamp's holder is the job's id and claim; at the id's byte limit it is digested,
    never refused (a refused take would hold back the whole claim round)."""
    ran: list[int] = []

    async def call_api(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle = declare(call_api, rate_limit=RateLimit(5, per=60))
    client = Jobs(driver)
    await client.enqueue(handle, {"n": 1}, id="é" * 100)
    await client.enqueue(handle, {"n": 2})
    worker = Worker(driver, [handle], poll_floor=0.01)
    await run_workers([worker], lambda: sorted(ran) == [1, 2])
    stamps = await driver.lease_holders("rate:job:8:call_api:global:", int(time.time() * 1000))
    assert len(stamps) == 2 and any(s.holder.startswith("h:") for s in stamps), stamps


async def test_a_lost_lock_is_raised_even_when_the_block_swallows_its_cancel(
    driver: JobDriver,
) -> None:
    """A block that catches the cancel of its lost lock still ends in `X_LOCK_LOST`, and the
    task that ran it is not left cancelled."""
    client = Jobs(driver)
    swallowed = False
    with pytest.raises(JobsError, match="X_LOCK_LOST"):
        async with with_lock("swallow", ttl=0.3, driver=driver, clock=client.clock) as lock:
            await driver.lease_abandon(
                [LeaseRef("lock:swallow", lock.token)], client.clock.now_ms()
            )
            try:
                await asyncio.sleep(5)
            except asyncio.CancelledError:
                swallowed = True
    assert swallowed
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # a later await is not cancelled


async def test_with_lock_needs_only_a_driver_outside_any_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`driver=` alone is enough where no client is configured (the system's clock); with
    neither, the refusal names both ways out."""
    from jobs_core import facade

    # Another test of this process may have configured a client: none here.
    monkeypatch.setattr(facade, "_default", None)
    assert facade.current_client() is None
    driver = MemoryDriver()
    async with with_lock("solo", driver=driver) as held:
        holders = await driver.lease_holders("lock:solo", int(time.time() * 1000))
        assert [h.token for h in holders] == [held.token]
    with pytest.raises(JobsError, match=r"X_JOB_DECLARATION_INVALID.*pass driver="):
        async with with_lock("solo"):
            raise AssertionError("a lock without a store")


async def test_an_admission_takes_its_stamps_at_the_clock_of_each_take() -> None:
    """The stamps are taken at the clock read right before each `lease_take` goes out, not at
    the claim round's `now` (read before the claim was even sent): a stamp is the start it
    counts, and one taken at a stale now sat a claim's round trip early in its window (the
    four-process test once saw four stamps of `RateLimit(3, per=0.5)` within 488 ms). Here
    700 ms pass between the round's now and the admission, and each take (the stamps, then a
    `when_busy="fail"` job's slot after its stamps) reads the clock anew."""
    clock = FakeClock(T0)
    sent: list[int] = []

    class Recording(MemoryDriver):
        async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
            sent.append(now_ms)
            got = await super()._lease_take(takes, now_ms)
            clock.set(clock.now_ms() + 50)  # the call's round trip
            return got

    async def body(input: Any, ctx: JobContext) -> None:
        return None

    rated = declare(body, rate_limit=RateLimit(3, per=0.5))
    keyed = declare(
        body,
        name="keyed",
        rate_limit=RateLimit(3, per=0.5),
        concurrency={"key": lambda i: "k", "limit": 1, "when_busy": "fail"},
    )
    driver = Recording()
    client = Jobs(driver)
    await client.enqueue(rated, {"n": 1})
    await client.enqueue(keyed, {"n": 2})
    claimed = await driver.job_claim(ClaimParams(("default",), "w1", 2, 60_000, T0))
    assert len(claimed.jobs) == 2
    gate = Gate(driver, clock, {h.name: h for h in (rated, keyed)}, (), lease_ms=60_000)
    clock.set(T0 + 700)
    verdicts = await gate.admit(claimed.jobs, T0)
    assert sent == [T0 + 700, T0 + 750], sent
    stamps = [lease for v in verdicts.values() for lease in v.leases if lease.stamp]
    assert sorted(s.expires_at_ms for s in stamps) == [T0 + 1200, T0 + 1200], stamps
