"""The sweep family's scenarios: the ledger a factory writes each run of a sweep into. A new
entry and what it holds; a batch recorded once (a replayed or a skipped one moves nothing), and a
window of batches likewise (a replayed, overlapping or skipping one moves nothing); every
write fenced on the run's claim (a lapsed lease nobody reclaimed still holds), a run writing
only its own entry (not under another run's held fence, nor its row's after a fresh requeue); a
failed run resumed by its next attempt, a completed one left as it is; a completed run of the
same sweep blocking a new one (each identity field differing lets it through, the kind does not;
a failed or running run never blocks), the last finished first; the listing's order, ties and
limits; refused calls writing nothing; a batch's checkpoint (its step and its advance, one
write) recording both or neither.

Each run is a row of its own queue, claimed by `w1` unless said; its run id is the row's.
A driver that does not declare `sweeps` must refuse the calls with
`X_DRIVER_CAPABILITY_MISSING`; these scenarios check that much and stop there.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Literal

from jobs_core.driver import (
    MAX_NAME_BYTES,
    MAX_SWEEP_CHECKSUM_BYTES,
    MAX_SWEEP_CURSOR_BYTES,
    MAX_SWEEP_LIST,
    MAX_SWEEP_ROWS,
    JobDriver,
)
from jobs_core.records import (
    Ack,
    ClaimedJob,
    EnqueueResult,
    Fence,
    Nack,
    NackKind,
    StepPut,
    SweepAdvance,
    SweepCheckpoint,
    SweepFinish,
    SweepKind,
    SweepRecord,
    SweepStart,
    SweepStartAnswer,
)
from jobs_core.testing.compare import exactly_bytes
from jobs_core.testing.scenarios.support import (
    T0,
    Scenario,
    claim_one,
    new_job,
    refused,
    same_json,
)

#: A sweep's identity in these scenarios unless said: (name, scope, environment, kind, checksum).
USERS = ("users", "t1", "default", "backfill", "c1")
LONG_CHECKSUM = exactly_bytes("c", "é", MAX_SWEEP_CHECKSUM_BYTES)
LONG_SWEEP_NAME = exactly_bytes("n", "ü☃😀", MAX_NAME_BYTES)
LONG_CURSOR = '"' + exactly_bytes("", "é☃😀", MAX_SWEEP_CURSOR_BYTES - 2) + '"'


async def _unsupported(driver: JobDriver) -> bool:
    if driver.capabilities().sweeps:
        return False
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.sweep_list(None, 10))
    start = _start(Fence("j", 1, "w1"), "r", T0)
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.sweep_start(start))
    return True


async def _run(
    driver: JobDriver, job_id: str, now: int = T0, worker: str = "w1", run_id: str | None = None
) -> ClaimedJob:
    """Row `job_id` (of run `run_id`, else `run-<job_id>`) in a queue of its own, three
    attempts, claimed at `now` by `worker`."""
    job = new_job(
        job_id,
        run_id=run_id or f"run-{job_id}",
        queue=f"q-{job_id}",
        run_at_ms=now,
        created_at_ms=now,
    )
    assert await driver.job_enqueue(job) == EnqueueResult(job_id, deduped=False)
    return await claim_one(driver, now, job.queue, worker=worker)


def _start(
    f: Fence,
    run_id: str,
    now: int,
    identity: tuple[str, str, str, str, str] = USERS,
    expected: int | None = None,
) -> SweepStart:
    name, scope, environment, kind, checksum = identity
    sweep_kind: SweepKind = kind  # type: ignore[assignment]
    return SweepStart(f, run_id, name, scope, environment, sweep_kind, checksum, expected, now)


async def _open(
    driver: JobDriver,
    job: ClaimedJob,
    now: int,
    identity: tuple[str, str, str, str, str] = USERS,
    expected: int | None = None,
) -> SweepRecord:
    """Start `job`'s run as `identity`, which must open (or resume) its entry; that entry."""
    got = await driver.sweep_start(_start(job.fence, job.run_id, now, identity, expected))
    assert got.blocked_by is None and got.record is not None, got
    return got.record


async def _advance(
    driver: JobDriver,
    f: Fence,
    run_id: str,
    batch: int,
    now: int,
    rows: int = 10,
    errors: int = 0,
    cursor: str | None = None,
    span: int = 1,
) -> bool:
    return await driver.sweep_advance(
        SweepAdvance(f, run_id, batch, rows, errors, cursor, now, span)
    )


async def _finish(
    driver: JobDriver, f: Fence, run_id: str, now: int, error: str | None = None
) -> bool:
    status: Literal["completed", "failed"] = "completed" if error is None else "failed"
    return await driver.sweep_finish(SweepFinish(f, run_id, status, error, now))


