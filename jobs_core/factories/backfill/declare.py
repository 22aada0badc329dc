"""`backfill()`: a declared, batched sweep over a source — the declaration, its checksum, and the
handle it answers (a `JobHandle`: enqueued, claimed, retried, paused and limited like any job).

What the checksum covers, and why: a changed declaration is a new sweep (a completed entry of
the old one no longer blocks it), so the checksum holds what decides WHICH rows are swept and
WHAT is done to them — the name, whether it acts per tenant, the source (for `source=`: the SQL
the select renders, its bound values, the key and the tenant column) and `version=`. Python code
is never hashed (bytecode changes with every interpreter and every unrelated edit): bump
`version=` when `handle` (or a `pages=` function) changes what it does and the sweep must run
again. The tuning knobs — `batch`, `rate`, `checkpoint_s`, `count`, `environments`, `requires`,
the job's options — are left out: tuning a completed sweep does not make it run again. The SQL
text is as SQLAlchemy renders it; an upgrade that renders a select differently makes it a new
sweep.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from jobs_core.context import JobContext
from jobs_core.driver import MAX_SWEEP_ROWS, name_refusal
from jobs_core.errors import (
    BackfillDeclarationInvalidError,
    JobDuplicateError,
    shown,
)
from jobs_core.facade import default_client
from jobs_core.factories.backfill.rate import interval_ms
from jobs_core.factories.backfill.registry import BackfillRegistry, default_backfills
from jobs_core.factories.backfill.source import Keyset, Pages, PagesFn, Source
from jobs_core.factories.sweep import SweepIdentity, checksum, current_environment, scope_of
from jobs_core.job import (
    JobHandle,
    JobRegistry,
    SettledHook,
    TenantSpec,
    default_registry,
    factory_handle,
    job,
)
from jobs_core.jsonform import JsonValue
from jobs_core.leases.limits import ConcurrencySpec, RateLimit
from jobs_core.retry import Retry

if TYPE_CHECKING:
    from jobs_core.driver import JobDriver
    from jobs_core.facade import Jobs
    from jobs_core.factories.backfill.gate import GateAnswer
    from jobs_core.records import EnqueueResult

#: A backfill's name: typed on command lines (`ujobs backfills show NAME`) and part of the
#: ledger's key, so a plain slug — no markup, no space, no `:`, nothing a terminal acts on.
NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
#: The most rows one batch may ask for.
MAX_BATCH: Final = 10_000
#: `checkpoint_s=` by default: a step (one durable write) per second of batches at most.
CHECKPOINT_S: Final = 1.0
#: The longest window `checkpoint_s=` may ask for: an hour of batches run again after a crash.
MAX_CHECKPOINT_S: Final = 3_600.0
#: `handle=`: called with each batch's rows (a list), sync (on a thread) or async; AT LEAST
#: once per batch.
HandleFn = Callable[[list[Any]], Any]
#: `count=`: the rows the sweep expects — a number, or a function of the scope (sync or async).
CountSpec = int | Callable[[str], Any] | None


@dataclass(frozen=True, slots=True)
class BackfillSpec:
    """A backfill as declared, checked."""

    name: str
    #: True for `tenant="none"`: the one scope that crosses tenants.
    cross_tenant: bool
    handle: HandleFn
    source: Source
    batch: int
    #: The least ms between two batch starts (`rate=`), or None.
    interval_ms: int | None
    #: A step's window (`checkpoint_s=`, within half a `step_timeout=`): its batches run on
    #: until they have taken this many ms; 0: one batch a step.
    window_ms: int
    count: CountSpec
    #: Where it may run (`environments=`), None: anywhere.
    environments: frozenset[str] | None
    requires: tuple[Backfill, ...]
    version: str | int | None
    checksum: str

    def runs_in(self, environment: str) -> bool:
        return self.environments is None or environment in self.environments

    def identity(self, scope: str, environment: str) -> SweepIdentity:
        """The ledger's name for this sweep at `scope` in `environment`."""
        return SweepIdentity(self.name, scope, environment, "backfill", self.checksum)

    def key_for(self, scope: str, environment: str) -> str:
        """The idempotency key of its job: one live run per sweep, scope and environment."""
        return f"{self.name}:{scope}:{environment}:{self.checksum}"


