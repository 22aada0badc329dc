"""The worker's run path on Redis: an unknown name is given back, a body enqueues."""

from __future__ import annotations

import pytest

from jobs_core import facade
from jobs_core.driver import JobDriver
from tests.core import runpath_cases


async def test_an_unknown_name_is_given_back_and_runs_on_a_worker_that_knows_it(
    driver: JobDriver,
) -> None:
    await runpath_cases.an_unknown_name_waits_for_a_worker_that_knows_it(driver)


async def test_a_body_enqueues_on_its_worker_store_without_configure(
    driver: JobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facade, "_default", None)
    await runpath_cases.a_body_enqueues_on_its_worker_store(driver)
