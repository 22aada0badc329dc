"""Ctrl-C twice: the first SIGINT drains, the second forces the exit after the drain's first phase.

A real `ujobs worker` subprocess with a 30 s drain budget and endless bodies: the second SIGINT
aborts them at once (`X_DRAINING`), hands every claim back uncounted, says so
(`jobs.worker.forced`) and exits 0 — long before the drain budget.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from jobs_core import Jobs, JobState
from tests.outage import rows_in, until
from tests.test_drain_subprocess import handles, opened, start_worker


# One store: what is tested is the worker's signal path, the same on every driver.
@pytest.mark.parametrize("store_url", ["pg"], indirect=True)
async def test_ctrl_c_twice_forces_the_exit_and_hands_the_claims_back(
    store_url: str, tmp_path: Path
) -> None:
    url = store_url
    async with opened(url) as driver:
        _, endless = handles()
        queued = await Jobs(driver).enqueue_many(endless, [{"n": i} for i in range(3)])
        ids = [q.id for q in queued]
        proc = await start_worker(url, tmp_path, concurrency=2, max_in_flight=3, drain_timeout=30)
        try:
            await until(lambda: rows_in(driver, ids, JobState.RUNNING), 30, "all claimed")
            proc.send_signal(signal.SIGINT)
            await asyncio.sleep(0.5)
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            output, _ = await asyncio.wait_for(proc.communicate(), 60)
            took = time.monotonic() - started
        finally:
            if proc.returncode is None:
                proc.kill()
        text = output.decode()
        assert proc.returncode == 0, text
        assert "jobs.worker.forced" in text, text
        assert took < 5, (took, text[-2000:])  # the drain budget was 30 s
        rows = await driver.job_get_many(ids)
        assert all(r.state is JobState.READY and r.attempt == 0 for r in rows.values()), rows
