"""`ledger()`: balanced postings, each exactly once, as a job.

A factory over `job()`: each job posts ONE balanced set of lines (per account and currency, in
integer minor units) under the job's idempotency key, in ONE step. The posting is written by the
driver's `posting_put` (the `postings` family) fenced on the run's claim, in the store's own
atomic write (one Postgres statement, one Redis script): it lands only while the run holds its
claim, and at most once per (tenant, key). So a worker killed anywhere — before the write, after
it and before its step record, after both — leaves the key posted once: a later attempt finds it
posted with the same lines (`already_applied`, nothing written) and completes. That is the
exactly-once side effect a fence makes possible when the effect lives in the same store.

    from jobs_core.factories import ledger

    charge = ledger(
        name="charge",
        tenant=lambda i: i["org"],
        idempotency_key=lambda i: f"charge:{i['invoice']}",
        lines=lambda i: [
            {"account": f"customer:{i['customer']}", "currency": "EUR", "amount": i["cents"]},
            {"account": "revenue", "currency": "EUR", "amount": -i["cents"]},
        ],
    )
    await charge.enqueue({"org": "acme", "invoice": "inv-1", "customer": "c9", "cents": 1250})
    rows = await charge.balances(["revenue"], tenant="acme")   # [BalanceRow(... credits=1250)]

Amounts are integers of minor units (cents): positive a debit, negative a credit, never zero,
at most `MAX_POSTING_AMOUNT` (10**18 - 1) in magnitude; a float (even `12.0`), a bool, a string
or a `Decimal` is refused, never rounded. Each currency's lines sum to zero (`X_LEDGER_UNBALANCED`
otherwise). Accounts and currencies are plain codes (`ACCOUNT_PATTERN`, `CURRENCY_PATTERN`): no
space, markup, NUL or lone surrogate. Every refusal is a terminal `X_LEDGER_*` error raised
before anything is written — at every enqueue (`Ledger.key_for`), and again in the run.

The key is the posting's identity in its tenant's ledger: a key posted with other lines is
`X_LEDGER_POSTING_CONFLICT` (terminal; the stored posting never changes). Keys are shared by
every ledger declaration of a tenant: name them by what they post (`charge:<invoice>`).

Tenant: a declaration's `tenant` is a function of the input answering the org whose ledger it
posts to, or `"none"` for the one cross-tenant ledger (apart from every org's). A run acting
for org A posts only into A's ledger: one enqueued by another tenant's code (or by a tenant's code
for `"none"`) is refused at enqueue and in the run (`X_LEDGER_SCOPE_INVALID`); reads
(`balances`, `posting`) from inside a tenant's run may read only that tenant's ledger.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from jobs_core.context import JobContext
from jobs_core.driver import check_amount, check_posting_lines
from jobs_core.errors import (
    JobDuplicateError,
    JobsError,
    LeaseLostError,
    LedgerDeclarationInvalidError,
    LedgerLinesInvalidError,
    LedgerPostingConflictError,
    LedgerScopeInvalidError,
)
from jobs_core.facade import default_client
from jobs_core.job import (
    JobHandle,
    JobRegistry,
    KeySpec,
    SettledHook,
    TenantSpec,
    default_registry,
    factory_handle,
    job,
)
from jobs_core.jsonform import JsonValue
from jobs_core.records import BalanceRow, PostingLine, PostingPut, PostingRecord
from jobs_core.resend import again_if_lost
from jobs_core.retry import Retry
from jobs_core.tenant import current_tenant

if TYPE_CHECKING:
    from jobs_core.driver import JobDriver

#: The one step a posting run records.
POST_STEP: Final = "post"
#: `lines=`: a function of the input answering the lines, each a `PostingLine`, a mapping
#: `{"account", "currency", "amount"}` or an `(account, currency, amount)` triple.
LinesFn = Callable[[Any], Any]


def _input_lines(input: Any) -> Any:
    """The default `lines=`: the input's `"lines"`."""
    if not isinstance(input, Mapping) or "lines" not in input:
        raise LedgerLinesInvalidError("the input holds no 'lines'", detail="lines")
    return input["lines"]


def lines_of(spec: LedgerSpec, input: Any) -> tuple[PostingLine, ...]:
    """The lines `spec` posts for `input`, checked (`posting_lines`). A `lines` function that
    raises on the input is `X_LEDGER_LINES_INVALID` too (terminal, and at enqueue before any
    write): it ran bare inside the enqueue's key check, a KeyError out of `enqueue`."""
    try:
        value = spec.lines(input)
    except JobsError:
        raise
    except Exception as exc:
        raise LedgerLinesInvalidError(
            f"the lines function raised {type(exc).__name__}", detail="lines"
        ) from exc
    return posting_lines(value)


