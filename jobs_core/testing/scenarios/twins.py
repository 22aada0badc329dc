"""Near-twin identifiers, one family at a time: names told apart by their code points only.

Every identifier a driver stores and looks up — an id, a key, a name, a queue, a tenant, a
worker, a run, a step, an event, a task, a sweep, an account, a consumer, an endpoint — is
exact text: two that differ in one code point are two. A store compares them as text the way
its column, its collation or its key pattern does, and a third party's store often does not
compare exactly: a case-insensitive or accent-insensitive collation (MySQL's and SQL Server's
defaults), a pad-space one (`'a' = 'a '`), a prefix or pattern match (`LIKE 'x%'`, an
unescaped `_`, a Redis `SCAN MATCH x*`). The random walks draw small pools of names in which no
two are such twins, so these scenarios write the twins of each identifier side by side and read
each back alone. Each scenario stops at the first call of a family the driver does not declare.
"""

from __future__ import annotations

from jobs_core.driver import JobDriver
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ConsumerPut,
    CounterReadParams,
    EnqueueResult,
    EventRecord,
    EventWait,
    Fence,
    JobFilter,
    JobListParams,
    Nack,
    NackKind,
    NewJob,
    Pause,
    PostingLine,
    PostingPut,
    StepPut,
    SweepFinish,
    SweepStart,
    TaskFire,
    WebhookAttemptListParams,
    WebhookAttemptPut,
    WebhookEndpointPut,
    WorkerBeat,
)
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim,
    claim_one,
    new_job,
    same_json,
)

#: One identifier and its near twins; `TWINS[0]` is the one looked up. Where the order of the
#: writes could matter, it is written last: a store that answers the first of the twins it
#: finds answers another one.
TWINS = ("sync", "Sync", "sync ", "sýnc", "sync-2", "s_nc")
#: A prefix of every twin, never written: a prefix match finds them all.
PREFIX = "syn"
#: The twins in the order they are written.
LAST = (*TWINS[1:], TWINS[0])
#: The same for ledger accounts, whose pattern allows no space or accent.
ACCOUNT_TWINS = ("cash", "Cash", "cash-2", "c_sh")
DAY = 86_400_000


async def _enqueued(driver: JobDriver, jobs: list[NewJob], what: str) -> None:
    """Each of `jobs` written as a row of its own, none deduped."""
    got = await driver.job_enqueue_many(jobs)
    fresh = [EnqueueResult(j.id, deduped=False) for j in jobs]
    assert got == fresh, f"{what}: twins taken for one another: {got!r}"


async def _claimed_twin_rows(driver: JobDriver, prefix: str, *twin_fields: str) -> list[ClaimedJob]:
    """One row per twin, each in a queue of its own, claimed by `w1`; each of `twin_fields`
    (`run_id`, `idempotency_key`) holds the twin."""
    rows = []
    for i, twin in enumerate(TWINS):
        job_id = f"{prefix}{i}"
        rows.append(new_job(job_id, queue=f"q-{job_id}", **dict.fromkeys(twin_fields, twin)))
    await _enqueued(driver, rows, f"{prefix} rows")
    return [await claim_one(driver, T0, f"q-{prefix}{i}") for i in range(len(TWINS))]


