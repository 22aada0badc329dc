"""The `redis`, `rediss`, `redis+cluster`, `rediss+cluster` and `unix` (a socket) URL schemes
(`?prefix=` picks the key prefix), and their scratch store for the `ujobs` test fixture."""

from __future__ import annotations

from jobs_core.urlparams import pop_param
from jobs_redis.driver import RedisDriver
from jobs_redis.scratch import scratch_store

__all__ = ["from_url", "scratch_store"]


def from_url(url: str) -> RedisDriver:
    """A `RedisDriver` for `url`; `?prefix=name` selects the key prefix (default `ujobs`)."""
    plain, prefix = pop_param(url, "prefix", "ujobs")
    return RedisDriver(plain, prefix=prefix)
