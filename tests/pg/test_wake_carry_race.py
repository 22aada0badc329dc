"""Concurrent enqueues of one driver carry at most one trailing wake a slot between them (the
bound `Trails.may_carry` promises): each NOTIFY in a commit takes the server's one notify-queue
lock, so a burst that all carried one would serialize its commits for nothing."""

from __future__ import annotations

import asyncio

from jobs_pg import PgDriver
from tests.pg.conftest import PG_URL
from tests.pg.test_wake import LONG, T0, _subscribe, _until, job


async def test_concurrent_quiet_enqueues_carry_one_wake_between_them(pg: PgDriver) -> None:
    _, woken = await _subscribe(pg, ["q"])
    d = PgDriver(PG_URL, schema=pg.schema, pool_size=4, wake_slot_ms=LONG)
    try:
        # Four sessions open, so that the enqueues below run side by side.
        await asyncio.gather(*(d.job_get_many([f"warm-{i}"]) for i in range(8)))
        await d.job_enqueue(job(0))  # the slot's NOTIFY: every enqueue after it goes in quiet
        # All asked at once: each decides whether to carry before any of them returned.
        await asyncio.gather(*(d.job_enqueue(job(i, now=T0 + 1)) for i in range(1, 9)))
        trails = d._loops.get().trails
        assert trails is not None and trails.carries == 1, trails.carries
        await _until(lambda: len(woken) >= 2, 5)
        await asyncio.sleep(0.3)
        assert woken == ["q", "q"]
    finally:
        await d.close()