async def scenario_twins_jobs_apart(driver: JobDriver) -> None:
    """Keys, tenants, names, ids and queues that differ in case, accent, a trailing space, a
    suffix or where a pattern has `_` are all different: no twin dedupes another's enqueue, a
    claim of one queue takes that queue's row only, a fence of a twin worker holds nothing; then
    (where declared) a pause of a twin queue or name pauses nothing else, and the worker
    registry keeps twins apart."""
    # Keys, then tenants, then names: each namespace field alone tells the rows apart.
    keys = [new_job(f"k{i}", idempotency_key=t) for i, t in enumerate(TWINS)]
    await _enqueued(driver, keys, "idempotency keys")
    tenants = [new_job(f"t{i}", idempotency_key="one", tenant_id=t) for i, t in enumerate(TWINS)]
    await _enqueued(driver, tenants, "tenants")
    names = [new_job(f"n{i}", idempotency_key="one", name=t) for i, t in enumerate(TWINS)]
    await _enqueued(driver, names, "job names")
    ids = [new_job(t, queue="ids") for t in TWINS]
    await _enqueued(driver, ids, "job ids")
    rows = await driver.job_get_many(list(TWINS))
    assert {i: r.idempotency_key for i, r in rows.items()} == {t: f"key-{t}" for t in TWINS}, rows
    # Queues: demand and claims per queue, each its own.
    queues = [new_job(f"q{i}", queue=t) for i, t in enumerate(TWINS)]
    await _enqueued(driver, queues, "queues")
    demand = await driver.queue_demand([*TWINS, PREFIX], T0)
    want = {**dict.fromkeys(TWINS, 1), PREFIX: 0}
    assert demand == want, f"each twin queue holds one due row: {demand}"
    for i, twin in enumerate(TWINS):
        jobs, buried = await claim(driver, T0, twin, worker="w1")
        assert [j.id for j in jobs] == [f"q{i}"] and buried == [], (twin, jobs)
    # A fence names its worker exactly.
    held = await claim_one(driver, T0, "ids", worker="sync", limit=1)
    for twin in TWINS[1:]:
        assert await driver.job_ack([Ack(Fence(held.id, held.claims, twin), T0 + 1)]) == [False]
    assert await driver.job_ack([Ack(held.fence, T0 + 1)]) == [True]
    # Pauses (declared by some drivers only): a twin's pause pauses nothing else.
    await driver.job_enqueue_many(
        [new_job(f"p{i}", queue=t, name=t, idempotency_key=f"p{i}") for i, t in enumerate(TWINS)]
    )
    for twin in TWINS[1:]:
        assert await driver.pause_add(Pause("queue", twin))
        assert await driver.pause_add(Pause("name", twin))
    assert not await driver.pause_add(Pause("queue", TWINS[1]))
    assert await driver.pause_remove(Pause("queue", TWINS[0])) is False
    jobs, _ = await claim(driver, T0, *TWINS)
    assert [j.id for j in jobs] == ["p0"], f"twins of a paused queue or name: {jobs!r}"
    # The worker registry (declared by some drivers only): one row per twin.
    for twin in TWINS:
        await driver.worker_beat(WorkerBeat(twin, f'{{"w":"{twin}"}}', 60_000, T0))
    listed = await driver.worker_list(T0)
    assert sorted(w.worker_id for w in listed) == sorted(TWINS), listed
    assert await driver.worker_forget(TWINS[0])
    assert sorted(w.worker_id for w in await driver.worker_list(T0)) == sorted(TWINS[1:])


async def scenario_twins_listed_apart(driver: JobDriver) -> None:
    """A listing filtered by a name, a queue or a tenant keeps that one only, never its twins;
    the queue statistics keep one entry per twin queue."""
    await _enqueued(
        driver,
        [
            new_job(f"l{i}", name=t, queue=t, tenant_id=t, idempotency_key=f"l{i}")
            for i, t in enumerate(TWINS)
        ],
        "listed rows",
    )
    for twin, want in ((TWINS[0], ["l0"]), (PREFIX, [])):
        for f in (JobFilter(name=twin), JobFilter(queue=twin), JobFilter(tenant_id=twin)):
            page = await driver.job_list(JobListParams(filter=f, limit=10))
            assert [j.id for j in page.jobs] == want, (f, page.jobs)
    stats = {s.queue: s for s in await driver.queue_stats(T0)}
    assert sorted(stats) == sorted(TWINS), sorted(stats)
    assert all(s.oldest_ready_at_ms == T0 for s in stats.values()), stats


async def scenario_twins_counted_apart(driver: JobDriver) -> None:
    """Counters are kept per exact name and queue: a read of one name or queue counts it
    alone."""
    rows = [new_job(f"c{i}", name=t, queue=t, idempotency_key=f"c{i}") for i, t in enumerate(TWINS)]
    await _enqueued(driver, rows, "counted rows")
    jobs, _ = await claim(driver, T0, *TWINS)
    assert await driver.job_ack([Ack(j.fence, T0 + 1) for j in jobs]) == [True] * len(TWINS)
    one = (TWINS[0],)
    for params in (
        CounterReadParams(T0 - DAY, T0 + DAY, names=one),
        CounterReadParams(T0 - DAY, T0 + DAY, queues=one),
    ):
        got = await driver.counter_read(params)
        assert [(r.name, r.queue, r.completed) for r in got] == [(TWINS[0], TWINS[0], 1)], got


