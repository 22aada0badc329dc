"""The flows family under SIGKILL, with real worker processes on real Postgres and real Redis:
a parent whose durable body fans out to 1,000 children (`ctx.step.enqueue_many`) and gathers
them (`ctx.step.gather`), and a batch whose `on_complete` callback waits for its members, all
worked by three `ujobs worker` processes of which two are killed (`kill -9`) mid-run and
replaced by fresh ones.

Each body writes what it runs to a ledger file outside the store, so "ran once", "never ran
twice" and "resumed, not redone" are read from what really ran, not from what the store says.

The kills land at chosen moments, not at random: the first takes down the worker holding the
parent's first attempt between its enqueue step and its gather (with the children it was
running, when it runs any yet), the second the worker running the most children while the
parent is parked on its gather. The last 100 children and one batch member hold their slot
until the test opens a gate after the second kill: so children are surely running when it
lands, and the parent's resume and the callback run after every kill. For code outside steps
(and for any body) a kill landing inside it would rightly run it again, and "exactly once"
would be the wrong claim there.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.ids import derived_id
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import JobFilter, JobRecord, StepRecord
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from tests.core.flows_support import listed
from tests.core.support import ledger_worker, reaping

CHILDREN = 1_000
MEMBERS = 100
#: The children from this one on, and one batch member, wait for the gate: while the parent is
#: parked on its gather, children are still running (the second kill takes some down with it).
GATED_CHILDREN = 900
GATED_MEMBER = 0
#: The member that fails for good (the callback counts it as failed).
FAILING_MEMBER = 1
#: The workers' lease, in seconds: a killed worker's leases come back once it lapses.
LEASE_S = "2"
WORKERS = 3

APP = f"""
import asyncio, json, os
from pathlib import Path
from jobs_core import Retry, TerminalError, job

LEDGER = Path(os.environ["LEDGER"])
GATE = LEDGER.with_name("gate")
RETRY = Retry(attempts=5, base_ms=10)


def note(kind, ctx, *extra):
    line = " ".join(str(x) for x in (kind, ctx.job_id, ctx.attempt, os.getpid(), *extra))
    with LEDGER.open("a") as f:
        f.write(line + "\\n")


async def gate():
    while not GATE.exists():
        await asyncio.sleep(0.02)


@job(tenant="none", idempotency_key=None, retry=RETRY)
async def child(input, ctx):
    note("child-start", ctx, input["n"])
    if input["n"] >= {GATED_CHILDREN}:
        await gate()
    note("child-end", ctx)
    return input["n"] * 3


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), retry=RETRY)
async def parent(input, ctx):
    note("parent-start", ctx)
    ids = await ctx.step.enqueue_many("kids", child, [{{"n": n}} for n in range({CHILDREN})])
    note("parent-enqueued", ctx)
    if ctx.attempt == 1:
        await asyncio.sleep(3600)  # the first attempt holds here: the test kills its worker
    results = await ctx.step.gather("all", ids)
    note("parent-after", ctx, len(results))
    return results


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), retry=RETRY)
async def member(input, ctx):
    note("member-start", ctx)
    if input["n"] == {GATED_MEMBER}:
        await gate()
    if input["n"] == {FAILING_MEMBER}:
        raise TerminalError("this member fails for good")
    note("member-end", ctx)
    return input["n"]


@job(tenant="none", idempotency_key=None, retry=RETRY)
async def report(input, ctx):
    note("report", ctx, json.dumps(input, sort_keys=True, separators=(",", ":")))
"""


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger line: what ran (`kind`), for which job, in which attempt, in which process."""

    kind: str
    job_id: str
    attempt: int
    pid: int
    extra: str | None


def ledger(app: Path) -> list[Entry]:
    path = app / "ledger.txt"
    if not path.exists():
        return []
    entries = []
    for line in path.read_text().split("\n")[:-1]:
        kind, job_id, attempt, pid, *extra = line.split(" ", 4)
        entries.append(Entry(kind, job_id, int(attempt), int(pid), extra[0] if extra else None))
    return entries


def wait_for(check: Callable[[], bool], what: str, within: float = 120) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "flowapp.py").write_text(APP, encoding="utf-8")
    return tmp_path


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


def stand_in(name: str, **options: Any) -> JobHandle:
    """A handle enqueueing the app's job `name` as the app declares it (the workers run it)."""

    async def body(i: Any, ctx: Any) -> None:
        return None

    options.setdefault("idempotency_key", lambda i: str(i["n"]))
    handle: JobHandle = job(
        body,
        name=name,
        tenant="none",
        retry=Retry(attempts=5, base_ms=10),
        registry=JobRegistry(),
        **options,
    )
    return handle


