"""The task family's scenarios: the fence that lets one of two racing fires through, arming that
never moves a stored watermark, refused fires that write nothing, a catch-up fire, a fire
deduped to a live row, a task pause beside jobs of the same name, and a leader that lost its
lease firing late.

A driver that does not declare `tasks` in `capabilities()` must refuse the calls with
`X_DRIVER_CAPABILITY_MISSING`; these scenarios check that much and stop there — except that a
pause of kind "task" is the pause family's (the ABC accepts it from every driver declaring
pauses), so every such driver must store it as what it is.
"""

from __future__ import annotations

import asyncio

from jobs_core.driver import JobDriver
from jobs_core.records import (
    Ack,
    EnqueueResult,
    LeaseRenew,
    LeaseTake,
    NewJob,
    Pause,
    TaskFire,
    TaskFireAnswer,
    TaskMark,
)
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim_one,
    exactly,
    new_job,
    refused,
    row,
)

MINUTE = 60_000


async def _unsupported(driver: JobDriver) -> bool:
    if driver.capabilities().tasks:
        return False
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.task_marks(["t"]))
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.task_arm(["t"], T0))
    return True


def _job(job_id: str, occurrence: int, **fields: object) -> NewJob:
    """The job a scheduler fires for task `t`'s occurrence: named `t`, keyed by the occurrence."""
    return new_job(job_id, **{"name": "t", "idempotency_key": f"t@{occurrence}", **fields})


async def _fire(
    driver: JobDriver,
    expect: int,
    occurrence: int,
    job: NewJob,
    *,
    watermark: int | None = None,
    now: int | None = None,
    name: str = "t",
) -> TaskFireAnswer:
    fire = TaskFire(
        name=name,
        expect_ms=expect,
        occurrence_ms=occurrence,
        watermark_ms=occurrence if watermark is None else watermark,
        job=job,
        now_ms=occurrence + 5 if now is None else now,
    )
    return await driver.task_fire(fire)


async def _missing(driver: JobDriver, *job_ids: str) -> None:
    rows = await driver.job_get_many(list(job_ids))
    assert rows == {}, f"rows a refused fire must not write: {sorted(rows)}"


async def scenario_task_fire_fenced_once(driver: JobDriver) -> None:
    """Two fires that read the same watermark: the first lands (job and mark together), the
    second writes nothing; racing fires land exactly once; the next watermark fires again."""
    if await _unsupported(driver):
        return
    assert await driver.task_arm(["t"], T0) == [TaskMark("t", T0)]
    occ = T0 + MINUTE
    first = await _fire(driver, T0, occ, _job("j1", occ, idempotency_key="k1"))
    mark = TaskMark("t", occ, occ, "j1", occ + 5)
    assert first == TaskFireAnswer(EnqueueResult("j1", deduped=False), mark), first
    assert first.fired
    second = await _fire(driver, T0, occ, _job("j2", occ, idempotency_key="k2"))
    assert second == TaskFireAnswer(None, mark), second
    assert not second.fired
    await _missing(driver, "j2")
    assert (await row(driver, "j1")).name == "t"
    assert await driver.task_marks(["t"]) == {"t": mark}

    # A dozen schedulers at once, each with its own job, all read `occ`: one lands.
    occ2 = occ + MINUTE
    answers = await asyncio.gather(
        *(_fire(driver, occ, occ2, _job(f"r{i}", occ2, idempotency_key=f"r{i}")) for i in range(12))
    )
    landed = exactly(1, [a for a in answers if a.fired], "landed fires")[0]
    assert landed.enqueued is not None and not landed.enqueued.deduped, landed
    winner = landed.enqueued.id
    rows = await driver.job_get_many([f"r{i}" for i in range(12)])
    assert sorted(rows) == [winner], sorted(rows)
    stored = TaskMark("t", occ2, occ2, winner, occ2 + 5)
    assert landed.mark == stored, landed
    for a in answers:
        assert a.mark == stored, a
    assert await driver.task_marks(["t"]) == {"t": stored}


async def scenario_task_arm_keeps_the_watermark(driver: JobDriver) -> None:
    """Arming stores a mark at now for a task without one and answers the stored mark of every
    other, in the order named: never moved, by a later arm, an earlier one or a racing one."""
    if await _unsupported(driver):
        return
    assert await driver.task_arm(["a", "b"], T0) == [TaskMark("a", T0), TaskMark("b", T0)]
    got = await driver.task_arm(["c", "b"], T0 + 5000)
    assert got == [TaskMark("c", T0 + 5000), TaskMark("b", T0)], got
    # A scheduler whose clock lags: the stored watermark stays too.
    assert await driver.task_arm(["a"], T0 - 1000) == [TaskMark("a", T0)]
    occ = T0 + MINUTE
    fired = await _fire(driver, T0, occ, _job("j1", occ), name="a")
    assert fired.fired, fired
    after = TaskMark("a", occ, occ, "j1", occ + 5)
    # Re-armed after a fire (a restarted scheduler), long after: the whole mark stays.
    assert await driver.task_arm(["a"], T0 + 10 * MINUTE) == [after]
    marks = await driver.task_marks(["zz", "c", "a", "b"])
    assert marks == {"a": after, "b": TaskMark("b", T0), "c": TaskMark("c", T0 + 5000)}, marks
    assert await driver.task_marks(["zz"]) == {}
    # Racing arms of a new task: one mark stored, every caller answers it.
    answers = await asyncio.gather(*(driver.task_arm(["r"], T0 + i) for i in range(10)))
    stored = await driver.task_marks(["r"])
    assert len(stored) == 1, stored
    assert all(a == [stored["r"]] for a in answers), (answers, stored)
    assert T0 <= stored["r"].watermark_ms < T0 + 10, stored


