"""The scheduler role on memory, real Postgres and real Redis, on a fake clock: each occurrence
fires once, catch-up after downtime, paused tasks, two schedulers at once, a leader that dies,
the drain, the idle cost. Two real scheduler processes are `tests/test_scheduler_processes.py`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    CapabilityMissingError,
    DrainingError,
    DriverUnsupportedError,
    InputInvalidError,
    JobDuplicateError,
    JobsError,
    TaskCronInvalidError,
    TaskDeclarationInvalidError,
    TaskTzInvalidError,
    TenantRequiredError,
)
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.jsonform import loads
from jobs_core.operator import Operator
from jobs_core.records import JobFilter, JobListParams, JobRecord, Pause, TaskFire, TaskFireAnswer
from jobs_core.scheduler import LEADER_KEY, Occurrence, Scheduler, TaskHandle, TaskRegistry, task
from jobs_memory import MemoryDriver
from tests.core.support import advance_quietly, fresh_store

HOUR = 3_600_000
MINUTE = 60_000
#: 2026-06-01T00:00:00Z: a Monday, far from any DST transition.
JUNE = 1_780_272_000_000
#: A lease of hours: renewed once an hour, so fake hours pass in steps of minutes without the
#: fake clock outrunning a real store's renewal (the lease itself is not what these test).
LONG = 3 * 3600


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    """A fresh, empty store of each kind (a schema, a key prefix of its own), dropped after."""
    async with fresh_store(request.param) as store:
        yield store


def report_job() -> JobHandle:
    async def report(input: Any, ctx: JobContext) -> None:
        return None

    return job(report, tenant="none", idempotency_key=lambda i: i["kind"], registry=JobRegistry())


def nightly_paris(kind: str) -> TaskHandle:
    """A task at 02:00 Europe/Paris, its job's key the input's `kind`."""
    return task(
        "nightly",
        cron="0 2 * * *",
        tz="Europe/Paris",
        job=report_job(),
        input={"kind": kind},
        registry=TaskRegistry(),
    )


def every_hour(name: str = "hourly", **options: Any) -> TaskHandle:
    options.setdefault("job", report_job())
    options.setdefault("input", {"kind": "hourly"})
    return task(name, cron="0 * * * *", tz="UTC", registry=TaskRegistry(), **options)


async def fired_jobs(driver: JobDriver) -> list[JobRecord]:
    page = await driver.job_list(JobListParams(JobFilter(), limit=500))
    rows = await driver.job_get_many([s.id for s in page.jobs])
    return sorted(rows.values(), key=lambda r: r.idempotency_key)


async def run_for(
    clock: FakeClock, schedulers: list[Scheduler], ms: int, step_ms: int = MINUTE
) -> None:
    """Start the schedulers, let `ms` of fake time pass (each sleeper woken in turn, the
    store's calls finishing before time moves on), then drain them."""
    for s in schedulers:
        await s.start()
    await advance_quietly(clock, ms, sleepers=len(schedulers), step_ms=step_ms)
    for s in schedulers:
        assert await s.stop(timeout=10)


def keys(rows: list[JobRecord]) -> list[str]:
    return [r.idempotency_key for r in rows]


async def test_each_occurrence_fires_once_with_its_occurrence_key(driver: JobDriver) -> None:
    clock = FakeClock(JUNE + 5 * MINUTE)
    hourly = every_hour()
    s = Scheduler(driver, [hourly], clock=clock, lease_ttl=LONG)
    await run_for(clock, [s], 3 * HOUR)
    rows = await fired_jobs(driver)
    assert keys(rows) == [f"task:{JUNE + h * HOUR}:hourly" for h in (1, 2, 3)]
    assert all(
        r.name == hourly.job.name and loads(r.input_json) == {"kind": "hourly"} for r in rows
    )
    assert all(r.enqueued_by == "scheduler" for r in rows)
    mark = (await driver.task_marks(["hourly"]))["hourly"]
    assert mark.fired_ms == mark.watermark_ms == JUNE + 3 * HOUR
    assert mark.fired_job_id == next(
        r.id for r in rows if r.idempotency_key.startswith(f"task:{JUNE + 3 * HOUR}")
    )


async def test_a_nightly_task_fires_at_two_paris_time(driver: JobDriver) -> None:
    nightly = nightly_paris("nightly")
    clock = FakeClock(JUNE - 3 * HOUR)  # 23:00 in Paris
    # A lease of hours keeps the fake days short: a renewal an hour, not every 10 s.
    s = Scheduler(driver, [nightly], clock=clock, lease_ttl=LONG)
    await run_for(clock, [s], 3 * 24 * HOUR, step_ms=10 * MINUTE)
    fired = [int(k.split(":")[1]) for k in keys(await fired_jobs(driver))]
    walls = [nightly.schedule.local(f) for f in fired]
    assert [(w.day, w.hour, w.minute) for w in walls] == [(1, 2, 0), (2, 2, 0), (3, 2, 0)]


async def test_a_task_first_seen_fires_nothing_from_before_it(driver: JobDriver) -> None:
    clock = FakeClock(JUNE + 30 * MINUTE)
    s = Scheduler(driver, [every_hour()], clock=clock, lease_ttl=LONG)
    await run_for(clock, [s], 20 * MINUTE)
    assert await fired_jobs(driver) == []
    assert (await driver.task_marks(["hourly"]))["hourly"].watermark_ms == JUNE + 30 * MINUTE


@pytest.mark.parametrize("catch_up", ["skip", "run-once"])
async def test_catch_up_after_hours_down_fires_one_run(driver: JobDriver, catch_up: str) -> None:
    seen: list[Occurrence] = []

    def input_for(o: Occurrence) -> dict[str, Any]:
        seen.append(o)
        return {"kind": "hourly", "from": o.first_ms, "to": o.last_ms}

    hourly = every_hour(input=input_for, catch_up=catch_up)
    clock = FakeClock(JUNE + 5 * MINUTE)
    # Up at 00:05, fires 01:00.
    await run_for(clock, [Scheduler(driver, [hourly], clock=clock, lease_ttl=LONG)], HOUR)
    # Five hours with no scheduler: 02:00..06:00 are missed.
    clock.set(clock.now_ms() + 5 * HOUR)
    await run_for(clock, [Scheduler(driver, [hourly], clock=clock, lease_ttl=LONG)], 30 * MINUTE)
    rows = await fired_jobs(driver)
    assert len(rows) == 2
    first, last = JUNE + 2 * HOUR, JUNE + 6 * HOUR
    catch = seen[-1]
    assert (catch.first_ms, catch.last_ms) == (first, last)
    at = last if catch_up == "skip" else first
    assert catch.at_ms == at
    assert f"task:{at}:hourly" in keys(rows)
    mark = (await driver.task_marks(["hourly"]))["hourly"]
    assert mark.watermark_ms == last  # the watermark rides the fire
    assert mark.fired_ms == at
    fires = await Operator(driver).task_fires(["hourly", "never-declared"])
    assert fires == {"hourly": at, "never-declared": None}


async def test_a_paused_task_keeps_its_watermark_and_resumes_with_its_catch_up(
    driver: JobDriver,
) -> None:
    hourly = every_hour(catch_up="skip")
    clock = FakeClock(JUNE + 5 * MINUTE)
    s = Scheduler(driver, [hourly], clock=clock, lease_ttl=LONG)
    await s.start()
    await advance_quietly(clock, HOUR, sleepers=1, step_ms=MINUTE)  # 01:00 fires
    assert await driver.pause_add(Pause("task", "hourly"))
    await advance_quietly(clock, 3 * HOUR, sleepers=1, step_ms=MINUTE)  # 02:00-04:00 paused
    mark = (await driver.task_marks(["hourly"]))["hourly"]
    assert mark.watermark_ms == mark.fired_ms == JUNE + HOUR
    assert await driver.pause_remove(Pause("task", "hourly"))
    await advance_quietly(clock, 2 * MINUTE, sleepers=1, step_ms=MINUTE)
    assert await s.stop(timeout=10)
    # Resumed within the pause recheck: the missed span is caught up as `skip` says.
    assert keys(await fired_jobs(driver)) == [f"task:{JUNE + h * HOUR}:hourly" for h in (1, 4)]


async def test_two_schedulers_lead_one_at_a_time(driver: JobDriver) -> None:
    clock = FakeClock(JUNE + 5 * MINUTE)
    hourly = every_hour()
    a, b = (Scheduler(driver, [hourly], clock=clock, lease_ttl=LONG) for _ in range(2))
    await run_for(clock, [a, b], 4 * HOUR)
    assert keys(await fired_jobs(driver)) == [
        f"task:{JUNE + h * HOUR}:hourly" for h in (1, 2, 3, 4)
    ]


async def test_two_schedulers_that_both_believe_they_lead_still_fire_once(
    driver: JobDriver,
) -> None:
    """The fence is the watermark, not the lease: both are made to ignore the lease."""
    clock = FakeClock(JUNE + 5 * MINUTE)
    hourly = every_hour()
    a = Scheduler(driver, [hourly], clock=clock)
    b = Scheduler(driver, [hourly], clock=clock)

    async def always() -> bool:
        return True

    a._lead = b._lead = always  # type: ignore[method-assign]
    await a.tick()
    await b.tick()  # both arm at 00:05
    fences = 0
    for h in (1, 2, 3):
        clock.set(JUNE + h * HOUR)
        results = await asyncio.gather(a.tick(), b.tick())
        fired = [f for r in results for f in r if f.job_id is not None]
        fences += sum(f.fenced for r in results for f in r)
        assert len(fired) == 1, results
    assert keys(await fired_jobs(driver)) == [f"task:{JUNE + h * HOUR}:hourly" for h in (1, 2, 3)]
    assert fences == 3  # the one that lost each race was told so by the store


async def test_a_leader_that_dies_is_replaced_within_its_lease(driver: JobDriver) -> None:
    clock = FakeClock(JUNE + HOUR - 3 * MINUTE)
    hourly = every_hour()
    a = Scheduler(driver, [hourly], clock=clock, lease_ttl=30)
    b = Scheduler(driver, [hourly], clock=clock, lease_ttl=30)
    await a.start()
    await advance_quietly(clock, 1000, sleepers=1, step_ms=1000)
    assert a.leading
    await b.start()
    await advance_quietly(clock, 30_000, sleepers=2, step_ms=1000)
    assert not b.leading
    # A dies without a word: its loop is gone, its lease is left to lapse.
    assert a._loop is not None
    a._loop.cancel()
    await asyncio.gather(a._loop, return_exceptions=True)
    a._loop = None
    await advance_quietly(clock, 45_000, sleepers=1, step_ms=1000)
    assert b.leading  # within a lease (30 s) and one ask (10 s) of the death
    await advance_quietly(clock, 2 * MINUTE, sleepers=1, step_ms=1000)  # past 01:00
    assert await b.stop(timeout=10)
    assert keys(await fired_jobs(driver)) == [f"task:{JUNE + HOUR}:hourly"]
    mark = (await driver.task_marks(["hourly"]))["hourly"]
    assert mark.fired_ms == JUNE + HOUR


async def test_stop_waits_for_the_round_then_gives_the_lead_back(driver: JobDriver) -> None:
    clock = FakeClock(JUNE + HOUR - 1)
    hourly = every_hour()
    s = Scheduler(driver, [hourly], clock=clock, lease_ttl=LONG)
    gate = asyncio.Event()
    original = driver.task_fire

    async def slow_fire(fire: TaskFire) -> TaskFireAnswer:
        await gate.wait()
        return await original(fire)

    driver.task_fire = slow_fire  # type: ignore[method-assign]
    await s.start()
    await advance_quietly(clock, 1, sleepers=1)
    await asyncio.sleep(0.05)  # the round is inside task_fire now
    stopping = asyncio.ensure_future(s.stop(timeout=10))
    await asyncio.sleep(0.05)
    assert not stopping.done()
    gate.set()
    assert await stopping
    assert keys(await fired_jobs(driver)) == [f"task:{JUNE + HOUR}:hourly"]
    assert await driver.lease_holders(LEADER_KEY, clock.now_ms()) == []


async def test_an_abandoned_round_keeps_the_lead(driver: JobDriver) -> None:
    clock = FakeClock(JUNE + HOUR - 1)
    s = Scheduler(driver, [every_hour()], clock=clock, lease_ttl=LONG)
    never = asyncio.Event()

    async def stuck_fire(fire: TaskFire) -> TaskFireAnswer:
        await never.wait()
        raise AssertionError("unreachable")

    driver.task_fire = stuck_fire  # type: ignore[method-assign]
    await s.start()
    await advance_quietly(clock, 1, sleepers=1)
    await asyncio.sleep(0.05)
    assert await s.stop(timeout=0.2) is False
    holders = await driver.lease_holders(LEADER_KEY, clock.now_ms())
    assert [h.holder for h in holders] == [s.scheduler_id]
    with pytest.raises(DrainingError):  # a stopped scheduler is not started again
        await s.start()


@pytest.mark.parametrize("kind", ["memory", "pg", "redis"])
async def test_an_idle_minute_costs_at_most_six_round_trips(kind: str) -> None:
    """Leading, with nothing due for hours: only the lease renewals reach the store."""
    nightly = nightly_paris("n")
    clock = FakeClock(JUNE + 5 * HOUR)
    async with fresh_store(kind, counted=True) as driver:
        leader = Scheduler(driver, [nightly], clock=clock)
        standby = Scheduler(driver, [nightly], clock=clock)
        await leader.start()
        await advance_quietly(clock, MINUTE, sleepers=1, step_ms=1000)
        await standby.start()
        await advance_quietly(clock, MINUTE, sleepers=2, step_ms=1000)
        assert leader.leading and not standby.leading
        calls: Any = driver
        calls.calls.clear()
        await advance_quietly(clock, 10 * MINUTE, sleepers=2, step_ms=1000)
        spent = list(calls.calls)
        await leader.stop(timeout=10)
        await standby.stop(timeout=10)
    # The leader renews and the standby asks, each once every 10 s: 6 a minute each, and
    # nothing else reaches the store (no mark, no pause, no fire).
    assert set(spent) == {"_lease_renew", "_lease_take"}, spent
    assert spent.count("_lease_renew") <= 60
    assert spent.count("_lease_take") <= 60


async def test_a_driver_without_tasks_is_refused_before_the_scheduler_runs() -> None:
    class NoTasks(MemoryDriver):
        def capabilities(self) -> Any:
            return replace(super().capabilities(), tasks=False)

    with pytest.raises(DriverUnsupportedError) as refused:
        Scheduler(NoTasks(), [every_hour()])
    assert isinstance(refused.value, CapabilityMissingError)
    assert refused.value.capability == "tasks"


async def test_more_tasks_than_one_store_call_names_are_armed_and_fired(
    driver: JobDriver,
) -> None:
    """A leader arms every task it fires; past `MAX_TASK_BATCH` tasks (a consumer per tenant
    each brings its supervisor task) one `task_arm` of them all was refused, every round, so
    no task ever fired; the operator's schedule view read them in one call too."""
    from jobs_core.driver import MAX_TASK_BATCH

    clock = FakeClock(JUNE + 5 * MINUTE)
    j = report_job()
    n = MAX_TASK_BATCH + 1
    tasks = [every_hour(f"t{i:05}", job=j, input={"kind": f"k{i}"}) for i in range(n)]
    s = Scheduler(driver, tasks, clock=clock, lease_ttl=3 * HOUR / 1000)
    assert await s.tick() == [] and s.leading  # takes the lead and arms every task
    await clock.advance(HOUR)
    fired = await s.tick()
    assert len(fired) == n and all(f.job_id is not None for f in fired)
    views = await Operator(driver, clock=clock).tasks(tasks)
    assert len(views) == n and all(v.last_fire_ms == JUNE + HOUR for v in views)
    fires = await Operator(driver, clock=clock).task_fires([t.name for t in tasks])
    assert set(fires.values()) == {JUNE + HOUR}


@pytest.mark.parametrize("scheduler_id", ["x" * 201, "s\x00", "\ud800"])
async def test_a_scheduler_id_no_lease_holds_is_refused_at_construction(scheduler_id: str) -> None:
    """The id is the lead's holder: one the lease store refuses made every round fail with
    X_JOB_RECORD_INVALID, forever, after a start that looked fine."""
    with pytest.raises(JobsError) as refused:
        Scheduler(MemoryDriver(), [every_hour()], scheduler_id=scheduler_id)
    assert (refused.value.code, refused.value.detail) == ("X_JOB_OPTION_INVALID", "scheduler_id")


async def test_an_input_the_job_refuses_holds_the_task_not_the_round() -> None:
    clock = FakeClock(JUNE + 5 * MINUTE)
    driver = MemoryDriver()
    bad = every_hour("bad", input=lambda o: {"no-kind": 1})  # the job's key function fails
    # A key past its bound, due first (names break the tie): it must not hold the round.
    long = every_hour("a-long", input=lambda o: {"kind": "k" * 2000})
    good = every_hour("good")
    s = Scheduler(driver, [bad, long, good], clock=clock)
    await run_for(clock, [s], HOUR)
    assert keys(await fired_jobs(driver)) == [f"task:{JUNE + HOUR}:hourly"]
    marks = await driver.task_marks(["bad", "a-long", "good"])
    for refused in ("bad", "a-long"):
        assert marks[refused].fired_ms is None
        assert marks[refused].watermark_ms == JUNE + 5 * MINUTE


# -- declarations -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "error", "detail"),
    [
        ({"cron": "not cron"}, TaskCronInvalidError, None),
        ({"tz": "Europe/Pariss"}, TaskTzInvalidError, None),
        ({"tz": ""}, TaskTzInvalidError, None),
        # Names zoneinfo opens as a path: a directory of the tz database, one past a file
        # name's length (IsADirectoryError, OSError before).
        ({"tz": "Europe"}, TaskTzInvalidError, None),
        ({"tz": "x" * 300}, TaskTzInvalidError, None),
        # A cron `repr` cannot spell (ValueError before).
        ({"cron": 10**5000}, TaskCronInvalidError, None),
        ({"catch_up": "all"}, TaskDeclarationInvalidError, "catch_up"),
        ({"job": "report"}, TaskDeclarationInvalidError, "job"),
        ({"input": {"kind": {1, 2}}}, InputInvalidError, None),
        ({"input": {"other": 1}}, None, None),  # the job's key function cannot answer
        ({"name": ""}, None, "name"),
    ],
)
def test_a_bad_declaration_is_refused_and_registers_nothing(
    options: dict[str, Any], error: type | None, detail: str | None
) -> None:
    registry = TaskRegistry()
    given: dict[str, Any] = {
        "cron": "0 2 * * *",
        "tz": "Europe/Paris",
        "job": report_job(),
        "input": {"kind": "n"},
        **options,
    }
    name = given.pop("name", "nightly")
    with pytest.raises(Exception) as caught:
        task(name, registry=registry, **given)
    if error is not None:
        assert isinstance(caught.value, error)
    assert getattr(caught.value, "code", "").startswith("X_")
    if detail is not None:
        assert caught.value.detail == detail  # type: ignore[attr-defined]
    assert registry.names() == []


