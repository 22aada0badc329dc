"""The posting ledger on Redis (the real server, fakeredis and a one-node cluster): the cases
every driver runs (tests/core/posting_cases.py), and puts of one key racing on several
connections."""

from __future__ import annotations

from jobs_core.driver import JobDriver
from tests.core import posting_cases as cases
from tests.redis.conftest import several_drivers


async def test_a_posting_lands_once(driver: JobDriver) -> None:
    await cases.a_posting_lands_once(driver)


async def test_a_lost_fence_writes_nothing(driver: JobDriver) -> None:
    await cases.a_lost_fence_writes_nothing(driver)


async def test_ledgers_of_tenants_are_apart(driver: JobDriver) -> None:
    await cases.ledgers_of_tenants_are_apart(driver)


async def test_balances_are_exact_past_any_machine_number(driver: JobDriver) -> None:
    await cases.balances_are_exact_past_any_machine_number(driver)


async def test_hostile_values_write_nothing(driver: JobDriver) -> None:
    await cases.hostile_values_write_nothing(driver)


async def test_concurrent_puts_on_several_connections_post_a_key_once() -> None:
    async with several_drivers(3) as drivers:
        await cases.concurrent_puts_post_a_key_once(drivers, per=4)
