"""The step and event families' scenarios: steps recorded once under the fence, waits woken by
the events they match (and by no other), events found, expired and purged.

A driver that declares neither family in `capabilities()` must refuse their calls with
`X_DRIVER_CAPABILITY_MISSING`; these scenarios check that much and stop there.
"""

from __future__ import annotations

from jobs_core.driver import JobDriver
from jobs_core.records import (
    Ack,
    CancelAnswer,
    EventRecord,
    EventWait,
    Fence,
    JobRecord,
    Nack,
    NackKind,
    PurgeParams,
    RemoveAnswer,
    RequeueAnswer,
    RequeueParams,
    StepPut,
)
from jobs_core.semantics import SAGA_STEP
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim,
    claim_one,
    new_job,
    refused,
    row,
    same_json,
)

DAY = 86_400_000


def event(
    event_id: str,
    name: str,
    data: str,
    at: int,
    ttl: int = DAY,
    *,
    tenant_id: str | None = None,
    all_tenants: bool = False,
) -> EventRecord:
    return EventRecord(event_id, name, data, at, at + ttl, tenant_id, all_tenants)


async def _unsupported(driver: JobDriver, family: str) -> bool:
    """True (and the refusal checked) when the driver does not offer `family`."""
    caps = driver.capabilities()
    if getattr(caps, family):
        return False
    if family == "steps":
        await refused("X_DRIVER_CAPABILITY_MISSING", driver.step_list("r"))
    else:
        await refused("X_DRIVER_CAPABILITY_MISSING", driver.event_purge(T0, 1))
    return True


async def scenario_steps_recorded_once_under_the_fence(driver: JobDriver) -> None:
    """A step is recorded once, only while the fence holds; the run keeps its steps across a
    requeue and loses them with its row."""
    if await _unsupported(driver, "steps"):
        return
    await driver.job_enqueue(new_job("j", run_id="run-j"))
    job = await claim_one(driver, T0)
    f = job.fence
    assert await driver.step_list("run-j") == []
    assert await driver.step_put([StepPut(f, "charge", '{"id":"ch_1"}', T0 + 2)]) == [True]
    # A second record of the same name answers True and keeps the first.
    again = [StepPut(f, "charge", '{"id":"ch_2"}', T0 + 3), StepPut(f, "b", "1.0", T0 + 1)]
    assert await driver.step_put(again) == [True, True]
    steps = await driver.step_list("run-j")
    assert [(s.name, s.recorded_at_ms) for s in steps] == [("b", T0 + 1), ("charge", T0 + 2)]
    assert same_json(steps[1].output_json, '{"id":"ch_1"}') and same_json(
        steps[0].output_json, "1.0"
    )
    assert all(s.run_id == "run-j" for s in steps)
    # A stale or forged fence writes nothing.
    stale = [StepPut(Fence("j", f.claims + 1, f.worker_id), "x", "1", T0)]
    assert await driver.step_put(stale) == [False]
    assert await driver.step_put([StepPut(Fence("j", f.claims, "w9"), "y", "1", T0)]) == [False]
    assert await driver.step_put([StepPut(Fence("nobody", 1, "w1"), "z", "1", T0)]) == [False]
    assert [s.name for s in await driver.step_list("run-j")] == ["b", "charge"]
    # The settle ends the fence: no step after it.
    assert await driver.job_ack([Ack(f, T0 + 5)]) == [True]
    assert await driver.step_put([StepPut(f, "late", "1", T0 + 6)]) == [False]
    # A requeued run keeps its steps; its next claim records more.
    await driver.job_requeue("j", T0 + 10)
    job = await claim_one(driver, T0 + 10)
    assert await driver.step_put([StepPut(job.fence, "ship", "true", T0 + 11)]) == [True]
    assert [s.name for s in await driver.step_list("run-j")] == ["b", "charge", "ship"]
    # Another run's steps are its own.
    await driver.job_enqueue(new_job("k", run_id="run-k", queue="other"))
    k = await claim_one(driver, T0, "other")
    await driver.step_put([StepPut(k.fence, "charge", '"k"', T0)])
    assert [s.run_id for s in await driver.step_list("run-k")] == ["run-k"]
    # A removed row takes its steps with it; so does a purged one.
    await driver.job_ack([Ack(job.fence, T0 + 12)])
    assert await driver.job_remove(["j"]) == [RemoveAnswer.REMOVED]
    assert await driver.step_list("run-j") == []
    await driver.job_ack([Ack(k.fence, T0 + 12)])
    assert await driver.job_purge(PurgeParams(T0 + 20, 10, 0, None, None, None)) == 1
    assert await driver.step_list("run-k") == []


