"""The posting ledger on the memory driver (tests/pg and tests/redis run the same cases on the
real stores: tests/core/posting_cases.py), and the ABC's refusals named one by one."""

from __future__ import annotations

from typing import Any

import pytest

from jobs_core.driver import check_posting_lines
from jobs_core.errors import JobsError
from jobs_memory import MemoryDriver
from tests.core import posting_cases as cases


@pytest.mark.parametrize(
    ("what", "lines", "code"), cases.HOSTILE, ids=[h[0] for h in cases.HOSTILE]
)
def test_each_hostile_line_set_is_refused_with_its_code(what: str, lines: Any, code: str) -> None:
    with pytest.raises(JobsError) as caught:
        check_posting_lines(lines)
    assert caught.value.code == code, what


async def test_a_posting_lands_once() -> None:
    await cases.a_posting_lands_once(MemoryDriver())


async def test_a_lost_fence_writes_nothing() -> None:
    await cases.a_lost_fence_writes_nothing(MemoryDriver())


async def test_ledgers_of_tenants_are_apart() -> None:
    await cases.ledgers_of_tenants_are_apart(MemoryDriver())


async def test_balances_are_exact_past_any_machine_number() -> None:
    await cases.balances_are_exact_past_any_machine_number(MemoryDriver())


async def test_hostile_values_write_nothing() -> None:
    await cases.hostile_values_write_nothing(MemoryDriver())


async def test_concurrent_puts_post_a_key_once() -> None:
    await cases.concurrent_puts_post_a_key_once([MemoryDriver()], per=9)
