"""A TCP proxy in front of a Redis server that a test can cut, or cut right after a reply.

The same proxy as Postgres's (`tests.pg.proxy`), pointed at a Redis URL: `drop_next_reply()`
swallows the server's next reply (a script that already ran) and drops every connection.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from tests.pg.proxy import Proxy


class RedisProxy(Proxy):
    """Pipes to the Redis server of `upstream_url`."""

    def __init__(self, upstream_url: str) -> None:
        super().__init__(upstream_url)
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)

    def url(self, base: str) -> str:
        """`base` (the upstream Redis URL) re-pointed at this proxy."""
        host, port = self.upstream
        return base.replace(f"{host}:{port}", f"127.0.0.1:{self.port}", 1)
