"""The job family's scenarios: claims, settles, pauses, retention, limits, the wake."""

from __future__ import annotations

import asyncio
import json

from jobs_core.driver import (
    ENQUEUE_CHUNK,
    MAX_CLAIM_LIMIT,
    MAX_ENQUEUE_BATCH,
    MAX_KEY_BYTES,
    MAX_NAME_BYTES,
    MAX_TIME_MS,
    JobDriver,
)
from jobs_core.errors import JobsError
from jobs_core.records import (
    Ack,
    BuriedJob,
    CancelAnswer,
    ClaimParams,
    EnqueueResult,
    Fence,
    Heartbeat,
    JoinEnqueue,
    Nack,
    NackKind,
    NewJob,
    Pause,
    Progress,
    PurgeParams,
    TaskFire,
    TaskMark,
    WorkerBeat,
)
from jobs_core.semantics import LEASE_LAPSED_ERROR
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    accepted,
    claim,
    claim_one,
    exactly,
    ids,
    new_job,
    refused,
    row,
    same_json,
    until_live,
)

# -- the scenarios ----------------------------------------------------------------------------


async def scenario_bury_final_attempt(driver: JobDriver) -> None:
    """A lapsed final attempt is buried (dead, or failed when dropped), even under pauses."""
    await driver.job_enqueue_many(
        [
            new_job("x1", name="drop-me", max_attempts=1),
            new_job("x2", name="keep", max_attempts=1),
            new_job("x3", name="keep", max_attempts=2),
            new_job("y1", queue="other", max_attempts=1),
        ]
    )
    jobs, buried = await claim(driver, T0, "q", "other", lease_ms=1000)
    assert sorted(ids(jobs)) == ["x1", "x2", "x3", "y1"] and buried == []
    fences = {j.id: j.fence for j in jobs}
    assert all(j.final_attempt for j in jobs if j.id != "x3")

    await driver.pause_add(Pause("queue", "q"))
    await driver.pause_add(Pause("name", "keep"))
    # The lease lapses when lease_until <= now: still held at T0 + 999, lapsed at T0 + 1000.
    assert await claim(driver, T0 + 999, drop_exhausted=frozenset({"drop-me"})) == ([], [])

    jobs, buried = await claim(driver, T0 + 1000, drop_exhausted=frozenset({"drop-me"}))
    assert jobs == []
    assert buried == [
        BuriedJob("x1", "drop-me", "q", JobState.FAILED),
        BuriedJob("x2", "keep", "q", JobState.DEAD),
    ]
    for job_id, state in (("x1", JobState.FAILED), ("x2", JobState.DEAD)):
        r = await row(driver, job_id)
        assert r.state is state
        assert r.finished_at_ms == T0 + 1000
        assert r.lease_until_ms is None
        assert r.last_error == LEASE_LAPSED_ERROR
        assert r.attempt == 1 and r.claims == 1 and r.claimed_by == "w1"
    # A non-final lapsed row stays running while its queue is paused; another queue's stays too.
    assert (await row(driver, "x3")).state is JobState.RUNNING
    assert (await row(driver, "y1")).state is JobState.RUNNING
    stale = [Ack(fences["x1"], T0 + 1000), Ack(fences["x2"], T0 + 1000)]
    assert await driver.job_ack(stale) == [False, False]
    assert await claim(driver, T0 + 1001) == ([], [])

    await driver.pause_remove(Pause("queue", "q"))
    await driver.pause_remove(Pause("name", "keep"))
    jobs, buried = await claim(driver, T0 + 1001, worker="w2")
    assert ids(jobs) == ["x3"] and buried == []
    assert jobs[0].attempt == 2 and jobs[0].claims == 2 and jobs[0].final_attempt

    jobs, buried = await claim(driver, T0 + 5000, "other")
    assert jobs == [] and buried == [BuriedJob("y1", "n", "other", JobState.DEAD)]


async def scenario_lapsed_lease_reclaimed(driver: JobDriver) -> None:
    """A lapsed non-final lease is claimed again (claims + 1); only the newest fence holds."""
    await driver.job_enqueue(new_job("j", max_attempts=3))
    first = await claim_one(driver, T0, worker="w1", lease_ms=1000)
    assert (first.attempt, first.claims, first.lease_until_ms) == (1, 1, T0 + 1000)
    assert await claim(driver, T0 + 999, worker="w2") == ([], [])

    # Lapsed exactly at lease_until_ms: a new claim takes it.
    second = await claim_one(driver, T0 + 1000, worker="w2", lease_ms=3000)
    assert (second.id, second.attempt, second.claims) == ("j", 2, 2)
    assert (second.worker_id, second.lease_until_ms) == ("w2", T0 + 4000)

    old, now = first.fence, T0 + 1001
    assert await driver.job_ack([Ack(old, now, '"x"')]) == [False]
    assert await driver.job_heartbeat([Heartbeat(old, 1000, now)]) == [False]
    assert await driver.job_progress([Progress(old, "1", now)]) == [False]
    assert await driver.job_nack([Nack(old, NackKind.FAIL, now)]) == [False]
    # The worker is half of the fence: the right count under another name does not hold.
    assert await driver.job_ack([Ack(Fence("j", 2, "w1"), now)]) == [False]
    r = await row(driver, "j")
    assert (r.state, r.claims, r.claimed_by, r.progress_json) == (JobState.RUNNING, 2, "w2", None)

    # Expiry alone never breaks a fence: past its lease, the holder still heartbeats and acks.
    assert await driver.job_heartbeat([Heartbeat(second.fence, 1000, T0 + 9000)]) == [True]
    assert (await row(driver, "j")).lease_until_ms == T0 + 10_000
    assert await driver.job_ack([Ack(second.fence, T0 + 10_500, '{"ok": true}')]) == [True]
    r = await row(driver, "j")
    assert (r.state, r.finished_at_ms, r.lease_until_ms) == (JobState.COMPLETED, T0 + 10_500, None)
    assert r.result_json is not None and json.loads(r.result_json) == {"ok": True}
    assert await driver.job_ack([Ack(second.fence, T0 + 9600)]) == [False]


async def scenario_claim_order(driver: JobDriver) -> None:
    """Claims go by priority, then run_at, then id in code-point order, across queues."""
    rows = [
        # (id, queue, priority, run_at)
        ("z-late", "q2", 0, T0 - 10),
        ("y-early", "q1", 0, T0 - 20),
        ("a", "q2", 0, T0 - 10),
        ("B", "q1", 0, T0 - 10),
        ("_", "q2", 0, T0 - 10),
        ("é", "q1", 1, T0 - 1000),
        ("f", "q2", 1, T0 - 1000),
        ("0", "q1", 100, T0 - 5000),
        # U+FF41 before U+1F600 by code point; UTF-16 code units (a surrogate pair, D83D, below
        # FF41) order them the other way.
        ("\U0001f600", "q2", 2, T0 - 1000),
        ("\uff41", "q1", 2, T0 - 1000),
        ("future", "q1", 0, T0 + 1),
        ("elsewhere", "q3", 0, T0 - 9000),
    ]
    await driver.job_enqueue_many(
        [new_job(i, queue=q, priority=p, run_at_ms=at) for i, q, p, at in rows]
    )
    first, _ = await claim(driver, T0, "q1", "q2", limit=3)
    assert ids(first) == ["y-early", "B", "_"]
    rest, _ = await claim(driver, T0, "q2", "q1", limit=10)
    # Code-point order: "_" (U+5F) after "B" (U+42), "a" (U+61) after "_"; "f" before "é".
    assert ids(rest) == ["a", "z-late", "f", "é", "\uff41", "\U0001f600", "0"]
    assert await claim(driver, T0, "q1", "q2") == ([], [])
    later, _ = await claim(driver, T0 + 1, "q1", "q2")
    assert ids(later) == ["future"]


