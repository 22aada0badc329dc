"""Edges of the families a third mutation pass found thin, each spelled out once:

- every bulk call takes a full `MAX_BULK_IDS` batch (a store binding at most 999 parameters a
  statement answers the rest as unknown), a listing a full `MAX_LIST_LIMIT` page, a task read
  a full `MAX_TASK_BATCH`;
- a watch answers a parked row's wait, as a read does (`flows.py` has a watched row failed or
  buried announced);
- a pause of one kind holds nothing of another kind of the same text;
- a minute folds into the hour it begins in, its last minute too;
- retention reads each final state's own keep, and a state kept forever stays;
- every settle kind is fenced on the worker and on the claims count;
- a read racing a settle sees the row before it or after it, never half of it;
- the operator's re-enable of an endpoint touches its tenant's only; endpoints list by tenant;
- a consumer's later turn rewrites its entry's source and holder; a settled account's balance
  is still answered;
- values at the bounds come back whole: every JSON field at `MAX_JSON_BYTES`, a result nested
  `MAX_JSON_DEPTH` deep, and each family's times near `MAX_TIME_MS` to the millisecond;
- two calls racing (an enqueue of one key, a cursor, a posting, a streak, a pause, a minute's
  count, a waiter's count): one lands, or both count, never a lost update.

Each family's part is a scenario of its own, so a driver without one family still runs the
others'.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from jobs_core.driver import (
    MAX_BULK_IDS,
    MAX_LEASE_MS,
    MAX_LIST_LIMIT,
    MAX_TASK_BATCH,
    MAX_TIME_MS,
    JobDriver,
)
from jobs_core.jsonform import MAX_JSON_BYTES, MAX_JSON_DEPTH
from jobs_core.records import (
    Ack,
    CancelAnswer,
    ConsumerPut,
    CounterReadParams,
    CounterRow,
    EventRecord,
    EventWait,
    Fence,
    Heartbeat,
    JobListParams,
    JoinEnqueue,
    LeaseTake,
    Nack,
    NackKind,
    NewJob,
    Pause,
    PostingLine,
    PostingPut,
    Progress,
    PromoteAnswer,
    PurgeParams,
    RemoveAnswer,
    StepPut,
    TaskFire,
    WebhookAttempt,
    WebhookAttemptListParams,
    WebhookAttemptPut,
    WebhookEndpointEnable,
    WebhookEndpointPut,
)
from jobs_core.semantics import HOUR_MS, MINUTE_MS
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim,
    claim_one,
    exactly,
    ids,
    new_job,
    row,
    same_json,
)


def _many(prefix: str, n: int, **fields: object) -> list[NewJob]:
    return [new_job(f"{prefix}{i:04d}", **fields) for i in range(n)]


async def scenario_bulk_reads_take_a_full_batch(driver: JobDriver) -> None:
    """A read and a watch of `MAX_BULK_IDS` ids answer every one of them, the last included."""
    jobs = _many("r", MAX_BULK_IDS)
    await driver.job_enqueue_many(jobs)
    every = [j.id for j in jobs]
    got = await driver.job_get_many(every)
    assert len(got) == MAX_BULK_IDS and every[-1] in got, f"{len(got)} of {MAX_BULK_IDS} read"
    watched = await driver.job_watch(every)
    assert len(watched) == MAX_BULK_IDS, f"{len(watched)} of {MAX_BULK_IDS} watched"


async def scenario_bulk_operator_calls_take_a_full_batch(driver: JobDriver) -> None:
    """A listing serves a full `MAX_LIST_LIMIT` page; a promote, a cancel and a remove of
    `MAX_BULK_IDS` ids act on every one of them, the last included."""
    jobs = _many("o", MAX_BULK_IDS, run_at_ms=T0 + HOUR_MS)
    await driver.job_enqueue_many(jobs)
    every = [j.id for j in jobs]
    page = await driver.job_list(JobListParams(limit=MAX_LIST_LIMIT))
    assert len(page.jobs) == MAX_LIST_LIMIT, f"a page of {len(page.jobs)}"
    promoted = await driver.job_promote(every, T0)
    assert promoted == [PromoteAnswer.PROMOTED] * MAX_BULK_IDS, promoted[-3:]
    cancelled = await driver.job_cancel_many(every, T0 + 1)
    assert cancelled == [CancelAnswer.CANCELLED] * MAX_BULK_IDS, cancelled[-3:]
    removed = await driver.job_remove(every)
    assert removed == [RemoveAnswer.REMOVED] * MAX_BULK_IDS, removed[-3:]
    assert await driver.job_get_many(every[-2:]) == {}


async def scenario_task_marks_take_a_full_batch(driver: JobDriver) -> None:
    """Marks armed in a batch of `MAX_TASK_BATCH` names are all read back by one such read."""
    names = [f"task-{i:04d}" for i in range(MAX_TASK_BATCH)]
    assert len(await driver.task_arm(names, T0)) == MAX_TASK_BATCH
    marks = await driver.task_marks(names)
    assert len(marks) == MAX_TASK_BATCH and names[-1] in marks, f"{len(marks)} marks read"


async def scenario_watch_answers_a_parked_wait(driver: JobDriver) -> None:
    """A watch answers rows exactly as a read does: a row parked on an event with its wait."""
    await driver.job_enqueue(new_job("p"))
    held = await claim_one(driver, T0)
    wait = EventWait("paid", '{"order": 1}', T0)
    park = Nack(held.fence, NackKind.PARK, T0 + 1, wait=wait)
    assert await driver.job_nack([park]) == [True]
    read = await driver.job_get_many(["p"])
    assert read["p"].wait == wait, read["p"]
    assert await driver.job_watch(["p"]) == read


async def scenario_pauses_of_each_kind_apart(driver: JobDriver) -> None:
    """A queue's pause holds that queue, not a name spelled the same, and a name's pause that
    name, not a queue; a task's pause holds neither. Of two adds of one pause at once, one is
    the add."""
    await driver.job_enqueue_many(
        [
            new_job("in-x", queue="x", name="n"),
            new_job("named-x", queue="y", name="x"),
            new_job("in-z", queue="z", name="n"),
            new_job("named-y", queue="w", name="y"),
        ]
    )
    assert await driver.pause_add(Pause("queue", "x"))
    assert await driver.pause_add(Pause("name", "z"))
    assert await driver.pause_add(Pause("task", "y"))
    assert await driver.pause_add(Pause("task", "w"))
    got, _ = await claim(driver, T0, "x", "y", "z", "w")
    assert sorted(ids(got)) == ["in-z", "named-x", "named-y"], ids(got)
    assert await driver.queue_demand(["x", "z"], T0) == {"x": 0, "z": 0}
    twice = await asyncio.gather(*(driver.pause_add(Pause("queue", "v")) for _ in range(2)))
    assert sorted(twice) == [False, True], twice


async def scenario_counters_fold_an_hours_last_minute(driver: JobDriver) -> None:
    """The last minute of an hour folds into that hour, not the next."""
    h0 = T0 - T0 % HOUR_MS
    last = h0 + HOUR_MS - 1
    await driver.job_enqueue(new_job("late", run_at_ms=h0))
    job = await claim_one(driver, last)
    assert await driver.job_ack([Ack(job.fence, last)]) == [True]
    assert await driver.counter_fold(h0 + 3 * HOUR_MS, 10) == 1
    assert await driver.counter_read(CounterReadParams(0, MAX_TIME_MS)) == [
        CounterRow("n", "q", h0, HOUR_MS, completed=1)
    ]


async def scenario_purge_reads_each_states_keep(driver: JobDriver) -> None:
    """A retention pass removes each final state by its own keep: a state kept forever stays,
    whatever the others' keeps."""
    await driver.job_enqueue_many(
        [new_job(i, queue=f"q-{i}", max_attempts=1) for i in ("done", "gone", "fail", "dead")]
    )
    held = {i: await claim_one(driver, T0, f"q-{i}") for i in ("done", "gone", "fail", "dead")}
    assert await driver.job_ack([Ack(held["done"].fence, T0)]) == [True]
    assert await driver.job_cancel("gone", T0) is CancelAnswer.CANCELLED
    fails = [
        Nack(held["fail"].fence, NackKind.FAIL, T0, error="e", dead_letter=False),
        Nack(held["dead"].fence, NackKind.FAIL, T0, error="e", dead_letter=True),
    ]
    assert await driver.job_nack(fails) == [True, True]
    states = {i: (await row(driver, i)).state for i in held}
    assert states == {
        "done": JobState.COMPLETED,
        "gone": JobState.CANCELLED,
        "fail": JobState.FAILED,
        "dead": JobState.DEAD,
    }, states
    now = T0 + MINUTE_MS
    only_failed = PurgeParams(now, 100, None, None, 0, None)
    assert await driver.job_purge(only_failed) == 1
    assert set(await driver.job_get_many(list(held))) == {"done", "gone", "dead"}
    cancelled_long = PurgeParams(now, 100, 0, 2 * MINUTE_MS, 0, None)
    assert await driver.job_purge(cancelled_long) == 1
    assert set(await driver.job_get_many(list(held))) == {"gone", "dead"}


