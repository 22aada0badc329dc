"""The consumer family's scenarios: each consumer's cursor per tenant. A first turn (nothing
stored) and what its entry holds; turns moving it on, each from the cursor the last stored; a
stale turn never moving it back (from an older cursor, from none, as text: `10` is not `10.0`);
two turns racing from one cursor (one lands); every put fenced on the turn's claim (a lapsed
lease nobody reclaimed still holds; a reclaimed, acked or cancelled one writes nothing); one
name for several tenants and the cross-tenant one, apart; the listing's order and limit; refused
calls writing nothing.

A driver that does not declare `consumers` must refuse the calls with
`X_DRIVER_CAPABILITY_MISSING`; these scenarios check that much and stop there.
"""

from __future__ import annotations

from dataclasses import replace

from jobs_core.driver import MAX_CONSUMER_BATCH, MAX_CONSUMER_CURSOR_BYTES, JobDriver
from jobs_core.records import (
    Ack,
    ClaimedJob,
    ConsumerCursor,
    ConsumerPut,
    EnqueueResult,
    Fence,
)
from jobs_core.testing.compare import exactly_bytes
from jobs_core.testing.scenarios.support import T0, Scenario, claim_one, new_job, refused

LONG_CURSOR = '"' + exactly_bytes("", "é☃😀", MAX_CONSUMER_CURSOR_BYTES - 2) + '"'


async def _unsupported(driver: JobDriver) -> bool:
    if driver.capabilities().consumers:
        return False
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.consumer_list(None, 10))
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.consumer_cursor_get("c", None))
    put = _put(Fence("j", 1, "w1"), None, "1", T0)
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.consumer_cursor_put(put))
    return True


async def _turn_row(
    driver: JobDriver, job_id: str, now: int = T0, worker: str = "w1"
) -> ClaimedJob:
    """Row `job_id` in a queue of its own, claimed at `now` by `worker`."""
    job = new_job(job_id, queue=f"q-{job_id}", run_at_ms=now, created_at_ms=now)
    assert await driver.job_enqueue(job) == EnqueueResult(job_id, deduped=False)
    return await claim_one(driver, now, job.queue, worker=worker)


def _put(
    f: Fence,
    expect: str | None,
    cursor: str,
    now: int,
    *,
    name: str = "orders",
    tenant: str | None = "t1",
    records: int = 2,
    lag: int | None = 5,
) -> ConsumerPut:
    return ConsumerPut(f, name, tenant, "table:orders", expect, cursor, records, lag, now)


async def scenario_consumers_turns_move_the_cursor(driver: JobDriver) -> None:
    """A first turn stores the entry; each later turn moves it from the cursor it read, counting
    turns and records, keeping the lag it was given (None too); an idle turn (the same cursor)
    lands and moves the counts, not the cursor."""
    if await _unsupported(driver):
        return
    job = await _turn_row(driver, "a")
    f = job.fence
    assert await driver.consumer_cursor_get("orders", "t1") is None
    assert await driver.consumer_cursor_put(_put(f, None, '{"id":10}', T0 + 1))
    first = ConsumerCursor(
        name="orders",
        tenant_id="t1",
        source="table:orders",
        cursor_json='{"id":10}',
        turns=1,
        records=2,
        lag=5,
        holder="w1",
        job_id="a",
        updated_at_ms=T0 + 1,
    )
    assert await driver.consumer_cursor_get("orders", "t1") == first
    assert await driver.consumer_cursor_put(
        _put(f, '{"id":10}', LONG_CURSOR, T0 + 2, records=MAX_CONSUMER_BATCH, lag=None)
    )
    second = await driver.consumer_cursor_get("orders", "t1")
    assert second == replace(
        first,
        cursor_json=LONG_CURSOR,
        turns=2,
        records=2 + MAX_CONSUMER_BATCH,
        lag=None,
        updated_at_ms=T0 + 2,
    )
    assert await driver.consumer_cursor_put(_put(f, LONG_CURSOR, LONG_CURSOR, T0 + 3, records=0))
    assert await driver.consumer_cursor_get("orders", "t1") == replace(
        first,
        cursor_json=LONG_CURSOR,
        turns=3,
        records=2 + MAX_CONSUMER_BATCH,
        lag=5,
        updated_at_ms=T0 + 3,
    )


async def scenario_consumers_a_stale_turn_never_moves_the_cursor_back(driver: JobDriver) -> None:
    """A put from an older cursor, from none once one is stored, or from a text meaning the same
    number another way (`10.0`, spacing) lands nothing; two turns from one cursor: one lands."""
    if await _unsupported(driver):
        return
    f = (await _turn_row(driver, "a")).fence
    assert await driver.consumer_cursor_put(_put(f, None, '{"id":10}', T0))
    assert await driver.consumer_cursor_put(_put(f, '{"id":10}', '{"id":20}', T0 + 1))
    before = await driver.consumer_cursor_get("orders", "t1")
    assert not await driver.consumer_cursor_put(_put(f, '{"id":10}', '{"id":15}', T0 + 2))
    assert not await driver.consumer_cursor_put(_put(f, None, '{"id":1}', T0 + 2))
    assert not await driver.consumer_cursor_put(_put(f, '{"id":20.0}', '{"id":30}', T0 + 2))
    assert not await driver.consumer_cursor_put(_put(f, '{"id": 20}', '{"id":30}', T0 + 2))
    assert await driver.consumer_cursor_get("orders", "t1") == before
    assert await driver.consumer_cursor_put(_put(f, '{"id":20}', '{"id":30}', T0 + 3))
    assert not await driver.consumer_cursor_put(_put(f, '{"id":20}', '{"id":31}', T0 + 3))
    got = await driver.consumer_cursor_get("orders", "t1")
    assert got is not None and got.cursor_json == '{"id":30}' and got.turns == 3


