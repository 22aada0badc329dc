"""The lost-reply enqueue case (issue 7, item 7), the same on every backend: an enqueue whose
write landed but whose answer was lost is retried under the same ids, so one row, one run, and
the caller is answered with the original id.

A backend's test file supplies the driver (behind its own proxy), a way to lose the next reply,
and a way to read back the stored keys.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import EnqueueResult
from jobs_core.states import JobState
from jobs_core.worker import Worker
from tests.core.support import until

MODES = ["one", "many", "sync"]


def declare(ran: list[int]) -> JobHandle:
    """A job keyed `k<n>` by its input's `n`, whose runs append that `n` to `ran`."""

    async def body(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle: JobHandle = job(
        body,
        name="mail",
        tenant="none",
        idempotency_key=lambda i: f"k{i['n']}",
        registry=JobRegistry(),
    )
    return handle


async def run_all(driver: JobDriver, handle: JobHandle, ids: list[str]) -> None:
    """Returns once a worker has completed every job of `ids`."""
    worker = Worker(driver, [handle], concurrency=4, poll_floor=0.01)
    await worker.start()

    async def done() -> bool:
        rows = await driver.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    try:
        await until(done, within=20)
    finally:
        await worker.stop()


async def send(jobs: Jobs, handle: JobHandle, mode: str, ns: list[int]) -> list[EnqueueResult]:
    """Enqueue the inputs `ns` the way `mode` names (the single modes take one input)."""
    if mode == "many":
        return await jobs.enqueue_many(handle, [{"n": n} for n in ns])
    (n,) = ns
    if mode == "sync":  # a `def` caller: the facade's portal loop, its own connection
        return [await asyncio.to_thread(jobs.enqueue_sync, handle, {"n": n})]
    return [await jobs.enqueue(handle, {"n": n})]


async def lost_reply_inserts_once(
    driver: JobDriver,
    mode: str,
    *,
    drop_next_reply: Callable[[], None],
    dropped: Callable[[], int],
    keys_held: Callable[[], Awaitable[list[str]]],
) -> None:
    """The case on an open `driver`: `drop_next_reply` loses the store's next answer after the
    write, `dropped` counts answers lost, `keys_held` is every stored idempotency key, one
    entry per row (so a second row shows twice)."""
    ran: list[int] = []
    handle = declare(ran)
    jobs = Jobs(driver)
    try:
        # The connection exists and the write is ready, so the next reply is the write's.
        (warm,) = await send(jobs, handle, mode, [0])
        drop_next_reply()
        got = await send(jobs, handle, mode, [1, 2, 3] if mode == "many" else [1])
        assert dropped() == 1  # the answer really was lost, after the server sent it
        keys = [f"k{n}" for n in range(1, len(got) + 1)]
        assert await keys_held() == ["k0", *keys]
        rows = await driver.job_get_many([r.id for r in got])
        # The answer names the records the first try wrote (the retry found them by id).
        assert [rows[r.id].idempotency_key for r in got] == keys
        assert all(r.deduped for r in got)
        await run_all(driver, handle, [warm.id, *(r.id for r in got)])
        assert sorted(ran) == list(range(len(got) + 1))
        assert await keys_held() == ["k0", *keys]
    finally:
        await asyncio.to_thread(jobs.close_sync)  # the portal's loop, if a sync call made it
