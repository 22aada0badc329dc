"""The gate: may this sweep run here and now — its environment, the tenant asking, the sweeps it
requires, and whether it already completed.

The gate is where `requires=` is checked (a pass never waits on other sweeps); the environment
and the completed entry are checked again by the pass, which is the authority: two gates that
pass at once still make one run (the enqueue's key), and a run the gate never saw (an ungated
enqueue, a task) is refused by its pass. The gate reads the newest `MAX_SWEEP_LIST` entries of
each name it looks at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs_core.driver import MAX_SWEEP_LIST, JobDriver
from jobs_core.errors import (
    BackfillCompletedError,
    BackfillEnvironmentError,
    BackfillRequiresPendingError,
    BackfillScopeInvalidError,
)
from jobs_core.factories.sweep import CROSS_TENANT, current_environment, scope_of
from jobs_core.jsonform import dumps, loads
from jobs_core.records import SweepRecord
from jobs_core.tenant import current_tenant

if TYPE_CHECKING:
    from jobs_core.factories.backfill.declare import Backfill, BackfillSpec


@dataclass(frozen=True, slots=True)
class GateAnswer:
    """What a gate that let a sweep through checked, and the key its enqueue uses."""

    name: str
    scope: str
    environment: str
    checksum: str
    key: str


async def gate(handle: Backfill, driver: JobDriver, input: Any = None) -> GateAnswer:
    """Let `handle`'s sweep for `input`'s scope through, or raise why not (see the module)."""
    spec = handle.spec
    environment = current_environment()
    if not spec.runs_in(environment):
        raise BackfillEnvironmentError(
            f"{spec.name} runs in {', '.join(sorted(spec.environments or ()))}, not in"
            f" {environment!r}",
            detail=environment,
        )
    org = handle.tenant_for(loads(dumps(input)))  # the JSON form, as the worker reads it
    asking = current_tenant()
    if org is not None and asking is not None and asking != org:
        raise BackfillScopeInvalidError(
            f"tenant {asking!r} asked for {spec.name} acting for {org!r}", detail=spec.name
        )
    scope = scope_of(org)
    driver.require("sweeps", what="the backfill gate")
    for other in spec.requires:
        if not other.spec.runs_in(environment):
            continue  # never runs here, so never completes here: it holds nothing here
        other_scope = CROSS_TENANT if other.spec.cross_tenant else scope
        if await completed(driver, other.spec, other_scope, environment) is None:
            raise BackfillRequiresPendingError(
                f"{spec.name} requires {other.name} ({other_scope}) completed in"
                f" {environment!r} first",
                detail=f"{other.name}:{other_scope}",
            )
    done = await completed(driver, spec, scope, environment)
    if done is not None:
        raise BackfillCompletedError(
            f"{spec.name}:{scope} completed in {environment} (run {done.run_id}, job"
            f" {done.job_id}); a changed declaration is a new sweep",
            detail=f"{spec.name}:{scope}",
        )
    return GateAnswer(
        spec.name, scope, environment, spec.checksum, spec.key_for(scope, environment)
    )


async def completed(
    driver: JobDriver, spec: BackfillSpec, scope: str, environment: str
) -> SweepRecord | None:
    """The newest completed entry of `spec` at its current checksum for `scope` in
    `environment`, or None."""
    for entry in await driver.sweep_list(spec.name, MAX_SWEEP_LIST):
        if (
            entry.status == "completed"
            and entry.kind == "backfill"
            and entry.scope == scope
            and entry.environment == environment
            and entry.checksum == spec.checksum
        ):
            return entry
    return None
