"""`backfill()` on the memory driver: batches as positional steps holding the cursor and a
count (never the page), a crash mid-batch replayed whole and counted once, the throttle spent
inside the step across a restart, the ledger's entry through every end, the gate, tenants that
try to escape, pending and the projection, and hostile declarations and pages."""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobs_core.clock import FakeClock
from jobs_core.context import CancelSignal, JobContext
from jobs_core.errors import DrainingError, JobsError
from jobs_core.facade import Jobs
from jobs_core.factories.backfill import (
    Backfill,
    BackfillRegistry,
    backfill,
    inspect_backfills,
)
from jobs_core.factories.backfill.source import Keyset, _distinct
from jobs_core.factories.sweep import StepCounts, SweepLedger
from jobs_core.job import JobRegistry
from jobs_core.jsonform import loads
from jobs_core.records import ClaimParams, SweepCheckpoint, SweepRecord
from jobs_core.retry import Retry
from jobs_core.states import FINISHED_STATES, JobState
from jobs_core.tenant import acting_for, current_tenant
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import ROOT, until

LEASE_MS = 1_000
ONCE = Retry(attempts=1)
TWICE = Retry(attempts=2, base_ms=1, cap_ms=1)


class Crash(BaseException):
    """A process killed where it stands: nothing below the body catches it."""


def declare(name: str = "sweep", **options: Any) -> Backfill:
    """A backfill on registries of its own (a test's declarations never meet another's); one
    step per batch (`checkpoint_s=0`) unless a test says otherwise: most tests here pin what a
    step does, and the window tests below what a window adds."""
    options.setdefault("tenant", "none")
    options.setdefault("checkpoint_s", 0)
    options.setdefault("handle", lambda rows: None)
    return backfill(name=name, registry=JobRegistry(), backfills=BackfillRegistry(), **options)


def numbers(total: int, calls: list[Any] | None = None) -> Callable[..., Any]:
    """`pages=` over 0..total-1 (the cursor: the next number), noting each call's cursor."""

    def pages(cursor: Any, scope: str, limit: int) -> tuple[list[int], Any]:
        if calls is not None:
            calls.append(cursor)
        start = 0 if cursor is None else cursor
        rows = list(range(start, min(start + limit, total)))
        return rows, (start + limit if start + limit < total else None)

    return pages


async def attempt(driver: MemoryDriver, clock: FakeClock, handle: Backfill) -> Any:
    """Claim the backfill's job (its previous lease lapsed) and run its body as a worker would;
    answers what the body answered (or raises what it raised)."""
    clock.set(clock.now_ms() + LEASE_MS)
    got = await driver.job_claim(ClaimParams(("default",), "w", 1, LEASE_MS, clock.now_ms()))
    (job,) = got.jobs
    value = loads(job.input_json)
    tenant = handle.tenant_for(value)
    ctx = JobContext.for_test(job, driver, tenant=tenant, clock=clock)
    with acting_for(tenant):
        return await handle.fn(value, ctx)


async def entries(driver: MemoryDriver, name: str = "sweep") -> list[SweepRecord]:
    return await driver.sweep_list(name, 100)


async def steps(driver: MemoryDriver, run_id: str) -> dict[str, Any]:
    return {s.name: loads(s.output_json) for s in await driver.step_list(run_id)}


async def worked(driver: MemoryDriver, handles: Sequence[Backfill], *ids: str) -> None:
    """Run a worker until every job of `ids` is finished."""
    worker = Worker(driver, list(handles), poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()

    async def finished() -> bool:
        rows = await driver.job_get_many(list(ids))
        return all(r.state in FINISHED_STATES for r in rows.values())

    try:
        await until(finished, within=15)
    finally:
        await worker.stop()


def code_of(exc: pytest.ExceptionInfo[JobsError]) -> str:
    return exc.value.code


# -- the pass -------------------------------------------------------------------------------------


async def test_each_batch_is_a_positional_step_holding_the_cursor_and_a_count_never_the_page() -> (
    None
):
    driver = MemoryDriver()
    seen: list[int] = []
    bf = declare(handle=seen.extend, pages=numbers(25), batch=10, count=25, retry=ONCE)
    done = await bf.enqueue({}, client=Jobs(driver))
    await worked(driver, [bf], done.id)
    row = (await driver.job_get_many([done.id]))[done.id]
    assert row.state is JobState.COMPLETED, row.last_error
    assert seen == list(range(25))
    recorded = await steps(driver, row.run_id)
    assert list(recorded) == ["batch:0", "batch:1", "batch:2"]
    assert [(s["cursor"], s["rows"], s["done"]) for s in recorded.values()] == [
        (10, 10, False),
        (20, 20, False),
        (20, 25, True),
    ]
    assert all(set(s) == {"cursor", "rows", "at", "done", "batches"} for s in recorded.values())
    assert [s["batches"] for s in recorded.values()] == [1, 2, 3]
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows, entry.expected) == ("completed", 3, 25, 25)
    assert (entry.scope, entry.environment, entry.kind, entry.job_id) == (
        "none",
        "default",
        "backfill",
        done.id,
    )
    assert loads(row.result_json or "null") == {
        "name": "sweep",
        "scope": "none",
        "environment": "default",
        "batches": 3,
        "rows": 25,
        "expected": 25,
        "cursor": 20,
    }
    # Completed: the gate refuses, and a run nobody gated writes nothing at all.
    with pytest.raises(JobsError) as gated:
        await bf.enqueue({}, client=Jobs(driver))
    assert code_of(gated) == "X_BACKFILL_COMPLETED"
    again = await Jobs(driver).enqueue(bf, {})
    await worked(driver, [bf], again.id)
    other = (await driver.job_get_many([again.id]))[again.id]
    assert other.state is JobState.DEAD and "X_BACKFILL_COMPLETED" in (other.last_error or "")
    assert await driver.step_list(other.run_id) == []
    assert [e.run_id for e in await entries(driver)] == [row.run_id]
    assert seen == list(range(25))


