"""Edges a sampled mutation run (scripts/mutate_memory.py) found the suite blind to, each
spelled out once:

- a waiter that leaves `parked` by another path (cancelled) drops its own edge only: another
  waiter on the same dependency is still released by that dependency's finish;
- a waiter removed while parked takes its pending edges with it: a new row of its id waits
  only for what it joins itself (found by scripts/mutate_stores.py: the Redis removal skipping
  the edges' cleanup of a row that joined);
- a row parked on a join with a deadline and released by its dependency is a due ready row
  to the queue's stats (found by scripts/mutate_stores.py: the Redis release leaving it in
  its queue's parked index);
- a row parked on an event and removed takes its wait with it: the event published later
  wakes nothing (and does not fail), and a new row of the same id shows no wait;
- a counter fold spends what its limit leaves after the minutes it folded on hour buckets to
  drop, exactly that many;
- a counter fold into an hour bucket that already holds counts adds every outcome's count to
  it (found by scripts/mutate_stores.py: an upsert's SET list short of one outcome);
- a queue's oldest due ready row is found behind any number of due parked rows (found by
  scripts/mutate_stores.py: the Redis scan's page one short of its own end test stopped after
  the first page);
- a lease purge examines the first `limit` droppable clocks by (clock, key), no more and no
  fewer: the rest stay, and a caller behind is still judged at them; a key whose last
  holding a purge deleted holds nothing, so a later purge drops its clock.

Each family's part is a scenario of its own, so a driver without one family still runs the
others'.
"""

from __future__ import annotations

from jobs_core.driver import MAX_TIME_MS, JobDriver
from jobs_core.records import (
    Ack,
    CancelAnswer,
    CounterReadParams,
    CounterRow,
    EnqueueResult,
    EventRecord,
    EventWait,
    JoinEnqueue,
    JoinEnqueueAnswer,
    JoinPolicy,
    JoinState,
    LeaseRef,
    LeaseTake,
    Nack,
    NackKind,
    RemoveAnswer,
)
from jobs_core.semantics import HOUR_MS, LEASE_CLOCK_KEEP_MS, MINUTE_MS
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import T0, Scenario, claim, claim_one, new_job, row


async def scenario_a_cancelled_waiter_leaves_its_siblings_linked(driver: JobDriver) -> None:
    """Of three waiters on one dependency, the one cancelled while parked drops its own edge
    only: the dependency's finish still releases the other two."""
    await driver.job_enqueue(new_job("dep"))
    items = [JoinEnqueue(new_job(w, queue="wq"), ("dep",)) for w in ("w1", "w2", "w3")]
    answers = await driver.join_enqueue(items)
    assert answers == [JoinEnqueueAnswer(EnqueueResult(i.job.id, deduped=False)) for i in items]
    assert await driver.job_cancel_many(["w2"], T0) == [CancelAnswer.CANCELLED]
    held = await claim_one(driver, T0 + 1, "q")
    assert held.id == "dep", held
    assert await driver.job_ack([Ack(held.fence, T0 + 2)]) == [True]
    for w in ("w1", "w3"):
        r = await row(driver, w)
        expected = (JobState.READY, T0 + 2, JoinState(1, 0, 0, JoinPolicy.SUCCESS))
        assert (r.state, r.run_at_ms, r.join) == expected, r
    assert (await row(driver, "w2")).state is JobState.CANCELLED


async def scenario_a_removed_waiter_takes_its_edges(driver: JobDriver) -> None:
    """A waiter removed while parked takes its pending edges with it: a new row of its id
    joining another dependency waits for that one only, and the old one's finish moves it not."""
    await driver.job_enqueue_many([new_job("d"), new_job("e")])
    await driver.join_enqueue([JoinEnqueue(new_job("w", queue="wq"), ("d",))])
    assert await driver.job_remove(["w"]) == [RemoveAnswer.REMOVED]
    again = await driver.join_enqueue([JoinEnqueue(new_job("w", queue="wq"), ("e",))])
    assert again == [JoinEnqueueAnswer(EnqueueResult("w", deduped=False))], again
    assert await driver.join_pending(["w"]) == {"w": ("e",)}
    held = await claim_one(driver, T0 + 1, "q", limit=1)
    assert held.id == "d", held
    assert await driver.job_ack([Ack(held.fence, T0 + 2)]) == [True]
    w = await row(driver, "w")
    assert w.state is JobState.PARKED and w.join is not None, w
    assert (w.join.total, w.join.pending) == (1, 1), w.join