@dataclass(eq=False, repr=False)
class Backfill(JobHandle):
    """A declared backfill: a job whose body sweeps its source batch by batch.

    `await handle.enqueue(input)` GATES first (`gate()`: environment, `requires=`, already
    completed) then enqueues under the key `name:scope:environment:checksum`, so a live
    duplicate is deduped. `Jobs.enqueue(handle, ...)` and a task's fire enqueue it ungated: the
    pass itself still refuses a wrong environment and a completed sweep, but `requires=` is
    checked by the gate alone.
    """

    spec: BackfillSpec = field(kw_only=True)

    def __repr__(self) -> str:
        return f"<backfill {self.name!r} queue={self.queue!r}>"

    def scope_for(self, input: Any) -> str:
        """The ledger scope a run of `input` acts for: its tenant, or `none`."""
        return scope_of(self.tenant_for(input))

    async def gate(self, input: Any = None, *, driver: JobDriver | None = None) -> GateAnswer:
        """May this sweep run here and now for `input`'s scope: raises
        `X_BACKFILL_ENVIRONMENT`, `X_BACKFILL_SCOPE_INVALID`, `X_BACKFILL_REQUIRES_PENDING`
        or `X_BACKFILL_COMPLETED`; answers what it checked. `driver`: the configured client's
        by default."""
        from jobs_core.factories.backfill.gate import gate

        return await gate(self, driver if driver is not None else default_client().driver, input)

    async def enqueue(
        self, input: Any = None, *, client: Jobs | None = None, **options: Any
    ) -> EnqueueResult:
        """`gate()`, then enqueue on `client` (the configured one by default)."""
        jobs = client if client is not None else default_client()
        await self.gate(input, driver=jobs.driver)
        return await jobs.enqueue(self, input, **options)

    def enqueue_sync(
        self, input: Any = None, *, client: Jobs | None = None, **options: Any
    ) -> EnqueueResult:
        """`enqueue` from plain sync code."""
        jobs = client if client is not None else default_client()
        return jobs._run_sync(self.enqueue(input, client=jobs, **options))