async def _ledger(driver: JobDriver) -> dict[str, SweepRecord]:
    return {e.run_id: e for e in await driver.sweep_list(None, MAX_SWEEP_LIST)}


async def _entry(driver: JobDriver, run_id: str) -> SweepRecord:
    ledger = await _ledger(driver)
    assert run_id in ledger, f"no entry for run {run_id!r}: {sorted(ledger)}"
    return ledger[run_id]


# -- a new entry ----------------------------------------------------------------------------------


async def scenario_sweeps_a_new_entry(driver: JobDriver) -> None:
    """A start opens a `running` entry under the fence's job, every declaration field as given
    (non-ASCII, at the byte limits), nothing recorded yet, started and updated at now; the
    listing answers it as the start did. Another row of the same run (as a saga's unwind job
    is), enqueued first and never claimed, is not the entry's job: the fence's row is."""
    if await _unsupported(driver):
        return
    twin = new_job("b", run_id="run-a", queue="q-b", run_at_ms=T0 + 10**9)
    assert await driver.job_enqueue(twin) == EnqueueResult("b", deduped=False)
    job = await _run(driver, "a")
    identity = (LONG_SWEEP_NAME, "☃ 'org'\n%", "prød", "import", LONG_CHECKSUM)
    got = await driver.sweep_start(_start(job.fence, "run-a", T0 + 5, identity, MAX_SWEEP_ROWS))
    want = SweepRecord(
        run_id="run-a",
        job_id="a",
        name=LONG_SWEEP_NAME,
        scope="☃ 'org'\n%",
        environment="prød",
        kind="import",
        checksum=LONG_CHECKSUM,
        status="running",
        batches=0,
        rows=0,
        errors=0,
        expected=MAX_SWEEP_ROWS,
        cursor_json=None,
        error=None,
        started_at_ms=T0 + 5,
        updated_at_ms=T0 + 5,
        finished_at_ms=None,
    )
    assert got == SweepStartAnswer(want), got
    mine = await _open(driver, await _run(driver, "c"), T0 + 6, expected=0)
    assert (mine.run_id, mine.job_id, mine.expected, mine.started_at_ms) == (
        "run-c",
        "c",
        0,
        T0 + 6,
    ), mine
    assert await driver.sweep_list(None, 10) == [mine, want]


# -- batches --------------------------------------------------------------------------------------


async def scenario_sweeps_a_batch_is_recorded_once(driver: JobDriver) -> None:
    """Batch `n` is recorded only as the next one (`batches + 1`): rows and refused rows add
    up, the cursor is the batch's (its JSON types kept, at its byte limit, None for the last
    batch); a replayed batch (the last one, an earlier one) or a skipped one moves nothing, not
    even `updated_at_ms`; racing callers of one batch land it once."""
    if await _unsupported(driver):
        return
    job = await _run(driver, "a")
    f, run = job.fence, job.run_id
    await _open(driver, job, T0)
    assert await _advance(driver, f, run, 1, T0 + 1, rows=5, errors=1, cursor='{"id": 10.0}')
    assert await _advance(driver, f, run, 2, T0 + 2, rows=2**40 + 1, cursor=LONG_CURSOR)
    e = await _entry(driver, run)
    assert (e.batches, e.rows, e.errors, e.updated_at_ms) == (2, 2**40 + 6, 1, T0 + 2), e
    assert same_json(e.cursor_json, LONG_CURSOR), e.cursor_json
    # Replays (a step that ran again after a crash) and a skip: nothing moves.
    assert not await _advance(driver, f, run, 2, T0 + 3, rows=99, cursor='{"id": 99}')
    assert not await _advance(driver, f, run, 1, T0 + 3, rows=99, cursor='{"id": 99}')
    assert not await _advance(driver, f, run, 4, T0 + 3, rows=99, cursor='{"id": 99}')
    assert await _entry(driver, run) == e
    # The next batch, `{"id": 10}` (an integer, not `10.0`), then the last one: no cursor left.
    assert await _advance(driver, f, run, 3, T0 + 4, rows=1, errors=2, cursor='{"id": 10}')
    e = await _entry(driver, run)
    assert (e.batches, e.rows, e.errors) == (3, 2**40 + 7, 3), e
    assert same_json(e.cursor_json, '{"id": 10}'), e.cursor_json
    assert await _advance(driver, f, run, 4, T0 + 5, rows=0, cursor=None)
    e = await _entry(driver, run)
    assert (e.batches, e.cursor_json, e.updated_at_ms) == (4, None, T0 + 5), e
    assert e.started_at_ms == T0 and e.status == "running", e
    # No entry for the run: nothing to advance.
    assert not await _advance(driver, f, "run-nobody", 1, T0 + 6)
    assert list(await _ledger(driver)) == [run]
    # The same batch sent by eight callers at once: it lands once, its rows counted once.
    landed = await asyncio.gather(
        *(_advance(driver, f, run, 5, T0 + 7, rows=3, cursor=f'{{"n": {i}}}') for i in range(8))
    )
    assert sorted(landed) == [False] * 7 + [True], landed
    e = await _entry(driver, run)
    assert (e.batches, e.rows, e.updated_at_ms) == (5, 2**40 + 10, T0 + 7), e
    assert same_json(e.cursor_json, f'{{"n": {landed.index(True)}}}'), e.cursor_json