async def test_a_crash_mid_batch_replays_that_batch_whole_and_the_ledger_counts_it_once() -> None:
    class CrashAroundCheckpoint(MemoryDriver):
        """Killed as batch:2's checkpoint is written: first before it lands, then right after
        it landed (its answer never read)."""

        def __init__(self) -> None:
            super().__init__()
            self.crashes = ["before", "after"]

        async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
            if checkpoint.step.name == "batch:2" and self.crashes:
                if self.crashes.pop(0) == "after":
                    await super()._sweep_checkpoint(checkpoint)
                raise Crash
            return await super()._sweep_checkpoint(checkpoint)

    driver = CrashAroundCheckpoint()
    clock = FakeClock()
    cursors: list[Any] = []
    handled: list[list[int]] = []

    def handle(rows: list[int]) -> None:
        handled.append(rows)
        if rows[0] == 4 and sum(1 for h in handled if h[0] == 4) == 1:
            raise Crash  # killed inside handle, before the ledger moved

    bf = declare(
        handle=handle,
        pages=numbers(10, cursors),
        batch=2,
        count=10,
        retry=Retry(attempts=4, base_ms=1, cap_ms=1),
    )
    await Jobs(driver, clock=clock).enqueue(bf, {})
    with pytest.raises(Crash):
        await attempt(driver, clock, bf)  # batch:2's handle is killed
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows, entry.cursor_json) == ("running", 2, 4, "4")
    with pytest.raises(Crash):
        await attempt(driver, clock, bf)  # batch:2 handled, its checkpoint never lands
    (entry,) = await entries(driver)
    assert (entry.batches, entry.rows) == (2, 4)
    assert "batch:2" not in {s.name for s in await driver.step_list(entry.run_id)}
    with pytest.raises(Crash):
        await attempt(driver, clock, bf)  # batch:2 handled, recorded and counted in one write
    (entry,) = await entries(driver)
    assert (entry.batches, entry.rows) == (3, 6)
    summary = await attempt(driver, clock, bf)
    assert summary["rows"] == 10 and summary["batches"] == 5
    # Batches 0 and 1 were never read again; batch 2 (cursor 4) was read and handled three
    # times — at least once —, then replayed from its record, and counted once.
    assert cursors == [None, 2, 4, 4, 4, 6, 8]
    assert [h[0] for h in handled] == [0, 2, 4, 4, 4, 6, 8]
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows, entry.expected) == ("completed", 5, 10, 10)


def slow(clock: FakeClock, ms: int, seen: list[int]) -> Callable[[list[int]], Any]:
    """A handle noting its rows that takes `ms` of `clock`'s time per batch."""

    async def handle(rows: list[int]) -> None:
        seen.extend(rows)
        clock.set(clock.now_ms() + ms)

    return handle


async def test_one_step_covers_the_batches_of_checkpoint_s_and_the_ledger_counts_each() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    seen: list[int] = []
    # 400 ms a batch, a window of a second: three batches a step (the third crosses it).
    bf = declare(
        handle=slow(clock, 400, seen), pages=numbers(25), batch=2, count=25, checkpoint_s=1
    )
    assert bf.spec.window_ms == 1_000
    await Jobs(driver, clock=clock).enqueue(bf, {})
    summary = await attempt(driver, clock, bf)
    assert seen == list(range(25))
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows) == ("completed", 13, 25)
    assert summary["batches"] == 13 and summary["rows"] == 25
    recorded = await steps(driver, entry.run_id)
    assert list(recorded) == ["batch:0", "batch:3", "batch:6", "batch:9", "batch:12"]
    assert [(s["batches"], s["rows"], s["cursor"], s["done"]) for s in recorded.values()] == [
        (3, 6, 6, False),
        (6, 12, 12, False),
        (9, 18, 18, False),
        (12, 24, 24, False),
        (13, 25, 24, True),
    ]
    # A window's `at` is its last batch's start: the throttle's reference.
    assert recorded["batch:0"]["at"] == recorded["batch:3"]["at"] - 1_200


async def test_a_crash_mid_window_replays_that_windows_batches_and_counts_each_once() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    handled: list[int] = []

    async def handle(rows: list[int]) -> None:
        handled.append(rows[0])
        clock.set(clock.now_ms() + 400)
        if rows[0] == 10 and handled.count(10) == 1:
            raise Crash  # killed in the second window's last batch

    bf = declare(
        handle=handle,
        pages=numbers(16),
        batch=2,
        count=16,
        checkpoint_s=1,
        retry=Retry(attempts=3, base_ms=1, cap_ms=1),
    )
    await Jobs(driver, clock=clock).enqueue(bf, {})
    with pytest.raises(Crash):
        await attempt(driver, clock, bf)
    (entry,) = await entries(driver)
    # One window recorded (batches 0-2); batches 3 and 4 ran in the lost one, uncounted.
    assert (entry.status, entry.batches, entry.rows, entry.cursor_json) == ("running", 3, 6, "6")
    summary = await attempt(driver, clock, bf)
    assert summary["batches"] == 8 and summary["rows"] == 16
    # The lost window's batches ran again — at least once each —; the recorded ones never did.
    assert handled == [0, 2, 4, 6, 8, 10, 6, 8, 10, 12, 14]
    assert sorted(set(handled)) == list(range(0, 16, 2))
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows) == ("completed", 8, 16)
    assert list(await steps(driver, entry.run_id)) == ["batch:0", "batch:3", "batch:6"]


