"""The worker on the memory driver: bodies, retries, deadlines, cancellation, hooks, slots."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobs_core.context import CancelSignal, JobContext
from jobs_core.errors import (
    JobCancelledError,
    JobsError,
    JobTimeoutError,
    RateLimitedError,
    TerminalError,
)
from jobs_core.facade import Jobs, SettledEvent
from jobs_core.job import JobHandle
from jobs_core.records import BuriedJob, ClaimParams, ClaimResult, JobRecord
from jobs_core.retry import Retry
from jobs_core.states import JobState, Outcome
from jobs_core.tenant import acting_for, current_tenant
from jobs_core.worker import Worker
from jobs_core.worker.failure import relative_frames
from jobs_memory import MemoryDriver
from tests.core.runpath_cases import declare
from tests.core.support import HUGE_INT, ROOT, deep_list, until


def fast_worker(driver: MemoryDriver, handles: list[JobHandle], **options: Any) -> Worker:
    options.setdefault("poll_floor", 0.001)
    options.setdefault("poll_ceiling", 0.01)
    options.setdefault("lease", 5.0)
    return Worker(driver, handles, **options)


async def work(
    driver: MemoryDriver, handles: list[JobHandle], job_ids: list[str], **options: Any
) -> Worker:
    """Run a fast worker until every one of `job_ids` has ended, then drain it."""
    worker = fast_worker(driver, handles, **options)
    await worker.start()
    for job_id in job_ids:
        await until(functools.partial(settled, driver, job_id))
    await worker.stop()
    return worker


async def row(driver: MemoryDriver, job_id: str) -> JobRecord:
    return (await driver.job_get_many([job_id]))[job_id]


async def settled(driver: MemoryDriver, job_id: str) -> bool:
    return (await row(driver, job_id)).state in (
        JobState.COMPLETED,
        JobState.DEAD,
        JobState.FAILED,
    )


async def test_async_and_thread_bodies_complete_with_their_results() -> None:
    threads: list[str] = []

    async def add(input: Any, ctx: JobContext) -> dict[str, int]:
        return {"sum": input["a"] + input["b"]}

    def blocking(input: Any, ctx: JobContext) -> str:
        threads.append(threading.current_thread().name)
        return "done"

    driver = MemoryDriver()
    h_add = declare(add, name="add")
    h_blocking = declare(blocking, name="blocking")
    jobs = Jobs(driver)
    a = await jobs.enqueue(h_add, {"n": 1, "a": 2, "b": 3})
    b = await jobs.enqueue(h_blocking, {"n": 1})
    await work(driver, [h_add, h_blocking], [a.id, b.id])
    assert (await row(driver, a.id)).result_json == '{"sum":5}'
    assert (await row(driver, b.id)).result_json == '"done"'
    assert threads and threads[0].startswith("ujobs-body")


async def test_a_failing_body_retries_with_backoff_then_dead_letters() -> None:
    seen: list[int] = []

    async def fails(input: Any, ctx: JobContext) -> None:
        seen.append(ctx.attempt)
        raise RuntimeError(f"attempt {ctx.attempt}")

    driver = MemoryDriver()
    h = declare(fails)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = await work(driver, [h], [queued.id])
    r = await row(driver, queued.id)
    assert seen == [1, 2, 3]
    assert r.state is JobState.DEAD and r.attempt == 3
    error = json.loads(r.last_error or "")
    assert (error["type"], error["message"]) == ("RuntimeError", "attempt 3")
    assert 'raise RuntimeError(f"attempt {ctx.attempt}")' in error["traceback"]
    # Frames named as a reader finds them, not by this machine's layout.
    assert 'File "tests/core/test_worker.py", line ' in error["traceback"]
    assert 'File "jobs_core/worker/run.py", line ' in error["traceback"]
    assert str(ROOT) not in error["traceback"] and 'File "/' not in error["traceback"]
    assert worker.stats.retried == 2 and worker.stats.dead_lettered == 1


def test_frames_are_named_from_the_import_path_entry_they_live_under(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    site = tmp_path / "venv" / "site-packages"
    monkeypatch.setattr(sys, "path", [str(tmp_path), str(site), ""])
    text = (
        "Traceback (most recent call last):\n"
        f'  File "{site}/httpx/_client.py", line 3, in send\n'  # the longest entry wins
        f'  File "{tmp_path}/app/jobs.py", line 12, in body\n'
        f'  File "{os.getcwd()}/tool.py", line 1, in <module>\n'  # "": the working directory
        '  File "/elsewhere/x.py", line 5, in f\n'
        '  File "<string>", line 1, in <module>\n'
        "RuntimeError: no\n"
    )
    assert relative_frames(text).splitlines()[1:6] == [
        '  File "httpx/_client.py", line 3, in send',
        '  File "app/jobs.py", line 12, in body',
        '  File "tool.py", line 1, in <module>',
        '  File "/elsewhere/x.py", line 5, in f',  # under no entry: as it is
        '  File "<string>", line 1, in <module>',
    ]


async def test_terminal_error_fails_at_once_and_dead_letter_false_drops() -> None:
    events: list[SettledEvent] = []

    async def refuse(input: Any, ctx: JobContext) -> None:
        raise TerminalError("bad input")

    driver = MemoryDriver()
    h = declare(
        refuse, retry=Retry(attempts=5, base_ms=1, dead_letter=False), on_settled=events.append
    )
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = fast_worker(driver, [h])
    await worker.start()
    await until(lambda: settled(driver, queued.id))
    await until(lambda: bool(events))
    await worker.stop()
    r = await row(driver, queued.id)
    assert r.state is JobState.FAILED and r.attempt == 1
    assert [e.outcome for e in events] == [Outcome.DROPPED]


async def test_rate_limited_defers_without_spending_an_attempt() -> None:
    calls: list[int] = []

    async def limited(input: Any, ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise RateLimitedError(retry_after_ms=1)

    driver = MemoryDriver()
    h = declare(limited)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = await work(driver, [h], [queued.id])
    assert calls == [1, 1, 1]
    assert (await row(driver, queued.id)).state is JobState.COMPLETED
    assert worker.stats.shed == 2


@pytest.mark.parametrize("after_ms", [10**15, HUGE_INT, 1e300], ids=["ms", "huge int", "float"])
async def test_a_rate_limit_past_the_stores_last_time_defers_to_it(after_ms: float) -> None:
    """A `retry_after_ms` past the last time a store holds (`MAX_TIME_MS`) still defers the job
    without spending an attempt, to that last time; it used to make a run_at the settle refused,
    so the job burned its attempts on X_JOB_RECORD_INVALID and was dead-lettered."""
    from jobs_core.driver import MAX_TIME_MS

    async def limited(input: Any, ctx: JobContext) -> None:
        raise RateLimitedError(retry_after_ms=after_ms)

    driver = MemoryDriver()
    h = declare(limited)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = fast_worker(driver, [h])
    await worker.start()
    try:
        await until(lambda: worker.stats.shed == 1)
    finally:
        await worker.stop()
    r = await row(driver, queued.id)
    assert (r.state, r.attempt, r.run_at_ms) == (JobState.READY, 0, MAX_TIME_MS)


def test_a_retry_after_repr_cannot_spell_is_refused_typed() -> None:
    for bad in (deep_list(), float("nan"), float("inf"), -1, True):
        with pytest.raises(JobsError) as caught:
            RateLimitedError(retry_after_ms=bad)
        assert caught.value.code == "X_JOB_OPTION_INVALID"


async def test_a_steep_backoff_curve_never_leaves_a_failed_attempt_to_its_lease() -> None:
    """Attempts past where `factor ** (n - 1)` overflows a float (100.0 ** 155) are retried at
    the cap like any other: the settle of the 156th failure raised OverflowError, leaving the
    job `running` to its lease, at that attempt and every one after."""
    calls: list[int] = []

    async def failing(input: Any, ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        raise RuntimeError("boom")

    driver = MemoryDriver()
    steep = Retry(attempts=157, base_ms=1, factor=100.0, cap_ms=1, jitter="none")
    h = declare(failing, retry=steep)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    await work(driver, [h], [queued.id])
    r = await row(driver, queued.id)
    assert r.state is JobState.DEAD and calls == list(range(1, 158))
    # Each failed attempt settled as retried; none was abandoned to its lease.
    ends = {a.attempt: a.outcome.value for a in r.attempts}
    assert ends[155] == ends[156] == "retried" and ends[157] == "dead", ends


async def test_a_deadline_cancels_the_body_before_failing_the_attempt() -> None:
    order: list[str] = []

    async def sleepy(input: Any, ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            order.append(f"cancelled:{ctx.signal.reason.code if ctx.signal.reason else None}")
            raise

    driver = MemoryDriver()
    h = declare(sleepy, timeout=0.02, retry=Retry(attempts=1))
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    await work(driver, [h], [queued.id])
    r = await row(driver, queued.id)
    assert order == ["cancelled:X_JOB_TIMEOUT"]
    assert r.state is JobState.DEAD
    assert json.loads(r.last_error or "")["code"] == "X_JOB_TIMEOUT"


async def test_cancelling_a_running_job_reaches_the_body_and_nothing_is_written_after() -> None:
    started = asyncio.Event()
    reasons: list[str] = []

    async def long(input: Any, ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            reasons.append(ctx.signal.reason.code if ctx.signal.reason else "?")
            ctx.progress({"after": "cancel"})
            raise

    driver = MemoryDriver()
    h = declare(long)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    worker = fast_worker(driver, [h], lease=0.3)
    await worker.start()
    await asyncio.wait_for(started.wait(), 5)
    assert (await driver.job_cancel(queued.id, int(time.time() * 1000))).value == "cancelled"
    await until(lambda: bool(reasons))
    await worker.stop()
    r = await row(driver, queued.id)
    assert reasons == ["X_JOB_LEASE_LOST"]
    assert r.state is JobState.CANCELLED and r.progress_json is None
    assert worker.stats.cancelled == 1 and worker.stats.lost == 0 and worker.stats.unowned == 0


async def test_progress_is_throttled_and_flushed_with_the_ack() -> None:
    async def counts(input: Any, ctx: JobContext) -> None:
        for i in range(100):
            ctx.progress({"done": i})

    driver = MemoryDriver()
    h = declare(counts)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    await work(driver, [h], [queued.id])
    assert json.loads((await row(driver, queued.id)).progress_json or "") == {"done": 99}


async def test_the_body_runs_as_the_declared_tenant_and_none_strips_it() -> None:
    seen: dict[str, str | None] = {}

    async def scoped(input: Any, ctx: JobContext) -> None:
        seen[input["kind"]] = current_tenant()

    driver = MemoryDriver()
    by_org = declare(
        scoped, name="by_org", tenant=lambda i: i["org"], idempotency_key=lambda i: i["kind"]
    )
    stripped = declare(scoped, name="stripped", idempotency_key=lambda i: i["kind"])
    jobs = Jobs(driver)
    with acting_for("enqueuer-org"):
        a = await jobs.enqueue(by_org, {"kind": "org", "org": "org-42"})
        b = await jobs.enqueue(stripped, {"kind": "none"})
    # Started inside another org's block: its runs do not inherit it.
    with acting_for("starter-org"):
        await work(driver, [by_org, stripped], [a.id, b.id])
    assert seen == {"org": "org-42", "none": None}
    assert (await row(driver, a.id)).tenant_id == "enqueuer-org"


async def test_a_run_signal_ended_reads_as_cancelled_the_run_has_ended_and_fires_once() -> None:
    signal = CancelSignal()
    told: list[int] = []
    signal.on_fire(lambda: told.append(1))
    signal.end("job-1")
    signal.end("job-1")
    assert signal.cancelled and told == [1]
    reason = signal.reason
    assert isinstance(reason, JobCancelledError) and reason is signal.reason
    assert reason.message == "the run has ended (job-1)"
    assert not signal.fire(JobTimeoutError(detail="job-1"))  # ended first: the reason stays
    with pytest.raises(JobCancelledError) as raised:
        signal.raise_if_cancelled()
    assert raised.value is reason
    assert await signal.wait() is reason


async def test_a_body_context_carries_its_claim_and_makes_one_step_api_when_first_read() -> None:
    seen: dict[str, Any] = {}

    async def reads(input: Any, ctx: JobContext) -> None:
        seen["fields"] = (
            ctx.job_id,
            ctx.run_id,
            ctx.name,
            ctx.queue,
            ctx.attempt,
            ctx.max_attempts,
            ctx.tenant,
            ctx.enqueued_tenant,
            ctx.enqueued_by,
            ctx.join,
        )
        seen["step"] = ctx.step
        seen["same"] = ctx.step is seen["step"] and ctx.sync_step is ctx.sync_step
        seen["out"] = await ctx.step.run("once", lambda: 7)

    driver = MemoryDriver()
    h = declare(reads, tenant=lambda i: i["org"], idempotency_key=lambda i: i["org"])
    with acting_for("enqueuer-org"):
        queued = await Jobs(driver).enqueue(h, {"org": "org-7"})
    await work(driver, [h], [queued.id])
    r = await row(driver, queued.id)
    assert seen["fields"] == (
        r.id,
        r.run_id,
        r.name,
        "default",
        1,
        r.max_attempts,
        "org-7",
        "enqueuer-org",
        r.enqueued_by,
        None,
    )
    assert seen["same"] and seen["out"] == 7
    assert [s.name for s in await driver.step_list(r.run_id)] == ["once"]


async def test_on_settled_fires_after_landed_endings_only_and_never_breaks_the_worker() -> None:
    events: list[tuple[str, Outcome]] = []
    tries: list[int] = []

    def hook(event: SettledEvent) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise RuntimeError("a hook that fails once")
        events.append((event.name, event.outcome))

    async def ok(input: Any, ctx: JobContext) -> int:
        return 1

    async def flaky(input: Any, ctx: JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")

    driver = MemoryDriver()
    h_ok = declare(ok, name="ok")
    h_flaky = declare(flaky, name="flaky")
    jobs = Jobs(driver)
    a = await jobs.enqueue(h_ok, {"n": 1})
    b = await jobs.enqueue(h_flaky, {"n": 1})
    worker = fast_worker(driver, [h_ok, h_flaky], on_settled=hook)
    await worker.start()
    await until(lambda: settled(driver, a.id))
    await until(lambda: settled(driver, b.id))
    await until(lambda: len(events) == 2)
    await worker.stop()
    assert sorted(events) == [("flaky", Outcome.COMPLETED), ("ok", Outcome.COMPLETED)]
    assert worker.stats.retried == 1


async def test_concurrency_bounds_bodies_and_max_in_flight_bounds_claims() -> None:
    running = 0
    peak = 0
    gate = asyncio.Event()

    async def held(input: Any, ctx: JobContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1

    driver = MemoryDriver()
    h = declare(held)
    await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(20)])
    worker = fast_worker(driver, [h], concurrency=3, max_in_flight=5)
    await worker.start()
    await until(lambda: worker.stats.claimed == 5 and worker.stats.running == 3)
    await asyncio.sleep(0.05)
    assert worker.stats.claimed == 5 and peak == 3
    assert (await driver.queue_demand(["default"], 2**41))["default"] == 15
    gate.set()
    await until(lambda: worker.stats.completed == 20)
    await worker.stop()
    assert peak == 3


class _SlowAcks(MemoryDriver):
    """Acks wait for `landing`: the settles of ended bodies stay on their way."""

    def __init__(self) -> None:
        super().__init__()
        self.landing = asyncio.Event()
        self.acks_sent = 0

    async def _job_ack(self, acks: Any) -> list[bool]:
        self.acks_sent += len(acks)
        await self.landing.wait()
        return await super()._job_ack(acks)


async def test_a_claim_does_not_wait_for_the_settles_of_ended_bodies() -> None:
    """Jobs whose body ended do not hold `max_in_flight` while their ack is on its way (the
    next claim overlaps the settle's round trip), up to `max_in_flight` more held jobs."""

    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    driver = _SlowAcks()
    h = declare(ok)
    await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(10)])
    worker = fast_worker(driver, [h], concurrency=2, max_in_flight=2)
    await worker.start()
    # Two ran and sent their acks, two more were claimed and ran: then the bound holds.
    await until(lambda: worker.stats.claimed == 4 and worker.stats.running == 0)
    await asyncio.sleep(0.05)
    assert worker.stats.claimed == 4 and worker.stats.completed == 0
    assert worker.stats.in_flight == 4 and driver.acks_sent == 2  # the second two queue behind
    driver.landing.set()
    await until(lambda: worker.stats.completed == 10)
    await worker.stop()


