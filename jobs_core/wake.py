"""Trailing wakes, shared by the drivers that ration their wake to one per queue per slot.

A driver's enqueue sends a queue's wake at most once per wake slot; a due job that went in
after its slot's wake had gone out gets one more at the slot's end (`Trails`), so an idle
worker never waits for its poll for it. The poll stays the guarantee: a trailing wake that
fails is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

_log = logging.getLogger("jobs.wake")


class Trails:
    """One driver's trailing wakes on one event loop (a PUBLISH on Redis, a NOTIFY on Postgres).

    A due job that went in quiet (its slot's wake already out, perhaps before an idle
    worker's claim that then found nothing more) would wait for the next wake or poll; one more
    wake of its queue at its slot's end covers it, unless a wake of ours that began after
    that enqueue returned does first. One pending per queue, and one a slot's length after the
    last at the soonest: at most one more a slot per queue and driver.
    """

    def __init__(self, slot_ms: int, send: Callable[[str], Awaitable[object]]) -> None:
        self._slot_ms = slot_ms
        self._send = send
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._sending: set[asyncio.Task[None]] = set()
        #: queue -> when (monotonic) the last enqueue of ours that went in quiet returned, when
        #: the last PUBLISH of ours began (an enqueue's or a trailing one), when the last
        #: trailing one was sent.
        self._quiet_at: dict[str, float] = {}
        self._published_at: dict[str, float] = {}
        self._trailed_at: dict[str, float] = {}
        self._closed = False
        #: Trailing publishes sent so far, and those carried by a quiet job's own enqueue;
        #: read by tests and benchmarks.
        self.sent = 0
        self.carries = 0

    def published(self, queue: str, began: float) -> None:
        """An enqueue of ours that began at `began` (monotonic) published `queue`'s wake."""
        if queue in self._quiet_at:
            self._published_at[queue] = began

    def quiet(self, queue: str, created_at_ms: int, began: float) -> None:
        """A due job of `queue` created at `created_at_ms`, its enqueue begun at `began`
        (monotonic), went in without a PUBLISH: one is sent at its slot's end unless covered."""
        if self._closed:
            return
        now = time.monotonic()
        self._quiet_at[queue] = now
        if queue in self._pending:
            return  # pending, so it is sent after this job went in
        if len(self._quiet_at) > 10_000:
            self._quiet_at.clear()
            self._published_at.clear()
            self._trailed_at.clear()
            self._quiet_at[queue] = now
        slot_ms = self._slot_ms
        left_s = (slot_ms - created_at_ms % slot_ms) / 1000 - (now - began)
        spaced_s = self._trailed_at.get(queue, -1e9) + slot_ms / 1000 - now
        self._pending[queue] = asyncio.get_running_loop().call_later(
            max(0.0, left_s, spaced_s), self._due, queue
        )

    def may_carry(self, queue: str) -> bool:
        """Whether a due job of `queue` about to go in quiet may carry a trailing wake in its own
        commit instead (`carried`): none is pending (that one covers it) and none was sent,
        carried or allowed a slot's length before now. True takes that slot's one more wake for
        this enqueue at once, so enqueues asked side by side carry one between them: the bound
        is the trailing one's, at most one more a slot per queue and driver (an enqueue allowed
        that then inserts nothing spends it all the same)."""
        if self._closed or queue in self._pending:
            return False
        now = time.monotonic()
        if now < self._trailed_at.get(queue, -1e9) + self._slot_ms / 1000:
            return False
        if len(self._trailed_at) > 10_000:
            self._trailed_at.clear()
        self._trailed_at[queue] = now
        return True

    def carried(self, queue: str, began: float) -> None:
        """An enqueue of ours begun at `began` (monotonic), allowed by `may_carry`, went in with
        `queue`'s wake: it stands for a trailing one (the next comes a slot's length after) and
        covers the quiet jobs before it."""
        self._trailed_at[queue] = time.monotonic()
        self.carries += 1
        self.published(queue, began)

    def _due(self, queue: str) -> None:
        self._pending.pop(queue, None)
        # A queue forgotten since (the memory's bound cleared it) still had its quiet jobs.
        quiet = self._quiet_at.get(queue, float("inf"))
        if self._closed or self._published_at.get(queue, 0.0) >= quiet:
            return  # a wake begun after the quiet jobs went in covers them
        self._trailed_at[queue] = self._published_at[queue] = time.monotonic()
        self.sent += 1
        task = asyncio.get_running_loop().create_task(self._publish(queue))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _publish(self, queue: str) -> None:
        try:
            await self._send(queue)
        except Exception as exc:  # the poll is the guarantee; this only shortens the wait
            _log.debug("trailing wake failed: %s", type(exc).__name__)

    def abandon(self) -> None:
        """Send nothing more (the loop is gone or closing)."""
        self._closed = True
        for handle in self._pending.values():
            handle.cancel()
        self._pending.clear()

    async def close(self) -> None:
        """Send nothing more and wait out a publish under way."""
        self.abandon()
        sending = list(self._sending)
        for task in sending:
            task.cancel()
        await asyncio.gather(*sending, return_exceptions=True)
