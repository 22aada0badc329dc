"""Edges a mutation pass found the random walks reach from some seeds only: each spelled out
once, so a driver's CI catches the bug whatever its seed.

- a batch of fenced writes settles each item on its own (a stale first item stops nothing; the
  same fence twice lands twice, the later last);
- a retry with no progress keeps the progress stored, and ends the fence for progress too;
- demand counts the rows of a paused name (only a queue's pause zeroes it);
- a listing's states filter keeps every state it names, and ties in `created_at` go by code
  point (`_` between `B` and `a`), never by a case-folding collation;
- the sweep ledger lists by start, not by the last write;
- a requeue into a fresh run keeps every field of the row a requeue in its run keeps (the
  operator walk never requeues into a fresh run);
- one step named twice in one batch keeps the first;
- an event lives past 2**31 ms (25 days), a webhook attempt's latency reaches a day;
- a task's fire dedupes in its job's own namespace, tenant included;
- a listing page that its scan budget ends goes on after the last row it examined, not the
  last it kept;
- a purge breaks a tie between final states by id in code-point order;
- a consumer's put is fenced on the worker too, not on the claims count alone.
"""

from __future__ import annotations

from dataclasses import replace

from jobs_core.driver import MAX_WEBHOOK_LATENCY_MS, JobDriver
from jobs_core.records import (
    Ack,
    ConsumerPut,
    EnqueueResult,
    EventRecord,
    EventWait,
    Fence,
    Heartbeat,
    JobFilter,
    JobListParams,
    JobRecord,
    Nack,
    NackKind,
    NewJob,
    Pause,
    Progress,
    PurgeParams,
    RequeueAnswer,
    RequeueParams,
    StepPut,
    SweepAdvance,
    SweepStart,
    TaskFire,
    WebhookAttemptListParams,
    WebhookAttemptPut,
    WebhookEndpointPut,
)
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim,
    claim_one,
    exactly,
    new_job,
    row,
    same_json,
)


async def scenario_batch_items_settle_each_alone(driver: JobDriver) -> None:
    """A stale item first in a batch of progress, heartbeats or nacks stops none after it; one
    fence twice in a heartbeat batch lands twice, the later beat last; a retry with no progress
    keeps what was stored."""
    await driver.job_enqueue_many([new_job("a"), new_job("b")])
    a, b = exactly(2, (await claim(driver, T0, limit=2))[0], "claimed jobs")
    stale = Fence(a.id, a.claims + 1, a.worker_id)
    progress = [Progress(stale, '{"p": 0}', T0 + 1), Progress(b.fence, '{"p": 1}', T0 + 1)]
    assert await driver.job_progress(progress) == [False, True]
    assert same_json((await row(driver, "b")).progress_json, '{"p": 1}')
    beats = [
        Heartbeat(stale, 9000, T0 + 2),
        Heartbeat(b.fence, 5000, T0 + 2),
        Heartbeat(b.fence, 3000, T0 + 2),
    ]
    assert await driver.job_heartbeat(beats) == [False, True, True]
    assert (await row(driver, "b")).lease_until_ms == T0 + 3002
    assert (await row(driver, "a")).lease_until_ms == T0 + 1000
    nacks = [
        Nack(stale, NackKind.FAIL, T0 + 3, error="x"),
        Nack(b.fence, NackKind.RETRY, T0 + 3, run_at_ms=T0 + 4),
    ]
    assert await driver.job_nack(nacks) == [False, True]
    after = await row(driver, "b")
    assert (after.state, after.run_at_ms) == (JobState.READY, T0 + 4), after
    assert same_json(after.progress_json, '{"p": 1}'), after.progress_json
    # The retry ended the fence: the ready row takes no progress under it.
    assert await driver.job_progress([Progress(b.fence, '{"p": 2}', T0 + 4)]) == [False]
    assert (await row(driver, "a")).state is JobState.RUNNING


async def scenario_demand_counts_name_paused_rows(driver: JobDriver) -> None:
    """A paused name keeps its rows from claims, not from demand; a paused queue answers 0."""
    await driver.job_enqueue_many(
        [new_job("x", queue="q1", name="x"), new_job("y", queue="q1", name="y")]
    )
    assert await driver.queue_demand(["q1"], T0) == {"q1": 2}
    assert await driver.pause_add(Pause("name", "x"))
    assert await driver.queue_demand(["q1"], T0) == {"q1": 2}
    assert (await claim_one(driver, T0, "q1")).id == "y"
    assert await driver.queue_demand(["q1"], T0) == {"q1": 1}


