"""Durable steps that must not repeat a side effect, every driver (memory, Postgres, Redis call
these): an output no store can hold fails the run once, every argument is checked before the
step runs, a sync step runs on its body's own thread for its tenant, and a compensation acts
for the failed run's tenant."""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from jobs_core.context import JobContext
from jobs_core.driver import MAX_NAME_BYTES, JobDriver
from jobs_core.errors import TerminalError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle
from jobs_core.jsonform import MAX_JSON_BYTES
from jobs_core.records import JobFilter, JobListParams, JobRecord
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.steps.unwind import UNWIND_JOB
from jobs_core.tenant import current_tenant
from jobs_core.worker import Worker
from tests.core.support import HUGE_INT, declare, deep_list, until

SURROGATE = "\ud83d"
THREE = Retry(attempts=3, base_ms=1, cap_ms=5, jitter="none")


def quick_worker(driver: JobDriver, handles: list[JobHandle], **options: Any) -> Worker:
    options.setdefault("poll_floor", 0.005)
    options.setdefault("poll_ceiling", 0.05)
    options.setdefault("lease", 10.0)
    return Worker(driver, handles, **options)


async def run_until(
    driver: JobDriver,
    handles: list[JobHandle],
    check: Callable[[], Awaitable[bool]],
    **options: Any,
) -> None:
    worker = quick_worker(driver, handles, **options)
    await worker.start()
    try:
        await until(check, within=30)
    finally:
        await worker.stop()


def finished(driver: JobDriver, ids: list[str]) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        rows = await driver.job_get_many(ids)
        return len(rows) == len(ids) and all(r.finished_at_ms is not None for r in rows.values())

    return check


def code_of(row: JobRecord) -> str:
    return str(json.loads(row.last_error or "{}").get("code"))


class Unserializable:
    """An SDK's answer object: no JSON form."""


async def an_unstorable_step_output_fails_the_run_once(driver: JobDriver) -> None:
    """A step returning a set, an SDK object, more than the JSON size bound or half an emoji:
    its function ran once, the run fails for good (`X_STEP_OUTPUT_INVALID`, never retried, so
    the side effect is not repeated) and nothing is recorded."""
    outputs: list[Any] = [
        {1, 2},
        Unserializable(),
        "x" * (MAX_JSON_BYTES + 1),
        {"name": f"a{SURROGATE}"},
    ]
    charges: dict[int, int] = {}

    async def body(input: Any, ctx: JobContext) -> None:
        n = input["n"]

        def charge() -> Any:
            charges[n] = charges.get(n, 0) + 1
            return outputs[n]

        await ctx.step.run("charge", charge)

    handle = declare(body, name="charges", retry=THREE)
    jobs = Jobs(driver)
    ids = [(await jobs.enqueue(handle, {"n": n})).id for n in range(len(outputs))]
    await run_until(driver, [handle], finished(driver, ids))
    assert charges == dict.fromkeys(range(len(outputs)), 1)
    rows = await driver.job_get_many(ids)
    for job_id in ids:
        row = rows[job_id]
        assert (row.state, row.attempt, code_of(row)) == (
            JobState.DEAD,
            1,
            "X_STEP_OUTPUT_INVALID",
        )
        assert await driver.step_list(row.run_id) == []


#: Names whose records the store cannot hold; `~undo:` and `~wait:` are 6 bytes.
TOO_LONG = "n" * (MAX_NAME_BYTES + 1)
TOO_LONG_TO_UNDO = "n" * (MAX_NAME_BYTES - 4)
DEEP = deep_list()


