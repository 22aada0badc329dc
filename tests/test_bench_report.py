"""The benchmark's report on a synthetic result: the paired ratios are taken within each run
(median of per-run ratios, "best" chosen within the run), and both tables render. No server."""

from __future__ import annotations

from typing import Any

import pytest

from bench.report import medians, ratios, render
from bench.systems import PAIRS, SYSTEMS


def _row(system: str, variant: str, settings: str, *, default: bool = False) -> dict[str, Any]:
    return {
        "system": system,
        "variant": variant,
        "settings": settings,
        "default": default,
        "passed": "nothing passed",
    }


def _drain(run: int, row: str, drain: float, **more: float | None) -> dict[str, Any]:
    figures = {
        "drain_jobs": 10_000,
        "drain_per_s": drain,
        "p50_ms": 3.0,
        "p99_ms": 5.0,
        "client_cpu_s_per_1k": 0.05,
        "server_cpu_s_per_1k": 0.05,
        "wal_bytes_per_job": 1000.0,
        "statements_per_job": 0.2,
        "commits_per_job": 0.2,
    }
    return {"run": run, "row": row, **figures, **more}


def _result() -> dict[str, Any]:
    runs = [
        # Run 1: ours is best at c10, PgQueuer at b50.
        {"run": 1, "row": "ours", "enqueue_per_s": 3000.0, "bulk_per_s": 50_000.0},
        {"run": 1, "row": "pgqueuer", "enqueue_per_s": 1000.0, "bulk_per_s": None},
        _drain(1, "ours:c10", 12_000.0),
        _drain(1, "ours:c50", 10_000.0, p50_ms=6.0),
        _drain(1, "pgqueuer:b10", 2_000.0),
        _drain(1, "pgqueuer:b50", 4_000.0),
        # Run 2: the other way round in both.
        {"run": 2, "row": "ours", "enqueue_per_s": 1000.0, "bulk_per_s": 40_000.0},
        {"run": 2, "row": "pgqueuer", "enqueue_per_s": 1000.0, "bulk_per_s": None},
        _drain(2, "ours:c10", 1_000.0),
        _drain(2, "ours:c50", 9_000.0),
        _drain(2, "pgqueuer:b10", 9_000.0),
        _drain(2, "pgqueuer:b50", 3_000.0),
        # Run 3: PgQueuer's b10 failed; its best is b50 alone.
        {"run": 3, "row": "ours", "enqueue_per_s": 2000.0, "bulk_per_s": 45_000.0},
        {"run": 3, "row": "pgqueuer", "enqueue_per_s": 4000.0, "bulk_per_s": None},
        _drain(3, "ours:c10", 5_000.0),
        _drain(3, "ours:c50", 8_000.0),
        {"run": 3, "row": "pgqueuer:b10", "error": "worker exited"},
        _drain(3, "pgqueuer:b50", 2_000.0),
    ]
    return {
        "backend": "pg",
        "dry_run": False,
        "config": {
            "runs": 3,
            "enqueue_jobs": 2000,
            "bulk_jobs": 20_000,
            "drain_jobs": 10_000,
            "latency_rate": 50.0,
            "latency_seconds": 10.0,
        },
        "machine": {
            "date": "2026-12-03T08:00:00+00:00",
            "nproc": 2,
            "cpu": "a test CPU",
            "python": "3.11.7",
            "server": "PostgreSQL 15.20",
            "server_note": "a throwaway Postgres",
            "commit": "abc1234",
            "commit_after": "abc1234",
            "load_before": [0.2, 0.2, 0.2],
            "load_after": [0.9, 0.5, 0.3],
        },
        "systems": {
            "ours": {"label": "ultimat3-jobs", "version": "0.1.0", "note": "ujobs worker"},
            "pgqueuer": {"label": "PgQueuer", "version": "1.6.0", "note": "pgq run"},
        },
        "rows": {
            "ours:c10": _row("ours", "c10", "concurrency 10"),
            "ours:c50": _row("ours", "c50", "concurrency 50", default=True),
            "pgqueuer:b10": _row("pgqueuer", "b10", "batch size 10", default=True),
            "pgqueuer:b50": _row("pgqueuer", "b50", "batch size 50"),
        },
        "pairs": [
            {"label": "no worker", "num": "ours", "den": "pgqueuer"},
            {"label": "c10 / b10", "num": "ours:c10", "den": "pgqueuer:b10"},
            {"label": "best", "num": "ours:best", "den": "pgqueuer:best"},
        ],
        "runs": runs,
    }