async def _checkpoint(
    driver: JobDriver,
    f: Fence,
    run_id: str,
    batch: int,
    now: int,
    output: str = '{"rows": 10}',
    rows: int = 10,
    cursor: str | None = None,
    span: int = 1,
) -> bool:
    """The checkpoint of the `span` batches ending at `batch`: its step `batch:<n>` holding
    `output`, and its advance."""
    step = StepPut(f, f"batch:{batch}", output, now)
    advance = SweepAdvance(f, run_id, batch, rows, 0, cursor, now, span)
    return await driver.sweep_checkpoint(SweepCheckpoint(step, advance))


async def scenario_sweeps_a_window_is_recorded_once(driver: JobDriver) -> None:
    """An advance may record a window of `span` batches ending at `batch` (a backfill's step
    over several batches): it lands only when its first batch is the next one (`batches ==
    batch - span`), and then `batches` is `batch` — the batches counted, not the advances —
    and its rows add once. A replayed window, one overlapping the recorded batches, or one
    skipping some moves nothing; a window's checkpoint replayed keeps its step's first record
    and moves nothing; one-batch advances and windows follow one another; racing callers of
    one window land it once. A span of 0, or longer than its batch number, is refused."""
    if await _unsupported(driver):
        return
    job = await _run(driver, "a")
    f, run = job.fence, job.run_id
    await _open(driver, job, T0)
    # Batches 1 to 3 in one window, then batch 4 alone.
    assert await _advance(driver, f, run, 3, T0 + 1, rows=3000, cursor='"c3"', span=3)
    e = await _entry(driver, run)
    assert (e.batches, e.rows, e.updated_at_ms) == (3, 3000, T0 + 1), e
    assert await _advance(driver, f, run, 4, T0 + 2, rows=1000, cursor='"c4"')
    e = await _entry(driver, run)
    assert (e.batches, e.rows) == (4, 4000), e
    # The same window again; one overlapping the last batch (3 to 5), or the first two
    # (1 to 5); one skipping batch 5 (6 and 7): nothing moves, not even the time.
    for batch, span in ((4, 1), (3, 3), (5, 3), (5, 5), (7, 2)):
        assert not await _advance(driver, f, run, batch, T0 + 3, rows=99, span=span), (
            batch,
            span,
        )
    assert await _entry(driver, run) == e
    # A window of two from where the entry stopped: 5 and 6.
    assert await _advance(driver, f, run, 6, T0 + 4, rows=2**40, cursor=None, span=2)
    e = await _entry(driver, run)
    assert (e.batches, e.rows, e.cursor_json) == (6, 2**40 + 4000, None), e
    # Refused, nothing written: a span of 0, longer than its batch number, or not a number.
    for bad in (0, 8, -1, True):
        await refused(
            "X_JOB_RECORD_INVALID",
            driver.sweep_advance(SweepAdvance(f, run, 7, 1, 0, None, T0 + 5, bad)),
        )
    assert await _entry(driver, run) == e
    # Eight callers of one window (7 to 9) at once: it lands once, its rows counted once.
    landed = await asyncio.gather(
        *(_advance(driver, f, run, 9, T0 + 6, rows=3, cursor=f"{i}", span=3) for i in range(8))
    )
    assert sorted(landed) == [False] * 7 + [True], landed
    e = await _entry(driver, run)
    assert (e.batches, e.rows) == (9, 2**40 + 4003), e
    if not driver.capabilities().steps:
        return
    # A window recorded by its checkpoint (10 to 12), then replayed with other counts: the
    # fence holds, so it answers True, but its first record stays and nothing moves.
    assert await _checkpoint(driver, f, run, 12, T0 + 7, '{"n": 12}', rows=30, span=3)
    e = await _entry(driver, run)
    assert (e.batches, e.rows) == (12, 2**40 + 4033), e
    assert await _checkpoint(driver, f, run, 12, T0 + 8, '{"n": 0}', rows=99, span=3)
    assert await _checkpoint(driver, f, run, 13, T0 + 8, '{"n": 1}', rows=99, span=3)
    assert await _entry(driver, run) == e
    steps = await _steps(driver, run)
    assert steps["batch:12"] == ('{"n": 12}', T0 + 7), steps


