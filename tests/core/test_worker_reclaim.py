"""A job claimed again while its last attempt's run is still ending stays the worker's own."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.records import Nack
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import declare, until


class LateNackAnswer(MemoryDriver):
    """The first nack lands at once but its answer comes late: the retried job is claimed
    again (a new attempt of the same id) before the failed attempt's run has ended."""

    def __init__(self) -> None:
        super().__init__()
        self.late = True

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        landed = await super()._job_nack(nacks)
        if self.late:
            self.late = False
            await asyncio.sleep(0.5)
        return landed


async def test_a_retry_claimed_before_the_failed_attempt_ends_is_still_heartbeaten() -> None:
    """The failed attempt's end must not drop the retry's hold: with it dropped, the retry's
    lease was no longer renewed, lapsed, and the job ran a third time while the second still
    ran (its ack then fenced off)."""
    attempts: list[int] = []
    second = asyncio.Event()

    async def flaky(input: Any, ctx: JobContext) -> str:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            raise RuntimeError("first try fails")
        second.set()
        await asyncio.sleep(1.5)  # several leases long: only heartbeats keep it
        return "ok"

    driver = LateNackAnswer()
    handle = declare(flaky, name="flaky", retry=Retry(attempts=5, base_ms=1, cap_ms=1))
    job_id = (await Jobs(driver).enqueue(handle, {"n": 1})).id
    worker = Worker(driver, [handle], poll_floor=0.001, poll_ceiling=0.01, lease=0.4)
    await worker.start()
    try:
        await asyncio.wait_for(second.wait(), 5.0)
        await asyncio.sleep(0.6)  # the failed attempt's late answer has come (0.5 s)
        leased = [(await driver.job_get_many([job_id]))[job_id].lease_until_ms]
        in_flight = worker.stats.in_flight
        await asyncio.sleep(0.3)
        leased.append((await driver.job_get_many([job_id]))[job_id].lease_until_ms)

        async def ended() -> bool:
            row = (await driver.job_get_many([job_id]))[job_id]
            return row.state is JobState.COMPLETED

        await until(ended, within=10.0)
    finally:
        await worker.stop()
    assert in_flight == 1  # still held: the drain hands it back, the heartbeat renews it
    assert leased[0] is not None and leased[1] is not None and leased[1] > leased[0]
    assert attempts == [1, 2]
    assert worker.stats.unowned == 0
