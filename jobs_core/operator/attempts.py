"""A job's attempts as an operator sees them: each ended claim of its history (texts scrubbed
as the last error is) with the steps its run recorded during that claim, and the claim still
running, if any — the timeline `ujobs jobs show` and the dashboard's job page print.

A claim is when its run started (the worker runs what it claims at once), so the timeline of
one attempt is: claimed (started) → the steps recorded while it held the claim → settled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobs_core.attempts import AttemptOutcome
from jobs_core.records import JobRecord
from jobs_core.states import JobState

if TYPE_CHECKING:
    from jobs_core.operator.service import StepView
    from jobs_core.redact import RedactionPolicy


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One claim of a job: ended (`outcome` set) or still running (`outcome` None)."""

    attempt: int
    claims: int
    worker_id: str
    claimed_at_ms: int
    settled_at_ms: int | None
    outcome: AttemptOutcome | None
    error_code: str | None
    error_message: str | None
    traceback: str | None
    #: The steps the run recorded while this claim held it, oldest first.
    steps: tuple[StepView, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "claims": self.claims,
            "worker_id": self.worker_id,
            "claimed_at_ms": self.claimed_at_ms,
            "settled_at_ms": self.settled_at_ms,
            "outcome": None if self.outcome is None else self.outcome.value,
            "error_code": self.error_code,
            "error_message": self.error_message,
            "traceback": self.traceback,
            "steps": [st.to_json() for st in self.steps],
        }


def attempt_views(
    r: JobRecord, policy: RedactionPolicy, steps: tuple[StepView, ...] = ()
) -> tuple[AttemptView, ...]:
    """`r`'s history, oldest first, then its running claim; each with the steps recorded
    between its claim and its settle (a step lands before the settle that ends its claim)."""

    def scrub(text: str | None) -> str | None:
        return policy.text(r.name, text, r.input_json)

    out = [
        AttemptView(
            a.attempt,
            a.claims,
            a.worker_id,
            a.claimed_at_ms,
            a.settled_at_ms,
            a.outcome,
            scrub(a.error_code),
            scrub(a.error_message),
            scrub(a.traceback),
        )
        for a in r.attempts
    ]
    if r.state is JobState.RUNNING and r.claimed_by is not None:
        at = r.claimed_at_ms if r.claimed_at_ms is not None else r.created_at_ms
        out.append(AttemptView(r.attempt, r.claims, r.claimed_by, at, None, None, None, None, None))
    placed: list[AttemptView] = []
    for v in out:
        end = v.settled_at_ms
        mine = tuple(
            st
            for st in steps
            if st.recorded_at_ms >= v.claimed_at_ms and (end is None or st.recorded_at_ms <= end)
        )
        placed.append(_with_steps(v, mine))
    return tuple(placed)


def _with_steps(v: AttemptView, steps: tuple[StepView, ...]) -> AttemptView:
    return AttemptView(
        v.attempt,
        v.claims,
        v.worker_id,
        v.claimed_at_ms,
        v.settled_at_ms,
        v.outcome,
        v.error_code,
        v.error_message,
        v.traceback,
        steps,
    )
