"""`executor="process"`: a `def` body in a spawned process — the worker's loop keeps beating while
it computes, a deadline kills it for real, a crash or an unsendable value fails the attempt typed,
and a drain leaves no process behind. Real processes; the memory driver, and Postgres once."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from jobs_core import processes
from jobs_core.attempts import AttemptOutcome
from jobs_core.context import JobContext
from jobs_core.errors import ExecutorInvalidError, ProcessDiedError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.processes import BodyProcesses, ProcessContext
from jobs_core.records import Heartbeat, Nack, NackKind
from jobs_core.states import JobState
from jobs_core.tenant import acting_for
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core import process_bodies as pb
from tests.core.runpath_cases import has_state, row
from tests.core.support import until
from tests.pg.conftest import fresh_driver

# -- what is refused, at declaration and at the worker's construction


def wants_steps(input: Any, ctx: JobContext) -> None:
    """Declares the full context: it means to use `ctx.step` or `ctx.signal`."""


def plain(input: Any, ctx: ProcessContext) -> None:
    """A body a process can run."""


def moved(input: Any, ctx: Any) -> None:
    """Declared under a name its module does not hold (see below)."""


moved.__qualname__ = "not_in_this_module"


async def an_async_body(input: Any, ctx: Any) -> None:
    return None


class _Holder:
    def method(self, input: Any, ctx: Any) -> None:
        return None


def _declare(fn: Any, **options: Any) -> JobHandle:
    options.setdefault("executor", "process")
    handle: JobHandle = job(fn, tenant="none", name="p", registry=JobRegistry(), **options)
    return handle


def _nested() -> Any:
    def inner(input: Any, ctx: Any) -> None:
        return None

    return inner


@pytest.mark.parametrize(
    ("body", "options", "says"),
    [
        (an_async_body, {}, "async body"),
        (lambda i, c: None, {}, "lambda"),
        (_nested(), {}, "nested function"),
        (_Holder().method, {}, "plain function"),
        (functools.partial(plain), {}, "plain function"),
        (wants_steps, {}, "declares a JobContext"),
        (plain, {"step_timeout": 1.0}, "step_timeout"),
        (plain, {"event_poll": 1.0}, "event_poll"),
        (plain, {"executor": "fork"}, "'thread' or 'process'"),
    ],
    ids=["async", "lambda", "nested", "method", "partial", "job-context", "step", "poll", "fork"],
)
def test_a_body_a_process_cannot_run_is_refused_at_declaration(
    body: Any, options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ExecutorInvalidError) as refused:
        _declare(body, **options)
    assert refused.value.code == "X_JOB_EXECUTOR_INVALID"
    assert refused.value.detail == "executor" and says in refused.value.message


def test_a_body_its_module_does_not_hold_by_name_is_refused_by_the_worker() -> None:
    handle = _declare(moved)
    assert _declare(plain).executor == "process"
    with pytest.raises(ExecutorInvalidError) as refused:
        Worker(MemoryDriver(), [handle])
    assert refused.value.detail == "p" and "not_in_this_module" in refused.value.message


# -- the worker's loop is free while a body computes


class Recording(MemoryDriver):
    """The memory driver, noting every lease renewal (when, which job, whether it landed) and
    every nack (which job, its kind, its error)."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: list[tuple[float, str, bool]] = []
        self.nacks: list[Nack] = []

    async def job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        answers = await super().job_heartbeat(beats)
        now = time.time()
        self.beats.extend((now, b.fence.job_id, ok) for b, ok in zip(beats, answers, strict=True))
        return answers

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        self.nacks.extend(nacks)
        return await super()._job_nack(nacks)

    def renewed(self, job_id: str, after: float, before: float = float("inf")) -> int:
        return sum(1 for t, j, ok in self.beats if j == job_id and ok and after < t < before)


def spawned_children() -> set[int]:
    """This process's children that multiprocessing spawned (read from /proc)."""
    mine = str(os.getpid())
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == mine and b"multiprocessing.spawn" in cmdline:
            found.add(int(entry.name))
    return found


