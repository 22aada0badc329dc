"""Counts the CLI prints read as English, and words it keeps whole."""

from __future__ import annotations

import pytest

from jobs_core.cli.banner import rows_said


def test_one_row_is_a_row() -> None:
    assert [rows_said(n) for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]


def test_the_workers_table_keeps_names_whole_and_a_running_queue_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 80 columns the workers table folded a job name mid-word (`send_wel` / `come`), and
    a queue's expanded row read `paused:` with nothing after it: names are kept whole (too
    narrow: `header: value` lines), and a queue that runs says `-`."""
    from jobs_core.cli.base import console
    from jobs_core.cli.show import print_queues, print_workers
    from jobs_core.operator import QueueView, WorkerView

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(console, "width", 80)
    job_name = "send_welcome_to_every_new_member"
    worker = WorkerView(
        "vm:5909:35348cfd520d", "vm", 5909, ["emails"], 50, [job_name], 1_000, 31_000
    )
    counts = dict.fromkeys(("ready", "running", "parked", "dead", "failed"), 0)
    queue = QueueView("emails", counts, None, 0, False, 300_000, {"completed": 0})
    with console.capture() as cap:
        print_workers([worker], 4_000)
        print_queues([queue], 4_000)
    out = cap.get()
    assert f"jobs:        {job_name}\n" in out, out  # too narrow whole: one line a field
    assert out.rstrip().endswith("paused:           -"), out
