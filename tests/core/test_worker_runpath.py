"""The worker's run path on the memory driver: whatever raises around a body settles its job,
results that cannot be stored, thread bodies that overrun, unknown names, enqueues from a body,
failure logs, and a cancel told from a lost lease."""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobs_core import facade
from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.errors import TerminalError
from jobs_core.facade import Jobs
from jobs_core.records import ClaimedJob, ClaimParams, Nack, NackKind, NewJob
from jobs_core.retry import Retry
from jobs_core.states import JobState, Outcome
from jobs_core.worker import TRACEBACK_BYTES, UNKNOWN_NAME_WARN_EVERY_MS, Worker
from jobs_memory import MemoryDriver
from tests.core import runpath_cases
from tests.core.runpath_cases import LaterClock, declare, has_state, quick_worker, row
from tests.core.support import counting, until

FIELDS = ("job_id", "job_name", "queue", "attempt", "worker_id")


async def work(driver: MemoryDriver, worker: Worker, job_ids: list[str]) -> None:
    """Run `worker` until every one of `job_ids` has finished, then drain it."""

    async def finished() -> bool:
        rows = await driver.job_get_many(job_ids)
        return all(r.finished_at_ms is not None for r in rows.values())

    await worker.start()
    try:
        await until(finished, within=20)
    finally:
        await worker.stop()


def messages(caplog: pytest.LogCaptureFixture, prefix: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith(prefix)]


# -- item 1: whatever raises around the body settles the job


async def test_a_tenant_function_that_raises_at_run_fails_the_attempt_typed_on_the_retry_path() -> (
    None
):
    ran: list[int] = []

    async def body(input: Any, ctx: JobContext) -> None:
        ran.append(1)

    # The stored input is the JSON form (a dict), so `i.org_id` raises at run time.
    h = declare(body, name="by_org", tenant=lambda i: i.org_id)
    driver = MemoryDriver()
    await driver.job_enqueue(
        NewJob("j1", "r1", "by_org", "default", None, "k", '{"org_id": "o1"}', 0, 0, 3, 0)
    )
    worker = quick_worker(driver, [h], lease=30.0)
    await work(driver, worker, ["j1"])
    r = await row(driver, "j1")
    assert ran == [], "the body never ran"
    assert r.state is JobState.DEAD and r.attempt == 3 and r.claims == 3, r
    error = json.loads(r.last_error or "")
    assert error["code"] == "X_JOB_TENANT_REQUIRED"
    assert "AttributeError" in error["message"] and "org_id" in error["message"]
    assert "lambda i: i.org_id" in error["traceback"]
    assert worker.stats.retried == 2 and worker.stats.dead_lettered == 1


async def test_an_unexpected_exception_around_the_body_is_settled_as_a_typed_worker_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[int] = []

    def broken(*args: Any, **kwargs: Any) -> JobContext:
        raise RuntimeError("wiring broke")  # the context's set-up around the body: a bug

    monkeypatch.setattr(JobContext, "_of_claim", staticmethod(broken))

    async def body(input: Any, ctx: JobContext) -> None:
        ran.append(1)

    h = declare(body, retry=Retry(attempts=2, base_ms=1, cap_ms=1, jitter="none"))
    driver = MemoryDriver()
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = Worker(driver, [h], poll_floor=0.005, poll_ceiling=0.05, lease=30.0)
    await work(driver, worker, [queued.id])
    r = await row(driver, queued.id)
    assert ran == []
    assert r.state is JobState.DEAD and r.attempt == 2 and r.claims == 2
    error = json.loads(r.last_error or "")
    assert error["code"] == "X_WORKER_ERROR"
    assert "RuntimeError: wiring broke" in error["message"]
    assert "wiring broke" in error["traceback"]
    assert worker.stats.retried == 1 and worker.stats.dead_lettered == 1


