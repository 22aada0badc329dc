"""`LoopLocal`: one holder per event loop, closed with its loop (asyncio.run) or by close_all,
on its own loop when that loop still runs elsewhere, abandoned when it is gone."""

from __future__ import annotations

import asyncio
import threading

from jobs_core.loops import LoopLocal


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