async def scenario_every_settle_kind_fenced(driver: JobDriver) -> None:
    """Each settle kind (an ack, each nack kind, a heartbeat, progress) lands on its own claim
    only: another worker's fence, or the claims count before or after, changes nothing."""
    kinds = list(NackKind)
    await driver.job_enqueue_many([new_job(k.value) for k in kinds])
    exactly(len(kinds), (await claim(driver, T0))[0], "claimed jobs")
    # Reclaimed by the same worker once the first lease lapsed: each row's claims count is 2.
    held = {j.id: j for j in exactly(len(kinds), (await claim(driver, T0 + 1000))[0], "jobs")}
    for k in kinds:
        f = held[k.value].fence
        assert f.claims == 2, f
        wrong = [
            replace(f, worker_id="w2"),
            replace(f, claims=1),
            replace(f, claims=3),
        ]
        run_at = T0 + 5000 if k in (NackKind.RETRY, NackKind.PARK) else None
        nacks = [Nack(w, k, T0 + 1001, run_at_ms=run_at, error="e") for w in wrong]
        assert await driver.job_nack(nacks) == [False] * 3, k
        assert await driver.job_ack([Ack(w, T0 + 1001, '"r"') for w in wrong]) == [False] * 3
        beats = [Heartbeat(w, 9000, T0 + 1001) for w in wrong]
        assert await driver.job_heartbeat(beats) == [False] * 3
        progress = [Progress(w, "1", T0 + 1001) for w in wrong]
        assert await driver.job_progress(progress) == [False] * 3
        after = await row(driver, k.value)
        assert (after.state, after.lease_until_ms, after.progress_json, after.last_error) == (
            JobState.RUNNING,
            T0 + 2000,
            None,
            None,
        ), (k, after)


