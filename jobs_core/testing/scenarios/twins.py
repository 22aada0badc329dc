"""Near-twin identifiers, one family at a time: names told apart by their code points only.

Every identifier a driver stores and looks up — an id, a key, a name, a queue, a tenant, a
worker, a run, a step, an event, a task, a sweep, an account, a consumer, an endpoint, a lease
key or holder — is
exact text: two that differ in one code point are two. A store compares them as text the way
its column, its collation or its key pattern does, and a third party's store often does not
compare exactly: a case-insensitive or accent-insensitive collation (MySQL's and SQL Server's
defaults), a pad-space one (`'a' = 'a '`), a prefix or pattern match (`LIKE 'x%'`, an
unescaped `_`, a Redis `SCAN MATCH x*`). The random walks draw small pools of names in which no
two are such twins, so these scenarios write the twins of each identifier side by side and read
each back alone. Each scenario stops at the first call of a family the driver does not declare.
"""

from __future__ import annotations

from dataclasses import replace

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
    Lease,
    LeaseRef,
    LeaseRenew,
    LeaseTake,
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
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim,
    claim_one,
    new_job,
    row,
    same_json,
)

#: One identifier and its near twins; `TWINS[0]` is the one looked up. Where the order of the
#: writes could matter, it is written last: a store that answers the first of the twins it
#: finds answers another one.
TWINS = ("sync", "Sync", "sync ", "sýnc", "sync-2", "s_nc")
#: A prefix of every twin, never written: a prefix match finds them all.
PREFIX = "syn"
#: A twin never written: a store that looks it up exactly finds nothing, one that falls back
#: to a twin when the exact lookup fails finds that twin.
UNWRITTEN = "SYNC"
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
    (where declared) a pause of a twin queue or name pauses nothing else."""
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


async def scenario_twins_workers_apart(driver: JobDriver) -> None:
    """The worker registry (declared by some drivers only) keeps one row per twin worker id."""
    for twin in LAST:
        await driver.worker_beat(WorkerBeat(twin, f'{{"w":"{twin}"}}', 60_000, T0))
    listed = await driver.worker_list(T0)
    assert sorted(w.worker_id for w in listed) == sorted(TWINS), listed
    assert all(same_json(w.info_json, f'{{"w":"{w.worker_id}"}}') for w in listed), listed
    assert not await driver.worker_forget(UNWRITTEN)
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
    for twin, want in (*((t, [f"l{i}"]) for i, t in enumerate(TWINS)), (PREFIX, [])):
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
    for twin in TWINS:
        for params in (
            CounterReadParams(T0 - DAY, T0 + DAY, names=(twin,)),
            CounterReadParams(T0 - DAY, T0 + DAY, queues=(twin,)),
        ):
            got = await driver.counter_read(params)
            assert [(r.name, r.queue, r.completed) for r in got] == [(twin, twin, 1)], got


async def scenario_twins_steps_and_events_apart(driver: JobDriver) -> None:
    """Each twin run keeps its own steps, one run keeps each twin step; each twin event name,
    and each twin tenant, meets its own waits only."""
    runs = await _claimed_twin_rows(driver, "r", "run_id")
    landed = await driver.step_put([StepPut(j.fence, "charge", f'"{j.id}"', T0) for j in runs])
    assert landed == [True] * len(TWINS)
    for i, twin in enumerate(TWINS):
        steps = await driver.step_list(twin)
        assert [s.run_id for s in steps] == [twin], (twin, steps)
        assert same_json(steps[0].output_json, f'"r{i}"'), steps
    assert await driver.step_list(PREFIX) == [] and await driver.step_list(UNWRITTEN) == []
    one = runs[0].fence
    for twin in LAST:
        assert await driver.step_put([StepPut(one, twin, f'"{twin}"', T0 + 1)]) == [True]
    named = await driver.step_list(TWINS[0])
    assert sorted(s.name for s in named) == sorted(["charge", *TWINS]), named
    assert all(same_json(s.output_json, f'"{s.name}"') for s in named[1:]), named
    # Events: one per twin name (for tenant t1), one per twin tenant (of the name "paid").
    for i, twin in enumerate(LAST):
        data = f'{{"n": {TWINS.index(twin)}}}'
        await driver.event_publish(EventRecord(f"e{i}", twin, data, T0, T0 + DAY, "t1", False))
        await driver.event_publish(EventRecord(f"f{i}", "paid", data, T0, T0 + DAY, twin, False))
    for i, twin in enumerate(TWINS):
        for wait in (EventWait(twin, "{}", T0, "t1"), EventWait("paid", "{}", T0, twin)):
            found = await driver.event_find(wait, T0 + 1)
            assert found is not None and same_json(found.data_json, f'{{"n": {i}}}'), (wait, found)
    for unknown in (PREFIX, UNWRITTEN):
        assert await driver.event_find(EventWait(unknown, "{}", T0, "t1"), T0 + 1) is None
        assert await driver.event_find(EventWait("paid", "{}", T0, unknown), T0 + 1) is None
    # A parked wait is woken by its own name only.
    wait = EventWait(TWINS[0], "{}", T0 + 2, "t1")
    parked = runs[1]
    nack = Nack(parked.fence, NackKind.PARK, T0 + 2, run_at_ms=None, wait=wait)
    assert await driver.job_nack([nack]) == [True]
    for i, twin in enumerate(TWINS[1:]):
        event = EventRecord(f"g{i}", twin, "{}", T0 + 3, T0 + DAY, "t1", False)
        assert await driver.event_publish(event) == 0, twin
    assert (await row(driver, parked.id)).state is JobState.PARKED
    assert await driver.event_find(wait, T0 + 4) is None, "a twin's event met the wait"
    event = EventRecord("h", TWINS[0], "{}", T0 + 3, T0 + DAY, "t1", False)
    assert await driver.event_publish(event) == 1


async def scenario_twins_tasks_apart(driver: JobDriver) -> None:
    """Each twin task keeps its own mark: a fire of one moves no other's watermark."""
    marks = await driver.task_arm(list(LAST), T0)
    assert [m.name for m in marks] == list(LAST)
    assert await driver.task_marks([PREFIX, UNWRITTEN]) == {}
    job = new_job("fired", idempotency_key="fired-occ")
    fired = await driver.task_fire(TaskFire(TWINS[1], T0, T0 + 60_000, T0 + 60_000, job, T0 + 1))
    assert fired.enqueued is not None and not fired.enqueued.deduped, fired
    got = await driver.task_marks(list(TWINS))
    assert {n: (m.name, m.watermark_ms) for n, m in got.items()} == {
        t: (t, T0 + 60_000 if t == TWINS[1] else T0) for t in TWINS
    }, got
    for twin in TWINS:
        (again,) = await driver.task_arm([twin], T0 + 5)
        assert (again.name, again.fired_job_id) == (twin, "fired" if twin == TWINS[1] else None)


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
    for twin, j in zip(TWINS, runs, strict=True):
        listed = await driver.sweep_list(twin, 10)
        assert [e.run_id for e in listed] == [j.run_id], (twin, listed)
    assert await driver.sweep_list(PREFIX, 10) == [] and await driver.sweep_list(UNWRITTEN, 1) == []