async def scenario_list_states_and_code_point_ties(driver: JobDriver) -> None:
    """A filter of several states keeps each of them; rows created in one millisecond list by
    id descending in code-point order (`a`, `_`, `B`; a case-folding collation puts `_` last)."""
    await driver.job_enqueue_many(
        [new_job(i, created_at_ms=T0) for i in ("B", "_", "a")]
        + [new_job("old", created_at_ms=T0 - 1)]
    )
    page = await driver.job_list(JobListParams(JobFilter(), 10))
    assert [j.id for j in page.jobs] == ["a", "_", "B", "old"], page.jobs
    held = await claim_one(driver, T0, limit=1)
    assert held.id == "B"
    assert await driver.job_nack([Nack(held.fence, NackKind.FAIL, T0 + 1)]) == [True]
    states = frozenset({JobState.READY, JobState.DEAD})
    page = await driver.job_list(JobListParams(JobFilter(states=states), 10))
    assert [j.id for j in page.jobs] == ["a", "_", "B", "old"], page.jobs
    page = await driver.job_list(JobListParams(JobFilter(states=frozenset({JobState.DEAD})), 10))
    assert [j.id for j in page.jobs] == ["B"], page.jobs


async def scenario_sweeps_listed_by_start(driver: JobDriver) -> None:
    """The ledger lists the newest start first, whichever entry was written to last."""
    runs = []
    for i, at in enumerate((T0, T0 + 1)):
        job_id = f"s{i}"
        await driver.job_enqueue(new_job(job_id, queue=f"q-{job_id}", run_at_ms=at))
        runs.append(await claim_one(driver, at, f"q-{job_id}"))
    for job, at in zip(runs, (T0, T0 + 1), strict=True):
        start = SweepStart(
            job.fence, job.run_id, "users", "t1", "default", "backfill", "c1", None, at
        )
        assert (await driver.sweep_start(start)).record is not None
    first = runs[0]
    advance = SweepAdvance(first.fence, first.run_id, 1, 10, 0, None, T0 + 5, 1)
    assert await driver.sweep_advance(advance)
    listed = await driver.sweep_list(None, 1)
    assert [e.run_id for e in listed] == [runs[1].run_id], listed


async def _requeued_pair(driver: JobDriver, a: NewJob, b: NewJob) -> tuple[JobRecord, JobRecord]:
    """Two rows alike but for their ids, keys and runs, claimed, settled alike (an ack with a
    result and progress after a retry with an error), then `a` requeued in its run and `b` in
    a fresh one; both rows after."""
    assert [r.deduped for r in await driver.job_enqueue_many([a, b])] == [False, False]
    for n, settle in enumerate(("retry", "ack")):
        for job in (a, b):
            held = await claim_one(driver, T0 + n, job.queue)
            if settle == "retry":
                retry = Nack(held.fence, NackKind.RETRY, T0, run_at_ms=T0 + 1, error="boom")
                assert await driver.job_nack([retry]) == [True]
            else:
                done = Ack(held.fence, T0 + 2, '{"r": 1}', '{"p": 2}')
                assert await driver.job_ack([done]) == [True]
    plain = await driver.job_requeue_many(RequeueParams((a.id,), T0 + 3))
    fresh = await driver.job_requeue_many(RequeueParams((b.id,), T0 + 3, (f"fresh-{b.id}",)))
    assert plain == fresh == [RequeueAnswer.REQUEUED], (plain, fresh)
    return await row(driver, a.id), await row(driver, b.id)


def _as_other(r: JobRecord, other: JobRecord) -> JobRecord:
    """`r` with `other`'s identity: its id, key, queue, input and run."""
    return replace(
        r,
        id=other.id,
        idempotency_key=other.idempotency_key,
        queue=other.queue,
        input_json=other.input_json,
        run_id=other.run_id,
    )


async def scenario_fresh_requeue_keeps_the_row(driver: JobDriver) -> None:
    """A requeue into a fresh run changes the row's run id alone of what a requeue in its run
    keeps: priority, tenant, attribution, trace context, the last error, the result and the
    progress, the history, the claims; a flow's parent and batch too."""
    fields = {
        "priority": 7,
        "tenant_id": "t1",
        "enqueued_by": "ops",
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        "max_attempts": 5,
    }
    a = new_job("plain", queue="qa", **fields)
    b = new_job("fresh", queue="qb", **fields)
    kept, fresh = await _requeued_pair(driver, a, b)
    assert fresh.run_id == "fresh-fresh", fresh
    assert fresh == _as_other(kept, fresh), (kept, fresh)
    # A flow's links (declared by some drivers only).
    links = {"parent_id": "plain", "batch_id": "batch-1"}
    c = new_job("plain-2", queue="qc", **links)
    d = new_job("fresh-2", queue="qd", **links)
    kept, fresh = await _requeued_pair(driver, c, d)
    assert (fresh.parent_id, fresh.batch_id) == ("plain", "batch-1"), fresh
    assert fresh == _as_other(kept, fresh), (kept, fresh)


async def scenario_steps_first_of_a_batch_kept(driver: JobDriver) -> None:
    """A step named twice in one `step_put` is recorded once, as the first item wrote it."""
    await driver.job_enqueue(new_job("s"))
    held = await claim_one(driver, T0)
    puts = [
        StepPut(held.fence, "charge", '"first"', T0),
        StepPut(held.fence, "charge", '"2nd"', T0),
    ]
    assert await driver.step_put(puts) == [True, True]
    (step,) = exactly(1, await driver.step_list(held.run_id), "recorded steps")
    assert same_json(step.output_json, '"first"'), step


