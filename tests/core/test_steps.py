"""Durable steps on the memory driver, through a real worker: record once, replay, names, step
timeouts, sleeps, event waits, cancelled runs that write nothing, def bodies, and sagas."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import MAX_TIME_MS
from jobs_core.errors import DriverUnavailableError, TerminalError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle
from jobs_core.records import ClaimParams, CounterReadParams, JobRecord, Nack, NackKind, StepPut
from jobs_core.retry import Retry
from jobs_core.settle import Settler
from jobs_core.states import JobState
from jobs_core.steps.api import SAGA
from jobs_core.steps.unwind import UNWIND_JOB, unwind_record
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import T0, counting, declare, new_job, until

FAST = Retry(attempts=3, base_ms=1, cap_ms=1)


async def running(
    driver: MemoryDriver, handles: list[JobHandle], check: Callable[[], Awaitable[bool]]
) -> Worker:
    """Work `handles` until `check()` answers True; the worker is stopped before returning."""
    worker = Worker(driver, handles, poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()
    try:
        await until(check, within=15)
    finally:
        await worker.stop()
    return worker


async def row(driver: MemoryDriver, job_id: str) -> JobRecord:
    return (await driver.job_get_many([job_id]))[job_id]


def ended(driver: MemoryDriver, job_id: str, *states: JobState) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await row(driver, job_id)).state in (states or (JobState.COMPLETED,))

    return check


async def test_a_step_runs_once_and_replays_its_stored_form() -> None:
    driver = MemoryDriver()
    calls: list[int] = []
    seen: list[Any] = []

    async def body(input: Any, ctx: JobContext) -> Any:
        when = await ctx.step.run(
            "stamp", lambda: calls.append(ctx.attempt) or dt.datetime(2027, 1, 2, tzinfo=dt.UTC)
        )
        seen.append(when)
        if ctx.attempt < 3:
            raise RuntimeError("try again")
        return when

    h = declare(body, name="stamped", retry=FAST)
    done = await Jobs(driver).enqueue(h, {"n": 1})
    await running(driver, [h], ended(driver, done.id))
    assert calls == [1]  # ran on the first attempt only
    assert seen == ["2027-01-02T00:00:00+00:00"] * 3  # the stored form, every time
    r = await row(driver, done.id)
    assert r.result_json == '"2027-01-02T00:00:00+00:00"'
    steps = await driver.step_list(r.run_id)
    assert [s.name for s in steps] == ["stamp"]


async def test_a_name_used_twice_fails_the_run_for_good() -> None:
    driver = MemoryDriver()

    async def body(input: Any, ctx: JobContext) -> None:
        await ctx.step.run("a", lambda: 1)
        await ctx.step.run("a", lambda: 2)

    h = declare(body, name="twice", retry=FAST)
    done = await Jobs(driver).enqueue(h, {"n": 1})
    await running(driver, [h], ended(driver, done.id, JobState.DEAD))
    r = await row(driver, done.id)
    assert r.attempt == 1 and r.last_error is not None and "X_STEP_DUPLICATE" in r.last_error


async def test_a_step_past_its_deadline_is_cancelled_then_fails_the_attempt() -> None:
    driver = MemoryDriver()
    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def body(input: Any, ctx: JobContext) -> None:
        await ctx.step.run("slow", slow)

    h = declare(body, name="slow", retry=Retry(attempts=1), step_timeout=0.05)
    done = await Jobs(driver).enqueue(h, {"n": 1})
    await running(driver, [h], ended(driver, done.id, JobState.DEAD))
    r = await row(driver, done.id)
    assert cancelled == [True] and r.last_error is not None and "X_STEP_TIMEOUT" in r.last_error
    assert await driver.step_list(r.run_id) == []


async def test_a_sleep_parks_without_an_attempt_and_resumes_once() -> None:
    driver = MemoryDriver()
    before: list[int] = []

    async def body(input: Any, ctx: JobContext) -> str:
        await ctx.step.run("before", lambda: before.append(1) or "x")
        await ctx.step.sleep("nap", 0.2)
        return "woke"

    h = declare(body, name="napper", retry=FAST)
    done = await Jobs(driver).enqueue(h, {"n": 1})

    async def parked() -> bool:
        return (await row(driver, done.id)).state is JobState.PARKED

    await running(driver, [h], parked)
    r = await row(driver, done.id)
    assert r.attempt == 0 and r.run_at_ms is not None  # no attempt spent
    await running(driver, [h], ended(driver, done.id))
    r = await row(driver, done.id)
    assert r.result_json == '"woke"' and before == [1] and r.attempt == 1
    assert [s.name for s in await driver.step_list(r.run_id)] == ["before", "nap"]


async def test_an_event_wakes_a_waiting_run_and_a_timeout_answers_none() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)

    async def body(input: Any, ctx: JobContext) -> Any:
        got = await ctx.step.wait_for_event(
            "shipped", "order.shipped", match={"order": input["n"]}, timeout=input["timeout"]
        )
        return {"got": got}

    h = declare(body, name="waiter", retry=FAST, event_poll=30)
    # Sent before the wait began: does not count by default.
    await jobs.send_event("order.shipped", {"order": 1, "carrier": "early"})
    # A wait counts events from the millisecond it began, that one included: the wait must
    # begin in a later one for the early event to miss it.
    await asyncio.sleep(0.005)
    wait = await jobs.enqueue(h, {"n": 1, "timeout": 60})
    lapse = await jobs.enqueue(h, {"n": 2, "timeout": 0.2})

    async def parked() -> bool:
        return (await row(driver, wait.id)).state is JobState.PARKED

    await running(driver, [h], parked)
    assert (await jobs.send_event("order.shipped", {"order": 3})).woken == 0
    sent = await jobs.send_event("order.shipped", {"order": 1.0, "carrier": "ups"})
    assert sent.woken == 1
    await running(driver, [h], ended(driver, wait.id))
    await running(driver, [h], ended(driver, lapse.id))
    assert (await row(driver, wait.id)).result_json == '{"got":{"order":1.0,"carrier":"ups"}}'
    assert (await row(driver, lapse.id)).result_json == '{"got":null}'


async def test_a_resend_that_wakes_runs_answers_its_count_and_one_that_wakes_none_unknown() -> None:
    """A publish try fails `X_DRIVER_UNAVAILABLE` before it is sent: the resend stores the
    event and wakes the run, so its count is the truth (1). Failing before it was sent or
    after it landed look alike to the caller, so a resend answering 0 is `woken=None`."""
    driver = MemoryDriver()
    jobs = Jobs(driver)
    jobs.enqueue_retry_s = 5

    async def body(input: Any, ctx: JobContext) -> Any:
        return await ctx.step.wait_for_event("paid", "order.paid", match={"order": input["n"]})

    h = declare(body, name="payer", retry=FAST, event_poll=30)
    wait = await jobs.enqueue(h, {"n": 1})

    async def parked() -> bool:
        return (await row(driver, wait.id)).state is JobState.PARKED

    await running(driver, [h], parked)
    publish = driver._event_publish
    tries: list[str] = []

    async def unreachable_once(event: Any) -> int:
        tries.append(event.id)
        if tries.count(event.id) == 1 and len(set(tries)) < 3:  # each of the first two events
            raise DriverUnavailableError("the store went away")
        return await publish(event)

    driver._event_publish = unreachable_once  # type: ignore[method-assign]
    assert (await jobs.send_event("order.paid", {"order": 1})).woken == 1
    assert (await jobs.send_event("order.paid", {"order": 2})).woken is None
    assert (await jobs.send_event("order.paid", {"order": 3})).woken == 0


async def test_a_wait_may_count_events_sent_since_the_enqueue() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)

    async def body(input: Any, ctx: JobContext) -> Any:
        return await ctx.step.wait_for_event("paid", "paid", since="enqueued", timeout=60)

    h = declare(body, name="late_waiter", retry=FAST)
    queued = await jobs.enqueue(h, {"n": 1})
    await jobs.send_event("paid", {"amount": 5})  # before the body ran at all
    await running(driver, [h], ended(driver, queued.id))
    assert (await row(driver, queued.id)).result_json == '{"amount":5}'


async def test_a_def_body_uses_sync_steps() -> None:
    driver = MemoryDriver()
    calls: list[str] = []

    def body(input: Any, ctx: JobContext) -> Any:
        first = ctx.sync_step.run("one", lambda: calls.append("one") or {"v": 1})
        if ctx.attempt == 1:
            raise RuntimeError("again")
        return first

    h = declare(body, name="syncy", retry=FAST)
    done = await Jobs(driver).enqueue(h, {"n": 1})
    await running(driver, [h], ended(driver, done.id))
    assert calls == ["one"] and (await row(driver, done.id)).result_json == '{"v":1}'


async def test_a_cancelled_run_writes_no_step() -> None:
    driver = MemoryDriver()
    finished: list[str] = []
    started = asyncio.Event()
    release = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> None:
        async def wait() -> str:
            started.set()
            # A step that swallows the cancel and finishes anyway: its record is what is tested.
            with contextlib.suppress(asyncio.CancelledError):
                await release.wait()
            finished.append("late")
            return "late"

        await ctx.step.run("slow", wait)

    h = declare(body, name="cancelled", retry=FAST)
    done = await Jobs(driver).enqueue(h, {"n": 1})
    worker = Worker(driver, [h], poll_floor=0.001, poll_ceiling=0.01, lease=0.3)
    await worker.start()
    await asyncio.wait_for(started.wait(), 10)
    await driver.job_cancel(done.id, worker.clock.now_ms())
    await until(lambda: worker.stats.cancelled == 1, within=10)
    release.set()
    await worker.stop()
    r = await row(driver, done.id)
    assert finished == ["late"]  # the step finished, after the cancel...
    assert r.state is JobState.CANCELLED and await driver.step_list(r.run_id) == []  # unrecorded


async def test_a_saga_undoes_its_steps_in_reverse_each_once() -> None:
    driver = MemoryDriver()
    undone: list[str] = []
    flaky = {"refund": 1}

    async def refund(output: Any) -> None:
        if flaky["refund"]:
            flaky["refund"] -= 1
            raise RuntimeError("the bank is down")  # the unwinding retries, refunds once
        undone.append(f"refund {output['charge']}")

    def release(output: Any) -> None:
        undone.append(f"release {output}")

    async def order(input: Any, ctx: JobContext) -> None:
        await ctx.step.run("reserve", lambda: "seat-7", compensate=release)
        await ctx.step.run("charge", lambda: {"charge": "ch_1"}, compensate=refund)
        await ctx.step.run("note", lambda: "no undo")
        raise TerminalError("the shipment was refused")

    h = declare(order, name="order", retry=FAST)
    done = await Jobs(driver).enqueue(h, {"n": 1})

    async def unwound() -> bool:
        page = await driver.job_get_many([done.id])
        run_id = page[done.id].run_id
        names = {s.name for s in await driver.step_list(run_id)}
        return {"~undo:reserve", "~undo:charge"} <= names

    await running(driver, [h], unwound)
    assert undone == ["refund ch_1", "release seat-7"]
    r = await row(driver, done.id)
    assert r.state is JobState.DEAD
    steps = [s.name for s in await driver.step_list(r.run_id)]
    assert steps.count("~undo:charge") == 1 and steps.count("~undo:reserve") == 1
    # The undoing was a job of its own, in the failed job's queue, retried once, then done.
    counted = await driver.counter_read(CounterReadParams(0, MAX_TIME_MS, (UNWIND_JOB,)))
    assert {c.queue for c in counted} == {"default"}
    assert sum(c.retried for c in counted) == 1 and sum(c.completed for c in counted) == 1


async def test_runs_finishing_steps_together_share_one_put() -> None:
    """The worker batches the step records of its runs like its settles: 20 runs that each
    record 3 steps at the same moments cost far fewer `step_put` calls than 60, and every step
    lands once, under its own run."""
    driver = counting(MemoryDriver)()
    gate = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> Any:
        await gate.wait()
        for name in ("a", "b", "c"):
            await ctx.step.run(name, lambda: input["n"])
        return input["n"]

    handle = declare(body, name="batched")
    ids = [(await Jobs(driver).enqueue(handle, {"n": n})).id for n in range(20)]
    worker = Worker(driver, [handle], concurrency=20, poll_floor=0.001, poll_ceiling=0.01)
    await worker.start()
    try:

        async def all_running() -> bool:
            return worker.stats.running == 20

        await until(all_running, within=10)
        gate.set()

        async def all_done() -> bool:
            rows = await driver.job_get_many(ids)
            return all(r.state is JobState.COMPLETED for r in rows.values())

        await until(all_done, within=15)
    finally:
        await worker.stop()
    puts = driver.calls.count("_step_put")
    assert 3 <= puts <= 30, puts
    for job_id in ids:
        r = await row(driver, job_id)
        steps = await driver.step_list(r.run_id)
        assert [s.name for s in steps] == ["a", "b", "c"]
        assert {s.output_json for s in steps} == {r.result_json}


async def test_a_final_attempt_failing_before_its_steps_still_undoes_them() -> None:
    """The compensable step was recorded by attempt 1; attempt 2 (the last) fails before it
    replays it: the store, not this attempt's replay, says the run has something to undo."""
    driver = MemoryDriver()
    undone: list[Any] = []

    calls: list[int] = []

    async def body(input: Any, ctx: JobContext) -> None:
        calls.append(ctx.attempt)
        if len(calls) == 2:  # the final attempt; the unwind's replay (a third call) gets past
            raise RuntimeError("fails before it reaches its steps (a config fetch)")
        await ctx.step.run("charge", lambda: "ch_1", compensate=undone.append)
        raise RuntimeError("then fails")

    handle = declare(body, name="order", retry=Retry(attempts=2, base_ms=1, cap_ms=1))
    enqueued = await Jobs(driver).enqueue(handle, {"n": 1})

    async def refunded() -> bool:
        return undone == ["ch_1"]

    await running(driver, [handle], refunded)
    assert (await row(driver, enqueued.id)).state is JobState.DEAD


