"""Lost answers in the newer families, the same on every backend: a write the store committed
whose answer the caller never read (the connection dropped right after the server answered), so
the caller got X_DRIVER_UNAVAILABLE and carries on. Each case asserts its family's promise after
the runtime's own retry: a cron occurrence fired once, the lead and a lock not stuck behind a
holding nobody knows, a posting once, a step's function run once and its record reused, a
consumer's cursor never back and no batch handed twice.

A backend's test file builds a `Rig`: a driver behind its own proxy (the runtime's), a direct
one on the same store (the test's reads), and `lose(token)`, which swallows the answer to the
next request holding `token` (a bind value or script argument only the write under test
carries) and then cuts every connection.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from jobs_core.clock import FakeClock, SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import DriverUnavailableError, TerminalError
from jobs_core.facade import Jobs
from jobs_core.factories.backfill import BackfillRegistry, backfill
from jobs_core.factories.consumers import consumer, function
from jobs_core.factories.consumers.run import lease_key
from jobs_core.factories.ledger import ledger
from jobs_core.factories.webhooks import register_endpoint, webhook, webhook_event
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.jsonform import loads
from jobs_core.leases.lock import with_lock
from jobs_core.outbox import Relay
from jobs_core.records import JobFilter, JobListParams, JobRecord, WebhookAttemptListParams
from jobs_core.retry import Retry
from jobs_core.scheduler import LEADER_KEY, Scheduler, TaskRegistry, task
from jobs_core.states import FINISHED_STATES, JobState
from jobs_core.worker import Worker
from jobs_memory.outbox import MemoryOutbox
from tests.core.support import until
from tests.webhooks.support import SECRET, recording_endpoint

MINUTE = 60_000
HOUR = 60 * MINUTE
#: 2026-06-01T00:00:00Z.
JUNE = 1_780_272_000_000


@dataclass
class Rig:
    """The runtime's driver (behind the proxy), the test's own, and the loss."""

    driver: JobDriver
    direct: JobDriver
    #: Swallow the answer to the next request holding these bytes, then cut.
    lose: Callable[[bytes], None]
    #: How many answers were swallowed so far.
    dropped: Callable[[], int]
    #: `lose`, for a write of several statements in one transaction (Postgres): the answers
    #: go through until its commit's, which is swallowed. A Redis script is one answer.
    lose_commit: Callable[[bytes], None]


async def _jobs(driver: JobDriver) -> list[JobRecord]:
    page = await driver.job_list(JobListParams(JobFilter(), limit=500))
    rows = await driver.job_get_many([s.id for s in page.jobs])
    return sorted(rows.values(), key=lambda r: r.idempotency_key)


def _hourly() -> Any:
    async def report(input: Any, ctx: JobContext) -> None:
        return None

    handle = job(report, tenant="none", idempotency_key=lambda i: "hourly", registry=JobRegistry())
    return task("hourly", cron="0 * * * *", tz="UTC", job=handle, registry=TaskRegistry())


async def fire_lost_fires_each_occurrence_once(rig: Rig) -> None:
    """`task_fire` committed (job enqueued, watermark moved), its answer lost: the round fails,
    the next one is fenced by the stored watermark, which shows the scheduler its own fire
    (the job it sent, the time it sent it): it reports that fire, not a fence — an operator
    reading `jobs.scheduler.fenced` looks for a second scheduler. The occurrence is one job;
    the next occurrence fires as usual."""
    clock = FakeClock(JUNE + 5 * MINUTE)
    s = Scheduler(rig.driver, [_hourly()], clock=clock, lease_ttl=3 * 3600)
    assert await s.tick() == []  # leads, arms the mark
    clock.set(JUNE + HOUR + 1_000)
    rig.lose(f"task:{JUNE + HOUR}:hourly".encode())
    with pytest.raises(DriverUnavailableError):
        await s.tick()
    assert rig.dropped() == 1
    said: list[str] = []
    hear = logging.Handler()
    hear.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("jobs").addHandler(hear)
    try:
        (again,) = await s.tick()
    finally:
        logging.getLogger("jobs").removeHandler(hear)
    (first,) = await _jobs(rig.direct)
    assert not again.fenced and again.job_id == first.id, again
    assert again.occurrence.at_ms == JUNE + HOUR
    assert not [m for m in said if "jobs.scheduler.fenced" in m], said
    clock.set(JUNE + 2 * HOUR + 1_000)
    (second,) = await s.tick()
    assert second.job_id is not None and not second.fenced
    rows = await _jobs(rig.direct)
    assert [r.idempotency_key for r in rows] == [
        f"task:{JUNE + HOUR}:hourly",
        f"task:{JUNE + 2 * HOUR}:hourly",
    ]
    mark = (await rig.direct.task_marks(["hourly"]))["hourly"]
    assert mark.watermark_ms == mark.fired_ms == JUNE + 2 * HOUR
    assert await s.stop(timeout=5)


async def lead_take_lost_leads_at_once(rig: Rig) -> None:
    """The lead's `lease_take` landed, its answer lost: it is asked again at once under the
    scheduler's holder, which replaces the holding nobody knew of (rather than being refused by
    it for a whole TTL, no task firing meanwhile); the lead is one holding, given back at stop."""
    clock = FakeClock(JUNE + 5 * MINUTE)
    s = Scheduler(rig.driver, [_hourly()], clock=clock, lease_ttl=3 * 3600, scheduler_id="s-a")
    rig.lose(b"s-a")
    assert await s.tick() == []
    assert rig.dropped() == 1 and s.leading
    (held,) = await rig.direct.lease_holders(LEADER_KEY, clock.now_ms())
    assert held.holder == "s-a"
    clock.set(JUNE + HOUR + 1_000)
    (fired,) = await s.tick()
    assert fired.job_id is not None
    assert await s.stop(timeout=5)
    assert await rig.direct.lease_holders(LEADER_KEY, clock.now_ms()) == []


async def lock_take_lost_takes_it_again(rig: Rig) -> None:
    """`with_lock`'s `lease_take` landed, its answer lost: it is asked again under the same
    holder, which replaces that holding, so the block runs (rather than the caller failing and
    the key staying locked by nobody for a whole TTL, every other taker timing out behind it);
    the lock is one holding, released after the block."""
    clock = SystemClock()
    rig.lose(b"lock:nightly-report")
    ran: list[int] = []
    async with with_lock("nightly-report", ttl=3600, wait=5, driver=rig.driver) as lock:
        (held,) = await rig.direct.lease_holders("lock:nightly-report", clock.now_ms())
        assert held.token == lock.token
        ran.append(lock.token)
    assert rig.dropped() == 1 and ran
    assert await rig.direct.lease_holders("lock:nightly-report", clock.now_ms()) == []


#: Retried at once: a lost answer fails the attempt, and the next one is what is looked at.
QUICK = Retry(attempts=3, base_ms=20, jitter="none")


async def _run(rig: Rig, handles: list[JobHandle], ids: list[str], within: float = 8.0) -> None:
    """A worker on the runtime's driver until every job of `ids` completed."""
    worker = Worker(rig.driver, handles, concurrency=2, poll_floor=0.01)
    await worker.start()

    async def done() -> bool:
        rows = await rig.direct.job_get_many(ids)
        return all(r.state is JobState.COMPLETED for r in rows.values())

    try:
        await until(done, within=within)
    finally:
        await worker.stop(timeout=5)


