"""The webhook attempts' purge on Postgres: one range of `webhook_attempts_age`, oldest first,
batch after batch, never touching the endpoints."""

from __future__ import annotations

from typing import Any

from psycopg import sql

from jobs_core.records import WebhookAttemptListParams
from jobs_pg import PgDriver
from tests.core.support import T0
from tests.core.webhook_support import record_attempts
from tests.pg.conftest import admin


async def test_the_attempt_purge_reads_the_age_index(pg: PgDriver) -> None:
    """Among many attempts of many endpoints, the purge's read is a range of
    `webhook_attempts_age` (at, job id, claims), not a scan of the table."""
    s = sql.Identifier(pg.schema)
    with admin() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.webhook_attempts SELECT 'j' || i, 1, 't' || (i % 50), 'e', 'm',"
                " 'failed', 500, 1, '', 'x', i FROM generate_series(1, 20000) AS i"
            ).format(s)
        )
        conn.execute(sql.SQL("ANALYZE {}.webhook_attempts").format(s))
    stmt = pg._q["WEBHOOK_ATTEMPT_PURGE"]
    async with pg._conn() as conn:
        cur = await conn.execute("EXPLAIN " + stmt.text, stmt.args({"before_ms": 5, "limit": 100}))
        plan = "\n".join(r[0] for r in await cur.fetchall())
    assert "webhook_attempts_age" in plan, plan


async def test_a_backlog_goes_in_batches_oldest_first(pg: PgDriver) -> None:
    """2,500 old attempts and 10 recent ones: batches of 1,000 take the old ones only, in
    three calls (the last one short); the endpoint keeps its streak."""
    await record_attempts(pg, 1000, T0 + 1, "a")
    await record_attempts(pg, 1000, T0 + 2, "b")
    await record_attempts(pg, 500, T0 + 3, "c")
    await record_attempts(pg, 10, T0 + 10, "d")
    endpoint = await pg.webhook_endpoint_get("t1", "orders")
    assert endpoint is not None and endpoint.failures == 2510
    got = [await pg.webhook_attempt_purge(T0 + 10, 1000) for _ in range(4)]
    assert got == [1000, 1000, 500, 0], got
    left = await pg.webhook_attempt_list(WebhookAttemptListParams("t1", "orders", 1000))
    assert sorted(a.job_id for a in left) == [f"d{i:05d}" for i in range(10)]
    assert await pg.webhook_endpoint_get("t1", "orders") == endpoint
    rows: Any
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT count(*) FROM {}.webhook_attempts").format(sql.Identifier(pg.schema))
        ).fetchall()
    assert rows == [(10,)]
