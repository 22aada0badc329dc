"""One pass of a backfill — its job's body: the batches, their cursor checkpoints, and the run's
ledger entry.

Before anything is written the pass refuses a wrong environment (`X_BACKFILL_ENVIRONMENT`), a
run enqueued by one tenant that would act for another (`X_BACKFILL_SCOPE_INVALID`), and a sweep
a completed run of the same declaration, scope and environment blocks (`X_BACKFILL_COMPLETED`).
Then it opens (or resumes) its entry and runs its batches in WINDOWS, one step each, named by
the position of the window's first batch (`batch:0`, then `batch:<batches done>`). A window's
step runs batch after batch — each waits for its turn (`rate=`), reads its page from the cursor
the batch before it ended at and hands the rows to `handle` — until its batches have taken
`checkpoint_s` (the window opens with the step: a throttle's waits count), the source ends, or
the run is told to stop; `checkpoint_s=0` closes every window after one batch. Its record — the
next cursor, the running counts of rows and batches, and the start time of its last batch (the
throttle's reference), never a page — is stored by ONE fenced write together with the ledger's
advance by the window's batches (`sweep_checkpoint`, the advance spanning them): a window is
never recorded without being counted, and a replayed window, its step already recorded, writes
nothing. One durable commit per window, not per batch: one such commit alone costs a keyset
sweep ~10-15 % of a no-op batch's CPU (bench/factories_floor.py), so a window of a second keeps
it out of the sweep's cost. A crash anywhere in a window runs that window's batches again,
whole, on the next attempt — up to `checkpoint_s` of batches run again —: `handle` runs AT
LEAST once per batch, and the ledger counts each batch once. A resumed throttle waits from the
last stored batch's start, so a restart never bursts. A `source=` select without `rate=` reads
each next page once the batch before it finished (its `handle` returned) — at a window's end,
while its checkpoint is written (`_ReadAhead`).

After the last batch the count is checked (`X_BACKFILL_STALLED`) and the entry completed. A
failure that ends the run for good (terminal, or on its final attempt) finishes the entry
`failed` with its code; a run that stopped (cancelled, its claim lost, a drain) leaves it
`running` for the job's next attempt, and the projection shows the job's state beside it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs_core.context import JobContext
from jobs_core.driver import MAX_SWEEP_ROWS
from jobs_core.errors import (
    AbortedError,
    BackfillBatchFailedError,
    BackfillCompletedError,
    BackfillDeclarationInvalidError,
    BackfillEnvironmentError,
    BackfillScopeInvalidError,
    BackfillStalledError,
    DrainingError,
    JobCancelledError,
    JobsError,
    LeaseLostError,
    RateLimitedError,
    SlotLostError,
)
from jobs_core.factories.backfill.rate import wait_turn
from jobs_core.factories.backfill.source import Keyset, Page
from jobs_core.factories.sweep import (
    StepCounts,
    SweepLedger,
    call,
    current_environment,
    scope_of,
)
from jobs_core.jsonform import JsonValue, dumps
from jobs_core.records import StepPut
from jobs_core.tenant import acting_for

if TYPE_CHECKING:
    from jobs_core.factories.backfill.declare import BackfillSpec

log = logging.getLogger("jobs.backfill")

#: A window's step is `batch:<n>`, n its first batch's number from 0.
BATCH_STEP = "batch:"
#: Errors that stop a run without ending it: its next attempt (or another worker) goes on.
_STOPPED: tuple[type[JobsError], ...] = (
    AbortedError,
    DrainingError,
    JobCancelledError,
    LeaseLostError,
    RateLimitedError,
    SlotLostError,
)


def step_name(batch: int) -> str:
    """The step of the window starting at batch `batch` (0-based): its position, never its
    content."""
    return f"{BATCH_STEP}{batch}"


@dataclass(frozen=True, slots=True)
class Mark:
    """What a window's step stores: where the next batch starts, the rows and batches so far,
    when its last batch started (the throttle's reference), and whether that was the last."""

    cursor: JsonValue
    rows: int
    at_ms: int | None
    done: bool
    batches: int

    def to_json(self) -> JsonValue:
        return {
            "cursor": self.cursor,
            "rows": self.rows,
            "at": self.at_ms,
            "done": self.done,
            "batches": self.batches,
        }

    @staticmethod
    def of(stored: JsonValue, name: str, before: int) -> Mark:
        """The mark step `name` stored, `before` batches done before it; a record of another
        shape is refused. A record without `batches` was a one-batch step's (made before
        windows were)."""
        if isinstance(stored, dict):
            rows, at, done = stored.get("rows"), stored.get("at"), stored.get("done")
            batches = stored.get("batches", before + 1)
            if (
                isinstance(rows, int)
                and isinstance(at, int)
                and isinstance(done, bool)
                and type(batches) is int
                and batches > before
            ):
                return Mark(stored.get("cursor"), rows, at, done, batches)
        raise BackfillDeclarationInvalidError(
            f"step {name!r} is recorded, but not as a backfill's batches", detail=name
        )


START = Mark(cursor=None, rows=0, at_ms=None, done=False, batches=0)


async def run_pass(spec: BackfillSpec, ctx: JobContext) -> JsonValue:
    """Sweep `spec` for the tenant `ctx` acts for; answers the sweep's summary."""
    environment = current_environment()
    if not spec.runs_in(environment):
        allowed = ", ".join(sorted(spec.environments or ()))
        raise BackfillEnvironmentError(
            f"{spec.name} runs in {allowed}, not in {environment!r}", detail=environment
        )
    org = None if spec.cross_tenant else ctx.tenant
    if org is not None and ctx.enqueued_tenant is not None and ctx.enqueued_tenant != org:
        raise BackfillScopeInvalidError(
            f"enqueued by tenant {ctx.enqueued_tenant!r}, the run would act for {org!r}",
            detail=spec.name,
        )
    scope = scope_of(org)
    step = ctx.step
    step.driver.require("steps", "sweeps", what="backfill()")
    resumed = step_name(0) in await step.records()
    expected = None if resumed else await _expected(spec, scope)
    ledger = SweepLedger(step, spec.identity(scope, environment))
    entry = await ledger.start(expected=expected, blocked=BackfillCompletedError)
    if entry.status == "completed":  # this very run finished its sweep; its ack did not land
        return _summary(spec, scope, environment, entry.batches, entry.rows, entry.expected)
    with acting_for(ctx.tenant):
        try:
            mark = await _batches(spec, ctx, ledger, org, entry.expected)
            if entry.expected is not None and mark.rows < entry.expected:
                raise BackfillStalledError(
                    f"{spec.name} swept {mark.rows} rows of the {entry.expected} expected",
                    detail=f"{spec.name}:{scope}",
                )
        except Exception as exc:
            if _ends_the_run(exc, ctx):
                await _finish_failed(ledger, spec.name, exc)
            raise
    await ledger.finish()
    return _summary(spec, scope, environment, mark.batches, mark.rows, entry.expected, mark.cursor)


async def _batches(
    spec: BackfillSpec,
    ctx: JobContext,
    ledger: SweepLedger,
    org: str | None,
    expected: int | None,
) -> Mark:
    """Every window in turn, each its own step; answers the last one's mark."""
    mark = START
    ahead = _ReadAhead(spec, org)
    # The mark a window run here made, beside its JSON form: its record's counts and, once the
    # record landed, the next window's start are read off it, not parsed back from the text (a
    # replayed window's mark is parsed from its record).
    made: list[Mark] = []
    try:
        while not mark.done:
            name = step_name(mark.batches)
            made.clear()
            run = functools.partial(_window, spec, ctx, ahead, mark, made)
            write = ledger.checkpoint_of(functools.partial(_counts, mark, made))
            output = await ctx.step.run_written(name, run, write)
            mark = made[0] if made else Mark.of(output, name, mark.batches)
            # Reported once a window is recorded: progress never runs ahead of the ledger.
            ctx.progress({"batches": mark.batches, "rows": mark.rows, "expected": expected})
    finally:
        ahead.drop()
    return mark


async def _window(
    spec: BackfillSpec, ctx: JobContext, ahead: _ReadAhead, previous: Mark, made: list[Mark]
) -> JsonValue:
    """The batches after `previous`, one after another — each its turn, its page, `handle` —
    until they have taken the spec's window, the source ends, or the run is told to stop (a
    drain still records a finished step: the batches run so far are kept); answers the last
    batch's mark's JSON form (stored with the ledger's advance by the step's one write) and
    leaves the mark in `made`."""
    clock = ctx.step.clock
    opened = clock.now_ms()
    mark = previous
    while True:
        try:
            await wait_turn(clock, ctx.signal, mark.at_ms, spec.interval_ms)
            started = clock.now_ms()
            page = await ahead.take(mark.cursor)
            await call(spec.handle, page.rows)
        except asyncio.CancelledError:
            # A worker cancels a run whose signal fired (a drain past its margin, a cancel, a
            # timeout) wherever it waits: the window's batches done so far are recorded all
            # the same (the write is fenced), the one cut short runs again.
            task = asyncio.current_task()
            if mark is previous or not ctx.signal.cancelled or task is None:
                raise
            task.uncancel()
            break
        if not page.done:
            ahead.start(page.cursor)
        rows = min(mark.rows + len(page.rows), MAX_SWEEP_ROWS)
        mark = Mark(page.cursor, rows, started, page.done, mark.batches + 1)
        if mark.done or ctx.signal.cancelled or clock.now_ms() - opened >= spec.window_ms:
            break
    made.append(mark)
    return mark.to_json()


def _counts(previous: Mark, made: list[Mark], step: StepPut) -> StepCounts:
    """The ledger's advance for the window after `previous` whose record is `step`, read off
    the mark that window made (`made`, the record's own source): its batches (the last one's
    number and how many), its rows (the running count's step) and the cursor the next batch
    starts at, as JSON text."""
    mark = made[0]
    cursor = None if mark.cursor is None else dumps(mark.cursor)
    span = mark.batches - previous.batches
    return StepCounts(mark.batches, span, mark.rows - previous.rows, 0, cursor)


class _ReadAhead:
    """The next batch's page, read while this batch finishes — its window's checkpoint written
    when the window ends there: a fenced durable commit the next read would otherwise wait
    behind (bench/factories.py).

    Only a `source=` select is read ahead — a select has no effect to repeat — and only
    without `rate=`, whose page is read when its turn comes, not an interval early. The read
    starts once this batch's `handle` returned, so it sees what `handle` wrote, as a read at
    the next batch's start would. Its page is used only by the batch that starts at its
    cursor, and any failure of the read is raised there, in that batch's step; a read left
    over when the run stops (a failure, a cancel, a lost claim) is dropped, and the next
    attempt reads from the stored cursor as ever.
    """

    def __init__(self, spec: BackfillSpec, org: str | None) -> None:
        self._source = spec.source
        self._org = org
        self._limit = spec.batch
        self._on = isinstance(spec.source, Keyset) and spec.interval_ms is None
        self._cursor: JsonValue = None
        self._read: asyncio.Task[Page] | None = None

    def start(self, cursor: JsonValue) -> None:
        """Begin reading the page after `cursor` (when this sweep reads ahead)."""
        if self._on:
            self.drop()
            self._cursor = cursor
            self._read = asyncio.ensure_future(self._source.page(cursor, self._org, self._limit))

    async def take(self, cursor: JsonValue) -> Page:
        """The page after `cursor`: the one read ahead from it, else read now."""
        read, self._read = self._read, None
        if read is not None:
            if self._cursor == cursor:
                return await read
            _drop(read)
        return await self._source.page(cursor, self._org, self._limit)

    def drop(self) -> None:
        """Forget a read no batch took."""
        read, self._read = self._read, None
        if read is not None:
            _drop(read)


def _drop(read: asyncio.Task[Page]) -> None:
    read.cancel()
    # Its failure belongs to no batch: retrieved here, so it is not logged as never retrieved.
    read.add_done_callback(lambda t: t.cancelled() or t.exception())


async def _expected(spec: BackfillSpec, scope: str) -> int | None:
    """`count=` read once, as the sweep starts (a resumed run keeps its entry's)."""
    if spec.count is None:
        return None
    value = spec.count if isinstance(spec.count, int) else await call(spec.count, scope)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SWEEP_ROWS:
        raise BackfillDeclarationInvalidError(
            f"count answered {type(value).__name__} {str(value)[:40]!r}, not a row count",
            detail="count",
        )
    return value


def _ends_the_run(exc: Exception, ctx: JobContext) -> bool:
    """Whether the worker fails the job for good with `exc` (as `settle_error` decides)."""
    if isinstance(exc, _STOPPED) or ctx.signal.cancelled:
        return False
    return getattr(exc, "terminal", False) is True or ctx.final_attempt


async def _finish_failed(ledger: SweepLedger, name: str, exc: Exception) -> None:
    error = (
        exc
        if isinstance(exc, JobsError)
        else BackfillBatchFailedError(f"{type(exc).__name__}", detail=name)
    )
    try:
        await ledger.finish(error)
    except Exception:  # the run's own failure is what the worker must record
        log.warning("jobs.backfill.finish_failed %s", name, exc_info=True)


def _summary(
    spec: BackfillSpec,
    scope: str,
    environment: str,
    batches: int,
    rows: int,
    expected: int | None,
    cursor: JsonValue = None,
) -> dict[str, Any]:
    return {
        "name": spec.name,
        "scope": scope,
        "environment": environment,
        "batches": batches,
        "rows": rows,
        "expected": expected,
        "cursor": cursor,
    }