async def scenario_pause_by_queue_and_name(driver: JobDriver) -> None:
    """A paused queue or job name is skipped by claims until the pause is lifted."""
    await driver.job_enqueue_many(
        [
            new_job("1", queue="q1", name="a"),
            new_job("2", queue="q1", name="b"),
            new_job("3", queue="q2", name="a"),
            new_job("4", queue="q2", name="b"),
        ]
    )
    assert await driver.pause_add(Pause("queue", "q1")) is True
    assert await driver.pause_add(Pause("queue", "q1")) is False
    assert await driver.pause_add(Pause("name", "b")) is True
    assert await driver.pause_list() == [Pause("name", "b"), Pause("queue", "q1")]
    jobs, _ = await claim(driver, T0, "q1", "q2")
    assert ids(jobs) == ["3"]

    assert await driver.pause_remove(Pause("queue", "q1")) is True
    assert await driver.pause_remove(Pause("queue", "q1")) is False
    jobs, _ = await claim(driver, T0, "q1", "q2")
    assert ids(jobs) == ["1"]

    assert await driver.pause_remove(Pause("name", "b")) is True
    assert await driver.pause_list() == []
    jobs, _ = await claim(driver, T0, "q1", "q2")
    assert ids(jobs) == ["2", "4"]
    # A pause names a value exactly: pausing queue "q" or name "%" matches nothing here.
    await driver.job_enqueue(new_job("5", queue="q1", name="a"))
    await driver.pause_add(Pause("queue", "q"))
    await driver.pause_add(Pause("name", "%"))
    jobs, _ = await claim(driver, T0, "q1")
    assert ids(jobs) == ["5"]


async def scenario_idempotency_live_rows_only(driver: JobDriver) -> None:
    """The key namespace (name, tenant, key) covers live rows only; an id is never reused."""
    k = {"name": "n", "idempotency_key": "k"}
    assert await driver.job_enqueue(new_job("1", **k)) == EnqueueResult("1", False)
    assert await driver.job_enqueue(new_job("2", **k)) == EnqueueResult("1", True)
    assert await driver.job_enqueue(new_job("3", **k, tenant_id="t1")) == EnqueueResult("3", False)
    assert await driver.job_enqueue(new_job("4", **k, tenant_id="t1")) == EnqueueResult("3", True)
    assert await driver.job_enqueue(new_job("5", **k, tenant_id="t2")) == EnqueueResult("5", False)
    assert await driver.job_enqueue(new_job("6", name="m", idempotency_key="k")) == EnqueueResult(
        "6", False
    )
    assert await driver.job_enqueue(new_job("7", name="n", idempotency_key="K")) == EnqueueResult(
        "7", False
    )
    # The id wins over anything else in the record.
    assert await driver.job_enqueue(new_job("1", name="other")) == EnqueueResult("1", True)
    assert await driver.job_enqueue(new_job("8", name="other")) == EnqueueResult("8", False)

    # Running and parked rows still hold their key.
    held = await claim_one(driver, T0, limit=1)
    assert held.id == "1"
    assert await driver.job_enqueue(new_job("9", **k)) == EnqueueResult("1", True)
    assert await driver.job_nack([Nack(held.fence, NackKind.PARK, T0, run_at_ms=None)]) == [True]
    assert await driver.job_enqueue(new_job("9", **k)) == EnqueueResult("1", True)

    # A finished row frees its key, but never its id.
    assert await driver.job_cancel("1", T0) is CancelAnswer.CANCELLED
    assert await driver.job_enqueue(new_job("9", **k)) == EnqueueResult("9", False)
    assert await driver.job_enqueue(new_job("1", name="fresh")) == EnqueueResult("1", True)
    # ... and that deduped call stored nothing under its own key.
    assert await driver.job_enqueue(
        new_job("10", name="fresh", idempotency_key="key-1")
    ) == EnqueueResult("10", False)
    assert await driver.job_get_many(["2", "4", "1"]) == {"1": await row(driver, "1")}
    assert (await row(driver, "1")).state is JobState.CANCELLED

    # Inside one batch a later record dedupes against an earlier one.
    answers = await driver.job_enqueue_many(
        [
            new_job("11", name="batch", idempotency_key="b"),
            new_job("12", name="batch", idempotency_key="b"),
            new_job("11", name="batch", idempotency_key="other"),
            new_job("13", name="batch", idempotency_key="b", tenant_id="t1"),
        ]
    )
    assert answers == [
        EnqueueResult("11", False),
        EnqueueResult("11", True),
        EnqueueResult("11", True),
        EnqueueResult("13", False),
    ]


async def scenario_enqueue_many_chunks(driver: JobDriver) -> None:
    """2,500 records cross the 1,000-record chunk; duplicates dedupe across chunks too."""
    count = 2 * ENQUEUE_CHUNK + ENQUEUE_CHUNK // 2
    jobs = [new_job(f"e{i:05d}") for i in range(count)]
    # Same id as an earlier chunk's record; same key as an earlier chunk's record; same key as
    # the record just before it (chunk edge at 2,000).
    jobs[1500] = new_job("e00010", name="changed")
    jobs[1200] = new_job("dup-key", idempotency_key="key-e00005")
    jobs[ENQUEUE_CHUNK * 2] = new_job("edge", idempotency_key=f"key-e{ENQUEUE_CHUNK * 2 - 1:05d}")
    answers = await driver.job_enqueue_many(jobs)
    assert len(answers) == count
    expected = [EnqueueResult(j.id, False) for j in jobs]
    expected[1500] = EnqueueResult("e00010", True)
    expected[1200] = EnqueueResult("e00005", True)
    expected[ENQUEUE_CHUNK * 2] = EnqueueResult(f"e{ENQUEUE_CHUNK * 2 - 1:05d}", True)
    assert answers == expected
    stored = await driver.job_get_many([j.id for j in jobs])
    assert len(stored) == count - 3
    assert "dup-key" not in stored and "edge" not in stored
    assert stored["e00010"].name == "n"
    assert (await driver.queue_demand(["q"], T0)) == {"q": count - 3}
    # Over the cap: refused before anything is written.
    await refused(
        "X_JOB_BATCH_TOO_LARGE",
        driver.job_enqueue_many([new_job("over")] * (MAX_ENQUEUE_BATCH + 1)),
    )
    assert await driver.job_get_many(["over"]) == {}