async def scenario_twins_steps_and_events_apart(driver: JobDriver) -> None:
    """Each twin run keeps its own steps, one run keeps each twin step; a wait on an event is
    met by that event's name alone, and an event for one tenant by no twin tenant."""
    runs = await _claimed_twin_rows(driver, "r", "run_id")
    landed = await driver.step_put([StepPut(j.fence, "charge", f'"{j.id}"', T0) for j in runs])
    assert landed == [True] * len(TWINS)
    steps = await driver.step_list(TWINS[0])
    assert [s.run_id for s in steps] == [TWINS[0]], steps
    assert same_json(steps[0].output_json, '"r0"'), steps
    one = runs[0].fence
    for twin in LAST:
        assert await driver.step_put([StepPut(one, twin, f'"{twin}"', T0 + 1)]) == [True]
    named = await driver.step_list(TWINS[0])
    assert sorted(s.name for s in named) == sorted(["charge", *TWINS]), named
    assert all(same_json(s.output_json, f'"{s.name}"') for s in named[1:]), named
    assert await driver.step_list(PREFIX) == []
    # Events: twins of the name, then of the tenant, never meet the wait.
    for i, twin in enumerate(TWINS[1:]):
        await driver.event_publish(EventRecord(f"e{i}", twin, "{}", T0, T0 + DAY, TWINS[0], False))
        await driver.event_publish(EventRecord(f"f{i}", TWINS[0], "{}", T0, T0 + DAY, twin, False))
    wait = EventWait(TWINS[0], "{}", T0, TWINS[0])
    assert await driver.event_find(wait, T0 + 1) is None
    assert await driver.event_find(EventWait(PREFIX, "{}", T0, TWINS[0]), T0 + 1) is None
    parked = runs[1]
    nack = Nack(parked.fence, NackKind.PARK, T0 + 1, run_at_ms=None, wait=wait)
    assert await driver.job_nack([nack]) == [True]
    assert (await driver.job_get_many([parked.id]))[parked.id].state.value == "parked"
    woke = await driver.event_publish(
        EventRecord("g", TWINS[0], "{}", T0 + 2, T0 + DAY, TWINS[0], False)
    )
    assert woke == 1


async def scenario_twins_tasks_apart(driver: JobDriver) -> None:
    """Each twin task keeps its own mark: a fire of one moves no other's watermark."""
    marks = await driver.task_arm(list(LAST), T0)
    assert [m.name for m in marks] == list(LAST)
    assert await driver.task_marks([PREFIX]) == {}
    job = new_job("fired", idempotency_key="fired-occ")
    fired = await driver.task_fire(TaskFire(TWINS[1], T0, T0 + 60_000, T0 + 60_000, job, T0 + 1))
    assert fired.enqueued is not None and not fired.enqueued.deduped, fired
    got = await driver.task_marks([TWINS[0]])
    assert list(got) == [TWINS[0]] and got[TWINS[0]].watermark_ms == T0, got
    again = await driver.task_arm([TWINS[0]], T0 + 5)
    assert again[0].watermark_ms == T0 and again[0].fired_job_id is None, again


async def scenario_twins_sweeps_apart(driver: JobDriver) -> None:
    """A completed run of a twin sweep blocks no other; a listing of one name keeps it alone."""
    runs = await _claimed_twin_rows(driver, "s")
    for i, j in enumerate(runs[1:], 1):
        start = SweepStart(j.fence, j.run_id, TWINS[i], "t1", "default", "backfill", "c1", None, T0)
        got = await driver.sweep_start(start)
        assert got.record is not None and got.blocked_by is None, got
        done = SweepFinish(j.fence, j.run_id, "completed", None, T0 + 1)
        assert await driver.sweep_finish(done)
    first = runs[0]
    start = SweepStart(
        first.fence, first.run_id, TWINS[0], "t1", "default", "backfill", "c1", None, T0 + 2
    )
    got = await driver.sweep_start(start)
    assert got.blocked_by is None and got.record is not None, f"blocked by a twin: {got}"
    listed = await driver.sweep_list(TWINS[0], 10)
    assert [e.run_id for e in listed] == [first.run_id], listed
    assert await driver.sweep_list(PREFIX, 10) == []