async def scenario_twins_postings_apart(driver: JobDriver) -> None:
    """Each twin key posts once in its own right, each twin tenant has a ledger of its own, and
    a balance of one account counts no twin account."""
    jobs = await _claimed_twin_rows(driver, "p", "idempotency_key")
    for i, j in enumerate(jobs):
        account = ACCOUNT_TWINS[i % len(ACCOUNT_TWINS)]
        lines = (PostingLine(account, "EUR", 10 + i), PostingLine("revenue", "EUR", -10 - i))
        answer = await driver.posting_put(PostingPut(j.fence, None, TWINS[i], lines, T0))
        assert answer.status == "applied", (TWINS[i], answer)
    # The first job's key again, in each twin tenant's ledger.
    for i, twin in enumerate(LAST):
        lines = (PostingLine("bank", "EUR", 100 + i), PostingLine("revenue", "EUR", -100 - i))
        answer = await driver.posting_put(PostingPut(jobs[0].fence, twin, TWINS[0], lines, T0))
        assert answer.status == "applied", (twin, answer)
    for i, twin in enumerate(TWINS):
        posted = await driver.posting_get(None, twin)
        assert posted is not None and posted.job_id == f"p{i}", (twin, posted)
        posted = await driver.posting_get(twin, TWINS[0])
        amount = 100 + LAST.index(twin)
        assert posted is not None and posted.lines[0].amount == amount, (twin, posted)
    for unknown in (PREFIX, UNWRITTEN):
        assert await driver.posting_get(None, unknown) is None
        assert await driver.posting_get(unknown, TWINS[0]) is None
    debits = {a: 0 for a in ACCOUNT_TWINS}
    for i in range(len(TWINS)):
        debits[ACCOUNT_TWINS[i % len(ACCOUNT_TWINS)]] += 10 + i
    for account in ACCOUNT_TWINS:
        balances = await driver.posting_balances(None, [account])
        assert [(b.account, b.debits) for b in balances] == [(account, debits[account])], balances


