"""A driver written for the core job family alone (`tests/core_driver.py`, no optional family
declared): it instantiates, passes the whole parity suite, runs a worker end to end, and every
surface that needs a family it lacks refuses with `X_DRIVER_CAPABILITY_MISSING` naming that
family, before anything is written.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, get_args

import httpx2 as httpx
import pytest
from hypothesis import settings

from jobs_core.cli import main
from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.dashboard import Access, dashboard_app
from jobs_core.driver import (
    CONTRACT_VERSION,
    OPTIONAL_FAMILIES,
    Capabilities,
    Family,
    JobDriver,
)
from jobs_core.errors import CapabilityMissingError, JobsError
from jobs_core.facade import Jobs
from jobs_core.leases import with_lock
from jobs_core.operator import Action, Operator
from jobs_core.operator.metrics import WorkerMetrics
from jobs_core.records import (
    ClaimParams,
    CounterReadParams,
    EventRecord,
    EventWait,
    Fence,
    JobFilter,
    JobListParams,
    JoinEnqueue,
    LeaseRef,
    LeaseRenew,
    LeaseTake,
    Nack,
    NackKind,
    Pause,
    PurgeParams,
    RequeueParams,
    StepPut,
    TaskFire,
    WorkerBeat,
)
from jobs_core.retention import DEFAULT_RETENTION, Retention
from jobs_core.retry import Retry
from jobs_core.scheduler import Scheduler, task
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.states import JobState
from jobs_core.testing import DriverFactory, DriverSuite, run_machine
from jobs_core.testing.scenarios.support import T0, new_job
from jobs_core.testing.suite import declared_families
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import declare, until
from tests.core_driver import CoreDriver

#: The core family: the only `_` methods a driver must implement.
CORE_METHODS = {
    "_job_ack",
    "_job_claim",
    "_job_enqueue",
    "_job_enqueue_many",
    "_job_get_many",
    "_job_heartbeat",
    "_job_nack",
    "_job_progress",
    "_queue_demand",
}


class TestCoreDriverParity(DriverSuite):
    """`make_machine(factory)` with no family flags, and every scenario, on the core driver."""

    @pytest.fixture
    def driver_factory(self) -> DriverFactory:
        return CoreDriver


def test_the_core_family_is_all_a_driver_must_implement() -> None:
    assert JobDriver.__abstractmethods__ == CORE_METHODS
    driver = CoreDriver()
    assert driver.capabilities() == Capabilities()
    assert driver.capabilities().declared() == {"jobs"}
    # The families named for `require` are exactly the flags `Capabilities` has.
    assert OPTIONAL_FAMILIES == get_args(Family) == tuple(f.name for f in fields(Capabilities))
    assert MemoryDriver().capabilities().declared() == {"jobs", *OPTIONAL_FAMILIES} - {"wake"}


def test_the_suite_prints_the_contract_version_and_the_declared_families(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert declared_families(CoreDriver) == {"jobs"}
    # A project's own profile, two short walks: what is printed, not what is walked.
    settings.register_profile("core-driver-print", max_examples=2, stateful_step_count=3)
    monkeypatch.setenv("HYPOTHESIS_PROFILE", "core-driver-print")
    run_machine(CoreDriver, 7)
    run_machine(MemoryDriver, 7, families=frozenset({"jobs"}))
    out = capsys.readouterr().out.splitlines()
    assert f"driver contract v{CONTRACT_VERSION}; the driver declares: jobs" in out
    every = ", ".join(sorted(MemoryDriver().capabilities().declared()))
    assert f"driver contract v{CONTRACT_VERSION}; the driver declares: {every}" in out
    assert "parity state machine: profile core-driver-print, seed 7" in out


# -- the driver's own refusals ------------------------------------------------------------------

FENCE = Fence("a", 1, "w")
#: One call of every optional public method (some with arguments the ABC would also refuse: the
#: family is refused first), with the family it needs.
OPTIONAL_CALLS: list[tuple[Family, Callable[[JobDriver], Awaitable[object]]]] = [
    ("operator", lambda d: d.job_cancel("a", T0)),
    ("operator", lambda d: d.job_cancel_many(["a"], T0)),
    ("operator", lambda d: d.job_list(JobListParams(limit=0))),
    ("operator", lambda d: d.job_promote(["a"], T0)),
    ("operator", lambda d: d.job_remove(["a"])),
    ("operator", lambda d: d.job_requeue("a", T0)),
    ("operator", lambda d: d.job_requeue_many(RequeueParams(("a",), T0))),
    ("operator", lambda d: d.queue_stats(T0)),
    ("pauses", lambda d: d.pause_add(Pause("queue", "q"))),
    ("pauses", lambda d: d.pause_list()),
    ("pauses", lambda d: d.pause_remove(Pause("queue", "q"))),
    ("workers", lambda d: d.worker_beat(WorkerBeat("w", "{}", 1000, T0))),
    ("workers", lambda d: d.worker_forget("w")),
    ("workers", lambda d: d.worker_list(T0)),
    (
        "workers",
        lambda d: d.job_claim(
            ClaimParams(("q",), "w", 1, 1000, T0, beat=WorkerBeat("w", "{}", 1000, T0))
        ),
    ),
    ("counters", lambda d: d.counter_fold(T0, 10)),
    ("counters", lambda d: d.counter_read(CounterReadParams(0, T0))),
    ("retention", lambda d: d.job_purge(PurgeParams(T0, 10, 0, 0, 0, 0))),
    ("steps", lambda d: d.step_list("run-a")),
    ("steps", lambda d: d.step_put([StepPut(FENCE, "s", "1", T0)])),
    ("events", lambda d: d.event_find(EventWait("e", "{}", 0), T0)),
    ("events", lambda d: d.event_publish(EventRecord("e1", "e", "{}", T0, T0 + 1000))),
    ("events", lambda d: d.event_purge(T0, 10)),
    (
        "events",
        lambda d: d.job_nack([Nack(FENCE, NackKind.PARK, T0, wait=EventWait("e", "{}", T0))]),
    ),
    ("leases", lambda d: d.lease_abandon([LeaseRef("k", 1)], T0)),
    ("leases", lambda d: d.lease_holders("k", T0)),
    ("leases", lambda d: d.lease_release([LeaseRef("k", 1)], T0)),
    ("leases", lambda d: d.lease_renew([LeaseRenew("k", 1, 1000)], T0)),
    ("leases", lambda d: d.lease_take([LeaseTake("k", "h", 1, 1000)], T0)),
    ("tasks", lambda d: d.task_arm(["t"], T0)),
    ("tasks", lambda d: d.task_fire(TaskFire("t", T0, T0 + 1, T0 + 1, new_job("f"), T0))),
    ("tasks", lambda d: d.task_marks(["t"])),
    ("flows", lambda d: d.join_enqueue([JoinEnqueue(new_job("f"), ("a",))])),
    ("flows", lambda d: d.job_watch(["a"])),
    ("flows", lambda d: d.join_pending(["a"])),
    ("flows", lambda d: d.job_nack([Nack(FENCE, NackKind.PARK, T0, join=("a",))])),
    ("flows", lambda d: d.job_enqueue(new_job("f", parent_id="a"))),
    ("flows", lambda d: d.job_enqueue_many([new_job("f", batch_id="b")])),
    ("webhooks", lambda d: d.webhook_attempt_purge(T0, 10)),
]


@pytest.mark.parametrize(("family", "call"), OPTIONAL_CALLS)
async def test_each_optional_method_refuses_an_undeclared_family_and_writes_nothing(
    family: Family, call: Callable[[JobDriver], Awaitable[object]]
) -> None:
    driver = CoreDriver()
    await driver.job_enqueue(new_job("a"))
    (held,) = (await driver.job_claim(ClaimParams(("q",), "w", 1, 1000, T0))).jobs
    assert held.fence == FENCE  # the fenced calls name a claim that holds: they would land
    before = await driver.job_get_many(["a", "f"])
    with pytest.raises(CapabilityMissingError) as refused:
        await call(driver)
    assert refused.value.code == "X_DRIVER_CAPABILITY_MISSING"
    assert refused.value.capability == family
    assert f"core-only does not declare the {family} family" in str(refused.value)
    assert await driver.job_get_many(["a", "f"]) == before


async def test_a_family_declared_but_not_implemented_is_refused_by_the_abc() -> None:
    class Boasting(CoreDriver):
        def capabilities(self) -> Capabilities:
            return Capabilities(operator=True)

    with pytest.raises(CapabilityMissingError, match="does not implement _job_list") as refused:
        await Boasting().job_list(JobListParams())
    assert refused.value.capability == "operator"


# -- a worker runs it end to end ----------------------------------------------------------------


async def test_a_worker_runs_jobs_end_to_end_without_any_optional_family(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tries: dict[int, int] = {}

    async def body(input: Any, ctx: JobContext) -> Any:
        n = input["n"]
        tries[n] = tries.get(n, 0) + 1
        if n == 2 and tries[n] == 1:
            raise RuntimeError("a first attempt fails")
        if n == 3:
            raise RuntimeError("always fails")
        ctx.progress({"n": n})
        return {"done": n}

    async def stepper(input: Any, ctx: JobContext) -> Any:
        return await ctx.step.run("charge", lambda: 1)

    work = declare(body, name="work", retry=Retry(attempts=2, base_ms=1))
    steps = declare(stepper, name="steps", retry=Retry(attempts=3, base_ms=1))
    driver = CoreDriver()
    with caplog.at_level(logging.WARNING, logger="jobs"):
        worker = Worker(driver, [work, steps], poll_floor=0.001, poll_ceiling=0.01)
    assert worker.retention is None
    assert "jobs.retention.unsupported: core-only" in caplog.text
    jobs = Jobs(driver)
    ids = [(await jobs.enqueue(work, {"n": n})).id for n in (1, 2, 3)]
    stepped = (await jobs.enqueue(steps, {"n": 4})).id
    await worker.start()
    finished = {JobState.COMPLETED, JobState.DEAD}

    async def ended() -> bool:
        rows = await driver.job_get_many([*ids, stepped])
        return all(r.state in finished for r in rows.values())

    try:
        await until(ended)
        assert await worker.demand() == {"default": 0}
    finally:
        await worker.stop(5)
    rows = await driver.job_get_many([*ids, stepped])
    ok, flaky, doomed, step = (rows[i] for i in (*ids, stepped))
    assert (ok.state, ok.attempt, ok.result_json) == (JobState.COMPLETED, 1, '{"done":1}')
    assert (flaky.state, flaky.attempt) == (JobState.COMPLETED, 2)
    assert (doomed.state, doomed.attempt) == (JobState.DEAD, 2)
    # A step needs the step family: the body fails at once, for good (no attempt would do).
    assert (step.state, step.attempt) == (JobState.DEAD, 1)
    assert step.last_error is not None and "X_DRIVER_CAPABILITY_MISSING" in step.last_error
    assert worker.stats.completed == 2


# -- what needs a family refuses ----------------------------------------------------------------


def test_a_configured_retention_is_refused_and_only_the_default_is_dropped() -> None:
    noop = declare(lambda i, c: None)
    with pytest.raises(CapabilityMissingError) as refused:
        Worker(CoreDriver(), [noop], retention=Retention(completed=60))
    assert refused.value.capability == "retention"
    # An equal retention is still a configured one.
    with pytest.raises(CapabilityMissingError):
        Worker(CoreDriver(), [noop], retention=replace(DEFAULT_RETENTION))
    assert Worker(CoreDriver(), [noop], retention=None).retention is None
    keep = Retention(None, None, None, None)
    assert Worker(CoreDriver(), [noop], retention=keep).retention is keep
    assert Worker(MemoryDriver(), [noop]).retention is DEFAULT_RETENTION


def test_limits_are_refused_without_the_lease_family() -> None:
    limited = declare(lambda i, c: None, name="limited", concurrency=2)
    with pytest.raises(JobsError, match="no lease family") as refused:
        Worker(CoreDriver(), [limited])
    assert refused.value.code == "X_JOB_CONCURRENCY_UNENFORCEABLE"
    assert refused.value.detail == "limited"


async def test_the_scheduler_locks_and_events_are_refused_naming_their_family() -> None:
    nightly = task(
        "nightly",
        cron="0 2 * * *",
        tz="Europe/Paris",
        job=declare(lambda i, c: None),
        input={"n": 1},
        registry=TaskRegistry(),
    )
    with pytest.raises(CapabilityMissingError, match="the scheduler needs") as refused:
        Scheduler(CoreDriver(), [nightly])
    assert refused.value.capability == "leases"
    with pytest.raises(CapabilityMissingError) as refused:
        async with with_lock("k", driver=CoreDriver(), clock=SystemClock()):
            raise AssertionError("the block never runs")
    assert refused.value.capability == "leases"
    with pytest.raises(CapabilityMissingError) as refused:
        await Jobs(CoreDriver()).send_event("paid", {"order": 1})
    assert refused.value.capability == "events"


OPERATOR_CALLS: list[tuple[Family, Callable[[Operator], Awaitable[object]]]] = [
    ("operator", lambda op: op.jobs()),
    ("operator", lambda op: op.queues()),
    ("counters", lambda op: op.throughput()),
    ("workers", lambda op: op.workers()),
    ("operator", lambda op: op.stats()),
    ("operator", lambda op: op.act(Action.CANCEL, ["a"])),
    ("operator", lambda op: op.act_one(Action.REQUEUE, "a")),
    ("operator", lambda op: op.act_all(Action.REMOVE, JobFilter(queue="q"))),
    ("pauses", lambda op: op.pause(Pause("queue", "q"))),
    ("pauses", lambda op: op.resume(Pause("queue", "q"))),
    ("pauses", lambda op: op.pauses()),
    ("tasks", lambda op: op.task_fires(["t"])),
]


@pytest.mark.parametrize(("family", "call"), OPERATOR_CALLS)
async def test_each_operator_view_refuses_the_family_it_needs(
    family: Family, call: Callable[[Operator], Awaitable[object]]
) -> None:
    with pytest.raises(CapabilityMissingError) as refused:
        await call(Operator(CoreDriver()))
    assert refused.value.capability == family


async def test_one_jobs_view_needs_the_core_family_alone() -> None:
    handle = declare(lambda i, c: None, name="pay", sensitive=("card",))
    driver = CoreDriver()
    job_id = (await Jobs(driver).enqueue(handle, {"n": 1, "card": "4242"})).id
    view = await Operator(driver, handles=[handle]).job(job_id)
    assert view.declared and view.input == {"n": 1, "card": "[redacted]"} and view.steps == ()
    # Without a registry the caller's declarations alone redact: any other name shows whole.
    assert (await Operator(driver).job(job_id)).input == "[redacted]"


# -- the CLI and the dashboard ------------------------------------------------------------------


@pytest.fixture
def core_url(monkeypatch: pytest.MonkeyPatch) -> CoreDriver:
    """`--driver core://` names one core driver holding job `a` (as an entry point would)."""
    driver = CoreDriver()
    asyncio.run(driver.job_enqueue(new_job("a")))
    for module in ("jobs_core.cli.operate", "jobs_core.cli.run"):
        monkeypatch.setattr(f"{module}.driver_from_url", lambda url: driver)
    # The CLI installs its own log handlers: not in this test process.
    for module in ("jobs_core.cli.base", "jobs_core.cli.run"):
        monkeypatch.setattr(f"{module}._configure_logging", lambda *a, **k: None)
    return driver


def ujobs(*args: str) -> int:
    try:
        main.main([*args, "--driver", "core://"])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.mark.parametrize(
    ("args", "family"),
    [
        (("jobs", "list"), "operator"),
        (("jobs", "cancel", "a"), "operator"),
        (("jobs", "requeue", "--all", "--state", "dead"), "operator"),
        (("queues",), "operator"),
        (("pause", "q"), "pauses"),
        (("resume", "--name", "n"), "pauses"),
        (("workers",), "workers"),
        (("stats", "--json"), "operator"),
    ],
)
def test_each_cli_verb_refuses_in_one_line_naming_the_family(
    core_url: CoreDriver,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    family: str,
) -> None:
    assert ujobs(*args) == 2
    out = capsys.readouterr().out
    assert out.startswith("X_DRIVER_CAPABILITY_MISSING: core-only does not declare the")
    assert f"({family})" in out and len(out.strip().splitlines()) == 1


def test_the_cli_shows_a_job_and_refuses_a_worker_told_to_purge(
    core_url: CoreDriver,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ujobs("jobs", "show", "a", "--json") == 0
    assert '"id": "a"' in capsys.readouterr().out
    (tmp_path / "coreapp.py").write_text(
        "from jobs_core import job\n"
        "from jobs_core.job import JobRegistry\n\n"
        "@job(tenant='none', idempotency_key=lambda i: 'k', registry=JobRegistry())\n"
        "async def noop(input, ctx):\n"
        "    return None\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    assert ujobs("worker", "coreapp", "--keep", "completed=60") == 2
    out = capsys.readouterr().out
    assert "X_DRIVER_CAPABILITY_MISSING" in out and "(retention)" in out


def client(driver: JobDriver, access: Access) -> httpx.AsyncClient:
    app = dashboard_app(driver, access=access)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


async def test_the_dashboard_refuses_each_page_and_action_of_a_missing_family() -> None:
    driver = CoreDriver()
    await driver.job_enqueue(new_job("a"))
    token = {"authorization": "Bearer s3cret-token-for-tests"}
    async with client(driver, Access(token="s3cret-token-for-tests")) as c:
        for path, family in (("/", "operator"), ("/jobs", "operator"), ("/workers", "workers")):
            page = await c.get(path, headers=token)
            assert page.status_code == 501, path
            assert "X_DRIVER_CAPABILITY_MISSING" in page.text and family in page.text, path
        # The backfills list says there is no ledger; a sweep's page refuses, naming the family.
        page = await c.get("/backfills", headers=token)
        assert page.status_code == 200 and "keeps no sweep ledger" in page.text
        page = await c.get("/backfills/nums", headers=token)
        assert page.status_code == 501
        assert "X_DRIVER_CAPABILITY_MISSING" in page.text and "(sweeps)" in page.text
        page = await c.get("/jobs/a", headers=token)
        assert page.status_code == 200
        assert "/jobs/a/cancel" not in page.text  # no action is offered: each would be refused
        csrf = page.text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
        done = await c.post(
            "/jobs/a/cancel",
            data={"csrf": csrf, "back": "/jobs/a"},
            headers={**token, "origin": "http://testserver"},
        )
        assert done.status_code == 303
        page = await c.get(done.headers["location"], headers=token)
        assert "X_DRIVER_CAPABILITY_MISSING" in page.text and "operator" in page.text
    assert (await driver.job_get_many(["a"]))["a"].state is JobState.READY


async def test_metrics_serve_the_demand_of_the_workers_queues_alone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = CoreDriver()
    noop = declare(lambda i, c: None, queue="q")
    await Jobs(driver).enqueue(noop, {"n": 1})
    worker = Worker(driver, [noop], retention=None)
    with caplog.at_level(logging.WARNING, logger="jobs.metrics"):
        metrics = WorkerMetrics(worker, asyncio.get_running_loop())
    assert "jobs.metrics.partial: core-only" in caplog.text
    # No sweep ledger: neither sweep gauge, said once.
    assert caplog.text.count("does not declare the sweeps family") == 1
    # A scrape runs the store read on this loop and waits for it: from another thread.
    text = (await asyncio.to_thread(metrics.render)).decode()
    assert "ujobs_store_up 1.0" in text
    assert 'ujobs_queue_demand{queue="q"} 1.0' in text
    assert "ujobs_queue_dead_jobs{" not in text and "ujobs_queue_jobs{" not in text
    assert "ujobs_sweep" not in text
    assert caplog.text.count("does not declare the sweeps family") == 1