async def test_a_completed_run_ends_when_its_ack_is_answered_even_if_an_observer_raises() -> None:
    # A completed run with no hook and no span ends from its ack's answer, its task long gone:
    # it is counted, observed with its body's time, and leaves `held` and the claim loop's
    # count of settling jobs all the same.
    driver = MemoryDriver()

    async def body(input: Any, ctx: JobContext) -> int:
        return int(input["n"])

    h = declare(body)
    queued = await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(30)])
    worker = quick_worker(driver, [h], concurrency=4, max_in_flight=8)
    seen: list[tuple[str, Outcome, int | None]] = []

    def observe(job: ClaimedJob, outcome: Outcome, body_ms: int | None) -> None:
        seen.append((job.id, outcome, body_ms))
        raise RuntimeError("a metrics hook that crashes")

    worker.observe(observe)
    await work(driver, worker, [q.id for q in queued])
    assert (worker.stats.completed, worker.stats.in_flight, worker.stats.running) == (30, 0, 0)
    assert sorted(job_id for job_id, _, _ in seen) == sorted(q.id for q in queued)
    assert all(o is Outcome.COMPLETED and ms is not None for _, o, ms in seen), seen
    assert worker._claims.free() == worker.max_in_flight  # nothing counted as settling still
    rows = await driver.job_get_many([q.id for q in queued])
    assert [rows[q.id].result_json for q in queued] == [str(i) for i in range(30)]


# -- item 2: a result that cannot be stored


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "result",
    [_deep(5_000), math.nan, {"a": object()}, "x" * (1_048_576 + 1)],
    ids=["5000-deep", "nan", "not-json", "too-long"],
)
async def test_a_result_that_cannot_be_stored_fails_for_good_and_the_body_runs_once(
    result: Any,
) -> None:
    runs: list[int] = []

    async def body(input: Any, ctx: JobContext) -> Any:
        runs.append(ctx.attempt)
        return result

    h = declare(body)
    driver = MemoryDriver()
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = quick_worker(driver, [h])
    await work(driver, worker, [queued.id])
    r = await row(driver, queued.id)
    assert runs == [1]
    assert r.state is JobState.DEAD and r.attempt == 1 and r.result_json is None
    assert json.loads(r.last_error or "")["code"] == "X_JOB_RESULT_INVALID"
    assert worker.stats.dead_lettered == 1 and worker.stats.retried == 0


# -- item 3: def bodies cannot starve the pool


async def test_an_overrunning_thread_body_does_not_starve_the_next_thread_bodies(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobs")
    release = threading.Event()

    def stuck(input: Any, ctx: JobContext) -> None:
        release.wait(60)  # ignores its signal, as a blocking call would

    def fast(input: Any, ctx: JobContext) -> int:
        return int(input["n"])

    h_stuck = declare(stuck, name="stuck", timeout=0.05, retry=Retry(attempts=1))
    h_fast = declare(fast, name="fast", timeout=5.0)
    driver = MemoryDriver()
    jobs = Jobs(driver)
    first = await jobs.enqueue(h_stuck, {"n": 0})
    worker = quick_worker(driver, [h_stuck, h_fast], concurrency=1)
    await worker.start()
    try:
        await until(lambda: has_state(driver, [first.id], JobState.DEAD), within=20)
        queued = await jobs.enqueue_many(h_fast, [{"n": n} for n in range(1, 21)])
        ids = [q.id for q in queued]
        await until(lambda: has_state(driver, ids, JobState.COMPLETED), within=30)
        rows = await driver.job_get_many(ids)
        assert {r.attempt for r in rows.values()} == {1}
        assert sorted(int(r.result_json or "0") for r in rows.values()) == list(range(1, 21))
        assert worker.stats.threads_overrun == 1 and worker.stats.threads_overrunning == 1
        assert len(messages(caplog, "jobs.run.thread_overrun")) == 1
    finally:
        release.set()
        await until(lambda: worker.stats.threads_overrunning == 0)
        await worker.stop()
    assert json.loads((await row(driver, first.id)).last_error or "")["code"] == "X_JOB_TIMEOUT"


# -- item 8: a name this worker does not run


async def test_an_unknown_name_is_given_back_and_runs_on_a_worker_that_knows_it() -> None:
    await runpath_cases.an_unknown_name_waits_for_a_worker_that_knows_it(MemoryDriver())


async def test_an_unknown_name_warns_at_most_once_a_minute_per_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="jobs")
    driver = MemoryDriver()
    for n in range(3):
        await driver.job_enqueue(
            NewJob(f"j{n}", f"r{n}", "ghost", "default", None, f"k{n}", "{}", 0, 0, 3, 0)
        )

    async def other(input: Any, ctx: JobContext) -> None:
        return None

    clock = LaterClock(0)
    worker = quick_worker(driver, [declare(other)], clock=clock)
    await worker.start()
    try:
        await until(lambda: worker.stats.unknown_name == 3)
        assert len(messages(caplog, "jobs.run.unknown_name ghost")) == 1
        clock.ahead_ms += UNKNOWN_NAME_WARN_EVERY_MS + 1_000  # due again, a minute on
        await until(lambda: worker.stats.unknown_name == 6)
    finally:
        await worker.stop()
    warned = messages(caplog, "jobs.run.unknown_name ghost")
    assert len(warned) == 2 and all(r.levelno == logging.WARNING for r in warned)
    rows = await driver.job_get_many(["j0", "j1", "j2"])
    assert all(r.state is JobState.READY and r.attempt == 0 for r in rows.values())
    assert worker.stats.dead_lettered == 0


