"""Event waits and saga requeues through the real worker on Postgres
(`tests.core.events_cases`), each in a scratch schema."""

from __future__ import annotations

from tests.core import events_cases
from tests.pg.conftest import PG_URL as URL


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
