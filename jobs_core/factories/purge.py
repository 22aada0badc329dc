"""`purge()`: one declared, schedulable sweep for everything that expires in the store.

A factory over `job()`: the sweep is a job underneath (enqueued, claimed, retried, paused and
listed like any), so it can be fired by a `task()`:

    from jobs_core import task
    from jobs_core.factories.purge import purge

    purge_handle = purge()                     # every built-in target, the default retention
    task("purge", cron="*/15 * * * *", tz="UTC", job=purge_handle)

A pass is a few durable steps: `now` records ONE clock reading, then one step per target
(named `purge:<target name>`, so a pass replayed after a deploy that reordered the targets
still matches each record to its target) deletes what expired at that reading, in bounded
calls (`batch` items a call) until a call comes back short or `max_batches` calls were made
(the rest waits for the next pass; the step says `capped`). A replay (a retry after a crash)
reads the same `now` and skips the targets already recorded, so every target of a pass uses
one time and each count is recorded once. A target whose purge landed but whose record did not
(a crash in between) runs again at the same time: what it removed then is gone and uncounted,
so a count is what its recorded execution removed (deletes at least once, counts at most once).
The job's result is `{"now_ms": …, "purged": {target: count}, "capped": [targets]}`.

The built-in targets (`default_targets()`): `jobs` (finished jobs past a `Retention`; a purged
run's step records go with its job, in the same store write), `events` (past their expiry),
`leases` (holdings expired on lease keys nobody takes again; a key taken again drops its own),
`workers` (registry rows of workers that died without forgetting themselves), `counters`
(minute buckets folded into hours, hours past 30 days dropped), `webhook_attempts` (attempts
older than the `Retention`'s `webhook_attempts`, oldest first; endpoints and streaks stay).
There is no outbox target: the relay deletes a published row in the publish itself
(`OutboxStore.publish`), and an unpublished row is a job still owed, never garbage; nothing in
the outbox expires. The sweep ledger (`sweeps`) is a record of what ran, kept on purpose: no
target purges it. A `PurgeTarget` of your own (an app table, say) joins the same pass.

Scope: `tenant="none"`, the only cross-tenant scope, since what expires belongs to every tenant.
A pass needs the driver's `steps` family and each target's families; a driver lacking one is
refused at the pass's start, before any step (`X_DRIVER_CAPABILITY_MISSING`, terminal): a
target declared but skipped would be the sweep nobody runs. Declare only the targets your
driver has (`targets=[...]`).

Which to use: the worker's own retention (`jobs_core.retention`, `Worker(retention=...)`) needs
no setup and purges finished jobs, events, counters and webhook attempts from every worker;
`purge()` is one owned, visible, schedulable sweep with its counts in its job's result, and the
only one that purges leases and worker rows. Both can run at once: every purge is safe beside
another.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from jobs_core.context import JobContext
from jobs_core.driver import MAX_PURGE_LIMIT, OPTIONAL_FAMILIES, Family, JobDriver, name_refusal
from jobs_core.errors import PurgeDeclarationInvalidError, shown
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.jsonform import JsonValue
from jobs_core.options import count
from jobs_core.retention import DEFAULT_RETENTION, PURGE_BATCH, Retention
from jobs_core.retry import Retry

log = logging.getLogger("jobs")

#: What a target calls: `(driver, now_ms, limit)` → how many went (at most `limit`).
PurgeCall = Callable[[JobDriver, int, int], Awaitable[int]]

#: The name of the job `purge()` declares unless told otherwise.
DEFAULT_NAME: Final = "ujobs.purge"
#: The step that records a pass's one clock reading.
NOW_STEP: Final = "now"
#: A target's step is this prefix and its name.
TARGET_STEP: Final = "purge:"
#: Calls one target makes in one pass at most (its rest waits for the next pass).
MAX_BATCHES: Final = 100


@dataclass(frozen=True, slots=True)
class PurgeTarget:
    """One thing a purge sweeps.

    `name` names it in the pass (its step is `purge:<name>`) and in the job's result; unique in
    one `purge()`. `purge(driver, now_ms, limit)` deletes at most `limit` items expired at
    `now_ms` (one bounded call, safe beside a concurrent caller) and answers how many went; a
    pass calls it until it answers fewer than `limit`. `needs`: the driver families it calls,
    checked before a pass starts.
    """

    name: str
    purge: PurgeCall
    needs: tuple[Family, ...] = ()


def job_target(retention: Retention = DEFAULT_RETENTION) -> PurgeTarget:
    """`jobs`: finished jobs whose `retention` ran out (`job_purge`), oldest finished first; a
    purged run's step records go with it. A retention keeping everything purges nothing."""
    if not isinstance(retention, Retention):
        raise PurgeDeclarationInvalidError("a Retention", detail="retention")

    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        if retention.keeps_everything:
            return 0
        return await driver.job_purge(retention.params(now_ms, limit))

    return PurgeTarget("jobs", call, ("retention",))


