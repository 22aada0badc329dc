"""The attempt history's scenarios (`jobs_core.attempts`): what each ending writes, in order,
bounded, and nothing from a settle whose fence no longer holds."""

from __future__ import annotations

import json

from jobs_core.attempts import (
    ABANDONED_ERROR,
    ATTEMPT_HISTORY,
    ATTEMPT_TRACEBACK_BYTES,
    AttemptOutcome,
    AttemptRecord,
    attempt_error,
)
from jobs_core.driver import JobDriver
from jobs_core.jsonform import unstorable, utf8_length
from jobs_core.records import Ack, Nack, NackKind
from jobs_core.testing.scenarios.support import T0, Scenario, claim, claim_one, new_job, row

_O = AttemptOutcome


def _abandoned(attempt: int, claims: int, worker: str, at: int, end: int) -> AttemptRecord:
    return AttemptRecord(attempt, claims, worker, at, end, _O.ABANDONED, *ABANDONED_ERROR)


async def scenario_attempt_history_three_failures(driver: JobDriver) -> None:
    """A job that failed three ways keeps three entries, oldest first, each with its own worker,
    times, outcome and error (a raised error with its traceback, a deadline without one, plain
    text); the row's latest claim time is the third claim's."""
    raised = json.dumps(
        {
            "type": "ValueError",
            "message": "first",
            "traceback": 'Traceback (most recent call last):\n  File "x.py", line 1\nValueError\n',
        }
    )
    deadline = json.dumps(
        {"type": "JobTimeoutError", "code": "X_JOB_TIMEOUT", "message": "past its deadline"}
    )
    await driver.job_enqueue(new_job("h", max_attempts=3))
    held = await claim_one(driver, T0 + 1, worker="w1")
    nack = Nack(held.fence, NackKind.RETRY, T0 + 2, run_at_ms=T0 + 2, error=raised)
    assert await driver.job_nack([nack]) == [True]
    held = await claim_one(driver, T0 + 3, worker="w2")
    nack = Nack(held.fence, NackKind.RETRY, T0 + 4, run_at_ms=T0 + 4, error=deadline)
    assert await driver.job_nack([nack]) == [True]
    held = await claim_one(driver, T0 + 5, worker="w1")
    nack = Nack(held.fence, NackKind.FAIL, T0 + 6, error="plain text failure")
    assert await driver.job_nack([nack]) == [True]
    r = await row(driver, "h")
    want = (
        AttemptRecord(1, 1, "w1", T0 + 1, T0 + 2, _O.RETRIED, *attempt_error(raised)),
        AttemptRecord(2, 2, "w2", T0 + 3, T0 + 4, _O.RETRIED, "X_JOB_TIMEOUT", "past its deadline"),
        AttemptRecord(3, 3, "w1", T0 + 5, T0 + 6, _O.DEAD, None, "plain text failure"),
    )
    assert r.attempts == want, r.attempts
    assert r.attempts[0].error_code == "ValueError" and r.attempts[0].traceback, r.attempts[0]
    assert r.claimed_at_ms == T0 + 5, r.claimed_at_ms


async def scenario_attempt_history_endings(driver: JobDriver) -> None:
    """A reclaim ends the lapsed claim as abandoned and that claim's late settles write
    nothing; a bury ends it abandoned; a park and an ack each end one; a cancel of a running
    row ends its claim; the history keeps the last `ATTEMPT_HISTORY`, oldest first."""
    await driver.job_enqueue(new_job("s"))
    first = await claim_one(driver, T0, worker="w1", lease_ms=10)
    second = await claim_one(driver, T0 + 10, worker="w2")
    assert await driver.job_ack([Ack(first.fence, T0 + 11)]) == [False]
    stale = Nack(first.fence, NackKind.RETRY, T0 + 11, run_at_ms=T0 + 11, error="late")
    assert await driver.job_nack([stale]) == [False]
    assert await driver.job_ack([Ack(second.fence, T0 + 12)]) == [True]
    assert (await row(driver, "s")).attempts == (
        _abandoned(1, 1, "w1", T0, T0 + 10),
        AttemptRecord(2, 2, "w2", T0 + 10, T0 + 12, _O.COMPLETED),
    ), (await row(driver, "s")).attempts

    await driver.job_enqueue(new_job("b", queue="bq", max_attempts=1))
    await claim_one(driver, T0, "bq", worker="w1", lease_ms=10)
    claimed, buried = await claim(driver, T0 + 10, "bq", worker="w2")
    assert claimed == [] and [b.id for b in buried] == ["b"], (claimed, buried)
    assert (await row(driver, "b")).attempts == (_abandoned(1, 1, "w1", T0, T0 + 10),)

    await driver.job_enqueue(new_job("p", queue="pq"))
    held = await claim_one(driver, T0, "pq")
    assert await driver.job_nack([Nack(held.fence, NackKind.PARK, T0 + 1, T0 + 2)]) == [True]
    held = await claim_one(driver, T0 + 2, "pq")
    assert await driver.job_ack([Ack(held.fence, T0 + 3)]) == [True]
    assert (await row(driver, "p")).attempts == (
        AttemptRecord(1, 1, "w1", T0, T0 + 1, _O.PARKED),
        AttemptRecord(1, 2, "w1", T0 + 2, T0 + 3, _O.COMPLETED),
    ), (await row(driver, "p")).attempts

    if driver.capabilities().operator:
        await driver.job_enqueue(new_job("c", queue="cq"))
        await claim_one(driver, T0, "cq", worker="w2")
        await driver.job_cancel("c", T0 + 5)
        assert (await row(driver, "c")).attempts == (
            AttemptRecord(1, 1, "w2", T0, T0 + 5, _O.CANCELLED),
        ), (await row(driver, "c")).attempts

    runs = ATTEMPT_HISTORY + 2
    await driver.job_enqueue(new_job("t", queue="tq", max_attempts=runs))
    for i in range(1, runs + 1):
        held = await claim_one(driver, T0 + 10 * i, "tq")
        at = T0 + 10 * i + 1
        nack = Nack(held.fence, NackKind.RETRY, at, run_at_ms=at, error=f"e{i}")
        assert await driver.job_nack([nack]) == [True]
    kept = (await row(driver, "t")).attempts
    assert [(a.attempt, a.error_message) for a in kept] == [
        (i, f"e{i}") for i in range(runs - ATTEMPT_HISTORY + 1, runs + 1)
    ], kept