async def scenario_settles_of_thousands_in_one_call(driver: JobDriver) -> None:
    """One settle call of thousands of items lands them all (no size cap refuses it): a store
    that writes a call's rows per command must slice them (a Lua script's `unpack` holds no
    more than about 8,000 values, and an ack of 4,000 went past it)."""
    count = 4 * MAX_CLAIM_LIMIT + MAX_CLAIM_LIMIT // 2
    await driver.job_enqueue_many([new_job(f"s{i:05d}") for i in range(count)])
    held: list[Fence] = []
    while len(held) < count:
        jobs, _ = await claim(driver, T0, limit=MAX_CLAIM_LIMIT, lease_ms=60_000)
        assert jobs, "claimed nothing with rows due"
        held += [j.fence for j in jobs]
    acks = [Ack(f, T0 + 2) for f in held]
    try:
        beats = await driver.job_heartbeat([Heartbeat(f, 60_000, T0 + 1) for f in held])
        landed = await driver.job_ack(acks)
    except JobsError as exc:
        raise AssertionError(f"a settle call of {count} items failed: {exc}") from exc
    assert beats == [True] * count
    assert landed == [True] * count
    assert await driver.job_ack(acks) == [False] * count  # settled: no fence holds
    rows = await driver.job_get_many([f.job_id for f in held[:: MAX_CLAIM_LIMIT // 2]])
    assert {r.state for r in rows.values()} == {JobState.COMPLETED}
    assert (await driver.queue_demand(["q"], T0 + 2)) == {"q": 0}


async def scenario_requeue_refusals(driver: JobDriver) -> None:
    """Requeue refuses a missing id, a live row, and a key held by another live row."""
    await refused("X_JOB_NOT_FOUND", driver.job_requeue("missing", T0))
    await driver.job_enqueue(new_job("r", idempotency_key="k", max_attempts=2))
    await refused("X_JOB_NOT_REQUEUEABLE", driver.job_requeue("r", T0))
    held = await claim_one(driver, T0)
    await refused("X_JOB_NOT_REQUEUEABLE", driver.job_requeue("r", T0))
    assert await driver.job_nack(
        [Nack(held.fence, NackKind.FAIL, T0 + 10, error="bad", progress_json="[1]")]
    ) == [True]
    dead = await row(driver, "r")
    assert (dead.state, dead.attempt, dead.finished_at_ms) == (JobState.DEAD, 1, T0 + 10)

    assert (await driver.job_enqueue(new_job("s", idempotency_key="k"))).deduped is False
    await refused("X_JOB_REQUEUE_DUPLICATE", driver.job_requeue("r", T0 + 20))
    assert await row(driver, "r") == dead

    assert await driver.job_cancel("s", T0 + 30) is CancelAnswer.CANCELLED
    await driver.job_requeue("r", T0 + 40)
    r = await row(driver, "r")
    assert (r.state, r.attempt, r.run_at_ms) == (JobState.READY, 0, T0 + 40)
    assert (r.lease_until_ms, r.finished_at_ms) == (None, None)
    assert (r.claims, r.claimed_by, r.run_id) == (1, "w1", "run-r")
    await refused("X_JOB_NOT_REQUEUEABLE", driver.job_requeue("r", T0 + 50))
    # Fresh attempts: the requeued row runs max_attempts more times before it is buried.
    again = await claim_one(driver, T0 + 40)
    assert (again.attempt, again.claims, again.final_attempt) == (1, 2, False)
    assert await driver.job_ack([Ack(held.fence, T0 + 41)]) == [False]


async def scenario_cancel_running(driver: JobDriver) -> None:
    """Cancelling a running job finishes it; its holder's settles are then refused."""
    await driver.job_enqueue_many([new_job("c"), new_job("d")])
    held, _other = exactly(2, (await claim(driver, T0))[0], "claimed jobs")
    assert await driver.job_cancel("c", T0 + 5) is CancelAnswer.CANCELLED
    r = await row(driver, "c")
    assert (r.state, r.finished_at_ms, r.lease_until_ms) == (JobState.CANCELLED, T0 + 5, None)
    assert (r.claimed_by, r.claims) == ("w1", 1)
    assert await driver.job_heartbeat([Heartbeat(held.fence, 1000, T0 + 6)]) == [False]
    assert await driver.job_progress([Progress(held.fence, "2", T0 + 6)]) == [False]
    assert await driver.job_ack([Ack(held.fence, T0 + 6, '"late"')]) == [False]
    assert await driver.job_nack([Nack(held.fence, NackKind.RETRY, T0 + 6, T0 + 6)]) == [False]
    assert await row(driver, "c") == r
    assert await driver.job_cancel("c", T0 + 7) is CancelAnswer.FINISHED
    assert await driver.job_cancel("nobody", T0 + 7) is CancelAnswer.NOT_FOUND
    # A lapsed lease does not bring a cancelled row back.
    assert ids((await claim(driver, T0 + 5000))[0]) == ["d"]
    # Cancelling a ready row works the same way; a finished one answers FINISHED.
    await driver.job_enqueue(new_job("e"))
    assert await driver.job_cancel("e", T0 + 8) is CancelAnswer.CANCELLED
    assert await driver.job_ack([Ack(Fence("d", 2, "w1"), T0 + 5001)]) == [True]
    assert await driver.job_cancel("d", T0 + 9) is CancelAnswer.FINISHED


async def scenario_nack_attempt_accounting(driver: JobDriver) -> None:
    """Retry and fail spend the attempt; park, shed, interrupt and refuse give it back."""
    kinds = ["retry", "fail", "drop", "park", "park-event", "shed", "interrupt", "refuse"]
    await driver.job_enqueue_many([new_job(k) for k in kinds])
    held = {j.id: j.fence for j in (await claim(driver, T0))[0]}
    assert sorted(held) == sorted(kinds)
    now = T0 + 10
    answers = await driver.job_nack(
        [
            Nack(held["retry"], NackKind.RETRY, now, run_at_ms=T0 + 500, error="e1"),
            Nack(held["fail"], NackKind.FAIL, now, error="e2", progress_json='{"p": 1}'),
            Nack(held["drop"], NackKind.FAIL, now, error="e3", dead_letter=False),
            Nack(held["park"], NackKind.PARK, now, run_at_ms=T0 + 100),
            Nack(held["park-event"], NackKind.PARK, now),
            Nack(held["shed"], NackKind.SHED, now, error="ignored"),
            Nack(held["interrupt"], NackKind.INTERRUPT, now),
            Nack(held["refuse"], NackKind.REFUSE, now, error="e4"),
            Nack(held["retry"], NackKind.FAIL, now),
        ]
    )
    assert answers == [True] * 8 + [False]
    rows = await driver.job_get_many(kinds)
    got = {
        k: (r.state, r.attempt, r.run_at_ms, r.finished_at_ms, r.last_error, r.lease_until_ms)
        for k, r in rows.items()
    }
    assert got == {
        "retry": (JobState.READY, 1, T0 + 500, None, "e1", None),
        "fail": (JobState.DEAD, 1, T0, now, "e2", None),
        "drop": (JobState.FAILED, 1, T0, now, "e3", None),
        "park": (JobState.PARKED, 0, T0 + 100, None, None, None),
        "park-event": (JobState.PARKED, 0, None, None, None, None),
        "shed": (JobState.READY, 0, now, None, None, None),
        "interrupt": (JobState.READY, 0, now, None, None, None),
        "refuse": (JobState.FAILED, 0, T0, now, "e4", None),
    }
    assert rows["fail"].progress_json is not None
    assert json.loads(rows["fail"].progress_json) == {"p": 1}
    assert all(r.claims == 1 for r in rows.values())

    assert ids((await claim(driver, T0 + 99))[0]) == ["interrupt", "shed"]
    again, _ = await claim(driver, T0 + 500)
    assert ids(again) == ["park", "retry"]
    assert [(j.attempt, j.claims) for j in again] == [(1, 2), (2, 2)]
    # Shed gives the attempt back and keeps the error an earlier retry recorded.
    retry = next(j for j in again if j.id == "retry")
    assert await driver.job_nack(
        [Nack(retry.fence, NackKind.SHED, T0 + 600, run_at_ms=T0 + 700)]
    ) == [True]
    r = await row(driver, "retry")
    assert (r.state, r.attempt, r.run_at_ms, r.last_error) == (JobState.READY, 1, T0 + 700, "e1")

    # A row parked until an event is never due, however late.
    late, _ = await claim(driver, T0 + 10**9)
    assert "park-event" not in ids(late)
    assert (await row(driver, "park-event")).state is JobState.PARKED
    assert await driver.queue_demand(["q"], T0 + 10**9) == {"q": 0}


async def scenario_special_characters(driver: JobDriver) -> None:
    """Quotes, LIKE wildcards, newlines and non-ASCII round-trip unchanged everywhere."""
    values = ["quo'te", "%_", "new\nline", '☃ ü 漢字 "dq" \\ back']
    decoy = "ab"
    jobs = [
        NewJob(
            id=f"id {v}",
            run_id=f"run {v}",
            name=v,
            queue=v,
            tenant_id=v,
            idempotency_key=v,
            input_json=json.dumps({"v": v, v: [v]}, ensure_ascii=False),
            priority=1,
            run_at_ms=T0,
            max_attempts=2,
            created_at_ms=T0,
            enqueued_by=v,
        )
        for v in values
    ]
    decoy_job = new_job("decoy", name=decoy, queue=decoy, idempotency_key=decoy)
    answers = await driver.job_enqueue_many([*jobs, decoy_job])
    assert [a.deduped for a in answers] == [False] * (len(values) + 1)
    assert [a.deduped for a in await driver.job_enqueue_many(jobs)] == [True] * len(values)
    assert await driver.queue_demand([*values, decoy], T0) == {q: 1 for q in [*values, decoy]}

    for v, job in zip(values, jobs, strict=True):
        await driver.pause_add(Pause("name", v))
        assert Pause("name", v) in await driver.pause_list()
        assert await claim(driver, T0, v, worker=v) == ([], [])
        await driver.pause_remove(Pause("name", v))
        held = await claim_one(driver, T0, v, worker=v)
        assert (held.id, held.name, held.queue, held.tenant_id) == (job.id, v, v, v)
        assert (held.idempotency_key, held.enqueued_by, held.worker_id) == (v, v, v)
        assert held.input == {"v": v, v: [v]}
        result = json.dumps([v], ensure_ascii=False)
        assert await driver.job_progress([Progress(held.fence, result, T0)]) == [True]
        assert await driver.job_ack([Ack(held.fence, T0 + 1, result)]) == [True]
        r = await row(driver, job.id)
        assert (r.id, r.run_id, r.name, r.queue, r.tenant_id) == (job.id, job.run_id, v, v, v)
        assert (r.idempotency_key, r.enqueued_by, r.claimed_by) == (v, v, v)
        assert json.loads(r.input_json) == {"v": v, v: [v]}
        assert r.result_json is not None and json.loads(r.result_json) == [v]
        assert r.progress_json is not None and json.loads(r.progress_json) == [v]
    # The decoy was never matched by a value that looks like a pattern.
    assert (await row(driver, "decoy")).state is JobState.READY
    await driver.worker_beat(WorkerBeat("%_ ☃'\n", '{"w": "☃\'"}', 1000, T0))
    (info,) = exactly(1, await driver.worker_list(T0), "live worker")
    assert info.worker_id == "%_ ☃'\n" and json.loads(info.info_json) == {"w": "☃'"}


async def scenario_demand_with_paused_queue(driver: JobDriver) -> None:
    """Demand counts ready rows due now per asked queue; a paused queue answers 0."""
    await driver.job_enqueue_many(
        [
            new_job("r1", queue="q1", run_at_ms=T0 - 2),
            new_job("r2", queue="q1", run_at_ms=T0 - 1),
            new_job("r3", queue="q1"),
            new_job("r4", queue="q1", priority=1),
            new_job("r5", queue="q1", run_at_ms=T0 + 1),
            new_job("s1", queue="q2"),
        ]
    )
    running, parked = exactly(2, (await claim(driver, T0, "q1", limit=2))[0], "claimed jobs")
    assert (running.id, parked.id) == ("r1", "r2")
    # Parked and due is still not ready: demand counts `ready` rows only.
    assert await driver.job_nack([Nack(parked.fence, NackKind.PARK, T0, run_at_ms=T0)]) == [True]
    assert await driver.queue_demand(["q1", "q2", "q3"], T0) == {"q1": 2, "q2": 1, "q3": 0}
    assert await driver.queue_demand(["q1"], T0 + 1) == {"q1": 3}
    assert await driver.pause_add(Pause("queue", "q1")) is True
    assert await driver.queue_demand(["q1", "q2"], T0 + 1) == {"q1": 0, "q2": 1}
    assert await driver.pause_remove(Pause("queue", "q1")) is True
    assert await driver.queue_demand(["q1"], T0 + 1) == {"q1": 3}
    assert await driver.queue_demand([], T0) == {}


async def scenario_worker_registry_ttl(driver: JobDriver) -> None:
    """A worker is listed until `last beat + ttl` (exclusive); a beat or a claim refreshes it."""
    await driver.worker_beat(WorkerBeat("w2", '{"n": 2}', 1000, T0))
    await driver.worker_beat(WorkerBeat("w1", '{"n": 1}', 2000, T0))
    assert [w.worker_id for w in await driver.worker_list(T0)] == ["w1", "w2"]
    live = await driver.worker_list(T0 + 999)
    (w2,) = exactly(1, [w for w in live if w.worker_id == "w2"], "worker w2")
    assert (w2.last_beat_ms, w2.expires_at_ms, json.loads(w2.info_json)) == (
        T0,
        T0 + 1000,
        {"n": 2},
    )
    assert [w.worker_id for w in await driver.worker_list(T0 + 1000)] == ["w1"]
    assert await driver.worker_list(T0 + 2000) == []

    await driver.worker_beat(WorkerBeat("w1", '{"n": 3}', 1000, T0 + 1500))
    (w1,) = exactly(1, await driver.worker_list(T0 + 2000), "live worker")
    assert (w1.last_beat_ms, w1.expires_at_ms, json.loads(w1.info_json)) == (
        T0 + 1500,
        T0 + 2500,
        {"n": 3},
    )
    beat = WorkerBeat("w3", "{}", 500, T0 + 2000)
    await driver.job_claim(ClaimParams(("q",), "w3", 1, 1000, T0 + 2000, beat=beat))
    assert [w.worker_id for w in await driver.worker_list(T0 + 2100)] == ["w1", "w3"]
    assert await driver.worker_forget("w1") is True
    assert await driver.worker_forget("w1") is False
    assert [w.worker_id for w in await driver.worker_list(T0 + 2100)] == ["w3"]
    # Expired is not gone: the row is there to forget until it is forgotten.
    assert await driver.worker_list(T0 + 2500) == []
    assert await driver.worker_forget("w3") is True


async def scenario_heartbeat_from_now(driver: JobDriver) -> None:
    """A heartbeat moves the lease to `now + lease_ms`, never `old lease + lease_ms`."""
    await driver.job_enqueue(new_job("h"))
    held = await claim_one(driver, T0, lease_ms=1000)
    assert await driver.job_heartbeat([Heartbeat(held.fence, 1000, T0 + 500)]) == [True]
    assert (await row(driver, "h")).lease_until_ms == T0 + 1500
    assert await claim(driver, T0 + 1499, worker="w2") == ([], [])
    again = await claim_one(driver, T0 + 1500, worker="w2")
    assert (again.id, again.attempt, again.claims) == ("h", 2, 2)
    assert await driver.job_heartbeat([Heartbeat(held.fence, 1000, T0 + 1500)]) == [False]
    # A beat shortens a lease as it lengthens one; the held count under another worker's id
    # moves nothing.
    await driver.job_enqueue(new_job("s"))
    s = await claim_one(driver, T0 + 2000, lease_ms=3000)
    other = Fence("s", s.claims, "w2")
    assert await driver.job_heartbeat([Heartbeat(other, 9000, T0 + 2100)]) == [False]
    assert (await row(driver, "s")).lease_until_ms == T0 + 5000
    assert await driver.job_heartbeat([Heartbeat(s.fence, 100, T0 + 2100)]) == [True]
    assert (await row(driver, "s")).lease_until_ms == T0 + 2200


async def scenario_refused_calls_change_nothing(driver: JobDriver) -> None:
    """A refused call (bad record, empty claim, bad settle item) writes nothing at all."""
    await driver.job_enqueue(new_job("kept"))
    held = await claim_one(driver, T0)
    before = await driver.job_get_many(["kept"])
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.job_enqueue_many([new_job("ok1"), new_job("bad", priority=101), new_job("ok2")]),
    )
    await refused("X_JOB_RECORD_INVALID", driver.job_enqueue(new_job("nan", input_json="NaN")))
    await refused("X_JOB_CLAIM_QUEUES_EMPTY", driver.job_claim(ClaimParams((), "w1", 1, 1, T0)))
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.job_ack([Ack(held.fence, T0, '"fine"'), Ack(held.fence, T0, "NaN")]),
    )
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.job_nack(
            [Nack(held.fence, NackKind.SHED, T0), Nack(held.fence, NackKind.RETRY, T0)]
        ),
    )
    assert await driver.job_get_many(["kept", "ok1", "bad", "ok2", "nan"]) == before


