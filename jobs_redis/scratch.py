"""A scratch store on Redis: a fresh key prefix per test, its keys deleted after
(`jobs_core.testing.stores`; found through this package's `ujobs.drivers` entry point)."""

from __future__ import annotations

import uuid
from typing import Any

from jobs_core.errors import DriverError, DriverUnavailableError
from jobs_core.urlparams import add_params, pop_param
from jobs_core.urls import mask_text
from jobs_redis.driver import RedisDriver

#: Keys deleted per DEL call while dropping a prefix.
DROP_BATCH = 1_000


class RedisScratch:
    """The prefix `ujobs-test-<random>` on the server of `url`, replacing any `prefix` the URL
    names; never FLUSHDB: others share the database."""

    def __init__(self, url: str) -> None:
        plain, _ = pop_param(url, "prefix", "")
        self.prefix = f"ujobs-test-{uuid.uuid4().hex[:12]}"
        self._plain = plain
        self.url = add_params(plain, {"prefix": self.prefix})

    async def drop(self) -> None:
        """Delete every key of the prefix (SCAN + DEL); idempotent."""
        from redis import exceptions as rx

        driver = RedisDriver(self._plain, prefix=self.prefix)
        try:
            client: Any = driver.client
            batch: list[str] = []
            async for key in client.scan_iter(match=driver.keys.pattern(), count=1000):
                batch.append(key)
                if len(batch) >= DROP_BATCH:
                    await client.delete(*batch)
                    batch = []
            if batch:
                await client.delete(*batch)
        except (rx.ConnectionError, rx.TimeoutError, OSError) as exc:
            raise DriverUnavailableError(detail=mask_text(str(exc), self._plain)) from None
        except rx.RedisError as exc:
            raise DriverError(mask_text(str(exc), self._plain), detail=self.prefix) from None
        finally:
            await driver.close()


def scratch_store(url: str) -> RedisScratch:
    """A new scratch prefix's store on the server `url` names (no I/O until used)."""
    return RedisScratch(url)
