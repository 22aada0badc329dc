"""bench/processes.py's table: one row per store, system and process count, the medians of the
runs, jobs/s per process as measured (not recomputed from the medians)."""

from __future__ import annotations

from bench.processes import Drain, _table


def _drain(system: str, processes: int, per_s: int, store_us: float) -> Drain:
    return Drain(
        backend="pg",
        system=system,
        processes=processes,
        concurrency=10,
        jobs=1000,
        seconds=1000 / per_s,
        per_s=per_s,
        per_s_per_process=per_s // processes,
        store_us_per_job=store_us,
        workers_us_per_job=100.0,
        load=1.0,
    )


def test_the_table_shows_each_cell_once_with_the_median_of_its_runs() -> None:
    rows = [
        _drain("ours", 2, 1000, 300.0),
        _drain("ours", 2, 3000, 100.0),
        _drain("ours", 2, 2000, 200.0),
        _drain("pgqueuer", 1, 900, 250.0),
    ]
    lines = _table(rows).splitlines()
    assert lines[2] == "| pg | ours | 2 | 2,000 | 1,000 | 200 | 100 |"
    assert lines[3] == "| pg | pgqueuer | 1 | 900 | 900 | 250 | 100 |"
    assert len(lines) == 4