async def _steps(driver: JobDriver, run_id: str) -> dict[str, tuple[str, int]]:
    return {s.name: (s.output_json, s.recorded_at_ms) for s in await driver.step_list(run_id)}


async def scenario_sweeps_a_checkpoint_records_and_counts_together(driver: JobDriver) -> None:
    """A checkpoint records the batch's step under the run AND moves the entry, as one write:
    both land under a held fence; a replay keeps the step's first record and moves nothing; a
    checkpoint of an ended entry still records its step; off the fence (reclaimed, settled,
    skewed) or under a held fence of another run, nothing at all is written; two fences in one
    checkpoint are refused. A driver without steps refuses it."""
    if await _unsupported(driver):
        return
    job = await _run(driver, "a")
    f, run = job.fence, job.run_id
    if not driver.capabilities().steps:
        await refused("X_DRIVER_CAPABILITY_MISSING", _checkpoint(driver, f, run, 1, T0))
        return
    await _open(driver, job, T0)
    assert await _checkpoint(driver, f, run, 1, T0 + 1, '{"n": 1}', rows=4, cursor='"c1"')
    assert await _checkpoint(driver, f, run, 2, T0 + 2, '{"n": 2}', rows=2**40, cursor='"c2"')
    e = await _entry(driver, run)
    assert (e.batches, e.rows, e.updated_at_ms) == (2, 2**40 + 4, T0 + 2), e
    assert same_json(e.cursor_json, '"c2"'), e.cursor_json
    steps = await _steps(driver, run)
    assert steps == {"batch:1": ('{"n": 1}', T0 + 1), "batch:2": ('{"n": 2}', T0 + 2)}, steps
    # A replay of batch 2 (its step ran again) with another output: the fence holds, so it
    # answers True, but the first record stays and the entry does not move.
    assert await _checkpoint(driver, f, run, 2, T0 + 3, '{"n": 22}', rows=99, cursor='"x"')
    assert await _steps(driver, run) == steps
    assert await _entry(driver, run) == e
    # A skewed fence, and a row of another run holding its own fence: nothing written.
    other = await _run(driver, "b")
    for fence, run_id in ((replace(f, claims=f.claims + 1), run), (other.fence, run)):
        assert not await _checkpoint(driver, fence, run_id, 3, T0 + 4, '{"n": 3}')
    assert await _steps(driver, run) == steps and await _entry(driver, run) == e
    assert await _steps(driver, other.run_id) == {}
    # Two fences in one checkpoint: refused, nothing written.
    two = SweepCheckpoint(
        StepPut(f, "batch:3", "{}", T0 + 4),
        SweepAdvance(replace(f, worker_id="w2"), run, 3, 1, 0, None, T0 + 4),
    )
    await refused("X_JOB_RECORD_INVALID", driver.sweep_checkpoint(two))
    # Ended, its fence still held: the step is recorded, the entry keeps its end.
    assert await _finish(driver, f, run, T0 + 5)
    assert await _checkpoint(driver, f, run, 3, T0 + 6, '{"n": 3}')
    assert (await _steps(driver, run))["batch:3"] == ('{"n": 3}', T0 + 6)
    done = await _entry(driver, run)
    assert (done.status, done.batches) == ("completed", 2), done
    # Reclaimed after its lease lapsed: the old fence writes nothing; the new holder does.
    again = await claim_one(driver, T0 + 1000, job.queue, worker="w2")
    assert not await _checkpoint(driver, f, run, 4, T0 + 1001, '{"n": 4}')
    assert "batch:4" not in await _steps(driver, run)
    assert await _checkpoint(driver, again.fence, run, 4, T0 + 1002, '{"n": 4}')
    assert (await _steps(driver, run))["batch:4"] == ('{"n": 4}', T0 + 1002)
    # Settled: nothing more.
    assert await driver.job_ack([Ack(again.fence, T0 + 1003)]) == [True]
    assert not await _checkpoint(driver, again.fence, run, 5, T0 + 1004, '{"n": 5}')
    assert "batch:5" not in await _steps(driver, run)


# -- fences ---------------------------------------------------------------------------------------


