"""The flow family's scenarios: rows parked on a join, released by the very write that finishes
the last job they wait for (every finishing path), each (waiter, dependency) pair counted once;
a PARK nack's join; watched rows announced; parent and batch links stored, listed, filtered.

Waiters mostly sit in their own queue (`wq`), apart from the dependencies' (`q`); one scenario
pins what a claim does with a waiter of its own queue that its bury releases (it is not among
that claim's candidates; the next claim takes it).

A driver that does not declare the family must refuse its calls with
`X_DRIVER_CAPABILITY_MISSING`; these scenarios check that much and stop there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from jobs_core.driver import MAX_JOIN_IDS, JobDriver
from jobs_core.records import (
    Ack,
    CancelAnswer,
    ClaimedJob,
    EnqueueResult,
    EventWait,
    Fence,
    JobFilter,
    JobListParams,
    JobRecord,
    JoinEnqueue,
    JoinEnqueueAnswer,
    JoinPolicy,
    JoinState,
    Nack,
    NackKind,
    NewJob,
    RemoveAnswer,
    RequeueParams,
)
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim,
    claim_one,
    exactly,
    ids,
    new_job,
    refused,
    row,
    until_live,
)

SUCCESS = JoinPolicy.SUCCESS
ALWAYS = JoinPolicy.ALWAYS
#: How long a scenario waits for a finish announcement (a hint: a store delivers it async).
ANNOUNCE_WAIT_S = 5.0


async def _unsupported(driver: JobDriver) -> bool:
    """True (and the refusal checked) when the driver does not offer the flow family."""
    if driver.capabilities().flows:
        return False
    await refused(
        "X_DRIVER_CAPABILITY_MISSING",
        driver.join_enqueue([JoinEnqueue(new_job("w"), ("a",))]),
    )
    return True


def waiter(job_id: str, **fields: Any) -> NewJob:
    """A waiter's record: queue `wq`, due at `T0 + 50` once its join lets it."""
    return new_job(job_id, queue="wq", run_at_ms=T0 + 50, **fields)


def join(
    job_id: str, after: Sequence[str], policy: JoinPolicy = SUCCESS, **fields: Any
) -> JoinEnqueue:
    return JoinEnqueue(waiter(job_id, **fields), tuple(after), policy)


async def joined(driver: JobDriver, *items: JoinEnqueue) -> None:
    """`join_enqueue` of `items`, each of which must insert its job."""
    answers = await driver.join_enqueue(list(items))
    expected = [JoinEnqueueAnswer(EnqueueResult(i.job.id, deduped=False)) for i in items]
    assert answers == expected, answers


async def parked(driver: JobDriver, job_id: str, state: JoinState) -> JobRecord:
    """Assert `job_id` waits, parked without a due time, on a join standing at `state`."""
    r = await row(driver, job_id)
    assert (r.state, r.run_at_ms, r.join) == (JobState.PARKED, None, state), r
    return r


async def released(driver: JobDriver, job_id: str, at: int, state: JoinState) -> JobRecord:
    """Assert `job_id` is `ready` at `at` (its release's now), its join kept at `state`."""
    r = await row(driver, job_id)
    assert (r.state, r.run_at_ms, r.join) == (JobState.READY, at, state), r
    return r


async def running(driver: JobDriver, now: int, *job_ids: str) -> dict[str, Fence]:
    """Claim exactly `job_ids` from queue `q` at `now`; their fences by id."""
    jobs, buried = await claim(driver, now, "q", limit=len(job_ids) + 5)
    assert buried == [] and sorted(ids(jobs)) == sorted(job_ids), (jobs, buried)
    return {j.id: j.fence for j in jobs}


async def enqueue(driver: JobDriver, *jobs: NewJob) -> None:
    answers = await driver.job_enqueue_many(list(jobs))
    assert answers == [EnqueueResult(j.id, deduped=False) for j in jobs], answers


async def finished(driver: JobDriver, now: int, **ends: JobState) -> None:
    """Enqueue, claim and settle one dependency per keyword: `completed` by an ack, `dead` or
    `failed` by a FAIL nack, `cancelled` by a cancel of the ready row; all at `now`."""
    # A row to cancel is not due: the claim of the others leaves it ready.
    later = {i: now + 10**9 if s is JobState.CANCELLED else now for i, s in ends.items()}
    await enqueue(driver, *(new_job(i, run_at_ms=at) for i, at in later.items()))
    claimed = [i for i, s in ends.items() if s is not JobState.CANCELLED]
    fences = await running(driver, now, *claimed) if claimed else {}
    for job_id, state in ends.items():
        if state is JobState.COMPLETED:
            assert await driver.job_ack([Ack(fences[job_id], now)]) == [True]
        elif state is JobState.CANCELLED:
            assert await driver.job_cancel(job_id, now) is CancelAnswer.CANCELLED
        else:
            dead = state is JobState.DEAD
            fail = Nack(fences[job_id], NackKind.FAIL, now, error="x", dead_letter=dead)
            assert await driver.job_nack([fail]) == [True]
        assert (await row(driver, job_id)).state is state


