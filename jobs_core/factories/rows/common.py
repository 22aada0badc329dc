"""What `import_rows()` and `export_rows()` share: the `job()` options they pass through, the
checks of their own numeric options, the default idempotency key, the run's ledger entry and
how a run that fails for good closes it."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypedDict

from jobs_core.context import JobContext
from jobs_core.errors import (
    AbortedError,
    DeclarationInvalidError,
    DrainingError,
    JobCancelledError,
    JobsError,
    LeaseLostError,
    RateLimitedError,
    TerminalError,
)
from jobs_core.factories.sweep import (
    Counts,
    SweepIdentity,
    SweepLedger,
    call,
    checksum,
    current_environment,
    scope_of,
)
from jobs_core.job import JobRegistry, KeySpec, SettledHook, TenantSpec
from jobs_core.jsonform import JsonValue, dumps
from jobs_core.leases.limits import ConcurrencySpec, RateLimit
from jobs_core.records import SweepKind, SweepRecord
from jobs_core.retry import Retry
from jobs_core.steps.api import StepFn
from jobs_core.tenant import acting_for, current_tenant


class JobOptions(TypedDict, total=False):
    """The `job()` options a factory passes through as they are (see `jobs_core.job.job`)."""

    queue: str
    idempotency_key: KeySpec
    retry: Retry | None
    priority: int
    timeout: float | None
    step_timeout: float | None
    sensitive: Iterable[str]
    on_settled: SettledHook | None
    concurrency: ConcurrencySpec
    rate_limit: RateLimit | Sequence[RateLimit] | None
    registry: JobRegistry | None


def whole(value: object, option: str, low: int, high: int, error: type[JobsError]) -> int:
    """`value` when it is an integer in `[low, high]`; else `error` naming `option`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"must be an integer in [{low}, {high}]", detail=option)
    return value


def input_key(
    kind: str,
    tenant: TenantSpec,
    validate: Callable[[Any], object],
    scope: type[JobsError],
) -> Callable[[Any], str]:
    """The default idempotency key: one live run per input (`<kind>:<digest of its JSON>`).
    At enqueue it refuses an input `validate` refuses, and (`scope`) one enqueued by a tenant's
    code that would act for another tenant, or for every tenant (`tenant="none"`)."""

    def key(input: Any) -> str:
        validate(input)
        asking = current_tenant()
        if asking is not None:
            org = None if tenant == "none" else tenant(input)
            if org != asking:
                raise scope(
                    f"tenant {asking!r} asked for a run acting for {org!r}", detail="tenant"
                )
        return f"{kind}:{hashlib.sha256(dumps(input).encode()).hexdigest()[:32]}"

    return key


def refuse_other_enqueuer(ctx: JobContext, scope: type[JobsError]) -> None:
    """A run acts for the tenant that enqueued it, if one did: a run enqueued by one tenant's
    code that would act for another (or for every tenant) is refused, before anything runs."""
    asking = ctx.enqueued_tenant
    if asking is not None and asking != ctx.tenant:
        raise scope(
            f"enqueued by tenant {asking!r}, the run would act for {ctx.tenant!r}", detail="tenant"
        )


async def open_ledger(
    ctx: JobContext,
    *,
    name: str,
    kind: SweepKind,
    declaration: JsonValue,
    input: JsonValue,
    blocked: type[JobsError],
) -> tuple[SweepLedger, SweepRecord | None]:
    """Open (or resume) this run's ledger entry; its checksum covers the declaration AND the
    input, so a completed run of the same input blocks this one (`blocked`). Answers the
    ledger and, when this very run completed its sweep already (a crash after the ledger's
    end, before the job's), that entry: the run answers from it, touching nothing."""
    identity = SweepIdentity(
        name=name,
        scope=scope_of(ctx.tenant),
        environment=current_environment(),
        kind=kind,
        checksum=checksum({"declaration": declaration, "input": input}),
    )
    ledger = SweepLedger(ctx.step, identity)
    entry = await ledger.start(expected=None, blocked=blocked)
    return ledger, entry if entry.status == "completed" else None


async def page_step(
    ctx: JobContext, ledger: SweepLedger, page: int, fn: StepFn, counts: Counts
) -> JsonValue:
    """Page `page`'s step (`page:<n>`, from 0): a first run's record stored together with the
    ledger's advance (`counts` reads it off the output) in one fenced write. A page replayed
    from a record of an earlier version, which counted pages in a write of its own after the
    step, is counted now if that write never landed (a counted page moves nothing)."""
    name = f"page:{page}"
    replayed = name in await ctx.step.records()
    out: JsonValue = await ctx.step.run_written(name, fn, ledger.checkpoint(page + 1, counts))
    if replayed:
        rows, errors, cursor = counts(out)
        await ledger.advance(page + 1, rows=rows, errors=errors, cursor=cursor)
    return out


async def close_failed(ledger: SweepLedger, ctx: JobContext, exc: Exception) -> None:
    """Record the entry `failed` when `exc` ends the run for good (terminal, or its final
    attempt). A drain's hand-back, a lost claim, a cancel or a rate limit records nothing: the
    run goes on later, or was stopped from outside. A failure that is no `JobsError` is
    recorded as `X_JOB_TERMINAL`. The write's own failure never hides `exc`."""
    if isinstance(
        exc, AbortedError | DrainingError | LeaseLostError | JobCancelledError | RateLimitedError
    ):
        return
    if getattr(exc, "terminal", False) is not True and not ctx.final_attempt:
        return
    error = exc if isinstance(exc, JobsError) else TerminalError(type(exc).__name__)
    with contextlib.suppress(JobsError):
        await ledger.finish(error)


async def call_for(tenant: str | None, fn: Callable[..., Awaitable[Any] | Any], *args: Any) -> Any:
    """`fn(*args)` acting for `tenant` (`jobs_core.factories.sweep.call`: a plain function on a
    thread, so a blocking handle never stalls the worker's heartbeats)."""
    with acting_for(tenant):
        return await call(fn, *args)


def recorded(value: JsonValue, key: str) -> JsonValue:
    """Field `key` of a page step's recorded output."""
    if not isinstance(value, dict) or key not in value:
        raise DeclarationInvalidError(
            f"a page is recorded, but without {key!r}: not by this factory", detail=key
        )
    return value[key]


def recorded_int(value: JsonValue, key: str) -> int:
    """Integer field `key` of a page step's recorded output."""
    got = recorded(value, key)
    if isinstance(got, bool) or not isinstance(got, int):
        raise DeclarationInvalidError(
            f"a page is recorded, but {key!r} is no integer: not by this factory", detail=key
        )
    return got
