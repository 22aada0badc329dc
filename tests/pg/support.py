"""Helpers the Postgres tests share: what a test's schema stores, and the driver's statements
seen waiting on a row lock the test holds."""

from __future__ import annotations

import asyncio
import time

from psycopg import sql

from tests.pg.conftest import admin


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