def exited(pid: int) -> bool:
    """The process has exited (gone, or a zombie not yet reaped)."""
    try:
        return (Path(f"/proc/{pid}") / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def gone(pid: int) -> bool:
    """No such process, not even a zombie waiting to be reaped."""
    return not Path(f"/proc/{pid}").exists()


async def _waiting_worker(
    driver: Recording, hog: JobHandle, release: asyncio.Event
) -> tuple[Worker, str]:
    """A worker running `hog` beside a job that waits for `release` (its lease renewed every
    50 ms meanwhile), started once that job runs; answers the worker and the waiter's id."""

    async def waiter(input: Any, ctx: JobContext) -> None:
        await release.wait()

    h_wait = job(
        waiter, tenant="none", idempotency_key=pb._key, registry=JobRegistry(), name="waiter"
    )
    worker = Worker(
        driver,
        [h_wait, hog],
        concurrency=2,
        lease=5.0,
        heartbeat_every=0.05,
        poll_floor=0.005,
        poll_ceiling=0.05,
        process_pool_size=1,
    )
    waiting = await Jobs(driver).enqueue(h_wait, {"n": 0})
    await worker.start()
    await until(lambda: driver.renewed(waiting.id, 0) >= 1, within=20)
    return worker, waiting.id


async def test_a_cpu_bound_body_in_a_process_leaves_the_loop_renewing_other_leases(
    tmp_path: Path,
) -> None:
    driver, release = Recording(), asyncio.Event()
    worker, waiter = await _waiting_worker(driver, pb.h_hog, release)
    try:
        mark, stop = tmp_path / "mark", tmp_path / "stop"
        hogging = await Jobs(driver).enqueue(
            pb.h_hog, {"n": 1, "mark": str(mark), "stop": str(stop)}
        )
        await until(mark.exists, within=30)
        t0 = float(mark.read_text())
        # The body computes, holding its GIL, until three renewals of the waiter have landed.
        await until(lambda: driver.renewed(waiter, t0) >= 3, within=20)
        stop.touch()
        await until(lambda: has_state(driver, [hogging.id], JobState.COMPLETED), within=20)
        ran = json.loads((await row(driver, hogging.id)).result_json or "")
        assert driver.renewed(waiter, ran["t0"], ran["t1"]) >= 3
    finally:
        release.set()
        await worker.stop()


async def test_the_same_body_on_a_thread_holds_the_loop_for_as_long_as_it_runs() -> None:
    hog_thread = job(
        pb.hog, tenant="none", idempotency_key=pb._key, registry=JobRegistry(), name="hog_thread"
    )
    driver, release = Recording(), asyncio.Event()
    worker, waiter = await _waiting_worker(driver, hog_thread, release)
    try:
        hogging = await Jobs(driver).enqueue(hog_thread, {"n": 1, "seconds": 0.4})
        await until(lambda: has_state(driver, [hogging.id], JobState.COMPLETED), within=20)
        ran = json.loads((await row(driver, hogging.id)).result_json or "")
        # Eight renewals fell due while it ran; not one was sent, by any job.
        assert ran["t1"] - ran["t0"] >= 0.4
        assert [t for t, _, _ in driver.beats if ran["t0"] < t < ran["t1"]] == []
        await until(lambda: driver.renewed(waiter, ran["t1"]) >= 1)
    finally:
        release.set()
        await worker.stop()


# -- deadlines, crashes and values that cannot cross, then the drain


def _error(driver: Recording, job_id: str, attempt_nack: int = 0) -> dict[str, Any]:
    nacks = [n for n in driver.nacks if n.fence.job_id == job_id and n.error]
    return dict(json.loads(nacks[attempt_nack].error or ""))


async def test_deadlines_crashes_and_unsendable_values_fail_the_attempt_typed(
    tmp_path: Path,
) -> None:
    driver = Recording()
    jobs = Jobs(driver)
    handles = [pb.h_runaway, pb.h_crash, pb.h_fails]
    worker = Worker(driver, handles, poll_floor=0.005, poll_ceiling=0.05, process_pool_size=2)
    pid_file = tmp_path / "pid"
    runaway = await jobs.enqueue(pb.h_runaway, {"n": 1, "org": "o1", "pid": str(pid_file)})
    crashes = {
        how: await jobs.enqueue(pb.h_crash, {"n": how, "how": how}) for how in ("exit", "segv")
    }
    fails = {
        how: await jobs.enqueue(pb.h_fails, {"n": how, "how": how})
        for how in ("set", "unpicklable", "unprintable", "terminal", "exit")
    }
    ids = [runaway.id, *(q.id for q in crashes.values()), *(q.id for q in fails.values())]

    async def finished() -> bool:
        return all(r.finished_at_ms is not None for r in (await driver.job_get_many(ids)).values())

    await worker.start()
    try:
        await until(finished, within=60)
        pids = worker._runner.processes.pids() if worker._runner.processes else []
    finally:
        await worker.stop()

    # The runaway body's process was killed at its deadline; the retry ran in a fresh one.
    first = int(pid_file.read_text())
    timed_out = _error(driver, runaway.id)
    assert timed_out["code"] == "X_JOB_TIMEOUT", timed_out
    assert [n.kind for n in driver.nacks if n.fence.job_id == runaway.id] == [NackKind.RETRY]
    done = await row(driver, runaway.id)
    assert done.state is JobState.COMPLETED and done.attempt == 2
    second = json.loads(done.result_json or "")
    assert second["pid"] != first and second["tenant"] == "o1" and second["attempt"] == 2
    await until(lambda: gone(first))
    # A process that died failed its attempt, typed; the pool started another.
    for how, death in (("exit", "exit code 7"), ("segv", "killed by SIGSEGV")):
        died = _error(driver, crashes[how].id)
        assert died["code"] == "X_JOB_PROCESS_DIED" and death in died["message"], died
        assert (await row(driver, crashes[how].id)).state is JobState.COMPLETED
    assert worker.stats.processes_killed == 1 and worker.stats.processes_died == 2
    # A value that cannot cross: the result has no JSON form (terminal, as on a thread); an
    # exception that cannot be pickled, or is no Exception, arrives by type, message, traceback.
    unstorable = _error(driver, fails["set"].id)
    assert unstorable["code"] == "X_JOB_RESULT_INVALID"
    assert unstorable["message"].startswith("the result cannot be stored: a set has no JSON form")
    for how, says in (
        ("unpicklable", "_Unpicklable: held a lock"),
        ("unprintable", "_Unprintable: (its message could not be read)"),
        ("exit", "SystemExit: 3"),
    ):
        remote = _error(driver, fails[how].id)
        assert remote["type"] == "RemoteBodyError" and remote["message"] == says, remote
        assert "process_bodies.py" in remote["traceback"]
    terminal = _error(driver, fails["terminal"].id)
    assert terminal["code"] == "X_JOB_TERMINAL" and terminal["type"] == "TerminalError"
    assert terminal["message"].startswith("no point retrying")
    rows = await driver.job_get_many([q.id for q in fails.values()])
    assert {how: rows[q.id].attempt for how, q in fails.items()} == {
        "set": 1,
        "unpicklable": 2,
        "unprintable": 2,
        "terminal": 1,
        "exit": 2,
    }
    # The drain closed the pool: no process of it is left, not even unreaped.
    assert pids and all(gone(p) for p in pids)
    assert spawned_children() == set()


async def test_on_postgres_a_deadline_kills_then_retries_and_a_drain_kills_what_still_runs(
    tmp_path: Path,
) -> None:
    async with fresh_driver() as driver:
        jobs = Jobs(driver)
        worker = Worker(
            driver,
            [pb.h_runaway, pb.h_hog],
            poll_floor=0.005,
            poll_ceiling=0.05,
            process_pool_size=1,
        )
        pid_file, mark = tmp_path / "pid", tmp_path / "mark"
        runaway = await jobs.enqueue(pb.h_runaway, {"n": 1, "org": "o1", "pid": str(pid_file)})
        await worker.start()
        stopped = False
        try:
            await until(lambda: has_state(driver, [runaway.id], JobState.COMPLETED), within=30)
            hogging = await jobs.enqueue(
                pb.h_hog, {"n": 2, "mark": str(mark), "stop": str(tmp_path / "never")}
            )
            await until(mark.exists, within=30)
            pids = worker._runner.processes.pids() if worker._runner.processes else []
            await worker.stop(0.2)
            stopped = True
        finally:
            if not stopped:
                await worker.stop(0)
        done = await row(driver, runaway.id)
        assert done.state is JobState.COMPLETED and done.attempt == 2
        assert worker.stats.retried == 1
        assert gone(int(pid_file.read_text()))
        # The drain's deadline killed the body still computing; its claim went back unspent.
        back = await row(driver, hogging.id)
        assert back.state is JobState.READY and back.attempt == 0, back
        assert worker.stats.interrupted == 1 and worker.stats.processes_killed == 2
        assert pids and all(gone(p) for p in pids)
        assert spawned_children() == set()


# -- the pool alone


def _ctx(job_id: str = "j") -> ProcessContext:
    return ProcessContext(job_id, "r", "p", "default", 2, 2, None)


async def test_a_process_that_does_not_start_in_time_is_killed_and_fails_the_body_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never_ready(child: Any) -> bool:
        child.proc.join()  # as a child stuck importing a module: never says it is ready
        return False

    monkeypatch.setattr(processes._Child, "ready", never_ready)
    pool = BodyProcesses(1, start_timeout_s=0.2)
    try:
        with pytest.raises(ProcessDiedError) as failed:
            await pool.run(pb.crash, '{"n": 1, "how": "exit"}', _ctx(), lambda: None)
        assert "did not start within 0.2 s" in failed.value.message
        assert pool.pids() == [] and spawned_children() == set()
    finally:
        await pool.close()


async def test_a_body_cancelled_while_it_waits_for_a_process_leaves_the_pool_whole(
    tmp_path: Path,
) -> None:
    pool = BodyProcesses(1, ["tests.core.process_bodies"])
    mark, stop = tmp_path / "mark", tmp_path / "stop"
    started: list[str] = []
    try:
        busy = asyncio.ensure_future(
            pool.run(
                pb.hog,
                json.dumps({"n": 1, "mark": str(mark), "stop": str(stop)}),
                _ctx("busy"),
                lambda: started.append("busy"),
            )
        )
        await until(mark.exists, within=30)
        (pid,) = pool.pids()
        waiting = asyncio.ensure_future(
            pool.run(pb.crash, '{"n": 2, "how": "exit"}', _ctx("waiting"), lambda: None)
        )
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        stop.touch()
        await busy
        # The cancelled body never ran and killed nothing: the next one runs in the same process.
        assert started == ["busy"] and pool.pids() == [pid]
        assert await pool.run(pb.crash, '{"n": 3, "how": "exit"}', _ctx(), lambda: None) is not None
        assert pool.pids() == [pid]
    finally:
        await pool.close()
    assert gone(pid)


# -- a body's process that forks, or dies once it answered


def _kill(pid_file: Path) -> None:
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid_file.read_text()), signal.SIGKILL)


