"""The sweep ledger on every driver: the memory driver (tests/core/test_sweeps.py), Postgres
(tests/pg/test_sweeps_pg.py) and Redis (tests/redis/test_sweeps_redis.py) run these same cases.

Each case takes an open driver with an empty store (the concurrent one, several drivers on one
store) and pins what `jobs_core.driver`'s `_sweep_*` docstrings promise: writes fenced on the
run's claim (a run writes only its own entry), a batch recorded once, only a completed run of
the same sweep blocking, the listing's order, and hostile values (multi-byte names at the byte
limit, markup, quotes, counts past 2**53) read back exactly.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Final, Literal, NamedTuple

import pytest

from jobs_core.driver import (
    MAX_NAME_BYTES,
    MAX_SWEEP_CHECKSUM_BYTES,
    MAX_SWEEP_CURSOR_BYTES,
    MAX_SWEEP_ROWS,
    JobDriver,
)
from jobs_core.errors import RecordInvalidError
from jobs_core.records import (
    Ack,
    ClaimParams,
    Fence,
    SweepAdvance,
    SweepFinish,
    SweepRecord,
    SweepStart,
    SweepStartAnswer,
)
from tests.core.support import T0, new_job

#: A lease no case outlives.
LEASE_MS = 600_000


async def held(driver: JobDriver, run_id: str, *, worker: str = "w", now: int = T0) -> Fence:
    """Enqueue and claim a job of run `run_id` for `worker` (job and queue of their own, short
    whatever the run id's length); its fence."""
    job_id = "job-" + hashlib.sha1(f"{run_id}\x00{worker}".encode()).hexdigest()[:12]
    queue = f"q-{job_id}"
    await driver.job_enqueue(replace(new_job(job_id, job_id, queue=queue), run_id=run_id))
    got = await driver.job_claim(ClaimParams((queue,), worker, 1, LEASE_MS, now))
    assert [j.id for j in got.jobs] == [job_id]
    return got.jobs[0].fence


class Sweep(NamedTuple):
    """What names a sweep: a completed run of it blocks another run of the same four."""

    name: str = "backfill-users"
    scope: str = "none"
    environment: str = "prod"
    checksum: str = "c1"


#: The sweep most cases run.
USERS: Final = Sweep()


def starting(
    fence: Fence, run_id: str, now: int, sweep: Sweep = USERS, expected: int | None = None
) -> SweepStart:
    """A backfill's start of run `run_id` at `now`."""
    name, scope, environment, checksum = sweep
    return SweepStart(fence, run_id, name, scope, environment, "backfill", checksum, expected, now)


def fresh(start: SweepStart) -> SweepRecord:
    """The entry a first `sweep_start` makes."""
    return SweepRecord(
        run_id=start.run_id,
        job_id=start.fence.job_id,
        name=start.name,
        scope=start.scope,
        environment=start.environment,
        kind=start.kind,
        checksum=start.checksum,
        status="running",
        batches=0,
        rows=0,
        errors=0,
        expected=start.expected,
        cursor_json=None,
        error=None,
        started_at_ms=start.now_ms,
        updated_at_ms=start.now_ms,
        finished_at_ms=None,
    )


async def run_once(
    driver: JobDriver,
    start: SweepStart,
    finished_at: int,
    status: Literal["completed", "failed"] = "completed",
) -> SweepRecord:
    """Start `start`'s run and finish it `status` at `finished_at`; its entry after."""
    answer = await driver.sweep_start(start)
    assert answer.record is not None, answer
    error = None if status == "completed" else "X_BACKFILL_STALLED"
    fin = SweepFinish(start.fence, start.run_id, status, error, finished_at)
    assert await driver.sweep_finish(fin)
    return replace(
        answer.record,
        status=status,
        error=error,
        finished_at_ms=finished_at,
        updated_at_ms=finished_at,
    )


async def a_run_records_each_batch_once(driver: JobDriver) -> None:
    """A new entry, batches moving only from the one before, the end, and a failed run that a
    later attempt of the same run sets running again with everything it recorded kept."""
    f = await held(driver, "run-a")
    start = starting(f, "run-a", T0 + 1, expected=25)
    entry = fresh(start)
    assert await driver.sweep_start(start) == SweepStartAnswer(entry)

    def advance(batch: int, rows: int, cursor: str | None, at: int) -> SweepAdvance:
        return SweepAdvance(f, "run-a", batch, rows, 1, cursor, at)

    assert await driver.sweep_advance(advance(1, 10, '{"after": 10}', T0 + 2))
    assert not await driver.sweep_advance(advance(1, 10, '{"after": 10}', T0 + 3))  # replayed
    assert not await driver.sweep_advance(advance(3, 10, '{"after": 30}', T0 + 3))  # skipped
    assert await driver.sweep_advance(advance(2, 15, None, T0 + 4))
    entry = replace(entry, batches=2, rows=25, errors=2, cursor_json=None, updated_at_ms=T0 + 4)
    assert await driver.sweep_list(None, 10) == [entry]

    assert await driver.sweep_finish(
        SweepFinish(f, "run-a", "failed", "X_BACKFILL_STALLED", T0 + 5)
    )
    failed = replace(
        entry,
        status="failed",
        error="X_BACKFILL_STALLED",
        finished_at_ms=T0 + 5,
        updated_at_ms=T0 + 5,
    )
    assert await driver.sweep_list("backfill-users", 10) == [failed]
    # A failed entry is not running: nothing moves it but the run's next start.
    assert not await driver.sweep_advance(advance(3, 1, None, T0 + 6))
    assert not await driver.sweep_finish(SweepFinish(f, "run-a", "completed", None, T0 + 6))

    # The next attempt of the run (a start with other declaration values keeps the stored ones).
    again = replace(start, expected=99, checksum="c1", now_ms=T0 + 7)
    resumed = replace(entry, updated_at_ms=T0 + 7)
    assert await driver.sweep_start(again) == SweepStartAnswer(resumed)
    assert await driver.sweep_advance(advance(3, 5, '"end"', T0 + 8))
    assert await driver.sweep_finish(SweepFinish(f, "run-a", "completed", None, T0 + 9))
    done = replace(
        resumed,
        status="completed",
        batches=3,
        rows=30,
        errors=3,
        cursor_json='"end"',
        updated_at_ms=T0 + 9,
        finished_at_ms=T0 + 9,
    )
    assert await driver.sweep_list(None, 10) == [done]
    # A completed entry: answered unchanged to its own run's start, moved by nothing.
    assert await driver.sweep_start(replace(start, now_ms=T0 + 10)) == SweepStartAnswer(done)
    assert not await driver.sweep_finish(SweepFinish(f, "run-a", "failed", "X_OTHER", T0 + 11))
    assert not await driver.sweep_advance(advance(4, 1, None, T0 + 11))
    assert await driver.sweep_list(None, 10) == [done]


async def a_lost_fence_writes_nothing(driver: JobDriver) -> None:
    """Forged, skewed and settled fences: no entry made, none moved; a re-claimed run resumes
    under its new fence only."""
    f = await held(driver, "run-f")
    forged = [
        replace(f, claims=f.claims + 1),
        replace(f, worker_id="other"),
        replace(f, job_id="job-nobody"),
    ]
    for bad in forged:
        assert await driver.sweep_start(starting(bad, "run-f", T0 + 1)) == SweepStartAnswer(None)
    assert await driver.sweep_list(None, 10) == []

    entry = (await driver.sweep_start(starting(f, "run-f", T0 + 1))).record
    assert entry is not None
    for bad in forged:
        assert not await driver.sweep_advance(SweepAdvance(bad, "run-f", 1, 5, 0, "1", T0 + 2))
        assert not await driver.sweep_finish(SweepFinish(bad, "run-f", "completed", None, T0 + 2))
    assert await driver.sweep_list(None, 10) == [entry]

    # The lease lapses and another worker claims the job: the first worker's fence is lost.
    lapsed = T0 + LEASE_MS + 1
    got = await driver.job_claim(ClaimParams((f"q-{f.job_id}",), "w2", 1, LEASE_MS, lapsed))
    assert [j.id for j in got.jobs] == [f.job_id]
    f2 = got.jobs[0].fence
    assert await driver.sweep_start(starting(f, "run-f", lapsed)) == SweepStartAnswer(None)
    assert not await driver.sweep_advance(SweepAdvance(f, "run-f", 1, 5, 0, "1", lapsed))
    assert not await driver.sweep_finish(SweepFinish(f, "run-f", "failed", "X_A", lapsed))
    assert await driver.sweep_list(None, 10) == [entry]
    resumed = replace(entry, updated_at_ms=lapsed + 1)
    assert await driver.sweep_start(starting(f2, "run-f", lapsed + 1)) == SweepStartAnswer(resumed)
    # Once the job is settled, its fence holds no more.
    assert await driver.job_ack([Ack(f2, lapsed + 2)]) == [True]
    assert not await driver.sweep_advance(SweepAdvance(f2, "run-f", 1, 5, 0, "1", lapsed + 3))
    assert not await driver.sweep_finish(SweepFinish(f2, "run-f", "completed", None, lapsed + 3))
    assert await driver.sweep_start(starting(f2, "run-f", lapsed + 3)) == SweepStartAnswer(None)
    assert await driver.sweep_list(None, 10) == [resumed]


async def a_held_fence_of_another_run_writes_nothing(driver: JobDriver) -> None:
    """A fence that holds, but whose row is in another run, writes nothing of this run: another
    job's (no start, batch or end; no entry for a run no row holds), and this job's own once a
    fresh requeue put it in a new run. A second row of the same run (as a saga's unwind job is)
    writes it, the entry's job kept."""
    f = await held(driver, "run-a")
    other = await held(driver, "run-b")
    entry = fresh(starting(f, "run-a", T0 + 1))
    assert await driver.sweep_start(starting(f, "run-a", T0 + 1)) == SweepStartAnswer(entry)
    assert await driver.sweep_advance(SweepAdvance(f, "run-a", 1, 5, 0, '"a1"', T0 + 2))
    entry = replace(entry, batches=1, rows=5, cursor_json='"a1"', updated_at_ms=T0 + 2)
    assert await driver.sweep_start(starting(other, "run-a", T0 + 3)) == SweepStartAnswer(None)
    assert not await driver.sweep_advance(SweepAdvance(other, "run-a", 2, 5, 0, None, T0 + 3))
    assert not await driver.sweep_finish(SweepFinish(other, "run-a", "completed", None, T0 + 3))
    assert await driver.sweep_start(starting(other, "run-z", T0 + 3)) == SweepStartAnswer(None)
    assert await driver.sweep_list(None, 10) == [entry]

    twin = await held(driver, "run-a", worker="w-twin")
    assert twin.job_id != f.job_id
    assert await driver.sweep_advance(SweepAdvance(twin, "run-a", 2, 1, 0, None, T0 + 4))
    entry = replace(entry, batches=2, rows=6, cursor_json=None, updated_at_ms=T0 + 4)
    assert await driver.sweep_list(None, 10) == [entry]

    # The job ends and is requeued fresh: its next claim is in run `run-a·2`.
    assert await driver.job_ack([Ack(f, T0 + 5)]) == [True]
    await driver.job_requeue(f.job_id, T0 + 6, fresh_run_id="run-a·2")
    got = await driver.job_claim(ClaimParams((f"q-{f.job_id}",), "w", 1, LEASE_MS, T0 + 7))
    assert [(j.id, j.run_id) for j in got.jobs] == [(f.job_id, "run-a·2")]
    f2 = got.jobs[0].fence
    assert await driver.sweep_start(starting(f2, "run-a", T0 + 8)) == SweepStartAnswer(None)
    assert not await driver.sweep_advance(SweepAdvance(f2, "run-a", 3, 5, 0, None, T0 + 8))
    assert not await driver.sweep_finish(SweepFinish(f2, "run-a", "failed", "X_A", T0 + 8))
    assert await driver.sweep_list(None, 10) == [entry]
    mine = fresh(starting(f2, "run-a·2", T0 + 9))
    assert await driver.sweep_start(starting(f2, "run-a·2", T0 + 9)) == SweepStartAnswer(mine)
    assert mine.job_id == f.job_id


async def only_a_completed_run_of_the_same_sweep_blocks(driver: JobDriver) -> None:
    """Same name, scope, environment and checksum block; any one differing does not; a failed
    or running entry never blocks; of several completed, the one finished last (ties: the
    greater run id in code-point order) is answered, even to a completed run's own start."""
    done = await run_once(driver, starting(await held(driver, "a"), "a", T0 + 1), T0 + 2)
    before = await driver.sweep_list(None, 100)
    probe = starting(await held(driver, "b"), "b", T0 + 3)
    assert await driver.sweep_start(probe) == SweepStartAnswer(None, blocked_by=done)
    assert await driver.sweep_list(None, 100) == before  # nothing written
    # Its own run's start is answered its own entry, unchanged.
    own = starting(await held(driver, "a", worker="w-again"), "a", T0 + 4)
    assert await driver.sweep_start(own) == SweepStartAnswer(done)

    for i, field in enumerate(("name", "scope", "environment", "checksum")):
        run = f"b{i}"
        other = replace(probe, fence=await held(driver, run), run_id=run, now_ms=T0 + 10 + i)
        other = replace(other, **{field: getattr(probe, field) + "-2"})
        assert await driver.sweep_start(other) == SweepStartAnswer(fresh(other))

    # A failed run of a sweep, and a running one, block nobody.
    k2 = Sweep("import-orders", checksum="k2")
    await run_once(driver, starting(await held(driver, "f"), "f", T0 + 20, k2), T0 + 21, "failed")
    running = starting(await held(driver, "r"), "r", T0 + 22, k2)
    assert (await driver.sweep_start(running)).record == fresh(running)
    late = starting(await held(driver, "g"), "g", T0 + 23, k2)
    assert await driver.sweep_start(late) == SweepStartAnswer(fresh(late))

    # Several completed entries of one sweep (their runs started before any completed).
    k3 = Sweep("export-ledger", environment="staging")
    runs = ["p", "q", "s-\uffff", "s-\U00010000", "s-z"]
    fences = {r: await held(driver, r) for r in runs}
    for r in runs:
        assert (await driver.sweep_start(starting(fences[r], r, T0 + 30, k3))).record
    ends = {
        "p": T0 + 40,
        "q": T0 + 41,
        "s-\uffff": T0 + 42,
        "s-\U00010000": T0 + 42,
        "s-z": T0 + 42,
    }
    for r in runs:
        assert await driver.sweep_finish(SweepFinish(fences[r], r, "completed", None, ends[r]))
    entries = {e.run_id: e for e in await driver.sweep_list("export-ledger", 100)}
    # Finished together: the greatest run id by code point (U+10000 > U+FFFF > "z").
    last = entries["s-\U00010000"]
    probe = starting(await held(driver, "t"), "t", T0 + 50, k3)
    assert await driver.sweep_start(probe) == SweepStartAnswer(None, blocked_by=last)
    # A completed run of its own is blocked by ANOTHER completed run (the contract's order).
    own = starting(await held(driver, "q", worker="w-again"), "q", T0 + 51, k3)
    assert await driver.sweep_start(own) == SweepStartAnswer(None, blocked_by=last)
    mine = starting(
        await held(driver, "s-\U00010000", worker="w-again"), "s-\U00010000", T0 + 52, k3
    )
    assert await driver.sweep_start(mine) == SweepStartAnswer(None, blocked_by=entries["s-\uffff"])


#: Hostile text at the byte limits: multi-byte characters, markup, quotes, `%`, newlines.
HOSTILE_NAME = "名" * (MAX_NAME_BYTES // 3) + "é"  # 66 * 3 + 2 = 200 bytes
HOSTILE_RUN = "🦄" * (MAX_NAME_BYTES // 4)  # 200 bytes of 4-byte characters
HOSTILE_SCOPE = "<b onclick=\"x('1')\">{p}:*</b>\\%s%%\n'; DROP TABLE sweeps; --"
HOSTILE_ENV = 'prod\t"quoted" [x] ]] --[[ \x01 ☃'
HOSTILE_CHECKSUM = "ß" * (MAX_SWEEP_CHECKSUM_BYTES // 2)  # 128 bytes


def hostile_cursor(size: int) -> str:
    """JSON text of exactly `size` UTF-8 bytes: one string of escaped quotes (`\\"`, 2 bytes)
    and 2-byte characters, padded with `x`."""
    units, pad = divmod(size - 2, 4)
    return '"' + '\\"é' * units + "x" * pad + '"'


async def hostile_values_come_back_exactly(driver: JobDriver) -> None:
    """Names of 200 UTF-8 bytes of multi-byte characters, markup and quotes, a cursor of exactly
    `MAX_SWEEP_CURSOR_BYTES`, counts near and past 2**53 (exact, never rounded)."""
    assert len(HOSTILE_NAME.encode()) == MAX_NAME_BYTES == len(HOSTILE_RUN.encode())
    cursor = hostile_cursor(MAX_SWEEP_CURSOR_BYTES)
    assert len(cursor.encode()) == MAX_SWEEP_CURSOR_BYTES and json.loads(cursor)
    f = await held(driver, HOSTILE_RUN)
    start = SweepStart(
        f,
        HOSTILE_RUN,
        HOSTILE_NAME,
        HOSTILE_SCOPE,
        HOSTILE_ENV,
        "import",
        HOSTILE_CHECKSUM,
        MAX_SWEEP_ROWS,
        T0 + 1,
    )
    entry = fresh(start)
    assert await driver.sweep_start(start) == SweepStartAnswer(entry)
    # One byte too many is refused before anything is written.
    with pytest.raises(RecordInvalidError):
        await driver.sweep_advance(
            SweepAdvance(
                f, HOSTILE_RUN, 1, 1, 0, hostile_cursor(MAX_SWEEP_CURSOR_BYTES + 1), T0 + 2
            )
        )
    # rows: 3 * (2**53 - 1), odd and past 2**53 (no double holds it); errors: 2**53 + 1.
    steps = [(MAX_SWEEP_ROWS, MAX_SWEEP_ROWS), (MAX_SWEEP_ROWS, 2), (MAX_SWEEP_ROWS, 0)]
    for batch, (rows, errors) in enumerate(steps, start=1):
        advance = SweepAdvance(f, HOSTILE_RUN, batch, rows, errors, cursor, T0 + 2 + batch)
        assert await driver.sweep_advance(advance)
    entry = replace(
        entry,
        batches=3,
        rows=3 * MAX_SWEEP_ROWS,
        errors=2**53 + 1,
        cursor_json=cursor,
        updated_at_ms=T0 + 5,
    )
    assert await driver.sweep_list(HOSTILE_NAME, 5) == [entry]
    assert await driver.sweep_list(HOSTILE_NAME[:-1], 5) == []  # a prefix names nothing
    assert await driver.sweep_finish(SweepFinish(f, HOSTILE_RUN, "failed", HOSTILE_SCOPE, T0 + 6))
    entry = replace(
        entry, status="failed", error=HOSTILE_SCOPE, finished_at_ms=T0 + 6, updated_at_ms=T0 + 6
    )
    assert await driver.sweep_list(None, 5) == [entry]
    # Completed, the hostile sweep blocks another run of it, and only of it.
    assert (await driver.sweep_start(replace(start, now_ms=T0 + 7))).record is not None
    assert await driver.sweep_finish(SweepFinish(f, HOSTILE_RUN, "completed", None, T0 + 8))
    entry = replace(
        entry, status="completed", error=None, finished_at_ms=T0 + 8, updated_at_ms=T0 + 8
    )
    other = await held(driver, "other")
    probe = replace(start, fence=other, run_id="other", now_ms=T0 + 9)
    assert await driver.sweep_start(probe) == SweepStartAnswer(None, blocked_by=entry)
    near = replace(probe, checksum=HOSTILE_CHECKSUM[:-1] + "s")
    assert (await driver.sweep_start(near)).record == fresh(near)


async def the_listing_is_newest_first_then_run_id_descending(driver: JobDriver) -> None:
    """`sweep_list` answers the first `limit` entries by started_at descending, ties by run id
    descending in code-point order (non-ASCII ids whose UTF-16 order differs), of one name or
    all, and picks exactly those (the public method re-sorts only what the driver answered)."""
    tied = ["a", "ab", "b", "Z", "é", "\uffff", "\U00010000", "a\x01", "\u00ff"]
    started = {r: T0 + 100 for r in tied} | {"old-1": T0 + 1, "old-2": T0 + 2, "new": T0 + 200}
    names = {r: ("one" if i % 2 else "two") for i, r in enumerate(started)}
    for r, at in started.items():
        got = await driver.sweep_start(starting(await held(driver, r), r, at, Sweep(names[r])))
        assert got.record is not None
    order = sorted(started, key=lambda r: (started[r], r), reverse=True)
    for limit in (1, 3, len(order), 1000):
        assert [e.run_id for e in await driver.sweep_list(None, limit)] == order[:limit]
        for name in ("one", "two"):
            mine = [r for r in order if names[r] == name]
            assert [e.run_id for e in await driver.sweep_list(name, limit)] == mine[:limit]
    assert await driver.sweep_list("on", 1000) == []


async def concurrent_advances_move_a_batch_once(drivers: Sequence[JobDriver], per: int) -> None:
    """`per` advances of one batch from each driver (each its own connections), all at once,
    batch after batch: exactly one lands each time, and the rows count it once."""
    first = drivers[0]
    f = await held(first, "race")
    assert (await first.sweep_start(starting(f, "race", T0 + 1))).record is not None
    batches = 4
    for batch in range(1, batches + 1):
        advance = SweepAdvance(f, "race", batch, 1000 + batch, 1, str(batch), T0 + 1 + batch)
        landed = await asyncio.gather(
            *(d.sweep_advance(advance) for d in drivers for _ in range(per))
        )
        assert sorted(landed) == [False] * (len(landed) - 1) + [True], (batch, landed)
    (entry,) = await first.sweep_list(None, 10)
    assert (entry.batches, entry.rows, entry.errors) == (batches, 4000 + 10, batches)
    # Racing finishes of the run: one lands.
    fin = SweepFinish(f, "race", "completed", None, T0 + 20)
    landed = await asyncio.gather(*(d.sweep_finish(fin) for d in drivers for _ in range(per)))
    assert landed.count(True) == 1
