"""Fleet-wide limits across real worker processes on real Postgres and real Redis.

Four `ujobs worker` processes share one store. Each body writes its start and its end to a
ledger file outside the store, so "never more than N at once" and "never more than N starts in a
window" are read from what really ran, not from what the store says. A start is written after
the run took its slot or stamp and an end before it hands it back, so the ledger's intervals
are inside the holdings: any overlap beyond the limit is a real breach. The rate limit's stamps
are read as the store granted them: each worker writes every stamp its `lease_take` was granted
(the store's own `expires_at_ms`, so the stamp's time is exact to the millisecond) and every
holding it abandoned (a start that never happened).
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
from jobs_core.driver import JobDriver

LEDGER = Path(os.environ["LEDGER"])


def note(*fields):
    with LEDGER.open("a") as f:
        f.write(" ".join(str(x) for x in fields) + "\\n")


# Every stamp the store grants this process, as the store answered it, and every holding it
# abandons: the rate's stamps are read from the store's own answers, never guessed from a row.
_take, _abandon = JobDriver.lease_take, JobDriver.lease_abandon


async def lease_take(self, takes, now_ms):
    got = await _take(self, takes, now_ms)
    for g in got:
        if g is not None and g.stamp:
            note("stamp", g.holder, g.token, g.expires_at_ms, os.getpid())
    return got


async def lease_abandon(self, refs, now_ms):
    for r in refs:
        note("abandon", "-", r.token, "-", os.getpid())
    return await _abandon(self, refs, now_ms)


JobDriver.lease_take, JobDriver.lease_abandon = lease_take, lease_abandon


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
"""

WORKERS = 4
#: The rate's window (`RateLimit(3, per=0.5)`), in ms: a stamp's time is its end less this.
PER_MS = 500


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
    workers = [ledger_worker(app, "limitsapp", store_url) for _ in range(WORKERS)]
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
    granted: dict[str, tuple[str, int]] = {}
    abandoned: set[str] = set()
    ran: Counter[str] = Counter()
    pids: set[str] = set()
    for line in (app / "ledger.txt").read_text().splitlines():
        if line.startswith(("stamp ", "abandon ")):
            what, holder, token, end, _ = line.split()
            if what == "stamp":
                granted[token] = (holder, int(end))
            else:
                abandoned.add(token)
            continue
        what, name, key, job_id, at, pid = line.split()
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
    # The limit counts stamps, each taken as the run is admitted; a body starts a little later,
    # and on a loaded machine by a varying lag (which once shortened a window measured between
    # body starts by more than 50 ms). So the windows are read from the stamps the store
    # granted (its own ends, exact to the millisecond; an abandoned one was never a start),
    # and every body is checked to start at or after its own stamp. Without the limit (or with
    # one start too many) four stamps share one admission.
    rated = starts[("rated", "-")]
    kept = [(holder, end) for token, (holder, end) in granted.items() if token not in abandoned]
    # A stamp's holder is its run: `<job id>:<claims>`.
    stamped = {holder.split(":")[0]: (end - PER_MS) / 1000 for holder, end in kept}
    assert len(stamped) == len(kept), f"a run holds two stamps: {sorted(kept)}"
    assert set(stamped) == set(rated), (sorted(stamped), sorted(rated))
    late = {j: rated[j] - stamped[j] for j in rated}
    assert min(late.values()) >= 0, "a body started before its rate stamp"
    stamps = sorted(stamped.values())
    windows = [round(stamps[i + 3] - stamps[i], 3) for i in range(len(stamps) - 3)]
    assert min(windows) >= 0.5, (windows, late)