async def test_a_body_that_forks_then_dies_fails_its_attempt_without_waiting_for_the_fork(
    tmp_path: Path,
) -> None:
    """The body's process forks a process that lives on for 30 s, holding its end of the pipe
    to the worker, then dies: the attempt fails at once (`X_JOB_PROCESS_DIED`, the child's exit
    code), the retry runs in a fresh process acting for the row's tenant. A body that closes
    its pipe and lives on is killed (not left running, unseen). A process that dies once it
    answered has its answer kept, and the next body gets a fresh process. Postgres."""
    grandchild, deaf_pid = tmp_path / "grandchild", tmp_path / "deaf"
    async with fresh_driver() as driver:
        jobs = Jobs(driver)
        worker = Worker(
            driver,
            [pb.h_forks, pb.h_deafens, pb.h_answers_then_dies],
            poll_floor=0.005,
            poll_ceiling=0.05,
            process_pool_size=1,
        )
        with acting_for("enqueuer"):
            forking = await jobs.enqueue(
                pb.h_forks, {"n": 1, "org": "o7", "grandchild": str(grandchild)}
            )
        await worker.start()
        try:
            await until(lambda: has_state(driver, [forking.id], JobState.COMPLETED), within=15)
            done = await row(driver, forking.id)
            assert (done.attempt, done.acts_for, done.tenant_id) == (2, "o7", "enqueuer")
            second = json.loads(done.result_json or "")
            assert (second["tenant"], second["current"]) == ("o7", "o7")
            first = done.attempts[0]
            assert first.outcome is AttemptOutcome.RETRIED
            assert first.error_code == "X_JOB_PROCESS_DIED", first
            assert "exit code 5" in (first.error_message or ""), first
            assert int(grandchild.read_text()) != second["pid"]

            # A body that closes its pipe and lives on is killed, not left running unseen.
            deafened = await jobs.enqueue(pb.h_deafens, {"n": 4, "pid": str(deaf_pid)})
            await until(lambda: has_state(driver, [deafened.id], JobState.COMPLETED), within=15)
            assert exited(int(deaf_pid.read_text()))
            deaf = (await row(driver, deafened.id)).attempts[0]
            assert deaf.error_code == "X_JOB_PROCESS_DIED", deaf
            assert "closed its pipe to the worker and was killed" in (deaf.error_message or "")

            answered = await jobs.enqueue(pb.h_answers_then_dies, {"n": 2})
            await until(lambda: has_state(driver, [answered.id], JobState.COMPLETED), within=15)
            dead = json.loads((await row(driver, answered.id)).result_json or "")
            assert dead != int(deaf_pid.read_text())
            await until(lambda: exited(dead), within=10)
            after = await jobs.enqueue(pb.h_answers_then_dies, {"n": 3})
            await until(lambda: has_state(driver, [after.id], JobState.COMPLETED), within=15)
            next_one = await row(driver, after.id)
            assert next_one.attempt == 1 and json.loads(next_one.result_json or "") != dead
            assert worker.stats.processes_died == 2
        finally:
            await worker.stop()
            _kill(grandchild)  # it sleeps 30 s: still this test's to end