def event_target() -> PurgeTarget:
    """`events`: published events past their expiry (`event_purge`)."""

    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        return await driver.event_purge(now_ms, limit)

    return PurgeTarget("events", call, ("events",))


def lease_target() -> PurgeTarget:
    """`leases`: holdings expired on keys nobody took since (`lease_purge`), stamps included."""

    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        return await driver.lease_purge(now_ms, limit)

    return PurgeTarget("leases", call, ("leases",))


def worker_target() -> PurgeTarget:
    """`workers`: registry rows expired (workers that died without forgetting themselves)."""

    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        return await driver.worker_purge(now_ms, limit)

    return PurgeTarget("workers", call, ("workers",))


def counter_target() -> PurgeTarget:
    """`counters`: settle-counter buckets folded (minutes into hours) or dropped (hours past 30
    days) by `counter_fold`; counted as buckets."""

    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        return await driver.counter_fold(now_ms, limit)

    return PurgeTarget("counters", call, ("counters",))


def webhook_attempt_target(retention: Retention = DEFAULT_RETENTION) -> PurgeTarget:
    """`webhook_attempts`: attempts made longer ago than `retention.webhook_attempts`
    (`webhook_attempt_purge`), oldest first; endpoints and their streaks stay. None purges
    nothing."""
    if not isinstance(retention, Retention):
        raise PurgeDeclarationInvalidError("a Retention", detail="retention")

    async def call(driver: JobDriver, now_ms: int, limit: int) -> int:
        before = retention.attempts_before(now_ms)
        if before is None:
            return 0
        return await driver.webhook_attempt_purge(before, limit)

    return PurgeTarget("webhook_attempts", call, ("webhooks",))


def default_targets(retention: Retention = DEFAULT_RETENTION) -> list[PurgeTarget]:
    """Every built-in target: jobs (past `retention`), events, leases, workers, counters,
    webhook attempts (past `retention.webhook_attempts`)."""
    return [
        job_target(retention),
        event_target(),
        lease_target(),
        worker_target(),
        counter_target(),
        webhook_attempt_target(retention),
    ]


def purge(
    name: str = DEFAULT_NAME,
    *,
    targets: Sequence[PurgeTarget] | None = None,
    retention: Retention = DEFAULT_RETENTION,
    batch: int = PURGE_BATCH,
    max_batches: int = MAX_BATCHES,
    queue: str = "default",
    priority: int = 0,
    retry: Retry | None = None,
    timeout: float | None = None,
    registry: JobRegistry | None = None,
) -> JobHandle:
    """Declare the purge job `name`: one pass over `targets` (default: every built-in, jobs
    kept per `retention`) per run; answers its handle (schedule it with `task()`).

    `batch`: items one call removes at most (1..10,000); `max_batches`: calls one target makes
    in one pass at most. `queue`, `priority`, `retry`, `timeout`, `registry` are the job's, as
    `job()` takes them. The input is not read (enqueue it with `None`); its idempotency key is
    `name`, so manual enqueues dedupe while a pass is live, and a task's fire key names its
    occurrence. Refused at declaration, nothing registered: no target, a duplicate target name,
    a name no step could be recorded under, `retention=` beside `targets=` (the jobs target takes
    its own: `job_target(retention)`) — `X_PURGE_DECLARATION_INVALID`; `batch`, `max_batches`
    out of range — `X_JOB_OPTION_INVALID`.
    """
    chosen = _targets(targets, retention)
    size = count(batch, "batch", minimum=1, maximum=MAX_PURGE_LIMIT)
    cap = count(max_batches, "max_batches", minimum=1, maximum=1_000_000)
    plan = _Pass(tuple(chosen), size, cap)

    async def body(_input: Any, ctx: JobContext) -> dict[str, JsonValue]:
        return await plan.run(ctx)

    return job(
        body,
        tenant="none",
        name=name,
        queue=queue,
        priority=priority,
        retry=retry,
        timeout=timeout,
        idempotency_key=lambda _input: name,
        registry=registry,
    )