async def every_step_argument_is_checked_before_the_step_runs(driver: JobDriver) -> None:
    """A step name past the byte bound (as itself, or as its `~undo:`/`~wait:` record), one
    holding half an emoji or starting with `~`: refused (`X_STEP_NAME_INVALID`, terminal) before
    the step runs — no charge, no `~saga` mark, no record, one attempt. A wait for an event named
    with half an emoji or with a match that is no object, a sleep past the store's last time:
    refused with their codes before anything is recorded."""
    charges: list[str] = []

    def charge(case: str) -> Callable[[], str]:
        def call() -> str:
            charges.append(case)
            return "ch_1"

        return call

    async def refund(output: Any) -> None:
        charges.append("refund")

    async def body(input: Any, ctx: JobContext) -> None:
        case = input["case"]
        match case:
            case "long":
                await ctx.step.run(TOO_LONG, charge(case), compensate=refund)
            case "long to undo":
                await ctx.step.run(TOO_LONG_TO_UNDO, charge(case), compensate=refund)
            case "surrogate":
                await ctx.step.run(f"charge{SURROGATE}", charge(case))
            case "reserved":
                await ctx.step.run("~charge", charge(case), compensate=refund)
            case "long wait":
                await ctx.step.wait_for_event(TOO_LONG_TO_UNDO, "paid")
            case "event name":
                await ctx.step.wait_for_event("paid", f"paid{SURROGATE}")
            case "list match":
                await ctx.step.wait_for_event("paid", "paid", match=[1])  # type: ignore[arg-type]
            case "sleep forever":
                await ctx.step.sleep("nap", dt.timedelta(days=365 * 200))
            case "sleep infinite":
                await ctx.step.sleep("nap", float("inf"))
            # Integers past a float's range (and past `repr`'s 4,300 digits), and a name nested
            # past the recursion limit: refused with their codes, not OverflowError/ValueError.
            case "sleep huge":
                await ctx.step.sleep("nap", HUGE_INT)
            case "sleep until huge":
                await ctx.step.sleep_until("nap", HUGE_INT)
            case "wait huge timeout":
                await ctx.step.wait_for_event("paid", "paid", timeout=HUGE_INT)
            case "wait huge since":
                await ctx.step.wait_for_event("paid", "paid", since=HUGE_INT)
            case "huge name":
                await ctx.step.run(HUGE_INT, charge(case))  # type: ignore[arg-type]
            case "deep name":
                await ctx.step.enqueue(DEEP, handle, {})  # type: ignore[arg-type]

    expected = {
        "long": "X_STEP_NAME_INVALID",
        "long to undo": "X_STEP_NAME_INVALID",
        "surrogate": "X_STEP_NAME_INVALID",
        "reserved": "X_STEP_NAME_INVALID",
        "long wait": "X_STEP_NAME_INVALID",
        "event name": "X_JOB_RECORD_INVALID",
        "list match": "X_JOB_RECORD_INVALID",
        "sleep forever": "X_JOB_OPTION_INVALID",
        "sleep infinite": "X_JOB_OPTION_INVALID",
        "sleep huge": "X_JOB_OPTION_INVALID",
        "sleep until huge": "X_JOB_OPTION_INVALID",
        "wait huge timeout": "X_JOB_OPTION_INVALID",
        "wait huge since": "X_JOB_OPTION_INVALID",
        "huge name": "X_STEP_NAME_INVALID",
        "deep name": "X_STEP_NAME_INVALID",
    }
    handle = declare(body, name="guarded", idempotency_key=lambda i: i["case"], retry=THREE)
    jobs = Jobs(driver)
    ids = {case: (await jobs.enqueue(handle, {"case": case})).id for case in expected}
    await run_until(driver, [handle], finished(driver, list(ids.values())))
    rows = await driver.job_get_many(list(ids.values()))
    assert charges == []
    assert {case: code_of(rows[i]) for case, i in ids.items()} == expected
    for case, job_id in ids.items():
        row = rows[job_id]
        # A name refusal is terminal; the others are retried, each refused again.
        attempts = 1 if expected[case] == "X_STEP_NAME_INVALID" else THREE.attempts
        assert (case, row.state, row.attempt) == (case, JobState.DEAD, attempts)
        assert (case, await driver.step_list(row.run_id)) == (case, [])
    # Nothing was marked for undoing, so nothing is undone.
    assert await jobs_named(driver, UNWIND_JOB) == []


