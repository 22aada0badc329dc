"""Lost answers in the newer families on Redis: the script ran, the connection dropped before
the driver read its reply (tests/lost_answer_cases.py holds the cases; Postgres's twin is
tests/pg/test_lost_answers_pg.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from jobs_redis import RedisDriver
from jobs_redis.scripts import load_all
from tests import lost_answer_cases as cases
from tests.redis.conftest import CONNECT_TIMEOUT_S, REDIS_URL, fresh_prefix, purge
from tests.redis.proxy import RedisProxy


@pytest.fixture
async def rig(proxy: RedisProxy) -> AsyncIterator[cases.Rig]:
    prefix = fresh_prefix()
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S)
    direct = RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S)
    # Every script cached on the server first: the reply swallowed is the script's own, never
    # a NOSCRIPT that ran nothing.
    for script in load_all().values():
        await direct.client.script_load(script.source)
    try:
        yield cases.Rig(
            driver,
            direct,
            lambda token: proxy.drop_next_reply(matching=token),
            lambda: proxy.dropped,
            lambda token: proxy.drop_next_reply(matching=token),
        )
    finally:
        with contextlib.suppress(Exception):
            await purge(direct)
        await driver.close()
        await direct.close()


CASES: list[Callable[[cases.Rig], Awaitable[None]]] = [
    cases.fire_lost_fires_each_occurrence_once,
    cases.lead_take_lost_leads_at_once,
    cases.lock_take_lost_takes_it_again,
    cases.slot_take_lost_starts_the_job,
    cases.consumer_lease_take_lost_runs_its_turns,
    cases.cursor_put_lost_never_hands_a_batch_twice,
    cases.posting_put_lost_posts_once,
    cases.step_put_lost_runs_the_step_once,
    cases.attempt_put_lost_posts_once,
    cases.checkpoint_lost_counts_each_batch_once,
    cases.finish_lost_completes_the_sweep,
    cases.relay_publish_lost_creates_each_job_once,
    cases.publish_lost_wakes_the_waiter_once,
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
async def test_a_lost_answer(rig: cases.Rig, case: Callable[[cases.Rig], Awaitable[None]]) -> None:
    await case(rig)