async def scenario_reads_never_see_half_a_settle(driver: JobDriver) -> None:
    """Reads racing an ack see the row running, or completed with its result: never between."""
    await driver.job_enqueue(new_job("a"))
    held = await claim_one(driver, T0)
    # The ack's task first, the reads' after it: each read runs at the ack's first wait.
    ack = asyncio.ensure_future(driver.job_ack([Ack(held.fence, T0 + 1, '{"r": 1}')]))
    reads = await asyncio.gather(*(driver.job_get_many(["a"]) for _ in range(4)))
    assert await ack == [True]
    for read in reads:
        r = read["a"]
        assert r.state is JobState.RUNNING or (
            r.state is JobState.COMPLETED and same_json(r.result_json, '{"r": 1}')
        ), r


async def scenario_webhook_side_paths_by_tenant(driver: JobDriver) -> None:
    """Re-enabling a tenant's endpoint that does not exist answers None and leaves another
    tenant's endpoint of the name disabled; a short listing is the first by (tenant, name)."""
    url = "https://hooks.example.com/in"
    await driver.webhook_endpoint_put(WebhookEndpointPut("t2", "a", url, T0))
    await driver.webhook_endpoint_put(WebhookEndpointPut("t1", "b", url, T0))
    first = await driver.webhook_endpoint_list(1)
    assert [(e.tenant_id, e.endpoint) for e in first] == [("t1", "b")], first
    await driver.job_enqueue(new_job("h"))
    held = await claim_one(driver, T0)
    failed = _failed(held.fence, "t1", "b", disable_after=1)
    assert (await driver.webhook_attempt_put(failed)).recorded
    assert await driver.webhook_endpoint_enable(WebhookEndpointEnable("t2", "b", T0 + 1)) is None
    stays = await driver.webhook_endpoint_get("t1", "b")
    assert stays is not None and (stays.enabled, stays.failures) == (False, 1), stays


