"""Durable steps that must not repeat a side effect, on the memory driver (tests/pg and
tests/redis run the same cases on the real stores), and sync steps that never wait for a
thread another run holds."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from jobs_core import facade
from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.states import JobState
from jobs_memory import MemoryDriver
from tests.core import step_guard_cases as cases
from tests.core.step_guard_cases import finished, run_until
from tests.core.support import declare


async def test_an_unstorable_step_output_fails_the_run_once() -> None:
    await cases.an_unstorable_step_output_fails_the_run_once(MemoryDriver())


async def test_every_step_argument_is_checked_before_the_step_runs() -> None:
    await cases.every_step_argument_is_checked_before_the_step_runs(MemoryDriver())


async def test_a_sync_step_runs_on_its_bodys_thread_for_its_tenant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(facade, "_default", None)
    await cases.a_sync_step_runs_on_its_bodys_thread_for_its_tenant(MemoryDriver())


@pytest.mark.parametrize("sync", [True, False], ids=["def", "async"])
async def test_compensations_act_for_the_runs_tenant(
    sync: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facade, "_default", None)
    await cases.compensations_act_for_the_runs_tenant(MemoryDriver(), sync=sync)


async def test_sync_steps_never_wait_for_a_thread_another_run_holds() -> None:
    """More `def` bodies than the event loop's shared pool has threads, each in a sync step
    that waits for all the others' steps to be running too: every step runs at once (each on
    its own body's thread), so all of them meet and every job completes on its first try."""
    shared_pool = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default size
    n = shared_pool + 2
    # A guard against a deadlock, not a timing: steps that cannot all run at once break it.
    everyone = threading.Barrier(n, timeout=20)

    def body(input: Any, ctx: JobContext) -> Any:
        return ctx.sync_step.run("meet", everyone.wait)

    handle = declare(body, name="meet")
    driver = MemoryDriver()
    jobs = Jobs(driver)
    ids = [(await jobs.enqueue(handle, {"n": i})).id for i in range(n)]
    await run_until(driver, [handle], finished(driver, ids), concurrency=n)
    rows = await driver.job_get_many(ids)
    assert {(r.state, r.attempt) for r in rows.values()} == {(JobState.COMPLETED, 1)}
