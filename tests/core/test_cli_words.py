"""Counts the CLI prints read as English."""

from __future__ import annotations

from jobs_core.cli.banner import rows_said


def test_one_row_is_a_row() -> None:
    assert [rows_said(n) for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
