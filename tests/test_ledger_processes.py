"""`ledger()` under SIGKILL, with real `ujobs worker` processes on real Postgres and real Redis:
a batch of postings (two tenants' ledgers, one amount past 2**53) run by three workers, one of
them killed (`kill -9`) just before a posting's store write and another just after it (the
posting landed, its step not recorded); standbys take both runs over.

Each kill lands at a chosen place: the app wraps the driver's `_posting_put` (what the ledger's
one step sends), and the first process to reach the held place writes its pid to a file and
sleeps there until the test kills it; every later one goes through. A process runs one held key
at a time: one holding a place that meets the other's key waits before its write until it is
killed, so the other place is held by another worker and each kill stops a live worker holding
one place (the test checks both, and kills in the order the places were held). Afterwards each
key is posted exactly once, with its own lines, in its own tenant's ledger, and the balances are the
exact sums: the run killed before its write posts on its next attempt (`applied`), the one killed
after it finds its posting (`already_applied`) and moves nothing.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.jsonform import loads
from jobs_core.records import BalanceRow, JobRecord, PostingLine
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from tests.core.support import ledger_worker, reaping
from tests.test_factories_processes import stand_in

#: Postings: `KEYS` keys, each `cash` debited and `revenue` credited by its amount; the odd keys
#: in tenant `beta`'s ledger, the even ones in `acme`'s.
KEYS = 24
#: Killed before its posting's write, and after it (the posting landed, the step not recorded).
HOLD_BEFORE = "pay-5"
HOLD_AFTER = "pay-10"
LEASE_S = "2"
WORKERS = 3

APP = """
import asyncio, os
from pathlib import Path
from jobs_core import job
from jobs_core.factories import ledger
from jobs_core.retry import Retry

HERE = Path(__file__).parent


async def hold_once(name):
    # The first process to come here holds until it is killed; every later one goes through.
    try:
        with (HERE / name).open("x") as f:
            f.write(str(os.getpid()))
    except FileExistsError:
        return
    await asyncio.sleep(3600)


# Only the store's own driver is imported: a worker's start-up is most of a case's time.
if os.environ["UJOBS_DRIVER"].startswith("redis"):
    from jobs_redis import RedisDriver as Driver
else:
    from jobs_pg import PgDriver as Driver
posting_put = Driver._posting_put
HELD_KEYS = (os.environ["HOLD_BEFORE"], os.environ["HOLD_AFTER"])
#: The held key this process is running now, if any: one at a time, so a process never holds
#: both places (the other waits here, nothing written, until the kill; a standby runs it after).
running = []


async def held_posting_put(self, put):
    if put.key not in HELD_KEYS:
        return await posting_put(self, put)
    while running:
        await asyncio.sleep(0.05)
    running.append(put.key)
    try:
        if put.key == HELD_KEYS[0]:
            await hold_once("before")
        answer = await posting_put(self, put)
        if put.key == HELD_KEYS[1]:
            await hold_once("after")
        return answer
    finally:
        running.remove(put.key)


Driver._posting_put = held_posting_put

pay = ledger(
    name="pay",
    tenant=lambda i: i["org"],
    idempotency_key=lambda i: i["key"],
    lines=lambda i: [
        {"account": "cash", "currency": "EUR", "amount": i["cents"]},
        {"account": "revenue", "currency": "EUR", "amount": -i["cents"]},
    ],
    retry=Retry(attempts=5, base_ms=10),
)


@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def nudge(input, ctx):
    return None
