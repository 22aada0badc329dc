"""Outage scenarios run on REAL throwaway servers (Postgres and Redis), each stopped and started.

Every scenario takes a `Store`: a way to stop and start the test's own server and to open a
driver on it. The bodies record their runs here, outside the store, so a run the store forgot
or a run done twice is seen. `throwaway_pg` and `throwaway_redis` are those servers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import DriverUnavailableError
from jobs_core.facade import Jobs
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.worker import Worker
from tests.core.support import declare
from tests.pg.server import PgServer
from tests.redis.conftest import RedisServer


@contextlib.contextmanager
def throwaway_pg() -> Iterator[PgServer]:
    """A Postgres server of the caller's own, started; stopped and removed on exit (an initdb
    costs seconds: share one per module)."""
    s = PgServer()
    try:
        s.start()
        yield s
    finally:
        s.close()


@contextlib.contextmanager
def throwaway_redis(path: Path) -> Iterator[RedisServer]:
    """A Redis server of the caller's own in `path`, started; stopped on exit."""
    # AOF, fsync on every write: a stop and start loses nothing the server acknowledged.
    s = RedisServer(path, "--appendonly", "yes", "--appendfsync", "always")
    s.start()
    try:
        yield s
    finally:
        s.stop()


@dataclass
class Store:
    """The test's own server: stop (the outage), start (it comes back), a driver on it."""

    stop: Callable[[], None]
    start: Callable[[], None]
    driver: Callable[[], AbstractAsyncContextManager[JobDriver]]


async def until(check: Callable[[], Any], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while True:
        answer = check()
        if asyncio.iscoroutine(answer):
            answer = await answer
        if answer:
            return
        assert time.monotonic() < deadline, f"never reached: {what}"
        await asyncio.sleep(0.05)


async def rows_in(driver: JobDriver, ids: Sequence[str], *states: JobState) -> bool:
    """All of `ids` are in one of `states`; False while the harness's own read finds the store
    still coming back (the worker under test rides that out on its own)."""
    try:
        rows = await driver.job_get_many(ids)
    except DriverUnavailableError:
        return False
    return len(rows) == len(ids) and all(r.state in states for r in rows.values())


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def captured() -> Any:
    handler = _Lines()
    logger = logging.getLogger("jobs")
    logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)


@contextlib.asynccontextmanager
async def stopping(worker: Worker) -> AsyncIterator[Worker]:
    try:
        yield worker
    finally:
        await worker.stop(5)


async def body_finishing_during_an_outage_completes_once(store: Store) -> dict[str, int]:
    """A body finishing during a 3 s outage (lease 30 s) ends completed, attempt 1, run once.

    Meanwhile the claim loop backs off: a bounded number of `jobs.claim.failed` lines.
    """
    runs: Counter[int] = Counter()
    finish = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> str:
        runs[input["n"]] += 1
        await finish.wait()
        return "done"

    h = declare(body)
    async with store.driver() as driver:
        queued = await Jobs(driver).enqueue(h, {"n": 1})
        worker = Worker(driver, [h], lease=30.0, poll_floor=0.05)
        await worker.start()
        async with stopping(worker):
            await until(lambda: runs[1] == 1, 15, "the body runs")
            with captured() as lines:
                await asyncio.to_thread(store.stop)
                started = time.monotonic()
                finish.set()  # the body ends now, while the store is down: its ack must wait
                await asyncio.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
                await asyncio.to_thread(store.start)
                await until(
                    lambda: rows_in(driver, [queued.id], JobState.COMPLETED), 20, "completed"
                )
            row = (await driver.job_get_many([queued.id]))[queued.id]
        assert row.state is JobState.COMPLETED and row.attempt == 1 and row.claims == 1, row
        assert runs == Counter({1: 1})
        claim_failed = sum("jobs.claim.failed" in line for line in lines)
        # Backing off from 0.1 s doubling: a handful of lines for a 3 s outage (~60 at the floor).
        assert claim_failed <= 8, [line for line in lines if "jobs.claim.failed" in line]
        return {"claim_failed_lines": claim_failed}


async def finished_final_attempts_outlive_a_short_outage(store: Store) -> None:
    """Three workers (lease 4 s) run nine jobs, each on its final attempt; the store goes down
    for about 3.3 s, less than the lease, and every body finishes meanwhile. Once it is back,
    every job is `completed` (attempt 1, run once): no worker that came back first buries a
    lease that lapsed during the outage before its holder's ack lands (issue 24, item 18)."""
    runs: Counter[int] = Counter()
    down = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> str:
        runs[input["n"]] += 1
        await down.wait()
        # The bodies end one by one during the outage (within 1.6 s: none outlives its lease
        # unrenewed), so the workers meet it at different moments, as processes whose claim
        # loops back off out of step do.
        await asyncio.sleep(0.2 * input["n"])
        return "done"

    h = declare(body, retry=Retry(attempts=1))
    async with contextlib.AsyncExitStack() as stack:
        driver = await stack.enter_async_context(store.driver())
        queued = await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(9)])
        ids = [q.id for q in queued]
        for _ in range(3):
            # A driver each, as three processes would have: their pools fail and recover apart.
            own = await stack.enter_async_context(store.driver())
            worker = Worker(own, [h], lease=4.0, concurrency=3, poll_floor=0.05)
            await worker.start()
            stack.push_async_callback(worker.stop, 5)
        # Three slots each: every worker holds three of the nine.
        await until(lambda: len(runs) == 9, 15, "every body runs")
        with captured() as lines:
            started = time.monotonic()
            await asyncio.to_thread(store.stop)
            down.set()
            # Started again 3 s after the stop began: with the restart itself, down ~3.3 s.
            await asyncio.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
            await asyncio.to_thread(store.start)
            final = (JobState.COMPLETED, JobState.DEAD, JobState.FAILED)
            await until(lambda: rows_in(driver, ids, *final), 20, "every job settled")
        rows = await driver.job_get_many(ids)
    states = Counter(r.state.value for r in rows.values())
    buried = [line for line in lines if "jobs.claim.buried" in line or "unowned" in line]
    assert states == Counter({"completed": 9}), (states, buried)
    assert {(r.attempt, r.claims) for r in rows.values()} == {(1, 1)}, rows
    assert runs == Counter(dict.fromkeys(range(9), 1)), runs


