"""`client.result` / `handle.result` on every store that declares flows: the result of a
completed job, the typed failure of a dead or cancelled one, a timeout, an unknown id, and the
wake by the store's finish announcement (not by the poll); one subscription per client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver, WakeSubscription
from jobs_core.errors import (
    JobNotFoundError,
    ResultFailedError,
    ResultTimeoutError,
    TerminalError,
)
from jobs_core.facade import Jobs
from jobs_core.records import Ack, ClaimParams
from jobs_memory import MemoryDriver
from tests.core.flows_support import ONCE, driver, ended, working
from tests.core.support import declare
from tests.outage import until

__all__ = ["driver"]  # the fixture, parametrized over the kinds that declare flows

#: A poll this long never explains a wait that ended within the test's budget.
LONG_POLL_S = 60.0


async def test_the_result_of_a_completed_job_is_its_stored_json(driver: JobDriver) -> None:
    async def body(input: Any, ctx: JobContext) -> Any:
        return {"doubled": input["n"] * 2, "tags": ["a"]}

    h = declare(body)
    client = Jobs(driver)
    done = await client.enqueue(h, {"n": 21})
    waiting = asyncio.create_task(client.result(done.id, timeout=20))
    await working(driver, [h], ended(driver, done.id))
    assert await waiting == {"doubled": 42, "tags": ["a"]}
    # A finished row answers at once, and so does the handle's own spelling.
    assert await client.result(done.id) == {"doubled": 42, "tags": ["a"]}
    await client.close()


async def test_a_dead_job_raises_result_failed_with_its_state_and_error(
    driver: JobDriver,
) -> None:
    async def body(input: Any, ctx: JobContext) -> None:
        raise TerminalError("no such card")

    h = declare(body, retry=ONCE)
    client = Jobs(driver)
    done = await client.enqueue(h, {"n": 1})
    waiting = asyncio.create_task(client.result(done.id, timeout=20))
    await working(driver, [h], ended(driver, done.id))
    with pytest.raises(ResultFailedError) as raised:
        await waiting
    assert raised.value.code == "X_RESULT_FAILED"
    assert raised.value.job_id == done.id and raised.value.state == "dead"
    assert raised.value.error is not None and "no such card" in raised.value.error
    await client.close()


async def test_a_cancelled_job_raises_result_failed(driver: JobDriver) -> None:
    h = declare(lambda i, c: None)
    client = Jobs(driver)
    done = await client.enqueue(h, {"n": 1})
    waiting = asyncio.create_task(client.result(done.id, timeout=20))
    await asyncio.sleep(0.05)
    await driver.job_cancel(done.id, client.clock.now_ms())
    with pytest.raises(ResultFailedError) as raised:
        await asyncio.wait_for(waiting, 20)
    assert (raised.value.job_id, raised.value.state) == (done.id, "cancelled")
    await client.close()


async def test_a_live_job_times_out_and_an_unknown_id_is_not_found(driver: JobDriver) -> None:
    h = declare(lambda i, c: None)
    client = Jobs(driver)
    done = await client.enqueue(h, {"n": 1})
    with pytest.raises(ResultTimeoutError) as raised:
        await client.result(done.id, timeout=0.2)
    assert raised.value.code == "X_RESULT_TIMEOUT"
    with pytest.raises(JobNotFoundError):
        await client.result("no-such-job", timeout=5)
    await client.close()


async def test_the_finish_announcement_wakes_the_waiter_long_before_its_poll(
    driver: JobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a poll of 60 s, only the announcement can end the wait within the 20 s budget:
    the waiter had read the row live (its `job_watch` answered `ready`) before the ack."""
    h = declare(lambda i, c: None)
    client = Jobs(driver, result_poll_s=LONG_POLL_S, result_poll_max_s=LONG_POLL_S)
    done = await client.enqueue(h, {"n": 1})
    watched = asyncio.Event()
    states: list[str] = []
    watch = driver.job_watch

    async def spied(job_ids: Any) -> Any:
        rows = await watch(job_ids)
        states.extend(r.state.value for r in rows.values())
        watched.set()
        return rows

    monkeypatch.setattr(driver, "job_watch", spied)
    waiting = asyncio.create_task(client.result(done.id))
    await asyncio.wait_for(watched.wait(), 20)
    assert states == ["ready"]
    # The subscription is open before the watch, but its LISTEN session is dialled beside it:
    # the ack must come once the session is proven, or its announcement meets no listener (as
    # on a loaded machine, where the poll then answers, here only after 60 s).
    opening = client._finishes._opening
    sub = await opening if opening is not None else None
    if sub is not None:
        await until(sub.is_live, 20, "the finish subscription proven")
    now = client.clock.now_ms()
    claimed = await driver.job_claim(ClaimParams((h.queue,), "w1", 1, 60_000, now))
    assert await driver.job_ack([Ack(claimed.jobs[0].fence, now, '{"ok": true}')]) == [True]
    assert await asyncio.wait_for(waiting, 20) == {"ok": True}
    await client.close()


async def test_one_subscription_serves_every_waiter_and_closes_with_the_client() -> None:
    driver = MemoryDriver()
    opened: list[WakeSubscription | None] = []
    subscribe = driver.finish_subscribe

    async def counted(on_finish: Callable[[str], None]) -> WakeSubscription | None:
        sub = await subscribe(on_finish)
        opened.append(sub)
        return sub

    driver.finish_subscribe = counted  # type: ignore[method-assign]
    h = declare(lambda i, c: i["n"])
    client = Jobs(driver, result_poll_s=LONG_POLL_S, result_poll_max_s=LONG_POLL_S)
    ids = [(await client.enqueue(h, {"n": n})).id for n in range(5)]
    waiting = [asyncio.create_task(client.result(i)) for i in ids]
    await working(driver, [h], ended(driver, *ids))
    assert await asyncio.wait_for(asyncio.gather(*waiting), 20) == [0, 1, 2, 3, 4]
    assert len(opened) == 1 and opened[0] is not None
    assert len(driver._listeners) == 1
    await client.close()
    assert driver._listeners == []


async def test_handle_result_and_result_sync_answer_the_same() -> None:
    driver = MemoryDriver()
    h = declare(lambda i, c: {"n": i["n"]})
    client = Jobs(driver)
    done = await client.enqueue(h, {"n": 3})
    await working(driver, [h], ended(driver, done.id))
    from jobs_core.facade import bound_client

    with bound_client(client):
        assert await h.result(done.id, timeout=5) == {"n": 3}
    # The sync spelling runs on the client's portal: a thread without a loop.
    sync_client = Jobs(driver)
    answer = await asyncio.to_thread(sync_client.result_sync, done.id, 5)
    assert answer == {"n": 3}
    await asyncio.to_thread(sync_client.close_sync)
    await client.close()


async def test_a_driver_without_flows_refuses_result_first() -> None:
    from jobs_core.errors import CapabilityMissingError
    from tests.core_driver import CoreDriver

    client = Jobs(CoreDriver())
    with pytest.raises(CapabilityMissingError) as raised:
        await client.result("x")
    assert raised.value.capability == "flows"
