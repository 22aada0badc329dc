"""`ujobs worker --processes N`, for real: a supervisor and its worker processes on a store.

One run per persistent backend goes through a group's life: a child killed with SIGKILL while
it holds jobs (they come back after the lease, a new child takes its place), children recycled
by `--max-jobs-per-process` (no job lost), the group's metrics on one port counting every job
once across dead and living children, and a SIGTERM that drains every child (exit 0, the held
jobs handed back). A SIGKILL of the supervisor itself must not leave its children running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from jobs_core import JobDriver, Jobs, JobState, job
from jobs_core.cli import main
from jobs_core.job import JobHandle, JobRegistry
from jobs_core.worker.supervisor import RestartPolicy, available_cpus, processes_from
from tests.core.support import code_path
from tests.outage import rows_in, until
from tests.test_drain_subprocess import opened

APP = """
import asyncio, os
from jobs_core import job

GATE = os.path.join(os.path.dirname(__file__), "gate")

@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def quick(input, ctx):
    await asyncio.sleep(0.01)

@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def gated(input, ctx):
    while not os.path.exists(GATE):
        await asyncio.sleep(0.02)
"""


async def _nothing(input: Any, ctx: Any) -> None:
    return None


def _handles() -> tuple[JobHandle, JobHandle]:
    """Handles named like the app's jobs (enqueue only: the bodies run in the children)."""
    reg = JobRegistry()

    def one(name: str) -> JobHandle:
        return job(
            _nothing, name=name, tenant="none", idempotency_key=lambda i: str(i["n"]), registry=reg
        )

    return one("quick"), one("gated")


@contextlib.asynccontextmanager
async def group(
    url: str, cwd: Path, *args: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[str]]]:
    """`ujobs -v worker procapp --processes ...` in a subprocess; yields it and its output lines
    so far (read as they come). Killed if the test leaves it running."""
    (cwd / "procapp.py").write_text(APP, encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobs_core.cli", "-v", "worker", "procapp", "--driver", url,
        "--lease", "1", "--concurrency", "2", *args,
        cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": code_path(cwd)},
    )  # fmt: skip
    lines: list[str] = []

    async def read() -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            lines.append(line.decode(errors="replace"))

    reader = asyncio.create_task(read())
    try:
        yield proc, lines
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await asyncio.wait_for(reader, 10)


def _pids(lines: list[str], event: str) -> list[int]:
    return [int(m[1]) for line in lines if (m := re.search(event + r" slot=\d+ pid=(\d+)", line))]


def _pid_of(claimed_by: str | None) -> int:
    assert claimed_by is not None
    return int(claimed_by.split(":")[-2])


async def _running(driver: JobDriver, ids: list[str]) -> list[Any]:
    rows = await driver.job_get_many(ids)
    return [r for r in rows.values() if r.state is JobState.RUNNING]