async def slot_take_lost_starts_the_job(rig: Rig) -> None:
    """The admission's `lease_take` of a `concurrency=1` slot landed, its answer lost: asked
    again at once under the same holder, it replaces that holding, so the job starts rather than
    waiting a whole lease behind a slot nobody holds; the slot is handed back after the run."""
    ran: list[str] = []

    async def body(input: Any, ctx: JobContext) -> None:
        holders = await rig.direct.lease_holders("job:limited", SystemClock().now_ms())
        assert len(holders) == 1  # the limit, whatever the loss left behind
        ran.append(ctx.job_id)

    handle = job(body, name="limited", tenant="none", concurrency=1, registry=JobRegistry())
    sent = await Jobs(rig.direct).enqueue(handle, {}, key="one")
    rig.lose(b"job:limited")
    await _run(rig, [handle], [sent.id])
    assert rig.dropped() == 1 and ran == [sent.id]
    assert await rig.direct.lease_holders("job:limited", 2**40) == []


def _feed(name: str, seen: list[int], **options: Any) -> Any:
    """A consumer over the numbers 1..5, two a turn, its cursor `pos-<count read>`; what it
    handles goes to `seen`."""
    data = [1, 2, 3, 4, 5]

    def fetch(cursor: Any, limit: int) -> tuple[list[int], str]:
        at = 0 if cursor is None else int(str(cursor)[4:])
        batch = data[at : at + limit]
        return batch, f"pos-{at + len(batch):04d}"

    async def handle(records: list[int], turn: Any) -> None:
        seen.extend(records)

    return consumer(
        name,
        source=function(fetch),
        handle=handle,
        tenant="none",
        batch=2,
        run_for=0.5,
        idle=0.02,
        lease=20.0,
        retry=QUICK,
        registry=JobRegistry(),
        task_registry=TaskRegistry(),
    )


