"""bench/webhooks.py at its dry-run size, on the test servers: `webhook()` jobs drained by a
worker into the no-op endpoint and the receiver driven under uvicorn, on Postgres and on Redis,
every event delivered (or stored) exactly once, the table made, every store removed after. Its
numbers mean nothing: it keeps the benchmark's code working. And the exactly-once checks bite:
a lost, doubled or unknown event is an error, never a number."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bench.webhooks import DRY, BenchError, check_sent, check_stored, main, render

PG_URL = os.environ.get("JOBS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("JOBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def test_the_dry_run_measures_both_ways_on_both_stores_and_removes_them(tmp_path: Path) -> None:
    argv = ["--dry-run", "--pg-url", PG_URL, "--redis-url", REDIS_URL, "--out", str(tmp_path)]
    assert main(argv) == 0
    (path,) = tmp_path.glob("webhooks-*-dry.json")
    result = json.loads(path.read_text())
    assert str(tmp_path) not in path.read_text()  # no machine path in what is committed

    samples = {(s["kind"], s["backend"]): s for s in result["samples"]}
    assert set(samples) == {(k, b) for k in ("send", "receive") for b in ("pg", "redis")}
    for backend in ("pg", "redis"):
        send = samples["send", backend]
        assert send["exactly_once"] is True
        assert send["delivered"] == DRY.jobs + DRY.trickle
        assert send["jobs_per_s"] > 0 and send["worker_cpu_s"] > 0
        assert 0 < send["latency_ms"]["p50"] <= send["latency_ms"]["p95"]
        receive = samples["receive", backend]
        assert receive["exactly_once"] is True
        assert receive["ok"] == receive["stored"] == DRY.requests
        assert receive["req_per_s"] > 0
        assert 0 < receive["latency_ms"]["p50"] <= receive["latency_ms"]["p95"]
        for s in (send, receive):
            assert s["store"]["left"] == 0  # its schema dropped, its keys deleted
            assert set(s["load_1m"]) == {"before", "after"}

    text = render(result)
    assert text.count("| Postgres | send:") == text.count("| Redis | receive:") == 1
    assert "jobs/s" in text and "req/s" in text


def test_a_lost_doubled_or_unknown_delivery_is_an_error() -> None:
    wanted = ["a", "b"]
    assert set(check_sent(wanted, [["a", 1.0], ["b", 2.0]], [], ["j1", "j2"])) == {"a", "b"}
    for seen in (
        [["a", 1.0]],
        [["a", 1.0], ["b", 2.0], ["b", 3.0]],
        [["a", 1], ["b", 2], ["c", 3]],
    ):
        with pytest.raises(BenchError):
            check_sent(wanted, seen, [], ["j1", "j2"])
    with pytest.raises(BenchError, match="1 jobs not completed"):
        check_sent(wanted, [["a", 1.0], ["b", 2.0]], ["j2"], ["j1"])


def test_an_event_not_stored_once_or_not_acked_is_an_error() -> None:
    ok = {"statuses": {"200": 2}, "deduped": 0}
    check_stored({"j1", "j2"}, ["j2", "j1"], ok, 2)
    for rows in (["j1"], ["j1", "j2", "j2"], ["j1", "j3"]):
        with pytest.raises(BenchError):
            check_stored({"j1", "j2"}, rows, ok, 2)
    for load in (
        {"statuses": {"200": 1, "503": 1}, "deduped": 0},
        {"statuses": {"200": 2}, "deduped": 1},
    ):
        with pytest.raises(BenchError):
            check_stored({"j1", "j2"}, ["j1", "j2"], load, 2)