async def test_an_unwind_claimed_before_the_final_settle_lands_waits_for_it() -> None:
    """The unwind is enqueued before the failed run's FAIL nack, which may still be in flight
    when another worker claims the unwind: it waits (no attempt spent) instead of finding the
    run `running` and completing with nothing undone."""
    driver = MemoryDriver()
    clock = SystemClock()
    undone: list[Any] = []

    async def body(input: Any, ctx: JobContext) -> None:
        await ctx.step.run("charge", lambda: "ch_1", compensate=undone.append)
        raise RuntimeError("declined")

    handle = declare(body, name="order", retry=Retry(attempts=1))
    enqueued = await Jobs(driver).enqueue(handle, {"n": 1})
    got = await driver.job_claim(ClaimParams(("default",), "A", 1, 60_000, clock.now_ms()))
    (held,) = got.jobs
    now = clock.now_ms()
    puts = [StepPut(held.fence, "charge", '"ch_1"', now), StepPut(held.fence, SAGA, "{}", now)]
    assert await driver.step_put(puts) == [True, True]
    await driver.job_enqueue(unwind_record(held, now))
    worker = Worker(driver, [handle], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()
    try:
        await until(lambda: asyncio.sleep(0.3, True), within=5)  # B claims the unwind first
        assert undone == []
        nack = Nack(held.fence, NackKind.FAIL, clock.now_ms(), error="declined")
        assert await driver.job_nack([nack]) == [True]

        async def refunded() -> bool:
            return undone == ["ch_1"]

        await until(refunded, within=10)
    finally:
        await worker.stop()
    assert (await row(driver, enqueued.id)).state is JobState.DEAD


async def test_a_settle_waits_for_its_runs_unanswered_step_records() -> None:
    """Step records and settles travel in separate batches: a run's ack or nack waits for its
    step records still in flight, so a drain's INTERRUPT never overtakes (and refuses) the
    record of a step that finished before the run was cut."""
    gate = asyncio.Event()

    class SlowPuts(MemoryDriver):
        async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
            await gate.wait()
            return await super()._step_put(puts)

    driver = SlowPuts()
    clock = SystemClock()
    await driver.job_enqueue(new_job("j", "k"))
    now = T0 + 1_000
    (held,) = (await driver.job_claim(ClaimParams(("q",), "w", 1, 60_000, now))).jobs
    settler = Settler(driver, clock)
    put = asyncio.create_task(settler.step_put(StepPut(held.fence, "a", "1", now)))
    nack = asyncio.create_task(settler.nack(Nack(held.fence, NackKind.INTERRUPT, now)))
    await asyncio.sleep(0.05)
    assert not nack.done()
    gate.set()
    assert await put is True and await nack is True
    assert [s.name for s in await driver.step_list(held.run_id)] == ["a"]