# -- join_enqueue ---------------------------------------------------------------------------------


async def scenario_flows_join_enqueue_counts_its_dependencies(driver: JobDriver) -> None:
    """An inserted waiter counts its dependencies as they stand: parked without a due time while
    any is live, `ready` at its own `run_at_ms` when none is; a later item may name an earlier
    item's job."""
    if await _unsupported(driver):
        return
    await finished(driver, T0, b=JobState.COMPLETED, c=JobState.DEAD, d=JobState.CANCELLED)
    # `e` running, `late` ready but not due yet: both live.
    await enqueue(driver, new_job("e"), new_job("late", run_at_ms=T0 + 10_000))
    await running(driver, T0, "e")
    await joined(
        driver,
        join("w1", ["late", "e"]),
        join("w2", ["late", "b"]),
        join("w3", ["b", "c", "late"]),
        join("w4", ["b", "c", "d"], ALWAYS),
        join("w5", ["b"]),
        join("w6", ["w1"]),
    )
    await parked(driver, "w1", JoinState(2, 2, 0, SUCCESS))
    await parked(driver, "w2", JoinState(2, 1, 0, SUCCESS))
    await parked(driver, "w3", JoinState(3, 1, 1, SUCCESS))
    await released(driver, "w4", T0 + 50, JoinState(3, 0, 2, ALWAYS))
    await released(driver, "w5", T0 + 50, JoinState(1, 0, 0, SUCCESS))
    await parked(driver, "w6", JoinState(1, 1, 0, SUCCESS))
    # A waiter is not due: a claim of its queue takes only the released ones, with their join.
    jobs, buried = await claim(driver, T0 + 50, "wq")
    assert buried == [] and ids(jobs) == ["w4", "w5"], jobs
    assert [j.join for j in jobs] == [JoinState(3, 0, 2, ALWAYS), JoinState(1, 0, 0, SUCCESS)]
    # A plain row never joined: it answers no join, nor does its claim.
    late = await claim_one(driver, T0 + 10_000, "q", reclaim_until_ms=T0)
    assert late.id == "late" and late.join is None
    assert (await row(driver, "late")).join is None


async def scenario_flows_join_enqueue_missing_dependency_writes_nothing(
    driver: JobDriver,
) -> None:
    """An item naming an unknown dependency answers those ids in `after`'s order and writes
    nothing — not its row, not its key; the items around it go on."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"))
    answers = await driver.join_enqueue(
        [join("x", ["zz", "a", "mm"]), join("y", ["a"]), join("z", ["x"])]
    )
    assert answers == [
        JoinEnqueueAnswer(None, ("zz", "mm")),
        JoinEnqueueAnswer(EnqueueResult("y", deduped=False)),
        JoinEnqueueAnswer(None, ("x",)),
    ], answers
    assert set(await driver.job_get_many(["x", "y", "z"])) == {"y"}
    # Neither the id nor the key of a refused item is held.
    plain = new_job("x2", name="n", idempotency_key="key-x")
    assert await driver.job_enqueue(plain) == EnqueueResult("x2", deduped=False)
    again = new_job("x", idempotency_key="key-x-again")
    assert await driver.job_enqueue(again) == EnqueueResult("x", deduped=False)
    assert (await row(driver, "x")).join is None
    await parked(driver, "y", JoinState(1, 1, 0, SUCCESS))


async def scenario_flows_join_enqueue_dedupes_and_writes_nothing_more(driver: JobDriver) -> None:
    """A deduped item (its id names a row, or a live row holds its key) answers as an enqueue
    does and neither parks nor links the row it names; a missing dependency is answered first."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"), waiter("w"))
    before = await row(driver, "w")
    answers = await driver.join_enqueue(
        [
            join("w", ["a"]),
            join("k2", ["a"], idempotency_key="key-w"),
            join("w", ["nope"]),
        ]
    )
    assert answers == [
        JoinEnqueueAnswer(EnqueueResult("w", deduped=True)),
        JoinEnqueueAnswer(EnqueueResult("w", deduped=True)),
        JoinEnqueueAnswer(None, ("nope",)),
    ], answers
    assert await row(driver, "w") == before and before.join is None
    assert "k2" not in await driver.job_get_many(["k2"])
    # The finish of `a` moves nothing: nobody joined it.
    fences = await running(driver, T0, "a")
    assert await driver.job_ack([Ack(fences["a"], T0 + 1)]) == [True]
    assert await row(driver, "w") == before


# -- every finishing path ---------------------------------------------------------------------