# -- item 9: a body enqueues on its worker's store


async def test_a_body_enqueues_on_its_worker_store_without_configure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(facade, "_default", None)
    await runpath_cases.a_body_enqueues_on_its_worker_store(MemoryDriver())


# -- item 11: failures are visible by default


def _ping(depth: int) -> None:
    if depth == 0:
        raise RuntimeError("deep down")
    _pong(depth - 1)


def _pong(depth: int) -> None:
    _ping(depth)


async def test_failures_log_warning_then_error_with_traceback_and_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="jobs")

    async def fails(input: Any, ctx: JobContext) -> None:
        _ping(300)  # a traceback far longer than the bound: its last frames are kept

    h = declare(fails, name="fails", retry=Retry(attempts=2, base_ms=1, cap_ms=1, jitter="none"))
    driver = MemoryDriver()
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = quick_worker(driver, [h], worker_id="w-test")
    await work(driver, worker, [queued.id])

    failed = messages(caplog, "jobs.run.failed")
    dead = messages(caplog, "jobs.run.dead_lettered")
    assert [r.levelno for r in failed] == [logging.WARNING]
    assert [r.levelno for r in dead] == [logging.ERROR]
    for record, attempt in ((failed[0], 1), (dead[0], 2)):
        assert record.exc_info is not None and record.exc_info[1] is not None
        assert str(record.exc_info[1]) == "deep down"
        assert {f: vars(record)[f] for f in FIELDS} == {
            "job_id": queued.id,
            "job_name": "fails",
            "queue": "default",
            "attempt": attempt,
            "worker_id": "w-test",
        }
    error = json.loads((await row(driver, queued.id)).last_error or "")
    tb = error["traceback"]
    assert len(tb.encode("utf-8")) <= TRACEBACK_BYTES
    assert tb.startswith("... (earlier frames cut)\n")
    assert tb.rstrip().endswith("RuntimeError: deep down")
    assert 'raise RuntimeError("deep down")' in tb


# -- item 12: a user cancel is a cancel, not a lost lease


class CountingMemory(counting(MemoryDriver)):  # type: ignore[misc]
    calls: list[str]


async def taken_away(
    take: Callable[[CountingMemory, Worker, str], Awaitable[None]],
    noticed: Callable[[Worker], bool],
) -> tuple[CountingMemory, Worker, str]:
    """A body waiting on its signal has its run taken away by `take`; returns, once the worker
    `noticed` and stopped, the driver (its calls counted from `take` on), the worker and the
    job's id."""
    started = threading.Event()

    async def long(input: Any, ctx: JobContext) -> None:
        started.set()
        await ctx.signal.wait()

    h = declare(long)
    driver = CountingMemory()
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = quick_worker(driver, [h], lease=0.3)
    await worker.start()
    try:
        await until(started.is_set)
        driver.calls.clear()
        await take(driver, worker, queued.id)
        await until(lambda: noticed(worker))
    finally:
        await worker.stop()
    return driver, worker, queued.id


