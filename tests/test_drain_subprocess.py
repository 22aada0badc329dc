"""A deploy, for real: `ujobs worker` in a subprocess gets SIGTERM mid-work.

It must stop claiming, let short bodies finish, abort the endless ones at the drain deadline
with `X_DRAINING`, hand every claim back without spending an attempt, forget itself in the
registry and exit 0. Then a second worker finishes everything, each job on attempt one: no job
lost, no attempt burned by the deploy. Runs on both persistent backends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from jobs_core import JobDriver, Jobs, JobState, Worker, job
from jobs_core.job import JobHandle, JobRegistry
from jobs_core.urls import driver_from_url
from tests.core.support import code_path

JOBS_MODULE = """
import asyncio
from jobs_core import job

@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def quick(input, ctx):
    await asyncio.sleep(0.05)

@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def endless(input, ctx):
    await asyncio.sleep(3600)
"""


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[JobDriver]:
    driver = driver_from_url(url)
    async with driver:
        yield driver


async def nothing(input: Any, ctx: Any) -> None:
    return None


def handles(endless_body: Any = nothing) -> tuple[JobHandle, JobHandle]:
    """Handles named like the subprocess's jobs; the test's own bodies never run there."""
    reg = JobRegistry()
    quick = nothing

    return (
        job(
            quick, name="quick", tenant="none", idempotency_key=lambda i: str(i["n"]), registry=reg
        ),
        job(
            endless_body,
            name="endless",
            tenant="none",
            idempotency_key=lambda i: str(i["n"]),
            registry=reg,
        ),
    )


async def start_worker(
    url: str, cwd: Path, *, concurrency: int, max_in_flight: int, drain_timeout: float
) -> asyncio.subprocess.Process:
    """`ujobs worker drainjobs --quiet` on the store at `url`, in a subprocess run from `cwd`
    (where the `drainjobs` module is written first); its output is piped, stderr into stdout."""
    (cwd / "drainjobs.py").write_text(JOBS_MODULE, encoding="utf-8")
    args = ["worker", "drainjobs", "--driver", url, "--concurrency", str(concurrency)]
    args += ["--max-in-flight", str(max_in_flight), "--drain-timeout", f"{drain_timeout:g}"]
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobs_core.cli", *args, "--quiet",
        cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": code_path(cwd)},
    )  # fmt: skip


async def test_sigterm_drains_without_losing_a_job_or_spending_an_attempt(
    store_url: str, tmp_path: Path
) -> None:
    url = store_url  # a fresh store on each backend (tests/conftest.py), dropped after it
    async with opened(url) as driver:
        quick, endless = handles()
        jobs = Jobs(driver)
        long_ids = [r.id for r in await jobs.enqueue_many(endless, _inputs(3))]
        quick_ids = [r.id for r in await jobs.enqueue_many(quick, _inputs(30))]
        ids = long_ids + quick_ids
        proc = await start_worker(url, tmp_path, concurrency=4, max_in_flight=8, drain_timeout=1.5)
        try:
            await _until_mid_work(driver, long_ids, quick_ids)
            proc.send_signal(signal.SIGTERM)
            output, _ = await asyncio.wait_for(proc.communicate(), 30)
        finally:
            if proc.returncode is None:
                proc.kill()
        assert proc.returncode == 0, output.decode()

        rows = await driver.job_get_many(ids)
        assert len(rows) == len(ids), "a job was lost"
        states = {r.state for r in rows.values()}
        assert states <= {JobState.COMPLETED, JobState.READY}, states
        for r in rows.values():
            expected = 1 if r.state is JobState.COMPLETED else 0
            assert r.attempt == expected, (r.name, r.state, r.attempt)
        assert all(rows[i].state is JobState.READY and rows[i].claims >= 1 for i in long_ids)
        assert await driver.worker_list(_now()) == []

        async def finishes(input: Any, ctx: Any) -> None:
            return None

        quick, endless = handles(finishes)
        worker = Worker(driver, [quick, endless], poll_floor=0.01)
        await worker.start()
        await _until_all_completed(driver, ids)
        await worker.stop()
        rows = await driver.job_get_many(ids)
        assert all(r.state is JobState.COMPLETED and r.attempt == 1 for r in rows.values())


def _inputs(n: int) -> list[dict[str, int]]:
    return [{"n": i} for i in range(n)]


def _now() -> int:
    return time.time_ns() // 1_000_000


async def _until_mid_work(driver: JobDriver, long_ids: list[str], quick_ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = await driver.job_get_many(long_ids + quick_ids)
        running_long = sum(rows[i].state is JobState.RUNNING for i in long_ids)
        done_quick = sum(rows[i].state is JobState.COMPLETED for i in quick_ids)
        if running_long == 3 and 5 <= done_quick < len(quick_ids):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the worker never reached mid-work")


async def _until_all_completed(driver: JobDriver, ids: list[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = await driver.job_get_many(ids)
        if all(r.state is JobState.COMPLETED for r in rows.values()):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the second worker did not finish every job")