async def test_hostile_results_and_errors_from_a_process_settle_typed_on_postgres() -> None:
    """What a body's process hands back that no store can hold, or the worker cannot rebuild,
    fails the attempt with a typed, storable record; the process itself lives on (one process
    runs them all)."""
    results = ("nul", "surrogate", "deep", "huge", "generator")
    errors = {
        "raise-text": ("ValueError", "bad \\0 and \ufffd text"),
        "raise-deep": ("RemoteBodyError", "ValueError: (its message could not be read)"),
        "here-only": ("RemoteBodyError", "HereOnly: made in the child"),
    }
    async with fresh_driver() as driver:
        jobs = Jobs(driver)
        worker = Worker(
            driver, [pb.h_hostile], poll_floor=0.005, poll_ceiling=0.05, process_pool_size=1
        )
        ids = {
            how: (await jobs.enqueue(pb.h_hostile, {"n": how, "how": how})).id
            for how in (*results, *errors)
        }
        await worker.start()
        try:

            async def finished() -> bool:
                rows = (await driver.job_get_many(list(ids.values()))).values()
                return all(r.finished_at_ms is not None for r in rows)

            await until(finished, within=15)
            pids = worker._runner.processes.pids() if worker._runner.processes else []
        finally:
            await worker.stop()
        rows = await driver.job_get_many(list(ids.values()))
    assert len(pids) == 1 and worker.stats.processes_died == 0
    ended = {how: rows[i] for how, i in ids.items()}
    assert {how: r.state for how, r in ended.items()} == dict.fromkeys(ids, JobState.FAILED)
    for how in results:
        (attempt,) = ended[how].attempts
        assert attempt.error_code == "X_JOB_RESULT_INVALID", (how, attempt)
        assert (attempt.error_message or "").startswith("the result cannot be stored"), attempt
    for how, (code, message) in errors.items():
        (attempt,) = ended[how].attempts
        assert (attempt.error_code, attempt.error_message) == (code, message), (how, attempt)
        assert "process_bodies.py" in (attempt.traceback or ""), (how, attempt)


