"""Durable steps that must not repeat a side effect, on Redis (the real server, fakeredis and
a one-node cluster)."""

from __future__ import annotations

import pytest

from jobs_core import facade
from jobs_core.driver import JobDriver
from tests.core import step_guard_cases as cases


async def test_an_unstorable_step_output_fails_the_run_once(driver: JobDriver) -> None:
    await cases.an_unstorable_step_output_fails_the_run_once(driver)


async def test_every_step_argument_is_checked_before_the_step_runs(driver: JobDriver) -> None:
    await cases.every_step_argument_is_checked_before_the_step_runs(driver)


async def test_a_sync_step_runs_on_its_bodys_thread_for_its_tenant(
    driver: JobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facade, "_default", None)
    await cases.a_sync_step_runs_on_its_bodys_thread_for_its_tenant(driver)


@pytest.mark.parametrize("sync", [True, False], ids=["def", "async"])
async def test_compensations_act_for_the_runs_tenant(
    driver: JobDriver, sync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facade, "_default", None)
    await cases.compensations_act_for_the_runs_tenant(driver, sync=sync)
