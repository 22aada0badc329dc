"""The parity suite has teeth: each deliberately broken driver fails the machine and a scenario.

Every broken driver is the memory driver with ONE `_` method wrong. The machine runs with a
fixed seed and no shrinking, so the answer is the same on every run and stays quick.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from jobs_core.driver import MAX_PURGE_LIMIT, MAX_TIME_MS
from jobs_core.records import (
    Ack,
    ClaimParams,
    ClaimResult,
    EnqueueResult,
    Fence,
    Heartbeat,
    NewJob,
    PurgeParams,
)
from jobs_core.semantics import namespace_of
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.testing import SCENARIOS, ParityError, make_machine, run_scenario
from jobs_memory import MemoryDriver

TEETH = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    report_multiple_bugs=False,
    suppress_health_check=list(HealthCheck),
)


class UnfencedAck(MemoryDriver):
    """Acks any running row, whoever claimed it and however long ago."""

    async def _job_ack(self, acks: Sequence[Ack]) -> list[bool]:
        current = []
        for a in acks:
            row = self._rows.get(a.fence.job_id)
            if row is not None and row.rec.claimed_by is not None:
                a = replace(a, fence=Fence(a.fence.job_id, row.rec.claims, row.rec.claimed_by))
            current.append(a)
        return await super()._job_ack(current)


class ClaimIgnoresPauses(MemoryDriver):
    """Claims as if nothing were paused."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        paused, self._pauses = self._pauses, set()
        try:
            return await super()._job_claim(params)
        finally:
            self._pauses = paused


class KeyIgnoresTenant(MemoryDriver):
    """Dedupes on (name, key) alone, so one tenant's live row swallows another's enqueue."""

    def _enqueue_locked(self, job: NewJob) -> EnqueueResult:
        if job.id not in self._rows:
            for row in self._rows.values():
                r = row.rec
                if r.state in LIVE_STATES and (r.name, r.idempotency_key) == (
                    job.name,
                    job.idempotency_key,
                ):
                    return EnqueueResult(r.id, deduped=True)
        return super()._enqueue_locked(job)


class ClaimsLapsedFinalAttempt(MemoryDriver):
    """Hands a lapsed final attempt out again instead of burying it."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        spare: dict[str, int] = {}
        with self._lock:
            for row in list(self._rows.values()):
                r = row.rec
                if (
                    r.queue in params.queues
                    and r.state is JobState.RUNNING
                    and r.lease_until_ms is not None
                    and r.lease_until_ms <= params.now_ms
                    and r.attempt >= r.max_attempts
                ):
                    spare[r.id] = r.max_attempts
                    self._put(r, replace(r, max_attempts=r.attempt + 1))
        result = await super()._job_claim(params)
        with self._lock:
            for job_id, max_attempts in spare.items():
                r = self._rows[job_id].rec
                self._put(r, replace(r, max_attempts=max_attempts))
        jobs = tuple(replace(j, max_attempts=spare.get(j.id, j.max_attempts)) for j in result.jobs)
        return replace(result, jobs=jobs)


class HeartbeatFromLeaseEnd(MemoryDriver):
    """Extends a lease from its old end instead of from now."""

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        out: list[bool] = []
        for b in beats:
            r = self._held(b.fence)
            start = r.lease_until_ms if r is not None and r.lease_until_ms is not None else b.now_ms
            out += await super()._job_heartbeat([replace(b, now_ms=start)])
        return out


class RequeueKeepsAttempt(MemoryDriver):
    """Requeues a row but leaves its spent attempts in place."""

    async def _job_requeue(self, job_id: str, now_ms: int) -> None:
        row = self._rows.get(job_id)
        attempt = row.rec.attempt if row is not None else 0
        await super()._job_requeue(job_id, now_ms)
        r = self._rows[job_id].rec
        self._put(r, replace(r, attempt=attempt))


class DemandCountsFuture(MemoryDriver):
    """Counts ready rows that are not due yet."""

    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        return await super()._queue_demand(queues, MAX_TIME_MS)


class BatchBlindToItself(MemoryDriver):
    """Dedupes a batch against the rows stored before it, never against its own records."""

    async def _job_enqueue_many(self, jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        with self._lock:
            before = set(self._rows)
            holders = dict(self._live_keys)
            out: list[EnqueueResult] = []
            for j in jobs:
                ns = namespace_of(j.name, j.tenant_id, j.idempotency_key)
                if j.id in before:
                    out.append(EnqueueResult(j.id, deduped=True))
                elif ns in holders:
                    out.append(EnqueueResult(holders[ns], deduped=True))
                else:
                    earlier = self._rows.pop(j.id, None)
                    if earlier is not None:
                        self._unindex(earlier.rec)
                    self._live_keys.pop(ns, None)
                    out.append(self._enqueue_locked(j))
            return out


class PurgeIgnoresLimit(MemoryDriver):
    """Purges every expired row at once, whatever the limit."""

    async def _job_purge(self, params: PurgeParams) -> int:
        return await super()._job_purge(replace(params, limit=MAX_PURGE_LIMIT))


class PurgesEarly(MemoryDriver):
    """Purges a row one millisecond before its retention runs out."""

    async def _job_purge(self, params: PurgeParams) -> int:
        return await super()._job_purge(replace(params, now_ms=params.now_ms + 1))


class PurgesKeptForever(MemoryDriver):
    """Reads a retention of None as "no retention at all": purges rows meant to stay."""

    async def _job_purge(self, params: PurgeParams) -> int:
        def zero(keep: int | None) -> int:
            return 0 if keep is None else keep

        return await super()._job_purge(
            replace(
                params,
                completed_ms=zero(params.completed_ms),
                cancelled_ms=zero(params.cancelled_ms),
                failed_ms=zero(params.failed_ms),
                dead_ms=zero(params.dead_ms),
            )
        )


#: Each broken driver, and the fixed scenarios that must catch it too.
BROKEN: list[tuple[type[MemoryDriver], list[str]]] = [
    (UnfencedAck, ["lapsed_lease_reclaimed", "requeue_refusals"]),
    (ClaimIgnoresPauses, ["pause_by_queue_and_name", "bury_final_attempt"]),
    (KeyIgnoresTenant, ["idempotency_live_rows_only"]),
    (ClaimsLapsedFinalAttempt, ["bury_final_attempt"]),
    (HeartbeatFromLeaseEnd, ["heartbeat_from_now"]),
    (RequeueKeepsAttempt, ["requeue_refusals"]),
    (DemandCountsFuture, ["demand_with_paused_queue"]),
    (BatchBlindToItself, ["idempotency_live_rows_only"]),
    (PurgeIgnoresLimit, ["purge_retention"]),
    (PurgesEarly, ["purge_retention"]),
    (PurgesKeptForever, ["purge_retention"]),
]


@pytest.mark.parametrize("broken", [b for b, _ in BROKEN], ids=lambda b: b.__name__)
def test_machine_catches(broken: type[MemoryDriver]) -> None:
    with pytest.raises(ParityError):
        run_state_machine_as_test(make_machine(broken), settings=TEETH)


@pytest.mark.parametrize(
    ("broken", "scenario"),
    [(b, s) for b, names in BROKEN for s in names],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_scenario_catches(broken: type[MemoryDriver], scenario: str) -> None:
    with pytest.raises(AssertionError):
        run_scenario(broken, SCENARIOS[scenario])


def test_reference_driver_passes_under_the_same_settings() -> None:
    run_state_machine_as_test(make_machine(MemoryDriver), settings=TEETH)