def _failed(f: Fence, tenant: str, endpoint: str, disable_after: int = 10) -> WebhookAttemptPut:
    return WebhookAttemptPut(
        fence=f,
        tenant_id=tenant,
        endpoint=endpoint,
        event_id=f"msg-{f.job_id}",
        outcome="failed",
        status_code=500,
        latency_ms=12,
        excerpt="oops",
        error="X_WEBHOOK_DELIVERY_FAILED",
        disable_after=disable_after,
        now_ms=T0 + 1,
    )


def _biggest(mark: str) -> str:
    """A JSON string of exactly `MAX_JSON_BYTES` UTF-8 bytes, `mark` and a 2-byte character
    first (a cut keeps them; a column counting characters, not bytes, would take more)."""
    body = mark + "é"
    return '"' + body + "x" * (MAX_JSON_BYTES - 2 - len(body.encode())) + '"'


def _whole(text: str | None, expected: str, what: str) -> None:
    """`text` is the JSON of `expected` (a text cut short is no JSON at all: changed too)."""
    try:
        whole = same_json(text, expected)
    except ValueError:
        whole = False
    assert whole, f"the {what} came back changed"


#: The JSON texts the bound scenarios store, one per field: `MAX_JSON_BYTES` each.
_BIGGEST = {w: _biggest(w) for w in ("input", "progress", "output", "data")}
_DEEPEST = "[" * MAX_JSON_DEPTH + "1" + "]" * MAX_JSON_DEPTH


async def scenario_values_at_the_json_bounds_come_back_whole(driver: JobDriver) -> None:
    """A row's input and progress of exactly `MAX_JSON_BYTES`, and its result nested
    `MAX_JSON_DEPTH` deep, are stored and read back whole."""
    assert {len(t.encode()) for t in _BIGGEST.values()} == {MAX_JSON_BYTES}
    await driver.job_enqueue(new_job("big", input_json=_BIGGEST["input"]))
    await driver.job_enqueue(new_job("deep"))
    big, other = exactly(2, (await claim(driver, T0))[0], "claimed jobs")
    assert await driver.job_progress([Progress(big.fence, _BIGGEST["progress"], T0)]) == [True]
    assert await driver.job_ack([Ack(other.fence, T0 + 1, _DEEPEST)]) == [True]
    r = await row(driver, "big")
    _whole(r.input_json, _BIGGEST["input"], "input")
    _whole(r.progress_json, _BIGGEST["progress"], "progress")
    _whole((await row(driver, "deep")).result_json, _DEEPEST, "deep result")


