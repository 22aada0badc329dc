"""A store that is down (at start-up, under the claims): capped exponential backoff, logged once
per step, not per try; and what the worker remembers of the outage (`StoreWatch`) so that its
claims leave the leases that lapsed meanwhile to their holders for a grace."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

from jobs_core.clock import Clock
from jobs_core.settle import SETTLE_BACKOFF_MAX_MS
from jobs_core.worker.heartbeat import HEARTBEAT_RETRY_MS
from jobs_core.worker.stats import WorkerStats

log = logging.getLogger("jobs")

#: After the store answers again, for this long a worker's claims neither reclaim nor bury a
#: lease that ended after the store last answered it before the outage. Twice the longest wait
#: between a live holder's tries while the store is down (a settle's backoff ceiling; a
#: heartbeat retries sooner), so its heartbeat or settle reaches the store in time even when
#: its first try meets the store still coming up.
RECLAIM_GRACE_MS: Final = 2 * max(SETTLE_BACKOFF_MAX_MS, HEARTBEAT_RETRY_MS)

#: Backoff while the store is unavailable (start-up, claims): from the first to the last, doubling.
OUTAGE_BACKOFF_MIN_MS = 100
OUTAGE_BACKOFF_MAX_MS = 5_000
#: At the backoff's ceiling, a still-unavailable store is logged once every this many tries.
OUTAGE_LOG_EVERY = 12


class Outage:
    """Capped exponential backoff for a store that is down, logged once per step, not per try."""

    def __init__(self, event: str) -> None:
        self._event = event
        self._next_ms = OUTAGE_BACKOFF_MIN_MS
        self._tries = 0

    def failed(self, exc: BaseException) -> int:
        """The wait before the next try; logs when the wait grows (and now and then at the cap)."""
        wait = self._next_ms
        self._tries += 1
        at_cap = wait >= OUTAGE_BACKOFF_MAX_MS
        if not at_cap or self._tries % OUTAGE_LOG_EVERY == 0:
            log.warning(
                "%s: %s (try %d, again in %.1f s)", self._event, exc, self._tries, wait / 1000
            )
        self._next_ms = min(wait * 2, OUTAGE_BACKOFF_MAX_MS)
        return wait

    def recovered(self) -> None:
        if self._tries:
            log.warning("%s: the store answers again after %d tries", self._event, self._tries)
        self._next_ms = OUTAGE_BACKOFF_MIN_MS
        self._tries = 0


class StoreWatch:
    """What one worker saw of its store: when it last answered (`stats.store_ok_ms`) and, after
    an outage, the bound its claims pass as `reclaim_until_ms` until `grace_ms` after the store
    answered again (an outage within the grace of the last one restarts the grace and keeps the
    first one's bound).

    The bound is the send time of the last call answered before the first one that found the
    store unavailable: every lease that ended after it may have lapsed only because its holder
    could not renew it. A worker knows nothing of the store before its first answer (it may
    start in an outage its first call waits out), so it starts as if back from one that began
    before any lease: for `grace_ms` after its first answer it reclaims and buries no lapsed
    lease; the workers that saw the store all along do.

    `on_back(fn)`: `fn()` runs each time a call finds the store back after calls that found it
    unavailable, so the retries waiting out a backoff (settles, heartbeats, claims) go at once.
    """

    def __init__(self, clock: Clock, stats: WorkerStats, grace_ms: int = RECLAIM_GRACE_MS) -> None:
        self._clock = clock
        self._stats = stats
        self._grace_ms = grace_ms
        self._last_ok_ms: int | None = None
        #: The send time of the latest call that found the store unavailable, while no call
        #: sent after it was answered (before the first answer: as if one was sent at 0).
        self._failed_ms: int | None = 0
        self._bound_ms: int | None = 0
        self._grace_until_ms = 0
        self._on_back: list[Callable[[], None]] = []

    def on_back(self, fn: Callable[[], None]) -> None:
        """Run `fn()` whenever a call finds the store back after an outage."""
        self._on_back.append(fn)

    def answered(self, sent_ms: int) -> None:
        """A call sent at `sent_ms` was answered."""
        now = self._clock.now_ms()
        self._stats.store_ok_ms = now
        if self._last_ok_ms is None or sent_ms > self._last_ok_ms:
            self._last_ok_ms = sent_ms
        if self._failed_ms is not None and sent_ms >= self._failed_ms:
            # Sent after the last failure: the store is back, and the grace starts.
            self._failed_ms = None
            self._grace_until_ms = now + self._grace_ms
            for fn in self._on_back:
                fn()

    def unavailable(self, sent_ms: int) -> None:
        """A call sent at `sent_ms` found the store unavailable."""
        if self._failed_ms is None and sent_ms >= self._grace_until_ms:
            self._bound_ms = sent_ms if self._last_ok_ms is None else self._last_ok_ms
        if self._failed_ms is None or sent_ms > self._failed_ms:
            self._failed_ms = sent_ms

    def reclaim_until(self, now_ms: int) -> int | None:
        """The `reclaim_until_ms` a claim sent at `now_ms` passes: the outage's bound while the
        store is down or its grace lasts, else None."""
        if self._failed_ms is not None or now_ms < self._grace_until_ms:
            return self._bound_ms
        return None