async def test_a_fork_that_returns_from_the_body_never_answers_in_its_place() -> None:
    """A process the body forked that returns from the body ends there: the call's answer is
    the body's own, and the next call's is not the one left over."""
    pool = BodyProcesses(1, ["tests.core.process_bodies"])
    try:
        async with asyncio.timeout(20):
            for n in (1, 2):
                got = await pool.run(pb.forks_and_returns, json.dumps({"n": n}), _ctx(), _none)
                assert json.loads(got.text() or "") == {"from": "child", "n": n}
    finally:
        await pool.close()
    assert spawned_children() == set()


def _none() -> None:
    return None


def _pipe_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"{name}-pipe")]


@pytest.mark.parametrize("how", ["dies", "hangs"])
async def test_a_process_ended_mid_answer_with_a_fork_holding_its_pipe_blocks_no_thread(
    tmp_path: Path, how: str
) -> None:
    """The body's process forks a process that lives on holding its end of the pipe, writes
    part of an answer larger than the pipe holds, and dies ("dies") or is killed when its run
    ends ("hangs": the run is cancelled, as at a deadline): the run ends, and no thread of the
    pool is left reading the rest of an answer that will never come."""
    grandchild, name = tmp_path / "grandchild", f"ujobs-mid-{how}"
    pool = BodyProcesses(1, ["tests.core.process_bodies"], name=name)
    input = json.dumps({"n": 1, "how": how, "grandchild": str(grandchild)})
    try:
        if how == "dies":
            with pytest.raises(ProcessDiedError, match="exit code 9"):
                async with asyncio.timeout(10):
                    await pool.run(pb.dies_mid_answer, input, _ctx(), _none)
        else:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(2):
                    await pool.run(pb.dies_mid_answer, input, _ctx(), _none)
    finally:
        await pool.close()
        try:  # while the fork lives on: its end of the pipe never closes by itself
            await until(lambda: not _pipe_threads(name), within=5)
        finally:
            _kill(grandchild)
    assert spawned_children() == set()


