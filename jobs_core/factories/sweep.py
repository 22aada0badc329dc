"""The ledger side of one run of a sweep, written from inside its body; and what every sweep
shares: the environment it runs in and its declaration's checksum.

A sweep's entry is opened by the run (`SweepLedger.start`), moved once per step the run
records for the first time — by that step's batches: one, or a backfill's window of several —
(`advance`, keyed by the batch numbers: a replayed step moves nothing) and closed when the run
ends (`finish`). Every write is fenced on the run's claim; one
that does not land means the run lost its claim, and raises `X_JOB_LEASE_LOST` like a step.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from jobs_core.driver import name_refusal
from jobs_core.errors import JobsError, LeaseLostError, OptionInvalidError
from jobs_core.jsonform import JsonValue, dumps, loads
from jobs_core.records import (
    StepPut,
    SweepAdvance,
    SweepCheckpoint,
    SweepFinish,
    SweepKind,
    SweepRecord,
    SweepStart,
)
from jobs_core.resend import again_if_lost
from jobs_core.steps.api import RecordWrite, StepApi

#: The environment variable naming where this process runs (`production`, `staging`…).
ENVIRONMENT_VAR: Final = "UJOBS_ENVIRONMENT"
#: The environment of a process that names none.
DEFAULT_ENVIRONMENT: Final = "default"
#: The scope of a sweep declared `tenant="none"`: the only one that crosses tenants.
CROSS_TENANT: Final = "none"


#: What a batch's step output says of it: its rows, its refused rows, the next batch's cursor.
Counts = Callable[[JsonValue], tuple[int, int, JsonValue]]


@dataclass(frozen=True, slots=True)
class StepCounts:
    """What one step's record adds to the ledger: its batches — the last one's number (1-based)
    and how many end there (`span`) —, their rows and refused rows, and the cursor the next
    batch starts at as JSON text (None: none)."""

    batch: int
    span: int
    rows: int
    errors: int
    cursor_json: str | None


#: What a step's record says of it, read by the caller that made the record (no parse of its
#: text).
RecordCounts = Callable[[StepPut], StepCounts]


def current_environment() -> str:
    """Where this process runs: `$UJOBS_ENVIRONMENT`, else `default`. A value no store can hold
    as a name is refused (`X_JOB_OPTION_INVALID`) rather than cut."""
    value = os.environ.get(ENVIRONMENT_VAR) or DEFAULT_ENVIRONMENT
    why = name_refusal(value)
    if why is not None:
        raise OptionInvalidError(f"${ENVIRONMENT_VAR} {why}", detail=ENVIRONMENT_VAR)
    return value


def checksum(declaration: JsonValue) -> str:
    """The checksum of a sweep's declaration (its JSON form): a changed declaration is a new
    sweep, so a completed entry of the old one no longer blocks it."""
    return hashlib.sha256(dumps(declaration).encode()).hexdigest()[:32]


def scope_of(tenant: str | None) -> str:
    """The ledger scope of a run acting for `tenant` (None: a `tenant="none"` sweep)."""
    return CROSS_TENANT if tenant is None else tenant


@dataclass(frozen=True, slots=True)
class SweepIdentity:
    """What names one sweep in the ledger: a completed entry with the same name, scope,
    environment and checksum blocks a run (the kind is recorded, not compared)."""

    name: str
    scope: str
    environment: str
    kind: SweepKind
    checksum: str


class SweepLedger:
    """The ledger entry of the run `step` belongs to."""

    def __init__(self, step: StepApi, identity: SweepIdentity) -> None:
        self._step = step
        self._identity = identity

    async def start(self, *, expected: int | None, blocked: type[JobsError]) -> SweepRecord:
        """Open or resume this run's entry; answers it (a `completed` one when this very run
        already finished its sweep). A completed run of the same sweep raises `blocked`
        naming it, writing nothing."""
        i = self._identity
        start = SweepStart(
            fence=self._step.fence,
            run_id=self._run_id,
            name=i.name,
            scope=i.scope,
            environment=i.environment,
            kind=i.kind,
            checksum=i.checksum,
            expected=expected,
            now_ms=self._step.clock.now_ms(),
        )
        # A repeat resumes this run's entry as it is: resent when the answer is lost.
        answer = await again_if_lost(lambda: self._step.driver.sweep_start(start))
        if answer.blocked_by is not None:
            by = answer.blocked_by
            raise blocked(
                f"{i.name}:{i.scope} completed in {i.environment} (run {by.run_id}, job "
                f"{by.job_id}); a changed declaration is a new sweep",
                detail=f"{i.name}:{i.scope}",
            )
        if answer.record is None:
            raise LeaseLostError(f"the claim was lost before {i.name!r} opened its ledger entry")
        return answer.record

    async def advance(
        self, batch: int, *, rows: int, errors: int = 0, cursor: JsonValue = None
    ) -> bool:
        """Record batch `batch` (1-based) once; False when it moved nothing: a replay, or a run
        that lost its claim (whose step record then fails to land, `X_JOB_LEASE_LOST`)."""
        advance = SweepAdvance(
            fence=self._step.fence,
            run_id=self._run_id,
            batch=batch,
            rows=rows,
            errors=errors,
            cursor_json=None if cursor is None else dumps(cursor),
            now_ms=self._step.clock.now_ms(),
        )
        # A batch moves the entry once: resent when the answer is lost.
        return await again_if_lost(lambda: self._step.driver.sweep_advance(advance))

    def checkpoint(self, batch: int, counts: Counts) -> RecordWrite:
        """The write that stores batch `batch`'s step record together with its advance, whose
        rows, refused rows and next cursor `counts` reads off the step's output: one fenced
        commit, so a batch is never recorded without being counted (`StepApi.run_written`)."""

        def of_record(step: StepPut) -> StepCounts:
            rows, errors, cursor = counts(loads(step.output_json))
            return StepCounts(batch, 1, rows, errors, None if cursor is None else dumps(cursor))

        return self.checkpoint_of(of_record)

    def checkpoint_of(self, counts: RecordCounts) -> RecordWrite:
        """`checkpoint`, with `counts` answering for the record itself — which batches it ends
        and what they add: for a caller that holds what it just recorded (a backfill's window
        of batches, known once it ran), so its output is not parsed back."""
        driver, run_id = self._step.driver, self._run_id

        async def write(step: StepPut) -> bool:
            c = counts(step)
            advance = SweepAdvance(
                step.fence, run_id, c.batch, c.rows, c.errors, c.cursor_json, step.now_ms, c.span
            )
            return await driver.sweep_checkpoint(SweepCheckpoint(step, advance))

        return write

    async def finish(self, error: JobsError | None = None) -> bool:
        """Close the entry: `completed`, or `failed` with `error`'s code; False when it closed
        nothing (a lost claim, or an entry closed already: a resent finish whose first landed
        unanswered — so the run is not failed, maybe for good, with its sweep closed)."""
        finish = SweepFinish(
            fence=self._step.fence,
            run_id=self._run_id,
            status="completed" if error is None else "failed",
            error=None if error is None else error.code,
            now_ms=self._step.clock.now_ms(),
        )
        return await again_if_lost(lambda: self._step.driver.sweep_finish(finish))

    @property
    def _run_id(self) -> str:
        return self._step.run_id


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`: awaited when it is a coroutine function, else on a thread (a sync handle or
    query must not stall the heartbeat), in a copy of the caller's context (its tenant); an
    awaitable a sync function answers is awaited here."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's async __call__
    ):
        return await fn(*args)
    answer = await asyncio.to_thread(fn, *args)
    if inspect.isawaitable(answer):
        answer = await answer
    return answer