async def _start(store_url: str) -> tuple[str, str]:
    """Enqueue the parent and the batch (its members and its callback): (parent id, batch id)."""
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        client = Jobs(driver)
        parent = await client.enqueue(stand_in("parent"), {"n": 1})
        member = stand_in("member")
        report = stand_in("report", idempotency_key=None)
        async with client.batch(on_complete=report, input={"run": 1}) as b:
            await b.enqueue_many(member, [{"n": n} for n in range(MEMBERS)])
        return parent.id, b.id


async def _rows(store_url: str, *job_ids: str) -> dict[str, JobRecord]:
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        return await driver.job_get_many(list(job_ids))


async def _listed(store_url: str, f: JobFilter) -> list[JobRecord]:
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        return await listed(driver, f)


async def _steps(store_url: str, r: JobRecord) -> list[StepRecord]:
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        return await driver.step_list(r.run_id)


def state(store_url: str, job_id: str) -> JobState:
    return asyncio.run(_rows(store_url, job_id))[job_id].state


def in_flight(ran: list[Entry], pid: int) -> set[tuple[str, int]]:
    """The child runs (job id, attempt) process `pid` started and has not ended, per `ran`."""
    started = {(e.job_id, e.attempt) for e in ran if e.kind == "child-start" and e.pid == pid}
    return started - {(e.job_id, e.attempt) for e in ran if e.kind == "child-end"}


def once_per_attempt(ran: list[Entry], kind: str) -> bool:
    """No job's body started twice in one attempt (a lost lease's run again is a new attempt)."""
    runs = Counter((e.job_id, e.attempt) for e in ran if e.kind == kind)
    return set(runs.values()) == {1}


