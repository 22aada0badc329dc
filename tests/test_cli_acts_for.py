"""What the CLI says of who a job acts for and of what it waits for (issue 30, items 2 and 3),
on real Postgres and real Redis: the org column and `--acts-for`, the org and the input
redacted without `--app` with the way to see them, a scheduled job's time in words and in
`--tz`, a zone zoneinfo does not know refused, and the stats legend.
"""

from __future__ import annotations

import asyncio
import re

from click.testing import CliRunner, Result

from jobs_core import acting_for
from jobs_core.cli import main
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.operator.times import use_zone
from jobs_core.urls import driver_from_url
from tests.dashboard import shopapp

APP = "tests.dashboard.shopapp"  # `charge` acts for its input's org, its card sensitive


def _ujobs(url: str, *args: str) -> Result:
    """One `ujobs` command, in this process (a process each would cost seconds of imports)."""
    try:
        return CliRunner().invoke(main, [*args, "--driver", url], env={"COLUMNS": "200"})
    finally:
        use_zone(None)  # `--tz` holds for the process: give the next command the default


async def test_lists_show_and_filter_who_a_job_acts_for_and_say_what_it_waits_for(
    store_url: str,
) -> None:
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        jobs = Jobs(driver)
        with acting_for("ops"):  # the enqueuer's tenant, the limiter's bucket
            one = await jobs.enqueue(shopapp.charge, {"n": 1, "card": "4242", "org": "org_1"})
            await jobs.enqueue(shopapp.charge, {"n": 2, "card": "4242", "org": "org_2"})
            later = await jobs.enqueue(
                shopapp.charge, {"n": 3, "card": "4242", "org": "org_1"}, delay_ms=7_200_000
            )
    calls = [
        ("jobs", "list", "--acts-for", "org_1", "--app", APP),
        ("jobs", "list"),
        ("jobs", "show", one.id),
        ("jobs", "show", later.id, "--app", APP, "--tz", "Asia/Tokyo"),
    ]
    done = [await asyncio.to_thread(_ujobs, store_url, *c) for c in calls]
    acting, bare, hidden, scheduled = done
    for d in done:
        assert d.exit_code == 0, d.output
    assert "acts for" in acting.output
    rows = [line for line in acting.output.splitlines() if "charge" in line]
    assert len(rows) == 2 and all("org_1" in r for r in rows), acting.output
    assert one.id in acting.output and later.id in acting.output
    # No `--app`, no live worker: the org is hidden as the input it came from, and it says how.
    assert "org_1" not in bare.output and "[redacted]" in bare.output
    assert "pass --app MODULE" in bare.output
    assert "org_1" not in hidden.output and "4242" not in hidden.output
    assert "[redacted: no live worker declares this job; pass --app MODULE" in hidden.output
    assert "waits for: its time: scheduled for " in scheduled.output
    assert re.search(r"\+0900 \(in (2 h|1 h 59 min)\)", scheduled.output), scheduled.output
    assert "acts for        │ org_1" in scheduled.output
    assert "4242" not in scheduled.output and "[redacted] marks a field" in scheduled.output


def test_a_zone_zoneinfo_does_not_know_is_refused_and_stats_defines_its_columns() -> None:
    refusals = {
        "Mars/Olympus": "X_JOB_OPTION_INVALID",
        "../etc/passwd": "X_JOB_OPTION_INVALID",
        "Europe/Paris\x00": "X_CLI_USAGE_INVALID",  # no argument holds a NUL
    }
    for tz, code in refusals.items():
        got = CliRunner().invoke(main, ["jobs", "show", "x", "--tz", tz, "--driver", "memory"])
        assert got.exit_code == 2 and code in got.output, got.output
    told = CliRunner().invoke(main, ["stats", "--help"]).output
    assert "shed (given back WITHOUT spending an attempt" in " ".join(told.split())
    assert "suspended (the run parked itself" in told
    printed = CliRunner().invoke(main, ["stats", "--driver", "memory"])
    assert printed.exit_code == 0, printed.output
    assert "shed: given back without spending an attempt" in printed.output
    assert "suspended: the run parked itself" in printed.output
