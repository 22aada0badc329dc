"""An enqueue whose script ran but whose reply was lost is retried under the same ids: one job,
one run, and the caller is answered with the original id (issue 7, item 7)."""

from __future__ import annotations

import contextlib

import pytest

from jobs_redis import RedisDriver
from tests.enqueue_retry_cases import MODES, lost_reply_inserts_once
from tests.redis.conftest import REDIS_URL, fresh_prefix, purge
from tests.redis.proxy import RedisProxy


async def keys_held(driver: RedisDriver) -> list[str]:
    """Every idempotency key stored, one entry per row (so a second row shows twice)."""
    rows = await driver.client.hvals(driver.keys.state)
    return sorted(str(r).split("\x00")[12] for r in rows)


@pytest.mark.parametrize("mode", MODES)
async def test_an_enqueue_whose_reply_is_lost_after_the_script_ran_inserts_once(
    proxy: RedisProxy, mode: str
) -> None:
    driver = RedisDriver(proxy.url(REDIS_URL), prefix=fresh_prefix())
    try:
        await lost_reply_inserts_once(
            driver,
            mode,
            drop_next_reply=proxy.drop_next_reply,
            dropped=lambda: proxy.dropped,
            keys_held=lambda: keys_held(driver),
        )
    finally:
        with contextlib.suppress(Exception):
            await purge(driver)
        await driver.close()
