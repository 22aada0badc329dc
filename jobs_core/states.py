"""The states a job row moves through, and the outcomes a settle reports."""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class JobState(StrEnum):
    """Where a job row stands. Live = ready, running, parked; the rest are finished."""

    READY = "ready"
    RUNNING = "running"
    PARKED = "parked"
    COMPLETED = "completed"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"


LIVE_STATES: Final = frozenset({JobState.READY, JobState.RUNNING, JobState.PARKED})
FINISHED_STATES: Final = frozenset(set(JobState) - LIVE_STATES)


class Outcome(StrEnum):
    """What a settle meant, for counters and hooks."""

    COMPLETED = "completed"
    RETRIED = "retried"
    DEAD_LETTERED = "dead-lettered"
    DROPPED = "dropped"
    REFUSED = "refused"
    INTERRUPTED = "interrupted"
    SHED = "shed"
    SUSPENDED = "suspended"
    CANCELLED = "cancelled"


#: The outcomes `on_settled` fires for (SPEC §7): an ending, never a retry or a pause.
ENDING_OUTCOMES: Final = frozenset(
    {Outcome.COMPLETED, Outcome.DEAD_LETTERED, Outcome.DROPPED, Outcome.REFUSED}
)