async def test_a_lapsed_final_attempt_is_buried_and_announced() -> None:
    events: list[SettledEvent] = []

    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    driver = MemoryDriver()
    h = declare(ok, retry=Retry(attempts=1))
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    # A crashed worker claimed it long ago with a short lease.
    now = int(time.time() * 1000)
    claim = await driver.job_claim(ClaimParams(("default",), "crashed", 1, 1, now))
    assert [j.id for j in claim.jobs] == [queued.id]
    worker = fast_worker(driver, [h], on_settled=events.append)
    await worker.start()
    await until(lambda: settled(driver, queued.id))
    await until(lambda: bool(events))
    await worker.stop()
    assert (await row(driver, queued.id)).state is JobState.DEAD
    assert [(e.job_id, e.outcome) for e in events] == [(queued.id, Outcome.DEAD_LETTERED)]
    assert worker.stats.buried == 1


class _EchoesBurials(MemoryDriver):
    """Reports each burial a second time, to the next claim of ANOTHER worker: what a lost
    claim's look does when a claim of another worker in the same millisecond buried the row
    (the look finds it by its time and queues, not by who buried it)."""

    def __init__(self) -> None:
        super().__init__()
        self.echo: list[tuple[str, BuriedJob]] = []

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        got = await super()._job_claim(params)
        echoed = [b for w, b in self.echo if w != params.worker_id]
        self.echo = [(w, b) for w, b in self.echo if w == params.worker_id]
        self.echo += [(params.worker_id, b) for b in got.buried]
        return replace(got, buried=(*got.buried, *echoed)) if echoed else got