async def scenario_steps_and_events_at_the_json_bound_come_back_whole(driver: JobDriver) -> None:
    """A step's output and an event's data of exactly `MAX_JSON_BYTES` come back whole."""
    await driver.job_enqueue(new_job("s"))
    held = await claim_one(driver, T0)
    put = StepPut(held.fence, "s", _BIGGEST["output"], T0 + 1)
    assert await driver.step_put([put]) == [True]
    (step,) = await driver.step_list(held.run_id)
    _whole(step.output_json, _BIGGEST["output"], "step output")
    event = EventRecord("e1", "big", _BIGGEST["data"], T0, T0 + HOUR_MS)
    await driver.event_publish(event)
    found = await driver.event_find(EventWait("big", "{}", T0), T0 + 1)
    assert found is not None, "the event is not found"
    _whole(found.data_json, _BIGGEST["data"], "event data")


#: A time just under `MAX_TIME_MS` that a float of seconds does not keep: x / 1000 * 1000 != x.
FAR = MAX_TIME_MS - 200_000


async def scenario_times_near_the_max_to_the_millisecond(driver: JobDriver) -> None:
    """A row's times just under `MAX_TIME_MS` are kept to the millisecond (a float of seconds
    is not), and a lease taken there may end past it."""
    assert int(FAR / 1000 * 1000) != FAR
    await driver.job_enqueue(new_job("far", run_at_ms=FAR, created_at_ms=FAR))
    assert (await row(driver, "far")).run_at_ms == FAR
    assert await claim(driver, FAR - 1) == ([], [])
    held = await claim_one(driver, FAR)
    beat = Heartbeat(held.fence, MAX_LEASE_MS, MAX_TIME_MS)
    assert await driver.job_heartbeat([beat]) == [True]
    assert (await row(driver, "far")).lease_until_ms == MAX_TIME_MS + MAX_LEASE_MS


async def scenario_lease_times_near_the_max(driver: JobDriver) -> None:
    """A holding ending just under `MAX_TIME_MS` ends there to the millisecond."""
    (lease,) = await driver.lease_take([LeaseTake("k", "h", 1, 1000)], FAR - 1000)
    assert lease is not None and lease.expires_at_ms == FAR, lease
    assert await driver.lease_holders("k", FAR - 1) == [lease]
    assert await driver.lease_holders("k", FAR) == []


async def scenario_task_times_near_the_max(driver: JobDriver) -> None:
    """A task's watermark just under `MAX_TIME_MS` is kept to the millisecond."""
    (mark,) = await driver.task_arm(["t"], FAR - 10)
    fire = TaskFire("t", mark.watermark_ms, FAR - 5, FAR, new_job("fired"), FAR - 5)
    assert (await driver.task_fire(fire)).enqueued is not None
    assert (await driver.task_marks(["t"]))["t"].watermark_ms == FAR


async def scenario_event_times_near_the_max(driver: JobDriver) -> None:
    """An event expiring just under `MAX_TIME_MS` is found until that very millisecond."""
    await driver.event_publish(EventRecord("e", "late", "{}", FAR - 100, FAR))
    wait = EventWait("late", "{}", FAR - 100)
    found = await driver.event_find(wait, FAR - 1)
    assert found is not None and found.expires_at_ms == FAR, found
    assert await driver.event_find(wait, FAR) is None


async def scenario_racing_cursor_puts_land_once(driver: JobDriver) -> None:
    """Two turns racing to move one cursor from the same place: one lands, the other is
    refused, and the cursor is the one that landed."""
    jobs = [new_job(i, queue=f"q-{i}") for i in ("c0", "c1", "c2")]
    await driver.job_enqueue_many(jobs)
    f = [(await claim_one(driver, T0, j.queue)).fence for j in jobs]

    def put(fence: Fence, expect: str | None, cursor: str) -> ConsumerPut:
        return ConsumerPut(fence, "orders", "t1", "table:orders", expect, cursor, 1, 0, T0 + 1)

    assert await driver.consumer_cursor_put(put(f[0], None, "1"))
    landed = await asyncio.gather(
        driver.consumer_cursor_put(put(f[1], "1", "2")),
        driver.consumer_cursor_put(put(f[2], "1", "3")),
    )
    assert sorted(landed) == [False, True], landed
    entry = await driver.consumer_cursor_get("orders", "t1")
    assert entry is not None
    assert same_json(entry.cursor_json, "2" if landed[0] else "3"), entry
    assert (entry.turns, entry.records) == (2, 2), entry


