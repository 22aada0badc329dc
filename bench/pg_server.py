"""A throwaway Postgres with `pg_stat_statements` loaded, and the wait that makes its cumulative
statistics current: what `bench/pg_profile.py` and the side-by-side harness measure with."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from jobs_pg.urls import libpq_url
from tests.pg.server import PgServer

# Since PostgreSQL 15 a backend flushes its cumulative stats when idle, at most once a second,
# and at exit: a second after the last client closed, every backend it had has flushed.
STATS_SETTLE_SECONDS = 1.0


@contextmanager
def throwaway_server(*, fsync: bool = False) -> Iterator[PgServer]:
    """A started PgServer (a temp dir, a spare port, initdb as `postgres` when run as root;
    never the server on 5432) with pg_stat_statements preloaded, its planning tracked,
    track_io_timing on and the extension created in its `test` database; otherwise initdb's
    defaults, `fsync` as asked. Stopped and its directory removed on the way out, however it
    is left."""
    server = PgServer(fsync=fsync)
    try:
        server.start()
        with psycopg.connect(libpq_url(server.url), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            conn.execute("ALTER SYSTEM SET track_io_timing = on")
        # shared_preload_libraries is read at server start only.
        server.restart()
        with psycopg.connect(libpq_url(server.url), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pg_stat_statements")
            # Planning is outside exec time: without this a statement planned afresh on every
            # call (a custom plan per batch) would hide its planning. The setting exists only
            # once the library is loaded.
            conn.execute("ALTER SYSTEM SET pg_stat_statements.track_planning = on")
            conn.execute("SELECT pg_reload_conf()")
        yield server
    finally:
        server.close()


def postmaster_pid(server: PgServer) -> int:
    """The process id of the started `server`'s postmaster."""
    return int((server.data / "postmaster.pid").read_text().split()[0])


def settle_stats(conn: psycopg.Connection[Any]) -> None:
    """Return once the cumulative statistics hold every exited backend's counts and `conn`'s
    own, up to and including the one statement this sends on `conn`. (`conn` is in
    autocommit: each later read is a transaction of its own, on a fresh stats snapshot.)"""
    time.sleep(STATS_SETTLE_SECONDS)
    # The flag is read as the statement's transaction ends, before the server says it is ready
    # for the next one: when this returns, the flush is done.
    conn.execute("SELECT pg_stat_force_next_flush()")
