"""Event waits and saga requeues through the real worker on the memory driver
(`tests.core.events_cases`; Postgres and Redis run the same cases)."""

from __future__ import annotations

import pytest

from jobs_core.clock import FakeClock
from jobs_core.context import CancelSignal
from jobs_core.records import ClaimParams, EventRecord
from jobs_core.steps import StepApi, StepSuspension, UnwindReached
from jobs_memory import MemoryDriver
from tests.core import events_cases
from tests.core.support import T0, new_job

URL = "memory"


async def test_a_late_resume_takes_no_event_sent_after_the_timeout() -> None:
    await events_cases.a_late_resume_takes_no_event_sent_after_the_timeout(URL)


async def test_events_keep_to_their_tenant() -> None:
    await events_cases.events_keep_to_their_tenant(URL)


async def test_a_body_signals_only_its_own_tenant() -> None:
    await events_cases.a_body_signals_only_its_own_tenant(URL)


async def test_an_unwound_saga_runs_again_only_as_a_fresh_run() -> None:
    await events_cases.an_unwound_saga_runs_again_only_as_a_fresh_run(URL)


async def test_a_fresh_requeue_before_the_unwinding_still_undoes_the_old_run() -> None:
    await events_cases.a_fresh_requeue_before_the_unwinding_still_undoes_the_old_run(URL)


async def test_an_unwinding_replay_stops_at_a_wait_the_failed_run_never_passed() -> None:
    """The failed run began a wait and never got past it: the unwinding replay ends there. It
    neither looks for the event (it would look as the unwind job, for no tenant) nor records
    one among the failed run's steps."""
    driver = MemoryDriver()
    clock = FakeClock(T0)
    now = T0
    await driver.job_enqueue(new_job("j", "k"))
    (held,) = (await driver.job_claim(ClaimParams(("q",), "w", 1, 60_000, now))).jobs
    api = StepApi(driver, clock, held, CancelSignal())
    with pytest.raises(StepSuspension):
        await api.wait_for_event("shipped", "order.shipped")
    await driver.event_publish(EventRecord("e1", "order.shipped", "{}", now, now + 60_000))
    with pytest.raises(UnwindReached):
        await api.unwinding().wait_for_event("shipped", "order.shipped")
    assert [s.name for s in await driver.step_list("run-j")] == ["~wait:shipped"]
