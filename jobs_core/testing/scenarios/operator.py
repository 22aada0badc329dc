"""The operator family's scenarios: listing pages, queue stats, bulk calls, counters, and the
purge of the workers' registry."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from jobs_core.driver import MAX_NAME_BYTES, MAX_PURGE_LIMIT, MAX_TIME_MS, JobDriver
from jobs_core.records import (
    Ack,
    CancelAnswer,
    CounterReadParams,
    CounterRow,
    Fence,
    JobFilter,
    JobListParams,
    JobPage,
    JobSummary,
    JoinEnqueue,
    Nack,
    NackKind,
    Pause,
    PromoteAnswer,
    RemoveAnswer,
    RequeueAnswer,
    RequeueParams,
    TaskFire,
    WorkerBeat,
)
from jobs_core.semantics import HOUR_MS, MINUTE_MS
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    accepted,
    claim,
    claim_one,
    exactly,
    new_job,
    refused,
    row,
)

#: A valid W3C trace context, as tracing stamps it on a row.
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


_ANY = JobFilter()


async def page(
    driver: JobDriver,
    f: JobFilter = _ANY,
    *,
    limit: int = 50,
    scan: int = 2_000,
    cursor: str | None = None,
) -> tuple[list[str], str | None]:
    """One listing page: its ids in order and its next cursor."""
    got = await driver.job_list(JobListParams(f, limit, cursor, scan))
    return [j.id for j in got.jobs], got.next_cursor


async def every_page(driver: JobDriver, f: JobFilter, *, limit: int, scan: int) -> list[str]:
    """The ids of a whole listing, page after page."""
    out: list[str] = []
    cursor: str | None = None
    for _ in range(1_000):
        got, cursor = await page(driver, f, limit=limit, scan=scan, cursor=cursor)
        out += got
        if cursor is None:
            return out
    raise AssertionError("the listing never reached its end")


async def scenario_list_newest_first(driver: JobDriver) -> None:
    """Pages walk (created_at, id) descending, ids by code point, and keep their place by key."""
    await driver.job_enqueue_many(
        [
            new_job("b", created_at_ms=T0),
            new_job("B", created_at_ms=T0),
            new_job("é", created_at_ms=T0),
            new_job("a", created_at_ms=T0 + 1),
            new_job("z", created_at_ms=T0 - 1),
        ]
    )
    # Newest first; within one created_at, ids descend by code point ('é' > 'b' > 'B').
    order = ["a", "é", "b", "B", "z"]
    assert await every_page(driver, JobFilter(), limit=50, scan=2_000) == order
    first, cursor = await page(driver, limit=2)
    assert first == ["a", "é"] and cursor is not None
    # The cursor is a position, not a row: removing the row it names loses nothing after it.
    assert await driver.job_remove(["é"]) == [RemoveAnswer.REMOVED]
    rest, cursor = await page(driver, limit=2, cursor=cursor)
    assert rest == ["b", "B"] and cursor is not None
    last, end = await page(driver, limit=2, cursor=cursor)
    assert last == ["z"] and end is None, "the page that examined the oldest row has no cursor"
    # A page that stops exactly at the oldest row has nothing after it either.
    assert (await page(driver, limit=4))[1] is None
    # Summaries carry the row's fields (not its large texts).
    got = await driver.job_list(JobListParams(JobFilter(), 1))
    r = await row(driver, "a")
    assert got.jobs == (JobSummary.of(r),)


async def scenario_list_filters_and_scan_budget(driver: JobDriver) -> None:
    """Filters keep only matching rows; each call examines at most `scan` rows, so a rare
    filter answers short pages with a cursor until the walk reaches the oldest row."""
    jobs = [new_job(f"r{i:02d}", created_at_ms=T0 + i) for i in range(10)]
    jobs[2] = new_job("r02", created_at_ms=T0 + 2, queue="other", tenant_id="t1", name="m")
    jobs[7] = new_job(
        "r07", created_at_ms=T0 + 7, queue="other", tenant_id="t2", name="m", run_at_ms=T0 - 1
    )
    await driver.job_enqueue_many(jobs)
    job = await claim_one(driver, T0, "other", limit=1)
    assert job.id == "r07"
    await driver.job_cancel("r03", T0)

    other = JobFilter(queue="other")
    assert await every_page(driver, other, limit=50, scan=2_000) == ["r07", "r02"]
    assert await every_page(driver, JobFilter(tenant_id="t1"), limit=50, scan=2_000) == ["r02"]
    assert await every_page(driver, JobFilter(name="m"), limit=1, scan=2_000) == ["r07", "r02"]
    running = JobFilter(states=frozenset({JobState.RUNNING}))
    assert await every_page(driver, running, limit=50, scan=2_000) == ["r07"]
    ended = JobFilter(states=frozenset({JobState.CANCELLED, JobState.RUNNING}), queue="q")
    assert await every_page(driver, ended, limit=50, scan=2_000) == ["r03"]

    # scan=3 examines r09, r08, r07: one match, and the walk goes on from r07.
    got, cursor = await page(driver, other, scan=3)
    assert got == ["r07"] and cursor is not None
    # r06, r05, r04: no match, yet not the end.
    got, cursor = await page(driver, other, scan=3, cursor=cursor)
    assert got == [] and cursor is not None
    got, cursor = await page(driver, other, scan=3, cursor=cursor)
    assert got == ["r02"] and cursor is not None
    got, cursor = await page(driver, other, scan=3, cursor=cursor)
    assert got == [] and cursor is None
    # The limit stops the walk before the budget does: the cursor is the last row taken.
    got, cursor = await page(driver, JobFilter(), limit=2, scan=3)
    assert got == ["r09", "r08"]
    got, _ = await page(driver, JobFilter(), limit=1, scan=3, cursor=cursor)
    assert got == ["r07"]


async def scenario_list_cursor_refusals(driver: JobDriver) -> None:
    """A cursor is only good for the filter it was made for; anything else is refused."""
    await driver.job_enqueue_many([new_job(f"c{i}", created_at_ms=T0 + i) for i in range(4)])
    _, cursor = await page(driver, JobFilter(queue="q"), limit=1)
    assert cursor is not None
    _, plain = await page(driver, limit=1)
    assert plain is not None
    assert (await page(driver, JobFilter(queue="q"), limit=1, cursor=cursor))[0] == ["c2"]
    await refused("X_JOB_PAGE_INVALID", page(driver, JobFilter(), cursor=cursor))
    await refused("X_JOB_PAGE_INVALID", page(driver, JobFilter(queue="x"), cursor=cursor))
    await refused("X_JOB_PAGE_INVALID", page(driver, JobFilter(queue="q"), cursor=plain))
    for bad in ("", "nonsense", "c1.", "c1.!!!", cursor[:-3], cursor + "x"):
        await refused("X_JOB_PAGE_INVALID", page(driver, cursor=bad))
    await refused("X_JOB_RECORD_INVALID", page(driver, limit=0))
    await refused("X_JOB_RECORD_INVALID", page(driver, limit=501))
    await refused("X_JOB_RECORD_INVALID", page(driver, scan=0))
    await refused("X_JOB_RECORD_INVALID", page(driver, JobFilter(queue="")))


async def scenario_queue_stats(driver: JobDriver) -> None:
    """Rows by state per queue; the oldest due ready row ignores future, parked and running."""
    await driver.job_enqueue_many(
        [
            new_job("a", run_at_ms=T0 - 50),
            new_job("b", run_at_ms=T0 - 10),
            new_job("c", run_at_ms=T0 + 500),
            new_job("d", run_at_ms=T0 - 99),
            new_job("e", queue="other", run_at_ms=T0 + 1),
            new_job("f", queue="done", run_at_ms=T0),
        ]
    )
    jobs, _ = await claim(driver, T0, "q", limit=1)
    assert [j.id for j in jobs] == ["d"]
    parked = await claim_one(driver, T0, "q", limit=1)
    assert parked.id == "a"
    await driver.job_nack([Nack(parked.fence, NackKind.PARK, T0, None)])
    done = await claim_one(driver, T0, "done")
    await driver.job_ack([Ack(done.fence, T0)])

    stats = await driver.queue_stats(T0)
    assert [s.queue for s in stats] == ["done", "other", "q"]
    by_queue = {s.queue: s for s in stats}
    assert [s for s, _ in by_queue["q"].counts] == list(JobState)
    q = dict(by_queue["q"].counts)
    assert (q[JobState.READY], q[JobState.RUNNING], q[JobState.PARKED]) == (2, 1, 1)
    assert sum(q.values()) == 4
    # b is due (T0 - 10); c is not yet; a is parked; d is running.
    assert by_queue["q"].oldest_ready_at_ms == T0 - 10
    assert by_queue["other"].oldest_ready_at_ms is None
    assert by_queue["other"].count(JobState.READY) == 1
    assert by_queue["done"].count(JobState.COMPLETED) == 1
    assert by_queue["done"].oldest_ready_at_ms is None
    later = {s.queue: s for s in await driver.queue_stats(T0 + 600)}
    assert later["q"].oldest_ready_at_ms == T0 - 10 and later["other"].oldest_ready_at_ms == T0 + 1
    # Due from its run_at's very millisecond.
    exact = {s.queue: s for s in await driver.queue_stats(T0 + 1)}
    assert exact["other"].oldest_ready_at_ms == T0 + 1
    await driver.job_remove(["f"])
    assert [s.queue for s in await driver.queue_stats(T0)] == ["other", "q"]
    # A paused name holds its rows back from claims, not from the statistics.
    assert await driver.pause_add(Pause("name", "n"))
    paused = {s.queue: s for s in await driver.queue_stats(T0)}
    assert paused["q"].oldest_ready_at_ms == T0 - 10, paused["q"]


async def scenario_promote(driver: JobDriver) -> None:
    """Only a ready row due later is promoted (and then claimable); nothing else changes."""
    await driver.job_enqueue_many(
        [
            new_job("later", run_at_ms=T0 + 60_000),
            new_job("due", run_at_ms=T0),
            new_job("run", run_at_ms=T0 - 1),
        ]
    )
    running = await claim_one(driver, T0 - 1, limit=1)
    assert running.id == "run"
    before = await row(driver, "later")
    answers = await driver.job_promote(["later", "due", "run", "nobody", "later"], T0)
    assert answers == [
        PromoteAnswer.PROMOTED,
        PromoteAnswer.ALREADY_DUE,
        PromoteAnswer.NOT_READY,
        PromoteAnswer.NOT_FOUND,
        PromoteAnswer.ALREADY_DUE,
    ]
    after = await row(driver, "later")
    assert after == replace(before, run_at_ms=T0)
    assert (await row(driver, "due")).run_at_ms == T0
    jobs, _ = await claim(driver, T0)
    assert sorted(j.id for j in jobs) == ["due", "later"]
    # A parked row (a sleep, an event wait) is not a delayed job.
    parked = next(j for j in jobs if j.id == "due")
    await driver.job_nack([Nack(parked.fence, NackKind.PARK, T0, T0 + 9_000)])
    assert await driver.job_promote(["due"], T0) == [PromoteAnswer.NOT_READY]
    assert (await row(driver, "due")).run_at_ms == T0 + 9_000


async def scenario_remove(driver: JobDriver) -> None:
    """Remove takes any row but a running one, with its key and id, and counts nothing."""
    await driver.job_enqueue_many(
        [
            new_job("ready", queue="r", idempotency_key="kr"),
            new_job("run", queue="x"),
            new_job("done", queue="d", idempotency_key="k"),
        ]
    )
    await claim_one(driver, T0, "x")
    done = await claim_one(driver, T0, "d")
    await driver.job_ack([Ack(done.fence, T0)])
    counted = await driver.counter_read(CounterReadParams(0, MAX_TIME_MS))

    answers = await driver.job_remove(["done", "run", "nobody", "done", "ready"])
    assert answers == [
        RemoveAnswer.REMOVED,
        RemoveAnswer.RUNNING,
        RemoveAnswer.NOT_FOUND,
        RemoveAnswer.NOT_FOUND,
        RemoveAnswer.REMOVED,
    ]
    assert await driver.job_get_many(["done", "ready"]) == {}
    assert (await row(driver, "run")).state is JobState.RUNNING
    assert await driver.counter_read(CounterReadParams(0, MAX_TIME_MS)) == counted
    assert await driver.queue_demand(["r"], T0) == {"r": 0}
    # The ids and the live key are free again.
    again = await driver.job_enqueue(new_job("done", idempotency_key="k", created_at_ms=T0 + 5))
    assert not again.deduped
    assert (await row(driver, "done")).created_at_ms == T0 + 5
    twin = await driver.job_enqueue(new_job("ready2", queue="r", idempotency_key="kr"))
    assert not twin.deduped
    assert await driver.job_remove([]) == []


async def scenario_bulk_requeue_and_cancel(driver: JobDriver) -> None:
    """Bulk calls answer per id in order; a row requeued earlier in the call holds its key."""
    await driver.job_enqueue_many(
        [new_job("a", idempotency_key="same"), new_job("live", idempotency_key="x")]
    )
    await driver.job_cancel("a", T0)
    await driver.job_enqueue(new_job("b", idempotency_key="same"))
    await driver.job_cancel("b", T0)
    answers = await driver.job_requeue_many(
        RequeueParams(("a", "b", "live", "nobody", "a"), T0 + 1)
    )
    assert answers == [
        RequeueAnswer.REQUEUED,
        RequeueAnswer.DUPLICATE,
        RequeueAnswer.LIVE,
        RequeueAnswer.NOT_FOUND,
        RequeueAnswer.LIVE,
    ]
    a = await row(driver, "a")
    assert (a.state, a.run_at_ms, a.attempt, a.finished_at_ms) == (JobState.READY, T0 + 1, 0, None)
    assert (await row(driver, "b")).state is JobState.CANCELLED
    cancelled = await driver.job_cancel_many(["a", "live", "b", "nobody", "a"], T0 + 2)
    assert cancelled == [
        CancelAnswer.CANCELLED,
        CancelAnswer.CANCELLED,
        CancelAnswer.FINISHED,
        CancelAnswer.NOT_FOUND,
        CancelAnswer.FINISHED,
    ]
    # Now b may take the key back.
    assert await driver.job_requeue_many(RequeueParams(("b",), T0 + 3)) == [RequeueAnswer.REQUEUED]
    too_many = RequeueParams(("a",) * 1_001, T0)
    await refused("X_JOB_BATCH_TOO_LARGE", driver.job_requeue_many(too_many))
    assert (await row(driver, "a")).state is JobState.CANCELLED
    # One string is no list of ids (it was read as the ids of its characters: "ab" named a, b).
    one: Any = "ab"
    await refused("X_JOB_RECORD_INVALID", driver.job_requeue_many(RequeueParams(one, T0 + 4)))
    await refused("X_JOB_RECORD_INVALID", driver.job_cancel_many(one, T0 + 4))
    await refused("X_JOB_RECORD_INVALID", driver.job_promote(one, T0 + 4))
    await refused("X_JOB_RECORD_INVALID", driver.job_remove(one))
    await refused("X_JOB_RECORD_INVALID", driver.job_get_many(one))
    assert (await row(driver, "a")).state is JobState.CANCELLED
    assert (await row(driver, "b")).state is JobState.READY


def _minute(ms: int) -> int:
    return ms - ms % MINUTE_MS


async def scenario_counters_move_with_settles(driver: JobDriver) -> None:
    """Each landed settle moves one counter of its name and minute; a missed one moves none."""
    t = T0 + 30_000  # mid-minute, so T0 + 45_000 is the same minute and T0 + 90_000 the next
    names = ["ack", "retry", "dead", "drop", "park", "shed", "stop", "refuse", "bury", "cancel"]
    await driver.job_enqueue_many(
        [new_job(n, name=n, max_attempts=1 if n == "bury" else 3) for n in names]
    )
    jobs, _ = await claim(driver, t, limit=20, lease_ms=1_000)
    held = {j.id: j for j in jobs}
    assert set(held) == set(names)
    assert await driver.job_ack([Ack(held["ack"].fence, t)]) == [True]
    nacks = [
        Nack(held["retry"].fence, NackKind.RETRY, t, t + 10, "e"),
        Nack(held["dead"].fence, NackKind.FAIL, t, error="e", dead_letter=True),
        Nack(held["drop"].fence, NackKind.FAIL, t, error="e", dead_letter=False),
        Nack(held["park"].fence, NackKind.PARK, t, None),
        Nack(held["shed"].fence, NackKind.SHED, t),
        Nack(held["stop"].fence, NackKind.INTERRUPT, t),
        Nack(held["refuse"].fence, NackKind.REFUSE, t, error="busy"),
    ]
    assert await driver.job_nack(nacks) == [True] * 7
    assert await driver.job_cancel("cancel", t + 15_000) is CancelAnswer.CANCELLED
    # Missed settles move nothing: a stale fence, a forged one, a cancel of a finished row.
    assert await driver.job_ack([Ack(held["ack"].fence, t)]) == [False]
    assert await driver.job_nack([Nack(Fence("retry", 9, "w1"), NackKind.FAIL, t)]) == [False]
    assert await driver.job_cancel("ack", t) is CancelAnswer.FINISHED
    # The bury moves the counter of the minute of the claim that buried it.
    _, buried = await claim(driver, t + 60_000, limit=1)
    assert [b.id for b in buried] == ["bury"]

    got = await driver.counter_read(CounterReadParams(0, MAX_TIME_MS))
    m = _minute(t)
    assert got == sorted(
        [
            CounterRow("ack", "q", m, MINUTE_MS, completed=1),
            CounterRow("bury", "q", _minute(t + 60_000), MINUTE_MS, dead_lettered=1),
            CounterRow("cancel", "q", m, MINUTE_MS, cancelled=1),
            CounterRow("dead", "q", m, MINUTE_MS, dead_lettered=1),
            CounterRow("drop", "q", m, MINUTE_MS, dropped=1),
            CounterRow("park", "q", m, MINUTE_MS, suspended=1),
            CounterRow("refuse", "q", m, MINUTE_MS, refused=1),
            CounterRow("retry", "q", m, MINUTE_MS, retried=1),
            CounterRow("shed", "q", m, MINUTE_MS, shed=1),
            CounterRow("stop", "q", m, MINUTE_MS, interrupted=1),
        ],
        key=lambda r: (r.name, r.queue, r.bucket_ms),
    )
    # Reads by name and by window.
    acks = await driver.counter_read(CounterReadParams(0, MAX_TIME_MS, ("ack",)))
    assert [r.name for r in acks] == ["ack"]
    assert await driver.counter_read(CounterReadParams(m + MINUTE_MS, MAX_TIME_MS, ("ack",))) == []
    assert await driver.counter_read(CounterReadParams(m, m + 1, ("bury",))) == []
    assert await driver.counter_read(CounterReadParams(m, m)) == []
    # The same name settled in another queue counts in a bucket of its own.
    await driver.job_enqueue(new_job("elsewhere", name="ack", queue="other"))
    moved = await claim_one(driver, t, "other")
    await driver.job_ack([Ack(moved.fence, t)])
    in_other = CounterReadParams(0, MAX_TIME_MS, ("ack",), ("other",))
    assert await driver.counter_read(in_other) == [
        CounterRow("ack", "other", m, MINUTE_MS, completed=1)
    ]
    in_q = await driver.counter_read(CounterReadParams(0, MAX_TIME_MS, None, ("q",)))
    assert len(in_q) == 10 and {r.queue for r in in_q} == {"q"}
    # A second ack of the same name in the same minute adds to the same bucket.
    jobs, _ = await claim(driver, t + 20_000, limit=10)
    again = exactly(1, [j for j in jobs if j.id == "retry"], "claim of the retried job")[0]
    await driver.job_ack([Ack(again.fence, t + 25_000)])
    rows = await driver.counter_read(CounterReadParams(m, m + MINUTE_MS, ("retry",)))
    assert rows == [CounterRow("retry", "q", m, MINUTE_MS, completed=1, retried=1)]
    # A settle at a minute's very first millisecond counts in that minute; a read's window
    # starts at its since and stops before its until.
    nxt = m + MINUTE_MS
    await driver.job_enqueue(new_job("edge", name="edge"))
    edge = await claim_one(driver, nxt, limit=1)
    await driver.job_ack([Ack(edge.fence, nxt)])
    at_edge = [CounterRow("edge", "q", nxt, MINUTE_MS, completed=1)]
    assert await driver.counter_read(CounterReadParams(nxt, nxt + 1, ("edge",))) == at_edge
    assert await driver.counter_read(CounterReadParams(m, nxt, ("edge",))) == []


async def scenario_counters_fold(driver: JobDriver) -> None:
    """Minute buckets older than the previous hour fold into their hour, oldest first, up to
    the limit; hour buckets go after 30 days; each bucket is folded once."""
    h0 = T0 - T0 % HOUR_MS
    times = [h0 + 5 * MINUTE_MS, h0 + 40 * MINUTE_MS, h0 + HOUR_MS + 1, h0 + 2 * HOUR_MS + 3]
    await driver.job_enqueue_many(
        [new_job(f"j{i}", name="n", run_at_ms=h0) for i in range(len(times))]
    )
    for t in times:
        job = await claim_one(driver, t, limit=1)
        await driver.job_ack([Ack(job.fence, t)])
    everything = CounterReadParams(0, MAX_TIME_MS)
    assert len(await driver.counter_read(everything)) == 4
    # At h0 + 2h + 10 min the previous hour is h0 + 1h: only the buckets of hour h0 fold.
    now = h0 + 2 * HOUR_MS + 10 * MINUTE_MS
    assert await driver.counter_fold(now, 1) == 1
    minutes = [
        r.bucket_ms for r in await driver.counter_read(everything) if r.width_ms == MINUTE_MS
    ]
    assert minutes == [h0 + 40 * MINUTE_MS, h0 + HOUR_MS, h0 + 2 * HOUR_MS]  # oldest folded first
    assert await driver.counter_fold(now, 10) == 1
    assert await driver.counter_fold(now, 10) == 0
    assert await driver.counter_read(everything) == [
        CounterRow("n", "q", h0, HOUR_MS, completed=2),
        CounterRow("n", "q", h0 + HOUR_MS, MINUTE_MS, completed=1),
        CounterRow("n", "q", h0 + 2 * HOUR_MS, MINUTE_MS, completed=1),
    ]
    # A late settle in an hour already folded lands in a minute bucket and folds into the
    # same hour bucket, adding to it.
    late = await driver.job_enqueue(new_job("late", name="n", run_at_ms=h0))
    job = await claim_one(driver, h0 + 7 * MINUTE_MS, limit=1)
    assert job.id == late.id
    await driver.job_ack([Ack(job.fence, h0 + 7 * MINUTE_MS)])
    assert await driver.counter_fold(now, 10) == 1
    first = await driver.counter_read(CounterReadParams(h0, h0 + 1, ("n",)))
    assert first == [CounterRow("n", "q", h0, HOUR_MS, completed=3)]
    # 30 days on, the hour buckets go too (minute buckets first, then hours, within the limit);
    # one that began exactly 30 days before stays.
    cut = h0 + 30 * 24 * HOUR_MS
    assert await driver.counter_fold(cut, 2) == 2  # the two minute buckets left, into hours
    assert await driver.counter_fold(cut, 10) == 0
    month = cut + 3 * HOUR_MS
    assert await driver.counter_fold(month, 10) == 3  # the three hour buckets
    assert await driver.counter_fold(month, 10) == 0
    assert await driver.counter_read(everything) == []
    await refused("X_JOB_RECORD_INVALID", driver.counter_fold(now, 0))


async def scenario_traceparent_round_trip(driver: JobDriver) -> None:
    """A stamped trace context comes back on the row and on the claim; a bad one is refused."""
    await driver.job_enqueue_many([new_job("t", traceparent=TRACEPARENT), new_job("u")])
    assert (await row(driver, "t")).traceparent == TRACEPARENT
    assert (await row(driver, "u")).traceparent is None
    jobs, _ = await claim(driver, T0)
    assert {j.id: j.traceparent for j in jobs} == {"t": TRACEPARENT, "u": None}
    for bad in ("", "00-abc-def-01", TRACEPARENT.upper(), TRACEPARENT + "0"):
        await refused("X_JOB_RECORD_INVALID", driver.job_enqueue(new_job("v", traceparent=bad)))
    assert await driver.job_get_many(["v"]) == {}
    await accepted(driver.job_enqueue(new_job("v")), "a record without a trace context")


async def scenario_empty_store_answers(driver: JobDriver) -> None:
    """A store with nothing in it lists nothing, has no queues and no counters."""
    assert await driver.job_list(JobListParams()) == JobPage((), None)
    assert await driver.queue_stats(T0) == []
    assert await driver.counter_read(CounterReadParams(0, MAX_TIME_MS)) == []
    assert await driver.counter_fold(T0, 10) == 0
    assert await driver.job_promote(["x"], T0) == [PromoteAnswer.NOT_FOUND]


async def scenario_worker_purge_takes_the_expired_only(driver: JobDriver) -> None:
    """A registry purge deletes the rows expired by its now, soonest expired first, ties by
    worker id, no more than its limit; live rows and rows a beat renewed stay; purgers at once
    delete each row once."""
    await driver.worker_beat(WorkerBeat("w-b", "{}", 1000, T0))
    await driver.worker_beat(WorkerBeat("w-a", "{}", 1000, T0))
    await driver.worker_beat(WorkerBeat("w-c", "{}", 500, T0))
    await driver.worker_beat(WorkerBeat("w-live", "{}", 5000, T0))
    await driver.worker_beat(WorkerBeat("w-back", "{}", 100, T0))
    # w-back expired at T0 + 100 and beat again: alive until T0 + 1300.
    await driver.worker_beat(WorkerBeat("w-back", "{}", 1000, T0 + 300))
    assert await driver.worker_purge(T0 + 499, 10) == 0, "nothing had expired by T0 + 499"
    assert await driver.worker_purge(T0 + 1000, 2) == 2
    # w-c ended first, then w-a before w-b (the same end, ids in order).
    assert await driver.worker_forget("w-c") is False
    assert await driver.worker_forget("w-a") is False
    assert await driver.worker_purge(T0 + 1000, 10) == 1, "w-b is the one left"
    assert await driver.worker_forget("w-b") is False
    listed = await driver.worker_list(T0 + 1000)
    assert [w.worker_id for w in listed] == ["w-back", "w-live"], listed
    for i in range(5):
        await driver.worker_beat(WorkerBeat(f"gone-{i}", "{}", 100, T0 + 2000))
    counts = await asyncio.gather(*(driver.worker_purge(T0 + 2100, 2) for _ in range(4)))
    assert sum(counts) == 6 and all(n <= 2 for n in counts), counts  # w-back too
    assert [w.worker_id for w in await driver.worker_list(T0 + 2100)] == ["w-live"]
    await refused("X_JOB_RECORD_INVALID", driver.worker_purge(T0, 0))
    await refused("X_JOB_RECORD_INVALID", driver.worker_purge(T0, MAX_PURGE_LIMIT + 1))


#: The operator family's scenarios by name (the function name without `scenario_`).
# -- acts-for: the org a row acts for, stored at enqueue, listed and filtered on --------------


async def scenario_acts_for_stored_and_listed(driver: JobDriver) -> None:
    """The org a row acts for comes back as enqueued (one by one and in a batch), apart from the
    enqueuer's tenant: a listing by one never keeps rows by the other. Refused like a tenant
    (empty, NUL, a lone surrogate, over the byte limit) with nothing written; a removed row's
    org goes with it."""
    long_org = "o" * (MAX_NAME_BYTES - 2) + "é"
    await driver.job_enqueue(new_job("a", created_at_ms=T0, acts_for="org_1"))
    await driver.job_enqueue_many(
        [
            new_job("b", created_at_ms=T0 + 1, tenant_id="org_1"),
            new_job("c", created_at_ms=T0 + 2, tenant_id="org_2", acts_for="org_1"),
            new_job("d", created_at_ms=T0 + 3, acts_for=long_org),
        ]
    )
    rows = await driver.job_get_many(["a", "b", "c", "d"])
    assert {i: r.acts_for for i, r in rows.items()} == {
        "a": "org_1",
        "b": None,
        "c": "org_1",
        "d": long_org,
    }
    assert rows["c"].tenant_id == "org_2"
    acting = JobFilter(acts_for="org_1")
    assert await every_page(driver, acting, limit=1, scan=2_000) == ["c", "a"]
    assert await every_page(driver, JobFilter(tenant_id="org_1"), limit=50, scan=50) == ["b"]
    both = JobFilter(tenant_id="org_2", acts_for="org_1")
    assert await every_page(driver, both, limit=50, scan=50) == ["c"]
    got = await driver.job_list(JobListParams(filter=JobFilter(acts_for=long_org)))
    assert got.jobs == (JobSummary.of(rows["d"]),)
    _, cursor = await page(driver, acting, limit=1)
    assert cursor is not None
    await refused("X_JOB_PAGE_INVALID", page(driver, _ANY, cursor=cursor))
    for bad in ("", "a\x00b", "\ud800", long_org + "x"):
        await refused("X_JOB_RECORD_INVALID", driver.job_enqueue(new_job("e", acts_for=bad)))
        await refused("X_JOB_RECORD_INVALID", page(driver, JobFilter(acts_for=bad)))
    assert await driver.job_get_many(["e"]) == {}
    assert await driver.job_remove(["a"]) == [RemoveAnswer.REMOVED]
    await driver.job_enqueue(new_job("a", created_at_ms=T0 + 4))
    assert (await row(driver, "a")).acts_for is None


async def scenario_acts_for_kept_by_every_write(driver: JobDriver) -> None:
    """The org a row acts for is written by every call that inserts a row (a task's fire, a
    join's enqueue, as `job_enqueue`) and kept by every later write of the row: its claim, its
    retry and final nacks, a plain requeue and a fresh one (a new run, the same org); a deduped
    enqueue keeps the holder's. (A saga's unwind is a row of its own, enqueued acting for the
    failed run's org: `jobs_core.steps.unwind.unwind_org`.)"""
    await driver.job_enqueue(new_job("a", acts_for="org_1"))
    twin = await driver.job_enqueue(new_job("a2", idempotency_key="key-a", acts_for="org_2"))
    assert twin.deduped and twin.id == "a"
    held = await claim_one(driver, T0)
    assert await driver.job_nack([Nack(held.fence, NackKind.RETRY, T0 + 1, T0 + 2, error="e")]) == [
        True
    ]
    assert (await row(driver, "a")).acts_for == "org_1"
    held = await claim_one(driver, T0 + 2)
    done = Nack(held.fence, NackKind.FAIL, T0 + 3, error="e", dead_letter=True)
    assert await driver.job_nack([done]) == [True]
    assert (await row(driver, "a")).state is JobState.DEAD
    assert await driver.job_requeue_many(RequeueParams(("a",), T0 + 4)) == [RequeueAnswer.REQUEUED]
    assert (await row(driver, "a")).acts_for == "org_1"
    await driver.job_cancel("a", T0 + 5)
    fresh = RequeueParams(("a",), T0 + 6, fresh_run_ids=("run-a-2",))
    assert await driver.job_requeue_many(fresh) == [RequeueAnswer.REQUEUED]
    again = await row(driver, "a")
    assert (again.run_id, again.acts_for) == ("run-a-2", "org_1")
    caps = driver.capabilities()
    if caps.flows:
        answer = await driver.join_enqueue([JoinEnqueue(new_job("w", acts_for="org_3"), ("a",))])
        assert answer[0].enqueued is not None and not answer[0].enqueued.deduped
        assert (await row(driver, "w")).acts_for == "org_3"
    if caps.tasks:
        assert len(await driver.task_arm(["t"], T0)) == 1
        fire = TaskFire("t", T0, T0 + MINUTE_MS, T0 + MINUTE_MS, new_job("f", acts_for="org_4"), T0)
        assert (await driver.task_fire(fire)).fired
        assert (await row(driver, "f")).acts_for == "org_4"


OPERATOR_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_bulk_requeue_and_cancel,
        scenario_counters_fold,
        scenario_counters_move_with_settles,
        scenario_empty_store_answers,
        scenario_list_cursor_refusals,
        scenario_list_filters_and_scan_budget,
        scenario_list_newest_first,
        scenario_promote,
        scenario_queue_stats,
        scenario_remove,
        scenario_traceparent_round_trip,
        scenario_worker_purge_takes_the_expired_only,
        scenario_acts_for_stored_and_listed,  # acts-for
        scenario_acts_for_kept_by_every_write,  # acts-for
    )
}