def test_a_tenant_the_input_cannot_give_is_refused_at_declaration() -> None:
    async def body(input: Any, ctx: JobContext) -> None:
        return None

    per_org = job(
        body, tenant=lambda i: i["org"], idempotency_key=lambda i: "k", registry=JobRegistry()
    )
    with pytest.raises(TenantRequiredError):
        task("t", cron="@daily", tz="UTC", job=per_org, input={}, registry=TaskRegistry())


def test_a_second_task_under_a_name_is_a_duplicate() -> None:
    registry = TaskRegistry()
    j = report_job()
    task("t", cron="@daily", tz="UTC", job=j, input={"kind": "a"}, registry=registry)
    with pytest.raises(JobDuplicateError):
        task("t", cron="@hourly", tz="UTC", job=j, input={"kind": "a"}, registry=registry)
    assert registry.names() == ["t"]


def test_a_lost_fire_is_told_apart_from_another_schedulers_by_the_stored_mark() -> None:
    """After a fire's answer was lost, the fenced answer's mark says whose fire landed: the
    occurrence must be the lost one's, and its job the one sent — or, when the key deduped it
    into a live job (the mark then names that job), the fire's time the one sent. Anything
    else is another scheduler's fire: a real fence."""
    from jobs_core.records import TaskMark
    from jobs_core.scheduler.role import Fired, _own_fire

    at = 3_600_000
    lost = (Occurrence("t", at, at, at, "UTC"), "job-1", 5_000)

    def mark(fired_ms: int, job_id: str | None, fired_at_ms: int) -> TaskMark:
        return TaskMark("t", at, fired_ms, job_id, fired_at_ms)

    assert _own_fire(mark(at, "job-1", 5_000), None) is None  # no fire of ours was lost
    assert _own_fire(mark(at, "job-1", 5_000), lost) == Fired("t", lost[0], "job-1")
    assert _own_fire(mark(at, "live-9", 5_000), lost) == Fired("t", lost[0], "live-9", True)
    assert _own_fire(mark(at, "job-2", 5_001), lost) is None  # another's fire of it
    assert _own_fire(mark(at + 1, "job-1", 5_000), lost) is None  # a later occurrence's
    assert _own_fire(mark(at, None, 5_000), lost) is None