async def scenario_twins_consumers_apart(driver: JobDriver) -> None:
    """Each twin consumer name, and each twin tenant, keeps a cursor of its own."""
    j = (await _claimed_twin_rows(driver, "c"))[0]
    for twin in LAST:
        i = TWINS.index(twin)
        put = ConsumerPut(j.fence, twin, None, "src", None, str(i), 1, None, T0)
        assert await driver.consumer_cursor_put(put), twin
        put = ConsumerPut(j.fence, "orders", twin, "src", None, str(i), 1, None, T0)
        assert await driver.consumer_cursor_put(put), twin
    for i, twin in enumerate(TWINS):
        got = await driver.consumer_cursor_get(twin, None)
        assert got is not None and got.cursor_json == str(i), (twin, got)
        got = await driver.consumer_cursor_get("orders", twin)
        assert got is not None and got.cursor_json == str(i), (twin, got)
        listed = await driver.consumer_list(twin, 10)
        assert [(e.name, e.tenant_id) for e in listed] == [(twin, None)], listed
    for unknown in (PREFIX, UNWRITTEN):
        assert await driver.consumer_cursor_get(unknown, None) is None
        assert await driver.consumer_cursor_get("orders", unknown) is None
        assert await driver.consumer_list(unknown, 10) == []


async def scenario_twins_webhooks_apart(driver: JobDriver) -> None:
    """Each twin endpoint, and each twin tenant, has an endpoint, a streak and attempts of its
    own."""
    for twin in LAST:
        i = TWINS.index(twin)
        await driver.webhook_endpoint_put(WebhookEndpointPut(None, twin, f"https://{i}", T0))
        await driver.webhook_endpoint_put(WebhookEndpointPut(twin, "orders", f"https://{i}", T0))
    j = (await _claimed_twin_rows(driver, "h"))[1]
    attempt = WebhookAttemptPut(
        j.fence, None, TWINS[1], "m", "failed", 500, 1, "", "X_WEBHOOK_DELIVERY_FAILED", 9, T0
    )
    answer = await driver.webhook_attempt_put(attempt)
    assert answer.recorded, answer
    for i, twin in enumerate(TWINS):
        ep = await driver.webhook_endpoint_get(None, twin)
        failures = 1 if twin == TWINS[1] else 0
        assert ep is not None and (ep.url, ep.failures) == (f"https://{i}", failures), (twin, ep)
        ep = await driver.webhook_endpoint_get(twin, "orders")
        assert ep is not None and (ep.tenant_id, ep.url) == (twin, f"https://{i}"), (twin, ep)
    assert await driver.webhook_attempt_list(WebhookAttemptListParams(None, TWINS[0], 10)) == []
    for unknown in (PREFIX, UNWRITTEN):
        assert await driver.webhook_endpoint_get(None, unknown) is None
        assert await driver.webhook_endpoint_get(unknown, "orders") is None


async def _holdings(driver: JobDriver, key: str) -> list[tuple[str, int, int]]:
    """The key's live holdings at `T0 + 1` as `(holder, token, expires_at_ms)`, by holder."""
    return sorted(
        (h.holder, h.token, h.expires_at_ms) for h in await driver.lease_holders(key, T0 + 1)
    )