async def test_a_resumed_window_throttle_waits_from_the_last_stored_batch_start() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    starts: list[int] = []

    async def pages(cursor: Any, scope: str, limit: int) -> tuple[list[int], Any]:
        starts.append(clock.now_ms())
        return numbers(12)(cursor, scope, limit)

    async def handle(rows: list[int]) -> None:
        if rows[0] == 8 and len(starts) == 5:
            raise Crash

    # One batch per 400 ms, a window of a second: batches start at 0, 400, 800 and 1,200 ms
    # (the one that crosses it), so the first window holds four; the fifth batch is killed.
    bf = declare(handle=handle, pages=pages, batch=2, rate=2.5, checkpoint_s=1, retry=TWICE)
    await Jobs(driver, clock=clock).enqueue(bf, {})
    first = asyncio.ensure_future(attempt(driver, clock, bf))
    while not first.done():
        await clock.advance(50)
    with pytest.raises(Crash):
        await first
    (entry,) = await entries(driver)
    assert entry.batches == 4
    stored = (await steps(driver, entry.run_id))["batch:0"]["at"]
    assert stored == starts[3]
    resumed = len(starts)
    second = asyncio.ensure_future(attempt(driver, clock, bf))
    while not second.done():
        await clock.advance(50)
    await second
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(g >= 400 for g in gaps[: resumed - 1]), gaps
    # The retry's first batch waited out 400 ms from the stored start, never less.
    assert starts[resumed] - stored >= 400, (starts, stored)
    assert all(g >= 400 for g in gaps[resumed:]), gaps
    (entry,) = await entries(driver)
    assert (entry.batches, entry.rows) == (6, 12)


async def test_a_drain_mid_window_records_the_batches_run_so_far() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    seen: list[int] = []
    signal = CancelSignal()

    async def handle(rows: list[int]) -> None:
        seen.extend(rows)
        if rows[0] == 4:
            signal.fire(DrainingError("the worker drains"))

    # A window of an hour: only the source's end, or a stop, closes it.
    bf = declare(handle=handle, pages=numbers(10), batch=2, checkpoint_s=3_600)
    await Jobs(driver, clock=clock).enqueue(bf, {})
    clock.set(clock.now_ms() + LEASE_MS)
    got = await driver.job_claim(ClaimParams(("default",), "w", 1, LEASE_MS, clock.now_ms()))
    (job,) = got.jobs
    with pytest.raises(JobsError) as stopped:
        await bf.fn({}, JobContext.for_test(job, driver, clock=clock, signal=signal))
    assert code_of(stopped) == "X_ABORTED"  # stopped before its next window
    # The window closed after the batch the drain came in, and its step was recorded: the
    # next attempt starts after it, and nothing ran twice.
    assert seen == [0, 1, 2, 3, 4, 5]
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows, entry.cursor_json) == ("running", 3, 6, "6")
    assert list(await steps(driver, entry.run_id)) == ["batch:0"]


async def test_a_workers_drain_mid_window_records_the_batches_run_before_it_cancels() -> None:
    """A real worker's drain past its margin fires the run's signal AND cancels its task, which
    lands inside `handle` or a wait, not between batches: the window's batches done by then
    are recorded all the same, and only the batch cut short runs again."""
    driver = MemoryDriver()
    seen: list[int] = []
    slow = True

    async def handle(rows: list[int]) -> None:
        seen.extend(rows)
        if slow:
            await asyncio.sleep(0.05)

    # A window of an hour: only the source's end, or a stop, closes it.
    bf = declare(handle=handle, pages=numbers(40), batch=2, checkpoint_s=3_600)
    done = await Jobs(driver).enqueue(bf, {})
    worker = Worker(driver, [bf], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()
    await until(lambda: len(seen) >= 10, within=10)
    await worker.stop(0.2)
    handled = len(seen)
    (entry,) = await entries(driver)
    # Every batch done is on the ledger: all it handled but the one the cancel cut short, if
    # it landed in one (it mostly does: `handle` is most of a batch's time).
    recorded = entry.batches
    assert handled // 2 - 1 <= recorded <= handled // 2
    assert (entry.status, entry.rows) == ("running", 2 * recorded)
    assert (await driver.job_get_many([done.id]))[done.id].state is JobState.READY
    slow = False
    await worked(driver, [bf], done.id)
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows) == ("completed", 20, 40)
    assert sorted(seen) == sorted([*range(40), *range(2 * recorded, handled)])


async def test_a_step_recorded_before_windows_resumes_as_one_batch() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    seen: list[int] = []
    bf = declare(handle=slow(clock, 10, seen), pages=numbers(6), batch=2, checkpoint_s=1)
    await Jobs(driver, clock=clock).enqueue(bf, {})

    # A first attempt recorded `batch:0` as a one-batch step of the old form (no `batches`).
    clock.set(clock.now_ms() + LEASE_MS)
    got = await driver.job_claim(ClaimParams(("default",), "w", 1, LEASE_MS, clock.now_ms()))
    (job,) = got.jobs
    before = JobContext.for_test(job, driver, clock=clock)
    ledger = SweepLedger(before.step, bf.spec.identity("none", "default"))
    await ledger.start(expected=None, blocked=JobsError)
    write = ledger.checkpoint_of(lambda step: StepCounts(1, 1, 2, 0, "2"))
    await before.step.run_written(
        "batch:0", lambda: {"cursor": 2, "rows": 2, "at": 0, "done": False}, write
    )
    # The next attempt (a new context, the same claim) runs with windows.
    summary = await bf.fn({}, JobContext.for_test(job, driver, clock=clock))
    assert seen == [2, 3, 4, 5]
    assert summary["batches"] == 3 and summary["rows"] == 6
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows) == ("completed", 3, 6)
    assert list(await steps(driver, entry.run_id)) == ["batch:0", "batch:1"]