def test_a_fan_out_and_a_batch_survive_two_killed_workers(
    store_url: str, app: Path, workers: list[subprocess.Popen[str]]
) -> None:
    """Two of three workers SIGKILLed mid-run, each replaced: every one of the 1,000 children
    is enqueued once and completes (its body ran at least once and at most once per attempt,
    and the runs the kills cut short ran again elsewhere); the parent resumes from its step
    records instead of redoing them, and its code after the gather runs exactly once, with
    every child's result; the batch's callback runs exactly once, after every member ended,
    with the right counts."""
    began = time.monotonic()
    parent_id, batch_id = asyncio.run(_start(store_url))
    callback_id = derived_id(batch_id, "on_complete")

    def start() -> subprocess.Popen[str]:
        proc = ledger_worker(app, "flowapp", store_url, "--lease", LEASE_S)
        workers.append(proc)
        return proc

    def live() -> dict[int, subprocess.Popen[str]]:
        return {p.pid: p for p in workers if p.poll() is None}

    def kill(proc: subprocess.Popen[str]) -> set[tuple[str, int]]:
        """SIGKILL `proc` (no drain, no settle: its leases lapse), start a fresh worker in its
        place, and answer the child runs it cut short (read once it is gone: until then a run
        may still end)."""
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
        start()
        return in_flight(ledger(app), proc.pid)

    def count(kind: str) -> int:
        return sum(1 for e in ledger(app) if e.kind == kind)

    for _ in range(WORKERS):
        start()
    # Kill one: the worker holding the parent's first attempt, past its enqueue step, once it
    # runs children too (or the children not gated all ended: then it has none to lose).
    wait_for(lambda: count("parent-enqueued") == 1, "the parent enqueued its children")
    (holder,) = [e.pid for e in ledger(app) if e.kind == "parent-enqueued"]
    wait_for(
        lambda: bool(in_flight(ledger(app), holder)) or count("child-end") >= GATED_CHILDREN,
        "the parent's worker runs children",
    )
    first = live()[holder]
    cut_first = kill(first)
    t_first = time.monotonic() - began
    # Kill two: the worker running the most children, while the parent is parked on its gather
    # (the gated children are still running: none can end before the gate opens).
    wait_for(
        lambda: state(store_url, parent_id) is JobState.PARKED,
        "the parent's next attempt parked on its gather",
    )
    gated = {str(n) for n in range(GATED_CHILDREN, CHILDREN)}

    def gated_running() -> bool:
        ran = ledger(app)
        running = set().union(*(in_flight(ran, pid) for pid in live()))
        return {e.extra for e in ran if (e.job_id, e.attempt) in running} >= gated

    wait_for(gated_running, "every gated child runs on a live worker")
    second = max(live().values(), key=lambda p: len(in_flight(ledger(app), p.pid)))
    cut_second = kill(second)
    assert cut_second, "the second kill took no running child down"
    t_second = time.monotonic() - began
    (app / "gate").touch()
    wait_for(
        lambda: all(
            r.state is JobState.COMPLETED
            for r in asyncio.run(_rows(store_url, parent_id, callback_id)).values()
        ),
        "the parent and the callback completed",
    )
    t_done = time.monotonic() - began
    worked = {e.pid for e in ledger(app)}
    for p in live().values():
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
        # A worker that ran a body drains and exits 0; a fresh one may still be starting up
        # (its handler not installed yet: SIGTERM ends it as it would any process).
        assert p.returncode == 0 or (p.pid not in worked and p.returncode == -signal.SIGTERM), out
    print(
        f"\nkill one at {t_first:.1f}s ({len(cut_first)} children cut short), kill two at "
        f"{t_second:.1f}s ({len(cut_second)} cut short), done at {t_done:.1f}s"
    )
    ran = ledger(app)

    # The parent: three starts (its killed attempt, its next one that parked, its resume); its
    # code after the gather once, with every child's result, and its attempt count says so.
    starts = [e for e in ran if e.kind == "parent-start"]
    assert [(e.attempt, e.pid == first.pid) for e in starts] == [(1, True), (2, False), (2, False)]
    after = [e for e in ran if e.kind == "parent-after"]
    assert len(after) == 1 and after[0].extra == str(CHILDREN), after
    rows = asyncio.run(_rows(store_url, parent_id, callback_id))
    parent = rows[parent_id]
    assert parent.state is JobState.COMPLETED and parent.attempt == 2
    assert json.loads(parent.result_json or "null") == [3 * n for n in range(CHILDREN)]
    steps = {s.name: json.loads(s.output_json) for s in asyncio.run(_steps(store_url, parent))}
    assert list(steps) == ["kids", "all"]
    assert steps["kids"] == {"ids": [derived_id(parent.run_id, "kids", n) for n in range(CHILDREN)]}
    assert steps["all"] == {"results": [{"ok": 3 * n} for n in range(CHILDREN)]}

    # The children: enqueued once (exactly 1,000 rows, the step's derived ids), each completed,
    # each body run at least once and at most once per attempt it had; each run a kill cut
    # short ran again, in another process.
    children = asyncio.run(_listed(store_url, JobFilter(parent_id=parent_id)))
    expected = {derived_id(parent.run_id, "kids", n): n for n in range(CHILDREN)}
    assert len(children) == CHILDREN and {c.id for c in children} == set(expected)
    assert once_per_attempt(ran, "child-start")
    last_attempt = {e.job_id: e.attempt for e in ran if e.kind == "child-start"}
    assert set(last_attempt) == set(expected)
    ends = {e.job_id: e for e in ran if e.kind == "child-end"}
    for c in children:
        assert c.state is JobState.COMPLETED, c
        assert json.loads(c.result_json or "null") == 3 * expected[c.id]
        assert c.id in ends and last_attempt[c.id] <= c.attempt, c
    for victim, cut in ((first, cut_first), (second, cut_second)):
        for job_id, attempt in cut:
            assert ends[job_id].attempt > attempt and ends[job_id].pid != victim.pid

    # The batch: the callback ran once, after every member ended, with the counts.
    reports = [e for e in ran if e.kind == "report"]
    assert len(reports) == 1 and reports[0].job_id == callback_id, reports
    assert json.loads(reports[0].extra or "null") == {
        "batch_id": batch_id,
        "total": MEMBERS,
        "succeeded": MEMBERS - 1,
        "failed": 1,
        "input": {"run": 1},
    }
    assert rows[callback_id].attempt == 1
    callbacks = asyncio.run(_listed(store_url, JobFilter(name="report")))
    assert [c.id for c in callbacks] == [callback_id]
    members = asyncio.run(_listed(store_url, JobFilter(batch_id=batch_id)))
    assert Counter(m.state for m in members) == {
        JobState.COMPLETED: MEMBERS - 1,
        JobState.DEAD: 1,
    }
    assert once_per_attempt(ran, "member-start")
    last_member = max(i for i, e in enumerate(ran) if e.kind.startswith("member-"))
    assert ran.index(reports[0]) > last_member