async def scenario_purge_retention(driver: JobDriver) -> None:
    """Purge takes expired finished rows only, oldest first, ties by code point, `limit` a call;
    a purged id is gone and free again."""
    # "cB" < "c_" < "cb" by code point; a locale's collation orders them otherwise.
    finished = ["cb", "c_", "cB", "can", "fa", "de", "young"]
    await driver.job_enqueue_many(
        [new_job(i) for i in finished] + [new_job("ready", run_at_ms=T0 + 10_000), new_job("run")]
    )
    held = {j.id: j.fence for j in (await claim(driver, T0, limit=10))[0]}
    assert sorted(held) == sorted([*finished, "run"])
    # Three completed rows finish in one call: the same finished_at, told apart by id alone.
    acked = [Ack(held[i], T0 + 100, '"r"', '{"p": 1}') for i in ("cb", "c_", "cB")]
    assert await driver.job_ack(acked) == [True] * 3
    assert await driver.job_ack([Ack(held["young"], T0 + 700)]) == [True]
    nacks = [
        Nack(held["fa"], NackKind.FAIL, T0 + 50, error="x", dead_letter=False),
        Nack(held["de"], NackKind.FAIL, T0 + 200, error="y"),
    ]
    assert await driver.job_nack(nacks) == [True, True]
    assert await driver.job_cancel("can", T0 + 20) is CancelAnswer.CANCELLED
    states = {i: r.state for i, r in (await driver.job_get_many(finished)).items()}
    assert states["fa"] is JobState.FAILED and states["de"] is JobState.DEAD

    def keep(now: int, limit: int, dead_ms: int | None = 800) -> PurgeParams:
        # completed 500 ms, cancelled kept forever, failed 0 (at once), dead `dead_ms`.
        return PurgeParams(now, limit, 500, None, 0, dead_ms)

    await refused("X_JOB_RECORD_INVALID", driver.job_purge(keep(T0 + 1000, 0)))
    await refused("X_JOB_RECORD_INVALID", driver.job_purge(keep(T0 + 1000, 10_001)))
    await refused("X_JOB_RECORD_INVALID", driver.job_purge(keep(T0 + 1000, 5, dead_ms=-1)))
    assert await driver.job_purge(PurgeParams(T0 + 10**9, 5, None, None, None, None)) == 0
    # At T0 + 599 no completed row is due yet (T0 + 100 + 500 > T0 + 599); the failed one is.
    assert await driver.job_purge(keep(T0 + 599, 10)) == 1
    assert "fa" not in await driver.job_get_many(["fa"])
    # At T0 + 999: completed rows at T0 + 100 are due; dead at T0 + 200 is not (+800 > 999).
    # One by one first: "cB" before "c_" by code point (a case-folding collation takes "c_").
    assert await driver.job_purge(keep(T0 + 999, 1)) == 1
    left = await driver.job_get_many(["cB", "c_"])
    assert sorted(left) == ["c_"], sorted(left)
    assert await driver.job_purge(keep(T0 + 999, 1)) == 1
    left = await driver.job_get_many([*finished, "ready", "run"])
    assert sorted(left) == sorted(["cb", "can", "de", "young", "ready", "run"]), sorted(left)
    assert await driver.job_purge(keep(T0 + 999, 2)) == 1
    left = await driver.job_get_many([*finished, "ready", "run"])
    assert sorted(left) == ["can", "de", "ready", "run", "young"], sorted(left)
    # Exactly at finished_at + keep the dead row goes (the young completed one is not due).
    assert await driver.job_purge(keep(T0 + 1000, 10)) == 1
    assert sorted(await driver.job_get_many(["de", "young"])) == ["young"]
    # Much later: the cancelled row is kept forever, live rows are never touched.
    assert await driver.job_purge(keep(MAX_TIME_MS, 10, dead_ms=0)) == 1
    left = await driver.job_get_many([*finished, "ready", "run"])
    assert sorted(left) == ["can", "ready", "run"], sorted(left)
    assert left["run"].state is JobState.RUNNING and left["ready"].state is JobState.READY
    # A purged id is free: enqueuing it inserts a fresh row, with its old key or another.
    again = await driver.job_enqueue(new_job("cB", queue="q2", created_at_ms=T0 + 2000))
    assert again == EnqueueResult("cB", deduped=False)
    fresh = await row(driver, "cB")
    assert (fresh.state, fresh.queue, fresh.attempt, fresh.claims) == (JobState.READY, "q2", 0, 0)
    assert (fresh.result_json, fresh.progress_json, fresh.finished_at_ms) == (None, None, None)
    assert await driver.job_cancel("fa", T0 + 2000) is CancelAnswer.NOT_FOUND
    await refused("X_JOB_NOT_FOUND", driver.job_requeue("de", T0 + 2000))
    await driver.job_enqueue(new_job("de", created_at_ms=T0 + 2000))
    assert (await row(driver, "de")).last_error is None
    (taken,), _ = await claim(driver, T0 + 2000, "q2")
    assert taken.id == "cB" and taken.claims == 1