async def scenario_task_refused_fire_writes_nothing(driver: JobDriver) -> None:
    """A fire under a stale or unread watermark, or on a task never armed, enqueues nothing and
    leaves the mark as it was; so does a fire the ABC refuses."""
    if await _unsupported(driver):
        return
    await driver.task_arm(["t"], T0)
    occ = T0 + MINUTE
    assert (await _fire(driver, T0, occ, _job("j1", occ))).fired
    mark = TaskMark("t", occ, occ, "j1", occ + 5)
    # Stale: read before the fire above. Ahead: a watermark nobody stored.
    for n, expect in enumerate((T0, occ - 1, occ + 1, occ + MINUTE)):
        job = new_job(f"x{n}", name="t", idempotency_key=f"fresh-{n}")
        got = await _fire(driver, expect, expect + MINUTE, job)
        assert got == TaskFireAnswer(None, mark), (expect, got)
    await _missing(driver, "x0", "x1", "x2", "x3")
    # Never armed: no job, no mark.
    got = await _fire(driver, T0, occ, new_job("u1"), name="unarmed")
    assert got == TaskFireAnswer(None, None), got
    await _missing(driver, "u1")
    assert await driver.task_marks(["t", "unarmed"]) == {"t": mark}
    # Refused by the ABC: an occurrence not after the watermark read, a watermark before the
    # occurrence, a bad job.
    await refused("X_JOB_RECORD_INVALID", _fire(driver, occ, occ, new_job("v1")))
    await refused(
        "X_JOB_RECORD_INVALID", _fire(driver, occ, occ + 2, new_job("v2"), watermark=occ + 1)
    )
    await refused("X_JOB_RECORD_INVALID", _fire(driver, occ, occ + 2, new_job("v3", tenant_id="")))
    await refused("X_JOB_RECORD_INVALID", driver.task_arm(["t", "t"], T0))
    await _missing(driver, "v1", "v2", "v3")
    assert await driver.task_marks(["t"]) == {"t": mark}
    assert await driver.queue_demand(["q"], T0 + 10 * MINUTE) == {"q": 1}


async def scenario_task_catch_up_fire(driver: JobDriver) -> None:
    """One fire covers missed occurrences: the watermark moves past them while `fired_ms` is
    the occurrence the job stands for; the next fire expects the new watermark."""
    if await _unsupported(driver):
        return
    await driver.task_arm(["t"], T0)
    # Down for five minutes: one catch-up run for the first missed minute, the rest covered.
    occ, wm, now = T0 + MINUTE, T0 + 5 * MINUTE, T0 + 5 * MINUTE + 30_000
    got = await _fire(driver, T0, occ, _job("c1", occ), watermark=wm, now=now)
    mark = TaskMark("t", watermark_ms=wm, fired_ms=occ, fired_job_id="c1", fired_at_ms=now)
    assert got == TaskFireAnswer(EnqueueResult("c1", deduped=False), mark), got
    # The occurrence is not the watermark: a fire expecting it is stale.
    stale = await _fire(driver, occ, occ + MINUTE, _job("c2", occ + MINUTE))
    assert stale == TaskFireAnswer(None, mark), stale
    await _missing(driver, "c2")
    nxt = wm + MINUTE
    got = await _fire(driver, wm, nxt, _job("c3", nxt))
    assert got.mark == TaskMark("t", nxt, nxt, "c3", nxt + 5), got
    assert await driver.task_marks(["t"]) == {"t": TaskMark("t", nxt, nxt, "c3", nxt + 5)}