@pytest.mark.parametrize(
    ("checkpoint_s", "step_timeout", "window_ms"),
    [(0, None, 0), (0.25, None, 250), (1, 0.5, 250), (1, 60, 1_000), (3_600, None, 3_600_000)],
)
def test_the_window_is_checkpoint_s_within_half_a_step_timeout(
    checkpoint_s: float, step_timeout: float | None, window_ms: int
) -> None:
    bf = declare(pages=numbers(1), checkpoint_s=checkpoint_s, step_timeout=step_timeout)
    assert bf.spec.window_ms == window_ms
    # A tuning knob: the same sweep whatever its window.
    assert bf.spec.checksum == declare("sweep", pages=numbers(1)).spec.checksum


@pytest.mark.parametrize(
    "bad",
    [
        -1,
        -0.001,
        float("nan"),
        float("inf"),
        -float("inf"),
        True,
        3_600.5,
        1e300,
        # Ints past a float's range: no OverflowError escapes.
        pytest.param(10**400, id="huge"),
        pytest.param(-(10**400), id="-huge"),
        "1",
        None,
    ],
)
def test_a_hostile_checkpoint_s_is_refused_at_declaration(bad: object) -> None:
    with pytest.raises(JobsError) as refused:
        declare(pages=numbers(1), checkpoint_s=bad)
    assert code_of(refused) == "X_BACKFILL_DECLARATION_INVALID"
    assert refused.value.detail == "checkpoint_s"


async def test_the_rate_is_spent_inside_each_step_from_the_stored_start_so_a_restart_waits() -> (
    None
):
    driver = MemoryDriver()
    clock = FakeClock()
    starts: list[int] = []

    async def pages(cursor: Any, scope: str, limit: int) -> tuple[list[int], Any]:
        starts.append(clock.now_ms())
        return numbers(6)(cursor, scope, limit)

    async def handle(rows: list[int]) -> None:
        return None

    bf = declare(handle=handle, pages=pages, batch=2, rate=0.25)  # one batch per 4 s
    await Jobs(driver, clock=clock).enqueue(bf, {})
    first = asyncio.ensure_future(attempt(driver, clock, bf))
    while len(starts) < 2:
        await clock.advance(100)
    await clock.advance(1_000)  # batch:1 is recorded; batch:2 waits for its turn...
    first.cancel()  # ...when the process dies
    with pytest.raises(asyncio.CancelledError):
        await first
    # The restart comes 1 s later (the lease): 2 s after batch:1 started. A throttle kept in
    # memory would start batch:2 at once; this one waits from batch:1's stored start.
    second = asyncio.ensure_future(attempt(driver, clock, bf))
    while not second.done():
        await clock.advance(100)
    assert second.result()["batches"] == 3
    assert len(starts) == 3
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert all(4_000 <= g < 4_200 for g in gaps), gaps


async def test_a_final_failure_finishes_the_entry_failed_with_its_code_and_not_before() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    bf = declare(handle=lambda rows: 1 / 0, pages=numbers(5), batch=2, retry=TWICE)
    await Jobs(driver, clock=clock).enqueue(bf, {})
    with pytest.raises(ZeroDivisionError):
        await attempt(driver, clock, bf)
    (entry,) = await entries(driver)
    assert (entry.status, entry.error) == ("running", None)  # retried: it resumes
    with pytest.raises(ZeroDivisionError):
        await attempt(driver, clock, bf)
    (entry,) = await entries(driver)
    assert (entry.status, entry.error) == ("failed", "X_BACKFILL_BATCH_FAILED")


async def test_count_is_read_once_and_fewer_rows_stall_the_sweep_for_good() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    asked: list[str] = []
    crashed: list[bool] = []

    async def expected(scope: str) -> int:
        asked.append(scope)
        return 10 + len(asked)  # a count that moves must not move the expectation

    def handle(rows: list[int]) -> None:
        if rows == [2, 3] and not crashed:
            crashed.append(True)
            raise Crash

    bf = declare(handle=handle, pages=numbers(6), batch=2, count=expected)
    await Jobs(driver, clock=clock).enqueue(bf, {})
    with pytest.raises(Crash):
        await attempt(driver, clock, bf)
    with pytest.raises(JobsError) as stalled:
        await attempt(driver, clock, bf)
    assert code_of(stalled) == "X_BACKFILL_STALLED" and stalled.value.terminal
    assert asked == ["none"]
    (entry,) = await entries(driver)
    assert (entry.status, entry.error, entry.rows, entry.expected) == (
        "failed",
        "X_BACKFILL_STALLED",
        6,
        11,
    )


async def test_the_environment_is_checked_when_the_sweep_runs_and_at_the_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    handled: list[Any] = []
    bf = declare(handle=handled.append, pages=numbers(3), environments=["production"])
    await Jobs(driver, clock=clock).enqueue(bf, {})
    monkeypatch.setenv("UJOBS_ENVIRONMENT", "staging")
    with pytest.raises(JobsError) as gated:
        await bf.gate({}, driver=driver)
    assert code_of(gated) == "X_BACKFILL_ENVIRONMENT"
    with pytest.raises(JobsError) as ran:
        await attempt(driver, clock, bf)
    assert code_of(ran) == "X_BACKFILL_ENVIRONMENT" and ran.value.terminal
    assert await entries(driver) == [] and handled == []
    monkeypatch.setenv("UJOBS_ENVIRONMENT", "production")
    assert (await attempt(driver, clock, bf))["environment"] == "production"