async def consumer_lease_take_lost_runs_its_turns(rig: Rig) -> None:
    """A consumer run's `lease_take` landed, its answer lost: asked again at once under the run's
    holder, the run goes on with its turns, rather than failing and its retry finding the lease
    held by nobody (ending with no turn) until the lease runs out."""
    seen: list[int] = []
    c = _feed("feeds", seen)
    sent = await Jobs(rig.direct).enqueue(c.job, None, key="one")
    rig.lose(lease_key("feeds", None).encode())
    await _run(rig, [c.job], [sent.id])
    assert rig.dropped() == 1
    row = (await rig.direct.job_get_many([sent.id]))[sent.id]
    assert row.result_json is not None
    assert loads(row.result_json)["records"] == 5 and seen == [1, 2, 3, 4, 5]
    assert await rig.direct.lease_holders(lease_key("feeds", None), 2**40) == []


async def cursor_put_lost_never_hands_a_batch_twice(rig: Rig) -> None:
    """A turn's `consumer_cursor_put` landed, its answer lost: the turn reads the stored cursor,
    finds its own, and goes on in the same attempt; no record is handed twice, the cursor never
    goes back, and the rest is read on."""
    seen: list[int] = []
    c = _feed("ticks", seen)
    sent = await Jobs(rig.direct).enqueue(c.job, None, key="one")
    rig.lose(b'"pos-0004"')
    await _run(rig, [c.job], [sent.id])
    assert rig.dropped() == 1
    row = (await rig.direct.job_get_many([sent.id]))[sent.id]
    assert row.attempt == 1 and seen == [1, 2, 3, 4, 5]
    stored = await rig.direct.consumer_cursor_get("ticks", None)
    assert stored is not None and loads(stored.cursor_json) == "pos-0005"


async def posting_put_lost_posts_once(rig: Rig) -> None:
    """A ledger run's `posting_put` landed, its answer lost: it is sent again at once and finds
    the key posted with the same lines (`already_applied`, nothing written), so the run
    completes on its one attempt allowed: posted once."""
    charge = ledger(
        name="charge",
        tenant="none",
        idempotency_key=lambda i: f"charge:{i['invoice']}",
        lines=lambda i: [("customer:c9", "EUR", 1250), ("revenue", "EUR", -1250)],
        retry=Retry(attempts=1),
        registry=JobRegistry(),
    )
    sent = await Jobs(rig.direct).enqueue(charge, {"invoice": "inv-1"})
    rig.lose(b"charge:inv-1")
    await _run(rig, [charge], [sent.id])
    assert rig.dropped() == 1
    row = (await rig.direct.job_get_many([sent.id]))[sent.id]
    assert row.attempt == 1 and row.result_json is not None
    assert loads(row.result_json)["status"] == "already_applied"
    (revenue,) = await rig.direct.posting_balances(None, ["revenue"])
    assert (revenue.credits, revenue.debits) == (1250, 0)


async def step_put_lost_runs_the_step_once(rig: Rig) -> None:
    """A step's `step_put` landed, its answer lost: the worker's settler sends it again under the
    same fence (the first record stays, and the fence still holds), so the run goes on in the
    same attempt; the step's function ran once and its record is the one stored."""
    calls: list[int] = []

    def charge() -> dict[str, str]:
        calls.append(1)
        return {"charged": "tok-77"}

    async def body(input: Any, ctx: JobContext) -> Any:
        return await ctx.step.run("charge-card", charge)

    handle = job(body, name="checkout", tenant="none", retry=QUICK, registry=JobRegistry())
    sent = await Jobs(rig.direct).enqueue(handle, {}, key="one")
    rig.lose(b"charge-card")
    await _run(rig, [handle], [sent.id])
    assert rig.dropped() == 1
    row = (await rig.direct.job_get_many([sent.id]))[sent.id]
    assert row.attempt == 1 and row.result_json is not None
    assert loads(row.result_json) == {"charged": "tok-77"} and calls == [1]
    (step,) = await rig.direct.step_list(row.run_id)
    assert step.name == "charge-card" and loads(step.output_json) == {"charged": "tok-77"}