async def scenario_purge_oldest_first_across_states(driver: JobDriver) -> None:
    """One limit for every final state together, oldest finished first whatever the ids say."""
    await driver.job_enqueue_many([new_job(i) for i in ("z-dead", "a-done", "m-cancelled")])
    held = {j.id: j.fence for j in (await claim(driver, T0))[0]}
    assert await driver.job_nack([Nack(held["z-dead"], NackKind.FAIL, T0 + 10)]) == [True]
    assert await driver.job_ack([Ack(held["a-done"], T0 + 20)]) == [True]
    assert await driver.job_cancel("m-cancelled", T0 + 30) is CancelAnswer.CANCELLED
    every = PurgeParams(T0 + 1000, 1, 0, 0, 0, 0)
    assert await driver.job_purge(every) == 1
    assert sorted(await driver.job_get_many(list(held))) == ["a-done", "m-cancelled"]
    assert await driver.job_purge(every) == 1
    assert sorted(await driver.job_get_many(list(held))) == ["m-cancelled"]


async def scenario_reclaim_edges(driver: JobDriver) -> None:
    """The reclaim path: pauses hold a lapsed lease back, the claim counter moves on from the
    last claim, a lease lapses at exactly `lease_until_ms`, and several rows buried by one claim
    are answered by id."""
    await driver.job_enqueue(new_job("a", name="n", queue="q", max_attempts=3))
    first = await claim_one(driver, T0, "q", lease_ms=1000)
    # A lapsed, non-final lease under a name pause, then under a queue pause: not handed out.
    await driver.pause_add(Pause("name", "n"))
    assert await claim(driver, T0 + 1000, "q", worker="w2") == ([], [])
    await driver.pause_remove(Pause("name", "n"))
    await driver.pause_add(Pause("queue", "q"))
    assert await claim(driver, T0 + 1000, "q", worker="w2") == ([], [])
    await driver.pause_remove(Pause("queue", "q"))
    r = await row(driver, "a")
    assert (r.state, r.claims, r.claimed_by) == (JobState.RUNNING, 1, "w1")
    # Lapsed at exactly its lease end: a new claim takes it, attempt and counter both move.
    again = await claim_one(driver, T0 + 1000, "q", worker="w2", lease_ms=1000)
    assert (again.id, again.attempt, again.claims, again.worker_id) == ("a", 2, 2, "w2")
    assert await driver.job_ack([Ack(first.fence, T0 + 1001)]) == [False]

    # The counter counts claims, not attempts: a shed gives the attempt back, never a claim.
    await driver.job_enqueue(new_job("e", queue="eq", max_attempts=3))
    held = await claim_one(driver, T0, "eq")
    assert await driver.job_nack([Nack(held.fence, NackKind.SHED, T0)]) == [True]
    held = await claim_one(driver, T0, "eq", lease_ms=1000)
    assert (held.attempt, held.claims) == (1, 2)
    lapsed = await claim_one(driver, T0 + 1000, "eq", worker="w2")
    assert (lapsed.attempt, lapsed.claims) == (2, 3)

    # Two final attempts lapse, the later id first; one claim buries both, answered by id.
    await driver.job_enqueue_many(
        [new_job("d1", queue="dq", max_attempts=1), new_job("d2", queue="dq", max_attempts=1)]
    )
    assert (await claim_one(driver, T0, "dq", limit=1, lease_ms=2000)).id == "d1"
    assert (await claim_one(driver, T0, "dq", limit=1, lease_ms=1000)).id == "d2"
    jobs, buried = await claim(driver, T0 + 2000, "dq")
    assert jobs == []
    assert buried == [
        BuriedJob("d1", "n", "dq", JobState.DEAD),
        BuriedJob("d2", "n", "dq", JobState.DEAD),
    ]


