"""The chaos run's attempt-history check (`bench.chaos.histories`) on made-up rows: a history
with one entry per ended claim passes, and a missing, doubled or misplaced entry is caught.
No server."""

from __future__ import annotations

from typing import Any

from bench.chaos.histories import history_faults


def _row(state: str, claims: int, *entries: tuple[int, str]) -> dict[str, Any]:
    return {
        "state": state,
        "claims": claims,
        "attempts": [[c, 1, outcome, None] for c, outcome in entries],
    }


def test_one_entry_per_ended_claim_passes() -> None:
    assert (
        history_faults(_row("completed", 3, (1, "abandoned"), (2, "retried"), (3, "completed")))
        == []
    )
    assert history_faults(_row("running", 2, (1, "parked"))) == []
    assert history_faults(_row("failed", 0)) == []
    # Only the last ATTEMPT_HISTORY (10) entries are kept.
    kept = [(c, "retried") for c in range(3, 12)] + [(12, "completed")]
    assert history_faults(_row("completed", 12, *kept)) == []


def test_a_missing_doubled_or_misplaced_entry_is_caught() -> None:
    # The completed claim's entry missing (the ack's implicit entry not read back).
    assert history_faults(_row("completed", 2, (1, "retried")))
    # A claim with two entries, and a claim with none.
    assert history_faults(_row("dead", 2, (1, "retried"), (1, "retried"), (2, "dead")))
    assert history_faults(_row("dead", 3, (1, "retried"), (3, "dead")))
    # A completed entry before a later claim's.
    assert history_faults(_row("completed", 2, (1, "completed"), (2, "completed")))
    assert history_faults(_row("completed", 1, (1, "retried")))