async def test_a_call_to_a_dead_process_whose_fork_holds_its_pipe_never_blocks(
    tmp_path: Path,
) -> None:
    """A process that died idle while a process its body forked holds its end of the pipe
    reads nothing more: a call too large for the pipe sent to it fails (None) rather than
    block its thread for as long as the fork lives."""
    grandchild = tmp_path / "grandchild"
    pool = BodyProcesses(1, ["tests.core.process_bodies"])
    try:
        async with asyncio.timeout(20):
            await pool.run(
                pb.forks_and_answers,
                json.dumps({"n": 1, "grandchild": str(grandchild)}),
                _ctx(),
                _none,
            )
            (child,) = pool._idle
            child.kill()
            assert await asyncio.to_thread(child.exited, 5.0)
            assert await asyncio.to_thread(child.ask, b"x" * 8_000_000) is None
    finally:
        await pool.close()
        _kill(grandchild)


async def test_a_chaos_of_process_bodies_on_redis_loses_no_job(tmp_path: Path) -> None:
    """Bodies that exit, segfault, fork then die, close their pipe, overrun their deadline or
    hand back what no store holds, side by side in a pool of two on Redis: every job ends —
    each dying first attempt retried in a fresh process and completed, each unstorable value
    failed for good, typed — and the drain leaves no process of the pool behind."""
    from tests.redis.conftest import several_drivers

    grandchild = tmp_path / "grandchild"
    async with several_drivers(1) as (driver,):
        jobs = Jobs(driver)
        handles = [pb.h_crash, pb.h_forks, pb.h_deafens, pb.h_runaway, pb.h_hostile]
        worker = Worker(driver, handles, poll_floor=0.005, poll_ceiling=0.05, process_pool_size=2)
        dying = [
            await jobs.enqueue(pb.h_crash, {"n": "exit", "how": "exit"}),
            await jobs.enqueue(pb.h_crash, {"n": "segv", "how": "segv"}),
            await jobs.enqueue(pb.h_forks, {"n": 1, "org": "o1", "grandchild": str(grandchild)}),
            await jobs.enqueue(pb.h_deafens, {"n": 2, "pid": str(tmp_path / "deaf")}),
            await jobs.enqueue(pb.h_runaway, {"n": 3, "org": "o2", "pid": str(tmp_path / "run")}),
        ]
        unstorable = [
            await jobs.enqueue(pb.h_hostile, {"n": how, "how": how}) for how in ("nul", "deep")
        ]
        ids = [q.id for q in (*dying, *unstorable)]
        most = 0

        async def finished() -> bool:
            nonlocal most
            if worker._runner.processes is not None:
                most = max(most, len(worker._runner.processes.pids()))
            rows = (await driver.job_get_many(ids)).values()
            return all(r.finished_at_ms is not None for r in rows)

        await worker.start()
        try:
            await until(finished, within=15)
        finally:
            await worker.stop()
            _kill(grandchild)
        rows = await driver.job_get_many(ids)
    assert 1 <= most <= 2
    assert [(rows[q.id].state, rows[q.id].attempt) for q in dying] == [
        (JobState.COMPLETED, 2)
    ] * len(dying)
    codes = [rows[q.id].attempts[0].error_code for q in dying]
    assert codes == ["X_JOB_PROCESS_DIED"] * 4 + ["X_JOB_TIMEOUT"], codes
    assert [(rows[q.id].state, rows[q.id].attempt) for q in unstorable] == [
        (JobState.FAILED, 1)
    ] * 2
    assert spawned_children() == set()