def _targets(targets: Sequence[PurgeTarget] | None, retention: Retention) -> list[PurgeTarget]:
    """The declared targets, each refusal made before anything is registered."""
    if targets is None:
        return default_targets(retention)
    if retention is not DEFAULT_RETENTION:
        raise PurgeDeclarationInvalidError(
            "retention= applies to the default targets; with targets=, pass job_target(retention)",
            detail="retention",
        )
    if isinstance(targets, PurgeTarget) or not isinstance(targets, Sequence):
        raise PurgeDeclarationInvalidError("a list of PurgeTarget", detail="targets")
    chosen = list(targets)
    if not chosen:
        raise PurgeDeclarationInvalidError("at least one target", detail="targets")
    families = set(OPTIONAL_FAMILIES)
    seen: set[str] = set()
    for t in chosen:
        if not isinstance(t, PurgeTarget):
            raise PurgeDeclarationInvalidError("a PurgeTarget", detail=shown(t))
        why = name_refusal(t.name)
        step_why = name_refusal(TARGET_STEP + t.name) if why is None else why
        if step_why is not None:
            raise PurgeDeclarationInvalidError(
                f"a target name {step_why} (as its step, {TARGET_STEP}<name>)",
                detail=shown(t.name),
            )
        if t.name in seen:
            raise PurgeDeclarationInvalidError("two targets share this name", detail=t.name)
        seen.add(t.name)
        if not callable(t.purge):
            raise PurgeDeclarationInvalidError("a target's purge is a function", detail=t.name)
        needs: object = t.needs
        if (
            isinstance(needs, str | bytes)
            or not isinstance(needs, Sequence)
            or not all(isinstance(f, str) for f in needs)
        ):
            # A number was a bare TypeError ('not iterable'), a list in it 'unhashable'.
            raise PurgeDeclarationInvalidError(
                "a target's needs is a list of driver families", detail=t.name
            )
        unknown = [f for f in t.needs if f not in families]
        if unknown:
            raise PurgeDeclarationInvalidError(
                f"no driver family {unknown[0]!r} (one of {', '.join(sorted(families))})",
                detail=t.name,
            )
    return chosen


@dataclass(frozen=True, slots=True)
class _Pass:
    """One run of a declared purge: its targets, the batch and the per-target cap."""

    targets: tuple[PurgeTarget, ...]
    batch: int
    max_batches: int

    async def run(self, ctx: JobContext) -> dict[str, JsonValue]:
        step = ctx.step
        driver = step.driver
        # Every family first, before the clock's step: a pass that cannot finish writes nothing.
        driver.require("steps", what="purge()'s steps")
        for t in self.targets:
            driver.require(*t.needs, what=f"the purge target {t.name!r}")
        now_ms = await step.run(NOW_STEP, step.clock.now_ms)
        purged: dict[str, JsonValue] = {}
        capped: list[JsonValue] = []
        for t in self.targets:

            async def sweep(t: PurgeTarget = t) -> dict[str, JsonValue]:
                return await self._sweep(t, driver, now_ms)

            done = await step.run(TARGET_STEP + t.name, sweep)
            purged[t.name] = done["purged"]
            if done["capped"]:
                capped.append(t.name)
        return {"now_ms": now_ms, "purged": purged, "capped": capped}

    async def _sweep(self, t: PurgeTarget, driver: JobDriver, now_ms: int) -> dict[str, JsonValue]:
        """Bounded calls until one comes back short, or the cap: `{"purged", "capped"}`."""
        total = 0
        for _ in range(self.max_batches):
            n = await t.purge(driver, now_ms, self.batch)
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= self.batch:
                raise PurgeDeclarationInvalidError(
                    f"the target answered {n!r}, not a count in [0, {self.batch}]", detail=t.name
                )
            total += n
            if n < self.batch:
                log.info("jobs.purge.target %s: %d removed", t.name, total)
                return {"purged": total, "capped": False}
        log.warning(
            "jobs.purge.capped %s: %d removed in %d calls, more left for the next pass",
            t.name,
            total,
            self.max_batches,
        )
        return {"purged": total, "capped": True}


__all__ = [
    "DEFAULT_NAME",
    "MAX_BATCHES",
    "PurgeCall",
    "PurgeTarget",
    "counter_target",
    "default_targets",
    "event_target",
    "job_target",
    "lease_target",
    "purge",
    "webhook_attempt_target",
    "worker_target",
]