# -- tenants ---------------------------------------------------------------------------------------

ROWS = {"org-a": [f"a{i}" for i in range(5)], "org-b": [f"b{i}" for i in range(5)]}


@pytest.mark.parametrize("checkpoint_s", [0, 1], ids=["per-batch", "windows"])
async def test_a_tenants_sweep_sees_only_its_tenant_whatever_the_input_or_the_enqueuer_say(
    checkpoint_s: float,
) -> None:
    """Whether each batch is its own step or a window holds them all (three quick batches run
    in one), every page and every handle acts for the run's one tenant."""
    driver = MemoryDriver()
    asked: list[tuple[str, str | None]] = []
    handled: list[tuple[str, str | None]] = []

    def pages(cursor: Any, scope: str, limit: int) -> tuple[list[str], Any]:
        asked.append((scope, current_tenant()))
        start = 0 if cursor is None else cursor
        rows = ROWS.get(scope, [])[start : start + limit]
        return rows, (start + limit if start + limit < len(ROWS.get(scope, [])) else None)

    def handle(rows: list[str]) -> None:
        handled.extend((r, current_tenant()) for r in rows)

    bf = declare(
        tenant=lambda i: i["org"],
        handle=handle,
        pages=pages,
        batch=2,
        retry=ONCE,
        checkpoint_s=checkpoint_s,
    )
    jobs = Jobs(driver)
    # The input also names another org, as a scope and as a tenant id: only `org` counts.
    done = await bf.enqueue({"org": "org-a", "scope": "org-b", "tenant_id": "org-b"}, client=jobs)
    # Acting for org-b, asking for org-a: the gate refuses, and a run enqueued ungated by
    # org-b for org-a is refused by its pass before anything is read.
    with acting_for("org-b"), pytest.raises(JobsError) as gated:
        await bf.enqueue({"org": "org-a"}, client=jobs)
    assert code_of(gated) == "X_BACKFILL_SCOPE_INVALID"
    with acting_for("org-b"):
        forged = await jobs.enqueue(bf, {"org": "org-a"}, key="forged")
    await worked(driver, [bf], done.id, forged.id)
    rows = await driver.job_get_many([done.id, forged.id])
    assert rows[done.id].state is JobState.COMPLETED
    assert "X_BACKFILL_SCOPE_INVALID" in (rows[forged.id].last_error or "")
    assert set(asked) == {("org-a", "org-a")}
    assert handled == [(r, "org-a") for r in ROWS["org-a"]]
    (entry,) = await entries(driver)
    assert (entry.scope, entry.status, entry.rows, entry.batches) == ("org-a", "completed", 5, 3)
    steps_made = len(await driver.step_list(entry.run_id))
    # Per batch, three steps; in windows of a second, fewer (one, unless the machine stalls).
    assert steps_made == 3 if checkpoint_s == 0 else steps_made < 3, steps_made


def test_a_cross_tenant_sweep_cannot_require_a_per_tenant_one() -> None:
    per_tenant = declare("per", tenant=lambda i: i["org"], pages=numbers(1))
    with pytest.raises(JobsError) as refused:
        declare("all", pages=numbers(1), requires=[per_tenant])
    assert code_of(refused) == "X_BACKFILL_DECLARATION_INVALID"


# -- the gate, pending and the projection ---------------------------------------------------------


async def test_requires_holds_the_gate_and_a_live_duplicate_is_deduped() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    first = declare("first", pages=numbers(3))
    then = declare("then", pages=numbers(3), requires=[first])
    with pytest.raises(JobsError) as held:
        await then.enqueue({}, client=jobs)
    assert code_of(held) == "X_BACKFILL_REQUIRES_PENDING" and "first" in str(held.value)
    a = await first.enqueue({}, client=jobs)
    b = await first.enqueue({}, client=jobs)
    assert (b.id, b.deduped) == (a.id, True)
    row = (await driver.job_get_many([a.id]))[a.id]
    assert row.idempotency_key == f"first:none:default:{first.spec.checksum}"
    await worked(driver, [first], a.id)
    answer = await then.gate({}, driver=driver)
    assert (answer.name, answer.scope, answer.key) == (
        "then",
        "none",
        f"then:none:default:{then.spec.checksum}",
    )


def test_the_checksum_follows_what_is_swept_never_the_tuning_knobs() -> None:
    base = declare("c", pages=numbers(3)).spec.checksum
    assert declare("c", pages=numbers(3), batch=7, rate=2, count=3).spec.checksum == base
    assert declare("c", pages=numbers(3), environments=["production"]).spec.checksum == base
    assert declare("c", pages=numbers(3), version=2).spec.checksum != base
    assert declare("c2", pages=numbers(3)).spec.checksum != base
    assert declare("c", tenant=lambda i: "x", pages=numbers(3)).spec.checksum != base


