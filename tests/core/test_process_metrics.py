"""`executor="process"` bodies killed as their run ended, or whose process died, are counted on
`/metrics` (`ujobs_processes_killed_total`, `ujobs_processes_died_total`) as in `WorkerStats`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from jobs_core.facade import Jobs
from jobs_core.lifecycle import run_role
from jobs_core.operator import metrics as metrics_module
from jobs_core.operator.metrics import WorkerMetrics
from jobs_core.worker import Worker
from jobs_core.worker.supervisor import MULTIPROC_ENV, ChildHooks
from jobs_memory import MemoryDriver
from tests.core import process_bodies as pb
from tests.core.support import until
from tests.core.test_observability import _value


async def test_killed_and_dead_processes_are_counted_on_metrics(tmp_path: Path) -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    worker = Worker(
        driver, [pb.h_runaway, pb.h_crash], poll_floor=0.005, poll_ceiling=0.05, process_pool_size=1
    )
    metrics = WorkerMetrics(worker, asyncio.get_running_loop())
    # Scraped as a server does, off the loop (the store's gauges are read on it).
    text = (await asyncio.to_thread(metrics.render)).decode()
    assert _value(text, "ujobs_processes_killed_total") == 0
    assert _value(text, "ujobs_processes_died_total") == 0
    ids = [
        (await jobs.enqueue(pb.h_runaway, {"n": 1, "org": "o1", "pid": str(tmp_path / "p")})).id,
        (await jobs.enqueue(pb.h_crash, {"n": 1, "how": "exit"})).id,
    ]

    async def finished() -> bool:
        return all(r.finished_at_ms is not None for r in (await driver.job_get_many(ids)).values())

    await worker.start()
    try:
        await until(finished, within=30)
    finally:
        await worker.stop()
    assert worker.stats.processes_killed == 1 and worker.stats.processes_died == 1
    for _ in range(2):  # read twice: a scrape counts each kill once
        text = (await asyncio.to_thread(metrics.render)).decode()
        assert _value(text, "ujobs_processes_killed_total") == 1
        assert _value(text, "ujobs_processes_died_total") == 1


async def test_a_group_child_writes_its_counters_once_more_after_its_drain() -> None:
    """In a `--processes` group a child's counters reach the supervisor only as the child writes
    them: its gauge loop writes them once more when the worker stopped (a drain's kills count),
    then ends."""
    driver = MemoryDriver()
    worker = Worker(driver, [pb.h_crash], poll_floor=0.005, poll_ceiling=0.05)
    metrics = WorkerMetrics(worker, asyncio.get_running_loop(), group_child=True)
    await worker.start()
    loop_task = asyncio.create_task(
        ChildHooks(parent_pid=os.getppid())._live_gauges(worker, metrics)
    )
    await asyncio.sleep(0.05)
    worker.stats.processes_killed += 1  # as a drain killing a running body counts it
    await worker.stop()
    await asyncio.wait_for(loop_task, 2)
    assert metrics.registry.get_sample_value("ujobs_processes_killed_total") == 1


@pytest.mark.parametrize("loop", ["asyncio", "auto"])
def test_a_group_childs_last_write_outlives_run_roles_cancel(
    loop: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The child's main ends as its worker's run returns (`_serve_worker`), and `run_role`
    then cancels what is left: the gauge loop, woken by the same stop, had not yet made its
    last write. That write comes first all the same: its wake-up was queued before the loop
    stopped, and the cancelling task is queued after it (the drain's counts reach the group)."""
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    made: list[WorkerMetrics] = []

    class Kept(WorkerMetrics):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(metrics_module, "WorkerMetrics", Kept)

    async def main() -> None:
        driver = MemoryDriver()
        worker = Worker(driver, [pb.h_crash], poll_floor=0.005, poll_ceiling=0.05)
        ChildHooks(parent_pid=os.getppid()).attach(worker)
        await worker.start()

        async def drain() -> None:
            await asyncio.sleep(0.05)
            worker.stats.processes_killed += 1  # as a drain killing a running body counts it
            await worker.stop()

        stopping = asyncio.create_task(drain())  # as the signal handler's drain runs
        await worker.run()
        assert not stopping.cancelled()

    run_role(main(), loop)
    assert made and made[0].registry.get_sample_value("ujobs_processes_killed_total") == 1
