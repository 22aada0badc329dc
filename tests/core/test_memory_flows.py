"""The memory driver's flow family beyond the parity scenarios: its finish listeners (called
after the write, outside the lock; one that raises is dropped and breaks nothing) and its edge
bookkeeping (a finish costs its waiters; nothing is left behind once joins are done)."""

from __future__ import annotations

import logging

import pytest

from jobs_core.records import Ack, ClaimParams, JoinEnqueue, JoinPolicy, JoinState, PurgeParams
from jobs_core.states import JobState
from jobs_core.testing.scenarios.support import T0, new_job
from jobs_memory import MemoryDriver
from tests.core_driver import CoreDriver


async def test_a_driver_without_the_family_offers_no_finish_channel() -> None:
    assert await CoreDriver().finish_subscribe(lambda _: None) is None


async def test_listeners_run_after_the_write_outside_the_lock_and_a_raising_one_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    driver = MemoryDriver()
    await driver.job_enqueue_many([new_job("a"), new_job("b")])
    await driver.job_watch(["a", "b"])
    heard: list[tuple[str, JobState, bool]] = []

    def good(job_id: str) -> None:
        # The write is done and the lock free: the listener may read the row at once.
        free = driver._lock.acquire(blocking=False)
        if free:
            driver._lock.release()
        heard.append((job_id, driver._rows[job_id].rec.state, free))

    def bad(job_id: str) -> None:
        raise RuntimeError("a broken listener")

    bad_sub = await driver.finish_subscribe(bad)
    good_sub = await driver.finish_subscribe(good)
    assert bad_sub is not None and good_sub is not None and bad_sub.is_live()
    claimed = await driver.job_claim(ClaimParams(("q",), "w", 2, 1000, T0))
    fences = {j.id: j.fence for j in claimed.jobs}
    with caplog.at_level(logging.ERROR, logger="jobs_memory.driver"):
        assert await driver.job_ack([Ack(fences["a"], T0 + 1)]) == [True]
    assert heard == [("a", JobState.COMPLETED, True)]
    assert "a finish listener raised" in caplog.text
    assert not bad_sub.is_live() and good_sub.is_live()
    await good_sub.close()
    assert not good_sub.is_live()
    assert await driver.job_ack([Ack(fences["b"], T0 + 2)]) == [True]
    assert heard == [("a", JobState.COMPLETED, True)]


async def test_many_children_leave_no_edge_behind() -> None:
    driver = MemoryDriver()
    n = 2_000
    children = [new_job(f"c{i:05}") for i in range(n)]
    await driver.job_enqueue_many(children[:1000])
    await driver.job_enqueue_many(children[1000:])
    after = tuple(c.id for c in children)
    (answer,) = await driver.join_enqueue([JoinEnqueue(new_job("parent", queue="p"), after)])
    assert answer.enqueued is not None and not answer.enqueued.deduped
    # Every child links the one waiter; the waiter links every child.
    assert len(driver._waiting["parent"]) == n and len(driver._waiters) == n
    for at in (T0 + 1, T0 + 2):
        claimed = await driver.job_claim(ClaimParams(("q",), "w", 1000, 1000, T0))
        assert len(claimed.jobs) == 1000
        assert await driver.job_ack([Ack(j.fence, at) for j in claimed.jobs]) == [True] * 1000
        if at == T0 + 1:
            assert driver._rows["parent"].rec.join == JoinState(n, 1000, 0, JoinPolicy.SUCCESS)
    parent = (await driver.job_get_many(["parent"]))["parent"]
    assert (parent.state, parent.run_at_ms) == (JobState.READY, T0 + 2)
    assert parent.join == JoinState(n, 0, 0, JoinPolicy.SUCCESS)
    assert driver._waiting == {} and driver._waiters == {}
    # Watched marks go with their rows.
    await driver.job_watch(["c00000", "parent"])
    purged = await driver.job_purge(PurgeParams(T0 + 3, 10, 0, 0, 0, 0))
    assert purged == 10 and "c00000" not in driver._watched and "parent" in driver._watched
