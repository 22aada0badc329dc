"""Event waits and saga requeues through the real worker, on any driver (memory, Postgres and
Redis call these with their URL): a wait's timeout bounds the events it takes, events keep to
their tenant, and an unwound saga runs again only as a fresh run.

Each case makes its own scratch store (`ujobs_for`) and drives time with its fake clock, so a
run "resumed late" is one whose workers simply did not run until the clock passed its deadline.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from jobs_core import acting_for, send_event
from jobs_core.context import JobContext
from jobs_core.errors import DeclarationInvalidError, RequeueUnwoundError, TerminalError
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.operator import Action, Operator
from jobs_core.records import JobFilter, JobRecord, Pause, RequeueAnswer
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.steps.unwind import UNWIND_JOB
from jobs_core.testing import UJobs, ujobs_for

MINUTE_S = 60


@contextlib.asynccontextmanager
async def _scratch(url: str) -> AsyncIterator[UJobs]:
    """`ujobs_for(url)`, whose driver this test's own loop uses too (an async case awaits the
    client here): that loop's connections are closed here, where it runs — from the harness's
    loop, which this very exit blocks, closing them would wait out `CLOSE_ELSEWHERE_S`."""
    with ujobs_for(url) as u:
        try:
            yield u
        finally:
            await u.driver.close()


async def _row(u: UJobs, job_id: str) -> JobRecord:
    return (await u.driver.job_get_many([job_id]))[job_id]


def _waiter(registry: JobRegistry) -> JobHandle:
    """Waits a minute for `order.shipped` of its order; answers what it got (None: nothing)."""

    async def waiter(input: Any, ctx: JobContext) -> Any:
        got = await ctx.step.wait_for_event(
            "shipped", "order.shipped", match={"order": input["order"]}, timeout=MINUTE_S
        )
        return {"got": got}

    return job(
        waiter,
        name="waiter",
        tenant=lambda i: i["org"],
        idempotency_key=lambda i: f"{i['org']}:{i['order']}",
        event_poll=MINUTE_S * 10,
        registry=registry,
    )


async def a_late_resume_takes_no_event_sent_after_the_timeout(url: str) -> None:
    """Workers down past a wait's deadline: an event sent after it neither wakes the run nor is
    taken when the run resumes late — it answers None. One sent before the deadline is still
    taken, however late the run resumes."""
    async with _scratch(url) as u:
        waiter = _waiter(JobRegistry())
        late = await u.client.enqueue(waiter, {"org": "acme", "order": 1})
        kept = await u.client.enqueue(waiter, {"org": "acme", "order": 2})
        await u.drain([waiter])
        assert (await _row(u, late.id)).state is JobState.PARKED
        start = u.clock.now_ms()
        # Half way: the answer to order 2 comes in time, but no worker runs for a while.
        u.clock.set(start + 30_000)
        sent = await u.client.send_event("order.shipped", {"order": 2}, tenant_id="acme")
        assert sent.woken == 1
        # Past the deadline, still no worker: the answer to order 1 comes too late.
        u.clock.set(start + 5 * 60_000)
        sent = await u.client.send_event("order.shipped", {"order": 1}, tenant_id="acme")
        assert sent.woken == 0
        assert (await _row(u, late.id)).state is JobState.PARKED
        await u.drain([waiter])
        assert (await _row(u, late.id)).result_json == '{"got":null}'
        assert (await _row(u, kept.id)).result_json == '{"got":{"order":2}}'


async def events_keep_to_their_tenant(url: str) -> None:
    """An event sent from a tenant's run (or naming a tenant) wakes only that tenant's waits;
    `all_tenants=True` wakes every tenant's; a tenant-free sender wakes only tenant-free runs."""
    async with _scratch(url) as u:
        registry = JobRegistry()
        waiter = _waiter(registry)

        async def ship(input: Any, ctx: JobContext) -> int:
            # No tenant named: the event is for the tenant this run acts for.
            return (await send_event("order.shipped", {"order": input["order"]})).woken

        shipper = job(
            ship,
            name="ship",
            tenant=lambda i: i["org"],
            idempotency_key=lambda i: f"ship:{i['org']}:{i['order']}",
            registry=registry,
        )
        handles = [waiter, shipper]
        acme = await u.client.enqueue(waiter, {"org": "acme", "order": 7})
        globex = await u.client.enqueue(waiter, {"org": "globex", "order": 7})
        initech = await u.client.enqueue(waiter, {"org": "initech", "order": 7})
        await u.drain(handles)
        # acme's warehouse ships order 7: acme's run wakes, globex's same order does not.
        shipped = await u.client.enqueue(shipper, {"org": "acme", "order": 7})
        await u.drain(handles)
        assert (await _row(u, shipped.id)).result_json == "1"
        assert (await _row(u, acme.id)).result_json == '{"got":{"order":7}}'
        assert (await _row(u, globex.id)).state is JobState.PARKED
        # From outside any tenant: no tenant's run takes it; naming a tenant reaches it.
        assert (await u.client.send_event("order.shipped", {"order": 7})).woken == 0
        sent = await u.client.send_event("order.shipped", {"order": 7}, tenant_id="globex")
        assert sent.woken == 1
        # Cross-tenant only when said so, and then naming no tenant.
        with pytest.raises(DeclarationInvalidError):
            await u.client.send_event(
                "order.shipped", {"order": 7}, tenant_id="initech", all_tenants=True
            )
        assert (await _row(u, initech.id)).state is JobState.PARKED
        sent = await u.client.send_event("order.shipped", {"order": 7}, all_tenants=True)
        assert sent.woken == 1
        await u.drain(handles)
        assert (await _row(u, globex.id)).result_json == '{"got":{"order":7}}'
        assert (await _row(u, initech.id)).result_json == '{"got":{"order":7}}'


