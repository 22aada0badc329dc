"""One run of a consumer: its lease, then turns until its time is up.

A run takes the lease `consumer:<len>:<name>:<tenant>` (limit 1: one consumer per name and
tenant across the fleet) and keeps it renewed between turns; a run that finds it held, or loses
it, ends at once (the holder goes on). Each turn reads the stored cursor, hands the source the
turn (`sources.TurnPlan`), and sleeps `idle` when there was nothing new. The run ends after
`run_for`, releasing its lease; the supervisor task starts the next one.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from jobs_core.context import JobContext
from jobs_core.driver import name_refusal
from jobs_core.errors import ConsumerSelfEnqueueError, JobsError
from jobs_core.factories.consumers.sources import Handler, Source, TurnPlan
from jobs_core.jsonform import JsonValue, loads
from jobs_core.records import LeaseRef, LeaseRenew, LeaseTake
from jobs_core.resend import again_if_lost

log = logging.getLogger("jobs")

#: The consumers whose run this context is inside (their job names): what the guard refuses.
_INSIDE: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar(
    "ujobs_consumer_inside", default=frozenset()
)
#: The lease's key prefix.
LEASE_PREFIX: Final = "consumer:"


def lease_key(name: str, tenant: str | None) -> str:
    """The fleet-wide lease of consumer `name` for `tenant` (its length first: a name may hold
    `:`)."""
    return f"{LEASE_PREFIX}{len(name)}:{name}:{tenant or ''}"


def refuse_inside(job_name: str) -> None:
    """Raise `X_CONSUMER_SELF_ENQUEUE` when called from inside a run of that consumer's job (its
    body or its handler, on any thread the run started)."""
    if job_name in _INSIDE.get():
        raise ConsumerSelfEnqueueError(
            "a consumer's run never enqueues its own job: its supervisor task starts the next",
            detail=job_name,
        )


def holder_of(job_id: str, claims: int) -> str:
    """The lease holder of one run: its job and claim (unique per run, so two runs on one
    worker never share a holding), hashed when that would pass a name's byte bound."""
    plain = f"{job_id}:{claims}"
    if name_refusal(plain) is None:
        return plain
    return "run:" + hashlib.sha256(plain.encode("utf-8", "surrogatepass")).hexdigest()[:40]


@contextmanager
def _inside(job_name: str) -> Iterator[None]:
    token = _INSIDE.set(_INSIDE.get() | {job_name})
    try:
        yield
    finally:
        _INSIDE.reset(token)


@dataclass(frozen=True, slots=True)
class Plan:
    """A declared consumer's run: what it reads, how much a turn, for how long."""

    name: str
    job_name: str
    source: Source
    handler: Handler
    batch: int
    run_for_ms: int
    idle_ms: int
    lease_ms: int

    async def run(self, ctx: JobContext) -> dict[str, JsonValue]:
        step = ctx.step
        driver, clock = step.driver, step.clock
        driver.require("consumers", "leases", what=f"consumer {self.name!r}")
        tenant = ctx.tenant
        key = lease_key(self.name, tenant)
        holder = holder_of(ctx.job_id, step.fence.claims)
        take = [LeaseTake(key, holder, 1, self.lease_ms)]
        (got,) = await again_if_lost(lambda: driver.lease_take(take, clock.now_ms()))
        if got is None:
            held = await driver.lease_holders(key, clock.now_ms())
            by = held[0].holder if held else None
            log.info("jobs.consumer.held %s: another run holds it (%s)", self.name, by)
            return {"turns": 0, "records": 0, "held_by": by}
        turns = records = 0
        cursor: JsonValue = None
        renewed = clock.now_ms()
        end = renewed + self.run_for_ms
        try:
            with _inside(self.job_name):
                while clock.now_ms() < end:
                    ctx.signal.raise_if_cancelled()
                    if clock.now_ms() - renewed >= self.lease_ms // 3:
                        ok = await driver.lease_renew(
                            [LeaseRenew(key, got.token, self.lease_ms)], clock.now_ms()
                        )
                        if not ok[0]:
                            log.warning("jobs.consumer.lease_lost %s: the run ends", self.name)
                            break
                        renewed = clock.now_ms()
                    done = await self._turn(ctx, tenant)
                    if done.cursor is not None:
                        cursor = loads(done.cursor.cursor_json)
                    if done.records:
                        turns += 1
                        records += done.records
                    else:
                        await _idle(ctx, min(self.idle_ms, max(1, end - clock.now_ms())))
        finally:
            try:
                await driver.lease_release([LeaseRef(key, got.token)], clock.now_ms())
            except JobsError:
                # Never in place of the run's own outcome: the lease runs out on its own.
                log.warning("jobs.consumer.release_failed %s", self.name, exc_info=True)
        return {"turns": turns, "records": records, "cursor": cursor}

    async def _turn(self, ctx: JobContext, tenant: str | None) -> Any:
        step = ctx.step
        stored = await step.driver.consumer_cursor_get(self.name, tenant)
        plan = TurnPlan(
            driver=step.driver,
            fence=step.fence,
            name=self.name,
            tenant=tenant,
            source=self.source.label(self.name),
            stored=stored,
            batch=self.batch,
            handler=self.handler,
            clock=step.clock,
            signal=ctx.signal,
        )
        return await self.source.turn(plan)


async def _idle(ctx: JobContext, ms: int) -> None:
    """Wait `ms` between turns that found nothing, ended at once by the run's signal (a drain,
    a lost claim): a run waiting for records never holds a worker's shutdown."""
    sleep = asyncio.ensure_future(ctx.step.clock.sleep_ms(ms))
    fired = asyncio.ensure_future(ctx.signal.wait())
    try:
        await asyncio.wait({sleep, fired}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in (sleep, fired):
            f.cancel()
    ctx.signal.raise_if_cancelled()
