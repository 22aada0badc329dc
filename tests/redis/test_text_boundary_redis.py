"""Text no store can hold, on Redis (the real server, fakeredis and a one-node cluster):
refused typed before a write wherever it crosses the driver, and never sinking the other jobs
of a settle batch."""

from __future__ import annotations

import socket

import pytest

from jobs_core.driver import JobDriver
from tests.core import text_boundary_cases as cases
from tests.core.text_boundary_cases import SURROGATE


@pytest.mark.parametrize("bad", [SURROGATE, "\x00"], ids=["surrogate", "nul"])
async def test_every_text_crossing_the_driver_is_refused_typed(driver: JobDriver, bad: str) -> None:
    await cases.every_text_is_refused_before_a_write(driver, bad)


async def test_one_unstorable_value_fails_only_its_own_job(driver: JobDriver) -> None:
    await cases.one_unstorable_value_fails_only_its_own_job(driver)


async def test_a_settle_batch_with_one_unstorable_ack_lands_the_others(driver: JobDriver) -> None:
    await cases.a_settle_batch_with_one_unstorable_ack_lands_the_others(driver)


async def test_a_batch_the_store_fails_on_one_item_is_sent_item_by_item(
    driver: JobDriver,
) -> None:
    await cases.a_batch_the_store_fails_on_one_item_is_sent_item_by_item(driver)


async def test_send_event_refuses_unstorable_text(driver: JobDriver) -> None:
    await cases.send_event_refuses_unstorable_text(driver)


async def test_a_forged_cursor_naming_an_unstorable_id_is_a_page_error(driver: JobDriver) -> None:
    await cases.a_forged_cursor_naming_an_unstorable_id_is_a_page_error(driver)


async def test_a_concurrency_key_no_store_can_hold_fails_its_own_job(driver: JobDriver) -> None:
    await cases.a_concurrency_key_no_store_can_hold_fails_its_own_job(driver)


async def test_a_worker_on_a_host_whose_name_is_not_utf8_works(
    driver: JobDriver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "host\udcff")
    await cases.a_worker_on_a_host_whose_name_is_not_utf8_works(driver)
