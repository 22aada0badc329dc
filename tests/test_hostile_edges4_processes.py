"""A saga's compensation is a side effect with its record after it: a worker SIGKILLed between
the two, on real Postgres and Redis, with the compensations written to a ledger file outside
the store (what really ran, not what the store says).

Pinned (docs/guides/steps.md, Sagas): the killed compensation runs again (AT LEAST once), the
one whose record landed before the kill never runs again, the body's completed steps are not
re-run by the unwinding replay, and the failed job and its unwind both end.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from jobs_core.driver import JobDriver
from jobs_core.records import JobFilter, JobListParams, JobSummary
from jobs_core.states import FINISHED_STATES, JobState
from jobs_core.urls import driver_from_url
from tests.core.support import ledger_worker
from tests.test_steps_processes import _enqueue, _row, ledger, stop, wait_for, workers

__all__ = ["workers"]  # the fixture, shared

APP = """
import asyncio, os
from pathlib import Path
from jobs_core import job, Retry, TerminalError

LEDGER = Path(os.environ["LEDGER"])


def note(what):
    with LEDGER.open("a") as f:
        f.write(f"{what} {os.getpid()}\\n")
    return {"did": what}


async def refund(done):
    note("refund")
    # The kill lands here: the refund went out, its record did not.
    await asyncio.sleep(float(os.environ.get("PAUSE", "0")))


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), retry=Retry(attempts=1))
async def checkout(input, ctx):
    await ctx.step.run("charge", lambda: note("charge"), compensate=refund)
    await ctx.step.run("reserve", lambda: note("reserve"), compensate=lambda d: note("release"))
    raise TerminalError("the card was declined after all")
"""


async def _all_rows(store_url: str) -> list[JobSummary]:
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        return list((await driver.job_list(JobListParams(JobFilter(), 100))).jobs)


def test_a_worker_killed_inside_a_compensation_runs_it_again_and_no_other(
    store_url: str, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    app = tmp_path
    (app / "sagaapp.py").write_text(APP, encoding="utf-8")

    def start_worker(pause: str) -> subprocess.Popen[str]:
        return ledger_worker(app, "sagaapp", store_url, "--lease", "2", PAUSE=pause)

    job_id = asyncio.run(_enqueue(store_url, "checkout", {"n": 1}))
    first = start_worker("60")
    workers.append(first)
    wait_for(lambda: "refund" in [e.split()[0] for e in ledger(app)], "the refund went out")
    first.kill()  # SIGKILL: the refund's record never lands; the unwind's lease (2 s) lapses
    first.communicate()
    assert [e.split()[0] for e in ledger(app)] == ["charge", "reserve", "release", "refund"]
    second = start_worker("0")
    workers.append(second)

    def unwound() -> bool:
        rows = asyncio.run(_all_rows(store_url))
        return len(rows) == 2 and all(r.state in FINISHED_STATES for r in rows)

    wait_for(unwound, "the failed job and its unwind ended")
    stop(second)
    ran = [e.split()[0] for e in ledger(app)]
    # Only the killed compensation again; the released reservation and the steps never.
    assert ran == ["charge", "reserve", "release", "refund", "refund"], ran
    pids = [e.split()[1] for e in ledger(app)]
    assert pids[-1] == str(second.pid) and pids[-2] == str(first.pid)
    failed = asyncio.run(_row(store_url, job_id))
    assert failed.state in (JobState.DEAD, JobState.FAILED)
    (unwind,) = [r for r in asyncio.run(_all_rows(store_url)) if r.id != job_id]
    assert unwind.name == "ujobs.unwind" and unwind.state is JobState.COMPLETED