async def scenario_a_released_timed_waiter_is_due_ready(driver: JobDriver) -> None:
    """A row parked on a join with a deadline and released by its dependency's finish is a
    due `ready` row: its queue's stats answer its release as the oldest due."""
    await driver.job_enqueue_many([new_job("d"), new_job("w", queue="wq")])
    held = await claim_one(driver, T0, "wq")
    park = Nack(held.fence, NackKind.PARK, T0, T0 + 10_000, join=("d",))
    assert await driver.job_nack([park]) == [True]
    dep = await claim_one(driver, T0 + 1, "q")
    assert await driver.job_ack([Ack(dep.fence, T0 + 2)]) == [True]
    w = await row(driver, "w")
    assert (w.state, w.run_at_ms) == (JobState.READY, T0 + 2), w
    stats = {s.queue: s for s in await driver.queue_stats(T0 + 5)}
    assert stats["wq"].count(JobState.PARKED) == 0, stats
    assert stats["wq"].oldest_ready_at_ms == T0 + 2, stats


async def scenario_a_removed_parked_row_takes_its_wait(driver: JobDriver) -> None:
    """A row parked on an event and then removed leaves no wait behind: the matching event
    published after wakes nothing, and a new row of the same id shows no wait."""
    await driver.job_enqueue(new_job("p"))
    held = await claim_one(driver, T0)
    wait = EventWait("paid", "{}", T0)
    assert await driver.job_nack([Nack(held.fence, NackKind.PARK, T0 + 1, wait=wait)]) == [True]
    assert (await row(driver, "p")).wait == wait
    assert await driver.job_remove(["p"]) == [RemoveAnswer.REMOVED]
    paid = EventRecord("e1", "paid", "{}", T0 + 2, T0 + HOUR_MS)
    assert await driver.event_publish(paid) == 0
    await driver.job_enqueue(new_job("p"))
    again = await row(driver, "p")
    assert (again.state, again.wait) == (JobState.READY, None), again


async def scenario_counter_fold_drops_hours_with_the_limit_left(driver: JobDriver) -> None:
    """A fold whose limit the minutes it folds use up drops no hour; the next ones, with no
    minute left to fold, drop as many hours as their limit, oldest first."""
    h0 = T0 - T0 % HOUR_MS
    await driver.job_enqueue_many([new_job("a"), new_job("b")])
    for at in (h0, h0 + HOUR_MS):
        held = await claim_one(driver, at, limit=1)
        assert await driver.job_ack([Ack(held.fence, at)]) == [True]
    later = T0 + 40 * 24 * HOUR_MS  # both hours are past keeping: a fold may drop them at once
    everything = CounterReadParams(0, MAX_TIME_MS)
    assert await driver.counter_fold(later, 2) == 2
    hours = [CounterRow("n", "q", h, HOUR_MS, completed=1) for h in (h0, h0 + HOUR_MS)]
    assert sorted(await driver.counter_read(everything), key=lambda r: r.bucket_ms) == hours
    assert await driver.counter_fold(later, 1) == 1
    assert await driver.counter_read(everything) == hours[1:]
    assert await driver.counter_fold(later, 1) == 1
    assert await driver.counter_read(everything) == []


async def _settle_once_each_way(driver: JobDriver, tag: str, at: int) -> None:
    """Nine rows of job `n`, due at `at`, each settled there with another outcome; the live
    ones it leaves come due only far later."""
    ways = ("ack", "retry", "dead", "drop", "refuse", "stop", "shed", "park", "cancel")
    await driver.job_enqueue_many([new_job(f"{tag}-{w}", name="n", run_at_ms=at) for w in ways])
    jobs, _ = await claim(driver, at, limit=len(ways))
    held = {j.id.removeprefix(f"{tag}-"): j.fence for j in jobs}
    assert set(held) == set(ways), held
    later = at + 100 * HOUR_MS
    assert await driver.job_ack([Ack(held["ack"], at)]) == [True]
    nacks = [
        Nack(held["retry"], NackKind.RETRY, at, later, "e"),
        Nack(held["dead"], NackKind.FAIL, at, error="e", dead_letter=True),
        Nack(held["drop"], NackKind.FAIL, at, error="e", dead_letter=False),
        Nack(held["refuse"], NackKind.REFUSE, at, error="busy"),
        Nack(held["stop"], NackKind.INTERRUPT, at, later),
        Nack(held["shed"], NackKind.SHED, at, later),
        Nack(held["park"], NackKind.PARK, at, None),
    ]
    assert await driver.job_nack(nacks) == [True] * len(nacks)
    assert await driver.job_cancel_many([f"{tag}-cancel"], at) == [CancelAnswer.CANCELLED]


