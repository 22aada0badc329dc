"""The ack lane's two calls in flight: acks that end while an ack call is on its way go at once in a
second call (not behind that round trip), never a third beside two, never a second beside a call
waiting out an unavailable store; `join` and `abandon` see every call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from jobs_core.clock import SystemClock
from jobs_core.errors import DriverUnavailableError
from jobs_core.facade import Jobs
from jobs_core.records import Ack, ClaimedJob, ClaimParams
from jobs_core.settle import ACK_FLIGHTS, Settler
from jobs_core.states import JobState
from jobs_memory import MemoryDriver
from tests.core.support import declare


class Held(MemoryDriver):
    """A memory store whose ack calls wait for `release` while `hold` is set; `calls` records each
    call's job ids as it starts; then the next `down` calls fail as unavailable."""

    def __init__(self) -> None:
        super().__init__()
        self.hold = False
        self.release = asyncio.Event()
        self.calls: list[list[str]] = []
        self.down = 0

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        self.calls.append([a.fence.job_id for a in acks])
        if self.hold:
            await self.release.wait()
        if self.down:
            self.down -= 1
            raise DriverUnavailableError(detail="down")
        return await super()._job_ack(acks)


def _now() -> int:
    return int(time.time() * 1000)


async def _claimed(driver: Held, n: int) -> tuple[ClaimedJob, ...]:
    h = declare(lambda i, c: None)
    await Jobs(driver).enqueue_many(h, [{"n": i} for i in range(n)])
    return (await driver.job_claim(ClaimParams(("default",), "w", n, 30_000, _now()))).jobs


async def _turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_acks_that_end_while_an_ack_call_is_on_its_way_go_at_once_in_a_second_call() -> None:
    assert ACK_FLIGHTS == 2
    driver = Held()
    jobs = await _claimed(driver, 4)
    driver.hold = True
    settler = Settler(driver, SystemClock())
    first = [asyncio.ensure_future(settler.ack(Ack(j.fence, _now()))) for j in jobs[:2]]
    await _turns()
    second = [asyncio.ensure_future(settler.ack(Ack(j.fence, _now()))) for j in jobs[2:]]
    await _turns()
    # The second batch is on its way while the first call still waits for its answer.
    assert driver.calls == [[j.id for j in jobs[:2]], [j.id for j in jobs[2:]]]
    assert not any(f.done() for f in first + second)
    driver.release.set()
    assert await asyncio.gather(*first, *second) == [True] * 4
    rows = await driver.job_get_many([j.id for j in jobs])
    assert {rows[j.id].state for j in jobs} == {JobState.COMPLETED}


async def test_no_third_ack_call_goes_beside_two_on_their_way() -> None:
    driver = Held()
    jobs = await _claimed(driver, 5)
    driver.hold = True
    settler = Settler(driver, SystemClock())
    acks = []
    for j in jobs[:3]:
        acks.append(asyncio.ensure_future(settler.ack(Ack(j.fence, _now()))))
        await _turns()
    assert driver.calls == [[jobs[0].id], [jobs[1].id]]
    acks += [asyncio.ensure_future(settler.ack(Ack(j.fence, _now()))) for j in jobs[3:]]
    await _turns()
    assert len(driver.calls) == 2
    driver.release.set()
    assert await asyncio.gather(*acks) == [True] * 5
    # Those that waited went together, in one call, once a call came back.
    assert driver.calls[2:] == [[j.id for j in jobs[2:]]]
    await settler.join()


async def test_no_second_ack_call_goes_beside_one_waiting_out_an_unavailable_store() -> None:
    driver = Held()
    jobs = await _claimed(driver, 3)
    driver.down = 1
    settler = Settler(driver, SystemClock())
    first = asyncio.ensure_future(settler.ack(Ack(jobs[0].fence, _now())))
    await _turns()
    assert driver.calls == [[jobs[0].id]]  # refused: that flush now waits out its backoff
    later = [asyncio.ensure_future(settler.ack(Ack(j.fence, _now()))) for j in jobs[1:]]
    await _turns()
    assert len(driver.calls) == 1
    settler.store_back()
    assert await asyncio.gather(first, *later) == [True] * 3
    # The flush that backed off took the later acks with its retry: one call for all three.
    assert sorted(driver.calls[1]) == sorted(j.id for j in jobs)
    assert len(driver.calls) == 2


async def test_join_waits_for_both_calls_and_abandon_ends_both() -> None:
    driver = Held()
    jobs = await _claimed(driver, 2)
    driver.hold = True
    settler = Settler(driver, SystemClock())
    landed: list[bool] = []
    for j in jobs:
        assert settler.ack_then(Ack(j.fence, _now()), landed.append)
        await _turns()
    assert len(driver.calls) == 2
    joined = asyncio.ensure_future(settler.join())
    await _turns()
    assert not joined.done()
    driver.release.set()
    await joined
    assert landed == [True, True]

    more = await _claimed(driver, 2)
    driver.release = asyncio.Event()
    for j in more:
        assert settler.ack_then(Ack(j.fence, _now()), landed.append)
        await _turns()
    assert len(driver.calls) == 4
    settler.abandon()
    await asyncio.wait_for(settler.join(), 1)


async def test_two_calls_meeting_an_unavailable_store_back_off_as_one_and_land_once_back() -> None:
    driver = Held()
    jobs = await _claimed(driver, 2)
    driver.hold = True
    driver.down = 2
    settler = Settler(driver, SystemClock())
    acks = []
    for j in jobs:
        acks.append(asyncio.ensure_future(settler.ack(Ack(j.fence, _now()))))
        await _turns()
    assert len(driver.calls) == 2
    driver.hold = False
    driver.release.set()  # both calls come back unavailable
    await _turns()
    # One flush handed its items to the other, which waits out the one backoff.
    assert sum(not t.done() for t in settler._acks._tasks) == 1
    assert len(driver.calls) == 2
    began = time.monotonic()
    settler.store_back()
    assert await asyncio.wait_for(asyncio.gather(*acks), 1) == [True, True]
    assert time.monotonic() - began < 0.05  # the kick ended the backoff at once
    assert sorted(driver.calls[2]) == sorted(j.id for j in jobs)