async def limited_runs_ride_out_an_outage(store: Store) -> None:
    """A job of `concurrency=1` whose run ends during a 3 s outage (lease 30 s): its follower
    takes the slot over without the store, every job completes once, attempt 1, and never two
    bodies at once; the limit survives the store's absence."""
    runs: Counter[int] = Counter()
    now_running: list[int] = []
    most = 0
    first_ends = asyncio.Event()

    async def body(input: Any, ctx: JobContext) -> None:
        nonlocal most
        runs[input["n"]] += 1
        now_running.append(input["n"])
        most = max(most, len(now_running))
        try:
            if input["n"] == 0:
                await first_ends.wait()
            else:
                await asyncio.sleep(0.05)
        finally:
            now_running.remove(input["n"])

    h = declare(body, concurrency=1)
    async with store.driver() as driver:
        queued = await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(3)])
        ids = [q.id for q in queued]
        worker = Worker(driver, [h], lease=30.0, poll_floor=0.05)
        await worker.start()
        async with stopping(worker):
            await until(lambda: runs[0] == 1, 15, "the first body runs")
            await asyncio.to_thread(store.stop)
            first_ends.set()  # its slot goes to the follower while the store is down
            await asyncio.sleep(3.0)
            await asyncio.to_thread(store.start)
            await until(lambda: rows_in(driver, ids, JobState.COMPLETED), 30, "all completed")
            rows = await driver.job_get_many(ids)
    assert runs == Counter({0: 1, 1: 1, 2: 1}), runs
    assert most == 1, most
    assert {r.attempt for r in rows.values()} == {1}, rows


async def worker_started_while_the_store_is_down_waits_for_it(store: Store) -> None:
    """Started with the server down, the server up 2 s later: the worker starts and works."""
    done: list[int] = []

    async def body(input: Any, ctx: JobContext) -> None:
        done.append(input["n"])

    h = declare(body)
    async with store.driver() as driver:
        queued = await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(3)])
        await asyncio.to_thread(store.stop)
        worker = Worker(driver, [h], poll_floor=0.05)
        with captured() as lines:
            starting = asyncio.create_task(worker.start())
            await asyncio.sleep(2.0)
            assert not starting.done(), "start() must wait for the store, not fail"
            await asyncio.to_thread(store.start)
            await asyncio.wait_for(starting, 20)
        async with stopping(worker):
            ids = [q.id for q in queued]
            await until(lambda: rows_in(driver, ids, JobState.COMPLETED), 20, "completed")
        assert sorted(done) == [0, 1, 2]
        waits = [line for line in lines if "jobs.worker.store_unavailable" in line]
        # One line per backoff step (0.1, 0.2, 0.4, 0.8 s…) and one on recovery, not one per try.
        assert 2 <= len(waits) <= 8, waits
        assert "answers again" in waits[-1]


async def drain_with_the_store_back_hands_every_claim_back(store: Store) -> float:
    """A drain begun while the store is down keeps its hand-backs until the store returns.

    Two bodies run (endless), two claimed jobs wait for a slot; the store goes down, `stop(6)`
    begins, the store comes back 3 s later: every claim is handed back uncounted, in time.
    """

    async def endless(input: Any, ctx: JobContext) -> None:
        await asyncio.sleep(3600)

    h = declare(endless)
    async with store.driver() as driver:
        queued = await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(4)])
        ids = [q.id for q in queued]
        worker = Worker(driver, [h], concurrency=2, max_in_flight=4, poll_floor=0.05)
        await worker.start()
        await until(lambda: worker.stats.claimed == 4 and worker.stats.running == 2, 15, "held")
        await asyncio.to_thread(store.stop)
        started = time.monotonic()
        stop = asyncio.create_task(worker.stop(6))
        await asyncio.sleep(3.0)
        await asyncio.to_thread(store.start)
        await asyncio.wait_for(stop, 15)
        took = time.monotonic() - started
        rows = await driver.job_get_many(ids)
    assert all(r.state is JobState.READY and r.attempt == 0 for r in rows.values()), rows
    assert worker.stats.interrupted == 4
    assert took < 6 + 2, took
    return took


async def drain_while_the_store_stays_down_ends_in_time(store: Store) -> float:
    """`stop(2)` with the store down throughout returns within its budget plus 2 s."""

    async def endless(input: Any, ctx: JobContext) -> None:
        await asyncio.sleep(3600)

    h = declare(endless)
    async with store.driver() as driver:
        await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(3)])
        worker = Worker(driver, [h], concurrency=2, max_in_flight=3, poll_floor=0.05)
        await worker.start()
        await until(lambda: worker.stats.claimed == 3 and worker.stats.running == 2, 15, "held")
        await asyncio.to_thread(store.stop)
        started = time.monotonic()
        await asyncio.wait_for(worker.stop(2), 30)
        took = time.monotonic() - started
        await asyncio.to_thread(store.start)
    assert took < 2 + 2, took
    return took