def _cells(label: str) -> dict[str, dict[str, Any]]:
    row = next(r for r in ratios(_result()) if r["label"] == label)
    cells: dict[str, dict[str, Any]] = row["cells"]
    return cells


def test_a_ratio_is_the_median_of_the_per_run_ratios() -> None:
    # Per run 3.0, 1.0, 0.5: median 1.0. The ratio of the medians would be 2000/1000 = 2.0.
    enqueue = _cells("no worker")["enqueue_per_s"]
    assert enqueue["per_run"] == [3.0, 1.0, 0.5]
    assert (enqueue["median"], enqueue["min"], enqueue["max"]) == (1.0, 0.5, 3.0)


def test_a_failed_run_gives_no_ratio_and_a_missing_api_gives_none() -> None:
    drain = _cells("c10 / b10")["drain_per_s"]
    assert drain["per_run"] == [6.0, pytest.approx(1 / 9)]
    assert drain["median"] == pytest.approx((6.0 + 1 / 9) / 2)
    assert _cells("no worker")["bulk_per_s"]["median"] is None


def test_best_is_chosen_within_each_run() -> None:
    row = next(r for r in ratios(_result()) if r["label"] == "best")
    # Run 1: c10 12,000 over b50 4,000; run 2: c50 9,000 over b10 9,000; run 3: c50 8,000
    # over b50 2,000 (b10 failed). The medians of each variant would pair other numbers.
    assert row["cells"]["drain_per_s"]["per_run"] == [3.0, 1.0, 4.0]
    # The other figures are the best-drain variant's: c50's p50 in run 1 does not enter.
    assert row["cells"]["p50_ms"]["per_run"] == [1.0, 1.0, 1.0]
    assert dict(row["best"]["num"]) == {"c10": 1, "c50": 2}
    assert dict(row["best"]["den"]) == {"b50": 2, "b10": 1}


def test_medians_count_failed_runs_apart() -> None:
    summary = medians(_result())
    assert summary["pgqueuer:b10"]["failed_runs"] == 1
    assert summary["pgqueuer:b10"]["drain_per_s"] == 5_500.0
    assert summary["ours"]["enqueue_per_s"] == 2000.0


def test_both_tables_render_with_settings_and_defaults() -> None:
    text = render(_result())
    assert "| ultimat3-jobs 0.1.0 (abc1234) | c10: concurrency 10 | 2,000 | 45,000 |" in text
    assert "| ultimat3-jobs | c50: concurrency 50 (default) | (above) | (above) |" in text
    assert "b10: batch size 10 (default) (1 of 3 runs failed)" in text
    assert "| c10 / b10 |  |  | 3.06 (0.11–6.00) [2 of 3 runs] |" in text
    assert "| no worker | 1.00 (0.50–3.00) | n/a (no bulk API) |" in text
    assert "ultimat3-jobs: c50 in 2 of 3, c10 in 1 of 3" in text


@pytest.mark.parametrize("backend", sorted(PAIRS))
def test_every_pair_names_rows_the_backend_has(backend: str) -> None:
    rows = {s.key(v) for s in SYSTEMS[backend] for v in s.variants}
    names = {s.name for s in SYSTEMS[backend]}
    for pair in PAIRS[backend]:
        for side in (pair.num, pair.den):
            name, _, variant = side.partition(":")
            assert side in rows or (name in names and variant in ("", "best")), side
    for system in SYSTEMS[backend]:
        assert sum(v.default for v in system.variants) == 1, system.name