async def a_body_signals_only_its_own_tenant(url: str) -> None:
    """A body acting for acme naming another tenant (`tenant_id="globex"`, or None: the
    tenant-free runs) in `send_event` woke that tenant's waits — a body acting across tenants
    on a value its input may carry. It is refused, `X_JOB_TENANT_MISMATCH` (terminal), and
    nothing is published: globex's run stays parked.
    Naming its own tenant is fine; the explicit escapes stay open: `all_tenants=True` (a
    broadcast), `acting_for(...)` around the call, or a job declared `tenant="none"`."""
    async with _scratch(url) as u:
        registry = JobRegistry()
        waiter = _waiter(registry)

        async def ship(input: Any, ctx: JobContext) -> int:
            options: dict[str, Any] = {}
            if input["to"] == "all":
                options["all_tenants"] = True
            elif input["to"] == "escape":
                with acting_for("globex"):
                    return (await send_event("order.shipped", {"order": 8})).woken
            elif input["to"] != "default":
                options["tenant_id"] = None if input["to"] == "none" else input["to"]
            return (await send_event("order.shipped", {"order": input["order"]}, **options)).woken

        shipper = job(
            ship,
            name="ship",
            tenant=lambda i: i["org"],
            idempotency_key=lambda i: f"ship:{i['to']}:{i['order']}",
            retry=Retry(attempts=1),
            registry=registry,
        )
        handles = [waiter, shipper]
        globex = await u.client.enqueue(waiter, {"org": "globex", "order": 7})
        await u.drain(handles)
        refused = [
            await u.client.enqueue(shipper, {"org": "acme", "to": to, "order": 7})
            for to in ("globex", "none")
        ]
        own = await u.client.enqueue(shipper, {"org": "acme", "to": "acme", "order": 7})
        await u.drain(handles)
        for sent in refused:
            r = await _row(u, sent.id)
            assert r.state is JobState.DEAD, r
            assert r.last_error is not None and "X_JOB_TENANT_MISMATCH" in r.last_error
        assert (await _row(u, own.id)).result_json == "0"
        assert (await _row(u, globex.id)).state is JobState.PARKED
        # The explicit escapes: a broadcast, and acting for the other tenant by name.
        other = await u.client.enqueue(waiter, {"org": "globex", "order": 8})
        await u.drain(handles)
        escape = await u.client.enqueue(shipper, {"org": "acme", "to": "escape", "order": 8})
        await u.drain(handles)
        assert (await _row(u, escape.id)).result_json == "1"
        assert (await _row(u, other.id)).result_json == '{"got":{"order":8}}'
        wide = await u.client.enqueue(shipper, {"org": "acme", "to": "all", "order": 7})
        await u.drain(handles)
        assert (await _row(u, wide.id)).state is JobState.COMPLETED