async def jobs_named(driver: JobDriver, name: str) -> list[JobRecord]:
    page = await driver.job_list(JobListParams(JobFilter(name=name), limit=500))
    return list(page.jobs)


async def a_sync_step_runs_on_its_bodys_thread_for_its_tenant(driver: JobDriver) -> None:
    """A `def` body's sync step runs on the body's own thread, in its context: it acts for the
    run's tenant, and `handle.enqueue_sync()` inside it goes to the worker's store (no
    `configure`) with that tenant."""
    seen: dict[str, Any] = {}

    async def child(input: Any, ctx: JobContext) -> None:
        return None

    h_child = declare(child, name="child", tenant=lambda i: i["org"])

    def body(input: Any, ctx: JobContext) -> Any:
        seen["body thread"] = threading.get_ident()

        def step() -> str:
            seen["step thread"] = threading.get_ident()
            seen["tenant"] = current_tenant()
            return h_child.enqueue_sync({"n": 2, "org": "child-org"}).id

        return ctx.sync_step.run("spawn", step)

    handle = declare(body, name="parent", tenant=lambda i: i["org"])
    parent = await Jobs(driver).enqueue(handle, {"n": 1, "org": "org-a"})
    await run_until(driver, [handle, h_child], finished(driver, [parent.id]))
    row = (await driver.job_get_many([parent.id]))[parent.id]
    assert (row.state, row.attempt) == (JobState.COMPLETED, 1), row.last_error
    assert seen["step thread"] == seen["body thread"] and seen["tenant"] == "org-a"
    child_id = json.loads(row.result_json or "null")
    spawned = (await driver.job_get_many([child_id]))[child_id]
    assert (spawned.name, spawned.tenant_id) == ("child", "org-a")


async def compensations_act_for_the_runs_tenant(driver: JobDriver, *, sync: bool) -> None:
    """A failed run's compensations, run by `ujobs.unwind`, act for the run's tenant: what they
    read as `current_tenant()` and the tenant of a job they enqueue. A `def` body's
    compensation runs as the body did, on a thread of its own, never on the worker's loop."""
    seen: list[tuple[str | None, bool]] = []
    loop_thread = threading.get_ident()

    async def child(input: Any, ctx: JobContext) -> None:
        return None

    h_child = declare(child, name="refund-mail", tenant=lambda i: i["org"])

    def record(output: Any) -> None:
        seen.append((current_tenant(), threading.get_ident() != loop_thread))

    def undo_sync(output: Any) -> None:
        record(output)
        h_child.enqueue_sync({"n": output["n"], "org": "mail-org"})

    async def undo_async(output: Any) -> None:
        record(output)
        await h_child.enqueue({"n": output["n"], "org": "mail-org"})

    def body_sync(input: Any, ctx: JobContext) -> None:
        ctx.sync_step.run("charge", lambda: {"n": input["n"]}, compensate=undo_sync)
        raise TerminalError("declined")

    async def body_async(input: Any, ctx: JobContext) -> None:
        await ctx.step.run("charge", lambda: {"n": input["n"]}, compensate=undo_async)
        raise TerminalError("declined")

    handle = declare(body_sync if sync else body_async, name="order", tenant=lambda i: i["org"])
    failed = await Jobs(driver).enqueue(handle, {"n": 7, "org": "org-a"})

    async def mailed() -> bool:
        return bool(await jobs_named(driver, "refund-mail"))

    await run_until(driver, [handle, h_child], mailed)
    assert seen == [("org-a", sync)]
    (mail,) = await jobs_named(driver, "refund-mail")
    assert mail.tenant_id == "org-a"
    assert (await driver.job_get_many([failed.id]))[failed.id].state is JobState.DEAD
