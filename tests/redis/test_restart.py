"""A Redis server killed and restarted mid-run: typed errors, then every job done, none lost.

Runs on a throwaway redis-server this test owns (AOF with `appendfsync always`, so a kill -9
loses no acknowledged write), never on the shared one.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from jobs_core.errors import DriverUnavailableError
from jobs_core.records import Ack, ClaimParams, Fence
from jobs_core.states import JobState
from jobs_redis import RedisDriver
from tests.redis.conftest import RedisServer, fresh_prefix
from tests.redis.test_driver import T0, _until, new_job

LEASE_MS = 1000


async def test_kill_and_restart_mid_run(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", "--appendonly", "yes", "--appendfsync", "always")
    server.start()
    driver = RedisDriver(server.url, prefix=fresh_prefix(), connect_timeout=0.5)
    try:
        n = 120
        await driver.job_enqueue_many([new_job(i) for i in range(n)])
        runs: Counter[str] = Counter()
        now = T0

        async def claim_batch() -> list[Fence]:
            res = await driver.job_claim(ClaimParams(("q",), "w", 20, LEASE_MS, now))
            runs.update(c.id for c in res.jobs)
            return [c.fence for c in res.jobs]

        async def ack(fences: list[Fence]) -> None:
            assert all(await driver.job_ack([Ack(f, now) for f in fences]))

        woken: list[str] = []
        wake = await driver.wake_subscribe(["q"], woken.append)
        assert wake is not None
        await _until(wake.is_live)
        await ack(await claim_batch())
        held = await claim_batch()  # claimed, its acks never sent: the server dies
        in_flight = {f.job_id for f in held}
        server.proc.kill()  # type: ignore[union-attr]
        server.proc.wait()  # type: ignore[union-attr]

        for call in (
            lambda: driver.job_ack([Ack(f, now) for f in held]),
            lambda: driver.job_claim(ClaimParams(("q",), "w", 20, LEASE_MS, now)),
            lambda: driver.job_enqueue(new_job("during")),
            driver.open,
        ):
            started = time.monotonic()
            with pytest.raises(DriverUnavailableError):
                await call()
            assert time.monotonic() - started < 2, "an unreachable store must answer at once"

        await _until(lambda: not wake.is_live())
        server.start()  # same port, same dir: the AOF brings every acknowledged write back
        await _until_up(driver)
        assert (await driver.job_enqueue(new_job("during"))).deduped is False
        await _until(wake.is_live)  # resubscribed and proven by a fresh probe
        await wake.close()

        # The held batch's leases lapse; a later claim takes those jobs again (at-least-once).
        now += LEASE_MS
        while True:
            fences = await claim_batch()
            if not fences:
                break
            await ack(fences)

        rows = await driver.job_get_many([f"id-{i}" for i in range(n)] + ["id-during"])
        assert len(rows) == n + 1
        assert {r.state for r in rows.values()} == {JobState.COMPLETED}
        assert set(runs) == set(rows)  # no job lost
        assert {i for i, c in runs.items() if c > 1} == in_flight  # doubled: only these
        assert max(runs.values()) == 2
    finally:
        await driver.close()
        server.stop()


async def _until_up(driver: RedisDriver) -> None:
    # The pool may hold a socket from before the kill: its first use fails, typed, once.
    for _ in range(50):
        try:
            await driver.open()
            return
        except DriverUnavailableError:
            await asyncio.sleep(0.05)
    raise AssertionError("the restarted server never answered")
