"""`Snapshot`, the queues page's shared count: fresh answers cost no read, stale ones are
answered at once while one background read replaces them, old or failed ones are read again
before answering, reads never overlap, and an action's `expire` is never answered by a read
that started before it."""

from __future__ import annotations

import asyncio

import pytest

from jobs_core.dashboard.snapshot import Snapshot


class Source:
    """A read that counts its calls, answers its call number, and may be held or made to fail."""

    def __init__(self) -> None:
        self.calls = 0
        self.running = 0
        self.most_at_once = 0
        self.gate: asyncio.Event | None = None
        self.fail: Exception | None = None

    async def read(self) -> int:
        self.calls += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            if self.gate is not None:
                await self.gate.wait()
            else:
                await asyncio.sleep(0)
            if self.fail is not None:
                raise self.fail
            return self.calls
        finally:
            self.running -= 1


def snapshot(source: Source, now: list[float]) -> Snapshot[int]:
    return Snapshot(source.read, fresh_s=5, stale_s=30, clock=lambda: now[0])


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_viewers_at_once_share_one_read_and_a_fresh_answer_costs_none() -> None:
    source, now = Source(), [100.0]
    snap = snapshot(source, now)
    answers = await asyncio.gather(*(snap.get() for _ in range(5)))
    assert answers == [(1, 0.0)] * 5 and source.calls == 1
    now[0] += 4
    assert await snap.get() == (1, 4.0)
    await settle()
    assert source.calls == 1


async def test_a_stale_answer_comes_at_once_while_one_background_read_replaces_it() -> None:
    source, now = Source(), [100.0]
    snap = snapshot(source, now)
    await snap.get()
    source.gate = asyncio.Event()
    now[0] += 6
    assert await snap.get() == (1, 6.0)  # not waiting on the held read
    assert await snap.get() == (1, 6.0)
    await settle()
    assert source.calls == 2 and source.running == 1  # one read, under way
    source.gate.set()
    await settle()
    assert await snap.get() == (2, 0.0)
    assert source.most_at_once == 1


async def test_an_old_answer_is_read_again_before_anyone_sees_it() -> None:
    source, now = Source(), [100.0]
    snap = snapshot(source, now)
    await snap.get()
    now[0] += 31
    assert await snap.get() == (2, 0.0)


async def test_a_failed_read_is_shown_and_the_next_view_reads_again() -> None:
    source, now = Source(), [100.0]
    snap = snapshot(source, now)
    source.fail = ConnectionError("store down")
    with pytest.raises(ConnectionError):
        await snap.get()
    source.fail = None
    assert await snap.get() == (2, 0.0)
    # A background read that fails is not hidden behind the old answer either.
    now[0] += 6
    source.fail = ConnectionError("store down")
    assert (await snap.get())[0] == 2
    await settle()
    with pytest.raises(ConnectionError):
        await snap.get()


async def test_after_expire_only_a_read_that_started_later_answers() -> None:
    source, now = Source(), [100.0]
    snap = snapshot(source, now)
    await snap.get()
    now[0] += 6
    source.gate = asyncio.Event()
    await snap.get()  # starts read 2, held
    await settle()
    snap.expire()  # an action lands while read 2 is under way
    waiting = asyncio.create_task(snap.get())
    await settle()
    source.gate.set()
    assert await waiting == (3, 0.0)
    assert source.calls == 3 and source.most_at_once == 1


async def test_a_viewer_who_leaves_does_not_cancel_the_read_others_wait_for() -> None:
    source, now = Source(), [100.0]
    snap = snapshot(source, now)
    source.gate = asyncio.Event()
    leaving = asyncio.create_task(snap.get())
    staying = asyncio.create_task(snap.get())
    await settle()
    leaving.cancel()
    source.gate.set()
    assert await staying == (1, 0.0)
    assert source.calls == 1


async def test_a_read_slower_than_the_stale_bound_still_answers() -> None:
    source, now = Source(), [100.0]
    snap = snapshot(source, now)

    async def slow() -> int:
        now[0] += 31  # each read takes longer than the counts may be old
        return await Source.read(source)

    snap = Snapshot(slow, fresh_s=5, stale_s=30, clock=lambda: now[0])
    value, age = await snap.get()
    assert value == 1 and age == 31 and source.calls == 1
