"""The servers the systems share: each phase of each system gets a store of its own (a fresh
database on Postgres, an empty db number on Redis), dropped or flushed after it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

from bench.cpu import backend_cpu, postgres_cpu

if TYPE_CHECKING:
    from bench.systems import System


class BenchError(Exception):
    """The benchmark cannot go on; the message says why."""


@dataclass(frozen=True)
class Progress:
    """What the store says of a batch of jobs, read by the harness and never by the worker."""

    # Jobs no worker has touched yet; None where the store cannot tell it cheaply.
    untouched: int | None
    # Jobs not finished yet.
    unfinished: int


# A system's probe: reads its own tables or keys, given how many jobs it was handed.
Probe = Callable[[Any, int], Progress]


class Target(Protocol):
    """One system's store for one phase."""

    url: str

    def settle(self) -> None:
        """Bring the store to its steady state after a bulk fill."""

    def progress(self, expected: int) -> Progress: ...

    def server_cpu(self) -> float: ...


class PgTarget:
    def __init__(self, url: str, conn: psycopg.Connection[Any], probe: Probe) -> None:
        self.url = url
        self._conn = conn
        self._probe = probe
        self._backend = conn.info.backend_pid

    def settle(self) -> None:
        # A fresh database has no planner statistics: its first plans over 10,000 new rows are
        # guesses no running queue lives with for long (autovacuum analyzes within a minute).
        self._conn.execute("ANALYZE")

    def progress(self, expected: int) -> Progress:
        return self._probe(self._conn, expected)

    def server_cpu(self) -> float:
        # The harness's own probe queries run on the server too: they are not the system's.
        return postgres_cpu() - backend_cpu(self._backend)


class PgServer:
    """Postgres at `admin_url`; its databases named `bench_<system>` are the benchmark's."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url

    def version(self) -> str:
        with psycopg.connect(self.admin_url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        assert row is not None
        return f"PostgreSQL {row[0]}"

    def _admin(self, statement: str, name: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL(statement).format(sql.Identifier(name)))

    @contextmanager
    def fresh(self, system: System) -> Iterator[PgTarget]:
        name = f"bench_{system.name}"
        self._admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
        self._admin("CREATE DATABASE {}", name)
        url = urlunsplit(urlsplit(self.admin_url)._replace(path=f"/{name}"))
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                yield PgTarget(url, conn, system.probe)
        finally:
            # FORCE: a worker that outlived its phase must not keep the next one from starting.
            self._admin("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)


class RedisTarget:
    def __init__(self, url: str, client: redis.Redis[Any], probe: Probe) -> None:
        self.url = url
        self._client = client
        self._probe = probe

    def settle(self) -> None:
        """Redis has no planner: nothing to settle."""

    def progress(self, expected: int) -> Progress:
        return self._probe(self._client, expected)

    def server_cpu(self) -> float:
        cpu = self._client.info("cpu")
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


class RedisServer:
    """Redis at `url`; the db numbers the systems are given are the benchmark's alone."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def version(self) -> str:
        with redis.Redis.from_url(self.url) as client:
            return f"Redis {client.info('server')['redis_version']}"

    @contextmanager
    def fresh(self, system: System) -> Iterator[RedisTarget]:
        db = system.redis_db
        url = f"{self.url}/{db}"
        with redis.Redis.from_url(url) as client:
            if client.dbsize():
                raise BenchError(
                    f"redis db {db} is not empty and the benchmark flushes it: if it is a "
                    f"leftover of an interrupted benchmark, run `redis-cli -n {db} flushdb`"
                )
            try:
                yield RedisTarget(url, client, system.probe)
            finally:
                client.flushdb()
