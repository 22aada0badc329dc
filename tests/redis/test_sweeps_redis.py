"""The sweep ledger on Redis (the real server, fakeredis and a one-node cluster): the cases every
driver runs (tests/core/sweep_cases.py), and racing advances on several connections."""

from __future__ import annotations

from jobs_core.driver import JobDriver
from tests.core import sweep_cases as cases
from tests.redis.conftest import several_drivers


async def test_a_run_records_each_batch_once(driver: JobDriver) -> None:
    await cases.a_run_records_each_batch_once(driver)


async def test_a_lost_fence_writes_nothing(driver: JobDriver) -> None:
    await cases.a_lost_fence_writes_nothing(driver)


async def test_a_held_fence_of_another_run_writes_nothing(driver: JobDriver) -> None:
    await cases.a_held_fence_of_another_run_writes_nothing(driver)


async def test_only_a_completed_run_of_the_same_sweep_blocks(driver: JobDriver) -> None:
    await cases.only_a_completed_run_of_the_same_sweep_blocks(driver)


async def test_hostile_values_come_back_exactly(driver: JobDriver) -> None:
    await cases.hostile_values_come_back_exactly(driver)


async def test_the_listing_is_newest_first_then_run_id_descending(driver: JobDriver) -> None:
    await cases.the_listing_is_newest_first_then_run_id_descending(driver)


async def test_concurrent_advances_on_several_connections_move_a_batch_once() -> None:
    async with several_drivers(3) as drivers:
        await cases.concurrent_advances_move_a_batch_once(drivers, per=3)
