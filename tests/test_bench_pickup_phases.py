"""The pickup's parts read from a synthetic probe file (`bench/pickup_phases.py`): the claim is
the call answered last before the body starts, and its round trips are only the ones its own
task waited on inside it — oban-py's BEGIN, fetch and COMMIT, not another task's statement
running beside it. No server."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.pickup_phases import phases

T = 1_000.0


def _probe(tmp_path: Path, *lines: tuple[str, float, str]) -> Path:
    path = tmp_path / "w.probe"
    path.write_text("".join(f"{event} {T + ms / 1000} {label}\n" for event, ms, label in lines))
    return path


def test_the_claims_round_trips_are_its_own_tasks_inside_it(tmp_path: Path) -> None:
    probe = _probe(
        tmp_path,
        ("notify", 2.0, ""),
        ("send", 2.5, "fetch_jobs@t1"),
        ("step_send", 2.6, "t1"),  # BEGIN
        ("step_answer", 2.8, "t1"),
        ("step_send", 2.7, "t2"),  # another task's statement, beside the claim
        ("step_answer", 3.9, "t2"),
        ("step_send", 2.9, "t1"),  # the fetch
        ("step_answer", 3.4, "t1"),
        ("step_send", 3.5, "t1"),  # COMMIT
        ("step_answer", 4.0, "t1"),
        ("answer", 4.1, "fetch_jobs@t1"),
        ("step_send", 4.2, "t1"),  # after the claim: the next one's or an ack's
        ("step_answer", 4.6, "t1"),
    )
    # stamp, the enqueue's return, the body's start (seconds)
    got = phases(probe, [(T, T + 0.0018, T + 0.0045)])
    assert got["claim_trips"] == [3.0]
    assert got["claim"] == pytest.approx([1.6])
    assert got["claim_wire"] == pytest.approx([0.2 + 0.5 + 0.5])
    assert got["claim_client"] == pytest.approx([0.4])
    assert got["to_claim"] == pytest.approx([0.5])
    assert got["notify"] == pytest.approx([0.2])
    assert got["to_body"] == pytest.approx([0.4])
    assert got["enqueue"] == pytest.approx([1.8])


def test_a_probe_without_round_trips_leaves_the_claims_split_out(tmp_path: Path) -> None:
    """PgQueuer's probe notes its statements, not psycopg's waits: no split, the rest stands."""
    probe = _probe(
        tmp_path,
        ("notify", 1.0, ""),
        ("send", 1.2, "SELECT_x@t1"),
        ("answer", 2.2, "SELECT_x@t1"),
    )
    got = phases(probe, [(T, T + 0.0009, T + 0.0025)])
    assert got["claim"] == pytest.approx([1.0])
    assert got["claim_trips"] == got["claim_wire"] == got["claim_client"] == []
