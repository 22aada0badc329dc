"""A step call refused for its arguments takes nothing: its name stays free for the run."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobs_core.context import JobContext
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import declare, until

Call = Callable[[JobContext, bool], Awaitable[Any]]

#: Each step call, with arguments refused before anything is read or written (False) and with
#: good ones (True); the good call must find its name free after the refused one.
CALLS: dict[str, Call] = {
    "run": lambda ctx, ok: ctx.step.run("s", (lambda: 1) if ok else 5),  # type: ignore[arg-type]
    "run compensate": lambda ctx, ok: ctx.step.run(
        "s",
        lambda: 1,
        compensate=(lambda _: None) if ok else 5,  # type: ignore[arg-type]
    ),
    "sleep": lambda ctx, ok: ctx.step.sleep("s", 0 if ok else "soon"),  # type: ignore[arg-type]
    "sleep_until": lambda ctx, ok: ctx.step.sleep_until("s", 0 if ok else "then"),  # type: ignore[arg-type]
    "wait_for_event timeout": lambda ctx, ok: ctx.step.wait_for_event(
        "s",
        "e",
        timeout=0 if ok else "never",  # type: ignore[arg-type]
    ),
    "wait_for_event event": lambda ctx, ok: ctx.step.wait_for_event(
        "s", "e" if ok else "", timeout=0
    ),
    "enqueue_many inputs": lambda ctx, ok: ctx.step.enqueue_many(
        "s", CHILD, [{"n": 1}] if ok else "abc"
    ),
    "enqueue_many after": lambda ctx, ok: ctx.step.enqueue_many(
        "s", CHILD, [{"n": 1}], **({} if ok else {"after": ["x"]})
    ),
    "enqueue taken id": lambda ctx, ok: ctx.step.enqueue(
        "s", CHILD, {"n": 1}, **({} if ok else {"id": "mine"})
    ),
    "gather ids": lambda ctx, ok: ctx.step.gather("s", [] if ok else "abc"),
    "gather id type": lambda ctx, ok: ctx.step.gather("s", [] if ok else [5]),  # type: ignore[list-item]
    "result own job": lambda ctx, ok: (
        ctx.step.gather("s", []) if ok else ctx.step.result("s", ctx.job_id)
    ),
}


async def child(input: Any, ctx: JobContext) -> int:
    return 1


CHILD = declare(child, name="child")


@pytest.mark.parametrize("what", list(CALLS))
async def test_a_refused_step_call_leaves_its_name_free(what: str) -> None:
    await refused_then_good(CALLS[what])


async def refused_then_good(call: Call) -> None:
    """A body makes `call` refused, catches it, then makes it good under the same name: the
    refusal is one typed `X_*` (not `X_STEP_DUPLICATE`) and the good call completes the job."""
    driver = MemoryDriver()
    refused: list[str] = []

    async def body(input: Any, ctx: JobContext) -> str:
        try:
            await call(ctx, False)
        except JobsError as exc:
            refused.append(exc.code)
        await call(ctx, True)
        return "done"

    handle = declare(body, name="body", retry=Retry(attempts=1))
    job_id = (await Jobs(driver).enqueue(handle, {"n": 1})).id
    worker = Worker(driver, [handle, CHILD], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()
    try:

        async def ended() -> bool:
            got = (await driver.job_get_many([job_id]))[job_id]
            return got.state in (JobState.COMPLETED, JobState.DEAD)

        await until(ended, within=10)
    finally:
        await worker.stop()
    got = (await driver.job_get_many([job_id]))[job_id]
    assert len(refused) == 1 and refused[0].startswith("X_") and refused[0] != "X_STEP_DUPLICATE"
    assert got.state is JobState.COMPLETED, got.last_error