async def scenario_sweeps_writes_are_fenced_on_the_claim(driver: JobDriver) -> None:
    """Every write needs the run's claim: a lease that lapsed with nobody claiming the row still
    holds; once another worker reclaimed it, the old fence writes nothing (start, advance,
    finish) while the new holder resumes the entry where it stood; a skewed fence (another
    worker, a count off by one) and a settled row's fence write nothing either."""
    if await _unsupported(driver):
        return
    job = await _run(driver, "a")
    f, run = job.fence, job.run_id
    await _open(driver, job, T0)
    assert await _advance(driver, f, run, 1, T0 + 1)
    # The lease ended at T0 + 1000 and nobody claimed the row: the fence still holds.
    assert await _advance(driver, f, run, 2, T0 + 1000, cursor='"b2"')
    for skewed in (replace(f, worker_id="w2"), replace(f, claims=f.claims + 1)):
        assert not await _advance(driver, skewed, run, 3, T0 + 1000)
        assert not await _finish(driver, skewed, run, T0 + 1000)
        assert await driver.sweep_start(_start(skewed, run, T0 + 1000)) == SweepStartAnswer(None)
    # Another worker reclaims the lapsed lease at its end.
    again = await claim_one(driver, T0 + 1000, job.queue, worker="w2")
    assert again.fence != f
    before = await _entry(driver, run)
    assert not await _advance(driver, f, run, 3, T0 + 1001)
    assert not await _finish(driver, f, run, T0 + 1001)
    assert not await _finish(driver, f, run, T0 + 1001, "X_BACKFILL_STALLED")
    assert await driver.sweep_start(_start(f, run, T0 + 1001)) == SweepStartAnswer(None)
    assert await driver.sweep_start(_start(f, "run-other", T0 + 1001)) == SweepStartAnswer(None)
    assert await _ledger(driver) == {run: before}
    # The new holder's start resumes the running entry, its batches kept.
    resumed = await _open(driver, again, T0 + 1002)
    assert resumed == replace(before, updated_at_ms=T0 + 1002), resumed
    assert await _advance(driver, again.fence, run, 3, T0 + 1003)
    # Settled: the row is no longer running, its fence is gone.
    assert await driver.job_ack([Ack(again.fence, T0 + 1004)]) == [True]
    assert not await _advance(driver, again.fence, run, 4, T0 + 1005)
    assert not await _finish(driver, again.fence, run, T0 + 1005)
    e = await _entry(driver, run)
    assert (e.status, e.batches, e.updated_at_ms) == ("running", 3, T0 + 1003), e


async def scenario_sweeps_a_run_writes_only_its_own_entry(driver: JobDriver) -> None:
    """A write lands only under a fence whose row is in the write's run now. Another row's held
    fence writes nothing of run `run-a` (no start, no batch, no end) and opens no entry for a
    run no row holds; a row that shares the run (as a saga's unwind job does) writes its entry.
    After a fresh requeue to a run id that extends the old one, the row's new claim writes
    nothing of its old run and opens its new run's entry, under the same job; after a plain
    requeue, the next claim resumes the same run's entry."""
    if await _unsupported(driver):
        return
    a = await _run(driver, "a")
    b = await _run(driver, "b")
    await _open(driver, a, T0)
    assert await _advance(driver, a.fence, "run-a", 1, T0 + 1, cursor='"a1"')
    before = await _ledger(driver)
    # b's fence holds, but b is in run-b.
    assert await driver.sweep_start(_start(b.fence, "run-a", T0 + 2)) == SweepStartAnswer(None)
    assert not await _advance(driver, b.fence, "run-a", 2, T0 + 2)
    assert not await _finish(driver, b.fence, "run-a", T0 + 2)
    assert not await _finish(driver, b.fence, "run-a", T0 + 2, "X_BACKFILL_STALLED")
    assert await driver.sweep_start(_start(b.fence, "run-z", T0 + 2)) == SweepStartAnswer(None)
    assert await _ledger(driver) == before
    # A twin row of run-a, claimed by another worker: it holds run-a too.
    twin = new_job("twin", run_id="run-a", queue="q-twin")
    assert await driver.job_enqueue(twin) == EnqueueResult("twin", deduped=False)
    u = await claim_one(driver, T0 + 3, "q-twin", worker="w2")
    assert await _advance(driver, u.fence, "run-a", 2, T0 + 3, rows=4, cursor='"u2"')
    e = await _entry(driver, "run-a")
    assert (e.job_id, e.batches, e.rows, e.updated_at_ms) == ("a", 2, 14, T0 + 3), e
    assert await _finish(driver, a.fence, "run-a", T0 + 4, "X_BACKFILL_STALLED")
    if not driver.capabilities().operator:
        return
    failed = await _entry(driver, "run-a")
    assert await driver.job_ack([Ack(a.fence, T0 + 4)]) == [True]
    await driver.job_requeue("a", T0 + 5, fresh_run_id="run-a·2")
    again = await claim_one(driver, T0 + 6, a.queue)
    assert again.run_id == "run-a·2", again
    # The old run's failed entry: its row's new claim neither resumes nor moves it.
    assert await driver.sweep_start(_start(again.fence, "run-a", T0 + 7)) == SweepStartAnswer(None)
    assert not await _advance(driver, again.fence, "run-a", 3, T0 + 7)
    assert not await _finish(driver, again.fence, "run-a", T0 + 7)
    assert await _entry(driver, "run-a") == failed
    # The new run opens its own entry, under the same job.
    fresh = await _open(driver, again, T0 + 8)
    assert (fresh.run_id, fresh.job_id, fresh.batches, fresh.started_at_ms) == (
        "run-a·2",
        "a",
        0,
        T0 + 8,
    ), fresh
    # A plain requeue keeps the run: the next claim resumes its entry and records on.
    assert await driver.job_ack([Ack(again.fence, T0 + 9)]) == [True]
    await driver.job_requeue("a", T0 + 10)
    third = await claim_one(driver, T0 + 11, a.queue)
    resumed = await _open(driver, third, T0 + 12)
    assert resumed == replace(fresh, updated_at_ms=T0 + 12), resumed
    assert await _advance(driver, third.fence, "run-a·2", 1, T0 + 13)
    assert await _ledger(driver) == {
        "run-a": failed,
        "run-a·2": replace(resumed, batches=1, rows=10, updated_at_ms=T0 + 13),
    }


