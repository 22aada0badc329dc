"""`Trails`: a trailing wake that falls due while an enqueue of ours of its queue is under way
is left to the enqueues — the next one carries it in its own commit, or the last one's end
sends it — so a producer's enqueues one after another send no wake in a transaction of its own.
"""

from __future__ import annotations

import asyncio
import time

from jobs_core.wake import Trails

SLOT_MS = 20


def _trails() -> tuple[Trails, list[str]]:
    sent: list[str] = []

    async def send(queue: str) -> None:
        sent.append(queue)

    return Trails(SLOT_MS, send), sent


def _quiet_enqueue(trails: Trails, queue: str = "q") -> None:
    """An enqueue of a due job that went in quiet, over at once."""
    trails.begin(queue)
    began = time.monotonic()
    trails.quiet(queue, int(time.time() * 1000), began)
    trails.end(queue)


async def _past_the_slot() -> None:
    await asyncio.sleep(2 * SLOT_MS / 1000)


async def test_with_no_enqueue_under_way_the_wake_goes_at_the_slots_end() -> None:
    trails, sent = _trails()
    _quiet_enqueue(trails)
    await _past_the_slot()
    assert (sent, trails.sent) == (["q"], 1)


async def test_an_enqueue_under_way_at_the_slots_end_carries_the_wake_of_the_next() -> None:
    trails, sent = _trails()
    _quiet_enqueue(trails)
    assert trails.begin("q") is False  # under way as the slot ends: nothing owed yet
    await _past_the_slot()
    assert sent == []
    trails.quiet("q", int(time.time() * 1000), time.monotonic())
    trails.end("q")
    # The next enqueue, begun at once (before the loop turns), takes the owed wake…
    assert trails.begin("q") is True
    trails.carried("q", time.monotonic())
    trails.end("q")
    assert trails.begin("q") is False  # …once: the one after owes nothing
    trails.end("q")
    await _past_the_slot()
    assert (sent, trails.sent, trails.carries) == ([], 0, 1)


async def test_the_last_enqueue_under_way_sends_the_owed_wake_when_it_ends() -> None:
    trails, sent = _trails()
    _quiet_enqueue(trails)
    trails.begin("q")
    await _past_the_slot()
    assert sent == []
    trails.end("q")  # it went in with nothing (a dedupe): no other enqueue follows
    await asyncio.sleep(0.01)
    assert (sent, trails.sent) == (["q"], 1)


async def test_an_owed_wake_whose_carrier_does_not_land_goes_after_it() -> None:
    trails, sent = _trails()
    _quiet_enqueue(trails)
    trails.begin("q")
    await _past_the_slot()
    trails.end("q")
    assert trails.begin("q") is True  # to carry it, but it raises: no wake went out
    trails.end("q")
    await asyncio.sleep(0.01)
    assert (sent, trails.sent) == (["q"], 1)


async def test_a_wake_of_ours_begun_after_the_quiet_jobs_covers_the_owed_one() -> None:
    trails, sent = _trails()
    _quiet_enqueue(trails)
    trails.begin("q")
    began = time.monotonic()
    await _past_the_slot()
    trails.published("q", began)  # the one under way woke the queue (a new slot's)
    trails.end("q")
    await asyncio.sleep(0.01)
    assert (sent, trails.sent) == ([], 0)
