"""Two real `ujobs scheduler` processes on real Postgres and real Redis, the leader SIGKILLed in
the middle of a round: every occurrence of the window fired exactly once.

The task fires every second with `catch_up="run-once"`, and its input function writes the span
each fire covers (`Occurrence.first_ms`..`last_ms`) to a ledger, then dawdles, so a round lasts
long enough to be killed inside. The store's rows are the proof: their spans, in order, must
tile the window — each next span starting at the occurrence after the previous one ended, none
overlapping — whoever led and whatever the kill interrupted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from jobs_core.driver import JobDriver
from jobs_core.records import JobFilter, JobListParams
from jobs_core.scheduler.cron import CronSchedule
from jobs_core.urls import driver_from_url
from tests.core.support import ledger_process

APP = """
import os, time
from pathlib import Path
from jobs_core import job
from jobs_core.scheduler import task

LEDGER = Path(os.environ["LEDGER"])


@job(tenant="none", idempotency_key=lambda i: "tick")
async def tick(input, ctx):
    return None


def span(o):
    with LEDGER.open("a") as f:
        f.write(f"{os.getpid()} {o.first_ms} {o.last_ms}\\n")
    time.sleep(0.3)  # a round long enough to be killed in the middle of
    return {"first": o.first_ms, "last": o.last_ms}


ticks = task("ticks", cron="* * * * * *", tz="UTC", job=tick, input=span, catch_up="run-once")
"""


def _scheduler(app: Path, url: str) -> subprocess.Popen[str]:
    return ledger_process(app, url, "-v", "scheduler", "schedapp", "--lease", "3")


def _ledger(app: Path) -> list[tuple[int, int, int]]:
    path = app / "ledger.txt"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        pid, first, last = line.split()
        out.append((int(pid), int(first), int(last)))
    return out


def _wait(check: Any, within: float, procs: list[subprocess.Popen[str]]) -> Any:
    deadline = time.monotonic() + within
    while not (answer := check()):
        for p in procs:
            assert p.poll() is None, p.communicate()[0]
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.02)
    return answer


async def _spans(url: str) -> list[tuple[int, int, str]]:
    driver: JobDriver = driver_from_url(url)
    async with driver:
        page = await driver.job_list(JobListParams(JobFilter(), limit=500))
        rows = await driver.job_get_many([j.id for j in page.jobs])
        marks = await driver.task_marks(["ticks"])
    assert page.next_cursor is None or len(page.jobs) < 500
    spans = []
    for r in rows.values():
        span = json.loads(r.input_json)
        spans.append((span["first"], span["last"], r.idempotency_key))
    spans.sort()
    assert marks["ticks"].watermark_ms == spans[-1][1]
    return spans


def test_a_killed_leader_is_replaced_and_each_occurrence_fires_once(
    store_url: str, tmp_path: Path
) -> None:
    (tmp_path / "schedapp.py").write_text(APP, encoding="utf-8")
    procs = [_scheduler(tmp_path, store_url) for _ in range(2)]
    try:
        _wait(lambda: len(_ledger(tmp_path)) >= 3, 30, procs)
        leader_pid = _ledger(tmp_path)[-1][0]
        leader = next(p for p in procs if p.pid == leader_pid)
        # Mid-round: its input function has just written a span and is dawdling before the fire.
        seen = len(_ledger(tmp_path))
        _wait(lambda: len(_ledger(tmp_path)) > seen, 10, procs)
        time.sleep(0.1)
        leader.send_signal(signal.SIGKILL)
        leader.wait(timeout=10)
        procs.remove(leader)
        survivor = procs[0]
        # The survivor takes over once the lease (3 s) lapses, then fires a few more.
        _wait(
            lambda: sum(1 for pid, *_ in _ledger(tmp_path) if pid == survivor.pid) >= 3, 30, procs
        )
        survivor.send_signal(signal.SIGTERM)
        out = survivor.communicate(timeout=30)[0]
        assert survivor.returncode == 0, out
        assert "jobs.scheduler.released" in out, out
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    spans = asyncio.run(_spans(store_url))
    every_second = CronSchedule("* * * * * *", "UTC")
    keys = [k for _, _, k in spans]
    assert len(set(keys)) == len(keys)
    assert all(first <= last and key == f"task:{first}:tick" for first, last, key in spans)
    for (_, last, _), (nxt, _, _) in itertools.pairwise(spans):
        # No occurrence fired twice (overlap) and none lost (gap) between two fires.
        assert nxt == every_second.next_after(last), (last, nxt)
    # The takeover's catch-up covered what the dead leader left: one fire, a span of seconds.
    assert any(last > first for first, last, _ in spans), spans
    pids = {pid for pid, *_ in _ledger(tmp_path)}
    assert len(pids) == 2, "one process fired everything: there was no takeover"