async def test_pending_is_declared_minus_completed_per_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    once = declare("once", pages=numbers(2), environments=["production", "staging"])
    per = declare("per", tenant=lambda i: i["org"], pages=numbers(2))
    stuck = declare("stuck", pages=numbers(2))
    monkeypatch.setenv("UJOBS_ENVIRONMENT", "staging")
    ran = await once.enqueue({}, client=jobs)
    org_a = await per.enqueue({"org": "org-a"}, client=jobs)
    await worked(driver, [once, per], ran.id, org_a.id)
    # A sweep whose job is cancelled while it runs: its entry stays running, its job is not.
    slow = await stuck.enqueue({}, client=jobs)
    got = await driver.job_claim(ClaimParams(("default",), "w", 1, LEASE_MS, jobs.clock.now_ms()))
    ctx = JobContext.for_test(got.jobs[0], driver, clock=jobs.clock)
    await driver.sweep_start(  # the pass's first write, as the run made it
        _start(ctx, stuck)
    )
    await driver.job_cancel(slow.id, jobs.clock.now_ms())
    declared = [once, per, stuck]
    view = await inspect_backfills(driver, declared, environments=["production", "staging"])
    pend = {env: [(p.name, p.scope, p.status) for p in ps] for env, ps in view.pending.items()}
    assert pend == {
        "production": [
            ("once", "none", "never"),
            ("per", None, "never"),
            ("stuck", "none", "never"),
        ],
        "staging": [("stuck", "none", "running")],
    }
    with_tenants = await inspect_backfills(
        driver, declared, environments=["staging"], tenants=["org-a", "org-b"]
    )
    assert [(p.name, p.scope) for p in with_tenants.pending["staging"]] == [
        ("per", "org-b"),
        ("stuck", "none"),
    ]
    sweep = view.sweep("stuck")
    assert sweep is not None and sweep.latest is not None
    assert (sweep.latest.job_state, sweep.latest.orphaned) == ("cancelled", True)
    done = view.sweep("once")
    assert done is not None and done.latest is not None
    assert (done.latest.record.status, done.latest.current, done.latest.progress) == (
        "completed",
        True,
        None,
    )
    # The registry is what exists: a name only the ledger knows is shown, undeclared.
    partial = await inspect_backfills(driver, [once])
    assert {s.name: s.declared is not None for s in partial.sweeps} == {
        "once": True,
        "per": False,
        "stuck": False,
    }


def _start(ctx: JobContext, handle: Backfill) -> Any:
    from jobs_core.records import SweepStart

    return SweepStart(
        fence=ctx.step.fence,
        run_id=ctx.run_id,
        name=handle.name,
        scope="none",
        environment="staging",
        kind="backfill",
        checksum=handle.spec.checksum,
        expected=None,
        now_ms=ctx.step.clock.now_ms(),
    )


# -- hostile values -------------------------------------------------------------------------------

BAD_NAMES = ["", "a b", "x:y", "[bold]x[/bold]", "<script>", "a\x00b", "a\udcffb", "é", "x" * 129]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_name_with_markup_nul_a_surrogate_or_a_colon_is_refused_at_declaration(
    name: str,
) -> None:
    with pytest.raises(JobsError) as refused:
        declare(name, pages=numbers(1))
    assert code_of(refused) == "X_BACKFILL_DECLARATION_INVALID"
    assert refused.value.detail == "name"


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({}, "source"),
        ({"pages": numbers(1), "source": object()}, "source"),
        ({"pages": "not a function"}, "pages"),
        ({"pages": numbers(1), "batch": 0}, "batch"),
        ({"pages": numbers(1), "batch": True}, "batch"),
        ({"pages": numbers(1), "batch": 10_001}, "batch"),
        ({"pages": numbers(1), "rate": float("nan")}, "rate"),
        ({"pages": numbers(1), "rate": float("inf")}, "rate"),
        ({"pages": numbers(1), "rate": 0}, "rate"),
        ({"pages": numbers(1), "rate": 10**400}, "rate"),
        ({"pages": numbers(1), "count": -1}, "count"),
        ({"pages": numbers(1), "count": 2**53}, "count"),
        ({"pages": numbers(1), "environments": "production"}, "environments"),
        ({"pages": numbers(1), "environments": []}, "environments"),
        ({"pages": numbers(1), "environments": ["pro\x00d"]}, "environments"),
        ({"pages": numbers(1), "requires": ["other"]}, "requires"),
        ({"pages": numbers(1), "version": "v\udcff"}, "version"),
        ({"pages": numbers(1), "key": "id"}, "key"),
        ({"pages": numbers(1), "handle": None}, "handle"),
        ({"pages": numbers(1), "tenant": "everyone"}, "tenant"),
        ({"pages": numbers(1), "queue": "q\x00"}, "queue"),
        ({"pages": numbers(1), "timeout": float("nan")}, "timeout"),
        ({"pages": numbers(1), "step_timeout": 10**400}, "step_timeout"),
    ],
)
def test_every_bad_option_is_refused_at_declaration_naming_it(
    options: dict[str, Any], option: str
) -> None:
    with pytest.raises(JobsError) as refused:
        declare(**options)
    assert code_of(refused) == "X_BACKFILL_DECLARATION_INVALID"
    assert refused.value.detail == option


def test_a_name_taken_by_another_job_or_backfill_is_a_duplicate() -> None:
    jobs, sweeps = JobRegistry(), BackfillRegistry()
    backfill(
        name="dup", tenant="none", handle=print, pages=numbers(1), registry=jobs, backfills=sweeps
    )
    with pytest.raises(JobsError) as refused:
        backfill(
            name="dup",
            tenant="none",
            handle=print,
            pages=numbers(1),
            registry=JobRegistry(),
            backfills=sweeps,
        )
    assert code_of(refused) == "X_JOB_DUPLICATE"
    assert [b.name for b in sweeps.all()] == ["dup"] and jobs.names() == ["dup"]


class Opaque:
    """A value with no JSON form."""