class _Hotel:
    """The outside world a saga books in: the rooms booked now, and whether the trip works."""

    def __init__(self) -> None:
        self.booked: list[str] = []
        self.fixed = False
        self._numbers = itertools.count()

    def book(self) -> str:
        room = f"room-{next(self._numbers)}"
        self.booked.append(room)
        return room


def _trip(hotel: _Hotel) -> JobHandle:
    """A saga: books a room (undone by cancelling it), then fails for good until fixed."""

    async def trip(input: Any, ctx: JobContext) -> str:
        room = await ctx.step.run("book", hotel.book, compensate=hotel.booked.remove)
        if not hotel.fixed:
            raise TerminalError("the flight is cancelled")
        return str(room)

    return job(
        trip,
        name="trip",
        tenant="none",
        idempotency_key=lambda i: str(i["n"]),
        retry=Retry(attempts=1),
        registry=JobRegistry(),
    )


async def an_unwound_saga_runs_again_only_as_a_fresh_run(url: str) -> None:
    """A saga that failed for good and was undone: a plain requeue (of its id, or of every dead
    job of a filter) is refused, naming the fresh run; a fresh requeue books again and
    completes with its booking."""
    async with _scratch(url) as u:
        hotel = _Hotel()
        trip = _trip(hotel)
        op = Operator(u.driver, clock=u.clock)
        done = await u.client.enqueue(trip, {"n": 1})
        await u.drain([trip])
        dead = await _row(u, done.id)
        assert dead.state is JobState.DEAD and hotel.booked == []  # booked, then undone
        with pytest.raises(RequeueUnwoundError, match="--fresh"):
            await op.act_one(Action.REQUEUE, done.id)
        report = await op.act_all(Action.REQUEUE, JobFilter(frozenset({JobState.DEAD})))
        assert report.answers == {RequeueAnswer.UNWOUND.value: 1}
        assert report.advice is not None and "--fresh" in report.advice
        assert await _row(u, done.id) == dead
        # The cause is fixed: a fresh run books again, and keeps its booking.
        hotel.fixed = True
        await op.act_one(Action.REQUEUE_FRESH, done.id)
        again = await _row(u, done.id)
        assert again.run_id != dead.run_id and again.state is JobState.READY
        await u.drain([trip])
        r = await _row(u, done.id)
        assert (r.state, r.result_json, hotel.booked) == (
            JobState.COMPLETED,
            '"room-1"',
            ["room-1"],
        )


async def a_fresh_requeue_before_the_unwinding_still_undoes_the_old_run(url: str) -> None:
    """Requeued fresh before its unwind job ran: the new run books for itself, and the old
    run's booking is undone all the same (its unwind job does not wait for the row, which
    holds another run now)."""
    async with _scratch(url) as u:
        hotel = _Hotel()
        trip = _trip(hotel)
        op = Operator(u.driver, clock=u.clock)
        done = await u.client.enqueue(trip, {"n": 1})
        # The failed run alone: its unwind job stays queued (paused by name) until after the
        # fresh requeue.
        held = Pause("name", UNWIND_JOB)
        await u.driver.pause_add(held)
        await u.drain([trip])
        assert (await _row(u, done.id)).state is JobState.DEAD and hotel.booked == ["room-0"]
        hotel.fixed = True
        await op.act_one(Action.REQUEUE_FRESH, done.id)
        await u.driver.pause_remove(held)
        outcomes = await u.drain([trip], advance=60)
        assert {o.name for o in outcomes} == {"trip", UNWIND_JOB}
        assert (await _row(u, done.id)).state is JobState.COMPLETED
        assert hotel.booked == ["room-1"]  # the old run's room undone, the new one kept