async def scenario_consumers_puts_are_fenced_on_the_claim(driver: JobDriver) -> None:
    """A lapsed lease nobody reclaimed still holds; once reclaimed the old claim writes nothing
    and the new holder goes on from the stored cursor; an acked row's claim writes nothing."""
    if await _unsupported(driver):
        return
    job = await _turn_row(driver, "a")
    f = job.fence
    assert await driver.consumer_cursor_put(_put(f, None, "1", T0 + 10))
    lapsed = T0 + 5_000
    assert await driver.consumer_cursor_put(_put(f, "1", "2", lapsed))
    other = await claim_one(driver, lapsed, job.queue, worker="w2")
    assert not await driver.consumer_cursor_put(_put(f, "2", "3", lapsed + 1))
    assert not await driver.consumer_cursor_put(_put(replace(f, worker_id="w2"), "2", "3", lapsed))
    assert await driver.consumer_cursor_put(_put(other.fence, "2", "3", lapsed + 2))
    got = await driver.consumer_cursor_get("orders", "t1")
    assert got is not None and (got.cursor_json, got.holder) == ("3", "w2")
    assert await driver.job_ack([Ack(other.fence, lapsed + 3)]) == [True]
    assert not await driver.consumer_cursor_put(_put(other.fence, "3", "4", lapsed + 4))
    assert await driver.consumer_cursor_get("orders", "t1") == got


async def scenario_consumers_tenants_and_names_apart(driver: JobDriver) -> None:
    """One name for two tenants and the cross-tenant one, and another name: four entries, each
    moved only by its own puts, listed by name then tenant (the cross-tenant one first)."""
    if await _unsupported(driver):
        return
    f = (await _turn_row(driver, "a")).fence
    for tenant, cursor in ((None, "1"), ("t1", "2"), ("☃ org", "3")):
        assert await driver.consumer_cursor_put(_put(f, None, cursor, T0, tenant=tenant))
    assert await driver.consumer_cursor_put(_put(f, None, "4", T0, name="ledger\n'q"))
    assert await driver.consumer_cursor_put(_put(f, None, "5", T0, name="orders-eu"))
    # Another tenant's cursor is not this one's start.
    assert not await driver.consumer_cursor_put(_put(f, "1", "9", T0 + 1, tenant="t1"))
    assert not await driver.consumer_cursor_put(_put(f, "2", "9", T0 + 1, name="ledger\n'q"))
    listed = await driver.consumer_list(None, 10)
    assert [(e.name, e.tenant_id, e.cursor_json) for e in listed] == [
        ("ledger\n'q", "t1", "4"),
        ("orders", None, "1"),
        ("orders", "t1", "2"),
        ("orders", "☃ org", "3"),
        ("orders-eu", "t1", "5"),
    ]
    assert [e.name for e in await driver.consumer_list("orders", 10)] == ["orders"] * 3
    assert [e.tenant_id for e in await driver.consumer_list("orders", 2)] == [None, "t1"]
    # The limit cuts the ordered listing, not the entries in the order they were written.
    cut = await driver.consumer_list(None, 2)
    assert [(e.name, e.tenant_id) for e in cut] == [("ledger\n'q", "t1"), ("orders", None)], cut
    assert await driver.consumer_cursor_get("orders", "t2") is None
    none = await driver.consumer_cursor_get("orders", None)
    assert none is not None and none.tenant_id is None and none.cursor_json == "1"


async def scenario_consumers_refusals_write_nothing(driver: JobDriver) -> None:
    """Hostile values are refused before anything is written: a name with NUL or a lone
    surrogate, an empty tenant, a cursor past its bytes, not JSON, holding NUL, nesting too
    deep; counts out of range."""
    if await _unsupported(driver):
        return
    f = (await _turn_row(driver, "a")).fence
    base = _put(f, None, "1", T0)
    bad = [
        replace(base, name="a\x00b"),
        replace(base, name="a\udc00"),
        replace(base, tenant_id=""),
        replace(base, source="<script>" * 30),
        replace(base, cursor_json=LONG_CURSOR[:-1] + 'x"'),
        replace(base, cursor_json="{"),
        replace(base, cursor_json='"\\u0000"'),
        replace(base, cursor_json="[" * 1000 + "]" * 1000),
        replace(base, expect_json='"\\udc00"'),
        replace(base, records=-1),
        replace(base, lag=-1),
        replace(base, fence=replace(f, claims=0)),
    ]
    for put in bad:
        await refused("X_JOB_RECORD_INVALID", driver.consumer_cursor_put(put))
    await refused("X_JOB_RECORD_INVALID", driver.consumer_cursor_get("", None))
    await refused("X_JOB_RECORD_INVALID", driver.consumer_list(None, 0))
    assert await driver.consumer_list(None, 10) == []


CONSUMER_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_consumers_a_stale_turn_never_moves_the_cursor_back,
        scenario_consumers_puts_are_fenced_on_the_claim,
        scenario_consumers_refusals_write_nothing,
        scenario_consumers_tenants_and_names_apart,
        scenario_consumers_turns_move_the_cursor,
    )
}