@pytest.mark.parametrize(
    "answer",
    [
        ([1], Opaque()),  # a next cursor with no JSON form
        ([1], "x" * 9_000),  # a next cursor past the ledger's bound
        ([1], {"k": "\udcff"}),  # one no store can hold
        ({"rows": [1]}, 1),  # a page that is not a list
        ("rows", 1),  # nor is a string
        ([1], None, "extra"),  # not (rows, cursor)
        ([1], "same"),  # a cursor that does not advance (it started at "same")
    ],
    ids=["opaque", "too-large", "surrogate", "dict-page", "str-page", "triple", "no-advance"],
)
async def test_a_page_or_cursor_the_sweep_cannot_use_fails_it_before_handle_sees_it(
    answer: Any,
) -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    handled: list[Any] = []

    def pages(cursor: Any, scope: str, limit: int) -> Any:
        return ([0], "same") if cursor is None else answer

    bf = declare(handle=handled.append, pages=pages)
    await Jobs(driver, clock=clock).enqueue(bf, {})
    with pytest.raises(JobsError) as refused:
        await attempt(driver, clock, bf)
    assert code_of(refused) == "X_BACKFILL_PAGE_INVALID" and refused.value.terminal
    assert handled == [[0]]  # batch:0 only: the bad page never reached handle
    (entry,) = await entries(driver)
    assert (entry.status, entry.error, entry.batches) == ("failed", "X_BACKFILL_PAGE_INVALID", 1)


@pytest.mark.parametrize(
    "shape",
    ["key last, as a column", "key labelled, by its label", "whole table, key by name"],
)
async def test_a_keyset_reads_each_pages_keys_wherever_the_key_sits_in_the_select(
    tmp_path: Path, shape: str
) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'k.db'}")
    items = sa.Table(
        "items",
        sa.MetaData(),
        sa.Column("label", sa.Text, nullable=False),
        sa.Column("id", sa.Integer, primary_key=True),
    )
    items.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(items.insert(), [{"id": i * 10, "label": f"x{i}"} for i in range(7)])
    select: Any
    if shape == "key last, as a column":
        select, key = sa.select(items.c.label, items.c.id), items.c.id
    elif shape == "key labelled, by its label":
        select, key = sa.select(items.c.label, items.c.id.label("k")), "k"
    else:
        select, key = sa.select(items), "id"
    source = Keyset(select, engine=engine, key=key, tenant_column=None)
    cursors, labels, cursor = [], [], None
    while True:
        page = await source.page(cursor, None, 3)
        labels += [row[0] for row in page.rows]
        cursor = page.cursor
        cursors.append(cursor)
        if page.done:
            break
    engine.dispose()
    assert labels == [f"x{i}" for i in range(7)]
    assert cursors == [20, 50, 60]


@pytest.mark.parametrize(
    ("keys", "why"),
    [
        ([3, None, 1, 2], "NULL"),  # SQLite sorts a NULL first: the page's first key
        (["a", "b", "b", "c"], "share a key"),
    ],
)
async def test_a_keyset_page_with_a_null_or_repeated_key_is_refused(
    tmp_path: Path, keys: list[Any], why: str
) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'keys.db'}")
    items = sa.Table(
        "items",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("k", sa.Text if isinstance(keys[0], str) else sa.Integer, nullable=True),
    )
    items.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(items.insert(), [{"id": i, "k": k} for i, k in enumerate(keys, 1)])
    source = Keyset(sa.select(items), engine=engine, key="k", tenant_column=None)
    with pytest.raises(JobsError) as refused:
        await source.page(None, None, 10)
    engine.dispose()
    assert refused.value.code == "X_BACKFILL_PAGE_INVALID" and why in refused.value.message


def test_keys_no_set_can_hold_are_left_to_the_row_by_row_checks() -> None:
    assert _distinct([1, 2, 3]) is True
    assert _distinct([[1], [2]]) is False  # unhashable: the loop decides, and passes them
    assert _distinct([1, None]) is False and _distinct([1, 1]) is False