def backfill(
    *,
    name: str,
    tenant: TenantSpec,
    handle: HandleFn,
    source: Any = None,
    engine: Any = None,
    key: Any = None,
    tenant_column: Any = None,
    pages: PagesFn | None = None,
    batch: int = 1_000,
    rate: float | None = None,
    checkpoint_s: float = CHECKPOINT_S,
    count: CountSpec = None,
    environments: Iterable[str] | None = None,
    requires: Sequence[Backfill] = (),
    version: str | int | None = None,
    queue: str = "default",
    retry: Retry | None = None,
    priority: int = 0,
    timeout: float | None = None,
    step_timeout: float | None = None,
    sensitive: Iterable[str] = (),
    on_settled: SettledHook | None = None,
    concurrency: ConcurrencySpec = None,
    rate_limit: RateLimit | Sequence[RateLimit] | None = None,
    registry: JobRegistry | None = None,
    backfills: BackfillRegistry | None = None,
) -> Backfill:
    """Declare a backfill: a job that sweeps exactly one source, `batch` rows a step.

    The source is `source=` (a SQLAlchemy select, read on `engine=` — an `Engine` or an
    `AsyncEngine`, or a function answering one — keyset-paged by its unique column `key=`, a
    name or a column of the select) or `pages=` (`(cursor, scope, limit) -> (rows, next
    cursor)`, a next cursor of None ending the sweep). `tenant` is `"none"` (the only scope
    that crosses tenants) or a function of the input answering the org the run acts for; a
    tenant's `source=` names `tenant_column=`, ANDed into every batch's select, and a tenant's
    `pages=` is handed that org as its scope and called acting for it.

    `handle(rows)` runs AT LEAST once per batch (a batch a crash interrupted runs again): make
    it idempotent. `checkpoint_s=`: one step (one durable checkpoint) covers the batches run
    until they have taken this many seconds (0: one step per batch); up to that much of the
    batches run again after a crash. `rate=`: batches per second at most. `count=`: the rows
    expected (a number or a function of the scope), read when the sweep starts; fewer rows
    after the last batch is `X_BACKFILL_STALLED`. `environments=`: where it may run
    (`$UJOBS_ENVIRONMENT`). `requires=`: backfills that must have completed first (checked by
    the gate). `version=`: bump it to make a changed `handle` a new sweep. The other options
    are `job()`'s; the job's name is the backfill's. Every refusal is
    `X_BACKFILL_DECLARATION_INVALID` naming its option (`X_JOB_DUPLICATE` for a name taken).
    """
    _check_name(name)
    if tenant != "none" and not callable(tenant):
        raise BackfillDeclarationInvalidError(
            "tenant must be 'none' or a function of the input", detail="tenant"
        )
    cross = tenant == "none"
    if not callable(handle):
        raise BackfillDeclarationInvalidError("handle must be a function", detail="handle")
    spec = BackfillSpec(
        name=name,
        cross_tenant=cross,
        handle=handle,
        source=(src := _source(cross, source, engine, key, tenant_column, pages)),
        batch=_count(batch, "batch", 1, MAX_BATCH),
        interval_ms=interval_ms(rate),
        window_ms=_window_ms(checkpoint_s, step_timeout),
        count=_expected(count),
        environments=_environments(environments),
        requires=_requires(name, cross, requires),
        version=_version(version),
        checksum=checksum(
            {
                "kind": "backfill",
                "name": name,
                "tenant": "none" if cross else "per-tenant",
                "source": src.identity(),
                "version": version,
            }
        ),
    )

    async def body(input: Any, ctx: JobContext) -> JsonValue:
        from jobs_core.factories.backfill.pass_ import run_pass

        return await run_pass(spec, ctx)

    def live_key(input: Any) -> str:
        org = None if cross or not callable(tenant) else tenant(input)
        return spec.key_for(scope_of(org), current_environment())

    made = factory_handle(
        Backfill,
        BackfillDeclarationInvalidError,
        functools.partial(
            job,
            body,
            tenant=tenant,
            name=name,
            queue=queue,
            idempotency_key=live_key,
            retry=retry,
            priority=priority,
            timeout=timeout,
            step_timeout=step_timeout,
            sensitive=sensitive,
            on_settled=on_settled,
            concurrency=concurrency,
            rate_limit=rate_limit,
            registry=JobRegistry(),  # checked there, registered below as the Backfill it is
        ),
        spec=spec,
    )
    # Both registries refuse a name taken before either holds this one.
    jobs_registry = registry if registry is not None else default_registry
    sweeps = backfills if backfills is not None else default_backfills
    held = jobs_registry.get(name)
    if (held is not None and held is not made) or sweeps.get(name) is not None:
        raise JobDuplicateError(detail=name)
    jobs_registry.add(made)
    sweeps.add(made)
    return made


def _check_name(name: object) -> None:
    if not isinstance(name, str) or NAME_PATTERN.fullmatch(name) is None:
        shown_name = shown(name, 80)
        raise BackfillDeclarationInvalidError(
            f"a backfill's name is 1 to 128 letters, digits, '_', '.' or '-', starting with a"
            f" letter or digit, not {shown_name}",
            detail="name",
        )


