"""The operator surface on the memory driver: views, redaction by the live workers'
declarations, single-id refusals, bulk verbs over a filter, queues and stats from the counters."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle
from jobs_core.jsonform import JsonValue
from jobs_core.operator import Action, Operator
from jobs_core.operator.service import counted_since
from jobs_core.records import (
    Ack,
    CancelAnswer,
    ClaimParams,
    JobFilter,
    Pause,
    PromoteAnswer,
    RemoveAnswer,
    RequeueAnswer,
    WorkerBeat,
)
from jobs_core.redact import REDACTED, RedactionPolicy, mask, scrub_value, secrets_of
from jobs_core.retry import Retry
from jobs_core.semantics import HOUR_MS, MINUTE_MS, hour_of, minute_of
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import T0, declare, fresh_store, new_job, until

CARD = "4111111111111111"


async def charge(input: Any, ctx: JobContext) -> dict[str, Any]:
    if input.get("fail"):
        raise ValueError(f"card {input['card']} was declined for {input['who']}")
    return {"charged": True, "card": input["card"], "echo": f"paid with {input['card']}"}


def charge_job() -> JobHandle:
    return declare(
        charge,
        name="charge",
        sensitive=("card",),
        retry=Retry(attempts=1, base_ms=1),
    )


async def run_all(
    driver: MemoryDriver, clock: FakeClock, handle: JobHandle, ids: list[str]
) -> None:
    worker = Worker(driver, [handle], clock=clock, poll_floor=0.001, poll_ceiling=0.01)
    await worker.start()

    async def ended() -> bool:
        rows = await driver.job_get_many(ids)
        return all(r.state in (JobState.COMPLETED, JobState.DEAD) for r in rows.values())

    try:
        await until(ended)
    finally:
        await worker.stop()


def test_mask_hides_a_field_at_any_depth_and_scrub_takes_its_values() -> None:
    value: JsonValue = {"card": "x1234", "user": {"card": 41, "cards": [{"card": "y9876"}]}, "n": 1}
    assert mask(value, frozenset({"card"})) == {
        "card": REDACTED,
        "user": {"card": REDACTED, "cards": [{"card": REDACTED}]},
        "n": 1,
    }
    secrets = secrets_of(value, frozenset({"card"}))
    assert secrets == ["x1234", "y9876"]  # 41 is too short to scrub out of free text
    assert scrub_value({"note": "used x1234 then y9876", "k": 9}, secrets) == {
        "note": f"used {REDACTED} then {REDACTED}",
        "k": 9,
    }
    # A number that IS a secret is hidden whole, never left as a number in a JSON form.
    assert scrub_value([4111111111111111], [CARD]) == [REDACTED]


async def test_a_view_redacts_by_the_live_workers_declarations_and_fails_closed() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    handle = charge_job()
    jobs = Jobs(driver, clock=clock)
    ok = await jobs.enqueue(handle, {"n": 1, "card": CARD, "who": "ann"})
    bad = await jobs.enqueue(handle, {"n": 2, "card": CARD, "who": "bob", "fail": True})
    await run_all(driver, clock, handle, [ok.id, bad.id])

    # No live worker declares `charge` any more: its input is hidden whole.
    blind = Operator(driver, clock=clock)
    view = await blind.job(ok.id)
    assert view.input == REDACTED and view.result == REDACTED and not view.declared
    # A live worker's registry row declares it: only the card is hidden, everywhere.
    info = {"jobs": {"charge": {"queue": "default", "sensitive": ["card"]}}}
    await driver.worker_beat(WorkerBeat("w9", json.dumps(info), 60_000, clock.now_ms()))
    view = await blind.job(ok.id)
    assert view.declared
    assert view.input == {"n": 1, "card": REDACTED, "who": "ann"}
    assert view.result == {"charged": True, "card": REDACTED, "echo": f"paid with {REDACTED}"}
    failed = await blind.job(bad.id)
    assert failed.record.state is JobState.DEAD
    assert isinstance(failed.error, dict) and failed.error["type"] == "ValueError"
    text = json.dumps([failed.to_json(), view.to_json()])
    assert CARD not in text and "bob" in text
    # The worker never stored the card in the error to begin with.
    stored = (await driver.job_get_many([bad.id]))[bad.id].last_error
    assert stored is not None and CARD not in stored and "declined for bob" in stored
    # Declarations the caller passes (`--app`) count as well.
    await driver.worker_forget("w9")
    told = Operator(driver, clock=clock, handles=[handle])
    assert (await told.job(ok.id)).input == {"n": 1, "card": REDACTED, "who": "ann"}


def test_a_policy_reads_only_what_a_registry_row_says_plainly() -> None:
    from jobs_core.records import WorkerInfo

    rows = [
        WorkerInfo("a", "not json", 0, 1),
        WorkerInfo("b", json.dumps({"jobs": {"x": {"sensitive": ["p", 3]}}}), 0, 1),
        WorkerInfo("c", json.dumps({"jobs": {"x": {"sensitive": ["q"]}, "y": "odd"}}), 0, 1),
    ]
    policy = RedactionPolicy.from_workers(rows)
    assert policy.declared == {"x": frozenset({"p", "q"})}
    assert policy.input("y", '{"a": 1}') == REDACTED


async def test_single_id_verbs_answer_or_raise_their_typed_refusal() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    handle = charge_job()
    jobs = Jobs(driver, clock=clock)
    done = await jobs.enqueue(handle, {"n": 1, "card": CARD, "who": "ann"})
    later = await jobs.enqueue(handle, {"n": 2, "card": CARD, "who": "b"}, delay_ms=60_000)
    await run_all(driver, clock, handle, [done.id])
    op = Operator(driver, clock=clock)

    async def refused(action: Action, job_id: str) -> str:
        with pytest.raises(JobsError) as caught:
            await op.act_one(action, job_id)
        return caught.value.code

    assert await refused(Action.CANCEL, done.id) == "X_JOB_NOT_CANCELLABLE"
    assert await refused(Action.CANCEL, "nobody") == "X_JOB_NOT_FOUND"
    assert await refused(Action.REQUEUE, later.id) == "X_JOB_NOT_REQUEUEABLE"
    assert await refused(Action.PROMOTE, done.id) == "X_JOB_NOT_PROMOTABLE"
    assert await op.act_one(Action.PROMOTE, later.id) is PromoteAnswer.PROMOTED
    assert await op.act_one(Action.PROMOTE, later.id) is PromoteAnswer.ALREADY_DUE
    assert await op.act_one(Action.REQUEUE, done.id) is RequeueAnswer.REQUEUED
    assert await op.act_one(Action.CANCEL, done.id) is CancelAnswer.CANCELLED
    assert await op.act_one(Action.REMOVE, done.id) is RemoveAnswer.REMOVED
    with pytest.raises(JobsError, match="X_JOB_NOT_FOUND"):
        await op.job(done.id)


async def test_bulk_verbs_walk_a_filter_page_by_page() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    handle = charge_job()
    jobs = Jobs(driver, clock=clock)
    # 1,200 failing jobs go dead; 30 others wait in another queue, delayed.
    inputs = [{"n": n, "card": CARD, "who": "x", "fail": True} for n in range(1_200)]
    dead = [r.id for r in await jobs.enqueue_many(handle, inputs)]
    waiting = await jobs.enqueue_many(
        handle, [{"n": 5_000 + n} for n in range(30)], queue="later", delay_ms=3_600_000
    )
    await run_all(driver, clock, handle, dead)
    op = Operator(driver, clock=clock)
    report = await op.act_all(Action.REQUEUE, JobFilter(states=frozenset({JobState.DEAD})))
    assert report.answers == {"requeued": 1_200} and report.examined == 1_200
    stats = {q.queue: q for q in await driver.queue_stats(clock.now_ms())}
    assert stats["default"].count(JobState.READY) == 1_200
    report = await op.act_all(Action.PROMOTE, JobFilter(queue="later"), max_rows=10)
    assert report.answers == {"promoted": 10} and report.done == 10
    report = await op.act_all(Action.CANCEL, JobFilter(queue="later"))
    assert report.answers == {"cancelled": 30}
    report = await op.act_all(Action.REMOVE, JobFilter(queue="later"))
    assert report.answers == {"removed": 30}
    assert await driver.job_get_many([r.id for r in waiting]) == {}


async def test_a_page_follows_short_pages_of_a_rare_filter() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    handle = charge_job()
    jobs = Jobs(driver, clock=clock)
    await jobs.enqueue(handle, {"n": -1}, queue="rare")
    await jobs.enqueue_many(handle, [{"n": n} for n in range(5_000)])
    op = Operator(driver, clock=clock)
    page = await op.jobs(JobFilter(queue="rare"), limit=5)
    # The rare row is the oldest: found by following the driver's bounded pages to the end.
    assert [j.queue for j in page.jobs] == ["rare"] and page.next_cursor is None
    first = await op.jobs(limit=3)
    second = await op.jobs(limit=3, cursor=first.next_cursor)
    assert len({j.id for j in first.jobs + second.jobs}) == 6


async def test_queues_and_stats_read_the_counters() -> None:
    driver, clock = MemoryDriver(), FakeClock()
    handle = charge_job()
    jobs = Jobs(driver, clock=clock)
    ids = [
        r.id
        for r in await jobs.enqueue_many(
            handle, [{"n": n, "card": CARD, "who": "x", "fail": n % 4 == 0} for n in range(8)]
        )
    ]
    await jobs.enqueue(handle, {"n": 99}, queue="quiet", delay_ms=10_000)
    await run_all(driver, clock, handle, ids)
    await driver.pause_add(Pause("queue", "paused-only"))
    await driver.pause_add(Pause("queue", "quiet"))
    op = Operator(driver, clock=clock)
    views = {v.queue: v for v in await op.queues()}
    assert sorted(views) == ["default", "paused-only", "quiet"]
    d = views["default"]
    assert d.counts["completed"] == 6 and d.counts["dead"] == 2 and not d.paused
    assert d.settled["completed"] == 6 and d.settled["dead_lettered"] == 2
    assert d.completed_per_minute == pytest.approx(6 / 5)
    assert views["quiet"].paused and views["quiet"].counts["ready"] == 1
    assert views["quiet"].oldest_ready_age_ms is None  # delayed: not due
    assert views["paused-only"].counts["ready"] == 0 and views["paused-only"].paused
    await clock.advance(20_000)
    await driver.pause_remove(Pause("queue", "quiet"))
    quiet = {v.queue: v for v in await op.queues()}["quiet"]
    assert quiet.oldest_ready_age_ms == 10_000 and quiet.demand == 1
    stats = await op.stats()
    assert stats.states["completed"] == 6 and stats.states["dead"] == 2
    assert stats.totals["completed"] == 6
    assert [n.name for n in stats.names] == ["charge"]
    assert json.loads(json.dumps(stats.to_json()))["names"]["charge"]["dead_lettered"] == 2


#: Settles (at, how many) the stats windows below count: hours back, inside a folded hour, and
#: recent minutes.
SETTLES: tuple[tuple[int, int], ...] = (
    (T0 - 50 * HOUR_MS, 2),
    (T0 - 3 * HOUR_MS + 7 * MINUTE_MS, 3),
    (T0 + 30 * MINUTE_MS, 30),
    (T0 + 95 * MINUTE_MS, 4),
    (T0 + 149 * MINUTE_MS, 5),
)
#: Windows in seconds: inside the minute buckets, across the fold boundary, days back.
WINDOWS = (60, 3_600, 5_400, 7_200, 7_260, 9_000, 10_800, 86_400, 3 * 86_400, 30 * 86_400)


async def settle(driver: JobDriver, at_ms: int, n: int) -> None:
    """`n` jobs of name `n` completed at `at_ms` (enqueued, claimed and acked then)."""
    await driver.job_enqueue_many(
        [replace(new_job(f"{at_ms}-{i}", f"{at_ms}-{i}"), run_at_ms=at_ms) for i in range(n)]
    )
    got = await driver.job_claim(ClaimParams(("q",), "w", n, 60_000, at_ms))
    assert len(got.jobs) == n
    assert await driver.job_ack([Ack(j.fence, at_ms) for j in got.jobs]) == [True] * n


@pytest.mark.parametrize("kind", ["memory", "pg", "redis"])
async def test_stats_count_every_settle_of_any_window_before_and_after_the_fold(
    kind: str,
) -> None:
    """A window reaching back into an hour whose minutes are (or may be) folded counts that
    hour whole, never none of it: 7,200 s at 2 h 30 min after 30 completions counts them, the
    fold changes no window's count, and the view says where counting began."""
    now = T0 + 150 * MINUTE_MS
    async with fresh_store(kind) as driver:
        for at, n in SETTLES:
            await settle(driver, at, n)
        op = Operator(driver, clock=FakeClock(now))
        before = {w: await op.stats(w * 1000) for w in WINDOWS}
        while await driver.counter_fold(now, 1000) == 1000:
            pass
        for w in WINDOWS:
            view = await op.stats(w * 1000)
            since = counted_since(now, w * 1000)
            assert view.since_ms == since and since <= now - w * 1000 < since + HOUR_MS
            want = sum(n for at, n in SETTLES if since <= minute_of(at))
            assert view.totals["completed"] == want, (w, view.totals)
            assert before[w].totals == view.totals, w
            assert json.loads(json.dumps(view.to_json()))["since_ms"] == since
    assert counted_since(now, 7_200_000) == hour_of(T0)  # the 30 at T0 + 30 min are in