# -- a run's own entry ----------------------------------------------------------------------------


async def scenario_sweeps_a_failed_run_resumes(driver: JobDriver) -> None:
    """A run that failed records its code and end; it writes nothing more as failed; its next
    attempt's start makes it `running` again — no error, no end, updated now — with everything
    it recorded kept, and it goes on at the next batch."""
    if await _unsupported(driver):
        return
    job = await _run(driver, "a")
    f, run = job.fence, job.run_id
    opened = await _open(driver, job, T0, expected=40)
    assert await _advance(driver, f, run, 1, T0 + 1, rows=10, errors=1, cursor='{"id": 10}')
    assert await _finish(driver, f, run, T0 + 2, "X_BACKFILL_STALLED")
    failed = await _entry(driver, run)
    assert (failed.status, failed.error, failed.finished_at_ms, failed.updated_at_ms) == (
        "failed",
        "X_BACKFILL_STALLED",
        T0 + 2,
        T0 + 2,
    ), failed
    assert (failed.batches, failed.rows, failed.errors, failed.expected) == (1, 10, 1, 40), failed
    assert same_json(failed.cursor_json, '{"id": 10}'), failed
    # Failed: no batch, no second end, though the fence still holds.
    assert not await _advance(driver, f, run, 2, T0 + 3)
    assert not await _finish(driver, f, run, T0 + 3)
    assert await _entry(driver, run) == failed
    # The attempt is retried: the same run, a new claim.
    retry = Nack(f, NackKind.RETRY, T0 + 4, T0 + 4, "X_BACKFILL_STALLED")
    assert await driver.job_nack([retry]) == [True]
    again = await claim_one(driver, T0 + 5, job.queue, worker="w2")
    resumed = await _open(driver, again, T0 + 6, expected=99)
    assert resumed == replace(
        failed, status="running", error=None, finished_at_ms=None, updated_at_ms=T0 + 6
    ), resumed
    assert resumed.started_at_ms == opened.started_at_ms == T0, resumed
    assert await _advance(driver, again.fence, run, 2, T0 + 7, rows=5)
    assert await _finish(driver, again.fence, run, T0 + 8)
    done = await _entry(driver, run)
    assert (done.status, done.error, done.batches, done.rows, done.finished_at_ms) == (
        "completed",
        None,
        2,
        15,
        T0 + 8,
    ), done


async def scenario_sweeps_a_completed_run_stays_completed(driver: JobDriver) -> None:
    """A completed entry takes no batch and no second end (completed or failed), and a later
    attempt of the same run finds it as it is: its own entry never blocks it, nor reopens."""
    if await _unsupported(driver):
        return
    job = await _run(driver, "a")
    f, run = job.fence, job.run_id
    await _open(driver, job, T0)
    assert await _advance(driver, f, run, 1, T0 + 1, cursor='"next"')
    assert await _finish(driver, f, run, T0 + 2)
    done = await _entry(driver, run)
    assert (done.status, done.error, done.finished_at_ms, done.updated_at_ms) == (
        "completed",
        None,
        T0 + 2,
        T0 + 2,
    ), done
    assert not await _advance(driver, f, run, 2, T0 + 3)
    assert not await _finish(driver, f, run, T0 + 3)
    assert not await _finish(driver, f, run, T0 + 3, "X_JOB_LEASE_LOST")
    # The body failed after its ledger's end: the attempt is retried, the run is the same.
    retry = Nack(f, NackKind.RETRY, T0 + 4, T0 + 4, "boom")
    assert await driver.job_nack([retry]) == [True]
    again = await claim_one(driver, T0 + 5, job.queue)
    got = await driver.sweep_start(_start(again.fence, run, T0 + 6))
    assert got == SweepStartAnswer(done), got
    assert not await _advance(driver, again.fence, run, 2, T0 + 7)
    assert not await _finish(driver, again.fence, run, T0 + 7, "X_BACKFILL_STALLED")
    assert await _ledger(driver) == {run: done}


