"""The posting ledger on Postgres: the cases every driver runs (tests/core/posting_cases.py),
and puts of one key racing on several connections."""

from __future__ import annotations

import pytest

from jobs_pg import PgDriver
from tests.core import posting_cases as cases
from tests.pg.conftest import PG_URL


@pytest.fixture
def pg(pg_shared: PgDriver) -> PgDriver:
    """These cases share one migrated schema (`tests/pg/conftest.py`'s `pg_shared`)."""
    return pg_shared


async def test_a_posting_lands_once(pg: PgDriver) -> None:
    await cases.a_posting_lands_once(pg)


async def test_a_lost_fence_writes_nothing(pg: PgDriver) -> None:
    await cases.a_lost_fence_writes_nothing(pg)


async def test_ledgers_of_tenants_are_apart(pg: PgDriver) -> None:
    await cases.ledgers_of_tenants_are_apart(pg)


async def test_balances_are_exact_past_any_machine_number(pg: PgDriver) -> None:
    await cases.balances_are_exact_past_any_machine_number(pg)


async def test_hostile_values_write_nothing(pg: PgDriver) -> None:
    await cases.hostile_values_write_nothing(pg)


async def test_concurrent_puts_on_several_connections_post_a_key_once(pg: PgDriver) -> None:
    drivers = [pg, *(PgDriver(PG_URL, schema=pg.schema, pool_size=3) for _ in range(2))]
    try:
        for d in drivers:
            await d.open()
        await cases.concurrent_puts_post_a_key_once(drivers, per=4)
    finally:
        for d in drivers[1:]:
            await d.close()