async def scenario_reclaim_bound(driver: JobDriver) -> None:
    """A claim bounded by `reclaim_until_ms` (a worker back from an outage) reclaims and buries
    only the leases that ended by the bound — exactly at it counts — while the later ones stay
    with their holders, whose late settles still land; ready rows are claimed as ever."""
    await driver.job_enqueue_many(
        [
            new_job("early", max_attempts=3),
            new_job("early-final", max_attempts=1),
            new_job("late", max_attempts=3),
            new_job("late-final", max_attempts=1),
        ]
    )
    # The early leases end at T0 + 1000, the late ones at T0 + 1001.
    early = await claim(driver, T0, limit=2, lease_ms=1000)
    assert ids(early[0]) == ["early", "early-final"] and early[1] == []
    late = {j.id: j for j in (await claim(driver, T0, limit=2, lease_ms=1001))[0]}
    assert sorted(late) == ["late", "late-final"]
    await driver.job_enqueue(new_job("fresh", run_at_ms=T0 + 1500))
    await refused(
        "X_JOB_RECORD_INVALID",
        driver.job_claim(ClaimParams(("q",), "w2", 10, 1000, T0 + 3000, reclaim_until_ms=-1)),
    )
    assert (await row(driver, "fresh")).state is JobState.READY

    # Every lease lapsed by now; only those that ended by the bound are taken, and a ready row
    # is claimed whatever the bound.
    jobs, buried = await claim(
        driver, T0 + 3000, worker="w2", lease_ms=5000, reclaim_until_ms=T0 + 1000
    )
    assert ids(jobs) == ["early", "fresh"], ids(jobs)
    assert buried == [BuriedJob("early-final", "n", "q", JobState.DEAD)]
    assert (jobs[0].attempt, jobs[0].claims, jobs[0].worker_id) == (2, 2, "w2")
    for job_id in ("late", "late-final"):
        r = await row(driver, job_id)
        assert (r.state, r.claims, r.claimed_by) == (JobState.RUNNING, 1, "w1"), r
        assert r.lease_until_ms == T0 + 1001
    # Their holders land late: an ack, and a heartbeat that renews from now.
    assert await driver.job_ack([Ack(late["late"].fence, T0 + 3000, '"done"')]) == [True]
    assert await driver.job_heartbeat([Heartbeat(late["late-final"].fence, 1000, T0 + 3000)]) == [
        True
    ]
    assert (await row(driver, "late-final")).lease_until_ms == T0 + 4000
    # A bound later than now bounds nothing: the lease lapsed at now is buried.
    jobs, buried = await claim(driver, T0 + 4000, worker="w2", reclaim_until_ms=T0 + 9000)
    assert jobs == [] and buried == [BuriedJob("late-final", "n", "q", JobState.DEAD)]
    assert (await row(driver, "late")).state is JobState.COMPLETED


