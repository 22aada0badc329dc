"""Durable steps with real worker processes on real Postgres and real Redis: a worker SIGKILLed
between two steps, and a run parked on an event while every worker restarts.

Each body writes what it runs to a ledger file outside the store, so "the finished step did
not run again" is read from what really ran, not from what the store says.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.records import JobRecord
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from tests.core.support import ledger_worker, reaping

APP = """
import asyncio, os
from pathlib import Path
from jobs_core import job, Retry

LEDGER = Path(os.environ["LEDGER"])


def note(what):
    with LEDGER.open("a") as f:
        f.write(f"{what} {os.getpid()}\\n")
    return what


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), retry=Retry(attempts=5, base_ms=10))
async def pipeline(input, ctx):
    await ctx.step.run("first", lambda: note("first"))
    note("between")
    await asyncio.sleep(float(os.environ.get("PAUSE", "0")))
    await ctx.step.run("second", lambda: note("second"))
    return "done"


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), event_poll=60)
async def waiter(input, ctx):
    note("waiting")
    got = await ctx.step.wait_for_event("go", "order.go", match={"n": input["n"]}, timeout=600)
    note("woke")
    return got
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "stepapp.py").write_text(APP, encoding="utf-8")
    return tmp_path


def start_worker(app: Path, url: str, **env: str) -> subprocess.Popen[str]:
    return ledger_worker(app, "stepapp", url, "--lease", "2", **env)


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    if proc.poll() is None:
        proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return out


def ledger(app: Path) -> list[str]:
    path = app / "ledger.txt"
    return path.read_text().split("\n")[:-1] if path.exists() else []


def wait_for(check: Any, what: str, within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


async def _enqueue(store_url: str, name: str, input: dict[str, Any]) -> str:
    from jobs_core.job import JobRegistry, job

    async def body(i: Any, ctx: Any) -> None:
        return None

    handle = job(
        body,
        name=name,
        tenant="none",
        idempotency_key=lambda i: str(i["n"]),
        registry=JobRegistry(),
    )
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        return (await Jobs(driver).enqueue(handle, input)).id


async def _row(store_url: str, job_id: str) -> JobRecord:
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        return (await driver.job_get_many([job_id]))[job_id]


def state(store_url: str, job_id: str) -> JobState:
    return asyncio.run(_row(store_url, job_id)).state


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


def test_a_worker_killed_between_two_steps_does_not_run_the_first_again(
    store_url: str, app: Path, workers: list[subprocess.Popen[str]]
) -> None:
    job_id = asyncio.run(_enqueue(store_url, "pipeline", {"n": 1}))
    first = start_worker(app, store_url, PAUSE="60")
    workers.append(first)
    wait_for(lambda: [e.split()[0] for e in ledger(app)] == ["first", "between"], "step one ran")
    first.kill()  # SIGKILL: no drain, no settle; the lease (2 s) lapses
    first.communicate()
    second = start_worker(app, store_url, PAUSE="0")
    workers.append(second)
    wait_for(
        lambda: asyncio.run(_row(store_url, job_id)).state is JobState.COMPLETED,
        "the job completed",
    )
    stop(second)
    ran = [e.split()[0] for e in ledger(app)]
    assert ran == ["first", "between", "between", "second"], ran
    pids = {e.split()[0]: e.split()[1] for e in ledger(app)}
    assert pids["first"] == str(first.pid) and pids["second"] == str(second.pid)
    r = asyncio.run(_row(store_url, job_id))
    assert r.result_json == '"done"' and r.attempt == 2 and r.claims == 2


def test_a_run_waiting_for_an_event_outlives_every_worker(
    store_url: str, app: Path, workers: list[subprocess.Popen[str]]
) -> None:
    job_id = asyncio.run(_enqueue(store_url, "waiter", {"n": 7}))
    first = start_worker(app, store_url)
    workers.append(first)
    wait_for(
        lambda: asyncio.run(_row(store_url, job_id)).state is JobState.PARKED, "the run parked"
    )
    out = stop(first)  # every worker gone (a deploy): the parked run waits in the store
    assert first.returncode == 0, out
    r = asyncio.run(_row(store_url, job_id))
    assert r.state is JobState.PARKED and r.attempt == 0
    second = start_worker(app, store_url)
    workers.append(second)

    async def send() -> int:
        driver: JobDriver = driver_from_url(store_url)
        async with driver:
            return (await Jobs(driver).send_event("order.go", {"n": 7, "by": "test"})).woken

    assert asyncio.run(send()) == 1
    wait_for(lambda: state(store_url, job_id) is JobState.COMPLETED, "the run resumed")
    stop(second)
    r = asyncio.run(_row(store_url, job_id))
    assert json.loads(r.result_json or "null") == {"n": 7, "by": "test"}
    assert [e.split()[0] for e in ledger(app)] == ["waiting", "waiting", "woke"]
