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

from bench.cpu import backend_cpu, cluster_cpu, postgres_cpu
from bench.pg_server import settle_stats

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


# A system's probe: reads its own tables or keys, given how many jobs it was handed, in one
# statement on Postgres (the harness counts its own statements by that).
Probe = Callable[[Any, int], Progress]


@dataclass(frozen=True)
class Counters:
    """Cumulative Postgres counters of one database, read when every backend's stats are
    flushed; `own` is how many statements the harness had sent to that database by then."""

    lsn: int  # the WAL position, in bytes: the whole server's writes
    commits: int  # pg_stat_database.xact_commit
    statements: int | None  # calls summed over pg_stat_statements; None without the extension
    own: int

    def per_job(self, later: Counters, jobs: int) -> dict[str, float | None]:
        """From this reading to `later`, per job, less the harness's own statements (each one
        a transaction of its own, in autocommit)."""
        own = later.own - self.own
        statements = (
            None
            if self.statements is None or later.statements is None
            else (later.statements - self.statements - own) / jobs
        )
        return {
            "wal_bytes_per_job": (later.lsn - self.lsn) / jobs,
            "statements_per_job": statements,
            "commits_per_job": (later.commits - self.commits - own) / jobs,
        }


class Target(Protocol):
    """One system's store for one phase."""

    url: str

    def settle(self) -> None:
        """Bring the store to its steady state after a bulk fill."""

    def progress(self, expected: int) -> Progress: ...

    def server_cpu(self) -> float: ...

    def counters(self) -> Counters | None:
        """The database's counters once settled; None where the store has none (Redis)."""


class PgTarget:
    def __init__(
        self, url: str, conn: psycopg.Connection[Any], probe: Probe, server: PgServer
    ) -> None:
        self.url = url
        self._conn = conn
        self._probe = probe
        self._server = server
        self._backend = conn.info.backend_pid
        # Statements this harness sent to the database (each its own transaction): its share of
        # the database's statement and commit counts.
        self._sent = 0

    def settle(self) -> None:
        # A fresh database has no planner statistics: its first plans over 10,000 new rows are
        # guesses no running queue lives with for long (autovacuum analyzes within a minute).
        self._conn.execute("ANALYZE")
        self._sent += 1

    def progress(self, expected: int) -> Progress:
        self._sent += 1
        return self._probe(self._conn, expected)

    def server_cpu(self) -> float:
        # The harness's own probe queries run on the server too: they are not the system's.
        return self._server.cpu() - backend_cpu(self._backend)

    def counters(self) -> Counters:
        settle_stats(self._conn)
        self._sent += 1
        return self._server.counters(self._conn.info.dbname, self._sent)


class PgServer:
    """Postgres at `admin_url`; its databases named `bench_<system>` are the benchmark's.

    `postmaster`: the process id of a server the benchmark started for itself, whose CPU is
    then its cluster's alone; None for a server given by URL, whose CPU is every `postgres`
    process on the machine."""

    def __init__(self, admin_url: str, postmaster: int | None = None) -> None:
        self.admin_url = admin_url
        self.postmaster = postmaster
        with psycopg.connect(admin_url) as conn:
            row = conn.execute(
                "SELECT current_setting('server_version'),"
                " current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'"
                " AND EXISTS (SELECT FROM pg_extension WHERE extname = 'pg_stat_statements')"
            ).fetchone()
        assert row is not None
        self._version: str = row[0]
        # Read from the admin database, whose own statements do not count in the benchmark's.
        self.has_statements: bool = row[1]

    def version(self) -> str:
        return f"PostgreSQL {self._version}"

    def cpu(self) -> float:
        """User + system CPU seconds of the server (see the class)."""
        return postgres_cpu() if self.postmaster is None else cluster_cpu(self.postmaster)

    def counters(self, database: str, own: int) -> Counters:
        """`database`'s counters as they stand (settle them first), read from the admin
        database so that reading them adds nothing to them."""
        statements = (
            "(SELECT sum(calls) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
            " WHERE d.datname = %(db)s)"
            if self.has_statements
            else "NULL"
        )
        with psycopg.connect(self.admin_url) as conn:
            row = conn.execute(
                "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn,"
                " (SELECT xact_commit FROM pg_stat_database WHERE datname = %(db)s),"
                f" {statements}",
                {"db": database},
            ).fetchone()
        assert row is not None
        lsn, commits, calls = row
        return Counters(int(lsn), int(commits), None if calls is None else int(calls), own)

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
            # Never prepared: psycopg prepares a statement on its sixth run, in a transaction
            # of its own that the commit count would show and the harness would not count.
            with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
                yield PgTarget(url, conn, system.probe, self)
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

    def counters(self) -> None:
        """Redis keeps no WAL, statement or commit counts to read."""


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
