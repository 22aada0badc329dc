"""The attempt history's parity checks have teeth: each broken driver below (the memory
driver with its history wrong in one way) fails an attempt scenario, and those the job family's
random walk reaches fail that walk too (`tests/test_parity_teeth.py` for the rest)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from jobs_core.attempts import ATTEMPT_HISTORY, AttemptOutcome, AttemptRecord
from jobs_core.records import Ack, ClaimParams, ClaimResult, JobRecord, Nack
from jobs_core.states import JobState
from jobs_core.testing import run_scenario
from jobs_core.testing.machine import make_machine
from jobs_core.testing.profiles import profile_settings, scaled
from jobs_core.testing.scenarios import SCENARIOS
from jobs_memory import MemoryDriver
from tests.teeth import first_catch


class HistoryNotTrimmed(MemoryDriver):
    """Keeps every entry: the oldest is never dropped at `ATTEMPT_HISTORY`."""

    def _put(self, old: JobRecord | None, new: JobRecord) -> None:
        grew = old is not None and new.attempts and new.attempts[-1:] != old.attempts[-1:]
        if grew and old is not None and len(old.attempts) >= ATTEMPT_HISTORY:
            new = replace(new, attempts=(*old.attempts, new.attempts[-1]))
        super()._put(old, new)


class HistoryNewestFirst(MemoryDriver):
    """Keeps the right entries in the wrong order: the newest first."""

    def _put(self, old: JobRecord | None, new: JobRecord) -> None:
        if old is not None and new.attempts != old.attempts and new.attempts:
            new = replace(new, attempts=(new.attempts[-1], *new.attempts[:-1]))
        super()._put(old, new)


class StaleAckWritesHistory(MemoryDriver):
    """An ack whose fence no longer holds still appends its entry (the fence is the point)."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        landed = await super()._job_ack(acks)
        with self._lock:
            for a, ok in zip(acks, landed, strict=True):
                row = self._rows.get(a.fence.job_id)
                if ok or row is None:
                    continue
                r = row.rec
                entry = AttemptRecord(
                    r.attempt,
                    a.fence.claims,
                    a.fence.worker_id,
                    r.claimed_at_ms or a.now_ms,
                    a.now_ms,
                    AttemptOutcome.COMPLETED,
                )
                self._put(r, replace(r, attempts=(*r.attempts, entry)[-ATTEMPT_HISTORY:]))
        return landed


class DeadlineLeavesNoEntry(MemoryDriver):
    """A nack for a run past its deadline (`X_JOB_TIMEOUT`, no traceback) writes no entry."""

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        before = {
            n.fence.job_id: self._rows[n.fence.job_id].rec.attempts
            for n in nacks
            if n.fence.job_id in self._rows
        }
        landed = await super()._job_nack(nacks)
        with self._lock:
            for n, ok in zip(nacks, landed, strict=True):
                if ok and n.error is not None and "X_JOB_TIMEOUT" in n.error:
                    r = self._rows[n.fence.job_id].rec
                    self._put(r, replace(r, attempts=before[n.fence.job_id]))
        return landed


class ReclaimWritesNothing(MemoryDriver):
    """A claim that takes a lapsed running row leaves its lost claim out of the history."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        with self._lock:
            running = {
                i: row.rec.attempts
                for i, row in self._rows.items()
                if row.rec.state is JobState.RUNNING
            }
        got = await super()._job_claim(params)
        with self._lock:
            for job in got.jobs:
                if job.id in running:
                    r = self._rows[job.id].rec
                    self._put(r, replace(r, attempts=running[job.id]))
        return got


#: Each broken driver, the attempt scenarios that must catch it, and whether the job family's
#: `ci` walk reaches its edge too (a trim needs eleven claims of one row, a deadline an error
#: the walk never draws: the scenarios pin those).
BROKEN: list[tuple[type[MemoryDriver], list[str], bool]] = [
    (HistoryNotTrimmed, ["attempt_history_endings"], False),
    (HistoryNewestFirst, ["attempt_history_three_failures", "attempt_history_endings"], True),
    (StaleAckWritesHistory, ["attempt_history_endings"], True),
    (DeadlineLeavesNoEntry, ["attempt_history_three_failures"], False),
    (ReclaimWritesNothing, ["attempt_history_endings"], True),
]


@pytest.mark.parametrize(
    ("broken", "scenario"),
    [(b, s) for b, names, _ in BROKEN for s in names],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_scenario_catches(broken: type[MemoryDriver], scenario: str) -> None:
    with pytest.raises(AssertionError):
        run_scenario(broken, SCENARIOS[scenario])


@pytest.mark.parametrize("broken", [b for b, _, walk in BROKEN if walk], ids=lambda b: b.__name__)
def test_job_walk_catches(broken: type[MemoryDriver]) -> None:
    """The job family's walk compares every row's history after each step."""
    walks = scaled(profile_settings("ci"), "jobs")
    assert first_catch(lambda: make_machine(broken, {"jobs"}), walks) is not None


def test_the_memory_driver_passes_every_attempt_scenario() -> None:
    for name, scenario in sorted(SCENARIOS.items()):
        if name.startswith("attempt_history"):
            run_scenario(MemoryDriver, scenario)
