"""`executor="process"` bodies killed as their run ended, or whose process died, are counted on
`/metrics` (`ujobs_processes_killed_total`, `ujobs_processes_died_total`) as in `WorkerStats`."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from jobs_core.facade import Jobs
from jobs_core.operator.metrics import WorkerMetrics
from jobs_core.worker import Worker
from jobs_core.worker.supervisor import ChildHooks
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