async def scenario_flows_each_finish_releases_its_waiter(driver: JobDriver) -> None:
    """Ack, FAIL (dead, failed), REFUSE, a claim's bury and a cancel (ready or running) each
    release a waiter at the finish's own now; only `completed` is not counted as failed."""
    if await _unsupported(driver):
        return
    deps = ["ack", "dead", "failed", "refuse", "cancel-r", "cancel-ready"]
    await enqueue(driver, *(new_job(d) for d in deps if d != "cancel-ready"))
    await enqueue(driver, new_job("bury", max_attempts=1))
    await enqueue(driver, new_job("cancel-ready", run_at_ms=T0 + 10_000))
    await joined(driver, *(join(f"w-{d}", [d]) for d in [*deps, "bury"]))
    every = ("ack", "dead", "failed", "refuse", "cancel-r", "cancel-ready", "bury")
    await joined(driver, join("all", every, ALWAYS))
    f = await running(driver, T0, "ack", "dead", "failed", "refuse", "cancel-r", "bury")
    await parked(driver, "all", JoinState(7, 7, 0, ALWAYS))

    assert await driver.job_ack([Ack(f["ack"], T0 + 10)]) == [True]
    await released(driver, "w-ack", T0 + 10, JoinState(1, 0, 0, SUCCESS))
    await parked(driver, "all", JoinState(7, 6, 0, ALWAYS))

    dead = Nack(f["dead"], NackKind.FAIL, T0 + 11, error="x", dead_letter=True)
    assert await driver.job_nack([dead]) == [True]
    await released(driver, "w-dead", T0 + 11, JoinState(1, 0, 1, SUCCESS))

    failed = Nack(f["failed"], NackKind.FAIL, T0 + 12, error="x", dead_letter=False)
    assert await driver.job_nack([failed]) == [True]
    await released(driver, "w-failed", T0 + 12, JoinState(1, 0, 1, SUCCESS))

    refuse = Nack(f["refuse"], NackKind.REFUSE, T0 + 13, error="x")
    assert await driver.job_nack([refuse]) == [True]
    await released(driver, "w-refuse", T0 + 13, JoinState(1, 0, 1, SUCCESS))
    await parked(driver, "all", JoinState(7, 3, 3, ALWAYS))

    assert await driver.job_cancel_many(["cancel-r", "cancel-ready"], T0 + 14) == [
        CancelAnswer.CANCELLED,
        CancelAnswer.CANCELLED,
    ]
    await released(driver, "w-cancel-r", T0 + 14, JoinState(1, 0, 1, SUCCESS))
    await released(driver, "w-cancel-ready", T0 + 14, JoinState(1, 0, 1, SUCCESS))
    # One before the last: still parked, no due time.
    await parked(driver, "all", JoinState(7, 1, 5, ALWAYS))

    # The final attempt's lease (1000 ms from T0) lapses: the claim that buries it releases both.
    jobs, buried = await claim(driver, T0 + 1000, "q")
    assert jobs == [] and [(b.id, b.state) for b in buried] == [("bury", JobState.DEAD)]
    await released(driver, "w-bury", T0 + 1000, JoinState(1, 0, 1, SUCCESS))
    await released(driver, "all", T0 + 1000, JoinState(7, 0, 6, ALWAYS))


