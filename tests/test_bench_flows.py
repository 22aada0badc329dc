"""bench/flows.py's summary on a synthetic result: figures are medians over the good runs, the
ratio Celery ÷ ours is taken within each run (a failed run gives none), and the table renders.
No server, as tests/test_bench_report.py."""

from __future__ import annotations

from typing import Any

from bench.flows import render, summarise


def _run(run: int, system: str, n: int, total: float, wake: float) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "run": run,
        "system": system,
        "children": n,
        "load_1m": 0.5,
        "total_s": total,
        "per_s": n / total,
        "enqueue_children_s": 0.1,
        "wake_s": wake,
        "release_s": wake / 2,
    }
    if system.startswith("ours"):
        figures["replay_s"] = wake / 2
    return figures


def _result() -> dict[str, Any]:
    runs = [
        _run(1, "ours-redis", 1000, 1.0, 0.02),
        _run(1, "celery-threads", 1000, 3.0, 0.01),
        # Run 2: ours slow, Celery slower still; a median of totals would pair other runs.
        _run(2, "ours-redis", 1000, 4.0, 0.04),
        _run(2, "celery-threads", 1000, 4.0, 0.01),
        _run(3, "ours-redis", 1000, 2.0, 0.03),
        {"run": 3, "system": "celery-threads", "children": 1000, "error": "worker exited"},
    ]
    return {
        "dry_run": False,
        "config": {"runs": 3, "sizes": [1000], "concurrency": 50},
        "machine": {
            "date": "2026-12-06T01:00:00+00:00",
            "nproc": 2,
            "python": "3.11.7",
            "pg": "PostgreSQL 15.20",
            "redis": "Redis 7.0.15",
            "celery": "5.7.0",
            "commit": "abc1234",
            "load_before": [0.5, 0.5, 0.5],
            "load_after": [0.7, 0.5, 0.5],
        },
        "systems": {
            "ours-redis": {"label": "ultimat3-jobs, Redis", "settings": "concurrency 50"},
            "celery-threads": {"label": "Celery chord, Redis", "settings": "threads 50"},
        },
        "runs": runs,
    }


def test_the_ratio_is_paired_within_each_run_and_a_failed_run_gives_none() -> None:
    summary = summarise(_result())
    (ratio,) = summary["ratios"]
    assert (ratio["ours"], ratio["celery"], ratio["children"]) == (
        "ours-redis",
        "celery-threads",
        1000,
    )
    assert ratio["per_run"] == [3.0, 1.0]
    assert ratio["median"] == 2.0
    # Medians over the good runs alone: Celery's failed run is not a zero.
    assert summary["medians"]["celery-threads:1000"]["runs"] == 2
    assert summary["medians"]["celery-threads:1000"]["total_s"]["median"] == 3.5
    assert summary["medians"]["ours-redis:1000"]["wake_s"] == {
        "median": 0.03,
        "min": 0.02,
        "max": 0.04,
    }
    assert "replay_s" not in summary["medians"]["celery-threads:1000"]


def test_the_tables_render() -> None:
    result = _result()
    result["summary"] = summarise(result)
    text = render(result)
    assert "| ultimat3-jobs, Redis | concurrency 50 | 1,000 | 2.00 (1.00–4.00) |" in text
    assert "| 2.00 | 1.00–3.00 | 3.00 · 1.00 |" in text
    assert "median of 3 runs" in text
    assert text.count("\n| Celery chord, Redis | threads 50 | 1,000 | 3.50") == 1


def test_a_system_with_no_good_run_is_left_out() -> None:
    result = _result()
    result["runs"] = [r for r in result["runs"] if r["system"] != "ours-redis"]
    summary = summarise(result)
    assert "ours-redis:1000" not in summary["medians"]
    assert summary["ratios"] == []
