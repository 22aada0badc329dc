"""Lost answers in the newer families on Redis: the script ran, the connection dropped before
the driver read its reply (tests/lost_answer_cases.py holds the cases; Postgres's twin is
tests/pg/test_lost_answers_pg.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

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


@pytest.mark.parametrize("case", cases.ALL, ids=lambda c: c.__name__)
async def test_a_lost_answer(rig: cases.Rig, case: cases.Case) -> None:
    await case(rig)