async def scenario_flows_remove_of_a_live_dependency_releases(driver: JobDriver) -> None:
    """Removing a live row (ready, or parked on its own join) finishes it, not completed: its
    waiters move, and one released is due at once; removing a finished row moves nothing."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"), new_job("b"), new_job("c"))
    await joined(driver, join("mid", ["b"]), join("w1", ["a"]), join("w2", ["mid", "c"]))
    fences = await running(driver, T0, "a", "b", "c")
    assert await driver.job_ack([Ack(fences["c"], T0 + 1)]) == [True]
    await parked(driver, "w2", JoinState(2, 1, 0, SUCCESS))
    # `a` is running: a remove refuses it and moves nothing.
    assert await driver.job_remove(["a"]) == [RemoveAnswer.RUNNING]
    await parked(driver, "w1", JoinState(1, 1, 0, SUCCESS))
    # `mid` waits (parked) on b; removing it releases w2 and drops mid's own edge.
    assert await driver.job_remove(["mid"]) == [RemoveAnswer.REMOVED]
    w2 = await row(driver, "w2")
    assert (w2.state, w2.join) == (JobState.READY, JoinState(2, 0, 1, SUCCESS)), w2
    assert w2.run_at_ms is not None
    got = await claim_one(driver, max(T0 + 2, w2.run_at_ms), "wq")
    assert got.id == "w2" and got.join == JoinState(2, 0, 1, SUCCESS)
    # The finish of b (whose waiter is gone) and then the remove of finished c move nothing.
    assert await driver.job_ack([Ack(fences["b"], T0 + 3)]) == [True]
    assert await driver.job_remove(["c"]) == [RemoveAnswer.REMOVED]
    assert (await row(driver, "w2")).join == JoinState(2, 0, 1, SUCCESS)
    # Cancel the running a: w1 released at the cancel's now.
    assert await driver.job_cancel("a", T0 + 4) is CancelAnswer.CANCELLED
    await released(driver, "w1", T0 + 4, JoinState(1, 0, 1, SUCCESS))


async def scenario_flows_released_at_its_last_dependency(driver: JobDriver) -> None:
    """A waiter stays parked until its last dependency finishes, then is `ready` at that
    finish's now; the claim answers the join, which the row keeps after it ran."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"), new_job("b"), new_job("c"))
    await joined(driver, join("w", ["a", "b", "c"]))
    f = await running(driver, T0, "a", "b", "c")
    assert await driver.job_ack([Ack(f["a"], T0 + 5)]) == [True]
    await parked(driver, "w", JoinState(3, 2, 0, SUCCESS))
    retry = Nack(f["b"], NackKind.RETRY, T0 + 6, run_at_ms=T0 + 7, error="again")
    assert await driver.job_nack([retry]) == [True]  # a retry is no finish
    await parked(driver, "w", JoinState(3, 2, 0, SUCCESS))
    b = await claim_one(driver, T0 + 7, "q")
    fail = Nack(b.fence, NackKind.FAIL, T0 + 8, error="x")
    assert await driver.job_nack([fail]) == [True]
    await parked(driver, "w", JoinState(3, 1, 1, SUCCESS))
    assert await claim(driver, T0 + 9, "wq") == ([], [])
    assert await driver.job_ack([Ack(f["c"], T0 + 30)]) == [True]
    await released(driver, "w", T0 + 30, JoinState(3, 0, 1, SUCCESS))
    w = await claim_one(driver, T0 + 30, "wq")
    assert (w.id, w.join, w.attempt) == ("w", JoinState(3, 0, 1, SUCCESS), 1)
    assert await driver.job_ack([Ack(w.fence, T0 + 31)]) == [True]
    done = await row(driver, "w")
    assert (done.state, done.join) == (JobState.COMPLETED, JoinState(3, 0, 1, SUCCESS))


async def scenario_flows_two_waiters_on_one_dependency(driver: JobDriver) -> None:
    """One finish moves every waiter holding it, in the same write."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"), new_job("b"))
    await joined(driver, join("w1", ["a"]), join("w2", ["a", "b"], ALWAYS))
    f = await running(driver, T0, "a", "b")
    refuse = Nack(f["a"], NackKind.REFUSE, T0 + 3, error="no")
    assert await driver.job_nack([refuse]) == [True]
    await released(driver, "w1", T0 + 3, JoinState(1, 0, 1, SUCCESS))
    await parked(driver, "w2", JoinState(2, 1, 1, ALWAYS))
    assert await driver.job_ack([Ack(f["b"], T0 + 4)]) == [True]
    await released(driver, "w2", T0 + 4, JoinState(2, 0, 1, ALWAYS))


async def scenario_flows_a_dependency_counts_once(driver: JobDriver) -> None:
    """A dependency finished, requeued and finished again moves no join it already counted in;
    a join made while it is live again counts its next finish."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("d"), new_job("e"))
    await joined(driver, join("w1", ["d", "e"]))
    f = await running(driver, T0, "d", "e")
    assert await driver.job_ack([Ack(f["d"], T0 + 1)]) == [True]
    await parked(driver, "w1", JoinState(2, 1, 0, SUCCESS))
    await driver.job_requeue_many(RequeueParams(("d",), T0 + 2))
    assert (await row(driver, "d")).state is JobState.READY
    await joined(driver, join("w2", ["d"]))
    await parked(driver, "w2", JoinState(1, 1, 0, SUCCESS))
    d = await claim_one(driver, T0 + 2, "q")
    assert await driver.job_nack([Nack(d.fence, NackKind.FAIL, T0 + 3, error="x")]) == [True]
    await parked(driver, "w1", JoinState(2, 1, 0, SUCCESS))
    await released(driver, "w2", T0 + 3, JoinState(1, 0, 1, SUCCESS))
    # Requeued and finished once more: w1 still counts its first finish only.
    await driver.job_requeue_many(RequeueParams(("d",), T0 + 4))
    d = await claim_one(driver, T0 + 4, "q")
    assert await driver.job_ack([Ack(d.fence, T0 + 5)]) == [True]
    await parked(driver, "w1", JoinState(2, 1, 0, SUCCESS))
    await released(driver, "w2", T0 + 3, JoinState(1, 0, 1, SUCCESS))
    assert await driver.job_ack([Ack(f["e"], T0 + 6)]) == [True]
    await released(driver, "w1", T0 + 6, JoinState(2, 0, 0, SUCCESS))