async def scenario_task_deduped_fire_moves_the_mark(driver: JobDriver) -> None:
    """A fire whose job is deduped (its key held by a live row, or its id stored) still lands:
    the mark moves and names the row that holds it; once the holder is finished, the key fires
    a new row."""
    if await _unsupported(driver):
        return
    occ = T0 + MINUTE
    await driver.job_enqueue(_job("held", occ))
    await driver.task_arm(["t"], T0)
    got = await _fire(driver, T0, occ, _job("fresh", occ))
    mark = TaskMark("t", occ, occ, "held", occ + 5)
    assert got == TaskFireAnswer(EnqueueResult("held", deduped=True), mark), got
    await _missing(driver, "fresh")
    # Its id names a stored row (under another key): deduped to that row by id.
    occ2 = occ + MINUTE
    got = await _fire(driver, occ, occ2, _job("held", occ2))
    mark = TaskMark("t", occ2, occ2, "held", occ2 + 5)
    assert got == TaskFireAnswer(EnqueueResult("held", deduped=True), mark), got
    # The holder finishes: its key is free, and the same record inserts a new row.
    job = await claim_one(driver, T0)
    assert await driver.job_ack([Ack(job.fence, T0 + 1)]) == [True]
    occ3 = occ2 + MINUTE
    got = await _fire(driver, occ2, occ3, _job("again", occ))
    assert got == TaskFireAnswer(
        EnqueueResult("again", deduped=False), TaskMark("t", occ3, occ3, "again", occ3 + 5)
    ), got
    assert (await row(driver, "again")).idempotency_key == f"t@{occ}"


async def scenario_task_pause_holds_no_job(driver: JobDriver) -> None:
    """A pause of kind "task" round-trips as itself, apart from a name pause of the same value,
    and holds no claim of a job of that name; the fire does not read it (the scheduler does)."""
    task = Pause("task", "t")
    assert await driver.pause_add(task) is True
    assert await driver.pause_add(task) is False
    assert await driver.pause_list() == [task]
    await driver.job_enqueue(new_job("1", name="t"))
    assert await driver.queue_demand(["q"], T0) == {"q": 1}
    assert (await claim_one(driver, T0)).id == "1"
    name = Pause("name", "t")
    assert await driver.pause_add(name) is True
    assert await driver.pause_list() == [name, task]
    assert await driver.pause_remove(name) is True
    assert await driver.pause_list() == [task]
    await driver.job_enqueue(new_job("2", name="t"))
    assert (await claim_one(driver, T0)).id == "2"
    if driver.capabilities().tasks:
        await driver.task_arm(["t"], T0)
        got = await _fire(driver, T0, T0 + MINUTE, _job("f", T0 + MINUTE))
        assert got.fired, got
        assert (await claim_one(driver, T0 + 1)).id == "f"
    assert await driver.pause_remove(task) is True
    assert await driver.pause_remove(task) is False
    assert await driver.pause_list() == []


async def scenario_task_leader_handover(driver: JobDriver) -> None:
    """The scheduler's leader holds a limit-1 lease: renewed inside its TTL, lost past it, taken
    over by another with a greater token. The old leader, unaware, fires the watermark it read
    before the handover: the fence refuses it though the new leader's job is still live."""
    if await _unsupported(driver):
        return
    lease_end = T0 + 5000 + 10_000
    a = None
    if driver.capabilities().leases:
        a = (await driver.lease_take([LeaseTake("scheduler", "A", 1, 10_000)], T0))[0]
        assert a is not None
        renew = [LeaseRenew("scheduler", a.token, 10_000)]
        assert await driver.lease_renew(renew, T0 + 5000) == [True]
        taken = await driver.lease_take([LeaseTake("scheduler", "B", 1, 10_000)], lease_end - 1)
        assert taken == [None], taken
    # A read the watermark while it led.
    assert await driver.task_arm(["t"], T0) == [TaskMark("t", T0)]
    if a is not None:
        renew = [LeaseRenew("scheduler", a.token, 10_000)]
        assert await driver.lease_renew(renew, lease_end) == [False]
        b = (await driver.lease_take([LeaseTake("scheduler", "B", 1, 10_000)], lease_end))[0]
        assert b is not None and b.token > a.token, (a, b)
        assert await driver.lease_renew(renew, lease_end) == [False]
    occ = T0 + MINUTE
    # B arms (the stored watermark stays) and fires the occurrence.
    assert await driver.task_arm(["t"], lease_end) == [TaskMark("t", T0)]
    got = await _fire(driver, T0, occ, _job("by-b", occ))
    mark = TaskMark("t", occ, occ, "by-b", occ + 5)
    assert got == TaskFireAnswer(EnqueueResult("by-b", deduped=False), mark), got
    # A fires the same occurrence, same key, under the watermark it read: refused, not deduped.
    late = await _fire(driver, T0, occ, _job("by-a", occ), now=occ + 7)
    assert late == TaskFireAnswer(None, mark), late
    await _missing(driver, "by-a")
    assert await driver.task_marks(["t"]) == {"t": mark}


TASK_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_task_arm_keeps_the_watermark,
        scenario_task_catch_up_fire,
        scenario_task_deduped_fire_moves_the_mark,
        scenario_task_fire_fenced_once,
        scenario_task_leader_handover,
        scenario_task_pause_holds_no_job,
        scenario_task_refused_fire_writes_nothing,
    )
}
