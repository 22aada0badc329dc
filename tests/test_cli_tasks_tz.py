"""`ujobs tasks --tz` (issue 30 item 2), on real Postgres and real Redis: next and last fire
in the zone asked for (each task's own zone without it), to the second when the cron names
seconds, to the minute otherwise; a zone zoneinfo does not know refused as the other reads
refuse it.
"""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner, Result

from jobs_core.cli import main
from jobs_core.cli.base import console
from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.facade import build_record
from jobs_core.job import JobRegistry, job
from jobs_core.operator.times import use_zone
from jobs_core.records import Pause, TaskFire
from jobs_core.scheduler import task
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.urls import driver_from_url

MODULE = __name__  # `ujobs tasks` reads the tasks this module exports


async def _tick(input: object, ctx: JobContext) -> None:
    return None


tick = job(_tick, name="tick", tenant="none", idempotency_key=lambda i: "t", registry=JobRegistry())
ticks = task("ticks", cron="*/10 * * * * *", tz="UTC", job=tick, registry=TaskRegistry())
nightly = task("nightly", cron="0 3 * * *", tz="Europe/Paris", job=tick, registry=TaskRegistry())


def _ujobs(url: str, *args: str) -> Result:
    """One `ujobs tasks` command, in this process."""
    try:
        return CliRunner().invoke(
            main, ["tasks", MODULE, *args, "--driver", url], env={"COLUMNS": "200"}
        )
    finally:
        use_zone(None)  # `--tz` holds for the process: give the next command the default


async def test_tasks_show_next_and_last_fire_in_the_zone_asked_for(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The CLI's console is the process's: one an earlier in-process test sized stays so.
    monkeypatch.setattr(console, "width", 200)
    now = SystemClock().now_ms()
    fired = now - now % 10_000 - 10_000  # the seconds cron's previous occurrence
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        await driver.task_arm(["ticks"], fired - 10_000)  # armed one occurrence before
        record = build_record(tick, None, clock=SystemClock())
        got = await driver.task_fire(TaskFire("ticks", fired - 10_000, fired, fired, record, now))
        assert got.enqueued is not None
    tokyo, own = [
        await asyncio.to_thread(_ujobs, store_url, *args) for args in (("--tz", "Asia/Tokyo"), ())
    ]
    assert tokyo.exit_code == 0 and own.exit_code == 0, (tokyo.output, own.output)
    at = datetime.fromtimestamp(fired / 1000, tz=UTC)
    # The last fire, to the second (the cron names seconds), in Tokyo, then in the task's zone.
    assert at.astimezone(ZoneInfo("Asia/Tokyo")).strftime("%Y-%m-%d %H:%M:%S JST") in tokyo.output
    assert at.strftime("%Y-%m-%d %H:%M:%S UTC") in own.output
    # The next fire of a minute cron, to the minute: 03:00 in Paris is 10:00 or 11:00 in Tokyo.
    assert re.search(r"\d{4}-\d\d-\d\d 1[01]:00 JST \(in ", tokyo.output), tokyo.output
    assert re.search(r"\d{4}-\d\d-\d\d 03:00 CES?T \(in ", own.output), own.output
    assert not re.search(r" 1[01]:00:00 JST", tokyo.output)
    assert " UTC (" not in tokyo.output and " CET (" not in tokyo.output


async def test_a_paused_task_says_what_a_resume_brings(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A paused task's next fire read `<a past time> (8 s ago) (paused)`, as if it had fired
    late. Its next occurrence past, it says it fires once on resume and since when it is due;
    still ahead, when it would fire if resumed by then. `--json` keeps `paused` and the next
    fire the watermark gives."""
    monkeypatch.setattr(console, "width", 300)
    now = SystemClock().now_ms()
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        await driver.task_arm(["ticks"], now - 60_000)  # due since 50 s ago, paused since
        await driver.task_arm(["nightly"], now)  # 03:00 Paris is ahead
        for name in ("ticks", "nightly"):
            assert await driver.pause_add(Pause("task", name))
    shown, as_json = [
        await asyncio.to_thread(_ujobs, store_url, *args) for args in ((), ("--json",))
    ]
    assert shown.exit_code == 0 and as_json.exit_code == 0, (shown.output, as_json.output)
    rows = {line.split("│")[1].strip(): line for line in shown.output.splitlines() if "│" in line}
    assert re.search(
        r"paused: fires once on resume \(due since \d{4}-\d\d-\d\d \d\d:\d\d:\d0 UTC "
        r"\(\d+ (s|min) ago\)\)",
        rows["ticks"],
    ), shown.output
    assert re.search(
        r"paused: would fire \d{4}-\d\d-\d\d 03:00 CES?T \(in .+\) if resumed by then",
        rows["nightly"],
    ), shown.output
    assert "(paused)" not in shown.output
    views = {v["name"]: v for v in json.loads(as_json.output)}
    assert views["ticks"]["paused"] and views["ticks"]["next_fire_ms"] <= now
    assert views["nightly"]["paused"] and views["nightly"]["next_fire_ms"] > now


def test_a_zone_zoneinfo_does_not_know_is_refused() -> None:
    got = CliRunner().invoke(main, ["tasks", MODULE, "--tz", "Mars/Olympus", "--driver", "memory"])
    assert got.exit_code == 2 and "X_JOB_OPTION_INVALID" in got.output, got.output
    assert "--tz" in CliRunner().invoke(main, ["tasks", "--help"]).output