def posting_lines(value: object) -> tuple[PostingLine, ...]:
    """`value` as a posting's lines, sorted by (account, currency), or its `X_LEDGER_*`
    refusal (see `jobs_core.driver.check_posting_lines`): each line a `PostingLine`, a mapping
    of exactly `account`, `currency` and `amount`, or a 3-item list."""
    if not isinstance(value, list | tuple):
        raise LedgerLinesInvalidError("a posting's lines are a list", detail="lines")
    lines: list[PostingLine] = []
    for i, item in enumerate(value):
        if isinstance(item, PostingLine):
            lines.append(item)
        elif isinstance(item, Mapping):
            if set(item) != {"account", "currency", "amount"}:
                raise LedgerLinesInvalidError(
                    "a line holds exactly 'account', 'currency' and 'amount'",
                    detail=f"lines[{i}]",
                )
            lines.append(PostingLine(item["account"], item["currency"], item["amount"]))
        elif isinstance(item, list | tuple) and len(item) == 3:
            lines.append(PostingLine(item[0], item[1], item[2]))
        else:
            raise LedgerLinesInvalidError(
                "a line is {account, currency, amount} or a triple", detail=f"lines[{i}]"
            )
        check_amount(lines[-1].amount, f"lines[{i}].amount")
    return check_posting_lines(lines)


@dataclass(frozen=True, slots=True)
class LedgerSpec:
    """A ledger as declared, checked."""

    name: str
    #: True for `tenant="none"`: the cross-tenant ledger.
    cross_tenant: bool
    lines: LinesFn


@dataclass(eq=False, repr=False)
class Ledger(JobHandle):
    """A declared ledger: a job whose run posts its input's lines once under its key."""

    spec: LedgerSpec = field(kw_only=True)

    def __repr__(self) -> str:
        return f"<ledger {self.name!r} queue={self.queue!r}>"

    def key_for(self, input: Any, given: str | None = None) -> str:
        """The posting's key (as `JobHandle.key_for`), once the lines and the scope are checked:
        every enqueue asks for it first, so a posting that would be refused is never enqueued,
        nor one a tenant's code asks to land in another tenant's ledger, `key=` given or not."""
        lines_of(self.spec, input)
        _refuse_other(current_tenant(), None if self.spec.cross_tenant else self.tenant_for(input))
        return super().key_for(input, given)

    def _ledger_of(self, tenant: str | None) -> str | None:
        """The ledger a read names: the cross-tenant one for `tenant="none"`, else `tenant`
        (default: the current run's); refused across tenants."""
        asking = current_tenant()
        if self.spec.cross_tenant:
            if tenant is not None:
                raise LedgerScopeInvalidError(
                    "a tenant='none' ledger is the cross-tenant one: read it without tenant=",
                    detail="tenant",
                )
            return None
        org = tenant if tenant is not None else asking
        if not isinstance(org, str) or not org:
            raise LedgerScopeInvalidError("name the tenant whose ledger to read", detail="tenant")
        if asking is not None and asking != org:
            raise LedgerScopeInvalidError(
                f"a run acting for {asking!r} reads no other tenant's ledger", detail="tenant"
            )
        return org

    async def balances(
        self,
        accounts: Sequence[str],
        *,
        tenant: str | None = None,
        driver: JobDriver | None = None,
    ) -> list[BalanceRow]:
        """The totals of `accounts` in `tenant`'s ledger (inside a run: its own by default),
        one row per account and currency, by (account, currency); `row.balance` is debits
        minus credits in minor units. `driver`: the configured client's by default."""
        store = driver if driver is not None else default_client().driver
        return await store.posting_balances(self._ledger_of(tenant), accounts)

    async def posting(
        self, key: str, *, tenant: str | None = None, driver: JobDriver | None = None
    ) -> PostingRecord | None:
        """The posting stored under `key` in `tenant`'s ledger, or None."""
        store = driver if driver is not None else default_client().driver
        return await store.posting_get(self._ledger_of(tenant), key)


