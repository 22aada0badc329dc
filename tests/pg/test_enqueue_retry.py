"""An enqueue whose answer was lost after the commit is retried under the same ids: one row,
one run, and the caller is answered with the original id (issue 7, item 7)."""

from __future__ import annotations

import asyncio
import time

import pytest

from jobs_core.errors import DriverUnavailableError
from jobs_core.facade import Jobs
from jobs_pg import PgDriver
from tests.enqueue_retry_cases import MODES, declare, lost_reply_inserts_once
from tests.pg.conftest import PG_URL
from tests.pg.proxy import Proxy
from tests.pg.support import keys_stored

#: Postgres's ReadyForQuery: the end of an answer, sent after the implicit transaction committed.
READY = b"Z\x00\x00\x00\x05"


@pytest.mark.parametrize("mode", MODES)
async def test_an_enqueue_whose_answer_is_lost_after_commit_inserts_once(
    pg_schema: str, proxy: Proxy, mode: str
) -> None:
    # No wake: every single enqueue runs the one statement the warm-up prepared (with a wake,
    # a second enqueue inside the same slot runs another, whose first reply is its PREPARE's).
    # One connection: no pool growth in the background puts its traffic beside the write's.
    driver = PgDriver(
        proxy.url(PG_URL), schema=pg_schema, pool_size=1, connect_timeout_s=2.0, wake=False
    )

    async def held() -> list[str]:
        return await asyncio.to_thread(keys_stored, pg_schema)

    async with driver:
        await lost_reply_inserts_once(
            driver,
            mode,
            drop_next_reply=lambda: proxy.drop_next_reply(until=READY),
            dropped=lambda: proxy.dropped,
            keys_held=held,
        )


async def test_an_enqueue_gives_up_after_its_retry_window(pg_schema: str, proxy: Proxy) -> None:
    driver = PgDriver(proxy.url(PG_URL), schema=pg_schema, pool_size=2, connect_timeout_s=1.0)
    handle = declare([])
    async with driver:
        await Jobs(driver).enqueue(handle, {"n": 0})
        await proxy.stop()
        started = time.monotonic()
        with pytest.raises(DriverUnavailableError):
            await Jobs(driver, enqueue_retry_s=0.3).enqueue(handle, {"n": 1})
        # It retried for its window, then gave up (the bound is generous: a busy machine).
        assert 0.3 <= time.monotonic() - started < 10
    assert keys_stored(pg_schema) == ["k0"]
