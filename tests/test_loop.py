"""A role's process on uvloop (`--loop`, `jobs_core.lifecycle.loop_factory`): real drains on
Postgres and Redis under `run_role(..., "uvloop")`, the ack and the next claim still gathered
into one pipeline there, the LISTEN wake read with uvloop's `add_reader`, and `ujobs worker`
subprocesses: the loop each `--loop` names is the one a job body runs on (so an option that
were ignored fails here), a SIGTERM drain, a supervised group, and `--loop uvloop` refused where
uvloop cannot be imported while `auto` falls back."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import uvloop

from jobs_core import JobDriver, Jobs, JobState, Worker, job
from jobs_core.errors import CliExtraMissingError, OptionInvalidError
from jobs_core.job import JobRegistry
from jobs_core.lifecycle import loop_factory, run_role
from jobs_core.urls import driver_from_url
from jobs_pg import PgDriver
from tests.conftest import fresh_store_url
from tests.core.support import code_path

JOBS_MODULE = """
import asyncio
import os
import time
from jobs_core import job

@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def where(input, ctx):
    loop = asyncio.get_running_loop()
    return {"loop": type(loop).__module__ + "." + type(loop).__name__, "pid": os.getpid()}

@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
def threaded(input, ctx):
    return {"n": input["n"]}

@job(tenant="none", idempotency_key=lambda i: str(i["n"]), executor="process")
def spawned(input, ctx):
    return {"pid": os.getpid()}

@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def endless(input, ctx):
    await asyncio.sleep(3600)
"""

UVLOOP = "uvloop.Loop"
ASYNCIO = "asyncio.unix_events._UnixSelectorEventLoop"


def _handles() -> dict[str, Any]:
    """Handles named like the subprocess's jobs; these bodies never run."""
    reg = JobRegistry()

    async def nothing(input: Any, ctx: Any) -> None:
        return None

    names = ("where", "threaded", "spawned", "endless")
    return {
        n: job(nothing, name=n, tenant="none", idempotency_key=_key, registry=reg) for n in names
    }


def _key(i: Any) -> str:
    return str(i["n"])


def _inputs(n: int, start: int = 0) -> list[dict[str, int]]:
    return [{"n": i} for i in range(start, start + n)]


def _worker_argv(cwd: Path, url: str, *extra: str) -> list[str]:
    (cwd / "loopjobs.py").write_text(JOBS_MODULE, encoding="utf-8")
    return [sys.executable, "-m", "jobs_core.cli", "worker", "loopjobs", "--driver", url,
            "--concurrency", "4", "--drain-timeout", "1", "--process-pool", "1", "--quiet",
            *extra]  # fmt: skip


async def _until(
    driver: JobDriver, ids: list[str], states: set[JobState], within_s: float, running: str
) -> None:
    """Until every job of `ids` is in `states`, but `running`, which is to be running."""
    deadline = time.monotonic() + within_s
    while True:
        rows = await driver.job_get_many(ids)
        if rows[running].state is JobState.RUNNING and all(
            rows[i].state in states for i in ids if i != running
        ):
            return
        assert time.monotonic() < deadline, {i: rows[i].state for i in ids}
        await asyncio.sleep(0.05)


async def _run_worker(
    url: str, cwd: Path, extra: tuple[str, ...], env: dict[str, str] | None = None
) -> tuple[list[dict[str, Any]], int, str]:
    """Start `ujobs worker` with `extra`, run 4 `where`, 2 `threaded`, 1 `spawned` and one
    `endless` job on it, SIGTERM it mid-`endless`; the `where` results, its status, its output."""
    driver = driver_from_url(url)
    async with driver:
        h, jobs = _handles(), Jobs(driver)
        where = [r.id for r in await jobs.enqueue_many(h["where"], _inputs(4))]
        other = [r.id for r in await jobs.enqueue_many(h["threaded"], _inputs(2))]
        other += [r.id for r in await jobs.enqueue_many(h["spawned"], _inputs(1))]
        endless = (await jobs.enqueue(h["endless"], {"n": 0})).id
        proc = await asyncio.create_subprocess_exec(
            *_worker_argv(cwd, url, *extra),
            cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": code_path(*([cwd] if env is None else [])),
                 **(env or {})},
        )  # fmt: skip
        try:
            try:
                await _until(driver, [*where, *other, endless], {JobState.COMPLETED}, 30, endless)
            finally:
                proc.send_signal(signal.SIGTERM)
                output, _ = await asyncio.wait_for(proc.communicate(), 30)
        except AssertionError as exc:
            raise AssertionError(output.decode()) from exc
        finally:
            if proc.returncode is None:
                proc.kill()
        # The drain handed the endless job back, its attempt unspent.
        back = (await driver.job_get_many([endless]))[endless]
        assert (back.state, back.attempt) == (JobState.READY, 0), output.decode()
        assert await driver.worker_list(int(time.time() * 1000)) == []
        results: list[dict[str, Any]] = [await jobs.result(i) for i in where]  # type: ignore[misc]
        assert proc.returncode is not None
        return results, proc.returncode, output.decode()


@pytest.mark.parametrize(
    ("extra", "loop"),
    [((), UVLOOP), (("--loop", "uvloop"), UVLOOP), (("--loop", "asyncio"), ASYNCIO)],
    ids=["auto", "uvloop", "asyncio"],
)
async def test_a_worker_runs_its_bodies_on_the_loop_its_option_names_and_drains_on_sigterm(
    store_url: str, tmp_path: Path, extra: tuple[str, ...], loop: str
) -> None:
    results, status, output = await _run_worker(store_url, tmp_path, extra)
    assert status == 0, output
    assert {r["loop"] for r in results} == {loop}


