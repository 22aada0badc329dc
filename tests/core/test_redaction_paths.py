"""Every place a failure is recorded scrubs the values of the input's sensitive fields, whatever
failed, on memory, real Postgres and real Redis: the stored `last_error` (what `ujobs jobs show`
prints), the log lines (text and JSON), the span's events and status, and what `on_settled`
hooks are told. One worker runs a job per failure source, each with a secret of its own in its
input; the scheduler's refused fire is the last source."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobs_core.cli.base import _Formatter
from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs, SettledEvent
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import ClaimedJob
from jobs_core.retry import Retry
from jobs_core.scheduler import Scheduler, task
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.states import FINISHED_STATES, Outcome
from jobs_core.worker import Worker
from tests.core.support import advance_quietly, fresh_store, until

#: One secret per failure source: a leak names its source.
SECRETS = {
    "body": "4111-body-0001",
    "tenant_fn": "4111-tenant-0002",
    "concurrency_key_fn": "4111-ckey-0003",
    "child_key_fn": "4111-child-0004",
    "result": "4111-result-0005",
    "step": "4111-step-0006",
    "hook": "4111-hook-0007",
    "observer": "4111-observer-0008",
    "progress": "4111-progress-0009",
    "crash": "4111-crash-0010",
}


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as store:
        yield store


@pytest.fixture
def logs() -> Iterator[dict[str, io.StringIO]]:
    """What the root logger prints, as text and as JSON (the CLI's formatters)."""
    out = {"text": io.StringIO(), "json": io.StringIO()}
    handlers = []
    for kind, stream in out.items():
        h = logging.StreamHandler(stream)
        h.setFormatter(_Formatter(kind, []))
        h.setLevel(logging.DEBUG)
        handlers.append(h)
        logging.getLogger().addHandler(h)
    jobs_log = logging.getLogger("jobs")
    level = jobs_log.level
    jobs_log.setLevel(logging.DEBUG)
    try:
        yield out
    finally:
        jobs_log.setLevel(level)
        for h in handlers:
            logging.getLogger().removeHandler(h)


def declare(source: str, fn: Any, **options: Any) -> JobHandle:
    options.setdefault("tenant", "none")
    handle: JobHandle = job(
        fn,
        name=source,
        idempotency_key=lambda i: str(i["n"]),
        sensitive=("card", "token"),
        retry=Retry(attempts=1),
        registry=JobRegistry(),
        **options,
    )
    return handle


def raising(what: str) -> Any:
    def fn(input: Any) -> str:
        raise ValueError(f"{what} cannot use {input['card']}")

    return fn


def raising_after_enqueue(what: str) -> Any:
    """A tenant function that answers at the enqueue and raises in the worker (a deploy that
    changed it in between)."""
    calls = []
    fail = raising(what)

    def fn(input: Any) -> str:
        calls.append(1)
        return "org" if len(calls) == 1 else fail(input)

    return fn


def handles() -> list[JobHandle]:
    async def body(input: Any, ctx: JobContext) -> None:
        raise RuntimeError(f"gateway refused {input['card']}")

    async def fine(input: Any, ctx: JobContext) -> None:
        return None

    async def result(input: Any, ctx: JobContext) -> Any:
        return {(input["card"],): True}  # a key with no JSON form: its path quotes it

    async def step(input: Any, ctx: JobContext) -> None:
        def charge() -> None:
            raise RuntimeError(f"declined {input['card']}")

        await ctx.step.run("charge", charge)

    def hook(event: SettledEvent) -> None:
        raise RuntimeError(f"the hook choked on {event.input['card']}")

    async def progress(input: Any, ctx: JobContext) -> None:
        ctx.progress({(input["card"],): 1})

    child = job(
        fine,
        name="child",
        tenant="none",
        idempotency_key=raising("the child's key function"),
        sensitive=("card",),
        registry=JobRegistry(),
    )

    async def parent(input: Any, ctx: JobContext) -> None:
        # The parent's own input holds no secret of the child's: the error carries it.
        await child.enqueue({"card": SECRETS["child_key_fn"]})

    return [
        declare("body", body),
        declare("tenant_fn", fine, tenant=raising_after_enqueue("the tenant function")),
        declare(
            "concurrency_key_fn",
            fine,
            concurrency={"key": raising("the concurrency key"), "limit": 1},
        ),
        declare("child_key_fn", parent),
        declare("result", result),
        declare("step", step),
        declare("hook", fine, on_settled=hook),
        declare("observer", fine),
        declare("progress", progress),
        declare("crash", fine),
    ]


async def test_no_failure_source_leaks_a_secret_anywhere(
    driver: JobDriver,
    spans: InMemorySpanExporter,
    logs: dict[str, io.StringIO],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hooked: list[SettledEvent] = []
    declared = handles()
    client = Jobs(driver)
    ids = {}
    for h in declared:
        ids[h.name] = (await client.enqueue(h, {"n": 1, "card": SECRETS[h.name]})).id

    # A bug in the worker around the body, quoting the input: the crash path settles it.
    of_claim = JobContext._of_claim

    def crashing(job: ClaimedJob, **kw: Any) -> JobContext:
        if job.name == "crash":
            raise RuntimeError(f"the worker choked on {job.input_json}")
        return of_claim(job, **kw)

    monkeypatch.setattr(JobContext, "_of_claim", staticmethod(crashing))

    def observe(job: ClaimedJob, outcome: Outcome, body_ms: int | None) -> None:
        if job.name == "observer":
            raise RuntimeError(f"the observer choked on {job.input_json}")

    worker = Worker(
        driver,
        declared,
        poll_floor=0.01,
        on_settled=hooked.append,
    )
    worker.observe(observe)
    await worker.start()
    try:

        async def settled() -> bool:
            rows = await driver.job_get_many(list(ids.values()))
            return all(r.state in FINISHED_STATES for r in rows.values())

        await until(settled, 20)
        await until(lambda: {e.name for e in hooked} >= set(ids), 10)
    finally:
        await worker.stop()

    rows = await driver.job_get_many(list(ids.values()))
    failed = {name for name, i in ids.items() if rows[i].last_error is not None}
    # Every source but the hook, the observer and the progress failed its job (those three
    # only log): each leak below would have been stored.
    assert failed == set(ids) - {"hook", "observer", "progress"}, failed
    printed = {kind: stream.getvalue() for kind, stream in logs.items()}
    assert "jobs.on_settled.failed" in printed["text"]
    assert "jobs.observer.failed" in printed["text"]
    assert "jobs.progress.invalid" in printed["text"]
    recorded = {
        "last_error": [r.last_error or "" for r in rows.values()],
        "hooks": [e.error or "" for e in hooked],
        "logs": list(printed.values()),
        "spans": [
            json.dumps(
                {
                    "events": [dict(e.attributes or {}) for e in s.events],
                    "status": s.status.description,
                    "attributes": dict(s.attributes or {}),
                }
            )
            for s in spans.get_finished_spans()
        ],
    }
    for where, texts in recorded.items():
        for source, secret in SECRETS.items():
            leaks = [t for t in texts if secret in t]
            assert not leaks, f"{source}'s secret reached {where}: {leaks[0][:2000]}"
    # Scrubbed, not silenced: each stored error still says what failed.
    assert "gateway refused [redacted]" in (rows[ids["body"]].last_error or "")
    key_error = rows[ids["concurrency_key_fn"]].last_error or ""
    assert "X_JOB_CONCURRENCY_KEY_INVALID" in key_error and "[redacted]" in key_error


async def test_a_refused_fire_logs_no_secret_of_its_input(
    driver: JobDriver, logs: dict[str, io.StringIO]
) -> None:
    """A task whose input the job's tenant function refuses: the scheduler logs the refusal,
    which quotes the input; the job declares the field sensitive, so its value is scrubbed."""
    secret = "4111-task-0011"

    async def fine(input: Any, ctx: JobContext) -> None:
        return None

    charge = job(
        fine,
        name="charge",
        tenant=raising("the tenant function"),
        idempotency_key=lambda i: "k",
        sensitive=("card",),
        registry=JobRegistry(),
    )
    clock = FakeClock(1_780_272_000_000)
    hourly = task(
        "hourly",
        cron="0 * * * *",
        tz="UTC",
        job=charge,
        input=lambda o: {"card": secret},
        registry=TaskRegistry(),
    )
    scheduler = Scheduler(driver, [hourly], clock=clock, lease_ttl=3 * 3600)
    await scheduler.start()
    await advance_quietly(clock, 3_600_000, sleepers=1, step_ms=60_000)
    assert await scheduler.stop(timeout=10)
    printed = {kind: stream.getvalue() for kind, stream in logs.items()}
    assert "jobs.scheduler.fire_refused" in printed["text"], printed["text"]
    for kind, text in printed.items():
        assert secret not in text, (kind, text)
        assert "the tenant function cannot use [redacted]" in text, (kind, text)