async def scenario_a_wait_wakes_on_its_event_only(driver: JobDriver) -> None:
    """A parked run waiting for an event is woken by one that matches its name, its match
    and its `since` — and by no other, and never once it left `parked`."""
    if await _unsupported(driver, "events"):
        return
    await driver.job_enqueue_many(
        [new_job("w"), new_job("y", queue="q3"), new_job("z", queue="q3", run_at_ms=T0 + 1)]
    )
    w = await claim_one(driver, T0, "q")
    wait = EventWait("shipped", '{"order":1}', T0 - 100)
    parked = await driver.job_nack([Nack(w.fence, NackKind.PARK, T0, T0 + 60_000, wait=wait)])
    assert parked == [True]
    assert (await row(driver, "w")).state is JobState.PARKED
    # Not its name, not its order, an order of another type, not an object: nothing wakes.
    decoys = [
        ("paid", '{"order":1}'),
        ("shipped", '{"order":2}'),
        ("shipped", '{"order":"1"}'),
        ("shipped", '{"order":true}'),
        ("shipped", "[1]"),
    ]
    for n, (name, data) in enumerate(decoys):
        assert await driver.event_publish(event(f"no{n}", name, data, T0 + n)) == 0, data
    # Published before the wait's `since`: not this wait's event either.
    assert await driver.event_publish(event("early", "shipped", '{"order":1}', T0 - 200)) == 0
    assert (await row(driver, "w")).state is JobState.PARKED
    # 1.0 is 1; extra keys are fine.
    assert await driver.event_publish(event("yes", "shipped", '{"order":1.0,"x":1}', T0 + 50)) == 1
    r = await row(driver, "w")
    assert (r.state, r.run_at_ms, r.attempt) == (JobState.READY, T0 + 50, 0)
    # The same id again: stored once, wakes nothing.
    assert await driver.event_publish(event("yes", "shipped", '{"order":1}', T0 + 60)) == 0
    # Its event is stored already: the same park now goes straight back to ready, no wait.
    w = await claim_one(driver, T0 + 60, "q")
    await driver.job_nack([Nack(w.fence, NackKind.PARK, T0 + 60, T0 + 70, wait=wait)])
    r = await row(driver, "w")
    assert (r.state, r.run_at_ms, r.attempt) == (JobState.READY, T0 + 60, 0)
    # A wait that left `parked` (claimed at its timeout) is gone: a later event wakes nothing.
    w = await claim_one(driver, T0 + 100, "q")
    late = EventWait("paid", "{}", T0 + 100)
    await driver.job_nack([Nack(w.fence, NackKind.PARK, T0 + 100, T0 + 110, wait=late)])
    w = await claim_one(driver, T0 + 110, "q")
    assert await driver.event_publish(event("p1", "paid", "{}", T0 + 111)) == 0
    assert (await row(driver, "w")).state is JobState.RUNNING
    # A cancelled waiting run is not woken either; an empty match takes any data.
    y = await claim_one(driver, T0 + 120, "q3", limit=1)
    assert y.id == "y"
    since_120 = EventWait("paid", "{}", T0 + 120)
    await driver.job_nack([Nack(y.fence, NackKind.PARK, T0 + 120, None, wait=since_120)])
    assert (await row(driver, "y")).run_at_ms is None
    assert await driver.job_cancel("y", T0 + 121) is CancelAnswer.CANCELLED
    assert await driver.event_publish(event("p2", "paid", "[]", T0 + 122)) == 0
    z = await claim_one(driver, T0 + 130, "q3")
    since_130 = EventWait("paid", "{}", T0 + 130)
    await driver.job_nack([Nack(z.fence, NackKind.PARK, T0 + 130, None, wait=since_130)])
    assert (await row(driver, "z")).state is JobState.PARKED
    assert await driver.event_publish(event("p3", "paid", "[]", T0 + 131)) == 1
    assert (await row(driver, "z")).run_at_ms == T0 + 131
    # Two runs wait on one event: a stored id published again wakes neither; a new event that
    # matches both wakes both.
    await driver.job_enqueue_many([new_job("t1", queue="q4"), new_job("t2", queue="q4")])
    both, _ = await claim(driver, T0 + 200, "q4")
    matches = {"t1": "{}", "t2": '{"box":2}'}
    parks = [
        Nack(j.fence, NackKind.PARK, T0 + 200, None, wait=EventWait("packed", matches[j.id], T0))
        for j in both
    ]
    assert await driver.job_nack(parks) == [True, True]
    assert await driver.event_publish(event("p3", "packed", '{"box":2}', T0 + 201)) == 0
    assert {(await row(driver, i)).state for i in matches} == {JobState.PARKED}
    assert await driver.event_publish(event("pk", "packed", '{"box":2}', T0 + 202)) == 2
    for i in matches:
        r = await row(driver, i)
        assert (r.state, r.run_at_ms) == (JobState.READY, T0 + 202), r
    # An event that expired by the park, even at that very millisecond, is not met: the run
    # parks; one a millisecond from expiring is.
    await driver.job_enqueue_many([new_job("u", queue="q5"), new_job("v", queue="q6")])
    assert await driver.event_publish(event("old", "boxed", "{}", T0 + 300, ttl=50)) == 0
    u = await claim_one(driver, T0 + 350, "q5")
    boxed = EventWait("boxed", "{}", T0 + 300)
    await driver.job_nack([Nack(u.fence, NackKind.PARK, T0 + 350, None, wait=boxed)])
    assert (await row(driver, "u")).state is JobState.PARKED
    v = await claim_one(driver, T0 + 349, "q6")
    await driver.job_nack([Nack(v.fence, NackKind.PARK, T0 + 349, None, wait=boxed)])
    r = await row(driver, "v")
    assert (r.state, r.run_at_ms) == (JobState.READY, T0 + 349)


