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
        #: queue -> enqueues of ours of its due jobs under way (`begin` … `end`); queue -> the
        #: trailing wake that fell due meanwhile, left to them (True: one took it to carry).
        self._flying: dict[str, int] = {}
        self._owed: dict[str, bool] = {}
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

    def begin(self, queue: str) -> bool:
        """An enqueue of ours of a due job of `queue` goes now (`end` when it is over, however
        it ends). True: it is to carry the trailing wake owed to the queue in its commit (the
        first to begin since one fell due); one that would wake the queue anyway need not."""
        self._flying[queue] = self._flying.get(queue, 0) + 1
        if self._owed.get(queue) is False:
            self._owed[queue] = True
            return True
        return False

    def end(self, queue: str) -> None:
        """An enqueue `begin` announced is over: a wake it owed and did not cover goes once no
        other enqueue of ours of the queue is under way (the next one, begun at once, takes it)."""
        left = self._flying.get(queue, 1) - 1
        if left > 0:
            self._flying[queue] = left
            return
        self._flying.pop(queue, None)
        if queue not in self._owed:
            return
        if self._published_at.get(queue, 0.0) >= self._quiet_at.get(queue, float("inf")):
            del self._owed[queue]  # a wake of ours begun after the quiet jobs covers them
            return
        self._owed[queue] = False
        asyncio.get_running_loop().call_soon(self._owed_due, queue)

    def _owed_due(self, queue: str) -> None:
        if queue in self._owed:  # else covered meanwhile
            self._settle(queue)

    def _due(self, queue: str) -> None:
        self._pending.pop(queue, None)
        self._settle(queue)

    def _settle(self, queue: str) -> None:
        """The trailing wake of `queue` falls due: sent now unless covered or left to an
        enqueue of ours under way."""
        if self._flying.get(queue) and not self._closed:
            # An enqueue of ours is under way: the next one carries the wake in its own commit,
            # or this one's end sends it (`end`) — while a producer's enqueues follow one
            # another, the wake of each slot goes with them, not in a transaction of its own.
            self._owed.setdefault(queue, False)
            return
        self._owed.pop(queue, None)
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
        self._owed.clear()

    async def close(self) -> None:
        """Send nothing more and wait out a publish under way."""
        self.abandon()
        sending = list(self._sending)
        for task in sending:
            task.cancel()
        await asyncio.gather(*sending, return_exceptions=True)