async def scenario_consumer_turns_rewrite_the_entry(driver: JobDriver) -> None:
    """A later turn writes the entry's source, holder and job, not only its cursor."""
    jobs = [new_job(i, queue=f"q-{i}") for i in ("t1", "t2")]
    await driver.job_enqueue_many(jobs)
    f1 = (await claim_one(driver, T0, "q-t1", worker="w1")).fence
    f2 = (await claim_one(driver, T0, "q-t2", worker="w2")).fence
    first = ConsumerPut(f1, "orders", None, "table:a", None, "1", 1, None, T0)
    assert await driver.consumer_cursor_put(first)
    later = ConsumerPut(f2, "orders", None, "table:b", "1", "2", 1, None, T0 + 1)
    assert await driver.consumer_cursor_put(later)
    e = await driver.consumer_cursor_get("orders", None)
    assert e is not None and (e.source, e.holder, e.job_id) == ("table:b", "w2", "t2"), e


async def scenario_balances_list_a_settled_account(driver: JobDriver) -> None:
    """An account whose debits equal its credits is still answered, with both sums."""
    await driver.job_enqueue_many(
        [new_job(i, queue=f"q-{i}", idempotency_key=f"pay-{i}") for i in ("in", "out")]
    )
    for i, sign in (("in", 1), ("out", -1)):
        f = (await claim_one(driver, T0, f"q-{i}")).fence
        lines = (PostingLine("cash", "EUR", 5 * sign), PostingLine("revenue", "EUR", -5 * sign))
        answer = await driver.posting_put(PostingPut(f, None, f"pay-{i}", lines, T0 + 1))
        assert answer.status == "applied", answer
    rows = await driver.posting_balances(None, ["cash", "revenue"])
    sums = {r.account: (r.debits, r.credits) for r in rows}
    assert sums == {"cash": (5, 5), "revenue": (5, 5)}, sums


async def scenario_racing_posting_puts_apply_once(driver: JobDriver) -> None:
    """The same posting put twice at once (a resend racing the original) applies once."""
    await driver.job_enqueue(new_job("p", idempotency_key="pay-1"))
    held = await claim_one(driver, T0)
    lines = (PostingLine("cash", "EUR", 5), PostingLine("revenue", "EUR", -5))
    put = PostingPut(held.fence, None, "pay-1", lines, T0 + 1)
    answers = await asyncio.gather(driver.posting_put(put), driver.posting_put(put))
    assert sorted(a.status for a in answers) == ["already_applied", "applied"], answers
    sums = {r.account: (r.debits, r.credits) for r in await driver.posting_balances(None, ["cash"])}
    assert sums == {"cash": (5, 0)}, sums


async def scenario_racing_failures_both_count(driver: JobDriver) -> None:
    """Two failed attempts racing on one endpoint both move its streak."""
    await driver.webhook_endpoint_put(WebhookEndpointPut("t1", "e", "https://h.example/", T0))
    await driver.job_enqueue_many([new_job(i, queue=f"q-{i}") for i in ("h1", "h2")])
    f1 = (await claim_one(driver, T0, "q-h1")).fence
    f2 = (await claim_one(driver, T0, "q-h2")).fence
    answers = await asyncio.gather(
        driver.webhook_attempt_put(_failed(f1, "t1", "e")),
        driver.webhook_attempt_put(_failed(f2, "t1", "e")),
    )
    assert [a.recorded for a in answers] == [True, True], answers
    ep = await driver.webhook_endpoint_get("t1", "e")
    assert ep is not None and ep.failures == 2, ep
    exactly(2, await _attempts_of(driver), "attempts")