def _scrape(port: int, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return str(r.read().decode())


def _sample(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


async def test_a_group_survives_a_kill_recycles_and_drains(store_url: str, tmp_path: Path) -> None:
    async with opened(store_url) as driver:
        quick, gated = _handles()
        jobs = Jobs(driver)
        args = ("--processes", "2", "--max-jobs-per-process", "10", "--drain-timeout", "1.5")
        async with group(store_url, tmp_path, *args, "--metrics-port", "0") as (proc, lines):
            held = [r.id for r in await jobs.enqueue_many(gated, [{"n": i} for i in range(4)])]
            await until(lambda: rows_in(driver, held, JobState.RUNNING), 60, "both children hold")
            victim = _pid_of((await _running(driver, held))[0].claimed_by)
            os.kill(victim, signal.SIGKILL)
            # While the victim's slot restarts, the other child runs past 10 jobs and recycles;
            # the victim's jobs come back after their lease.
            (tmp_path / "gate").touch()
            more = [{"n": i} for i in range(16)]
            quick_ids = [r.id for r in await jobs.enqueue_many(quick, more)]
            ids = held + quick_ids
            await until(lambda: rows_in(driver, ids, JobState.COMPLETED), 60, "all completed")
            port = int(re.findall(r"127\.0\.0\.1:(\d+)/metrics", "".join(lines))[0])
            await until(
                lambda: _sample(_scrape(port), "ujobs_jobs_processed_total") == len(ids),
                5,
                "the group's count: every job once, from dead and living children",
            )
            assert "ujobs_queue_jobs{" in _scrape(port)  # the store's gauges, served once
            await until(lambda: '"ok"' in _health(port), 60, "every slot alive again")

            # A drain of the whole group: two jobs held when SIGTERM comes, handed back.
            (tmp_path / "gate").unlink()
            last = [r.id for r in await jobs.enqueue_many(gated, [{"n": i} for i in (9, 10)])]
            await until(lambda: rows_in(driver, last, JobState.RUNNING), 30, "held at the end")
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 30) == 0, "".join(lines)
        rows = await driver.job_get_many(ids)
        assert all(r.state is JobState.COMPLETED for r in rows.values())
        assert all(rows[i].attempt == 1 for i in quick_ids), "a quick job ran twice"
        started = _pids(lines, "child_started")
        recycled = _pids(lines, "recycled")
        assert recycled and len(started) >= 3 + len(recycled), "".join(lines)
        assert victim in started and victim not in recycled
        ends = await driver.job_get_many(last)
        assert all(r.state is JobState.READY and r.attempt == 0 for r in ends.values()), ends
        # Every child that drained left the registry; the killed one stays until its entry
        # expires (a minute), as no drain ran.
        left = await driver.worker_list(time.time_ns() // 1_000_000)
        assert {_pid_of(w.worker_id) for w in left} <= {victim}


def _health(port: int) -> str:
    try:
        return _scrape(port, "/healthz")
    except OSError as exc:  # 503 while a slot is empty
        return str(exc)


@pytest.mark.parametrize("store_url", ["pg"], indirect=True)
async def test_a_killed_supervisor_leaves_no_child_running(store_url: str, tmp_path: Path) -> None:
    async with opened(store_url) as driver:
        _, gated = _handles()
        held = [r.id for r in await Jobs(driver).enqueue_many(gated, [{"n": i} for i in range(2)])]
        args = ("--processes", "2", "--drain-timeout", "1")
        async with group(store_url, tmp_path, *args) as (proc, lines):
            await until(lambda: rows_in(driver, held, JobState.RUNNING), 30, "held")
            children = _pids(lines, "child_started")
            proc.kill()
            await proc.wait()
            # Each child gets SIGTERM from the kernel: it drains and goes.
            await until(lambda: rows_in(driver, held, JobState.READY), 15, "handed back")
            await until(lambda: not any(map(_alive, children)), 10, "children gone")
        assert len(children) == 2, "".join(lines)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().split(") ", 1)[1][0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "--processes"),
        ("-1", "--processes"),
        ("x", "--processes"),
        ("2.5", "--processes"),
        ("99999", "--processes"),
    ],
)
def test_bad_process_counts_are_refused_before_anything_starts(value: str, message: str) -> None:
    result = CliRunner().invoke(
        main, ["worker", "jobs_core.demo", "--driver", "memory://", "--processes", value]
    )
    assert result.exit_code == 2, result.output
    assert "X_JOB_OPTION_INVALID" in result.output and message in result.output


def test_processes_on_the_memory_store_are_refused() -> None:
    args = ["worker", "jobs_core.demo", "--driver", "memory://", "--processes", "2"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "X_CLI_USAGE_INVALID" in result.output and "share" in result.output


def test_a_recycle_count_below_one_is_refused() -> None:
    args = ["worker", "jobs_core.demo", "--driver", "memory://", "--max-jobs-per-process", "0"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "--max-jobs-per-process" in result.output, result.output


def test_auto_is_the_cpus_this_process_may_use() -> None:
    assert processes_from("auto") == available_cpus() >= 1
    assert processes_from(" AUTO ") == available_cpus()
    assert processes_from("3") == 3


def test_restarts_back_off_and_a_crash_loop_gives_up() -> None:
    policy = RestartPolicy(base_s=0.5, cap_s=4.0, start_window_s=10.0, max_early_deaths=3)
    assert policy.died(1, lived_s=60.0) == 0.5  # a crash after a good run
    assert [policy.died(n, lived_s=0.1) for n in (1, 2)] == [0.5, 1.0]
    policy.survived()  # another child lived past the window: no loop
    assert [policy.died(n, lived_s=0.1) for n in (3, 4)] == [2.0, 4.0]
    assert policy.died(5, lived_s=0.1) is None  # three early deaths in a row
    assert RestartPolicy(cap_s=30.0).died(20, lived_s=60.0) == 30.0


def test_each_child_gets_its_share_of_the_process_pool() -> None:
    """Unless `--process-pool` is given, the group's children split the CPUs between their
    pools for `executor="process"` bodies (not each the whole count); a given size is kept."""
    from jobs_core.cli.group import child_argv
    from jobs_core.cli.run import worker
    from jobs_core.worker.supervisor import available_cpus

    def pool_of(*extra: str) -> list[str]:
        ctx = worker.make_context("worker", ["tests.core.process_bodies", *extra])
        argv = child_argv(ctx, 4)
        return [argv[i + 1] for i, a in enumerate(argv) if a == "--process-pool"]

    assert pool_of() == [str(max(1, available_cpus() // 4))]
    assert pool_of("--process-pool", "3") == ["3"]
