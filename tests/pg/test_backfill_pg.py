"""`backfill(source=...)` over a real Postgres table in the test's own schema, its ledger in the
Postgres driver: keyset pages in key order on a sync and an async engine, a crash mid-sweep
resumed at the stored cursor (the crashed batch handled again, counted once), the tenant column
ANDed into every page whatever the select says, and a key that is not unique refused."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.factories.backfill import Backfill, BackfillRegistry, backfill
from jobs_core.factories.backfill.source import Keyset
from jobs_core.job import JobRegistry
from jobs_core.jsonform import loads
from jobs_core.records import ClaimParams
from jobs_core.tenant import acting_for
from jobs_pg.urls import sqlalchemy_url
from tests.core.support import fresh_store
from tests.pg.conftest import PG_URL

LEASE_MS = 1_000
#: Ids interleave the two orgs, with gaps, so a page of one org skips the other's keys.
ORG_A = [i for i in range(1, 60) if i % 3 != 0]
ORG_B = [i for i in range(1, 60) if i % 3 == 0]


class Crash(BaseException):
    """A process killed where it stands."""


@pytest.fixture
async def store() -> AsyncIterator[tuple[JobDriver, sa.Table]]:
    """The Postgres driver on a schema of its own, and an `items` table in that schema."""
    async with fresh_store("pg") as driver:
        schema = getattr(driver, "schema")  # noqa: B009 - a PgDriver's, named for the table
        items = sa.Table(
            "items",
            sa.MetaData(schema=schema),
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("org", sa.Text, nullable=False),
            sa.Column("label", sa.Text, nullable=False),
        )
        engine = sa.create_engine(sqlalchemy_url(PG_URL), poolclass=sa.pool.NullPool)
        with engine.begin() as conn:
            items.create(conn)
            rows = [{"id": i, "org": "org-a", "label": f"a{i % 4}"} for i in ORG_A]
            rows += [{"id": i, "org": "org-b", "label": f"b{i}"} for i in ORG_B]
            conn.execute(items.insert(), rows)
        engine.dispose()
        yield driver, items


def declare(**options: Any) -> Backfill:
    options.setdefault("tenant", lambda i: i["org"])
    return backfill(name="items", registry=JobRegistry(), backfills=BackfillRegistry(), **options)


async def attempt(driver: JobDriver, clock: FakeClock, handle: Backfill) -> Any:
    """Claim the sweep's job (its previous lease lapsed) and run its body as a worker would."""
    clock.set(clock.now_ms() + LEASE_MS)
    got = await driver.job_claim(ClaimParams(("default",), "w", 1, LEASE_MS, clock.now_ms()))
    (job,) = got.jobs
    value = loads(job.input_json)
    tenant = handle.tenant_for(value)
    ctx = JobContext.for_test(job, driver, tenant=tenant, clock=clock)
    with acting_for(tenant):
        return await handle.fn(value, ctx)


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_keyset_pages_a_tenants_rows_in_key_order_and_resumes_at_the_stored_cursor(
    store: tuple[JobDriver, sa.Table], kind: str
) -> None:
    driver, items = store
    url = sqlalchemy_url(PG_URL)
    engine: Any = (
        create_async_engine(url, poolclass=sa.pool.NullPool)
        if kind == "async"
        else sa.create_engine(url, poolclass=sa.pool.NullPool)
    )
    handled: list[list[int]] = []

    def handle(rows: list[Any]) -> None:
        handled.append([r.id for r in rows])
        clock.set(clock.now_ms() + 600)  # a window of a second holds two batches
        if len(handled) == 4:
            raise Crash  # killed in batch 3's handle, the second of the window at batch:2

    clock = FakeClock()
    # The select names no org: the factory ANDs the run's own into every page.
    bf = declare(
        source=sa.select(items.c.id, items.c.label).order_by(items.c.label),
        engine=engine,
        key="id",
        tenant_column="org",
        handle=handle,
        batch=7,
        count=len(ORG_A),
        checkpoint_s=1,
    )
    # The input also names the other org: only the tenant function's answer counts.
    await Jobs(driver, clock=clock).enqueue(bf, {"org": "org-a", "org_id": "org-b"})
    try:
        with pytest.raises(Crash):
            await attempt(driver, clock, bf)
        summary = await attempt(driver, clock, bf)
    finally:
        disposed = engine.dispose()
        if disposed is not None:
            await disposed
    pages = [ORG_A[i : i + 7] for i in range(0, len(ORG_A), 7)]
    # The window at batch:2 again, whole (batches 2 and 3), none before it.
    assert handled == [*pages[:4], *pages[2:]]
    assert summary["rows"] == len(ORG_A) and summary["cursor"] == ORG_A[-1]
    (entry,) = await driver.sweep_list("items", 10)
    assert (entry.status, entry.scope, entry.rows, entry.batches) == (
        "completed",
        "org-a",
        len(ORG_A),
        len(pages),
    )


async def test_a_select_naming_another_tenants_rows_finds_nothing(
    store: tuple[JobDriver, sa.Table],
) -> None:
    driver, items = store
    engine = create_async_engine(sqlalchemy_url(PG_URL), poolclass=sa.pool.NullPool)
    handled: list[Any] = []
    clock = FakeClock()
    bf = declare(
        source=sa.select(items.c.id, items.c.org).where(items.c.org == "org-b"),
        engine=lambda: engine,
        key=items.c.id,
        tenant_column=items.c.org,
        handle=handled.extend,
    )
    await Jobs(driver, clock=clock).enqueue(bf, {"org": "org-a"})
    try:
        summary = await attempt(driver, clock, bf)
    finally:
        await engine.dispose()
    assert handled == [] and summary["rows"] == 0
    source = bf.spec.source
    assert isinstance(source, Keyset)
    bound = source.statement(None, "org-a").compile().params
    assert sorted(bound.values()) == ["org-a", "org-b"]  # the select's filter AND the tenant


async def test_a_key_that_is_not_unique_is_refused_before_handle_sees_the_page(
    store: tuple[JobDriver, sa.Table],
) -> None:
    driver, items = store
    engine = sa.create_engine(sqlalchemy_url(PG_URL), poolclass=sa.pool.NullPool)
    handled: list[Any] = []
    clock = FakeClock()
    bf = declare(
        source=sa.select(items.c.label, items.c.id),
        engine=engine,
        key="label",
        tenant_column="org",
        handle=handled.append,
    )
    await Jobs(driver, clock=clock).enqueue(bf, {"org": "org-a"})
    with pytest.raises(JobsError) as refused:
        await attempt(driver, clock, bf)
    engine.dispose()
    assert refused.value.code == "X_BACKFILL_PAGE_INVALID" and handled == []
    (entry,) = await driver.sweep_list("items", 10)
    assert (entry.status, entry.error, entry.rows) == ("failed", "X_BACKFILL_PAGE_INVALID", 0)