async def test_a_parked_job_shows_what_it_waits_for(capsys: pytest.CaptureFixture[str]) -> None:
    """`--json` and the table of `jobs show` name a parked row's wait (its match redacted as a
    result is: a match may repeat an input's secret); a row that holds no wait shows none."""
    from jobs_core.cli.show import print_job
    from jobs_core.records import ClaimParams, EventRecord, EventWait, Nack, NackKind

    driver, clock = MemoryDriver(), FakeClock()
    handle = charge_job()
    jobs = Jobs(driver, clock=clock)
    parked = await jobs.enqueue(handle, {"n": 1, "card": CARD, "who": "ann"})
    plain = await jobs.enqueue(handle, {"n": 2, "card": CARD, "who": "bob"})
    now = clock.now_ms()
    held = await driver.job_claim(ClaimParams((handle.queue,), "w1", 2, 60_000, now))
    fences = {j.id: j.fence for j in held.jobs}
    match = json.dumps({"order": 7, "card": CARD})
    wait = EventWait("shipped", match, now - 1_000)
    await driver.job_nack(
        [
            Nack(fences[parked.id], NackKind.PARK, now, None, wait=wait),
            Nack(fences[plain.id], NackKind.PARK, now, now + 60_000),
        ]
    )
    op = Operator(driver, clock=clock, handles=[handle])
    view = await op.job(parked.id)
    shown = json.loads(json.dumps(view.to_json()))
    assert shown["state"] == "parked"
    assert shown["wait"] == {
        "event": "shipped",
        "match": {"order": 7, "card": REDACTED},
        "since_ms": now - 1_000,
    }
    assert (await op.job(plain.id)).to_json()["wait"] is None
    print_job(view, now)
    out = capsys.readouterr().out
    told = 'waits for: event \'shipped\' matching {"order":7,"card":"[redacted]"} published since '
    assert told in out and ", no end" in out
    assert "(1 s ago)" in out and CARD not in out
    print_job(await op.job(plain.id), now)
    assert "waits for: sleeping until " in capsys.readouterr().out  # a park with a time alone
    # Woken: the wait is gone from the view too.
    assert await driver.event_publish(EventRecord("e1", "shipped", match, now, now + 1)) == 1
    assert (await op.job(parked.id)).to_json()["wait"] is None
