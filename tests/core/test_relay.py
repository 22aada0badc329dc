"""The outbox relay on a fake clock: staged rows become jobs under their staged ids on memory,
real Postgres and real Redis; a failed batch falls back to rows in order; an unavailable driver
stops the loop and keeps the order; a poison row backs off without blocking the rest; a lost mark
republishes deduped; two relays publish each row once; the two-phase stop; the idle cost.
Relay processes (`ujobs relay`, a SIGKILL between publish and mark) are
`tests/test_relay_processes.py`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from jobs_core.clock import FakeClock, SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    DrainingError,
    DriverError,
    DriverNotInstalledError,
    DriverUnavailableError,
    DriverUrlInvalidError,
    JobsError,
    OptionInvalidError,
    RecordInvalidError,
)
from jobs_core.job import JobHandle
from jobs_core.outbox import OutboxClaim, OutboxRow, OutboxStore, Relay, Staged
from jobs_core.outbox.relay import RETRY_FLOOR_MS
from jobs_core.records import EnqueueResult, JobFilter, JobListParams, NewJob
from jobs_core.urls import outbox_from_url
from jobs_memory import MemoryDriver
from jobs_memory.outbox import MemoryOutbox
from jobs_pg.outbox import PgOutbox
from tests.core.support import T0, advance_quietly, counting, declare, fresh_store, until

SECOND = 1_000
MINUTE = 60_000


async def noop(input: Any, ctx: JobContext) -> None:
    return None


NOOP: JobHandle = declare(noop)


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    """A fresh, empty store of each kind (a schema, a key prefix of its own), dropped after."""
    async with fresh_store(request.param) as store:
        yield store


def stage(outbox: MemoryOutbox, n: int, *, first: int = 0) -> list[Staged]:
    """`n` jobs staged in one committed transaction, inputs `{"n": first..}`, in stage order."""
    with outbox.transaction() as tx:
        return [outbox.stage(tx, NOOP, {"n": i}) for i in range(first, first + n)]


async def job_ids(driver: JobDriver) -> list[str]:
    page = await driver.job_list(JobListParams(JobFilter(), limit=500))
    return sorted(j.id for j in page.jobs)


class Spy:
    """Wraps a driver's two enqueue calls on the instance: records each row's enqueue in order
    and every answer, and raises what `fail_many` / `fail_row` say (callables, so a fault can
    heal)."""

    def __init__(self, driver: JobDriver) -> None:
        self.driver = driver
        self.rows: list[str] = []
        self.answers: list[EnqueueResult] = []
        self.batches = 0
        self.fail_many: Callable[[], BaseException | None] = lambda: None
        self.fail_row: Callable[[str], BaseException | None] = lambda job_id: None
        many, one = driver.job_enqueue_many, driver.job_enqueue

        async def enqueue_many(jobs: Sequence[NewJob]) -> list[EnqueueResult]:
            self.batches += 1
            await asyncio.sleep(0)  # a memory store never yields: let racing relays interleave
            exc = self.fail_many()
            if exc is not None:
                raise exc
            answers = await many(jobs)
            self.answers.extend(answers)
            return answers

        async def enqueue(job: NewJob) -> EnqueueResult:
            self.rows.append(job.id)
            exc = self.fail_row(job.id)
            if exc is not None:
                raise exc
            answer = await one(job)
            self.answers.append(answer)
            return answer

        driver.job_enqueue_many = enqueue_many  # type: ignore[method-assign]
        driver.job_enqueue = enqueue  # type: ignore[method-assign]

    def inserted(self) -> list[str]:
        return sorted(a.id for a in self.answers if not a.deduped)


# -- publishing ---------------------------------------------------------------------------


async def test_staged_jobs_are_published_under_their_staged_ids(driver: JobDriver) -> None:
    clock = FakeClock(T0)
    outbox = MemoryOutbox(clock=clock)
    staged = stage(outbox, 5)
    spy = Spy(driver)
    relay = Relay(outbox, driver, clock=clock, batch=2)
    assert await relay.tick() == 5
    rows = await driver.job_get_many([s.id for s in staged])
    assert {i: (r.run_id, r.input_json) for i, r in rows.items()} == {
        s.id: (s.run_id, f'{{"n": {n}}}'.replace(" ", "")) for n, s in enumerate(staged)
    }
    assert await outbox.outbox_pending(10) == []
    # Full batches repeat within the pass: 2 + 2 + 1, one enqueue_many each, no row loop.
    assert (spy.batches, spy.rows) == (3, [])
    assert await relay.tick() == 0


async def test_a_running_relay_publishes_what_a_commit_stages(driver: JobDriver) -> None:
    outbox = MemoryOutbox()
    relay = Relay(outbox, driver, clock=SystemClock(), poll=3600)
    await relay.start()
    try:
        # The poll is an hour: only the commit's wake can start the pass.
        await asyncio.sleep(0.05)
        staged = stage(outbox, 3)
        await until(lambda: relay.published == 3)
        assert await job_ids(driver) == sorted(s.id for s in staged)
    finally:
        assert await relay.stop(timeout=10)
    assert await outbox.outbox_pending(10) == []


async def test_a_failed_batch_falls_back_to_rows_in_stage_order() -> None:
    clock = FakeClock(T0)
    outbox, driver = MemoryOutbox(clock=clock), MemoryDriver()
    staged = stage(outbox, 6)
    spy = Spy(driver)
    spy.fail_many = lambda: DriverError("the batch statement failed")
    relay = Relay(outbox, driver, clock=clock)
    assert await relay.tick() == 6
    assert spy.rows == [s.id for s in staged]
    assert spy.inserted() == sorted(s.id for s in staged)
    assert await outbox.outbox_pending(10) == []


async def test_an_unavailable_driver_stops_the_loop_and_keeps_the_order() -> None:
    clock = FakeClock(T0)
    outbox, driver = MemoryOutbox(clock=clock), MemoryDriver()
    staged = stage(outbox, 5)
    ids = [s.id for s in staged]
    spy = Spy(driver)
    down = {"yes": True}
    spy.fail_many = lambda: DriverUnavailableError() if down["yes"] else None
    # The first row goes through; the store drops at the second.
    spy.fail_row = lambda i: DriverUnavailableError() if down["yes"] and i != ids[0] else None
    relay = Relay(outbox, driver, clock=clock)
    assert await relay.tick() == 1
    assert spy.rows == ids[:2]  # the loop stopped at the row that met the outage
    pending = await outbox.outbox_pending(10)
    # Released as they were: free, claimable now, no attempt spent, no error, in order.
    assert [r.job.id for r in pending] == ids[1:]
    assert all(
        (r.claimed_by, r.attempts, r.last_error) == (None, 0, None)
        and r.available_at_ms <= clock.now_ms()
        for r in pending
    )
    down["yes"] = False
    spy.rows.clear()
    assert await relay.tick() == 4
    assert spy.rows == []  # healed: one batch, in order
    assert spy.inserted() == sorted(ids)


async def test_a_poison_row_backs_off_with_its_error_and_blocks_nobody() -> None:
    clock = FakeClock(T0)
    outbox, driver = MemoryOutbox(clock=clock), MemoryDriver()
    staged = stage(outbox, 4)
    ids = [s.id for s in staged]
    spy = Spy(driver)
    spy.fail_many = lambda: RecordInvalidError("refused by the store", detail="input")
    spy.fail_row = lambda i: (
        RecordInvalidError("refused by the store", detail="input") if i == ids[1] else None
    )
    relay = Relay(outbox, driver, clock=clock)
    assert await relay.tick() == 3
    assert spy.rows == ids  # the rows after the poison one went on
    [row] = await outbox.outbox_pending(10)
    assert (row.job.id, row.attempts, row.claimed_by) == (ids[1], 1, None)
    assert row.last_error is not None and row.last_error.startswith("X_JOB_RECORD_INVALID")
    assert row.available_at_ms == T0 + RETRY_FLOOR_MS
    assert await relay.tick() == 0  # not claimable before its retry time
    clock.set(T0 + RETRY_FLOOR_MS)
    assert await relay.tick() == 0
    [row] = await outbox.outbox_pending(10)
    # The backoff doubles with each failed attempt.
    assert (row.attempts, row.available_at_ms) == (2, clock.now_ms() + 2 * RETRY_FLOOR_MS)
    spy.fail_row = lambda i: None
    clock.set(row.available_at_ms)
    assert await relay.tick() == 1
    assert await job_ids(driver) == sorted(ids)


async def test_a_republish_after_a_lost_mark_is_deduped(driver: JobDriver) -> None:
    clock = FakeClock(T0)
    outbox = MemoryOutbox(clock=clock)
    staged = stage(outbox, 3)
    spy = Spy(driver)
    marks_fail = {"yes": True}
    publish = outbox.outbox_publish

    async def lost_mark(token: str, ids: Sequence[str]) -> list[str]:
        if marks_fail["yes"]:
            raise DriverUnavailableError("the outbox store went away")
        return await publish(token, ids)

    outbox.outbox_publish = lost_mark  # type: ignore[method-assign]
    relay = Relay(outbox, driver, clock=clock, lease=30)
    assert await relay.tick() == 0
    # The batch's mark failed, so did the first row's: that row is left to its lease (its job
    # exists), the rows after it go back unpublished, in order, and the pass ends.
    first, *rest = await outbox.outbox_pending(10)
    assert (first.job.id, first.lease_until_ms) == (staged[0].id, T0 + 30 * SECOND)
    assert [(r.job.id, r.claimed_by, r.attempts) for r in rest] == [
        (s.id, None, 0) for s in staged[1:]
    ]
    marks_fail["yes"] = False
    assert await relay.tick() == 2  # the first row is still leased: nobody takes it
    clock.set(T0 + 30 * SECOND)
    other = Relay(outbox, driver, clock=clock)
    assert await other.tick() == 1
    assert await outbox.outbox_pending(10) == []
    # Each job inserted once, its republishes deduped onto it: one row per staged id.
    assert spy.inserted() == sorted(s.id for s in staged)
    assert [a.id for a in spy.answers if a.deduped] == [s.id for s in staged] + [staged[0].id]
    assert await job_ids(driver) == sorted(s.id for s in staged)


async def test_two_relays_at_once_publish_each_row_once(driver: JobDriver) -> None:
    clock = FakeClock(T0)
    outbox = MemoryOutbox(clock=clock)
    staged = stage(outbox, 60)
    spy = Spy(driver)
    relays = [Relay(outbox, driver, clock=clock, batch=7) for _ in range(2)]
    counts = await asyncio.gather(*(r.tick() for r in relays))
    assert sum(counts) == 60 and all(counts), counts
    assert spy.inserted() == sorted(s.id for s in staged)
    assert len(spy.answers) == 60  # no row published twice, not even deduped
    assert await outbox.outbox_pending(10) == []


# -- stopping -----------------------------------------------------------------------------


async def test_stop_joins_the_pass_in_flight_then_refuses_to_start() -> None:
    clock = FakeClock(T0)
    outbox, driver = MemoryOutbox(clock=clock), MemoryDriver()
    staged = stage(outbox, 3)
    gate = asyncio.Event()
    many = driver.job_enqueue_many

    async def slow(jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        await gate.wait()
        return await many(jobs)

    driver.job_enqueue_many = slow  # type: ignore[method-assign]
    relay = Relay(outbox, driver, clock=clock)
    await relay.start()
    await until(lambda: not outbox_free(outbox))  # the pass holds its claim, in the enqueue
    stopping = asyncio.ensure_future(relay.stop(timeout=10))
    await asyncio.sleep(0.05)
    assert not stopping.done()
    gate.set()
    assert await stopping is True
    assert await job_ids(driver) == sorted(s.id for s in staged)
    assert await outbox.outbox_pending(10) == []
    stage(outbox, 1, first=10)
    with pytest.raises(DrainingError):
        await relay.start()
    with pytest.raises(DrainingError):
        await relay.tick()
    assert len(await outbox.outbox_pending(10)) == 1  # nothing claimed it


def outbox_free(outbox: MemoryOutbox) -> bool:
    """True while no row of `outbox` is claimed (read without a loop round-trip)."""
    return all(r.claimed_by is None for r in outbox._rows.values())


async def test_a_cancelled_pass_leaves_its_rows_to_their_lease() -> None:
    clock = FakeClock(T0)
    outbox, driver = MemoryOutbox(clock=clock), MemoryDriver()
    staged = stage(outbox, 3)
    never = asyncio.Event()

    async def stuck(jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        await never.wait()
        raise AssertionError("unreachable")

    driver.job_enqueue_many = stuck  # type: ignore[method-assign]
    relay = Relay(outbox, driver, clock=clock, lease=30)
    await relay.start()
    await until(lambda: not outbox_free(outbox))
    assert await relay.stop(timeout=0.05) is False
    pending = await outbox.outbox_pending(10)
    # Still held by the cut pass's claim until the lease lapses: not released, not published.
    assert [r.lease_until_ms for r in pending] == [T0 + 30 * SECOND] * 3
    assert await job_ids(driver) == []
    del driver.job_enqueue_many
    clock.set(T0 + 30 * SECOND)
    assert await Relay(outbox, driver, clock=clock).tick() == 3
    assert await job_ids(driver) == sorted(s.id for s in staged)


async def test_a_second_stop_joins_the_first_and_run_returns() -> None:
    clock = FakeClock(T0)
    relay = Relay(MemoryOutbox(clock=clock), MemoryDriver(), clock=clock)
    running = asyncio.ensure_future(relay.run())
    await until(lambda: clock.pending_sleepers() == 1)
    first, second = relay.stop(timeout=5), relay.stop(timeout=5)
    assert list(await asyncio.gather(first, second)) == [True, True]
    await asyncio.wait_for(running, 5)


def test_bad_options_are_refused_by_name() -> None:
    outbox, driver = MemoryOutbox(), MemoryDriver()
    for options, name in (
        ({"batch": 0}, "batch"),
        ({"batch": 1001}, "batch"),
        ({"lease": float("nan")}, "lease"),
        ({"poll": 0}, "poll"),
        ({"poll": -1.0}, "poll"),
    ):
        with pytest.raises(OptionInvalidError) as caught:
            Relay(outbox, driver, **options)
        assert caught.value.detail == name


def test_describe_names_both_stores_without_a_password() -> None:
    class Described(MemoryOutbox):
        def describe(self) -> str:
            return "outbox at postgresql://app:s3cret@db/app"

    text = Relay(Described(), MemoryDriver()).describe()
    assert "s3cret" not in text
    assert text.startswith("outbox at postgresql://app:***@db/app →")


# -- the idle cost ------------------------------------------------------------------------


class WakelessOutbox(MemoryOutbox):
    """A memory outbox that, with `wake=False`, answers no wake channel."""

    def __init__(self, *, clock: FakeClock, wake: bool) -> None:
        super().__init__(clock=clock)
        self._offers_wake = wake

    async def outbox_wake(self, on_wake: Callable[[], None]) -> Any:
        return await super().outbox_wake(on_wake) if self._offers_wake else None


async def worst_idle_minute(clock: FakeClock, outbox: Any, driver: Any, *, minutes: int) -> int:
    """The most store calls (`calls` of the outbox and the driver, counted from here) in any
    minute of the next `minutes`, the clock moved in 100 ms steps."""
    outbox.calls.clear()
    driver.calls.clear()
    made: list[int] = []
    for _ in range(minutes * 600):
        before = len(outbox.calls) + len(driver.calls)
        await advance_quietly(clock, 100, sleepers=1)
        made.append(len(outbox.calls) + len(driver.calls) - before)
    return max(sum(made[i : i + 600]) for i in range(len(made) - 600))


@pytest.mark.parametrize(("wake", "budget"), [(False, 30), (True, 12)])
async def test_an_idle_minute_stays_within_budget(wake: bool, budget: int) -> None:
    clock = FakeClock(T0)
    outbox: Any = counting(WakelessOutbox, contract=OutboxStore)(clock=clock, wake=wake)
    driver: Any = counting(MemoryDriver)()
    relay = Relay(outbox, driver, clock=clock)
    await relay.start()
    # Some work first, so the idle backoff starts from its floor.
    stage(outbox, 2)
    await until(lambda: relay.published == 2)
    await advance_quietly(clock, 2 * MINUTE, sleepers=1)
    worst = await worst_idle_minute(clock, outbox, driver, minutes=3)
    assert 0 < worst <= budget, worst
    assert set(outbox.calls) == {"_outbox_claim"} and driver.calls == []
    if wake:
        # A stage wakes the idle relay at once: no time passes before its job exists.
        before = clock.now_ms()
        [s] = stage(outbox, 1, first=10)
        await until(lambda: relay.published == 3)
        assert clock.now_ms() == before
        assert (await driver.job_get_many([s.id])).keys() == {s.id}
    assert await relay.stop(timeout=5)


async def test_a_claim_that_fails_raises_from_tick_and_the_loop_backs_off() -> None:
    clock = FakeClock(T0)
    outbox = WakelessOutbox(clock=clock, wake=False)
    driver = MemoryDriver()
    down = {"yes": True}
    claim = outbox.outbox_claim

    async def flaky(c: OutboxClaim) -> list[OutboxRow]:
        if down["yes"]:
            raise DriverUnavailableError("the outbox store is down")
        return await claim(c)

    outbox.outbox_claim = flaky  # type: ignore[method-assign,assignment]
    relay = Relay(outbox, driver, clock=clock)
    with pytest.raises(DriverUnavailableError):
        await relay.tick()
    staged = stage(outbox, 2)
    await relay.start()
    await advance_quietly(clock, 10 * SECOND, sleepers=1)
    assert relay.published == 0
    down["yes"] = False
    await advance_quietly(clock, 5 * SECOND, sleepers=1)  # the outage backoff's cap
    assert await job_ids(driver) == sorted(s.id for s in staged)
    assert await relay.stop(timeout=5)


# -- the loader ---------------------------------------------------------------------------

PLUGIN = """
from jobs_memory.outbox import MemoryOutbox
from jobs_pg.outbox import PgOutbox