async def test_a_burial_reported_to_two_workers_is_hooked_and_unwound_once() -> None:
    """At most once: each reporter takes the burial's lease first (`ujobs.buried:`), so the
    second report of one burial is counted nowhere and hooks nothing."""
    events: list[SettledEvent] = []

    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    driver = _EchoesBurials()
    h = declare(ok, retry=Retry(attempts=1))
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    now = int(time.time() * 1000)
    claim = await driver.job_claim(ClaimParams(("default",), "crashed", 1, 1, now))
    assert [j.id for j in claim.jobs] == [queued.id]
    workers = [fast_worker(driver, [h], on_settled=events.append) for _ in range(2)]
    for w in workers:
        await w.start()
    await until(lambda: settled(driver, queued.id))
    await until(lambda: bool(events))
    await asyncio.sleep(0.3)  # both workers claimed again meanwhile: the echo went out
    for w in workers:
        await w.stop()
    assert not driver.echo or all(w == driver.echo[0][0] for w, _ in driver.echo)
    assert [(e.job_id, e.outcome) for e in events] == [(queued.id, Outcome.DEAD_LETTERED)]
    assert sum(w.stats.buried for w in workers) == 1


async def test_the_registry_lists_a_running_worker_and_forgets_it_on_stop() -> None:
    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    driver = MemoryDriver()
    worker = fast_worker(driver, [declare(ok)])
    await worker.start()
    now = int(time.time() * 1000)
    listed = await driver.worker_list(now)
    assert [w.worker_id for w in listed] == [worker.worker_id]
    assert json.loads(listed[0].info_json)["queues"] == ["default"]
    await worker.stop()
    assert await driver.worker_list(now) == []