def _labels(tmp_path: Path, labels: list[str]) -> tuple[sa.Engine, sa.Table]:
    """A SQLite table of `labels` keyed 1, 2, … in order (the key is `label`'s order too)."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'labels.db'}")
    items = sa.Table(
        "items",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("label", sa.Text, nullable=False),
    )
    items.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(items.insert(), [{"id": i, "label": s} for i, s in enumerate(labels, 1)])
    return engine, items


async def test_a_keyset_reads_the_next_page_ahead_only_once_handle_returned(
    tmp_path: Path,
) -> None:
    """The next page is read while a batch's checkpoint is written, after its `handle`: a row
    `handle` writes ahead of the cursor is in the next page, as if read at its start."""
    engine, items = _labels(tmp_path, ["a", "b", "c", "d"])
    handled: list[list[str]] = []
    reads_after: list[int] = []

    def engine_for_a_read() -> sa.Engine:
        reads_after.append(len(handled))  # called on the loop as each page's read starts
        return engine

    def handle(rows: list[Any]) -> None:
        if len(handled) == 1:
            with engine.begin() as conn:
                conn.execute(items.insert(), [{"id": 3_000, "label": "written by batch 1"}])
        handled.append([r.label for r in rows])

    driver = MemoryDriver()
    clock = FakeClock()
    bf = declare(
        source=sa.select(items.c.id, items.c.label),
        engine=engine_for_a_read,
        key="id",
        handle=handle,
        batch=2,
    )
    await Jobs(driver, clock=clock).enqueue(bf, {})
    summary = await attempt(driver, clock, bf)
    engine.dispose()
    assert reads_after == [0, 1, 2]  # each page read once the batch before it was handled
    assert handled == [["a", "b"], ["c", "d"], ["written by batch 1"]]
    assert (summary["batches"], summary["rows"]) == (3, 5)


async def test_a_page_read_ahead_fails_its_own_batch_after_the_one_before_is_recorded(
    tmp_path: Path,
) -> None:
    engine, items = _labels(tmp_path, ["a", "b", "c", "c", "d"])
    handled: list[list[str]] = []
    driver = MemoryDriver()
    clock = FakeClock()
    bf = declare(
        source=sa.select(items.c.label, items.c.id),
        engine=engine,
        key="label",  # not unique: the second page repeats "c"
        handle=lambda rows: handled.append([r.label for r in rows]),
        batch=2,
        retry=ONCE,
    )
    done = await Jobs(driver, clock=clock).enqueue(bf, {})
    with pytest.raises(JobsError) as refused:
        await attempt(driver, clock, bf)
    engine.dispose()
    assert code_of(refused) == "X_BACKFILL_PAGE_INVALID"
    assert handled == [["a", "b"]]
    row = (await driver.job_get_many([done.id]))[done.id]
    assert list(await steps(driver, row.run_id)) == ["batch:0"]
    (entry,) = await entries(driver)
    assert (entry.status, entry.error, entry.batches, entry.rows) == (
        "failed",
        "X_BACKFILL_PAGE_INVALID",
        1,
        2,
    )


async def test_a_run_killed_while_a_page_is_read_ahead_drops_it_and_resumes_at_the_cursor(
    tmp_path: Path,
) -> None:
    class CrashOnCheckpoint(MemoryDriver):
        """Killed as batch:1's checkpoint is written, while batch:2's page is read ahead."""

        armed = True

        async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
            if self.armed and checkpoint.advance.batch == 2:
                self.armed = False
                await asyncio.sleep(0)  # the read ahead under way
                raise Crash
            return await super()._sweep_checkpoint(checkpoint)

    engine, items = _labels(tmp_path, list("abcdefg"))
    handled: list[list[str]] = []
    reads: list[int] = []

    def engine_for_a_read() -> sa.Engine:
        reads.append(1)  # called on the loop as each page's read starts
        return engine

    driver = CrashOnCheckpoint()
    clock = FakeClock()
    bf = declare(
        source=sa.select(items.c.id, items.c.label),
        engine=engine_for_a_read,
        key="id",
        handle=lambda rows: handled.append([r.label for r in rows]),
        batch=2,
    )
    await Jobs(driver, clock=clock).enqueue(bf, {})
    with pytest.raises(Crash):
        await attempt(driver, clock, bf)
    # batch:0's page, then batch:1's and batch:2's read ahead: the last one dropped unused.
    assert len(reads) == 3 and handled == [["a", "b"], ["c", "d"]]
    summary = await attempt(driver, clock, bf)
    engine.dispose()
    assert len(reads) == 6  # batch:1 read afresh from its stored cursor, then 2 and 3 ahead
    # batch:1 again (at least once), from its stored cursor; nothing skipped, counted once.
    assert handled == [["a", "b"], ["c", "d"], ["c", "d"], ["e", "f"], ["g"]]
    (entry,) = await entries(driver)
    assert (entry.status, entry.batches, entry.rows) == ("completed", 4, 7)
    assert summary["rows"] == 7


async def test_sync_and_async_functions_alike_and_a_sync_one_off_the_loop() -> None:
    driver = MemoryDriver()
    clock = FakeClock()
    loop_thread: list[bool] = []

    async def pages(cursor: Any, scope: str, limit: int) -> tuple[list[int], Any]:
        return numbers(4)(cursor, scope, limit)

    def handle(rows: list[int]) -> None:
        try:
            asyncio.get_running_loop()
            loop_thread.append(True)
        except RuntimeError:
            loop_thread.append(False)

    bf = declare(handle=handle, pages=pages, batch=3)
    await Jobs(driver, clock=clock).enqueue(bf, {})
    assert (await attempt(driver, clock, bf))["rows"] == 4
    assert loop_thread == [False, False]


# -- the guide ------------------------------------------------------------------------------------


async def test_the_guides_example_sweeps_one_tenants_rows_on_a_real_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/factories.md's backfill() example, run as written on SQLite and the memory driver."""
    section = (ROOT / "docs" / "factories.md").read_text(encoding="utf-8").split("## backfill()")[1]
    found = re.search(r"```python\n(.*?)```", section, re.S)
    assert found is not None
    code, enqueue = found.group(1).rsplit("\nawait ", 1)
    assert enqueue.startswith('fill_order_totals.enqueue({"org": "acme"})')
    # The app's own engine and table, and registries of the test's own, stand in for its imports.
    code = re.sub(
        r"^from (myapp\.db|jobs_core\.factories\.backfill) import .*$", "", code, flags=re.M
    )
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
    orders = sa.Table(
        "orders",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("org_id", sa.Text, nullable=False),
        sa.Column("qty", sa.Integer, nullable=False),
        sa.Column("price", sa.Integer, nullable=False),
        sa.Column("total", sa.Integer),
    )
    orders.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            orders.insert(),
            [
                {"id": i, "org_id": "acme" if i % 2 else "globex", "qty": i, "price": 3}
                for i in range(1, 41)
            ],
        )
    scope = {
        "engine": engine,
        "orders": orders,
        "backfill": functools.partial(
            backfill, registry=JobRegistry(), backfills=BackfillRegistry()
        ),
    }
    exec(compile(code, "docs/factories.md", "exec"), scope)
    handle: Backfill = scope["fill_order_totals"]
    monkeypatch.setenv("UJOBS_ENVIRONMENT", "staging")
    driver = MemoryDriver()
    done = await handle.enqueue({"org": "acme"}, client=Jobs(driver))
    await worked(driver, [handle], done.id)
    with engine.connect() as conn:
        totals = dict(conn.execute(sa.select(orders.c.id, orders.c.total)).all())
    engine.dispose()
    assert totals == {i: (i * 3 if i % 2 else None) for i in range(1, 41)}
    (entry,) = await entries(driver, "fill-order-totals")
    assert (entry.status, entry.scope, entry.environment, entry.rows) == (
        "completed",
        "acme",
        "staging",
        20,
    )