async def scenario_flows_a_waiter_that_left_parked_is_not_moved(driver: JobDriver) -> None:
    """A cancelled or removed waiter is not moved by its dependencies' finishes; a cancelled
    waiter is itself a finish for whoever waits on it."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"))
    await joined(driver, join("w", ["a"]), join("gone", ["a"]), join("after-w", ["w"]))
    assert await driver.job_cancel("w", T0 + 1) is CancelAnswer.CANCELLED
    await released(driver, "after-w", T0 + 1, JoinState(1, 0, 1, SUCCESS))
    assert await driver.job_remove(["gone"]) == [RemoveAnswer.REMOVED]
    f = await running(driver, T0 + 2, "a")
    assert await driver.job_ack([Ack(f["a"], T0 + 3)]) == [True]
    w = await row(driver, "w")
    assert (w.state, w.finished_at_ms, w.join) == (
        JobState.CANCELLED,
        T0 + 1,
        JoinState(1, 1, 0, SUCCESS),
    ), w
    assert await driver.job_get_many(["gone"]) == {}


# -- a PARK nack's join -----------------------------------------------------------------------


async def scenario_flows_park_on_a_join(driver: JobDriver) -> None:
    """A PARK nack's join counts its ids as they stand (an unknown id: finished, not completed),
    policy `always`; parked without a due time while any is live, else `ready` at the nack's
    now; its last finish releases it at that finish's now."""
    if await _unsupported(driver):
        return
    await finished(driver, T0, b=JobState.COMPLETED, c=JobState.DEAD)
    await enqueue(driver, new_job("a", run_at_ms=T0 + 500), new_job("p"), new_job("p2"))
    f = await running(driver, T0 + 1, "p", "p2")
    park = Nack(f["p"], NackKind.PARK, T0 + 5, join=("a", "b", "c", "ghost"))
    assert await driver.job_nack([park]) == [True]
    p = await parked(driver, "p", JoinState(4, 1, 2, ALWAYS))
    assert p.attempt == 0
    # Every id finished already: ready at the nack's now.
    park2 = Nack(f["p2"], NackKind.PARK, T0 + 6, join=("b", "c"))
    assert await driver.job_nack([park2]) == [True]
    await released(driver, "p2", T0 + 6, JoinState(2, 0, 1, ALWAYS))
    a = await claim_one(driver, T0 + 500, "q", limit=1)
    assert a.id == "p2" and a.join == JoinState(2, 0, 1, ALWAYS)
    a = await claim_one(driver, T0 + 500, "q")
    assert a.id == "a"
    assert await driver.job_ack([Ack(a.fence, T0 + 509)]) == [True]
    await released(driver, "p", T0 + 509, JoinState(4, 0, 2, ALWAYS))
    p_again = await claim_one(driver, T0 + 509, "q")
    assert (p_again.id, p_again.join, p_again.attempt) == ("p", JoinState(4, 0, 2, ALWAYS), 1)


