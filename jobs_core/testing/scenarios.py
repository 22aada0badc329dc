"""Fixed scenarios: the cases a random walk rarely reaches, each spelled out with real asserts.

Each scenario is `async def scenario_x(driver)` over a fresh, empty driver; `SCENARIOS` lists
them by name. Times are fixed offsets from `T0`, handed in as every call's `now_ms`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeAlias

from jobs_core.driver import ENQUEUE_CHUNK, MAX_ENQUEUE_BATCH, MAX_TIME_MS, JobDriver
from jobs_core.errors import JobsError
from jobs_core.records import (
    Ack,
    BuriedJob,
    CancelAnswer,
    ClaimedJob,
    ClaimParams,
    EnqueueResult,
    Fence,
    Heartbeat,
    JobRecord,
    Nack,
    NackKind,
    NewJob,
    Pause,
    Progress,
    PurgeParams,
    WorkerBeat,
)
from jobs_core.semantics import LEASE_LAPSED_ERROR
from jobs_core.states import JobState

Scenario: TypeAlias = Callable[[JobDriver], Awaitable[None]]

T0 = 1_800_000_000_000


def new_job(job_id: str, **fields: Any) -> NewJob:
    """A valid record: unique key per id, queue `q`, due at `T0`, three attempts."""
    base = NewJob(
        id=job_id,
        run_id=f"run-{job_id}",
        name="n",
        queue="q",
        tenant_id=None,
        idempotency_key=f"key-{job_id}",
        input_json=json.dumps({"id": job_id}),
        priority=0,
        run_at_ms=T0,
        max_attempts=3,
        created_at_ms=T0,
    )
    return replace(base, **fields)


async def claim(
    driver: JobDriver,
    now: int,
    *queues: str,
    worker: str = "w1",
    limit: int = 10,
    lease_ms: int = 1000,
    drop_exhausted: frozenset[str] = frozenset(),
) -> tuple[list[ClaimedJob], list[BuriedJob]]:
    """One claim pass over `queues` (default `q`); the claimed and the buried, as lists."""
    result = await driver.job_claim(
        ClaimParams(
            queues=queues or ("q",),
            worker_id=worker,
            limit=limit,
            lease_ms=lease_ms,
            now_ms=now,
            drop_exhausted=drop_exhausted,
        )
    )
    return list(result.jobs), list(result.buried)


async def row(driver: JobDriver, job_id: str) -> JobRecord:
    """The row of `job_id`, which must exist."""
    rows = await driver.job_get_many([job_id])
    assert job_id in rows, f"{job_id!r} is missing"
    return rows[job_id]


async def refused(code: str, call: Awaitable[object]) -> None:
    """Await `call` and assert it raised the `JobsError` carrying `code`."""
    try:
        answer = await call
    except JobsError as exc:
        assert exc.code == code, f"raised {exc.code}, expected {code}"
        return
    raise AssertionError(f"answered {answer!r}, expected a refusal {code}")


def ids(jobs: list[ClaimedJob]) -> list[str]:
    """The claimed ids, in claim order."""
    return [j.id for j in jobs]


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
    (first,), _ = await claim(driver, T0, worker="w1", lease_ms=1000)
    assert (first.attempt, first.claims, first.lease_until_ms) == (1, 1, T0 + 1000)
    assert await claim(driver, T0 + 999, worker="w2") == ([], [])

    (second,), buried = await claim(driver, T0 + 1000, worker="w2", lease_ms=3000)
    assert buried == []
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
    assert await driver.job_ack([Ack(second.fence, T0 + 9500, '{"ok": true}')]) == [True]
    r = await row(driver, "j")
    assert (r.state, r.finished_at_ms, r.lease_until_ms) == (JobState.COMPLETED, T0 + 9500, None)
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
    assert ids(rest) == ["a", "z-late", "f", "é", "0"]
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
    (held,), _ = await claim(driver, T0, limit=1)
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


async def scenario_requeue_refusals(driver: JobDriver) -> None:
    """Requeue refuses a missing id, a live row, and a key held by another live row."""
    await refused("X_JOB_NOT_FOUND", driver.job_requeue("missing", T0))
    await driver.job_enqueue(new_job("r", idempotency_key="k", max_attempts=2))
    await refused("X_JOB_NOT_REQUEUEABLE", driver.job_requeue("r", T0))
    (held,), _ = await claim(driver, T0)
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
    (again,), _ = await claim(driver, T0 + 40)
    assert (again.attempt, again.claims, again.final_attempt) == (1, 2, False)
    assert await driver.job_ack([Ack(held.fence, T0 + 41)]) == [False]


async def scenario_cancel_running(driver: JobDriver) -> None:
    """Cancelling a running job finishes it; its holder's settles are then refused."""
    await driver.job_enqueue_many([new_job("c"), new_job("d")])
    (held, _other), _ = await claim(driver, T0)
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
        (held,), _ = await claim(driver, T0, v, worker=v)
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
    (info,) = await driver.worker_list(T0)
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
    (running, parked), _ = await claim(driver, T0, "q1", limit=2)
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
    (w2,) = [w for w in await driver.worker_list(T0 + 999) if w.worker_id == "w2"]
    assert (w2.last_beat_ms, w2.expires_at_ms, json.loads(w2.info_json)) == (
        T0,
        T0 + 1000,
        {"n": 2},
    )
    assert [w.worker_id for w in await driver.worker_list(T0 + 1000)] == ["w1"]
    assert await driver.worker_list(T0 + 2000) == []

    await driver.worker_beat(WorkerBeat("w1", '{"n": 3}', 1000, T0 + 1500))
    (w1,) = await driver.worker_list(T0 + 2000)
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


async def scenario_heartbeat_from_now(driver: JobDriver) -> None:
    """A heartbeat moves the lease to `now + lease_ms`, never `old lease + lease_ms`."""
    await driver.job_enqueue(new_job("h"))
    (held,), _ = await claim(driver, T0, lease_ms=1000)
    assert await driver.job_heartbeat([Heartbeat(held.fence, 1000, T0 + 500)]) == [True]
    assert (await row(driver, "h")).lease_until_ms == T0 + 1500
    assert await claim(driver, T0 + 1499, worker="w2") == ([], [])
    (again,), _ = await claim(driver, T0 + 1500, worker="w2")
    assert (again.id, again.attempt, again.claims) == ("h", 2, 2)
    assert await driver.job_heartbeat([Heartbeat(held.fence, 1000, T0 + 1500)]) == [False]


async def scenario_refused_calls_change_nothing(driver: JobDriver) -> None:
    """A refused call (bad record, empty claim, bad settle item) writes nothing at all."""
    await driver.job_enqueue(new_job("kept"))
    (held,), _ = await claim(driver, T0)
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
    assert await driver.job_purge(keep(T0 + 999, 2)) == 2
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


#: Every scenario by name (the function name without `scenario_`).
SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_bury_final_attempt,
        scenario_cancel_running,
        scenario_claim_order,
        scenario_demand_with_paused_queue,
        scenario_enqueue_many_chunks,
        scenario_heartbeat_from_now,
        scenario_idempotency_live_rows_only,
        scenario_lapsed_lease_reclaimed,
        scenario_nack_attempt_accounting,
        scenario_pause_by_queue_and_name,
        scenario_purge_retention,
        scenario_refused_calls_change_nothing,
        scenario_requeue_refusals,
        scenario_special_characters,
        scenario_worker_registry_ttl,
    )
}