def _shows(got: EventWait | None, wait: EventWait) -> bool:
    """`got` is `wait`: its event, since, tenant and until, and a match of the same meaning and
    types."""
    return (
        got is not None
        and (got.event, got.since_ms, got.tenant_id, got.until_ms)
        == (wait.event, wait.since_ms, wait.tenant_id, wait.until_ms)
        and same_json(got.match_json, wait.match_json)
    )


async def scenario_a_parked_row_shows_its_wait(driver: JobDriver) -> None:
    """`job_get_many` shows a parked row's wait as its nack gave it (`1.0` stays `1.0`) while
    the row waits; no wait for a park without one or one its stored event met at once, and none
    once the row was woken, claimed at its timeout or cancelled."""
    if await _unsupported(driver, "events"):
        return
    await driver.job_enqueue_many([new_job(i) for i in "abcde"])
    jobs, _ = await claim(driver, T0, limit=5)
    held = {j.id: j.fence for j in jobs}
    assert sorted(held) == list("abcde")
    wait_a = EventWait("shipped", '{"order":1.0,"to":"ü\\"x"}', T0 - 100, "ten'ant\n☃")
    wait_b = EventWait("paid", "{}", T0, until_ms=T0 + 1_000)
    wait_c = EventWait("refunded", '{"order":7}', T0 + 1, "t1", T0 + 5_000)
    # e's event is stored before it parks: it goes on at once and stores no wait.
    assert await driver.event_publish(event("pre", "packed", '{"order":5}', T0 - 10)) == 0
    nacks = [
        Nack(held["a"], NackKind.PARK, T0, None, wait=wait_a),
        Nack(held["b"], NackKind.PARK, T0, T0 + 1_000, wait=wait_b),
        Nack(held["c"], NackKind.PARK, T0, None, wait=wait_c),
        Nack(held["d"], NackKind.PARK, T0, T0 + 500),
        Nack(held["e"], NackKind.PARK, T0, None, wait=EventWait("packed", '{"order":5}', T0 - 50)),
    ]
    assert await driver.job_nack(nacks) == [True] * 5
    rows = await driver.job_get_many(list("abcde"))
    assert [rows[i].state for i in "abcde"] == [JobState.PARKED] * 4 + [JobState.READY]
    assert _shows(rows["a"].wait, wait_a), rows["a"].wait
    assert _shows(rows["b"].wait, wait_b), rows["b"].wait
    assert _shows(rows["c"].wait, wait_c), rows["c"].wait
    assert rows["d"].wait is None and rows["e"].wait is None
    # Woken by its event: no longer waiting.
    data = '{"order":1,"to":"ü\\"x","more":true}'
    assert await driver.event_publish(event("s0", "shipped", data, T0 + 9)) == 0  # no tenant
    s1 = event("s1", "shipped", data, T0 + 10, tenant_id="ten'ant\n☃")
    assert await driver.event_publish(s1) == 1
    r = await row(driver, "a")
    assert (r.state, r.wait) == (JobState.READY, None)
    # Claimed at its timeout: the wait ended with the park, and its event wakes nothing.
    jobs, _ = await claim(driver, T0 + 1_000)
    assert "b" in [j.id for j in jobs]
    r = await row(driver, "b")
    assert (r.state, r.wait) == (JobState.RUNNING, None)
    assert await driver.event_publish(event("p1", "paid", "{}", T0 + 1_001)) == 0
    assert (await row(driver, "b")).wait is None
    # Cancelled: finished, no wait, and none again once it is requeued.
    assert _shows((await row(driver, "c")).wait, wait_c)
    assert await driver.job_cancel("c", T0 + 1_002) is CancelAnswer.CANCELLED
    r = await row(driver, "c")
    assert (r.state, r.wait) == (JobState.CANCELLED, None)
    r1 = event("r1", "refunded", '{"order":7}', T0 + 1_003, tenant_id="t1")
    assert await driver.event_publish(r1) == 0
    await driver.job_requeue("c", T0 + 1_004)
    r = await row(driver, "c")
    assert (r.state, r.wait) == (JobState.READY, None)
    # Parked again without a wait: none shows (not the one of its earlier park).
    c = await claim_one(driver, T0 + 1_005, limit=1)
    assert c.id == "c"
    assert await driver.job_nack([Nack(c.fence, NackKind.PARK, T0 + 1_005, None)]) == [True]
    r = await row(driver, "c")
    assert (r.state, r.wait) == (JobState.PARKED, None)


