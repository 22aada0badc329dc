"""bench/factories.py at its dry-run size, on the test server: both sweeps run by a worker on
Postgres and as bare loops over the same batches, every row handled once on each side, a step
and a ledger advance per page (per window of batches) on the factory's, the summary and the
table made, and the data (two schemas, a temporary directory) gone afterwards. Its numbers mean
nothing: it keeps the benchmark's code working."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import psycopg

from bench.factories import DRY, main, render
from jobs_pg.urls import libpq_url

PG_URL = os.environ.get("JOBS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def test_the_dry_run_measures_both_sweeps_on_both_sides_and_removes_its_data(
    tmp_path: Path,
) -> None:
    assert main(["--dry-run", "--pg-url", PG_URL, "--out", str(tmp_path)]) == 0
    (path,) = tmp_path.glob("factories-*-dry.json")
    result = json.loads(path.read_text())

    samples = {(s["kind"], s["side"]): s for s in result["samples"] if s["kind"] != "probe"}
    assert set(samples) == {(k, s) for k in ("backfill", "import") for s in ("factory", "bare")}
    # 5 full batches, then the empty one that finds the end: the same on both sides.
    assert {samples["backfill", side]["batches"] for side in ("factory", "bare")} == {6}
    assert {samples["backfill", side]["rows"] for side in ("factory", "bare")} == {DRY.rows}
    pages = samples["import", "bare"]["batches"]
    assert pages > 1 and samples["import", "factory"]["batches"] == pages
    assert result["file_rows"] > 0 and result["file_bytes"] >= DRY.file_bytes
    assert {samples["import", side]["rows"] for side in ("factory", "bare")} == {
        result["file_rows"]
    }
    for kind in ("backfill", "import"):
        store = samples[kind, "factory"]["store"]
        batches = samples[kind, "factory"]["batches"]
        # One write per page (an import) or per window of batches (a backfill: this small
        # sweep runs in one or a few), its step record and its ledger advance together: the
        # durability the overhead pays for; neither is ever written alone.
        calls = store["sweep_checkpoint"]["calls"]
        assert calls == batches if kind == "import" else 1 <= calls < batches, (kind, calls)
        assert "step_put" not in store and "sweep_advance" not in store
        assert "store" not in samples[kind, "bare"]
        summary = result["summary"][kind]
        assert summary["pairs"] == 1 and len(summary["overhead"]["per_pair"]) == 1

    # The server's floor, probed once a pair: a durable commit and a bare round trip.
    (probe,) = [s for s in result["samples"] if s["kind"] == "probe"]
    assert probe["commit_ms"] > 0 and probe["round_trip_ms"] > 0

    text = render(result)
    assert "| backfill, keyset, batch 1,000 | 5,000 | 6 |" in text
    assert f"| import, JSONL 0.5 MB, page 0.0625 MiB | {result['file_rows']:,} |" in text

    assert not (Path(tempfile.gettempdir()) / result["made"]["directory"]).exists()
    with psycopg.connect(libpq_url(PG_URL)) as conn:
        left = conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name = ANY(%s)",
            (result["made"]["schemas"],),
        ).fetchall()
    assert left == []


def test_the_floor_pairs_the_bare_loop_with_one_commit_a_batch(tmp_path: Path) -> None:
    """bench/factories_floor.py at a tiny size: each pair reads every row on both sides and
    answers its two ratios; its numbers mean nothing."""
    from bench.factories_floor import main as floor

    argv = ["--rows", "3000", "--pairs", "2", "--pg-url", PG_URL, "--out", str(tmp_path)]
    assert floor(argv) == 0
    (path,) = tmp_path.glob("factories-floor-*.json")
    result = json.loads(path.read_text())
    assert result["config"] == {"rows": 3000, "batch": 1000, "pairs": 2}
    assert len(result["pairs"]) == 2
    for pair in result["pairs"]:
        assert pair["cpu_ratio"] > 0 and pair["wall_ratio"] > 0
        assert pair["bare_cpu_ms_per_batch"] > 0
    assert result["command"].startswith("python -m bench.factories_floor --rows 3000")
