"""The parity suite's wake scenario catches a driver whose `join_enqueue` sends no wake.

scripts/mutate_stores.py found the suite blind to a Redis `join_enqueue.lua` that never
publishes (`join_enqueue:cmp:7:0`): only `job_enqueue`'s wake was checked, so a waiter ready at
once (a batch's callback whose children all finished) sat until a worker's poll. The memory
driver offers no wake to break, so the broken driver is the real Redis driver with that bug.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from jobs_core.records import JoinEnqueue, JoinEnqueueAnswer, NewJob
from jobs_core.testing import run_scenario
from jobs_core.testing.scenarios import SCENARIOS
from jobs_core.testing.scenarios import jobs as job_scenarios
from jobs_redis import RedisDriver
from tests.redis.conftest import REDIS_URL, _real


class JoinSendsNoWake(RedisDriver):
    """`join_enqueue` inserts a ready waiter as if it were not due at creation: no PUBLISH."""

    _joining = False

    def _wake_slot(self, job: NewJob) -> str:
        return "" if self._joining else super()._wake_slot(job)

    async def _join_chunk(self, items: Sequence[JoinEnqueue]) -> list[JoinEnqueueAnswer]:
        self._joining = True
        try:
            return await super()._join_chunk(items)
        finally:
            self._joining = False


def test_the_wake_scenario_catches_a_join_enqueue_without_wake(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The live channel delivers in milliseconds; the suite's margin is for busy CI machines.
    monkeypatch.setattr(job_scenarios, "WAKE_WAIT_S", 3.0)
    scenario = SCENARIOS["wake_every_insert_path"]
    run_scenario(lambda **kw: _real(REDIS_URL, **kw), scenario)
    with pytest.raises(AssertionError, match="join_enqueue whose dependencies finished"):
        run_scenario(lambda **kw: _real(REDIS_URL, JoinSendsNoWake, **kw), scenario)
