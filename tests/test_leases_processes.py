"""Fleet-wide limits across real worker processes on real Postgres and real Redis.

Four `ujobs worker` processes share one store. Each body writes its start and its end to a
ledger file outside the store, so "never more than N at once" and "never more than N starts in a
window" are read from what really ran, not from what the store says. A start is written after
the run took its slot or stamp and an end before it hands it back, so the ledger's intervals
are inside the holdings: any overlap beyond the limit is a real breach.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import JobRegistry, job
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from tests.core.support import ledger_worker

APP = """
import asyncio, os, time
from pathlib import Path
from jobs_core import RateLimit, job
from jobs_core.facade import default_client

LEDGER = Path(os.environ["LEDGER"])


def note(*fields):
    with LEDGER.open("a") as f:
        f.write(" ".join(str(x) for x in fields) + "\\n")


async def run(name, key, ctx, seconds):
    note("start", name, key, ctx.job_id, time.time(), os.getpid())
    await asyncio.sleep(seconds)
    note("end", name, key, ctx.job_id, time.time(), os.getpid())


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), concurrency=2)
async def pair(input, ctx):
    await run("pair", "-", ctx, 0.05)


@job(
    tenant="none",
    idempotency_key=lambda i: str(i["n"]),
    concurrency={"key": lambda i: i["k"], "limit": 1},
)
async def serial(input, ctx):
    await run("serial", input["k"], ctx, 0.03)


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), rate_limit=RateLimit(3, per=0.5))
async def rated(input, ctx):
    await run("rated", "-", ctx, 0.0)
    # The claim that admitted this run took its rate stamp at the very instant its lease starts
    # from (one `now`), so the row's lease end names the stamp exactly, however late the body
    # itself got the CPU. (The lease is long enough that no heartbeat has moved it yet.)
    row = (await default_client().driver.job_get_many([ctx.job_id]))[ctx.job_id]
    note("leased", "rated", "-", ctx.job_id, row.lease_until_ms, os.getpid())
"""

WORKERS = 4
#: The workers' lease: its heartbeat (a third of it) never comes within the test, so a rated
#: run's lease end is still the one its claim set.
LEASE_S = 600


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "limitsapp.py").write_text(APP, encoding="utf-8")
    return tmp_path


def _handle(name: str, **options: Any) -> Any:
    async def body(i: Any, ctx: Any) -> None:
        return None

    return job(
        body,
        name=name,
        tenant="none",
        idempotency_key=lambda i: str(i["n"]),
        registry=JobRegistry(),
        **options,
    )


async def _enqueue_all(url: str) -> list[str]:
    driver: JobDriver = driver_from_url(url)
    async with driver:
        client = Jobs(driver)
        ids = []
        pair, serial, rated = _handle("pair"), _handle("serial"), _handle("rated")
        for n in range(24):
            ids.append((await client.enqueue(pair, {"n": n})).id)
        for n in range(40):
            ids.append((await client.enqueue(serial, {"n": n, "k": f"key{n % 5}"})).id)
        for n in range(12):
            ids.append((await client.enqueue(rated, {"n": n})).id)
        return ids


async def _registered(url: str) -> int:
    driver: JobDriver = driver_from_url(url)
    async with driver:
        return len(await driver.worker_list(time.time_ns() // 1_000_000))


async def _rows(url: str, ids: list[str]) -> dict[str, Any]:
    driver: JobDriver = driver_from_url(url)
    async with driver:
        return await driver.job_get_many(ids)


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant (an end before a start at the same time)."""
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    open_now = most = 0
    for _, step in edges:
        open_now += step
        most = max(most, open_now)
    return most


def test_limits_hold_across_four_processes(store_url: str, app: Path) -> None:
    workers = [
        ledger_worker(app, "limitsapp", store_url, "--lease", str(LEASE_S)) for _ in range(WORKERS)
    ]
    try:
        # Every worker registers before it claims. Enqueueing only once all four are in the
        # registry keeps the first one up on a loaded machine from running the whole backlog
        # before the others start, which would leave the limits unshared and untested.
        deadline = time.monotonic() + 60
        while asyncio.run(_registered(store_url)) < WORKERS:
            dead = [w for w in workers if w.poll() is not None]
            assert not dead, dead[0].communicate()[0]
            assert time.monotonic() < deadline, "the workers never all registered"
            time.sleep(0.1)
        ids = asyncio.run(_enqueue_all(store_url))
        deadline = time.monotonic() + 120
        while True:
            rows = asyncio.run(_rows(store_url, ids))
            if all(r.state is JobState.COMPLETED for r in rows.values()):
                break
            dead = [w for w in workers if w.poll() is not None]
            assert not dead, dead[0].communicate()[0]
            assert time.monotonic() < deadline, Counter(r.state for r in rows.values())
            time.sleep(0.2)
    finally:
        outputs = []
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
            outputs.append(w.communicate(timeout=60)[0])
    assert {r.attempt for r in rows.values()} == {1}, "waiting spent an attempt"

    starts: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    ends: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    stamped: dict[str, float] = {}
    ran: Counter[str] = Counter()
    pids: set[str] = set()
    for line in (app / "ledger.txt").read_text().splitlines():
        what, name, key, job_id, at, pid = line.split()
        if what == "leased":
            stamped[job_id] = (int(at) - LEASE_S * 1000) / 1000
            continue
        (starts if what == "start" else ends)[(name, key)][job_id] = float(at)
        if what == "start":
            ran[job_id] += 1
            pids.add(pid)
    assert set(ran) == set(ids) and set(ran.values()) == {1}, "a body lost or run twice"
    assert len(pids) > 1, "one process ran everything: the limits were never shared"

    def intervals(name: str, key: str) -> list[tuple[float, float]]:
        s, e = starts[(name, key)], ends[(name, key)]
        return [(s[j], e[j]) for j in s]

    assert most_at_once(intervals("pair", "-")) == 2
    for k in range(5):
        assert most_at_once(intervals("serial", f"key{k}")) == 1, f"key{k}"
    every_key = [i for k in range(5) for i in intervals("serial", f"key{k}")]
    assert most_at_once(every_key) > 1, "keys never ran side by side: the limit was global"
    # The limit counts stamps, each taken as its claim admits the run; a body starts a little
    # later, and on a loaded machine by a varying lag (which once shortened a window measured
    # between body starts by more than 50 ms). So the windows are read from the stamps, exact
    # to the millisecond, and every body is checked to start at or after its own stamp. Without
    # the limit (or with one start too many) four stamps share one claim round.
    rated = starts[("rated", "-")]
    assert set(stamped) == set(rated)
    late = {j: rated[j] - stamped[j] for j in rated}
    assert min(late.values()) >= 0, "a body started before its rate stamp"
    stamps = sorted(stamped.values())
    windows = [round(stamps[i + 3] - stamps[i], 3) for i in range(len(stamps) - 3)]
    assert min(windows) >= 0.5, (windows, late)