async def scenario_events_live_past_int32_ms(driver: JobDriver) -> None:
    """An event published to live 40 days is still found after 30 (2**31 ms is 24.8 days),
    and outlives every purge until then; a purge takes exactly its limit."""
    day = 86_400_000
    await driver.event_publish(EventRecord("long", "paid", "{}", T0, T0 + 40 * day, None, False))
    found = await driver.event_find(EventWait("paid", "{}", T0), T0 + 30 * day)
    assert found is not None and found.expires_at_ms == T0 + 40 * day, found
    # A purge takes up to its limit of the expired, exactly.
    for i in range(3):
        await driver.event_publish(EventRecord(f"short{i}", "paid", "{}", T0, T0 + i, None, False))
    assert await driver.event_purge(T0 + 10, 2) == 2
    assert await driver.event_purge(T0 + 10, 2) == 1


async def scenario_webhook_latency_of_a_day(driver: JobDriver) -> None:
    """An attempt's latency is kept up to `MAX_WEBHOOK_LATENCY_MS` (a day, in ms: far past a
    16-bit column)."""
    await driver.webhook_endpoint_put(WebhookEndpointPut(None, "slow", "https://slow", T0))
    await driver.job_enqueue(new_job("w"))
    held = await claim_one(driver, T0)
    put = WebhookAttemptPut(
        held.fence, None, "slow", "m", "failed", None, MAX_WEBHOOK_LATENCY_MS, "", "X", 5, T0
    )
    assert (await driver.webhook_attempt_put(put)).recorded
    listed = await driver.webhook_attempt_list(WebhookAttemptListParams(None, "slow", 1))
    assert [a.latency_ms for a in listed] == [MAX_WEBHOOK_LATENCY_MS], listed


async def scenario_task_fire_dedupes_in_its_tenant(driver: JobDriver) -> None:
    """A fire's job whose name and key a live row of another tenant holds is a new row; one of
    the same tenant is deduped to the holder."""
    occ = T0 + 60_000
    held = new_job("held", name="t", idempotency_key="t@occ", tenant_id="t1")
    assert not (await driver.job_enqueue(held)).deduped
    await driver.task_arm(["t"], T0)
    job = new_job("other", name="t", idempotency_key="t@occ", tenant_id="t2")
    fired = await driver.task_fire(TaskFire("t", T0, occ, occ, job, occ))
    assert fired.enqueued == EnqueueResult("other", deduped=False), fired
    job = new_job("same", name="t", idempotency_key="t@occ", tenant_id="t1")
    fired = await driver.task_fire(TaskFire("t", occ, occ + 1, occ + 1, job, occ + 1))
    assert fired.enqueued == EnqueueResult("held", deduped=True), fired


async def scenario_list_resumes_after_the_last_row_examined(driver: JobDriver) -> None:
    """A page whose scan budget ends on rows its filter passes over hands out the position of
    the last row it examined: the next page starts past them."""
    names = ["m", "x", "x", "m", "m", "m"]  # newest first
    await driver.job_enqueue_many(
        [new_job(f"r{i}", name=n, created_at_ms=T0 - i) for i, n in enumerate(names)]
    )
    kept = JobFilter(name="m")
    first = await driver.job_list(JobListParams(kept, limit=10, scan=3))
    assert [j.id for j in first.jobs] == ["r0"] and first.next_cursor is not None, first
    second = await driver.job_list(JobListParams(kept, limit=10, cursor=first.next_cursor, scan=3))
    assert [j.id for j in second.jobs] == ["r3", "r4", "r5"], second.jobs


async def scenario_purge_ties_across_states_by_code_point(driver: JobDriver) -> None:
    """Rows of two final states finished in one millisecond are purged by id in code-point
    order: `B` (completed) before `a` (failed); a case-folding collation takes `a` first."""
    await driver.job_enqueue_many([new_job("a"), new_job("B")])
    held = {j.id: j.fence for j in (await claim(driver, T0, limit=2))[0]}
    assert await driver.job_ack([Ack(held["B"], T0 + 1)]) == [True]
    fail = Nack(held["a"], NackKind.FAIL, T0 + 1, error="x", dead_letter=False)
    assert await driver.job_nack([fail]) == [True]
    assert await driver.job_purge(PurgeParams(T0 + 1, 1, 0, 0, 0, 0)) == 1
    assert sorted(await driver.job_get_many(["a", "B"])) == ["a"]


async def scenario_consumer_put_fenced_on_the_worker(driver: JobDriver) -> None:
    """A cursor put under the row's claims count but another worker's id writes nothing."""
    await driver.job_enqueue(new_job("c"))
    held = await claim_one(driver, T0, worker="w1")
    forged = Fence(held.id, held.claims, "w2")
    put = ConsumerPut(forged, "orders", None, "src", None, "1", 1, None, T0)
    assert not await driver.consumer_cursor_put(put)
    assert await driver.consumer_cursor_get("orders", None) is None
    assert await driver.consumer_cursor_put(replace(put, fence=held.fence))


EDGE_SCENARIOS: dict[str, Scenario] = {
    name.removeprefix("scenario_"): fn
    for name, fn in globals().items()
    if name.startswith("scenario_")
}