async def attempt_put_lost_posts_once(rig: Rig) -> None:
    """A delivery's `webhook_attempt_put` landed after its POST, its answer lost: it is sent
    again at once (a claim records one attempt; the repeat answers it), so the run completes
    in the same attempt and the event is POSTed once, recorded once."""
    local = ["127.0.0.0/8"]
    send = webhook(
        "hooks",
        secrets=[SECRET],
        tenant="none",
        allow_networks=local,
        retry=QUICK,
        registry=JobRegistry(),
    )
    with recording_endpoint() as (url, got):
        await register_endpoint(rig.direct, "orders", url, allow_networks=local)
        event = webhook_event("orders", "order.paid", {"id": 42}, id="evt-lost-1")
        sent = await Jobs(rig.direct).enqueue(send, event)
        rig.lose(b"evt-lost-1")
        await _run(rig, [send], [sent.id])
    assert rig.dropped() == 1
    assert [h["webhook-id"] for h, _ in got] == ["evt-lost-1"]
    row = (await rig.direct.job_get_many([sent.id]))[sent.id]
    assert row.attempt == 1
    (attempt,) = await rig.direct.webhook_attempt_list(WebhookAttemptListParams(None, "orders", 10))
    assert (attempt.job_id, attempt.outcome) == (sent.id, "delivered")


def _renumber(handled: list[int], on_rows: Callable[[list[int]], None] | None = None) -> Any:
    """A backfill over 0..5, two a batch, one step per batch, on its one attempt allowed; what
    it handles goes to `handled` (and to `on_rows`)."""

    def pages(cursor: Any, scope: str, limit: int) -> tuple[list[int], Any]:
        start = 0 if cursor is None else cursor
        rows = list(range(start, min(start + limit, 6)))
        return rows, (start + limit if start + limit < 6 else None)

    def handle(rows: list[int]) -> None:
        handled.extend(rows)
        if on_rows is not None:
            on_rows(rows)

    return backfill(
        name="renumber",
        tenant="none",
        handle=handle,
        pages=pages,
        batch=2,
        count=6,
        checkpoint_s=0,
        retry=Retry(attempts=1),
        registry=JobRegistry(),
        backfills=BackfillRegistry(),
    )


async def checkpoint_lost_counts_each_batch_once(rig: Rig) -> None:
    """A backfill's `sweep_checkpoint` (a batch's step record and its ledger advance in one
    write) landed, its answer lost: it is sent again at once (the record stays the first, the
    advance moves once per batch), so the run goes on in the same attempt — on its one attempt
    allowed — and every batch is handled and counted once."""
    handled: list[int] = []
    sweep = _renumber(handled)
    sent = await sweep.enqueue({}, client=Jobs(rig.direct))
    rig.lose(b"batch:1")
    await _run(rig, [sweep], [sent.id])
    assert rig.dropped() == 1 and handled == [0, 1, 2, 3, 4, 5]
    (entry,) = await rig.direct.sweep_list("renumber", 10)
    assert (entry.status, entry.batches, entry.rows) == ("completed", 3, 6)


async def finish_lost_completes_the_sweep(rig: Rig) -> None:
    """A backfill's `sweep_finish` landed, its answer lost: it is sent again at once (a repeat
    ends nothing more), so the run completes on its one attempt allowed instead of being
    dead-lettered with its sweep done; the entry is `completed` once, every batch counted once."""
    handled: list[int] = []

    def at_the_last(rows: list[int]) -> None:
        if 5 in rows:  # the finish is the next write to name a status
            rig.lose(b"completed")

    sweep = _renumber(handled, at_the_last)
    sent = await sweep.enqueue({}, client=Jobs(rig.direct))
    await _run(rig, [sweep], [sent.id])
    assert rig.dropped() == 1 and handled == [0, 1, 2, 3, 4, 5]
    (entry,) = await rig.direct.sweep_list("renumber", 10)
    assert (entry.status, entry.batches, entry.rows) == ("completed", 3, 6)


async def relay_publish_lost_creates_each_job_once(rig: Rig) -> None:
    """The relay's `job_enqueue_many` of a batch committed, its answer lost: the batch drops to
    the row loop, which enqueues each row again under its staged id (`deduped`), and marks them:
    each staged job exists once, and nothing is left to relay."""

    async def noop(input: Any, ctx: JobContext) -> None:
        return None

    handle = job(noop, name="mail", tenant="none", registry=JobRegistry())
    outbox = MemoryOutbox()
    with outbox.transaction() as tx:
        staged = [outbox.stage(tx, handle, {"n": n}, key=f"m{n}") for n in range(4)]
    relay = Relay(outbox, rig.driver, batch=10, poll=3600)
    rig.lose(staged[0].id.encode())
    published = await relay.tick()
    assert rig.dropped() == 1
    published += await relay.tick()
    assert published == 4 and await outbox.outbox_pending(10) == []
    assert sorted(r.id for r in await _jobs(rig.direct)) == sorted(s.id for s in staged)