async def scenario_settles_overwrite_with_nothing(driver: JobDriver) -> None:
    """An absent result or error overwrites what an earlier run stored; absent progress keeps."""
    await driver.job_enqueue(new_job("r"))
    held = await claim_one(driver, T0)
    assert await driver.job_ack([Ack(held.fence, T0 + 1, '{"v": 1}', "[1]")]) == [True]
    await driver.job_requeue("r", T0 + 2)
    held = await claim_one(driver, T0 + 2)
    assert await driver.job_ack([Ack(held.fence, T0 + 3)]) == [True]
    r = await row(driver, "r")
    assert r.state is JobState.COMPLETED
    assert r.result_json is None, f"an ack without a result left {r.result_json!r}"
    assert same_json(r.progress_json, "[1]"), r.progress_json

    await driver.job_enqueue(new_job("s"))
    held = await claim_one(driver, T0)
    nack = Nack(held.fence, NackKind.RETRY, T0, run_at_ms=T0, error="e1")
    assert await driver.job_nack([nack]) == [True]
    held = await claim_one(driver, T0)
    assert await driver.job_nack([Nack(held.fence, NackKind.RETRY, T0, run_at_ms=T0)]) == [True]
    assert (await row(driver, "s")).last_error is None
    held = await claim_one(driver, T0)
    assert await driver.job_nack([Nack(held.fence, NackKind.FAIL, T0, error="e2")]) == [True]
    await driver.job_requeue("s", T0 + 1)
    held = await claim_one(driver, T0 + 1)
    assert await driver.job_nack([Nack(held.fence, NackKind.REFUSE, T0 + 1)]) == [True]
    r = await row(driver, "s")
    assert (r.state, r.last_error) == (JobState.FAILED, None), (r.state, r.last_error)


async def scenario_json_types_exact(driver: JobDriver) -> None:
    """JSON comes back with its types: `1`, `1.0`, `true`, `0` and `false` stay apart."""
    text = '{"i": 1, "f": 1.0, "t": true, "z": 0, "n": false, "l": [1, 1.0, true, null, "1"]}'
    await driver.job_enqueue(new_job("j", input_json=text))
    r = await row(driver, "j")
    assert same_json(r.input_json, text), r.input_json
    held = await claim_one(driver, T0)
    assert same_json(held.input_json, text), held.input_json
    assert await driver.job_progress([Progress(held.fence, "1.0", T0)]) == [True]
    assert same_json((await row(driver, "j")).progress_json, "1.0")
    assert await driver.job_ack([Ack(held.fence, T0, "true", "[0, false]")]) == [True]
    r = await row(driver, "j")
    assert same_json(r.result_json, "true"), r.result_json
    assert same_json(r.progress_json, "[0, false]"), r.progress_json
    await driver.worker_beat(WorkerBeat("w", '{"n": 1.5, "up": true, "k": 2}', 1000, T0))
    (info,) = exactly(1, await driver.worker_list(T0), "live worker")
    assert same_json(info.info_json, '{"n": 1.5, "up": true, "k": 2}'), info.info_json


async def scenario_every_live_state(driver: JobDriver) -> None:
    """Requeue, cancel, demand and claim meet a parked row; requeue's duplicate check reads the
    tenant like every other namespace check."""
    await driver.job_enqueue(new_job("p", queue="pq"))
    held = await claim_one(driver, T0, "pq")
    assert await driver.job_nack([Nack(held.fence, NackKind.PARK, T0, run_at_ms=T0 + 100)]) == [
        True
    ]
    parked = await row(driver, "p")
    await refused("X_JOB_NOT_REQUEUEABLE", driver.job_requeue("p", T0 + 100))
    assert await row(driver, "p") == parked
    assert await driver.queue_demand(["pq"], T0 + 100) == {"pq": 0}
    woken = await claim_one(driver, T0 + 100, "pq")
    assert (woken.id, woken.attempt, woken.claims) == ("p", 1, 2)
    assert await driver.job_nack([Nack(woken.fence, NackKind.PARK, T0 + 100)]) == [True]
    assert await driver.job_cancel("p", T0 + 101) is CancelAnswer.CANCELLED

    # A finished row of tenant t1 beside a live row of the same name and key without a tenant:
    # different namespaces, so the requeue goes through.
    k = {"name": "n", "idempotency_key": "k"}
    await driver.job_enqueue(new_job("x", **k, tenant_id="t1"))
    held = await claim_one(driver, T0)
    assert await driver.job_ack([Ack(held.fence, T0)]) == [True]
    assert (await driver.job_enqueue(new_job("y", **k))).deduped is False
    await accepted(driver.job_requeue("x", T0 + 1), "a requeue beside another tenant's live twin")
    assert (await row(driver, "x")).state is JobState.READY
    # The same tenant's live row does refuse it.
    assert await driver.job_cancel("x", T0 + 2) is CancelAnswer.CANCELLED
    assert (await driver.job_enqueue(new_job("z", **k, tenant_id="t1"))).deduped is False
    await refused("X_JOB_REQUEUE_DUPLICATE", driver.job_requeue("x", T0 + 3))


def _sized(prefix: str, char: str, size: int) -> str:
    """`prefix` padded with `char` (then ASCII) to exactly `size` UTF-8 bytes."""
    out = prefix
    while len((out + char).encode()) <= size:
        out += char
    return out + "a" * (size - len(out.encode()))