def assert_told_as(
    caplog: pytest.LogCaptureFixture,
    driver: CountingMemory,
    job_id: str,
    said: str,
    level: int,
    *,
    not_said: str,
) -> None:
    """The run's end was logged once, as `said` at `level`, never as `not_said`, and the worker
    told which it was with one read."""
    told = messages(caplog, said)
    assert [r.levelno for r in told] == [level]
    assert vars(told[0])["job_id"] == job_id
    assert messages(caplog, not_said) == []
    assert driver.calls.count("_job_get_many") == 1, driver.calls


async def test_a_user_cancel_is_logged_and_counted_as_a_cancel_with_one_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobs")

    async def cancel(driver: CountingMemory, worker: Worker, job_id: str) -> None:
        await driver.job_cancel(job_id, worker.clock.now_ms())

    driver, worker, job_id = await taken_away(cancel, lambda w: w.stats.cancelled == 1)
    assert worker.stats.lost == 0 and worker.stats.unowned == 0
    assert_told_as(
        caplog, driver, job_id, "jobs.run.cancelled", logging.INFO, not_said="jobs.lease.lost"
    )
    assert (await row(driver, job_id)).state is JobState.CANCELLED


async def test_a_reclaimed_run_is_a_lost_lease_told_apart_by_one_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="jobs")

    async def reclaim(driver: CountingMemory, worker: Worker, job_id: str) -> None:
        # Another worker whose clock is past the lease takes the row: a new fence.
        later = worker.clock.now_ms() + 60_000
        taken = await driver.job_claim(ClaimParams(("default",), "thief", 1, 60_000, later))
        assert [j.id for j in taken.jobs] == [job_id]

    driver, worker, job_id = await taken_away(reclaim, lambda w: w.stats.lost == 1)
    assert worker.stats.cancelled == 0 and worker.stats.unowned == 0
    assert_told_as(
        caplog, driver, job_id, "jobs.lease.lost", logging.WARNING, not_said="jobs.run.cancelled"
    )
    r = await row(driver, job_id)
    assert r.state is JobState.RUNNING and r.claimed_by == "thief"


async def test_a_drop_and_a_buried_final_attempt_log_at_error_with_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="jobs")

    async def refuses(input: Any, ctx: JobContext) -> None:
        raise TerminalError("no such account")

    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    h_drop = declare(refuses, name="refuses", retry=Retry(attempts=3, dead_letter=False))
    h_ok = declare(ok, name="ok", retry=Retry(attempts=1))
    driver = MemoryDriver()
    jobs = Jobs(driver)
    dropped = await jobs.enqueue(h_drop, {"n": 1})
    buried = await jobs.enqueue(h_ok, {"n": 2})
    # A worker that crashed had claimed `ok` on its only attempt, with a 1 ms lease.
    now = SystemClock().now_ms()
    claim = await driver.job_claim(ClaimParams(("default",), "crashed", 10, 1, now))
    assert {j.id for j in claim.jobs} == {dropped.id, buried.id}
    await driver.job_nack(
        [Nack(j.fence, NackKind.INTERRUPT, now) for j in claim.jobs if j.id == dropped.id]
    )
    worker = quick_worker(driver, [h_drop, h_ok])
    await work(driver, worker, [dropped.id, buried.id])
    assert (await row(driver, dropped.id)).state is JobState.FAILED
    assert (await row(driver, buried.id)).state is JobState.DEAD
    (drop,) = messages(caplog, "jobs.run.dropped")
    (bury,) = messages(caplog, "jobs.claim.buried")
    assert drop.levelno == logging.ERROR and bury.levelno == logging.ERROR
    assert drop.exc_info is not None and str(drop.exc_info[1]).endswith("no such account")
    assert vars(drop)["job_id"] == dropped.id and vars(drop)["attempt"] == 1
    assert vars(bury)["job_id"] == buried.id and vars(bury)["worker_id"] == worker.worker_id