async def test_an_idle_child_reaped_by_someone_else_is_not_handed_the_next_body() -> None:
    """A pooled child that died idle, its exit already reaped by other code in the worker's
    process (multiprocessing's `is_alive` then still answers True): the next body goes to a
    fresh process, its attempt unspent. It was handed to the dead one and failed attempt 1
    `X_JOB_PROCESS_DIED` (seen as a rare failure of the test above)."""
    driver = MemoryDriver()
    jobs = Jobs(driver)
    worker = Worker(
        driver, [pb.h_answers_then_dies], poll_floor=0.005, poll_ceiling=0.05, process_pool_size=1
    )
    await worker.start()
    try:
        answered = await jobs.enqueue(pb.h_answers_then_dies, {"n": 1})
        await until(lambda: has_state(driver, [answered.id], JobState.COMPLETED), within=15)
        dead = json.loads((await row(driver, answered.id)).result_json or "")
        await until(lambda: exited(dead), within=10)
        await asyncio.to_thread(os.waitpid, dead, 0)  # reaped here, as a SIGCHLD handler might
        after = await jobs.enqueue(pb.h_answers_then_dies, {"n": 2})
        await until(lambda: has_state(driver, [after.id], JobState.COMPLETED), within=15)
        next_one = await row(driver, after.id)
        assert next_one.attempt == 1 and json.loads(next_one.result_json or "") != dead
    finally:
        await worker.stop()