async def publish_lost_wakes_the_waiter_once(rig: Rig) -> None:
    """`event_publish` committed (the event stored, the parked run woken), its answer lost:
    `send_event` sends the SAME record again, which stores nothing and wakes nothing, so the
    caller is answered with the event's id and the run resumes once with its data. `woken` is
    None, not the 0 the answered call woke: how many the lost first call woke is unknown."""

    async def body(input: Any, ctx: JobContext) -> Any:
        return await ctx.step.wait_for_event("paid", "order.paid", match={"order": 7})

    handle = job(body, name="ship", tenant="none", registry=JobRegistry())
    sent = await Jobs(rig.direct).enqueue(handle, {}, key="one")
    # The worker shares the publisher's driver, as in one process: it has seen where rows wait.
    worker = Worker(rig.driver, [handle], concurrency=2, poll_floor=0.01)
    await worker.start()
    try:

        async def state_is(state: JobState) -> bool:
            return (await rig.direct.job_get_many([sent.id]))[sent.id].state is state

        await until(lambda: state_is(JobState.PARKED), within=8)
        rig.lose_commit(b"evt-paid-7")
        told = await Jobs(rig.driver).send_event(
            "order.paid", {"order": 7}, id="evt-paid-7", tenant_id=None
        )
        got = (rig.dropped(), told.id, told.woken)
        assert got == (1, "evt-paid-7", None), got
        await until(lambda: state_is(JobState.COMPLETED), within=8)
    finally:
        await worker.stop(timeout=5)
    row = (await rig.direct.job_get_many([sent.id]))[sent.id]
    assert row.result_json is not None and loads(row.result_json) == {"order": 7}
    assert row.attempt == 1


async def undo_record_lost_compensates_once(rig: Rig) -> None:
    """A saga's compensation ran and its `~undo:` record landed, its answer lost: the worker's
    settler sends the record again (the first record stays), so the unwinding completes without
    running the compensation twice, and the record is one."""
    undone: list[Any] = []

    async def refund(output: Any) -> None:
        undone.append(output)

    async def order(input: Any, ctx: JobContext) -> None:
        await ctx.step.run("charge", lambda: {"charge": "ch_9"}, compensate=refund)
        raise TerminalError("the shipment was refused")

    handle = job(order, name="order", tenant="none", retry=QUICK, registry=JobRegistry())
    sent = await Jobs(rig.direct).enqueue(handle, {}, key="one")
    rig.lose(b"~undo:charge")
    worker = Worker(rig.driver, [handle], concurrency=2, poll_floor=0.01)
    await worker.start()
    run_id = (await rig.direct.job_get_many([sent.id]))[sent.id].run_id
    try:

        async def unwound() -> bool:
            names = [s.name for s in await rig.direct.step_list(run_id)]
            rows = await _jobs(rig.direct)
            return "~undo:charge" in names and all(r.state in FINISHED_STATES for r in rows)

        await until(unwound, within=8)
    finally:
        await worker.stop(timeout=5)
    assert rig.dropped() == 1 and undone == [{"charge": "ch_9"}]
    names = [s.name for s in await rig.direct.step_list(run_id)]
    assert names.count("~undo:charge") == 1
    assert sorted(r.state for r in await _jobs(rig.direct)) == [JobState.COMPLETED, JobState.DEAD]


Case = Callable[[Rig], Awaitable[None]]
#: Every case, run by each backend's file.
ALL: list[Case] = [
    fire_lost_fires_each_occurrence_once,
    lead_take_lost_leads_at_once,
    lock_take_lost_takes_it_again,
    slot_take_lost_starts_the_job,
    consumer_lease_take_lost_runs_its_turns,
    cursor_put_lost_never_hands_a_batch_twice,
    posting_put_lost_posts_once,
    step_put_lost_runs_the_step_once,
    attempt_put_lost_posts_once,
    checkpoint_lost_counts_each_batch_once,
    finish_lost_completes_the_sweep,
    relay_publish_lost_creates_each_job_once,
    publish_lost_wakes_the_waiter_once,
    undo_record_lost_compensates_once,
]
