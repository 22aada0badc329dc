"""What the README says the CLI prints, it prints, on real Postgres and real Redis; and no table
cuts an id, a state or a name at any width.

The store holds what an operator meets (`tests/dashboard/shopapp.py`): a completed charge, a
dead shipment that recorded a step before it failed (its traceback stored), a delayed charge,
and a job named like Rich markup. Each `ujobs` verb runs in its own process as a user runs it
(forks of one interpreter that imported the CLI once, tests/cli_forks.py, its output a file):
at 80 and 40 columns every id, state, queue and job name it shows appears whole (the table
folds its other columns, or prints `header: value` lines), with no `…`; piped with no
`COLUMNS`, each row is one line; and the README's sample tables have the very columns the CLI
prints.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_core.worker import Worker
from tests.cli_forks import Forked, forked
from tests.core.support import ROOT, cli_commands, code_path, declare, until
from tests.dashboard import shopapp

MARKUP_NAME = "report[/x] [bold]:smile:"
APP = "tests.dashboard.shopapp"


async def _noop(input: object, ctx: object) -> None:
    return None


@pytest.fixture
async def shop(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[dict[str, str]]:
    """The store filled, and the ids by role; the worker that ran them is forgotten."""
    monkeypatch.setenv("SHOP_GATES", str(tmp_path))  # no gate: a shipment fails for good
    oddly = declare(_noop, name=MARKUP_NAME, queue="emails[eu]")
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        jobs = Jobs(driver)
        done = await jobs.enqueue(shopapp.charge, {"n": 1, "card": "4242"})
        dead = await jobs.enqueue(shopapp.ship, {"order": 7})
        later = await jobs.enqueue(shopapp.charge, {"n": 2, "card": "4242"}, delay_ms=3_600_000)
        odd = await jobs.enqueue(oddly, {}, key="odd")
        worker = Worker(driver, [shopapp.charge, shopapp.ship], poll_floor=0.01, poll_ceiling=0.05)
        await worker.start()

        async def ended() -> bool:
            rows = await driver.job_get_many([done.id, dead.id])
            return (
                rows[done.id].state is JobState.COMPLETED and rows[dead.id].state is JobState.DEAD
            )

        try:
            await until(ended, within=30)
        finally:
            await worker.stop()
        await driver.worker_forget(worker.worker_id)
        yield {"done": done.id, "dead": dead.id, "later": later.id, "odd": odd.id}


def ujobs(*args: str, url: str, columns: int | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "UJOBS_DRIVER": url, "PYTHONPATH": code_path()}
    env.pop("COLUMNS", None)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    done = subprocess.run(
        [sys.executable, "-m", "jobs_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def ujobs_each(
    tmp: Path, url: str, *runs: tuple[tuple[str, ...], int | None], at_once: int = 4
) -> list[Forked]:
    """Each `(args, columns)` as `ujobs` runs it, but a fork of one interpreter that imported the
    CLI and the drivers (tests/cli_forks.py), `at_once` at a time (1: in order, each after the
    one before ended); each checked to exit 0."""
    env = {**os.environ, "UJOBS_DRIVER": url, "PYTHONPATH": code_path()}
    env.pop("COLUMNS", None)
    done = forked(
        [(list(args), env if c is None else {**env, "COLUMNS": str(c)}, ROOT) for args, c in runs],
        tmp,
        at_once=at_once,
    )
    for run in done:
        assert run.returncode == 0, (run.args, run.stdout + run.stderr)
    return done


async def test_every_table_shows_ids_states_and_names_whole_at_80_and_40_columns(
    store_url: str, shop: dict[str, str], tmp_path: Path
) -> None:
    whole = [*shop.values(), "charge", "ship", "payments", "shipping", "emails[eu]", MARKUP_NAME]
    whole += ["completed", "dead", "ready", "label", "nightly-report", "0 3 * * *"]
    verbs = [
        ("jobs", "list"),
        ("jobs", "show", shop["dead"]),
        ("jobs", "show", shop["odd"]),
        ("queues",),
        ("stats",),
        ("tasks", APP),
    ]
    runs = [(verb, columns) for columns in (80, 40) for verb in verbs]
    # The reads side by side, then the cancel (the reads show the delayed job ready).
    outs = await asyncio.to_thread(ujobs_each, tmp_path / "reads", store_url, *runs)
    (steered,) = await asyncio.to_thread(
        ujobs_each, tmp_path / "cancel", store_url, (("jobs", "cancel", shop["later"]), 40)
    )
    runs.append((("jobs", "cancel"), 40))
    seen: dict[int, str] = {80: "", 40: ""}
    for (verb, columns), done in zip(runs, [*outs, steered], strict=True):
        out = done.stdout
        assert "…" not in out, (verb, columns, out)
        for line in out.splitlines():
            if line[:1] in "┏┃┡│└":  # a table fits the width; only free text runs on
                assert len(line) <= columns, (verb, columns, out)
        seen[columns] += out
    for columns, out in seen.items():
        missing = [w for w in whole if w not in out]
        assert not missing, (columns, missing, out)


async def test_jobs_show_prints_every_field_input_error_traceback_and_steps(
    store_url: str, shop: dict[str, str], tmp_path: Path
) -> None:
    # No live worker: `--app` names the declarations that say what is safe to show.
    table, shown_out, odd_out = await asyncio.to_thread(
        ujobs_each,
        tmp_path,
        store_url,
        (("jobs", "show", shop["dead"], "--app", APP), 120),
        (("jobs", "show", shop["dead"], "--json", "--app", APP), None),
        (("jobs", "show", shop["odd"]), 120),
    )
    out = table.stdout
    for part in ("state", "dead", "input", "last error", "RuntimeError", "Traceback", "steps"):
        assert part in out, (part, out)
    # The step the run recorded before it failed: its name and its output.
    (step_line,) = [line for line in out.splitlines() if " label " in line]
    assert '"label-7"' in step_line, out
    shown = json.loads(shown_out.stdout)
    assert [s["name"] for s in shown["steps"]] == ["label"]
    assert shown["steps"][0]["output"] == "label-7"
    # The attempt timeline: claimed (started) -> the step it recorded -> settled, with its error.
    (attempt,) = shown["attempts"]
    assert (attempt["attempt"], attempt["outcome"], attempt["error_code"]) == (
        1,
        "dead",
        "RuntimeError",
    ), attempt
    assert attempt["error_message"] == "the warehouse is closed for order 7", attempt
    assert [s["name"] for s in attempt["steps"]] == ["label"], attempt
    assert "RuntimeError" in attempt["traceback"], attempt
    timeline = out.split("attempts (the last", 1)[1]
    claimed, step, settled = timeline.splitlines()[1:4]
    assert claimed.startswith("#1 claim 1 by ") and "claimed (started)" in claimed, timeline
    assert step.strip().startswith('step "label" recorded +'), timeline
    assert "settled dead +" in settled, timeline
    assert "RuntimeError: the warehouse is closed for order 7" in settled, timeline
    odd = odd_out.stdout
    assert MARKUP_NAME in odd and "emails[eu]" in odd and "😄" not in odd


def _readme_header(command: str) -> list[str]:
    """The column names of the sample table printed by `$ <command>` in the site's Operations
    page (the README's section, moved)."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    after = text.split(f"$ {command}\n", 1)[1]
    header = next(line for line in after.splitlines() if line.startswith("┃"))
    return [c.strip() for c in header.strip("┃").split("┃")]


def _printed_header(out: str) -> list[str]:
    header = next(line for line in out.splitlines() if line.startswith("┃"))
    return [c.strip() for c in header.strip("┃").split("┃")]


async def test_the_readme_samples_show_what_the_cli_prints(
    store_url: str, shop: dict[str, str], tmp_path: Path
) -> None:
    # A process of its own, its stdout a pipe: what a script reading it gets.
    listed = (
        await asyncio.to_thread(
            ujobs, "jobs", "list", "--state", "dead", url=store_url, columns=None
        )
    ).stdout
    # Then in order, each after the one before: the pause comes before the requeue it holds.
    requeue = ("jobs", "requeue", "--state", "dead", "--queue", "shipping", "--all")
    queues_out, _, requeued_out, paused_out, tasks_out = await asyncio.to_thread(
        ujobs_each,
        tmp_path,
        store_url,
        (("queues",), None),
        (("pause", "shipping"), None),
        (requeue, None),
        (("pause", "emails[eu]"), None),
        (("tasks", APP), None),
        at_once=1,
    )
    assert _printed_header(listed) == _readme_header("ujobs jobs list --state dead --queue emails")
    # Piped with no COLUMNS, a row is one line, however wide: the id, its name and state on it.
    (row,) = [line for line in listed.splitlines() if shop["dead"] in line]
    assert "ship" in row and "dead" in row
    queues = queues_out.stdout
    assert _printed_header(queues) == _readme_header("ujobs queues")
    requeued = requeued_out.stdout
    assert re.fullmatch(r"requeue: 1 jobs looked at — 1 requeued\n", requeued), requeued
    paused = paused_out.stdout
    assert paused == "queue 'emails[eu]' paused\n"
    tasks = tasks_out.stdout
    text = (ROOT / "docs" / "guides" / "scheduling.md").read_text(encoding="utf-8")
    tasks_sample = text.split("`ujobs tasks` lists each task", 1)[1]
    sample_header = next(line for line in tasks_sample.splitlines() if line.startswith("┃"))
    assert _printed_header(tasks) == [c.strip() for c in sample_header.strip("┃").split("┃")]


def test_no_commands_help_sends_a_user_into_the_source() -> None:
    """Every `--help` (and the CLI reference page, rendered from them) explains in its own
    words: an installed user has no checkout to open a `jobs_core/….py` in."""
    from click.testing import CliRunner

    from jobs_core.cli import main

    for path in cli_commands(main):
        shown = CliRunner().invoke(main, [*path, "--help"], env={"COLUMNS": "300"})
        assert shown.exit_code == 0, (path, shown.output)
        assert not re.search(r"jobs_(?:core|pg|redis|memory)/|\.py\b", shown.output), path