async def _attempts_of(driver: JobDriver) -> list[WebhookAttempt]:
    return list(await driver.webhook_attempt_list(WebhookAttemptListParams("t1", "e", 10)))


async def scenario_racing_enqueues_of_one_key_insert_once(driver: JobDriver) -> None:
    """Two enqueues of one idempotency key at once insert one row; the other answers it."""
    a, b = (new_job(i, idempotency_key="same") for i in ("a", "b"))
    answers = await asyncio.gather(driver.job_enqueue(a), driver.job_enqueue(b))
    assert sorted(x.deduped for x in answers) == [False, True], answers
    assert {x.id for x in answers} == {next(x.id for x in answers if not x.deduped)}, answers
    assert len(await driver.job_get_many(["a", "b"])) == 1


async def scenario_racing_acks_both_counted(driver: JobDriver) -> None:
    """Two calls acking at once in one minute both move its completed count."""
    await driver.job_enqueue_many([new_job("a"), new_job("b")])
    a, b = exactly(2, (await claim(driver, T0))[0], "claimed jobs")
    landed = await asyncio.gather(
        driver.job_ack([Ack(a.fence, T0 + 1)]), driver.job_ack([Ack(b.fence, T0 + 1)])
    )
    assert list(landed) == [[True], [True]]
    rows = await driver.counter_read(CounterReadParams(0, MAX_TIME_MS))
    assert sum(r.completed for r in rows) == 2, rows


async def scenario_racing_acks_release_their_waiter(driver: JobDriver) -> None:
    """A waiter's two dependencies acked at once by two calls release it: neither finish is
    lost from its count."""
    await driver.job_enqueue_many([new_job("d1"), new_job("d2")])
    answers = await driver.join_enqueue([JoinEnqueue(new_job("w", queue="later"), ("d1", "d2"))])
    assert answers[0].enqueued is not None and not answers[0].enqueued.deduped, answers
    d1, d2 = exactly(2, (await claim(driver, T0))[0], "claimed jobs")
    await asyncio.gather(
        driver.job_ack([Ack(d1.fence, T0 + 1)]), driver.job_ack([Ack(d2.fence, T0 + 1)])
    )
    w = await row(driver, "w")
    assert w.state is JobState.READY and w.join is not None and w.join.pending == 0, w


GAP_SCENARIOS: dict[str, Scenario] = {
    f.__name__.removeprefix("scenario_"): f
    for f in (
        scenario_bulk_reads_take_a_full_batch,
        scenario_bulk_operator_calls_take_a_full_batch,
        scenario_task_marks_take_a_full_batch,
        scenario_watch_answers_a_parked_wait,
        scenario_pauses_of_each_kind_apart,
        scenario_counters_fold_an_hours_last_minute,
        scenario_purge_reads_each_states_keep,
        scenario_every_settle_kind_fenced,
        scenario_reads_never_see_half_a_settle,
        scenario_webhook_side_paths_by_tenant,
        scenario_values_at_the_json_bounds_come_back_whole,
        scenario_times_near_the_max_to_the_millisecond,
        scenario_steps_and_events_at_the_json_bound_come_back_whole,
        scenario_lease_times_near_the_max,
        scenario_task_times_near_the_max,
        scenario_event_times_near_the_max,
        scenario_racing_enqueues_of_one_key_insert_once,
        scenario_racing_acks_both_counted,
        scenario_racing_acks_release_their_waiter,
        scenario_racing_cursor_puts_land_once,
        scenario_racing_posting_puts_apply_once,
        scenario_consumer_turns_rewrite_the_entry,
        scenario_balances_list_a_settled_account,
        scenario_racing_failures_both_count,
    )
}
