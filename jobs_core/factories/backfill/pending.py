"""`pending`: declared minus completed, per environment — the alarm an operator (or a deploy)
reads.

A sweep is completed in an environment when an entry of it at its CURRENT checksum completed
there (a changed declaration is a new sweep: its old completions do not count). A sweep counts
only in the environments it may run in (`environments=`, or every one looked at).

Per-tenant sweeps: the tenants are not known in advance, so the ledger alone cannot say which
tenants still need one. Given the tenants (`tenants=`, the application's own list), each tenant
without a completed entry is pending. Without them, pending says what the ledger can prove:
each tenant whose run started at the current checksum but has not completed; and, while no
tenant has even started it there, the sweep itself with its scope unknown (`scope=None`).
Tenants that never started it are otherwise not reported: pass `tenants=` to see them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from jobs_core.factories.sweep import CROSS_TENANT
from jobs_core.records import SweepRecord

if TYPE_CHECKING:
    from jobs_core.factories.backfill.declare import Backfill

#: Why a sweep is pending: it never started here (at its current checksum), or its newest run
#: is running, or it failed.
PendingStatus = Literal["never", "running", "failed"]


@dataclass(frozen=True, slots=True)
class Pending:
    """One sweep not completed in one environment, for one scope."""

    name: str
    environment: str
    #: The tenant (or `none`), or None: a per-tenant sweep no tenant has completed here, the
    #: tenants that need it unknown.
    scope: str | None
    status: PendingStatus
    #: The newest run at the current checksum for this scope, if any.
    run_id: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "environment": self.environment,
            "scope": self.scope,
            "status": self.status,
            "run_id": self.run_id,
        }


def pending(
    declared: Iterable[Backfill],
    entries: Sequence[SweepRecord],
    environments: Iterable[str],
    tenants: Sequence[str] | None = None,
) -> dict[str, list[Pending]]:
    """Per environment, the declared sweeps not completed there (by name, then scope).
    `entries` are the ledger's, newest first (as `sweep_list` answers them)."""
    sweeps = list(declared)
    out: dict[str, list[Pending]] = {}
    for environment in sorted(set(environments)):
        found: list[Pending] = []
        for handle in sorted(sweeps, key=lambda h: h.name):
            if handle.spec.runs_in(environment):
                found.extend(_of(handle, entries, environment, tenants))
        out[environment] = found
    return out


def _of(
    handle: Backfill,
    entries: Sequence[SweepRecord],
    environment: str,
    tenants: Sequence[str] | None,
) -> list[Pending]:
    spec = handle.spec
    newest: dict[str, SweepRecord] = {}
    done: set[str] = set()
    for e in entries:
        if (
            e.name == spec.name
            and e.kind == "backfill"
            and e.environment == environment
            and e.checksum == spec.checksum
        ):
            newest.setdefault(e.scope, e)
            if e.status == "completed":
                done.add(e.scope)

    def item(scope: str | None) -> Pending:
        e = newest.get(scope) if scope is not None else None
        status: PendingStatus = "never" if e is None or e.status == "completed" else e.status
        return Pending(spec.name, environment, scope, status, e.run_id if e else None)

    if spec.cross_tenant:
        return [] if CROSS_TENANT in done else [item(CROSS_TENANT)]
    if tenants is not None:
        return [item(t) for t in sorted(set(tenants)) if t not in done]
    started = [item(s) for s in sorted(newest) if s not in done]
    if not done and not started:
        return [item(None)]
    return started