async def scenario_twins_postings_apart(driver: JobDriver) -> None:
    """Each twin key posts once in its own right, each twin tenant has a ledger of its own, and
    a balance of one account counts no twin account."""
    jobs = await _claimed_twin_rows(driver, "p", "idempotency_key")
    for i, j in enumerate(jobs):
        account = ACCOUNT_TWINS[i % len(ACCOUNT_TWINS)]
        lines = (PostingLine(account, "EUR", 10 + i), PostingLine("revenue", "EUR", -10 - i))
        answer = await driver.posting_put(PostingPut(j.fence, None, TWINS[i], lines, T0))
        assert answer.status == "applied", (TWINS[i], answer)
    balances = await driver.posting_balances(None, [ACCOUNT_TWINS[0]])
    assert [(b.account, b.debits) for b in balances] == [("cash", 10 + 14)], balances
    posted = await driver.posting_get(None, TWINS[0])
    assert posted is not None and posted.job_id == "p0", posted
    assert await driver.posting_get(None, PREFIX) is None
    for twin in TWINS[1:]:
        assert await driver.posting_get(twin, TWINS[0]) is None, twin


async def scenario_twins_consumers_apart(driver: JobDriver) -> None:
    """Each twin consumer name, and each twin tenant, keeps a cursor of its own."""
    j = (await _claimed_twin_rows(driver, "c"))[0]
    for twin in LAST:
        i = TWINS.index(twin)
        put = ConsumerPut(j.fence, twin, None, "src", None, str(i), 1, None, T0)
        assert await driver.consumer_cursor_put(put), twin
        put = ConsumerPut(j.fence, "orders", twin, "src", None, str(i), 1, None, T0)
        assert await driver.consumer_cursor_put(put), twin
    got = await driver.consumer_cursor_get(TWINS[0], None)
    assert got is not None and got.cursor_json == "0", got
    got = await driver.consumer_cursor_get("orders", TWINS[0])
    assert got is not None and got.cursor_json == "0", got
    listed = await driver.consumer_list(TWINS[0], 10)
    assert [(e.name, e.tenant_id) for e in listed] == [(TWINS[0], None)], listed
    assert await driver.consumer_cursor_get(PREFIX, None) is None
    assert await driver.consumer_list(PREFIX, 10) == []


async def scenario_twins_webhooks_apart(driver: JobDriver) -> None:
    """Each twin endpoint, and each twin tenant, has an endpoint, a streak and attempts of its
    own."""
    for twin in LAST:
        url = f"https://{len(twin)}"
        await driver.webhook_endpoint_put(WebhookEndpointPut(None, twin, url, T0))
        await driver.webhook_endpoint_put(WebhookEndpointPut(twin, "orders", "https://t", T0))
    j = (await _claimed_twin_rows(driver, "h"))[1]
    attempt = WebhookAttemptPut(
        j.fence, None, TWINS[1], "m", "failed", 500, 1, "", "X_WEBHOOK_DELIVERY_FAILED", 9, T0
    )
    moved = await driver.webhook_endpoint_put(WebhookEndpointPut(None, TWINS[0], "u", T0))
    assert moved.url == "u", moved
    answer = await driver.webhook_attempt_put(attempt)
    assert answer.recorded, answer
    one = await driver.webhook_endpoint_get(None, TWINS[0])
    assert one is not None and one.failures == 0 and one.url == "u", one
    tenant = await driver.webhook_endpoint_get(TWINS[0], "orders")
    assert tenant is not None and tenant.tenant_id == TWINS[0], tenant
    assert await driver.webhook_attempt_list(WebhookAttemptListParams(None, TWINS[0], 10)) == []
    assert await driver.webhook_endpoint_get(None, PREFIX) is None


TWIN_SCENARIOS: dict[str, Scenario] = {
    name.removeprefix("scenario_"): fn
    for name, fn in globals().items()
    if name.startswith("scenario_twins_")
}