@pytest.mark.parametrize("by", ["group option", "env"])
async def test_loop_asyncio_given_to_a_group_or_by_env_is_the_workers_loop(
    tmp_path: Path, by: str
) -> None:
    """`--loop asyncio` given to a `--processes 2` supervisor reaches its workers (not their
    default, uvloop here); UJOBS_LOOP=asyncio reaches a worker."""
    with fresh_store_url("pg") as url:
        env = {"PYTHONPATH": code_path(tmp_path)}
        extra: tuple[str, ...] = ("--processes", "2", "--loop", "asyncio")
        if by == "env":
            env["UJOBS_LOOP"], extra = "asyncio", ()
        results, status, output = await _run_worker(url, tmp_path, extra, env)
        assert status == 0, output
        assert {r["loop"] for r in results} == {ASYNCIO}


def _no_uvloop(tmp_path: Path) -> Path:
    """A directory whose `uvloop` cannot be imported, as on Windows or PyPy."""
    shim = tmp_path / "shim" / "uvloop"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("no uvloop here")\n', encoding="utf-8")
    return shim.parent


async def test_loop_uvloop_where_it_cannot_be_imported_is_refused_before_the_worker_starts(
    tmp_path: Path,
) -> None:
    with fresh_store_url("pg") as url:
        env = {**os.environ, "PYTHONPATH": code_path(_no_uvloop(tmp_path), tmp_path)}
        proc = await asyncio.create_subprocess_exec(
            *_worker_argv(tmp_path, url, "--loop", "uvloop"),
            cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        output = (await asyncio.wait_for(proc.communicate(), 30))[0].decode()
        assert proc.returncode == 2, output
        assert "X_CLI_EXTRA_MISSING" in output and "--loop uvloop" in output, output
        async with driver_from_url(url) as driver:
            assert await driver.worker_list(int(time.time() * 1000)) == []
        # `auto` (the default) falls back to asyncio's loop there.
        results, status, output = await _run_worker(url, tmp_path, (), env)
        assert status == 0, output
        assert {r["loop"] for r in results} == {ASYNCIO}


def test_loop_factory_names_each_loop_and_refuses_an_unknown_one() -> None:
    assert loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("auto") is uvloop.new_event_loop  # installed here
    assert loop_factory("asyncio") is asyncio.new_event_loop
    with pytest.raises(OptionInvalidError):
        loop_factory("trio")
    assert CliExtraMissingError.code == "X_CLI_EXTRA_MISSING"


async def _drain(driver: JobDriver, jobs: int, concurrency: int) -> str:
    """Enqueue `jobs` no-op jobs and drain them with one in-process worker; the loop's type."""
    reg = JobRegistry()

    async def noop(input: Any, ctx: Any) -> None:
        return None

    handle = job(noop, name="noop", tenant="none", idempotency_key=_key, registry=reg)
    await Jobs(driver).enqueue_many(handle, _inputs(jobs))
    worker = Worker(driver, [handle], concurrency=concurrency, poll_floor=0.01)
    await worker.start()
    try:
        deadline = time.monotonic() + 30
        while worker.stats.completed < jobs:
            assert time.monotonic() < deadline, worker.stats
            await asyncio.sleep(0.01)
    finally:
        await worker.stop()
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_on_either_loop_a_pg_drain_sends_the_ack_and_the_next_claim_as_one_pipeline(
    loop: str,
) -> None:
    """docs/pg.md, "The ack and the next claim in one transaction": in a c10 drain the acks
    and the claims go out together. uvloop runs a loop turn differently (its I/O callbacks,
    its ready queue); the two turns `_coalesced` waits must still gather them there."""
    with fresh_store_url("pg") as url:
        driver = driver_from_url(url)
        assert isinstance(driver, PgDriver)
        together: list[int] = []
        original = driver._together

        async def counted(batch: Any, got: list[Any]) -> None:
            await original(batch, got)
            together.append(sum(r is not None for r in got))

        driver._together = counted  # type: ignore[method-assign]

        async def go() -> str:
            async with driver:
                return await _drain(driver, 500, 10)

        assert run_role(go(), loop) == loop
    # 50 batches of 10: an ack and a claim in (nearly) every one, gathered (50 of 50 on both
    # loops when this was written).
    assert len(together) >= 45, together
    assert sum(n >= 2 for n in together) >= 45, together


def test_a_redis_drain_on_uvloop() -> None:
    with fresh_store_url("redis") as url:

        async def go() -> str:
            async with driver_from_url(url) as driver:
                return await _drain(driver, 300, 10)

        assert run_role(go(), "uvloop") == "uvloop"


def test_on_uvloop_the_pg_wake_reaches_an_idle_worker() -> None:
    """The LISTEN session is read with `loop.add_reader` (jobs_pg/wake.py): on uvloop an idle
    worker whose poll is a minute away still starts a job enqueued now, woken by its NOTIFY."""
    with fresh_store_url("pg") as url:

        async def go() -> str:
            reg = JobRegistry()
            ran = asyncio.Event()

            async def body(input: Any, ctx: Any) -> None:
                ran.set()

            handle = job(body, name="woken", tenant="none", idempotency_key=_key, registry=reg)
            async with driver_from_url(url) as driver:
                worker = Worker(driver, [handle], concurrency=2, poll_floor=60, poll_ceiling=60)
                await worker.start()
                try:
                    await asyncio.sleep(1)  # idle: its first empty claim is behind it
                    await Jobs(driver).enqueue(handle, {"n": 0})
                    await asyncio.wait_for(ran.wait(), 20)
                finally:
                    await worker.stop()
            return type(asyncio.get_running_loop()).__module__.split(".")[0]

        assert run_role(go(), "uvloop") == "uvloop"
