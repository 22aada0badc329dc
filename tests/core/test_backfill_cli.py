"""`ujobs backfills list|pending|show` as an operator runs them, in process (click's runner) on a
memory store the test filled: a completed sweep, a tenant's completed sweep, a tenant's sweep
whose job was cancelled mid-run, and an import with refused records. Tables keep every name,
scope, status and run id whole at any width; `--json` is the projection; an import's `show`
prints its error report, or says there is no reader; hostile names print as themselves."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

import jobs_core.cli.backfills as cli
from jobs_core.cli import main
from jobs_core.cli.base import console
from jobs_core.facade import Jobs
from jobs_core.job import JobRegistry, job
from jobs_core.records import ClaimParams, SweepAdvance, SweepFinish, SweepStart
from jobs_core.states import FINISHED_STATES
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core import backfill_app as app
from tests.core.support import until

APP = ["--app", "tests.core.backfill_app"]
REFUSAL = re.compile(r"^X_[A-Z_]+: ", re.M)


async def _worked(driver: MemoryDriver, job_id: str) -> None:
    worker = Worker(driver, [app.nums, app.per_org], poll_floor=0.001, poll_ceiling=0.01)
    await worker.start()

    async def finished() -> bool:
        return (await driver.job_get_many([job_id]))[job_id].state in FINISHED_STATES

    try:
        await until(finished, within=15)
    finally:
        await worker.stop()


async def _fill(driver: MemoryDriver) -> dict[str, str]:
    jobs = Jobs(driver)
    await _worked(driver, (await app.nums.enqueue({}, client=jobs)).id)
    # per-org requires nums: its gate lets it through only now.
    await _worked(driver, (await app.per_org.enqueue({"org": "acme"}, client=jobs)).id)

    async def started(queue: str, name: str, scope: str, kind: Any, sum: str) -> tuple[Any, str]:
        now = jobs.clock.now_ms()
        (held,) = (await driver.job_claim(ClaimParams((queue,), "w", 1, 60_000, now))).jobs
        await driver.sweep_start(
            SweepStart(held.fence, held.run_id, name, scope, "default", kind, sum, None, now)
        )
        return held, held.run_id

    # globex's run was cancelled after its first batch: its entry stays running, its job not.
    globex = await jobs.enqueue(app.per_org, {"org": "globex"})
    held, _ = await started("default", "per-org", "globex", "backfill", app.per_org.spec.checksum)
    now = jobs.clock.now_ms()
    await driver.sweep_advance(SweepAdvance(held.fence, held.run_id, 1, 7, 0, "7", now))
    await driver.job_cancel(globex.id, now)
    # An import that refused two records of ten.
    loader = job(
        lambda i, c: None, name="load", tenant="none", queue="imports", registry=JobRegistry()
    )
    await jobs.enqueue(loader, {}, key="contacts")
    held, import_run = await started("imports", "contacts-csv", "none", "import", "c1")
    await driver.sweep_advance(SweepAdvance(held.fence, held.run_id, 1, 10, 2, "4096", now))
    await driver.sweep_finish(SweepFinish(held.fence, held.run_id, "completed", None, now))
    return {"import": import_run}


@pytest.fixture(scope="module")
def store() -> Iterator[tuple[MemoryDriver, dict[str, str]]]:
    driver = MemoryDriver()
    ids = asyncio.run(_fill(driver))
    yield driver, ids


@pytest.fixture
def ujobs(store: tuple[MemoryDriver, dict[str, str]], monkeypatch: pytest.MonkeyPatch) -> Any:
    """`ujobs ARGS` in process on the filled store (a memory store lives in one process)."""
    monkeypatch.setattr(cli, "_open", lambda url: store[0])
    monkeypatch.delenv("UJOBS_ENVIRONMENT", raising=False)

    def run(*args: str, columns: int | None = None, code: int = 0) -> Result:
        monkeypatch.setattr(console, "_width", columns)
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", str(columns))
        done = CliRunner().invoke(main, [*args, "--driver", "memory"], catch_exceptions=False)
        assert done.exit_code == code, done.output
        return done

    return run


def test_list_json_is_the_projection(ujobs: Any) -> None:
    doc = json.loads(ujobs("backfills", "list", *APP, "--json").output)
    sweeps = {s["name"]: s for s in doc["sweeps"]}
    assert list(sweeps) == ["contacts-csv", "nums", "per-org"]
    assert (sweeps["nums"]["declared"], sweeps["contacts-csv"]["declared"]) == (True, False)
    (nums,) = sweeps["nums"]["entries"]
    assert (nums["status"], nums["rows"], nums["expected"], nums["progress"]) == (
        "completed",
        30,
        30,
        1.0,
    )
    # Checkpointed a window of a second at a time (the default), the ledger counts batches.
    assert (nums["batches"], nums["cursor"], nums["current"]) == (3, 20, True)
    assert sweeps["nums"]["checkpoint_ms"] == 1_000
    per_org = {e["scope"]: e for e in sweeps["per-org"]["entries"]}
    assert per_org["acme"]["status"] == "completed" and per_org["acme"]["rows"] == 30
    globex = per_org["globex"]
    assert (globex["status"], globex["job_state"], globex["orphaned"]) == (
        "running",
        "cancelled",
        True,
    )
    assert (globex["current"], globex["cursor"], globex["batches"]) == (True, 7, 1)
    pending = {
        env: [(p["name"], p["scope"], p["status"]) for p in ps]
        for env, ps in doc["pending"].items()
    }
    assert pending == {
        "default": [("per-org", "globex", "running")],
        "production": [("nums", "none", "never"), ("per-org", None, "never")],
    }
    imported = sweeps["contacts-csv"]["entries"][0]
    assert (imported["kind"], imported["rows"], imported["errors"]) == ("import", 10, 2)


@pytest.mark.parametrize("columns", [None, 80, 40])
def test_tables_keep_names_scopes_states_and_ids_whole_at_any_width(
    ujobs: Any, store: tuple[MemoryDriver, dict[str, str]], columns: int | None
) -> None:
    listed = ujobs("backfills", "list", *APP, columns=columns).output
    shown = ujobs("backfills", "show", "per-org", *APP, columns=columns).output
    out = listed + shown
    assert "…" not in out and "10 rows, 2 refused" in listed
    for word in ["nums", "per-org", "contacts-csv", "acme", "globex", "completed", "running"]:
        assert word in out, (word, out)
    assert "(job cancelled)" in out and "30 of 30 (100%)" in listed
    assert "every 1 s of batches" in " ".join(shown.split())
    runs = [e.run_id for e in asyncio.run(store[0].sweep_list("per-org", 10))]
    assert all(r in shown for r in runs)
    for line in out.splitlines():
        if columns is not None and line[:1] in "┏┃┡│└":
            assert len(line) <= columns, line
    if columns is None:
        assert any(
            re.match(r"│ nums +│ backfill │ none +│ default │ completed", li)
            for li in listed.splitlines()
        ), listed


def test_pending_lists_declared_minus_completed_and_check_exits_1(ujobs: Any) -> None:
    doc = json.loads(
        ujobs(
            "backfills",
            "pending",
            *APP,
            "--tenant",
            "acme",
            "--tenant",
            "initech",
            "--json",
            code=0,
        ).output
    )
    assert {env: [(p["name"], p["scope"], p["status"]) for p in ps] for env, ps in doc.items()} == {
        "default": [("per-org", "initech", "never")],
        "production": [
            ("nums", "none", "never"),
            ("per-org", "acme", "never"),
            ("per-org", "initech", "never"),
        ],
    }
    checked = ujobs("backfills", "pending", *APP, "--environment", "default", "--check", code=1)
    assert "per-org" in checked.output
    refused = ujobs("backfills", "pending", code=2)
    assert REFUSAL.findall(refused.output) == ["X_CLI_USAGE_INVALID: "]


def test_show_prints_an_imports_error_report_through_the_rows_reader(
    ujobs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, int]] = []

    async def import_report(driver: Any, run_id: str, limit: int) -> list[dict[str, Any]]:
        asked.append((run_id, limit))
        return [
            {"line": 3, "field": "email", "code": "X_IMPORT_RECORD_INVALID"},
            {"line": 9, "field": None, "code": "X_IMPORT_RECORD_TOO_LARGE"},
        ]

    monkeypatch.setattr(cli, "import_report", import_report)
    shown = ujobs("backfills", "show", "contacts-csv", "--limit", "5").output
    assert (
        "X_IMPORT_RECORD_INVALID" in shown
        and "email" in shown
        and "X_IMPORT_RECORD_TOO_LARGE" in shown
    )
    doc = json.loads(ujobs("backfills", "show", "contacts-csv", "--json").output)
    assert doc["report"][0] == {"line": 3, "field": "email", "code": "X_IMPORT_RECORD_INVALID"}
    assert [limit for _, limit in asked] == [5, 20]


@pytest.mark.parametrize("name", ["[bold]x[/bold]", "\x1b[2Jwipe", "<script>x</script>", "é" * 60])
def test_show_of_a_hostile_name_is_one_refusal_line_printed_as_itself(
    ujobs: Any, name: str
) -> None:
    done = ujobs("backfills", "show", name, code=2)
    assert REFUSAL.findall(done.output) == ["X_JOB_NOT_REGISTERED: "]
    assert "\x1b" not in done.output and "Traceback" not in done.output
    if name.startswith("["):
        assert name in done.output
