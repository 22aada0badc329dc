"""Worker run-path cases every driver must pass (memory, Postgres, Redis call these)."""

from __future__ import annotations

from typing import Any

from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle
from jobs_core.records import EnqueueResult, JobRecord
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.tenant import current_tenant
from jobs_core.worker import UNKNOWN_NAME_DELAY_MS, Worker
from tests.core import support
from tests.core.support import until

FAST = Retry(attempts=3, base_ms=1, cap_ms=5, jitter="none")


class LaterClock(SystemClock):
    """Wall-clock time shifted ahead: a worker started this much later."""

    def __init__(self, ahead_ms: int) -> None:
        self.ahead_ms = ahead_ms

    def now_ms(self) -> int:
        return super().now_ms() + self.ahead_ms


def declare(fn: Any, **options: Any) -> JobHandle:
    """`tests.core.support.declare`, retrying fast by default (a failed attempt is due in ms)."""
    options.setdefault("retry", FAST)
    return support.declare(fn, **options)


def quick_worker(driver: JobDriver, handles: list[JobHandle], **options: Any) -> Worker:
    options.setdefault("poll_floor", 0.005)
    options.setdefault("poll_ceiling", 0.05)
    options.setdefault("lease", 10.0)
    return Worker(driver, handles, **options)


async def row(driver: JobDriver, job_id: str) -> JobRecord:
    return (await driver.job_get_many([job_id]))[job_id]


async def has_state(driver: JobDriver, job_ids: list[str], state: JobState) -> bool:
    rows = await driver.job_get_many(job_ids)
    return len(rows) == len(job_ids) and all(r.state is state for r in rows.values())


async def an_unknown_name_waits_for_a_worker_that_knows_it(driver: JobDriver) -> None:
    """A rolling deploy: an old worker meets a new job name; it gives it back untouched."""
    ran: list[int] = []

    async def old(input: Any, ctx: JobContext) -> None:
        return None

    async def new(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    h_old = declare(old, name="old")
    h_new = declare(new, name="new")
    clock = SystemClock()
    queued = await Jobs(driver).enqueue(h_new, {"n": 1})
    before = clock.now_ms()
    old_worker = quick_worker(driver, [h_old])
    await old_worker.start()

    async def handled() -> bool:
        r = await row(driver, queued.id)
        return r.claims == 1 and r.state is not JobState.RUNNING

    try:
        await until(handled, within=20)
    finally:
        await old_worker.stop()
    r = await row(driver, queued.id)
    assert r.state is JobState.READY and r.attempt == 0 and r.claims == 1, r
    assert r.last_error is None and r.finished_at_ms is None
    assert r.run_at_ms is not None and r.run_at_ms >= before + UNKNOWN_NAME_DELAY_MS
    assert old_worker.stats.dead_lettered == 0 and old_worker.stats.unowned == 0
    assert old_worker.stats.unknown_name == 1, "not due again for a minute: claimed once"

    # A minute on, a worker of the new release runs it, on its first attempt.
    new_worker = quick_worker(driver, [h_new], clock=LaterClock(UNKNOWN_NAME_DELAY_MS + 1_000))
    await new_worker.start()
    try:
        await until(lambda: has_state(driver, [queued.id], JobState.COMPLETED), within=20)
    finally:
        await new_worker.stop()
    r = await row(driver, queued.id)
    assert ran == [1] and r.attempt == 1 and r.claims == 2


async def a_body_enqueues_on_its_worker_store(driver: JobDriver) -> None:
    """`handle.enqueue()` (async body) and `enqueue_sync` (def body) with no `configure`:
    the rows land in the worker's store, their tenant the body's."""
    ran: list[tuple[int, str | None]] = []
    made: list[EnqueueResult] = []

    async def child(input: Any, ctx: JobContext) -> None:
        ran.append((input["n"], current_tenant()))

    h_child = declare(child, name="child", tenant=lambda i: i["org"])

    async def parent_async(input: Any, ctx: JobContext) -> None:
        made.append(await h_child.enqueue({"n": input["n"] * 10, "org": "child-org"}))

    def parent_sync(input: Any, ctx: JobContext) -> None:
        made.append(h_child.enqueue_sync({"n": input["n"] * 10, "org": "child-org"}))

    h_async = declare(parent_async, name="parent_async", tenant=lambda i: i["org"])
    h_sync = declare(parent_sync, name="parent_sync", tenant=lambda i: i["org"])
    jobs = Jobs(driver)
    a = await jobs.enqueue(h_async, {"n": 1, "org": "org-a"})
    b = await jobs.enqueue(h_sync, {"n": 2, "org": "org-b"})
    worker = quick_worker(driver, [h_async, h_sync, h_child])
    await worker.start()
    try:
        await until(lambda: has_state(driver, [a.id, b.id], JobState.COMPLETED), within=20)
        assert len(made) == 2
        child_ids = [m.id for m in made]
        await until(lambda: has_state(driver, child_ids, JobState.COMPLETED), within=20)
    finally:
        await worker.stop()
    parents = await driver.job_get_many([a.id, b.id])
    assert {r.attempt for r in parents.values()} == {1}
    children = await driver.job_get_many(child_ids)
    assert sorted((r.name, r.tenant_id) for r in children.values()) == [
        ("child", "org-a"),
        ("child", "org-b"),
    ]
    assert sorted(ran) == [(10, "child-org"), (20, "child-org")]
