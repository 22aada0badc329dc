"""`consumer()`: a job that reads a source in turns, and the supervisor task that starts it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from jobs_core.context import JobContext
from jobs_core.driver import MAX_CONSUMER_BATCH, name_refusal
from jobs_core.errors import ConsumerDeclarationInvalidError, shown
from jobs_core.factories.consumers.run import Plan, refuse_inside
from jobs_core.factories.consumers.sources import (
    FunctionSource,
    Handler,
    Source,
    StreamSource,
    TableSource,
)
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.jsonform import JsonValue
from jobs_core.options import count, seconds_to_ms
from jobs_core.retry import Retry
from jobs_core.scheduler.cron import CronSchedule
from jobs_core.scheduler.task import TaskHandle, TaskRegistry, task

#: The prefix of a consumer's job name (`consumer:<name>`) and its task's suffix.
JOB_PREFIX: Final = "consumer:"
SUPERVISOR_SUFFIX: Final = ":supervisor"


@dataclass(frozen=True, eq=False)
class Consumer:
    """A declared consumer: its job (one run = turns for `run_for`) and its supervisor task
    (fires the job on `every`; a run finding another holding the lease ends at once)."""

    name: str
    tenant: str | None
    source: Source
    job: JobHandle
    supervisor: TaskHandle

    def __repr__(self) -> str:
        return f"<consumer {self.name!r} {self.source.label(self.name)}>"


def consumer(
    name: str,
    *,
    source: TableSource | StreamSource | FunctionSource,
    handle: Handler,
    tenant: str,
    batch: int = 100,
    every: str = "* * * * *",
    tz: str = "UTC",
    run_for: float = 50.0,
    idle: float = 1.0,
    lease: float = 30.0,
    queue: str = "default",
    priority: int = 0,
    retry: Retry | None = None,
    registry: JobRegistry | None = None,
    task_registry: TaskRegistry | None = None,
) -> Consumer:
    """Declare consumer `name`: a job `consumer:<name>` whose run reads `source` in turns of up
    to `batch` records for `run_for` seconds, handing each batch to `handle(records, turn)`, and
    its supervisor task `consumer:<name>:supervisor` firing it on the cron `every` in `tz`.

    `tenant`: the org id the consumer acts for (its cursor, lease and table rows are that
    tenant's), or `"none"` for a cross-tenant one. A turn's batch and its cursor commit together
    (`sources`): a crash re-reads at most the last uncommitted batch (at least once; exactly
    once for a table source's writes on `turn.conn`). `idle`: seconds a run waits after a turn
    that found nothing; `lease`: the seconds the fleet-wide lease lasts unrenewed (a killed
    run's successor waits that long at most). Needs a driver with the `consumers` and `leases`
    families (`X_DRIVER_CAPABILITY_MISSING` at the run's start otherwise).

    Refused at declaration, nothing registered: a name, tenant, source or handler no run could
    use (`X_CONSUMER_DECLARATION_INVALID`); `batch`, `run_for`, `idle`, `lease` out of range
    (`X_JOB_OPTION_INVALID`); a cron or zone the task refuses. Enqueuing the consumer's job from
    inside its own run is `X_CONSUMER_SELF_ENQUEUE`.
    """
    why = name_refusal(name)
    job_name = JOB_PREFIX + name if why is None else ""
    if why is None:
        why = name_refusal(job_name + SUPERVISOR_SUFFIX)
    if why is not None:
        raise ConsumerDeclarationInvalidError(f"the name {why}", detail=shown(name))
    if not isinstance(tenant, str) or (tenant != "none" and name_refusal(tenant) is not None):
        raise ConsumerDeclarationInvalidError(
            "an org id, or 'none' for a cross-tenant consumer", detail="tenant"
        )
    org = None if tenant == "none" else tenant
    if not isinstance(source, TableSource | StreamSource | FunctionSource):
        raise ConsumerDeclarationInvalidError(
            "table(...), stream(...) or function(...)", detail="source"
        )
    if not callable(handle):
        raise ConsumerDeclarationInvalidError("handle must be a function", detail="handle")
    source.check(handle, org)
    lease_ms = seconds_to_ms(lease, "lease")
    # The schedule first: a cron or zone the task refuses leaves no job registered.
    CronSchedule(every, tz, hash_id=job_name + SUPERVISOR_SUFFIX)
    plan = Plan(
        name=name,
        job_name=job_name,
        source=source,
        handler=handle,
        batch=count(batch, "batch", minimum=1, maximum=MAX_CONSUMER_BATCH),
        run_for_ms=seconds_to_ms(run_for, "run_for"),
        idle_ms=seconds_to_ms(idle, "idle"),
        lease_ms=max(lease_ms, 3),
    )

    async def body(_input: Any, ctx: JobContext) -> dict[str, JsonValue]:
        return await plan.run(ctx)

    tenant_spec: Any = "none" if org is None else _constant(org)
    handle_ = job(
        body,
        tenant=tenant_spec,
        name=job_name,
        queue=queue,
        priority=priority,
        retry=retry,
        idempotency_key=lambda _input: name,
        registry=registry,
    )

    def guard() -> None:
        refuse_inside(job_name)

    handle_.enqueue_guard = guard
    supervisor = task(
        job_name + SUPERVISOR_SUFFIX, cron=every, tz=tz, job=handle_, registry=task_registry
    )
    return Consumer(name, org, source, handle_, supervisor)


def _constant(org: str) -> Callable[[Any], str]:
    def tenant_of(_input: Any) -> str:
        return org

    return tenant_of
