"""The sweep ledger on the memory driver (tests/pg and tests/redis run the same cases on the
real stores: tests/core/sweep_cases.py)."""

from __future__ import annotations

from jobs_memory import MemoryDriver
from tests.core import sweep_cases as cases


async def test_a_run_records_each_batch_once() -> None:
    await cases.a_run_records_each_batch_once(MemoryDriver())


async def test_a_lost_fence_writes_nothing() -> None:
    await cases.a_lost_fence_writes_nothing(MemoryDriver())


async def test_a_held_fence_of_another_run_writes_nothing() -> None:
    await cases.a_held_fence_of_another_run_writes_nothing(MemoryDriver())


async def test_only_a_completed_run_of_the_same_sweep_blocks() -> None:
    await cases.only_a_completed_run_of_the_same_sweep_blocks(MemoryDriver())


async def test_hostile_values_come_back_exactly() -> None:
    await cases.hostile_values_come_back_exactly(MemoryDriver())


async def test_the_listing_is_newest_first_then_run_id_descending() -> None:
    await cases.the_listing_is_newest_first_then_run_id_descending(MemoryDriver())


async def test_concurrent_advances_move_a_batch_once() -> None:
    await cases.concurrent_advances_move_a_batch_once([MemoryDriver()], per=8)
