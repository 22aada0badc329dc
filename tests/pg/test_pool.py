"""The Postgres driver's own connection pool (`jobs_pg.driver._Pool`): what it holds."""

from __future__ import annotations

import asyncio

from jobs_pg import PgDriver
from tests.pg.conftest import PG_URL
from tests.pg.test_driver import T0


async def test_a_pool_checked_while_in_use_holds_no_more_than_its_size(pg_schema: str) -> None:
    """A failure's sweep checks the idle connections (`_Pool.check`, one round trip each)
    while calls go on. Those calls find none idle meanwhile and open new ones; once the check
    gives its connections back, the pool still holds no more than its size — it kept them
    all, and every timed-out call grew it by up to its size again, against a server that was
    likely already struggling."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=2, wake=False)
    try:
        pool = await d._ready()
        held = [await pool.getconn() for _ in range(2)]
        for conn in held:
            await pool.putconn(conn)
        for _ in range(3):
            await asyncio.gather(pool.check(), *(d.queue_demand(["q"], T0) for _ in range(4)))
        live = len(pool._born)
        assert live <= 2, f"the pool of 2 holds {live} connections"
    finally:
        await d.close()