async def scenario_flows_park_and_its_dependency_in_one_nack_batch(driver: JobDriver) -> None:
    """One nack call holding a PARK on a join and the FAIL of one of its dependencies (a
    worker's settler batches both): the join counts that dependency as finished, not
    completed, whichever comes first in the call; the last one released at the call's now."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("p"), new_job("k"), new_job("m"), new_job("p2"), new_job("k2"))
    f = await running(driver, T0, "p", "k", "m", "p2", "k2")
    park = Nack(f["p"], NackKind.PARK, T0 + 5, join=("k", "m"))
    fail = Nack(f["k"], NackKind.FAIL, T0 + 5, error="x")
    assert await driver.job_nack([park, fail]) == [True, True]
    await parked(driver, "p", JoinState(2, 1, 1, ALWAYS))
    fail2 = Nack(f["k2"], NackKind.FAIL, T0 + 6, error="y", dead_letter=False)
    park2 = Nack(f["p2"], NackKind.PARK, T0 + 6, join=("k2",))
    assert await driver.job_nack([fail2, park2]) == [True, True]
    await released(driver, "p2", T0 + 6, JoinState(1, 0, 1, ALWAYS))
    assert await driver.job_ack([Ack(f["m"], T0 + 7)]) == [True]
    await released(driver, "p", T0 + 7, JoinState(2, 0, 1, ALWAYS))


async def scenario_flows_park_on_a_join_with_a_due_time(driver: JobDriver) -> None:
    """A join's park with `run_at_ms` is claimed at it with the join as it stood, and later
    finishes no longer touch it; a finish before it releases it at that finish's now; parking
    again recounts from the current states."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("p"), new_job("r"), new_job("x", queue="dq"))
    await enqueue(driver, new_job("y", queue="dq"))
    f = await running(driver, T0, "p", "r")
    park = Nack(f["p"], NackKind.PARK, T0 + 1, run_at_ms=T0 + 100, join=("x",))
    assert await driver.job_nack([park]) == [True]
    p = await row(driver, "p")
    assert (p.state, p.run_at_ms, p.join) == (JobState.PARKED, T0 + 100, JoinState(1, 1, 0, ALWAYS))
    early = Nack(f["r"], NackKind.PARK, T0 + 1, run_at_ms=T0 + 100, join=("y",))
    assert await driver.job_nack([early]) == [True]
    # y finishes before r's due time: r is ready at y's finish.
    jobs, buried = await claim(driver, T0 + 2, "dq")
    assert buried == [] and ids(jobs) == ["x", "y"], jobs
    x, y = jobs
    assert await driver.job_ack([Ack(y.fence, T0 + 3)]) == [True]
    await released(driver, "r", T0 + 3, JoinState(1, 0, 0, ALWAYS))
    # p is due at T0 + 100, its join still pending: the claim answers the join as it stands.
    jobs, buried = await claim(driver, T0 + 100, "q")
    assert buried == [] and ids(jobs) == ["r", "p"], jobs
    got = {j.id: j for j in jobs}
    assert got["p"].join == JoinState(1, 1, 0, ALWAYS)
    assert await driver.job_ack([Ack(x.fence, T0 + 101)]) == [True]
    p = await row(driver, "p")
    assert (p.state, p.join) == (JobState.RUNNING, JoinState(1, 1, 0, ALWAYS)), p
    # Parking again recounts: x completed now, a new z live.
    await enqueue(driver, new_job("z", queue="dq"))
    again = Nack(got["p"].fence, NackKind.PARK, T0 + 102, join=("x", "z"))
    assert await driver.job_nack([again]) == [True]
    await parked(driver, "p", JoinState(2, 1, 0, ALWAYS))
    z = await claim_one(driver, T0 + 103, "dq")
    assert await driver.job_cancel("z", T0 + 104) is CancelAnswer.CANCELLED
    assert await driver.job_ack([Ack(z.fence, T0 + 105)]) == [False]
    await released(driver, "p", T0 + 104, JoinState(2, 0, 1, ALWAYS))


async def scenario_flows_join_pending_answers_what_is_left(driver: JobDriver) -> None:
    """`join_pending` answers each asked row parked on a join with the dependencies not
    finished since it parked on it, in code-point order; a row released, claimed at its due
    time (its join still pending), cancelled, never joined, or unknown is absent."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("é"), new_job("a"), new_job("b"), new_job("p", queue="pq"))
    await joined(driver, join("w", ["é", "a", "b"]), join("w2", ["a"]))
    asked = ["w", "w2", "a", "p", "ghost"]
    got = await driver.join_pending(asked)
    assert got == {"w": ("a", "b", "é"), "w2": ("a",)}, got
    f = await running(driver, T0 + 1, "é", "a", "b")
    assert await driver.job_ack([Ack(f["a"], T0 + 2)]) == [True]
    got = await driver.join_pending(asked)
    assert got == {"w": ("b", "é")}, got
    # A park with a due time, claimed at it while its join is pending, waits for nothing.
    held = await claim_one(driver, T0 + 3, "pq")
    park = Nack(held.fence, NackKind.PARK, T0 + 4, run_at_ms=T0 + 10, join=("b", "ghost"))
    assert await driver.job_nack([park]) == [True]
    assert await driver.join_pending(["p"]) == {"p": ("b",)}
    again = await claim_one(driver, T0 + 10, "pq")
    assert again.id == "p" and await driver.join_pending(["p"]) == {}
    assert await driver.job_cancel("w", T0 + 11) is CancelAnswer.CANCELLED
    assert await driver.join_pending(asked) == {}
    await refused("X_JOB_BATCH_TOO_LARGE", driver.join_pending([f"i{n}" for n in range(1001)]))


async def scenario_flows_a_claims_bury_releases_for_the_next_claim(driver: JobDriver) -> None:
    """A claim's candidates are the rows as they stood before its bury: a waiter of the same
    queue its bury releases is not taken by it (the next claim takes it, answering the join),
    and a waiter it takes at a due time while its bury finishes that waiter's dependency is
    claimed with the join as it stood and not moved after."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("d1", max_attempts=1), new_job("d2", max_attempts=1))
    await enqueue(driver, new_job("p"))
    f = await running(driver, T0, "d1", "d2", "p")
    await joined(driver, JoinEnqueue(new_job("w", run_at_ms=T0), ("d1",), SUCCESS))
    await parked(driver, "w", JoinState(1, 1, 0, SUCCESS))
    park = Nack(f["p"], NackKind.PARK, T0 + 1, run_at_ms=T0 + 500, join=("d2",))
    assert await driver.job_nack([park]) == [True]
    # d1's and d2's final leases (1000 ms from T0) lapse; p is due since T0 + 500.
    jobs, buried = await claim(driver, T0 + 1000, "q")
    assert [(b.id, b.state) for b in buried] == [("d1", JobState.DEAD), ("d2", JobState.DEAD)]
    assert [(j.id, j.join) for j in jobs] == [("p", JoinState(1, 1, 0, ALWAYS))], jobs
    p = await row(driver, "p")
    assert (p.state, p.join) == (JobState.RUNNING, JoinState(1, 1, 0, ALWAYS)), p
    await released(driver, "w", T0 + 1000, JoinState(1, 0, 1, SUCCESS))
    w = await claim_one(driver, T0 + 1000, "q")
    assert (w.id, w.join) == ("w", JoinState(1, 0, 1, SUCCESS)), w