class UrlOutbox(MemoryOutbox):
    def __init__(self, url):
        super().__init__()
        self.url = url


def from_url(url):
    return UrlOutbox(url)


def needs_a_library(url):
    import no_such_library_here  # noqa: F401
"""


@pytest.fixture
def outbox_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution on `sys.path` declaring `ujobs.outboxes` entry points, as a backend's
    package does: scheme `boxtest` loads a memory outbox, `boxneeds` a factory whose library is
    missing."""
    dist = tmp_path / "boxtest_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: boxtest-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[ujobs.outboxes]\n"
        "boxtest = boxtest_plugin:from_url\n"
        "boxneeds = boxtest_plugin:needs_a_library\n"
    )
    (tmp_path / "boxtest_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.usefixtures("outbox_plugin")
def test_an_outbox_store_is_loaded_by_its_url_scheme() -> None:
    store = outbox_from_url("boxtest://app:pw@db/app")
    assert type(store).__name__ == "UrlOutbox" and isinstance(store, MemoryOutbox)
    assert vars(store)["url"] == "boxtest://app:pw@db/app"


@pytest.mark.usefixtures("outbox_plugin")
def test_an_outbox_url_nobody_serves_is_refused_with_the_password_masked() -> None:
    with pytest.raises(DriverUrlInvalidError) as caught:
        outbox_from_url("nosuch://app:hunter2@db/app")
    assert "no installed outbox store for scheme 'nosuch'" in caught.value.message
    assert "boxtest" in caught.value.message and "hunter2" not in str(caught.value)
    with pytest.raises(DriverUrlInvalidError):
        outbox_from_url("not a url")


@pytest.mark.usefixtures("outbox_plugin")
def test_an_outbox_store_whose_library_is_missing_names_what_to_install() -> None:
    with pytest.raises(DriverNotInstalledError) as caught:
        outbox_from_url("boxneeds://app:hunter2@db/app")
    assert "no_such_library_here" in caught.value.message
    assert "hunter2" not in str(caught.value)


async def test_a_store_down_at_start_is_waited_for() -> None:
    clock = FakeClock(T0)
    outbox, driver = WakelessOutbox(clock=clock, wake=True), MemoryDriver()
    tries: list[int] = []

    async def opening() -> None:
        tries.append(clock.now_ms())
        if len(tries) < 4:
            raise DriverUnavailableError("the outbox store is starting")

    outbox.open = opening  # type: ignore[method-assign]
    staged = stage(outbox, 2)
    relay = Relay(outbox, driver, clock=clock)
    running = asyncio.ensure_future(relay.run())
    await advance_quietly(clock, 2 * SECOND, sleepers=1)
    # Tried again after 100, 200 and 400 ms (the outage backoff), then it publishes.
    assert [t - T0 for t in tries] == [0, 100, 300, 700]
    await until(lambda: relay.published == 2)
    assert await job_ids(driver) == sorted(s.id for s in staged)
    assert relay.wake is not None and relay.wake.is_live()
    assert await relay.stop(timeout=5)
    await asyncio.wait_for(running, 5)


@pytest.mark.parametrize(("wake", "budget"), [(False, 30), (True, 12)])
async def test_an_idle_minute_on_a_postgres_outbox_stays_within_budget(
    wake: bool, budget: int
) -> None:
    """The same budget on the real store, its LISTEN wake proven live before it counts."""
    from tests.pg.conftest import PG_URL, drop_schema, fresh_schema, migrate

    schema = fresh_schema()
    await asyncio.to_thread(migrate, schema)
    clock = FakeClock(T0)
    outbox: Any = counting(PgOutbox, contract=OutboxStore)(PG_URL, schema=schema, wake=wake)
    driver: Any = counting(MemoryDriver)()
    relay = Relay(outbox, driver, clock=clock)
    try:
        await relay.start()
        if wake:
            await until(lambda: relay.wake is not None and relay.wake.is_live())
        await advance_quietly(clock, 2 * MINUTE, sleepers=1)
        worst = await worst_idle_minute(clock, outbox, driver, minutes=2)
        assert 0 < worst <= budget, worst
        assert set(outbox.calls) == {"_outbox_claim"} and driver.calls == []
        assert await relay.stop(timeout=5)
    finally:
        await outbox.close()
        await asyncio.to_thread(drop_schema, schema)


@pytest.mark.parametrize("relay_id", ["r\x00", "r\ud800", "r" * 300, 5])
def test_a_relay_id_no_store_holds_is_refused_at_construction(relay_id: Any) -> None:
    """It is the claim's holder: every claim of the loop would have refused it (or, in memory,
    stored it), for good. Refused at once, as the scheduler's id is."""
    with pytest.raises(JobsError) as info:
        Relay(MemoryOutbox(), MemoryDriver(), relay_id=relay_id)
    assert (info.value.code, info.value.detail) == ("X_JOB_OPTION_INVALID", "relay_id")