async def scenario_events_found_expired_and_purged(driver: JobDriver) -> None:
    """`event_find` answers the oldest live match at or after `since`; expired events are
    neither found nor kept once purged, soonest expired first."""
    if await _unsupported(driver, "events"):
        return
    await driver.event_publish(event("b", "paid", '{"o":1}', T0 + 10, ttl=1_000))
    await driver.event_publish(event("a", "paid", '{"o":1}', T0 + 10, ttl=5_000))
    await driver.event_publish(event("c", "paid", '{"o":2}', T0 + 5, ttl=DAY))
    await driver.event_publish(event("d", "shipped", '{"o":1}', T0, ttl=DAY))
    found = await driver.event_find(EventWait("paid", '{"o":1}', T0), T0 + 20)
    assert found is not None and (found.id, found.published_at_ms) == ("a", T0 + 10)
    assert found.expires_at_ms == T0 + 5_010 and same_json(found.data_json, '{"o":1}')
    first = await driver.event_find(EventWait("paid", "{}", 0), T0 + 20)
    assert first is not None and first.id == "c"
    assert await driver.event_find(EventWait("paid", '{"o":1}', T0 + 11), T0 + 20) is None
    assert await driver.event_find(EventWait("paid", '{"o":true}', 0), T0 + 20) is None
    # Expired at its expiry instant: "b" at T0 + 1010, "a" at T0 + 5010.
    got = await driver.event_find(EventWait("paid", '{"o":1}', 0), T0 + 1_010)
    assert got is not None and got.id == "a"
    assert await driver.event_find(EventWait("paid", '{"o":1}', 0), T0 + 5_010) is None
    assert await driver.event_purge(T0 + 1_009, 10) == 0
    assert await driver.event_purge(T0 + 9_999, 1) == 1  # b, the soonest expired
    got = await driver.event_find(EventWait("paid", '{"o":1}', 0), T0 + 20)
    assert got is not None and got.id == "a"
    assert await driver.event_purge(T0 + 9_999, 10) == 1
    assert await driver.event_find(EventWait("paid", '{"o":1}', 0), T0 + 20) is None
    assert await driver.event_purge(T0 + 9_999, 10) == 0
    # A purged id is free again.
    assert await driver.event_publish(event("b", "paid", "{}", T0 + 20)) == 0
    got = await driver.event_find(EventWait("paid", "{}", T0 + 20), T0 + 20)
    assert got is not None and got.id == "b"
    # Expired, and purged, at its very expiry.
    assert await driver.event_publish(event("e", "paid", "{}", T0 + 20, ttl=100)) == 0
    assert await driver.event_purge(T0 + 119, 10) == 0
    assert await driver.event_purge(T0 + 120, 10) == 1


