"""`LoopLocal`: one holder per event loop, closed with its loop (asyncio.run) or by close_all,
on its own loop when that loop still runs elsewhere, abandoned when it is gone; and
`cancel_and_wait`, which ends a task that dropped a cancel."""

from __future__ import annotations

import asyncio
import threading

import pytest

from jobs_core import loops
from jobs_core.loops import RECANCEL_S, LoopLocal, cancel_and_wait


class Holder:
    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.closed_on: asyncio.AbstractEventLoop | None = None
        self.abandoned = False


def make_local() -> LoopLocal[Holder]:
    async def close(h: Holder) -> None:
        await asyncio.sleep(0)  # a close does I/O on its own loop
        h.closed_on = asyncio.get_running_loop()

    def abandon(h: Holder) -> None:
        h.abandoned = True

    return LoopLocal(Holder, close, abandon)


def test_each_loop_gets_its_own_holder_closed_when_asyncio_run_ends() -> None:
    local = make_local()

    async def use() -> tuple[Holder, Holder]:
        return local.get(), local.get()

    first, same = asyncio.run(use())
    second, _ = asyncio.run(use())
    assert first is same and first is not second
    assert first.closed_on is first.loop and second.closed_on is second.loop
    assert not first.abandoned and local.values() == []


def test_a_close_that_never_ends_does_not_hold_asyncio_run_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loops, "CLOSE_AT_SHUTDOWN_S", 0.2)
    held: list[Holder] = []

    async def close(h: Holder) -> None:
        await asyncio.get_running_loop().create_future()  # a peer that never answers

    def abandon(h: Holder) -> None:
        h.abandoned = True

    local = LoopLocal(Holder, close, abandon)

    async def use() -> None:
        held.append(local.get())

    # In a thread, so that the old behaviour fails this test instead of hanging the suite.
    ran = threading.Thread(target=asyncio.run, args=(use(),), daemon=True)
    ran.start()
    ran.join(5)
    assert not ran.is_alive(), "asyncio.run's shutdown waited on the holder's close"
    assert held[0].abandoned and local.values() == []


def test_close_all_closes_each_holder_on_its_own_loop() -> None:
    local = make_local()
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        elsewhere = asyncio.run_coroutine_threadsafe(_get(local), other).result(5)
        gone_loop = asyncio.new_event_loop()
        gone = gone_loop.run_until_complete(_get(local))
        gone_loop.close()  # closed without asyncio.run's shutdown: nothing could close it there

        async def main() -> Holder:
            here = local.get()
            await local.close_all()
            return here

        here = asyncio.run(main())
        assert here.closed_on is here.loop
        assert elsewhere.closed_on is other and not elsewhere.abandoned
        assert gone.abandoned and gone.closed_on is None
        assert local.values() == []
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(5)
        other.close()


async def _get(local: LoopLocal[Holder]) -> Holder:
    return local.get()


async def test_cancel_and_wait_ends_a_task_that_dropped_its_first_cancel() -> None:
    cancels_seen = 0

    async def runs_on() -> None:
        nonlocal cancels_seen
        while True:  # a loop that ends only when cancelled, like a LISTEN session's
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancels_seen += 1
                if cancels_seen > 1:
                    raise
                # Dropped, as Python 3.11's `asyncio.wait_for` (inside psycopg) may drop it.

    task = asyncio.ensure_future(runs_on())
    await asyncio.sleep(0)
    async with asyncio.timeout(10 * RECANCEL_S + 5):
        await cancel_and_wait(task)
    assert task.cancelled() and cancels_seen == 2


async def test_cancel_and_wait_retrieves_what_the_task_ended_with() -> None:
    async def fails_when_cancelled() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise RuntimeError("moot") from None

    task = asyncio.ensure_future(fails_when_cancelled())
    await asyncio.sleep(0)
    await cancel_and_wait(task)  # neither raised here nor logged as never retrieved
    assert isinstance(task.exception(), RuntimeError)
    done = asyncio.ensure_future(asyncio.sleep(0))
    await done
    await cancel_and_wait(done)  # a task already done: nothing to cancel
