"""Lost answers in the newer families on Postgres: the statement committed, the connection
dropped before the driver read its answer (tests/lost_answer_cases.py holds the cases; Redis's
twin is tests/redis/test_lost_answers_redis.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from jobs_pg import PgDriver
from tests import lost_answer_cases as cases
from tests.pg.conftest import PG_URL
from tests.pg.proxy import Proxy

#: Postgres's ReadyForQuery: the end of an answer, sent after the implicit transaction committed.
READY = b"Z\x00\x00\x00\x05"
#: ReadyForQuery, idle: the end of the answer to a transaction's COMMIT.
COMMITTED = READY + b"I"


@pytest.fixture
async def rig(pg_schema: str, proxy: Proxy) -> AsyncIterator[cases.Rig]:
    # Unprepared: every execution sends its text and binds in one round trip, so the answer
    # swallowed is the write's own (a prepare's would commit nothing).
    driver = PgDriver(
        proxy.url(PG_URL),
        schema=pg_schema,
        pool_size=1,
        connect_timeout_s=1.0,
        wake=False,
        prepare=False,
    )
    direct = PgDriver(PG_URL, schema=pg_schema, pool_size=2)
    try:
        yield cases.Rig(
            driver,
            direct,
            lambda token: proxy.drop_next_reply(until=READY, matching=token),
            lambda: proxy.dropped,
            lambda token: proxy.drop_next_reply(until=COMMITTED, matching=token, through=True),
        )
    finally:
        await driver.close()
        await direct.close()


@pytest.mark.parametrize("case", cases.ALL, ids=lambda c: c.__name__)
async def test_a_lost_answer(rig: cases.Rig, case: cases.Case) -> None:
    await case(rig)
