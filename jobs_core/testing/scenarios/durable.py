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
    Nack,
    NackKind,
    PurgeParams,
    RemoveAnswer,
    StepPut,
)
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


def event(event_id: str, name: str, data: str, at: int, ttl: int = DAY) -> EventRecord:
    return EventRecord(event_id, name, data, at, at + ttl)


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


def _shows(got: EventWait | None, wait: EventWait) -> bool:
    """`got` is `wait`: its event and since, and a match of the same meaning and types."""
    return (
        got is not None
        and (got.event, got.since_ms) == (wait.event, wait.since_ms)
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
    wait_a = EventWait("shipped", '{"order":1.0,"to":"ü\\"x"}', T0 - 100)
    wait_b = EventWait("paid", "{}", T0)
    wait_c = EventWait("refunded", '{"order":7}', T0 + 1)
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
    assert await driver.event_publish(event("s1", "shipped", data, T0 + 10)) == 1
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
    assert await driver.event_publish(event("r1", "refunded", '{"order":7}', T0 + 1_003)) == 0
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


#: The step and event families' scenarios by name (the function name without `scenario_`).
DURABLE_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_a_parked_row_shows_its_wait,
        scenario_a_wait_wakes_on_its_event_only,
        scenario_events_found_expired_and_purged,
        scenario_steps_recorded_once_under_the_fence,
        scenario_wait_and_event_refusals,
    )
}