def ledger(
    *,
    name: str,
    tenant: TenantSpec,
    idempotency_key: KeySpec = None,
    lines: LinesFn | None = None,
    queue: str = "default",
    retry: Retry | None = None,
    priority: int = 0,
    timeout: float | None = None,
    sensitive: Sequence[str] = (),
    on_settled: SettledHook | None = None,
    registry: JobRegistry | None = None,
) -> Ledger:
    """Declare a ledger job: each run posts `lines(input)` (default: `input["lines"]`) once,
    under the job's idempotency key (`idempotency_key(input)`, or `key=` at the enqueue), into
    the ledger of `tenant(input)` (or the cross-tenant one for `tenant="none"`).

    The run needs the driver's `steps` and `postings` families (`X_DRIVER_CAPABILITY_MISSING`
    otherwise). Its result is `{"key", "status", "posted_at_ms", "lines"}` — status `applied`, or
    `already_applied` when an earlier attempt (or another job with the same key and lines)
    posted it. Declaration refusals: `X_LEDGER_DECLARATION_INVALID` naming the option
    (`X_JOB_DUPLICATE` for a name taken); the other options are `job()`'s.
    """
    if tenant != "none" and not callable(tenant):
        raise LedgerDeclarationInvalidError(
            "tenant must be 'none' or a function of the input", detail="tenant"
        )
    if lines is not None and not callable(lines):
        raise LedgerDeclarationInvalidError("lines must be a function of the input", detail="lines")
    if idempotency_key is not None and not callable(idempotency_key):
        raise LedgerDeclarationInvalidError(
            "idempotency_key must be a function of the input", detail="idempotency_key"
        )
    cross = tenant == "none"
    spec = LedgerSpec(name=name, cross_tenant=cross, lines=lines or _input_lines)

    def key_of(input: Any) -> str:
        if idempotency_key is None:
            return ""  # no key of the declaration: the enqueue's key= (required) is used
        return idempotency_key(input)

    async def body(input: Any, ctx: JobContext) -> JsonValue:
        return await _post(spec, input, ctx)

    made = factory_handle(
        Ledger,
        LedgerDeclarationInvalidError,
        functools.partial(
            job,
            body,
            tenant=tenant,
            name=name,
            queue=queue,
            idempotency_key=key_of,
            retry=retry,
            priority=priority,
            timeout=timeout,
            sensitive=sensitive,
            on_settled=on_settled,
            registry=JobRegistry(),  # checked there, registered below as the Ledger it is
        ),
        spec=spec,
    )
    jobs_registry = registry if registry is not None else default_registry
    held = jobs_registry.get(name)
    if held is not None and held is not made:
        raise JobDuplicateError(detail=name)
    jobs_registry.add(made)
    return made


def _refuse_other(asking: str | None, org: str | None) -> None:
    """A tenant's code acts only for itself: it cannot post into another tenant's ledger, nor
    into the cross-tenant one (`org` None)."""
    if asking is not None and asking != org:
        raise LedgerScopeInvalidError(
            f"tenant {asking!r} cannot post into the ledger of {org or 'every tenant'!r}",
            detail="tenant",
        )


async def _post(spec: LedgerSpec, input: Any, ctx: JobContext) -> JsonValue:
    """One run: the lines and the scope checked (nothing written if refused), then ONE step
    that posts them fenced on the claim."""
    step = ctx.step
    driver = step.driver
    driver.require("steps", "postings", what=f"the ledger {spec.name!r}")
    lines = lines_of(spec, input)
    _refuse_other(ctx.enqueued_tenant, ctx.tenant)
    org = None if spec.cross_tenant else ctx.tenant
    key = step.job_key

    async def post() -> JsonValue:
        put = PostingPut(step.fence, org, key, lines, step.clock.now_ms())
        # Resent when its answer is lost: the same put again is `already_applied`, nothing
        # written, rather than an attempt (the last one, maybe) spent on a stored posting.
        answer = await again_if_lost(lambda: driver.posting_put(put))
        if answer.status == "fence_lost" or answer.posting is None:
            raise LeaseLostError(f"the claim was lost before {key!r} was posted")
        if answer.status == "conflict":
            raise LedgerPostingConflictError(
                f"{key!r} was posted by job {answer.posting.job_id} with other lines", detail=key
            )
        return {
            "key": key,
            "status": answer.status,
            "posted_at_ms": answer.posting.posted_at_ms,
            "lines": len(lines),
        }

    result: JsonValue = await step.run(POST_STEP, post)
    return result


__all__ = ["POST_STEP", "Ledger", "LedgerSpec", "ledger", "posting_lines"]