async def scenario_wait_and_event_refusals(driver: JobDriver) -> None:
    """A wait rides a PARK only and matches with a JSON object; bad events are refused."""
    if await _unsupported(driver, "events"):
        return
    await driver.job_enqueue(new_job("r"))
    job = await claim_one(driver, T0)
    ok = EventWait("e", "{}", T0)
    await refused(
        "X_JOB_RECORD_INVALID", driver.job_nack([Nack(job.fence, NackKind.SHED, T0, wait=ok)])
    )
    bad = EventWait("e", "[1]", T0)
    await refused(
        "X_JOB_RECORD_INVALID", driver.job_nack([Nack(job.fence, NackKind.PARK, T0, wait=bad)])
    )
    await refused("X_JOB_RECORD_INVALID", driver.event_find(EventWait("", "{}", T0), T0))
    await refused("X_JOB_RECORD_INVALID", driver.event_publish(event("x", "e", "NaN", T0)))
    await refused("X_JOB_RECORD_INVALID", driver.event_publish(event("", "e", "{}", T0)))
    assert (await row(driver, "r")).state is JobState.RUNNING
    assert await driver.event_find(EventWait("e", "{}", 0), T0) is None


async def scenario_a_wait_ends_at_its_until(driver: JobDriver) -> None:
    """A wait counts events published in `[since_ms, until_ms)`: one at `until_ms - 1` meets
    it, one at `until_ms` (or later) never does — in `event_find`, in a park's look for a stored
    event and in a publish's wake alike (a run resumed after its timeout takes no late event)."""
    if await _unsupported(driver, "events"):
        return
    until = T0 + 1_000
    w = EventWait("shipped", '{"order":1}', T0, until_ms=until)
    assert await driver.event_publish(event("at", "shipped", '{"order":1}', until)) == 0
    assert await driver.event_find(w, T0 + 2_000) is None
    # Parked after its until: the event stored at `until` does not count, the row waits.
    await driver.job_enqueue_many([new_job("a"), new_job("b")])
    jobs, _ = await claim(driver, T0 + 2_000, limit=2)
    held = {j.id: j.fence for j in jobs}
    await driver.job_nack([Nack(held["a"], NackKind.PARK, T0 + 2_000, None, wait=w)])
    r = await row(driver, "a")
    assert (r.state, r.run_at_ms) == (JobState.PARKED, None)
    assert _shows(r.wait, w), r.wait
    # A publish at or after the until wakes nothing...
    assert await driver.event_publish(event("later", "shipped", '{"order":1}', until + 5)) == 0
    assert (await row(driver, "a")).state is JobState.PARKED
    # ...one stamped a millisecond before it (a sender's clock behind) wakes the run.
    assert await driver.event_publish(event("edge", "shipped", '{"order":1}', until - 1)) == 1
    r = await row(driver, "a")
    assert (r.state, r.run_at_ms, r.wait) == (JobState.READY, until - 1, None)
    found = await driver.event_find(w, T0 + 2_000)
    assert found is not None and found.id == "edge"
    # Stored before the park, at `until - 1`: the park goes on at once.
    await driver.job_nack([Nack(held["b"], NackKind.PARK, T0 + 2_001, None, wait=w)])
    r = await row(driver, "b")
    assert (r.state, r.run_at_ms, r.wait) == (JobState.READY, T0 + 2_001, None)
    # A window of one millisecond: exactly `since` counts, `since + 1` is its until.
    one = EventWait("paid", "{}", T0 + 500, until_ms=T0 + 501)
    assert await driver.event_publish(event("p501", "paid", "{}", T0 + 501)) == 0
    assert await driver.event_find(one, T0 + 600) is None
    assert await driver.event_publish(event("p500", "paid", "{}", T0 + 500)) == 0
    found = await driver.event_find(one, T0 + 600)
    assert found is not None and found.id == "p500"