# -- blocking -------------------------------------------------------------------------------------


async def scenario_sweeps_a_completed_run_blocks_the_same_sweep(driver: JobDriver) -> None:
    """A completed run blocks a new run of the same name, scope, environment and checksum
    (whatever its kind), writing nothing; a new run differing in any one of those opens; a
    failed or a running run of a sweep never blocks it."""
    if await _unsupported(driver):
        return
    done = await _run(driver, "done")
    await _open(driver, done, T0)
    assert await _finish(driver, done.fence, done.run_id, T0 + 1)
    blocker = await _entry(driver, done.run_id)
    for i, kind in enumerate(("backfill", "export")):
        job = await _run(driver, f"blocked{i}", T0 + 2)
        identity = (*USERS[:3], kind, USERS[4])
        got = await driver.sweep_start(_start(job.fence, job.run_id, T0 + 2, identity))
        assert got == SweepStartAnswer(None, blocked_by=blocker), (kind, got)
    assert list(await _ledger(driver)) == [done.run_id]
    others = {
        "name": ("users2", *USERS[1:]),
        "scope": (USERS[0], "none", *USERS[2:]),
        "environment": (*USERS[:2], "staging", *USERS[3:]),
        "checksum": (*USERS[:4], "c2"),
    }
    for field, identity in others.items():
        job = await _run(driver, f"new-{field}", T0 + 3)
        got = await driver.sweep_start(_start(job.fence, job.run_id, T0 + 3, identity))
        assert got.blocked_by is None and got.record is not None, (field, got)
    # A failed run and a running run of sweep `other`: neither blocks a new run of it.
    other = ("other", "t1", "default", "backfill", "c1")
    failed = await _run(driver, "failed", T0 + 4)
    await _open(driver, failed, T0 + 4, other)
    assert await _finish(driver, failed.fence, failed.run_id, T0 + 5, "X_BACKFILL_STALLED")
    running = await _run(driver, "running", T0 + 5)
    await _open(driver, running, T0 + 5, other)
    fresh = await _run(driver, "fresh", T0 + 6)
    await _open(driver, fresh, T0 + 6, other)


async def scenario_sweeps_the_blocker_is_the_last_finished(driver: JobDriver) -> None:
    """Of several completed runs of one sweep, the one finished last blocks a new run; two
    finished in one millisecond: the greater run id (code-point order)."""
    if await _unsupported(driver):
        return
    # Started before any of them completed, so none was blocked.
    jobs = [await _run(driver, job_id) for job_id in ("é", "B", "a")]
    for job in jobs:
        await _open(driver, job, T0)
    # "run-é" and "run-a" complete in one millisecond, "run-B" a millisecond before.
    assert await _finish(driver, jobs[1].fence, jobs[1].run_id, T0 + 1)
    assert await _finish(driver, jobs[2].fence, jobs[2].run_id, T0 + 2)
    assert await _finish(driver, jobs[0].fence, jobs[0].run_id, T0 + 2)
    ledger = await _ledger(driver)
    late = await _run(driver, "late", T0 + 3)
    got = await driver.sweep_start(_start(late.fence, late.run_id, T0 + 3))
    assert got == SweepStartAnswer(None, blocked_by=ledger["run-é"]), got
    # A run of the same sweep started before, completed last: it blocks, its run id the least.
    first = await _run(driver, "0", T0 + 3)
    await _open(driver, first, T0 + 3, (*USERS[:4], "c2"))
    other = await _run(driver, "1", T0 + 3)
    await _open(driver, other, T0 + 3, (*USERS[:4], "c2"))
    assert await _finish(driver, other.fence, other.run_id, T0 + 4)
    assert await _finish(driver, first.fence, first.run_id, T0 + 5)
    last = await _entry(driver, "run-0")
    again = await _run(driver, "again", T0 + 6)
    got = await driver.sweep_start(_start(again.fence, again.run_id, T0 + 6, (*USERS[:4], "c2")))
    assert got == SweepStartAnswer(None, blocked_by=last), got