@pytest.mark.parametrize("concurrency", [0, -1])
def test_zero_concurrency_is_refused(concurrency: int) -> None:
    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    with pytest.raises(Exception) as info:
        Worker(MemoryDriver(), [declare(ok)], concurrency=concurrency)
    assert getattr(info.value, "code", None) == "X_JOB_OPTION_INVALID"


async def test_an_unexpected_claim_failure_does_not_stop_the_claim_loop() -> None:
    class BuggyOnce(MemoryDriver):
        failed = False

        async def _job_claim(self, params: ClaimParams) -> Any:
            if not self.failed:
                self.failed = True
                raise RuntimeError("a driver bug, not a typed refusal")
            return await super()._job_claim(params)

    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    driver = BuggyOnce()
    h = declare(ok)
    queued = await Jobs(driver).enqueue(h, {"n": 1})
    await work(driver, [h], [queued.id])
    assert driver.failed and (await row(driver, queued.id)).state is JobState.COMPLETED


async def test_limit_claims_takes_no_job_past_the_limit_and_calls_back_once() -> None:
    """`limit_claims(3, then)` on a worker of 5 slots with 10 due jobs: exactly 3 are claimed
    (the first claim asks for 3, not 5), `then` runs once their runs ended (not while they run:
    a recycle's drain must find nothing to cut short), and the other 7 stay ready."""
    started: list[int] = []
    release = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> None:
        started.append(input["n"])
        await release.wait()

    driver = MemoryDriver()
    handle = declare(body, name="held")
    ids = [r.id for r in await Jobs(driver).enqueue_many(handle, [{"n": i} for i in range(10)])]
    calls: list[int] = []
    worker = fast_worker(driver, [handle], concurrency=5)
    worker.limit_claims(3, lambda: calls.append(len(started)))
    await worker.start()
    await until(lambda: len(started) == 3)
    await asyncio.sleep(0.05)  # a few idle polls: a 4th claim would have taken a job by now
    assert len(started) == 3 and calls == []
    release.set()
    await until(lambda: len(calls) == 1)
    await asyncio.sleep(0.05)
    assert len(started) == 3 and calls == [3] and worker.stats.completed == 3
    await worker.stop()
    states = [r.state for r in (await driver.job_get_many(ids)).values()]
    assert sorted(states) == sorted([JobState.COMPLETED] * 3 + [JobState.READY] * 7)
    with pytest.raises(ValueError):
        worker.limit_claims(0, lambda: None)