async def scenario_events_keep_to_their_tenant(driver: JobDriver) -> None:
    """An event meets the waits of its own tenant only — None for None, never another's —
    unless it is published for every tenant; `event_find` and a park's look answer alike, and
    the event comes back with its tenant."""
    if await _unsupported(driver, "events"):
        return
    await driver.job_enqueue_many([new_job(i) for i in ("n", "t", "u", "v", "x")])
    jobs, _ = await claim(driver, T0, limit=5)
    held = {j.id: j.fence for j in jobs}
    waits = {
        "n": EventWait("paid", "{}", T0),
        "t": EventWait("paid", "{}", T0, "t1"),
        "u": EventWait("paid", "{}", T0, "t2"),
    }
    nacks = [Nack(held[i], NackKind.PARK, T0, None, wait=w) for i, w in waits.items()]
    assert await driver.job_nack(nacks) == [True] * 3

    def states(rows: dict[str, JobRecord]) -> dict[str, JobState]:
        return {i: rows[i].state for i in waits}

    parked, ready = JobState.PARKED, JobState.READY
    assert await driver.event_publish(event("e0", "paid", "{}", T0 + 1)) == 1
    assert states(await driver.job_get_many(list(waits))) == {"n": ready, "t": parked, "u": parked}
    assert await driver.event_publish(event("e1", "paid", "{}", T0 + 2, tenant_id="t1")) == 1
    assert await driver.event_publish(event("e3", "paid", "{}", T0 + 3, tenant_id="t3")) == 0
    assert states(await driver.job_get_many(list(waits))) == {"n": ready, "t": ready, "u": parked}
    everyone = event("e2", "paid", "{}", T0 + 4, all_tenants=True)
    assert await driver.event_publish(everyone) == 1
    assert (await row(driver, "u")).state is ready
    # Found by each tenant's wait: its own first, else one for every tenant.
    for tenant, first in ((None, "e0"), ("t1", "e1"), ("t2", "e2"), ("t3", "e3"), ("t9", "e2")):
        got = await driver.event_find(EventWait("paid", "{}", 0, tenant), T0 + 10)
        assert got is not None and got.id == first, (tenant, got)
    got = await driver.event_find(EventWait("paid", "{}", 0, "t1"), T0 + 10)
    assert got is not None and (got.tenant_id, got.all_tenants) == ("t1", False)
    got = await driver.event_find(EventWait("paid", "{}", T0 + 4, "t2"), T0 + 10)
    assert got is not None and (got.id, got.tenant_id, got.all_tenants) == ("e2", None, True)
    # A park looks the same way: another tenant's stored event leaves it waiting, one for
    # every tenant (or its own) lets it go on.
    shipped = event("s1", "shipped", '{"o":1}', T0 + 5, tenant_id="t1")
    assert await driver.event_publish(shipped) == 0
    w_other = EventWait("shipped", '{"o":1}', T0, "t2")
    w_any = EventWait("paid", "{}", T0 + 4, "t7")
    nacks = [
        Nack(held["v"], NackKind.PARK, T0 + 6, None, wait=w_other),
        Nack(held["x"], NackKind.PARK, T0 + 6, None, wait=w_any),
    ]
    assert await driver.job_nack(nacks) == [True, True]
    v, x = await row(driver, "v"), await row(driver, "x")
    assert (v.state, x.state, x.run_at_ms) == (parked, ready, T0 + 6)
    assert _shows(v.wait, w_other), v.wait
    # An event for every tenant names none; a tenant is a non-empty string.
    both = event("bad", "shipped", '{"o":1}', T0 + 7, tenant_id="t2", all_tenants=True)
    await refused("X_JOB_RECORD_INVALID", driver.event_publish(both))
    await refused(
        "X_JOB_RECORD_INVALID", driver.event_publish(event("e", "x", "{}", T0, tenant_id=""))
    )
    await refused("X_JOB_RECORD_INVALID", driver.event_find(EventWait("x", "{}", 0, ""), T0))
    assert (await row(driver, "v")).state is parked
    assert (
        await driver.event_publish(event("s2", "shipped", '{"o":1}', T0 + 8, tenant_id="t2")) == 1
    )
    assert (await row(driver, "v")).state is ready