# -- the listing ----------------------------------------------------------------------------------


async def scenario_sweeps_listed_newest_first(driver: JobDriver) -> None:
    """The ledger lists the newest start first, ties by the greater run id in code-point order
    (no collation's), up to the limit — which may cut through a tie —, of one name when asked."""
    if await _unsupported(driver):
        return
    runs = {"B-1": T0, "é-1": T0, "a-1": T0, "☃-2": T0 + 1, "_-2": T0 + 1, "%-0": T0 - 1}
    named = {"☃-2": "q'uo%te\n☃", "a-1": "q'uo%te\n☃"}
    for i, (run_id, now) in enumerate(runs.items()):
        job = await _run(driver, f"j{i}", now, run_id=run_id)
        identity = (named.get(run_id, "users"), *USERS[1:])
        await _open(driver, job, now, identity)
    order = ["☃-2", "_-2", "é-1", "a-1", "B-1", "%-0"]
    listed = await driver.sweep_list(None, MAX_SWEEP_LIST)
    assert [e.run_id for e in listed] == order, listed
    for limit in (1, 2, 3, 4):
        first = [e.run_id for e in await driver.sweep_list(None, limit)]
        assert first == order[:limit], (limit, first)
    by_name = [e.run_id for e in await driver.sweep_list("q'uo%te\n☃", 10)]
    assert by_name == ["☃-2", "a-1"], by_name
    assert [e.run_id for e in await driver.sweep_list("users", 2)] == ["_-2", "é-1"]
    assert await driver.sweep_list("nobody", 10) == []


# -- refusals -------------------------------------------------------------------------------------


async def scenario_sweeps_refusals_write_nothing(driver: JobDriver) -> None:
    """Calls the ABC refuses (a bad kind, checksum, cursor, count, status, limit, fence) write
    nothing, under a fence that holds."""
    if await _unsupported(driver):
        return
    job = await _run(driver, "a")
    f, run = job.fence, job.run_id
    await _open(driver, job, T0)
    assert await _advance(driver, f, run, 1, T0 + 1, cursor='"c"')
    before = await _ledger(driver)
    code = "X_JOB_RECORD_INVALID"
    start = _start(f, "run-new", T0 + 2)
    for bad in (
        replace(start, kind="purge"),  # type: ignore[arg-type]
        replace(start, checksum=LONG_CHECKSUM + "c"),
        replace(start, run_id=""),
        replace(start, scope="a\x00b"),
        replace(start, expected=-1),
        replace(start, fence=replace(f, claims=0)),
    ):
        await refused(code, driver.sweep_start(bad))
    advance = SweepAdvance(f, run, 2, 1, 0, None, T0 + 2)
    for bad_advance in (
        replace(advance, batch=0),
        replace(advance, rows=-1),
        replace(advance, errors=MAX_SWEEP_ROWS + 1),
        replace(advance, cursor_json=LONG_CURSOR[:-1] + 'x"'),
        replace(advance, cursor_json="NaN"),
        replace(advance, cursor_json='"a\\u0000b"'),
    ):
        await refused(code, driver.sweep_advance(bad_advance))
    finish = SweepFinish(f, run, "completed", None, T0 + 2)
    for bad_finish in (
        replace(finish, error="X_BACKFILL_STALLED"),
        replace(finish, status="failed"),
        replace(finish, status="running"),  # type: ignore[arg-type]
    ):
        await refused(code, driver.sweep_finish(bad_finish))
    await refused(code, driver.sweep_list(None, 0))
    await refused(code, driver.sweep_list(None, MAX_SWEEP_LIST + 1))
    await refused(code, driver.sweep_list("", 1))
    assert await _ledger(driver) == before
    # Still running and held: the same batch, well formed, lands.
    assert await _advance(driver, f, run, 2, T0 + 3)


SWEEP_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_sweeps_a_batch_is_recorded_once,
        scenario_sweeps_a_checkpoint_records_and_counts_together,
        scenario_sweeps_a_completed_run_blocks_the_same_sweep,
        scenario_sweeps_a_completed_run_stays_completed,
        scenario_sweeps_a_failed_run_resumes,
        scenario_sweeps_a_new_entry,
        scenario_sweeps_a_window_is_recorded_once,
        scenario_sweeps_a_run_writes_only_its_own_entry,
        scenario_sweeps_listed_newest_first,
        scenario_sweeps_refusals_write_nothing,
        scenario_sweeps_the_blocker_is_the_last_finished,
        scenario_sweeps_writes_are_fenced_on_the_claim,
    )
}