# -- watch, links, refusals -------------------------------------------------------------------


async def _heard(seen: list[str], expected: set[str]) -> None:
    """Wait (bounded) until every id of `expected` was announced."""
    # The listener may run on a thread of the store's: a poll, not an asyncio.Event.
    for _ in range(int(ANNOUNCE_WAIT_S / 0.01)):
        if expected <= set(seen):
            break
        await asyncio.sleep(0.01)
    assert expected <= set(seen), (seen, expected)


async def scenario_flows_watched_rows_announced(driver: JobDriver) -> None:
    """`job_watch` answers the rows as `job_get_many` does (unknown ids absent) and marks them:
    a watched row's finish (ack, cancel, remove of a live row) reaches `finish_subscribe`."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"), new_job("b"), new_job("c"), new_job("quiet"))
    got = await driver.job_watch(["a", "ghost", "b", "c"])
    assert got == await driver.job_get_many(["a", "b", "c"]) and set(got) == {"a", "b", "c"}
    seen: list[str] = []
    # The listener may run on another thread: a list append is atomic.
    sub = await driver.finish_subscribe(seen.append)
    if sub is None:
        return  # unsupported: a waiter polls
    try:
        await until_live(sub, ANNOUNCE_WAIT_S, "finish")
        f = await running(driver, T0, "a", "b", "c", "quiet")
        assert await driver.job_ack([Ack(f["a"], T0 + 1)]) == [True]
        await _heard(seen, {"a"})
        assert await driver.job_cancel("b", T0 + 2) is CancelAnswer.CANCELLED
        await _heard(seen, {"a", "b"})
        shed = Nack(f["c"], NackKind.SHED, T0 + 3)
        assert await driver.job_nack([shed]) == [True]
        assert await driver.job_remove(["c"]) == [RemoveAnswer.REMOVED]
        await _heard(seen, {"a", "b", "c"})
    finally:
        await sub.close()


async def scenario_flows_watched_failures_and_buries_announced(driver: JobDriver) -> None:
    """A watched row finished by a failing nack, or by a claim's bury of its lapsed final
    attempt, is announced as an acked one is (a store whose notify sits in the ack, the cancel
    and the remove only misses them)."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("f"), new_job("b", max_attempts=1))
    await driver.job_watch(["f", "b"])
    seen: list[str] = []
    sub = await driver.finish_subscribe(seen.append)
    if sub is None:
        return  # unsupported: a waiter polls
    try:
        await until_live(sub, ANNOUNCE_WAIT_S, "finish")
        f = await running(driver, T0, "f", "b")
        assert await driver.job_nack([Nack(f["f"], NackKind.FAIL, T0 + 1, error="e")]) == [True]
        jobs, buried = await claim(driver, T0 + 1000, "q")
        assert jobs == [] and [x.id for x in buried] == ["b"], (jobs, buried)
        await _heard(seen, {"f", "b"})
    finally:
        await sub.close()


async def scenario_flows_parent_and_batch_links(driver: JobDriver) -> None:
    """`parent_id` and `batch_id` are stored as enqueued (enqueue, enqueue_many, a join), kept
    by a requeue, answered by the row and the listing, and filtered on."""
    if await _unsupported(driver):
        return
    await driver.job_enqueue(new_job("p"))
    await driver.job_enqueue(new_job("c1", parent_id="p", batch_id="b1"))
    await enqueue(driver, new_job("c2", parent_id="p"), new_job("m1", batch_id="b1"))
    await joined(driver, join("cb", ["c1", "m1"], batch_id="b1", parent_id="p"))
    rows = await driver.job_get_many(["p", "c1", "c2", "m1", "cb"])
    links = {i: (r.parent_id, r.batch_id) for i, r in rows.items()}
    assert links == {
        "p": (None, None),
        "c1": ("p", "b1"),
        "c2": ("p", None),
        "m1": (None, "b1"),
        "cb": ("p", "b1"),
    }, links
    children = await driver.job_list(JobListParams(JobFilter(parent_id="p")))
    assert sorted(s.id for s in children.jobs) == ["c1", "c2", "cb"]
    assert all(s.parent_id == "p" for s in children.jobs)
    batch = await driver.job_list(JobListParams(JobFilter(batch_id="b1")))
    assert sorted(s.id for s in batch.jobs) == ["c1", "cb", "m1"]
    both = JobFilter(parent_id="p", batch_id="b1", states=frozenset({JobState.PARKED}))
    assert [s.id for s in (await driver.job_list(JobListParams(both))).jobs] == ["cb"]
    assert (await driver.job_list(JobListParams(JobFilter(batch_id="p")))).jobs == ()
    f = await running(driver, T0, "p", "c1", "c2", "m1")
    assert await driver.job_ack([Ack(f["c1"], T0 + 1)]) == [True]
    await driver.job_requeue_many(RequeueParams(("c1",), T0 + 2))
    c1 = await row(driver, "c1")
    assert (c1.state, c1.parent_id, c1.batch_id) == (JobState.READY, "p", "b1")