async def scenario_requeue_of_an_unwound_saga(driver: JobDriver) -> None:
    """A plain requeue refuses a saga run that failed for good (`dead` or `failed`, its run
    holding the saga mark): `UNWOUND`, in a bulk call too, nothing written. A fresh requeue takes
    it under a new run id with no recorded step, leaving the old run's steps to its unwinding;
    a fresh requeue of any other row deletes the steps of the run it left."""
    if await _unsupported(driver, "steps"):
        return
    ids = ("dead", "dropped", "plain", "cancelled", "done")
    await driver.job_enqueue_many([new_job(i) for i in ids])
    jobs, _ = await claim(driver, T0, limit=5)
    held = {j.id: j.fence for j in jobs}
    saga = ("dead", "dropped", "cancelled", "done")
    puts = [StepPut(held[i], "book", '{"room":1}', T0 + 1) for i in ids]
    puts += [StepPut(held[i], SAGA_STEP, '{"first":"book"}', T0) for i in saga]
    assert await driver.step_put(puts) == [True] * len(puts)
    fails = [
        Nack(held["dead"], NackKind.FAIL, T0 + 2, error="boom"),
        Nack(held["dropped"], NackKind.FAIL, T0 + 2, error="boom", dead_letter=False),
        Nack(held["plain"], NackKind.FAIL, T0 + 2, error="boom"),
    ]
    assert await driver.job_nack(fails) == [True] * 3
    assert await driver.job_ack([Ack(held["done"], T0 + 2)]) == [True]
    assert await driver.job_cancel("cancelled", T0 + 2) is CancelAnswer.CANCELLED
    before = await driver.job_get_many(list(ids))
    await refused("X_JOB_REQUEUE_UNWOUND", driver.job_requeue("dead", T0 + 3))
    plain = await driver.job_requeue_many(RequeueParams(ids, T0 + 3))
    U, R = RequeueAnswer.UNWOUND, RequeueAnswer.REQUEUED
    assert plain == [U, U, R, R, R], plain
    after = await driver.job_get_many(list(ids))
    assert after["dead"] == before["dead"] and after["dropped"] == before["dropped"]
    # Requeued in their runs: a dead run without a saga, and sagas that did not fail.
    for i in ("plain", "cancelled", "done"):
        assert (after[i].state, after[i].run_id) == (JobState.READY, f"run-{i}"), after[i]
        assert "book" in [s.name for s in await driver.step_list(f"run-{i}")]
    # Fresh: new runs, nothing recorded in them; the unwound runs keep their steps.
    # A refused id comes first: each id takes the run id at its own place, landed or not.
    fresh = RequeueParams(("nobody", "dead", "dropped", "plain"), T0 + 4, ("f3", "f1", "f2", "f4"))
    answers = await driver.job_requeue_many(fresh)
    assert answers == [RequeueAnswer.NOT_FOUND, R, R, RequeueAnswer.LIVE], answers
    for i, run in (("dead", "f1"), ("dropped", "f2")):
        r = await row(driver, i)
        assert (r.state, r.run_id, r.attempt, r.finished_at_ms) == (JobState.READY, run, 0, None)
        assert r.claims == before[i].claims and r.last_error == "boom"
        assert await driver.step_list(run) == []
        assert [s.name for s in await driver.step_list(f"run-{i}")] == [SAGA_STEP, "book"]
    assert (await row(driver, "plain")).run_id == "run-plain"
    # The new run records its own steps.
    jobs, _ = await claim(driver, T0 + 5, limit=5)
    held = {j.id: j.fence for j in jobs}
    assert next(j.run_id for j in jobs if j.id == "dead") == "f1"
    assert await driver.step_put([StepPut(held["dead"], "book", '{"room":2}', T0 + 6)]) == [True]
    assert [s.output_json for s in await driver.step_list("f1")] == ['{"room":2}']
    # A fresh requeue of a row that is not unwound (a completed saga, a dead plain run): the
    # run it leaves is nobody's, its steps go.
    assert await driver.job_ack([Ack(held["done"], T0 + 7), Ack(held["plain"], T0 + 7)]) == [
        True,
        True,
    ]
    again = RequeueParams(("done", "plain"), T0 + 8, ("g1", "g2"))
    assert await driver.job_requeue_many(again) == [R, R]
    assert await driver.step_list("run-done") == [] and await driver.step_list("run-plain") == []
    # A fresh requeue still meets the namespace: a live twin holds the key.
    assert await driver.job_cancel_many(["done"], T0 + 9) == [CancelAnswer.CANCELLED]
    await driver.job_enqueue(new_job("twin", idempotency_key="key-done"))
    await refused("X_JOB_REQUEUE_DUPLICATE", driver.job_requeue("done", T0 + 9, fresh_run_id="h"))
    # Refused whole, before anything is written: not one fresh id per id, or one given twice.
    await driver.job_ack([Ack(held["dropped"], T0 + 9)])
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.job_requeue_many(RequeueParams(("dropped", "done"), T0 + 10, ("k1",))),
    )
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.job_requeue_many(RequeueParams(("dropped", "done"), T0 + 10, ("k1", "k1"))),
    )
    r = await row(driver, "dropped")
    assert (r.state, r.run_id) == (JobState.COMPLETED, "f2")


#: The step and event families' scenarios by name (the function name without `scenario_`).
DURABLE_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_a_parked_row_shows_its_wait,
        scenario_a_wait_ends_at_its_until,
        scenario_a_wait_wakes_on_its_event_only,
        scenario_events_found_expired_and_purged,
        scenario_events_keep_to_their_tenant,
        scenario_requeue_of_an_unwound_saga,
        scenario_steps_recorded_once_under_the_fence,
        scenario_wait_and_event_refusals,
    )
}
