"""Redis backend: `RedisDriver`, one Lua script per driver operation (install `[redis]`)."""

from jobs_redis.driver import RedisDriver

__all__ = ["RedisDriver"]
