"""Helpers the Postgres tests share: what a test's schema stores, and the driver's statements
seen waiting on a row lock the test holds."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from jobs_pg import PgDriver
from jobs_pg.urls import libpq_url
from tests.pg.conftest import PG_URL, admin


async def wait_for_lock_wait(schema: str, *, count: int = 1) -> list[int]:
    """The pids of our sessions waiting on a lock in a statement naming `schema`, once there are
    at least `count` of them; fails after 20 s."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with admin() as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND application_name = 'ultimat3-jobs' AND position(%s in query) > 0",
                (schema,),
            ).fetchall()
        if len(rows) >= count:
            return [int(r[0]) for r in rows]
        await asyncio.sleep(0.05)
    raise AssertionError(f"{count} call(s) never reached the server's lock wait")


def keys_stored(schema: str) -> list[str]:
    """Every idempotency key stored in `schema`, one entry per row (so a second row shows twice)."""
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT idempotency_key FROM {}.jobs").format(sql.Identifier(schema))
        ).fetchall()
    return sorted(k for (k,) in rows)


@contextlib.asynccontextmanager
async def named_drivers(schema: str, n: int, **kwargs: Any) -> AsyncIterator[list[PgDriver]]:
    """`n` open drivers on `schema`, their sessions named after it (to find them waiting)."""
    url = f"{PG_URL}?application_name={schema}"
    drivers = [PgDriver(url, schema=schema, **kwargs) for _ in range(n)]
    try:
        for d in drivers:
            await d.open()
        yield drivers
    finally:
        for d in drivers:
            await d.close()


async def sessions_waiting(schema: str, events: Sequence[str], at_least: int = 1) -> None:
    """Until `at_least` sessions of `named_drivers(schema, ...)` wait on a lock of one of these
    kinds (`advisory`: a key's lock; `transactionid` / `tuple`: a row another transaction
    wrote or holds); fails after 20 s."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with admin() as conn:
            (n,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                " AND wait_event_type = 'Lock' AND wait_event = ANY(%s)",
                (schema, list(events)),
            ).fetchone() or (0,)
        if n >= at_least:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {at_least} calls of ours waited on a {'/'.join(events)} lock")


async def locker() -> psycopg.AsyncConnection[tuple[Any, ...]]:
    """A session of the test's own, in a transaction: it plays a racing caller."""
    return await psycopg.AsyncConnection.connect(libpq_url(PG_URL))