"""

PAY = stand_in("pay", lambda i: i["key"])
NUDGE = stand_in("nudge", lambda i: str(i["n"]))


def posting(i: int) -> dict[str, Any]:
    """The input of key `pay-<i>`: its tenant and its amount (one past 2**53)."""
    cents = 2**53 + 1 if i == 7 else 100 + i
    return {"org": "beta" if i % 2 else "acme", "key": f"pay-{i}", "cents": cents}


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


@pytest.fixture
async def driver(store_url: str) -> AsyncIterator[JobDriver]:
    store: JobDriver = driver_from_url(store_url)
    async with store:
        yield store


async def test_postings_killed_around_their_write_land_once(
    store_url: str, driver: JobDriver, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> None:
    (tmp_path / "ledgerapp.py").write_text(APP, encoding="utf-8")
    jobs = Jobs(driver)
    inputs = [posting(i) for i in range(KEYS)]
    ids = {p["key"]: (await jobs.enqueue(PAY, p)).id for p in inputs}
    began = time.monotonic()
    for _ in range(WORKERS):
        workers.append(
            ledger_worker(
                tmp_path,
                "ledgerapp",
                store_url,
                "--lease",
                LEASE_S,
                HOLD_BEFORE=HOLD_BEFORE,
                HOLD_AFTER=HOLD_AFTER,
            )
        )
    killed: set[int] = set()
    #: When each held worker was gone, by the clock every worker stamps its postings with.
    gone_ms: dict[str, int] = {}
    nudges = 0

    async def rows() -> dict[str, JobRecord]:
        return await driver.job_get_many(list(ids.values()))

    async def until(check: Any, what: str) -> None:
        nonlocal nudges
        deadline = time.monotonic() + 60
        nudged = 0.0
        while not await check():
            dead = [w for w in workers if w.poll() is not None and w.pid not in killed]
            assert not dead, dead[0].communicate()[0]  # a worker died on its own: its output
            assert time.monotonic() < deadline, f"never: {what}"
            # A standby's idle poll is slow: a nudge's wake makes it claim (and reclaim) now.
            if killed and time.monotonic() - nudged > 0.5:
                nudges += 1
                await jobs.enqueue(NUDGE, {"n": nudges})
                nudged = time.monotonic()
            await asyncio.sleep(0.01)

    def holder(mark: str) -> int | None:
        path = tmp_path / mark
        text = path.read_text() if path.exists() else ""
        return int(text) if text else None

    async def kill_next() -> None:
        """Kill the worker holding a place not yet killed at (whichever was held first)."""
        left = [m for m in ("before", "after") if m not in gone_ms]

        async def holding() -> bool:
            return any(holder(m) is not None for m in left)

        await until(holding, f"a worker held its posting {' or '.join(left)}")
        mark = next(m for m in left if holder(m) is not None)
        pid = holder(mark)
        victim = next(w for w in workers if w.pid == pid)
        # Meaningful: a live worker, no earlier victim, holding this place alone.
        assert pid not in killed and victim.poll() is None, (mark, pid, killed)
        assert all(holder(m) != pid for m in ("before", "after") if m != mark), (mark, pid)
        killed.add(victim.pid)
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=60)
        gone_ms[mark] = int(time.time() * 1000)

    await kill_next()
    await kill_next()
    assert len(killed) == 2 and set(gone_ms) == {"before", "after"}

    async def all_done() -> bool:
        return all(r.state is JobState.COMPLETED for r in (await rows()).values())

    await until(all_done, "every posting's job completed")
    took = time.monotonic() - began
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
            out, _ = w.communicate(timeout=60)
            assert w.returncode in (0, -signal.SIGTERM), out
    print(f"\n{store_url.split(':')[0]}: {KEYS} postings, 2 kills, done in {took:.1f}s")

    done = await rows()
    results: dict[str, dict[str, Any]] = {
        key: loads(done[i].result_json or "null")  # type: ignore[misc]
        for key, i in ids.items()
    }
    # Each key posted exactly once, with its own lines, in its own tenant's ledger only.
    for p in inputs:
        key, org, cents = p["key"], p["org"], p["cents"]
        stored = await driver.posting_get(org, key)
        assert stored is not None, key
        assert stored.lines == (
            PostingLine("cash", "EUR", cents),
            PostingLine("revenue", "EUR", -cents),
        )
        assert stored.job_id == ids[key]
        other = "beta" if org == "acme" else "acme"
        assert await driver.posting_get(other, key) is None
        assert await driver.posting_get(None, key) is None
        assert results[key]["key"] == key
    # The run killed before its write posted on a later attempt, after the kill; the one killed
    # after it found its posting, made before the kill. A run found its posting already applied
    # only on a later claim (a killed worker may hold other runs beside the held one, their
    # postings landed and their steps not recorded).
    before = await driver.posting_get("beta", HOLD_BEFORE)
    after = await driver.posting_get("acme", HOLD_AFTER)
    assert before is not None and before.posted_at_ms >= gone_ms["before"]
    assert after is not None and after.posted_at_ms < gone_ms["after"]
    assert results[HOLD_AFTER]["status"] == "already_applied"
    assert done[ids[HOLD_BEFORE]].claims >= 2 and done[ids[HOLD_AFTER]].claims >= 2
    for key, r in results.items():
        assert r["status"] in ("applied", "already_applied"), (key, r)
        if r["status"] == "already_applied":
            assert done[ids[key]].claims >= 2, key
    # The balances are the exact sums, per tenant: nothing posted twice, nothing lost.
    for org in ("acme", "beta"):
        total = sum(p["cents"] for p in inputs if p["org"] == org)
        assert await driver.posting_balances(org, ["cash", "revenue"]) == [
            BalanceRow("cash", "EUR", total, 0),
            BalanceRow("revenue", "EUR", 0, total),
        ], org
    assert await driver.posting_balances(None, ["cash", "revenue"]) == []