async def scenario_attempt_history_one_ack_call(driver: JobDriver) -> None:
    """One ack call over rows of two queues applies its items in order: a second ack of the
    same fence misses (the first's result stays), a stale fence misses, and each landed row
    gets its result or progress and one `completed` entry after the history it had."""
    await driver.job_enqueue(new_job("a", queue="q1"))
    await driver.job_enqueue(new_job("b", queue="q2"))
    await driver.job_enqueue(new_job("c", queue="q1"))
    first = await claim_one(driver, T0, "q1", worker="w1", limit=1)
    assert first.id == "a", first
    nack = Nack(first.fence, NackKind.RETRY, T0 + 1, run_at_ms=T0 + 1, error="e1")
    assert await driver.job_nack([nack]) == [True]
    jobs, buried = await claim(driver, T0 + 2, "q1", "q2", worker="w2")
    assert sorted(j.id for j in jobs) == ["a", "b", "c"] and buried == [], (jobs, buried)
    held = {j.id: j.fence for j in jobs}
    acks = [
        Ack(held["a"], T0 + 3, '"ra"'),
        Ack(held["a"], T0 + 4, '"again"'),
        Ack(first.fence, T0 + 3, '"stale"'),
        Ack(held["b"], T0 + 3, None, "[1]"),
        Ack(held["c"], T0 + 5),
    ]
    assert await driver.job_ack(acks) == [True, False, False, True, True]
    a, b, c = [await row(driver, i) for i in "abc"]
    assert a.result_json is not None and json.loads(a.result_json) == "ra", a.result_json
    assert b.progress_json is not None and json.loads(b.progress_json) == [1], b.progress_json
    assert (a.finished_at_ms, b.finished_at_ms, c.finished_at_ms) == (T0 + 3, T0 + 3, T0 + 5)
    assert a.attempts == (
        AttemptRecord(1, 1, "w1", T0, T0 + 1, _O.RETRIED, None, "e1"),
        AttemptRecord(2, 2, "w2", T0 + 2, T0 + 3, _O.COMPLETED),
    ), a.attempts
    assert b.attempts == (AttemptRecord(1, 1, "w2", T0 + 2, T0 + 3, _O.COMPLETED),), b.attempts
    assert c.attempts == (AttemptRecord(1, 1, "w2", T0 + 2, T0 + 5, _O.COMPLETED),), c.attempts


#: Errors no store may keep as they are, each as a settle may carry it: JSON escapes that spell
#: a lone surrogate and a NUL, a traceback far past the bound, markup, JSON nested past any
#: parser's depth, and text that only looks like JSON.
HOSTILE_ERRORS = (
    json.dumps({"code": "X\u0000Y", "message": "lone \ud800 half", "traceback": "t" * 100_000}),
    json.dumps({"message": "<script>alert(1)</script>", "traceback": "☃\n" * 5_000}),
    '{"a":' * 5_000 + "1" + "}" * 5_000,
    "{not json" + "😀" * 1_000,
)


async def scenario_attempt_history_hostile_errors(driver: JobDriver) -> None:
    """Every part of an entry is bounded and storable, whatever the settle's error held."""
    await driver.job_enqueue(new_job("x", queue="xq", max_attempts=len(HOSTILE_ERRORS)))
    for i, error in enumerate(HOSTILE_ERRORS):
        held = await claim_one(driver, T0 + i, "xq")
        nack = Nack(held.fence, NackKind.RETRY, T0 + i, run_at_ms=T0 + i, error=error)
        assert await driver.job_nack([nack]) == [True]
    kept = (await row(driver, "x")).attempts
    assert [(a.error_code, a.error_message, a.traceback) for a in kept] == [
        attempt_error(e) for e in HOSTILE_ERRORS
    ], kept
    for a in kept:
        for text in (a.error_code, a.error_message, a.traceback):
            assert text is None or unstorable(text) is None, text
        assert a.traceback is None or utf8_length(a.traceback) <= ATTEMPT_TRACEBACK_BYTES


ATTEMPT_SCENARIOS: dict[str, Scenario] = {
    f.__name__.removeprefix("scenario_"): f
    for f in (
        scenario_attempt_history_three_failures,
        scenario_attempt_history_endings,
        scenario_attempt_history_hostile_errors,
        scenario_attempt_history_one_ack_call,
    )
}