def _count(value: object, option: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise BackfillDeclarationInvalidError(f"must be an integer in [{lo}, {hi}]", detail=option)
    return value


def _window_ms(checkpoint_s: object, step_timeout: object) -> int:
    """A step's window in ms for `checkpoint_s` (a finite number of seconds in [0,
    `MAX_CHECKPOINT_S`]), at most half a valid `step_timeout` (a window closes after the batch
    that crosses it: half leaves that batch room)."""
    if (
        isinstance(checkpoint_s, bool)
        or not isinstance(checkpoint_s, int | float)
        # The bounds first: they refuse NaN and infinities too, and an int past a float's
        # range (which `math.isfinite` cannot convert) with them.
        or not 0 <= checkpoint_s <= MAX_CHECKPOINT_S
    ):
        raise BackfillDeclarationInvalidError(
            f"seconds of batches per checkpoint: a finite number from 0 (one a batch) to"
            f" {MAX_CHECKPOINT_S:g}",
            detail="checkpoint_s",
        )
    window = round(checkpoint_s * 1000)
    if (
        isinstance(step_timeout, int | float)
        and not isinstance(step_timeout, bool)
        and 0 < step_timeout < math.inf
    ):
        # An invalid step_timeout is job()'s to refuse, below.
        window = min(window, round(step_timeout * 1000) // 2)
    return window


def _expected(count: object) -> CountSpec:
    if count is None or callable(count):
        return count  # a function of the scope: its answer is checked when read
    return _count(count, "count", 0, MAX_SWEEP_ROWS)


def _source(
    cross: bool, source: Any, engine: Any, key: Any, tenant_column: Any, pages: PagesFn | None
) -> Source:
    if (source is None) == (pages is None):
        raise BackfillDeclarationInvalidError(
            "give exactly one of source= (a select) or pages= (a function)", detail="source"
        )
    if pages is not None:
        for option, value in (("engine", engine), ("key", key), ("tenant_column", tenant_column)):
            if value is not None:
                raise BackfillDeclarationInvalidError(
                    f"{option}= goes with source=; pages= pages itself", detail=option
                )
        return Pages(pages)
    if key is None:
        raise BackfillDeclarationInvalidError(
            "source= pages by a unique column: give key= (its name, or the column)", detail="key"
        )
    if cross and tenant_column is not None:
        raise BackfillDeclarationInvalidError(
            "a tenant='none' sweep crosses tenants: it takes no tenant_column",
            detail="tenant_column",
        )
    if not cross and tenant_column is None:
        raise BackfillDeclarationInvalidError(
            "a tenant's sweep reads only that tenant's rows: give tenant_column= (the column"
            " holding the org)",
            detail="tenant_column",
        )
    return Keyset(source, engine=engine, key=key, tenant_column=tenant_column)


def _environments(environments: Iterable[str] | None) -> frozenset[str] | None:
    if environments is None:
        return None
    if isinstance(environments, str | bytes) or not isinstance(environments, Iterable):
        raise BackfillDeclarationInvalidError("a list of environment names", detail="environments")
    names = list(environments)
    if not names:
        raise BackfillDeclarationInvalidError(
            "name at least one environment (None: any)", detail="environments"
        )
    for env in names:
        if not isinstance(env, str) or NAME_PATTERN.fullmatch(env) is None:
            raise BackfillDeclarationInvalidError(
                f"an environment is a name like 'production', not {shown(env, 80)}",
                detail="environments",
            )
    return frozenset(names)


def _requires(name: str, cross: bool, requires: object) -> tuple[Backfill, ...]:
    if isinstance(requires, str | bytes) or not isinstance(requires, Sequence):
        raise BackfillDeclarationInvalidError("a list of backfills", detail="requires")
    for other in requires:
        if not isinstance(other, Backfill):
            raise BackfillDeclarationInvalidError(
                f"requires names declared backfills, not {type(other).__name__}",
                detail="requires",
            )
        if other.name == name:
            raise BackfillDeclarationInvalidError(
                "a sweep cannot require itself", detail="requires"
            )
        if cross and not other.spec.cross_tenant:
            # Which tenants must have run it first is not knowable for a sweep over them all.
            raise BackfillDeclarationInvalidError(
                f"a tenant='none' sweep cannot require the per-tenant sweep {other.name!r}",
                detail="requires",
            )
    return tuple(requires)


def _version(version: object) -> str | int | None:
    if version is None:
        return None
    if isinstance(version, int) and not isinstance(version, bool):
        return version
    if isinstance(version, str) and name_refusal(version) is None:
        return version
    raise BackfillDeclarationInvalidError("a short string or an integer", detail="version")
