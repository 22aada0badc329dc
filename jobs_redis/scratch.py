"""A scratch store on Redis: a fresh key prefix per test, its keys deleted after
(`jobs_core.testing.stores`; found through this package's `ujobs.drivers` entry point)."""

from __future__ import annotations

import uuid
from typing import Any

from jobs_core.errors import DriverError, DriverUnavailableError
from jobs_core.urlparams import add_params, pop_param
from jobs_core.urls import mask_text
from jobs_redis.driver import RedisDriver

#: Keys unlinked per UNLINK call while dropping a prefix.
DROP_BATCH = 1_000


async def unlink_prefix(driver: RedisDriver) -> int:
    """Remove every key of `driver`'s prefix; answers how many. Found by SCAN MATCH (a whole
    pass over the server's keys, one call while it holds fewer than 1,000: a test suite's
    shared server held at most 39 at once, and the call cost a round trip, 0.26 ms against a
    PING's 0.17); removed by UNLINK, which frees the values off the server's main thread (a DEL
    of a prefix holding 100,000 jobs held the shared server for 0.56-0.79 s, UNLINK 6-28 ms)."""
    client: Any = driver.client
    batch: list[str] = []
    gone = 0
    async for key in client.scan_iter(match=driver.keys.pattern(), count=1000):
        batch.append(key)
        if len(batch) >= DROP_BATCH:
            gone += await client.unlink(*batch)
            batch = []
    if batch:
        gone += await client.unlink(*batch)
    return gone


class RedisScratch:
    """The prefix `ujobs-test-<random>` on the server of `url`, replacing any `prefix` the URL
    names; never FLUSHDB: others share the database."""

    def __init__(self, url: str) -> None:
        plain, _ = pop_param(url, "prefix", "")
        self.prefix = f"ujobs-test-{uuid.uuid4().hex[:12]}"
        self._plain = plain
        self.url = add_params(plain, {"prefix": self.prefix})

    async def drop(self) -> None:
        """Delete every key of the prefix (`unlink_prefix`); idempotent."""
        from redis import exceptions as rx

        driver = RedisDriver(self._plain, prefix=self.prefix)
        try:
            await unlink_prefix(driver)
        except (rx.ConnectionError, rx.TimeoutError, OSError) as exc:
            raise DriverUnavailableError(detail=mask_text(str(exc), self._plain)) from None
        except rx.RedisError as exc:
            raise DriverError(mask_text(str(exc), self._plain), detail=self.prefix) from None
        finally:
            await driver.close()


def scratch_store(url: str) -> RedisScratch:
    """A new scratch prefix's store on the server `url` names (no I/O until used)."""
    return RedisScratch(url)
