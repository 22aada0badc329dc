"""Text no store can hold (a lone surrogate, a NUL), every driver (memory, Postgres, Redis call
these): every text crossing the driver boundary is refused typed before anything is written,
text the library writes from an exception is made storable, and one such item never sinks the
other jobs of a settle batch."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import MAX_TIME_MS, JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    CounterReadParams,
    EventRecord,
    EventWait,
    Fence,
    Heartbeat,
    JobFilter,
    JobListParams,
    LeaseRef,
    LeaseRenew,
    LeaseTake,
    Nack,
    NackKind,
    Pause,
    Progress,
    RequeueParams,
    StepPut,
    TaskFire,
    WorkerBeat,
)
from jobs_core.retry import Retry
from jobs_core.settle import Settler
from jobs_core.states import JobState
from jobs_core.worker import Worker
from tests.core.support import T0, declare, new_job, until

#: Half an emoji, as `json.loads('"\\ud83d"')` answers: no UTF-8 encoder takes it.
SURROGATE = "\ud83d"
LEASE = 60_000

Call = Callable[[JobDriver], Awaitable[Any]]


def boundary_calls(fence: Fence, bad: str) -> list[tuple[str, Call]]:
    """One call per text a public driver method takes, each with `bad` in that text only."""
    job = new_job("x1", "kx")
    raw = json.dumps(bad, ensure_ascii=False)  # a JSON string holding `bad` as it is
    esc = json.dumps(bad)  # the same, spelled as an escape
    held = dataclasses.replace(fence, worker_id=f"w{bad}")
    r = dataclasses.replace
    calls: list[tuple[str, Call]] = [
        ("enqueue id", lambda d: d.job_enqueue(r(job, id=f"x{bad}"))),
        ("enqueue run_id", lambda d: d.job_enqueue(r(job, run_id=f"r{bad}"))),
        ("enqueue name", lambda d: d.job_enqueue(r(job, name=f"n{bad}"))),
        ("enqueue queue", lambda d: d.job_enqueue(r(job, queue=f"q{bad}"))),
        ("enqueue tenant", lambda d: d.job_enqueue(r(job, tenant_id=f"t{bad}"))),
        ("enqueue key", lambda d: d.job_enqueue(r(job, idempotency_key=f"k{bad}"))),
        ("enqueue by", lambda d: d.job_enqueue(r(job, enqueued_by=f"b{bad}"))),
        ("enqueue input", lambda d: d.job_enqueue(r(job, input_json=raw))),
        ("enqueue input escaped", lambda d: d.job_enqueue(r(job, input_json=esc))),
        ("enqueue input key", lambda d: d.job_enqueue(r(job, input_json=f"{{{raw}:1}}"))),
        (
            "enqueue_many",
            lambda d: d.job_enqueue_many([new_job("ok", "ok"), r(job, name=f"n{bad}")]),
        ),
        ("get_many", lambda d: d.job_get_many([f"x{bad}"])),
        ("cancel_many", lambda d: d.job_cancel_many([f"x{bad}"], T0)),
        ("promote", lambda d: d.job_promote([f"x{bad}"], T0)),
        ("remove", lambda d: d.job_remove([f"x{bad}"])),
        ("requeue_many", lambda d: d.job_requeue_many(RequeueParams((f"x{bad}",), T0))),
        (
            "requeue_many fresh run id",
            lambda d: d.job_requeue_many(RequeueParams(("x",), T0, (f"r{bad}",))),
        ),
        ("claim queue", lambda d: d.job_claim(ClaimParams((f"q{bad}",), "w", 1, LEASE, T0))),
        ("claim worker", lambda d: d.job_claim(ClaimParams(("q",), f"w{bad}", 1, LEASE, T0))),
        (
            "claim drop_exhausted",
            lambda d: d.job_claim(ClaimParams(("q",), "w", 1, LEASE, T0, frozenset({f"n{bad}"}))),
        ),
        (
            "claim beat",
            lambda d: d.job_claim(
                ClaimParams(("q",), "w", 1, LEASE, T0, beat=WorkerBeat("w", raw, LEASE, T0))
            ),
        ),
        ("ack result", lambda d: d.job_ack([Ack(fence, T0, raw)])),
        ("ack progress", lambda d: d.job_ack([Ack(fence, T0, None, esc)])),
        ("ack fence", lambda d: d.job_ack([Ack(held, T0)])),
        ("nack error", lambda d: d.job_nack([Nack(fence, NackKind.RETRY, T0, T0, f"e{bad}")])),
        (
            "nack progress",
            lambda d: d.job_nack([Nack(fence, NackKind.SHED, T0, progress_json=raw)]),
        ),
        (
            "nack wait event",
            lambda d: d.job_nack(
                [Nack(fence, NackKind.PARK, T0, None, wait=EventWait(f"e{bad}", "{}", T0))]
            ),
        ),
        (
            "nack wait match",
            lambda d: d.job_nack(
                [Nack(fence, NackKind.PARK, T0, None, wait=EventWait("e", f'{{"k":{raw}}}', T0))]
            ),
        ),
        ("heartbeat", lambda d: d.job_heartbeat([Heartbeat(held, LEASE, T0)])),
        ("progress", lambda d: d.job_progress([Progress(fence, raw, T0)])),
        ("list queue", lambda d: d.job_list(JobListParams(JobFilter(queue=f"q{bad}")))),
        ("list name", lambda d: d.job_list(JobListParams(JobFilter(name=f"n{bad}")))),
        ("list tenant", lambda d: d.job_list(JobListParams(JobFilter(tenant_id=f"t{bad}")))),
        (
            "counter names",
            lambda d: d.counter_read(CounterReadParams(0, MAX_TIME_MS, names=(f"n{bad}",))),
        ),
        (
            "counter queues",
            lambda d: d.counter_read(CounterReadParams(0, MAX_TIME_MS, queues=(f"q{bad}",))),
        ),
        ("event id", lambda d: d.event_publish(EventRecord(f"e{bad}", "e", "{}", T0, T0 + 1))),
        ("event name", lambda d: d.event_publish(EventRecord("e", f"e{bad}", "{}", T0, T0 + 1))),
        ("event data", lambda d: d.event_publish(EventRecord("e", "e", raw, T0, T0 + 1))),
        (
            "event tenant",
            lambda d: d.event_publish(EventRecord("e", "e", "{}", T0, T0 + 1, f"t{bad}")),
        ),
        ("event data escaped", lambda d: d.event_publish(EventRecord("e", "e", esc, T0, T0 + 1))),
        ("event_find name", lambda d: d.event_find(EventWait(f"e{bad}", "{}", T0), T0)),
        ("event_find match", lambda d: d.event_find(EventWait("e", f'{{"k":{esc}}}', T0), T0)),
        (
            "event_find tenant",
            lambda d: d.event_find(EventWait("e", "{}", T0, tenant_id=f"t{bad}"), T0),
        ),
        ("pause_add", lambda d: d.pause_add(Pause("queue", f"q{bad}"))),
        ("pause_remove", lambda d: d.pause_remove(Pause("name", f"n{bad}"))),
        ("queue_demand", lambda d: d.queue_demand([f"q{bad}"], T0)),
        ("step_list", lambda d: d.step_list(f"r{bad}")),
        ("step_put name", lambda d: d.step_put([StepPut(fence, f"s{bad}", "1", T0)])),
        ("step_put output", lambda d: d.step_put([StepPut(fence, "s", raw, T0)])),
        ("step_put fence", lambda d: d.step_put([StepPut(held, "s", "1", T0)])),
        ("lease_take key", lambda d: d.lease_take([LeaseTake(f"k{bad}", "h", 1, LEASE)], T0)),
        ("lease_take holder", lambda d: d.lease_take([LeaseTake("k", f"h{bad}", 1, LEASE)], T0)),
        ("lease_renew", lambda d: d.lease_renew([LeaseRenew(f"k{bad}", 1, LEASE)], T0)),
        ("lease_release", lambda d: d.lease_release([LeaseRef(f"k{bad}", 1)], T0)),
        ("lease_abandon", lambda d: d.lease_abandon([LeaseRef(f"k{bad}", 1)], T0)),
        ("lease_holders", lambda d: d.lease_holders(f"k{bad}", T0)),
        ("task_arm", lambda d: d.task_arm([f"t{bad}"], T0)),
        ("task_marks", lambda d: d.task_marks([f"t{bad}"])),
        ("task_fire name", lambda d: d.task_fire(TaskFire(f"t{bad}", T0, T0 + 1, T0 + 1, job, T0))),
        (
            "task_fire job",
            lambda d: d.task_fire(TaskFire("t", T0, T0 + 1, T0 + 1, r(job, queue=f"q{bad}"), T0)),
        ),
        ("worker_beat id", lambda d: d.worker_beat(WorkerBeat(f"w{bad}", "{}", LEASE, T0))),
        ("worker_beat info", lambda d: d.worker_beat(WorkerBeat("w", raw, LEASE, T0))),
        ("worker_forget", lambda d: d.worker_forget(f"w{bad}")),
    ]
    return calls


async def _everything(driver: JobDriver, run_id: str) -> tuple[Any, ...]:
    """What a refused call must leave as it was."""
    rows = await driver.job_list(JobListParams(JobFilter(), limit=500))
    return (
        rows.jobs,
        await driver.step_list(run_id),
        await driver.pause_list(),
        await driver.worker_list(T0),
        await driver.queue_stats(T0),
        await driver.counter_read(CounterReadParams(0, MAX_TIME_MS)),
        await driver.task_marks(["t"]),
        await driver.lease_holders("k", T0),
        await driver.event_find(EventWait("e", "{}", 0), T0),
    )


async def every_text_is_refused_before_a_write(driver: JobDriver, bad: str) -> None:
    """Every text a public method takes, holding `bad`: `X_JOB_RECORD_INVALID` naming the
    field, and the store unchanged, on every driver alike."""
    await driver.job_enqueue(new_job("j", "k"))
    (held,) = (await driver.job_claim(ClaimParams(("q",), "w", 1, LEASE, T0))).jobs
    before = await _everything(driver, held.run_id)
    answers: dict[str, str] = {}
    for label, call in boundary_calls(held.fence, bad):
        try:
            await call(driver)
        except JobsError as exc:
            answers[label] = exc.code
        except Exception as exc:  # what the store said about a value nobody checked
            answers[label] = type(exc).__name__
        else:
            answers[label] = "accepted"
    assert answers == dict.fromkeys(answers, "X_JOB_RECORD_INVALID")
    assert await _everything(driver, held.run_id) == before


def quick_worker(driver: JobDriver, handles: list[Any], **options: Any) -> Worker:
    options.setdefault("poll_floor", 0.005)
    options.setdefault("poll_ceiling", 0.05)
    options.setdefault("lease", 10.0)
    return Worker(driver, handles, **options)


async def one_unstorable_value_fails_only_its_own_job(driver: JobDriver) -> None:
    """Ten runs finish a step at the same moment, so their records share one `step_put`, and
    then settle together: one run's step answers half an emoji, one body returns one, one
    reports one as progress, one raises an exception whose message holds one. The run with
    the step fails for good (`X_STEP_OUTPUT_INVALID`) and so does the one with the result
    (`X_JOB_RESULT_INVALID`), each body run once; the progress is dropped; the error is stored
    with the surrogate replaced; every other run's step ran once and its job completed on its
    first attempt."""
    ran: dict[int, int] = {}
    gate = asyncio.Event()
    retry = Retry(attempts=4, base_ms=1, cap_ms=5, jitter="none")

    async def body(input: Any, ctx: JobContext) -> Any:
        n = input["n"]
        await gate.wait()

        def step() -> Any:
            ran[n] = ran.get(n, 0) + 1
            return SURROGATE if n == 0 else n

        out = await ctx.step.run("s", step)
        if n == 1:
            return {"text": SURROGATE}
        if n == 2:
            ctx.progress({"at": SURROGATE})
        if n == 3 and ctx.attempt == 1:
            raise RuntimeError(f"it broke {SURROGATE}")
        return out

    handle = declare(body, name="batched", retry=retry)
    jobs = Jobs(driver)
    ids = [(await jobs.enqueue(handle, {"n": n})).id for n in range(10)]
    worker = quick_worker(driver, [handle], concurrency=10)
    await worker.start()
    try:
        await until(lambda: worker.stats.running == 10, within=20)
        gate.set()

        async def finished() -> bool:
            rows = await driver.job_get_many(ids)
            return all(r.finished_at_ms is not None for r in rows.values())

        await until(finished, within=30)
    finally:
        await worker.stop()
    rows = await driver.job_get_many(ids)
    by_n = [rows[i] for i in ids]
    assert ran == dict.fromkeys(range(10), 1)  # every step ran once, the refused one included
    assert [r.state for r in by_n] == [JobState.DEAD] * 2 + [JobState.COMPLETED] * 8
    assert [r.attempt for r in by_n] == [1, 1, 1, 2, 1, 1, 1, 1, 1, 1]
    assert json.loads(by_n[0].last_error or "")["code"] == "X_STEP_OUTPUT_INVALID"
    assert json.loads(by_n[1].last_error or "")["code"] == "X_JOB_RESULT_INVALID"
    assert by_n[2].progress_json is None and by_n[2].result_json == "2"
    stored = json.loads(by_n[3].last_error or "")
    assert stored["type"] == "RuntimeError" and stored["message"] == "it broke \ufffd"
    assert [r.result_json for r in by_n[3:]] == [str(n) for n in range(3, 10)]
    for r in by_n:
        steps = await driver.step_list(r.run_id)
        assert [s.name for s in steps] == ([] if r is by_n[0] else ["s"])


async def claim_all(driver: JobDriver, n: int) -> list[ClaimedJob]:
    await driver.job_enqueue_many([new_job(f"j{i}", f"k{i}") for i in range(n)])
    got = await driver.job_claim(ClaimParams(("q",), "w", n, LEASE, T0))
    assert len(got.jobs) == n
    return sorted(got.jobs, key=lambda j: j.id)


async def a_settle_batch_with_one_unstorable_ack_lands_the_others(driver: JobDriver) -> None:
    """Six acks submitted together, one with a result no store can hold: that one fails its own
    job (the settler's `replace_invalid`), the other five land once."""
    held = await claim_all(driver, 6)
    replaced: list[str] = []

    def fail_instead(item: Ack | Nack, exc: JobsError) -> Nack:
        replaced.append(f"{item.fence.job_id} {exc.code}")
        return Nack(item.fence, NackKind.FAIL, T0 + 1, error=exc.message)

    settler = Settler(driver, SystemClock(), replace_invalid=fail_instead)
    acks = [
        Ack(j.fence, T0 + 1, json.dumps(SURROGATE if j.id == "j3" else j.id, ensure_ascii=False))
        for j in held
    ]
    answers = await asyncio.gather(*(settler.ack(a) for a in acks))
    await settler.join()
    assert answers == [True] * 6
    assert replaced == ["j3 X_JOB_RECORD_INVALID"]
    rows = await driver.job_get_many([j.id for j in held])
    assert {i: (r.state, r.result_json) for i, r in rows.items()} == {
        j.id: (JobState.DEAD, None) if j.id == "j3" else (JobState.COMPLETED, f'"{j.id}"')
        for j in held
    }


async def a_batch_the_store_fails_on_one_item_is_sent_item_by_item(driver: JobDriver) -> None:
    """Six step records in one batch, one of them never checked and holding a name the store
    cannot encode (what a value that slips past every check would do): the batch fails, is
    sent again item by item, and the five others land once; only that one answers False."""
    held = await claim_all(driver, 6)
    settler = Settler(driver, SystemClock())
    puts = [StepPut(j.fence, SURROGATE if j.id == "j2" else "s", "1", T0 + 1) for j in held]
    answers = await asyncio.gather(*(settler.step_put(p) for p in puts))
    await settler.join()
    assert answers == [j.id != "j2" for j in held]
    for j in held:
        steps = await driver.step_list(j.run_id)
        assert [s.name for s in steps] == ([] if j.id == "j2" else ["s"])


async def send_event_refuses_unstorable_text(driver: JobDriver) -> None:
    """`send_event` with half an emoji in its data (`X_JOB_INPUT_INVALID`, naming the path) or
    its name or id (`X_JOB_RECORD_INVALID`): refused typed, nothing stored, nobody woken."""
    jobs = Jobs(driver)
    with pytest.raises(JobsError) as data:
        await jobs.send_event("paid", {"order": [SURROGATE]})
    with pytest.raises(JobsError) as name:
        await jobs.send_event(f"paid{SURROGATE}", {})
    with pytest.raises(JobsError) as event_id:
        await jobs.send_event("paid", {}, id=f"e{SURROGATE}")
    assert (data.value.code, data.value.detail) == ("X_JOB_INPUT_INVALID", ".order[0]")
    assert (name.value.code, name.value.detail) == ("X_JOB_RECORD_INVALID", "name")
    assert (event_id.value.code, event_id.value.detail) == ("X_JOB_RECORD_INVALID", "id")
    assert await driver.event_find(EventWait("paid", "{}", 0), SystemClock().now_ms()) is None


async def a_forged_cursor_naming_an_unstorable_id_is_a_page_error(driver: JobDriver) -> None:
    """A listing cursor is the caller's text: one whose id no store can hold (made by hand, its
    surrogate escaped in the JSON it wraps) is `X_JOB_PAGE_INVALID`, like any malformed one."""
    await driver.job_enqueue_many([new_job(f"j{i}", f"k{i}") for i in range(3)])
    everything = JobFilter()
    page = await driver.job_list(JobListParams(everything, limit=1))
    assert page.next_cursor is not None
    tag, body = page.next_cursor[:3], page.next_cursor[3:]
    created, job_id, bound_to = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    raw = json.dumps([created, job_id + SURROGATE, bound_to]).encode()
    forged = tag + base64.urlsafe_b64encode(raw).decode().rstrip("=")
    with pytest.raises(JobsError) as info:
        await driver.job_list(JobListParams(everything, limit=1, cursor=forged))
    assert info.value.code == "X_JOB_PAGE_INVALID"


async def a_concurrency_key_no_store_can_hold_fails_its_own_job(driver: JobDriver) -> None:
    """Two keyed jobs claimed in one round, one whose key function answers half an emoji: that
    job fails (`X_JOB_CONCURRENCY_KEY_INVALID`), the other takes its slot and runs: the bad key
    never reaches the round's one `lease_take`, which it would sink for both."""
    ran: list[int] = []

    async def body(input: Any, ctx: JobContext) -> None:
        ran.append(input["n"])

    handle = declare(
        body,
        name="keyed",
        retry=Retry(attempts=1),
        concurrency={"key": lambda i: "k" + SURROGATE * (i["n"] == 0), "limit": 1},
    )
    jobs = Jobs(driver)
    ids = [(await jobs.enqueue(handle, {"n": n})).id for n in range(2)]
    worker = quick_worker(driver, [handle], concurrency=2)
    await worker.start()
    try:

        async def finished() -> bool:
            rows = await driver.job_get_many(ids)
            return all(r.finished_at_ms is not None for r in rows.values())

        await until(finished, within=20)
    finally:
        await worker.stop()
    rows = await driver.job_get_many(ids)
    bad, good = rows[ids[0]], rows[ids[1]]
    assert ran == [1] and good.state is JobState.COMPLETED and bad.state is JobState.DEAD
    assert json.loads(bad.last_error or "")["code"] == "X_JOB_CONCURRENCY_KEY_INVALID"


async def a_worker_on_a_host_whose_name_is_not_utf8_works(driver: JobDriver) -> None:
    """The caller patched `socket.gethostname` to answer what a non-UTF-8 host name decodes to
    (a lone surrogate): the worker's id and registry row carry it made storable, so its claims
    land and it is listed."""
    ran: list[str] = []

    async def body(input: Any, ctx: JobContext) -> None:
        ran.append(ctx.job_id)

    handle = declare(body, name="anywhere")
    done = await Jobs(driver).enqueue(handle, {"n": 1})
    worker = quick_worker(driver, [handle])
    await worker.start()
    try:

        async def listed() -> bool:
            rows = await driver.job_get_many([done.id])
            workers = await driver.worker_list(SystemClock().now_ms())
            return rows[done.id].state is JobState.COMPLETED and bool(workers)

        await until(listed, within=20)
        (info,) = await driver.worker_list(SystemClock().now_ms())
    finally:
        await worker.stop()
    assert ran == [done.id] and worker.worker_id.startswith("host\ufffd:")
    assert json.loads(info.info_json)["host"] == "host\ufffd"
