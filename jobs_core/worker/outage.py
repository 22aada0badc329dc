"""A store that is down (at start-up, under the claims): capped exponential backoff, logged once
per step, not per try."""

from __future__ import annotations

import logging

log = logging.getLogger("jobs")

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