async def scenario_values_at_the_byte_limits(driver: JobDriver) -> None:
    """Names, queues, tenants, ids and keys exactly at the byte limits, in 2-, 3- and 4-byte
    characters, are stored and read back whole, match exactly, and one byte more is refused."""
    name = _sized("n", "é", MAX_NAME_BYTES)
    queue = _sized("q", "☃", MAX_NAME_BYTES)
    tenant = _sized("t", "😀", MAX_NAME_BYTES)
    job_id = _sized("i", "ü", MAX_NAME_BYTES)
    worker = _sized("w", "漢", MAX_NAME_BYTES)
    keys = [_sized("k", c, MAX_KEY_BYTES) for c in ("a", "é", "☃", "😀")]
    # Same as keys[0] but its last character: a column cut short would merge the two.
    twin = keys[0][:-1] + "b"
    base = {"name": name, "queue": queue, "tenant_id": tenant}
    jobs = [
        new_job(job_id, **base, run_id=_sized("r", "ü", MAX_NAME_BYTES), idempotency_key=keys[0]),
        *(new_job(f"k{i}", **base, idempotency_key=k) for i, k in enumerate(keys[1:], 1)),
        new_job("twin", **base, idempotency_key=twin),
    ]
    answers = await driver.job_enqueue_many(jobs)
    assert answers == [EnqueueResult(j.id, False) for j in jobs]
    again = await driver.job_enqueue(new_job("again", **base, idempotency_key=keys[3]))
    assert again == EnqueueResult("k3", True)
    stored = await driver.job_get_many([j.id for j in jobs])
    for j in jobs:
        r = stored[j.id]
        assert (r.id, r.name, r.queue, r.tenant_id, r.idempotency_key) == (
            j.id,
            name,
            queue,
            tenant,
            j.idempotency_key,
        ), f"{j.id!r} came back changed"
    await driver.pause_add(Pause("name", name))
    assert await driver.pause_list() == [Pause("name", name)]
    assert await claim(driver, T0, queue, worker=worker) == ([], [])
    await driver.pause_remove(Pause("name", name))
    got, _ = await claim(driver, T0, queue, worker=worker, limit=10)
    assert sorted(ids(got)) == sorted(j.id for j in jobs)
    assert all(j.worker_id == worker for j in got)
    assert await driver.job_ack([Ack(j.fence, T0) for j in got]) == [True] * len(jobs)
    over = _sized("n", "é", MAX_NAME_BYTES + 1)
    await refused("X_JOB_RECORD_INVALID", driver.job_enqueue(new_job("over", name=over)))
    long_key = _sized("k", "😀", MAX_KEY_BYTES + 1)
    await refused(
        "X_JOB_RECORD_INVALID", driver.job_enqueue(new_job("over", idempotency_key=long_key))
    )
    assert await driver.job_get_many(["over"]) == {}


#: Real seconds a wake channel gets to prove itself live, then to deliver (a server round-trip
#: on a busy machine, with margin).
WAKE_WAIT_S = 15.0


async def _until_woken(woken: list[str], queue: str, what: str) -> None:
    """Wait (bounded) for `queue` among the wakes delivered so far."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAKE_WAIT_S
    while queue not in woken:
        assert loop.time() < deadline, (
            f"no wake for queue {queue!r} within {WAKE_WAIT_S} s of {what} (got {woken!r})"
        )
        await asyncio.sleep(0.02)


async def scenario_wake(driver: JobDriver) -> None:
    """A driver that declares `wake` delivers an enqueue's queue to a live subscriber; one that
    does not answers None from `wake_subscribe`, so no worker trusts a channel it lacks."""
    woken: list[str] = []
    sub = await driver.wake_subscribe(["q"], woken.append)
    if not driver.capabilities().wake:
        assert sub is None, "wake_subscribe answered a channel, but capabilities() has no wake"
        return
    assert sub is not None, "capabilities() declares wake, but wake_subscribe answered None"
    try:
        await until_live(sub, WAKE_WAIT_S, "wake")
        await driver.job_enqueue(new_job("w"))
        await _until_woken(woken, "q", "an enqueue")
    finally:
        await sub.close()


async def scenario_wake_every_insert_path(driver: JobDriver) -> None:
    """A driver that declares `wake` wakes for a due row whatever call inserted it, not only
    `job_enqueue`: `job_enqueue_many` (a step's children), a `join_enqueue` whose dependencies
    all finished already (a batch's callback), a task's fire; and a waiter its last dependency's
    finish releases. Each in a queue of its own, so no earlier wake stands in for it."""
    paths = ["many", "join", "release", "fire"]
    woken: list[str] = []
    caps = driver.capabilities()
    if not caps.wake:
        return  # the poll alone: `scenario_wake` pins that such a driver offers no channel
    sub = await driver.wake_subscribe(paths, woken.append)
    assert sub is not None, "capabilities() declares wake, but wake_subscribe answered None"
    try:
        await until_live(sub, WAKE_WAIT_S, "wake")
        await accepted(driver.job_enqueue_many([new_job("m", queue="many")]), "enqueue_many")
        await _until_woken(woken, "many", "a job_enqueue_many")
        if caps.flows:
            # Dependencies in `q` (no subscriber): `d` finished, `e` still live.
            await driver.job_enqueue_many([new_job("d"), new_job("e")])
            jobs, _ = await claim(driver, T0, "q", limit=2)
            fences = {j.id: j.fence for j in jobs}
            assert sorted(fences) == ["d", "e"], fences
            assert await driver.job_ack([Ack(fences["d"], T0)]) == [True]
            ready = JoinEnqueue(new_job("j", queue="join"), ("d",))
            held = JoinEnqueue(new_job("r", queue="release"), ("e",))
            got = await driver.join_enqueue([ready, held])
            assert [a.enqueued for a in got] == [
                EnqueueResult("j", deduped=False),
                EnqueueResult("r", deduped=False),
            ], got
            await _until_woken(woken, "join", "a join_enqueue whose dependencies finished")
            # A later wake slot of the same queue wakes it again. (A channel delivers in order:
            # once this wake is in, no wake sent before it, a parked waiter's, can stand in for
            # the release's below.)
            woken.clear()
            later = new_job("j2", queue="join", run_at_ms=T0 + 1000, created_at_ms=T0 + 1000)
            got = await driver.join_enqueue([JoinEnqueue(later, ("d",))])
            assert [a.enqueued for a in got] == [EnqueueResult("j2", deduped=False)], got
            await _until_woken(woken, "join", "a ready join_enqueue in a later wake slot")
            assert await driver.job_ack([Ack(fences["e"], T0 + 1)]) == [True]
            await _until_woken(woken, "release", "the finish that released a waiter")
        if caps.tasks:
            assert await driver.task_arm(["t"], T0) == [TaskMark("t", T0)]
            due = T0 + 1000
            job = new_job("f", queue="fire", name="t", idempotency_key=f"t@{due}")
            fired = await driver.task_fire(TaskFire("t", T0, due, due, job, due + 5))
            assert fired.enqueued == EnqueueResult("f", deduped=False), fired
            await _until_woken(woken, "fire", "a task's fire")
    finally:
        await sub.close()


#: The job family's scenarios by name (the function name without `scenario_`).
JOB_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_bury_final_attempt,
        scenario_cancel_running,
        scenario_claim_order,
        scenario_demand_with_paused_queue,
        scenario_enqueue_many_chunks,
        scenario_every_live_state,
        scenario_heartbeat_from_now,
        scenario_idempotency_live_rows_only,
        scenario_json_types_exact,
        scenario_lapsed_lease_reclaimed,
        scenario_nack_attempt_accounting,
        scenario_pause_by_queue_and_name,
        scenario_purge_oldest_first_across_states,
        scenario_purge_retention,
        scenario_reclaim_bound,
        scenario_reclaim_edges,
        scenario_refused_calls_change_nothing,
        scenario_requeue_refusals,
        scenario_settles_of_thousands_in_one_call,
        scenario_settles_overwrite_with_nothing,
        scenario_special_characters,
        scenario_values_at_the_byte_limits,
        scenario_wake,
        scenario_wake_every_insert_path,
        scenario_worker_registry_ttl,
    )
}