async def scenario_flows_refusals_write_nothing(driver: JobDriver) -> None:
    """A join with no id, an id named twice, past `MAX_JOIN_IDS`, a join on a nack other than
    PARK or together with a wait: refused before anything is written."""
    if await _unsupported(driver):
        return
    await enqueue(driver, new_job("a"))
    bad_after: list[tuple[str, tuple[str, ...]]] = [
        ("X_JOB_RECORD_INVALID", ()),
        ("X_JOB_RECORD_INVALID", ("a", "a")),
        ("X_JOB_RECORD_INVALID", ("a", "")),
        ("X_JOB_BATCH_TOO_LARGE", tuple(f"d{i}" for i in range(MAX_JOIN_IDS + 1))),
    ]
    for code, after in bad_after:
        item = JoinEnqueue(waiter("w"), after)
        await refused(code, driver.join_enqueue([join("ok", ["a"]), item]))
    not_a_tuple = JoinEnqueue(waiter("w"), ["a"])  # type: ignore[arg-type]
    await refused("X_JOB_RECORD_INVALID", driver.join_enqueue([not_a_tuple]))
    bad_policy = JoinEnqueue(waiter("w"), ("a",), "sometimes")  # type: ignore[arg-type]
    await refused("X_JOB_RECORD_INVALID", driver.join_enqueue([bad_policy]))
    assert await driver.job_get_many(["w", "ok"]) == {}
    held = exactly(1, (await claim(driver, T0, "q"))[0], "claimed job")[0]
    before = await row(driver, "a")
    fence = held.fence
    bad_nacks = [
        Nack(fence, NackKind.PARK, T0 + 1, join=()),
        Nack(fence, NackKind.PARK, T0 + 1, join=("x", "x")),
        Nack(fence, NackKind.FAIL, T0 + 1, error="x", join=("x",)),
        Nack(fence, NackKind.RETRY, T0 + 1, join=("x",)),
        Nack(fence, NackKind.SHED, T0 + 1, join=("x",)),
    ]
    for n in bad_nacks:
        await refused("X_JOB_RECORD_INVALID", driver.job_nack([n]))
    assert await row(driver, "a") == before
    await _still_held(driver, held)
    # With a wait too (the event family is asked first: a driver without it ends here).
    both = Nack(fence, NackKind.PARK, T0 + 1, join=("x",), wait=EventWait("e", "{}", T0))
    await refused("X_JOB_RECORD_INVALID", driver.job_nack([both]))
    assert await row(driver, "a") == before


async def _still_held(driver: JobDriver, held: ClaimedJob) -> None:
    r = await row(driver, held.id)
    assert (r.state, r.claims, r.claimed_by) == (JobState.RUNNING, held.claims, held.worker_id)


FLOW_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_flows_a_claims_bury_releases_for_the_next_claim,
        scenario_flows_a_dependency_counts_once,
        scenario_flows_a_waiter_that_left_parked_is_not_moved,
        scenario_flows_each_finish_releases_its_waiter,
        scenario_flows_join_enqueue_counts_its_dependencies,
        scenario_flows_join_enqueue_dedupes_and_writes_nothing_more,
        scenario_flows_join_enqueue_missing_dependency_writes_nothing,
        scenario_flows_join_pending_answers_what_is_left,
        scenario_flows_park_on_a_join,
        scenario_flows_park_and_its_dependency_in_one_nack_batch,
        scenario_flows_park_on_a_join_with_a_due_time,
        scenario_flows_parent_and_batch_links,
        scenario_flows_refusals_write_nothing,
        scenario_flows_released_at_its_last_dependency,
        scenario_flows_remove_of_a_live_dependency_releases,
        scenario_flows_two_waiters_on_one_dependency,
        scenario_flows_watched_rows_announced,
        scenario_flows_watched_failures_and_buries_announced,
    )
}