async def test_limit_claims_on_a_running_worker_waits_for_the_runs_it_had() -> None:
    """Called while a run is under way, `then` waits for that run too, not only for the runs of
    the jobs claimed since: its drain must find nothing running to cut short."""
    started: list[int] = []
    release = {n: asyncio.Event() for n in range(2)}

    async def body(input: Any, ctx: JobContext) -> None:
        started.append(input["n"])
        await release[input["n"]].wait()

    driver = MemoryDriver()
    handle = declare(body, name="held")
    jobs = Jobs(driver)
    await jobs.enqueue(handle, {"n": 0})
    calls: list[int] = []
    worker = fast_worker(driver, [handle], concurrency=5)
    await worker.start()
    await until(lambda: started == [0])
    worker.limit_claims(1, lambda: calls.append(len(started)))
    await jobs.enqueue(handle, {"n": 1})
    await until(lambda: started == [0, 1])
    release[1].set()
    await until(lambda: worker.stats.completed == 1)
    await asyncio.sleep(0.05)
    assert calls == []  # job 0 still runs
    release[0].set()
    await until(lambda: calls == [2])
    await worker.stop()


class _HeldAdmissions(MemoryDriver):
    """The memory store, its lease takes (a limited job's admission) held until `go` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.taking = asyncio.Event()
        self.go = asyncio.Event()

    async def lease_take(self, takes: Any, now_ms: int) -> Any:
        self.taking.set()
        await self.go.wait()
        return await super().lease_take(takes, now_ms)


async def test_limit_claims_while_claimed_jobs_are_admitted_still_calls_back() -> None:
    """Called while the jobs of a claim wait for their admission (a rate limit's lease), those
    jobs are held already: counted once among the runs `then` waits for, and not against the
    jobs it may still claim (one more here), so `then` comes once both ran."""
    from jobs_core.leases import RateLimit

    driver = _HeldAdmissions()

    async def body(input: Any, ctx: JobContext) -> None:
        return None

    handle = declare(body, name="limited")
    await Jobs(driver).enqueue(handle, {"n": 0})
    calls: list[int] = []
    worker = fast_worker(driver, [handle], rate_limits=RateLimit(1000, per=1))
    await worker.start()
    try:
        await asyncio.wait_for(driver.taking.wait(), 5)
        worker.limit_claims(1, lambda: calls.append(worker.stats.completed))
        driver.go.set()
        await until(lambda: worker.stats.completed == 1)
        await asyncio.sleep(0.05)
        assert calls == []  # one more job may still be claimed
        await Jobs(driver).enqueue(handle, {"n": 1})
        await until(lambda: calls == [2])
        assert worker.stats.claimed == 2
    finally:
        await worker.stop()


@pytest.mark.parametrize(
    "queues",
    [[""], ["a\x00b"], ["q\ud800"], ["x" * 300], "abc", [1], []],
    ids=["empty", "nul", "surrogate", "long", "a-string", "not-a-string", "none"],
)
def test_queues_no_store_can_claim_are_refused_at_construction(queues: Any) -> None:
    """A queue no store holds (empty, a NUL, a lone surrogate, past 200 bytes, not a string)
    was taken: every claim then failed in the loop, backing off for good; a bare string was
    read as its letters ("abc": queues a, b and c). Refused at once, naming `queues`."""

    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    with pytest.raises(JobsError) as info:
        Worker(MemoryDriver(), [declare(ok)], queues=queues)
    assert (info.value.code, info.value.detail) == ("X_JOB_OPTION_INVALID", "queues")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("worker_id", ""),
        ("worker_id", "w\x00"),
        ("worker_id", "w\ud800"),
        ("worker_id", "w" * 300),
        ("worker_id", 5),
        ("retention", "7d"),
        ("on_settled", "print"),
    ],
)
def test_worker_options_no_store_takes_are_refused_at_construction(option: str, value: Any) -> None:
    """A worker id no store holds was taken (every claim and beat then failed in the loop, for
    good); a retention of the wrong type raised a bare AttributeError; a hook that is no
    callable failed at every settle. Each is refused at once, naming the option."""

    async def ok(input: Any, ctx: JobContext) -> None:
        return None

    with pytest.raises(JobsError) as info:
        Worker(MemoryDriver(), [declare(ok)], **{option: value})
    assert (info.value.code, info.value.detail) == ("X_JOB_OPTION_INVALID", option)