async def scenario_counter_fold_adds_every_outcome_to_its_hour(driver: JobDriver) -> None:
    """A fold into an hour bucket that already holds counts adds each outcome's minute count
    to the hour's, every outcome alike (the second fold is an update, not an insert)."""
    h0 = T0 - T0 % HOUR_MS
    now = h0 + 2 * HOUR_MS
    everything = CounterReadParams(0, MAX_TIME_MS)
    ones = CounterRow("n", "q", h0, HOUR_MS, *[1] * 9)
    await _settle_once_each_way(driver, "a", h0 + 5 * MINUTE_MS)
    assert await driver.counter_fold(now, 10) == 1
    assert await driver.counter_read(everything) == [ones]
    # Settles landing late, in the hour already folded, fold into the same hour bucket.
    await _settle_once_each_way(driver, "b", h0 + 7 * MINUTE_MS)
    assert await driver.counter_fold(now, 10) == 1
    assert await driver.counter_read(everything) == [CounterRow("n", "q", h0, HOUR_MS, *[2] * 9)]


async def scenario_queue_stats_finds_the_oldest_ready_behind_many_parked(driver: JobDriver) -> None:
    """A queue's oldest due `ready` row is found behind any number of due `parked` rows ahead
    of it in (priority, run_at) order: a store that scans them a page at a time looks past
    every page."""
    parked = [f"p{i:03}" for i in range(200)]
    await driver.job_enqueue_many(
        [new_job(i) for i in parked] + [new_job("r", run_at_ms=T0 + 1_000)]
    )
    jobs, _ = await claim(driver, T0, limit=len(parked))
    assert sorted(j.id for j in jobs) == parked
    nacks = [Nack(j.fence, NackKind.PARK, T0, T0 + 1 + n) for n, j in enumerate(jobs)]
    assert await driver.job_nack(nacks) == [True] * len(parked)
    (stats,) = await driver.queue_stats(T0 + 2_000)
    assert (stats.queue, stats.count(JobState.PARKED), stats.count(JobState.READY)) == (
        "q",
        len(parked),
        1,
    ), stats
    assert stats.oldest_ready_at_ms == T0 + 1_000, stats


async def scenario_lease_purge_drops_at_most_limit_clocks(driver: JobDriver) -> None:
    """Three keys holding nothing, their clocks all droppable: a purge of limit 2 drops the
    first two clocks by (clock, key) and keeps the third, at which a caller behind is judged."""
    ttl = 100
    for n, key in enumerate(("k1", "k2", "k3"), 1):
        at = T0 + 1000 * n
        took = await driver.lease_take([LeaseTake(key, "a", 1, ttl)], at)
        assert took[0] is not None, took
        assert await driver.lease_release([LeaseRef(key, took[0].token)], at) == [True]
    assert await driver.lease_purge(T0 + 3000 + LEASE_CLOCK_KEEP_MS, 2) == 0
    behind = await driver.lease_take([LeaseTake(k, "b", 1, ttl) for k in ("k1", "k2", "k3")], T0)
    ends = [lease.expires_at_ms if lease is not None else None for lease in behind]
    assert ends == [T0 + ttl, T0 + ttl, T0 + 3000 + ttl], ends


async def scenario_lease_purged_empty_key_drops_its_clock(driver: JobDriver) -> None:
    """A key whose only holding a purge deleted holds nothing: its clock (the end deleted) is
    dropped by a purge `LEASE_CLOCK_KEEP_MS` later, and a caller far behind starts afresh."""
    ttl = 100
    took = await driver.lease_take([LeaseTake("k", "a", 1, ttl)], T0)
    assert took[0] is not None, took
    assert await driver.lease_purge(T0 + 2 * ttl, 10) == 1
    # Judged at the end the purge deleted (T0 + ttl), until a later purge drops that clock.
    behind = await driver.lease_take([LeaseTake("k", "b", 1, ttl)], T0)
    assert behind[0] is not None and behind[0].expires_at_ms == T0 + 2 * ttl, behind
    assert await driver.lease_purge(T0 + 3 * ttl, 10) == 1  # b's, ending at T0 + 2 * ttl
    assert await driver.lease_purge(T0 + 2 * ttl + LEASE_CLOCK_KEEP_MS, 10) == 0
    fresh = await driver.lease_take([LeaseTake("k", "c", 1, ttl)], T0)
    assert fresh[0] is not None and fresh[0].expires_at_ms == T0 + ttl, fresh


HOLE_SCENARIOS: dict[str, Scenario] = {
    f.__name__.removeprefix("scenario_"): f
    for f in (
        scenario_a_cancelled_waiter_leaves_its_siblings_linked,
        scenario_a_removed_waiter_takes_its_edges,
        scenario_a_released_timed_waiter_is_due_ready,
        scenario_a_removed_parked_row_takes_its_wait,
        scenario_counter_fold_drops_hours_with_the_limit_left,
        scenario_counter_fold_adds_every_outcome_to_its_hour,
        scenario_queue_stats_finds_the_oldest_ready_behind_many_parked,
        scenario_lease_purge_drops_at_most_limit_clocks,
        scenario_lease_purged_empty_key_drops_its_clock,
    )
}
