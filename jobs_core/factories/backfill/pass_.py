"""One pass of a backfill — its job's body: the batches, their cursor checkpoints, and the run's
ledger entry.

Before anything is written the pass refuses a wrong environment (`X_BACKFILL_ENVIRONMENT`), a
run enqueued by one tenant that would act for another (`X_BACKFILL_SCOPE_INVALID`), and a sweep
a completed run of the same declaration, scope and environment blocks (`X_BACKFILL_COMPLETED`).
Then it opens (or resumes) its entry and runs one step per batch, named by position
(`batch:0`, `batch:1`, …). A batch's step waits for its turn (`rate=`), reads its page from the
cursor the previous step stored and hands the rows to `handle`; its record — the next cursor, a
running count and its start time, never the page — is stored by ONE fenced write together with
the ledger's advance (`sweep_checkpoint`, keyed by the batch's number): a batch is never recorded
without being counted, and a replayed batch, its step already recorded, writes nothing. A crash
anywhere in a batch runs that batch again, whole, on the next attempt: `handle` runs AT LEAST
once per batch, and the ledger counts it once. A `source=` select without `rate=` reads each
next page while the batch before it writes its checkpoint, once that batch's `handle` returned
(`_ReadAhead`).

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
from jobs_core.factories.sweep import SweepLedger, call, current_environment, scope_of
from jobs_core.jsonform import JsonValue, dumps
from jobs_core.records import StepPut
from jobs_core.tenant import acting_for

if TYPE_CHECKING:
    from jobs_core.factories.backfill.declare import BackfillSpec

log = logging.getLogger("jobs.backfill")

#: A batch's step is `batch:<n>`, n from 0.
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
    """The step of batch `batch` (0-based): its position, never its content."""
    return f"{BATCH_STEP}{batch}"


@dataclass(frozen=True, slots=True)
class Mark:
    """What a batch's step stores: where the next batch starts, the rows so far, when this
    batch started (the throttle's reference), and whether it was the last."""

    cursor: JsonValue
    rows: int
    at_ms: int | None
    done: bool

    def to_json(self) -> JsonValue:
        return {"cursor": self.cursor, "rows": self.rows, "at": self.at_ms, "done": self.done}

    @staticmethod
    def of(stored: JsonValue, name: str) -> Mark:
        """The mark step `name` stored; a record of another shape is refused."""
        if isinstance(stored, dict):
            rows, at, done = stored.get("rows"), stored.get("at"), stored.get("done")
            if isinstance(rows, int) and isinstance(at, int) and isinstance(done, bool):
                return Mark(stored.get("cursor"), rows, at, done)
        raise BackfillDeclarationInvalidError(
            f"step {name!r} is recorded, but not as a backfill's batch", detail=name
        )


START = Mark(cursor=None, rows=0, at_ms=None, done=False)


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
            batches, mark = await _batches(spec, ctx, ledger, org, entry.expected)
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
    return _summary(spec, scope, environment, batches, mark.rows, entry.expected, mark.cursor)


async def _batches(
    spec: BackfillSpec,
    ctx: JobContext,
    ledger: SweepLedger,
    org: str | None,
    expected: int | None,
) -> tuple[int, Mark]:
    """Every batch in turn, each its own step; answers how many and the last one's mark."""
    mark = START
    n = 0
    ahead = _ReadAhead(spec, org)
    # The mark a batch run here made, beside its JSON form: its record's counts and, once the
    # record landed, the next batch's start are read off it, not parsed back from the text (a
    # replayed batch's mark is parsed from its record).
    made: list[Mark] = []
    try:
        while not mark.done:
            name = step_name(n)
            made.clear()
            run = functools.partial(_batch, spec, ctx, ahead, mark, made)
            write = ledger.checkpoint_of(n + 1, functools.partial(_counts, mark, made))
            output = await ctx.step.run_written(name, run, write)
            mark = made[0] if made else Mark.of(output, name)
            n += 1
            ctx.progress({"batches": n, "rows": mark.rows, "expected": expected})
    finally:
        ahead.drop()
    return n, mark


async def _batch(
    spec: BackfillSpec, ctx: JobContext, ahead: _ReadAhead, previous: Mark, made: list[Mark]
) -> JsonValue:
    """The batch after `previous`: its turn, its page, `handle`; answers its mark's JSON form
    (stored with the ledger's advance by the step's one write) and leaves the mark in `made`."""
    clock = ctx.step.clock
    await wait_turn(clock, ctx.signal, previous.at_ms, spec.interval_ms)
    started = clock.now_ms()
    page = await ahead.take(previous.cursor)
    await call(spec.handle, page.rows)
    if not page.done:
        ahead.start(page.cursor)
    rows = min(previous.rows + len(page.rows), MAX_SWEEP_ROWS)
    mark = Mark(page.cursor, rows, started, page.done)
    made.append(mark)
    return mark.to_json()


def _counts(previous: Mark, made: list[Mark], step: StepPut) -> tuple[int, int, str | None]:
    """The ledger's advance for the batch after `previous` whose record is `step`, read off
    the mark that batch made (`made`, the record's own source): its rows (the running count's
    step) and the cursor the next batch starts at, as JSON text."""
    mark = made[0]
    return mark.rows - previous.rows, 0, None if mark.cursor is None else dumps(mark.cursor)


class _ReadAhead:
    """The next batch's page, read while this batch's checkpoint is written: a fenced durable
    commit the next read would otherwise wait behind (much of a no-op batch's cost,
    bench/factories.py).

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