async def scenario_twins_leases_apart(driver: JobDriver) -> None:
    """Each twin lease key has a limit and holdings of its own; a renewal, release or abandon
    lands on its exact key only, and the holders of a key are its own. Each twin holder of one
    key holds apart: a take by one replaces its own holding only, and a twin of a holder is
    another holder, for the room too."""
    # Each twin key held by a holder of its own, limit 1. Round r takes LAST[r:] again, so
    # LAST[k] is taken k + 1 times by its holder and every key's live token differs from every
    # other key's however a store numbers them (one counter, or one per key).
    held: dict[str, Lease] = {}
    for r in range(len(LAST)):
        takes = [LeaseTake(t, f"h{TWINS.index(t)}", 1, 60_000) for t in LAST[r:]]
        got = await driver.lease_take(takes, T0)
        assert all(g is not None for g in got), f"a twin key's holding took the room: {got}"
        held |= {g.key: g for g in got if g is not None}
    assert sorted(held) == sorted(TWINS), held
    others = [LeaseTake(t, "other", 1, 60_000) for t in TWINS]
    assert await driver.lease_take(others, T0) == [None] * len(TWINS), "a key of limit 1 took two"

    def state() -> dict[str, list[tuple[str, int, int]]]:
        return {t: [(h.holder, h.token, h.expires_at_ms)] for t, h in held.items()}

    async def stored() -> dict[str, list[tuple[str, int, int]]]:
        return {t: await _holdings(driver, t) for t in TWINS}

    got_held = await stored()
    assert got_held == state(), f"the holders of a twin key: {got_held}"
    # A twin key's token, or any token under a key never written, lands nothing.
    keys = (*TWINS, PREFIX, UNWRITTEN)
    crossed = [LeaseRef(k, held[t].token) for k in keys for t in TWINS if k != t]
    renews = [LeaseRenew(r.key, r.token, 5000) for r in crossed]
    landed = await driver.lease_renew(renews, T0 + 1)
    assert landed == [False] * len(crossed), f"renewed under a twin key: {landed}"
    landed = await driver.lease_release(crossed, T0 + 1)
    assert landed == [False] * len(crossed), f"released under a twin key: {landed}"
    landed = await driver.lease_abandon(crossed, T0 + 1)
    assert landed == [False] * len(crossed), f"abandoned under a twin key: {landed}"
    assert await stored() == state(), "a twin key's renewal, release or abandon landed"
    for unknown in (PREFIX, UNWRITTEN):
        found = await driver.lease_holders(unknown, T0)
        assert found == [], f"{unknown!r} holds its twins' holdings: {found}"
    # Each on its exact key: one renewed, one released, one abandoned.
    renewed, released, abandoned = (held[t] for t in TWINS[:3])
    renew = LeaseRenew(renewed.key, renewed.token, 5000)
    assert await driver.lease_renew([renew], T0 + 1) == [True]
    held[renewed.key] = replace(renewed, expires_at_ms=T0 + 5001)
    assert await driver.lease_release([LeaseRef(released.key, released.token)], T0 + 1) == [True]
    assert await driver.lease_abandon([LeaseRef(abandoned.key, abandoned.token)], T0 + 1) == [True]
    want = {**state(), released.key: [], abandoned.key: []}
    assert await stored() == want, "an exact key's call changed a twin's holding"
    # Twin holders of one key, room for all six: each its own holding.
    lock = [LeaseTake("lock", t, len(TWINS), 60_000) for t in LAST]
    mine = await driver.lease_take(lock, T0 + 1)
    assert [g is not None and g.holder for g in mine] == list(LAST), mine
    before = await _holdings(driver, "lock")
    assert sorted(h for h, _, _ in before) == sorted(TWINS), f"a twin holder's went: {before}"
    again = await driver.lease_take([LeaseTake("lock", TWINS[0], len(TWINS), 1000)], T0 + 1)
    assert again[0] is not None and again[0].holder == TWINS[0], again
    want_lock = sorted(
        (h, t, e) if h != TWINS[0] else (h, again[0].token, T0 + 1001) for h, t, e in before
    )
    assert await _holdings(driver, "lock") == want_lock, "a take replaced a twin holder's holding"
    # No room left: a holder never written is refused, its twins' holdings are not its own.
    for stranger in (UNWRITTEN, PREFIX, "sync  "):
        take = LeaseTake("lock", stranger, len(TWINS), 1000)
        assert await driver.lease_take([take], T0 + 1) == [None], f"{stranger!r} took a twin's room"
    assert await _holdings(driver, "lock") == want_lock


TWIN_SCENARIOS: dict[str, Scenario] = {
    name.removeprefix("scenario_"): fn
    for name, fn in globals().items()
    if name.startswith("scenario_twins_")
}
