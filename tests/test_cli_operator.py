"""The operator's CLI as a user runs it, on real Postgres and real Redis: `ujobs jobs list|show|
cancel|requeue|promote|remove`, `ujobs queues`, `ujobs pause|resume`, `ujobs workers` and
`ujobs stats`; what it prints (tables, `--json`), what it exits with, and that a job's sensitive
fields never appear.

The store is filled through the library (a real worker runs an app module), then every verb is
run against the same URL from the environment or `--driver`: in this process (click's runner,
`ujobs_here`: the same `main`, its exit code and output), as an interpreter of its own cost a
second of CPU per verb for its imports. What only a process shows is still run as one
(`ujobs`): a piped stdout parsed as JSON, a refusal's exit status, a worker stopped by SIGTERM.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import shlex
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner, Result

from jobs_core.cli import main
from jobs_core.clock import SystemClock
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.records import ClaimParams, Nack, NackKind, StepPut
from jobs_core.states import JobState
from jobs_core.steps.api import SAGA
from jobs_core.urls import driver_from_url
from jobs_core.worker import Worker
from tests.core.support import code_path, new_job, until

CARD = "4242424242424242"
T = TypeVar("T")

# Its own registry: the CLI's and the workers' subprocesses import it once each, and this
# process must never meet a second `charge` in the process-wide registry (X_JOB_DUPLICATE).
# An input without an org bills the default one (the tenant function fails closed on no
# answer).
APP = """
from jobs_core import job, Retry
from jobs_core.job import JobRegistry

@job(tenant=lambda i: i.get("org", "acme"), idempotency_key=lambda i: str(i["n"]),
     sensitive=("card",), queue="payments", retry=Retry(attempts=1), registry=JobRegistry())
async def charge(input, ctx):
    if input.get("fail"):
        raise RuntimeError(f"card {input['card']} was declined")
    return {"charged": input["n"], "card": input["card"]}
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "payapp.py").write_text(APP, encoding="utf-8")
    return tmp_path


def ujobs(
    *args: str, url: str, cwd: Path, env_driver: bool = True
) -> subprocess.CompletedProcess[str]:
    """`ujobs ARGS` in a subprocess, the driver URL in UJOBS_DRIVER (or none at all)."""
    import os

    env = {
        **os.environ,
        "COLUMNS": "200",
        "UJOBS_DRIVER": url if env_driver else "",
        "PYTHONPATH": code_path(cwd),
    }
    return subprocess.run(
        [sys.executable, "-m", "jobs_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
    )


#: stdout and stderr read apart (click 8.1 mixes them unless told; 8.2 always keeps both).
_APART: dict[str, Any] = (
    {"mix_stderr": False} if "mix_stderr" in inspect.signature(CliRunner).parameters else {}
)


def ujobs_here(*args: str, url: str, env_driver: bool = True) -> Result:
    """`ujobs ARGS` in this process (click's runner: its exit code, stdout and stderr), the
    driver URL in UJOBS_DRIVER (or none at all). One call at a time: the runner swaps the
    process's stdout, and `main` its root logger, which are put back after. A logger another
    test in this process left more verbose logs to stderr here: what is parsed is stdout."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner(**_APART).invoke(
            main, list(args), env={"COLUMNS": "200", "UJOBS_DRIVER": url if env_driver else ""}
        )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


async def in_turn(*calls: Awaitable[T]) -> list[T]:
    """Each of `calls` awaited after the one before (`ujobs_here` runs one at a time)."""
    return [await call for call in calls]


def ok(done: subprocess.CompletedProcess[str] | Result) -> str:
    if isinstance(done, Result):
        assert done.exit_code == 0, (done.stdout, done.stderr, done.exception)
        return done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def refused(done: subprocess.CompletedProcess[str] | Result, code: str) -> None:
    if isinstance(done, Result):
        assert done.exit_code == 2, (done.stdout, done.stderr, done.exception)
        assert f"{code}:" in done.stdout + done.stderr, done.stdout + done.stderr
        return
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{code}:" in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.fixture
async def filled_by(store_url: str, app: Path) -> AsyncIterator[tuple[dict[str, str], Worker]]:
    """Jobs in every interesting state: completed, dead (with the card in its error), delayed,
    and one live worker row that declares `charge`; answers their ids by role, and the worker
    (still running: a test may stop it, the fixture's own stop then joins that one)."""
    import importlib
    import sys as _sys

    _sys.path.insert(0, str(app))
    try:
        # Imported once per process: its `@job` declares `charge` in the process-wide registry,
        # which refuses a second, different handle under that name (X_JOB_DUPLICATE).
        payapp = _sys.modules.get("payapp") or importlib.import_module("payapp")
        driver: JobDriver = driver_from_url(store_url)
        async with driver:
            jobs = Jobs(driver)
            done = await jobs.enqueue(payapp.charge, {"n": 1, "card": CARD, "org": "acme"})
            dead = await jobs.enqueue(payapp.charge, {"n": 2, "card": CARD, "fail": True})
            later = await jobs.enqueue(payapp.charge, {"n": 3, "card": CARD}, delay_ms=3_600_000)
            worker = Worker(driver, [payapp.charge], poll_floor=0.01, poll_ceiling=0.05)
            await worker.start()

            async def ended() -> bool:
                rows = await driver.job_get_many([done.id, dead.id])
                return (
                    rows[done.id].state is JobState.COMPLETED
                    and rows[dead.id].state is JobState.DEAD
                )

            try:
                await until(ended, within=30)
                ids = {"done": done.id, "dead": dead.id, "later": later.id}
                yield {**ids, "worker": worker.worker_id}, worker
            finally:
                await worker.stop()
    finally:
        _sys.path.remove(str(app))


@pytest.fixture
def filled(filled_by: tuple[dict[str, str], Worker]) -> dict[str, str]:
    """`filled_by`'s ids alone, its worker left running."""
    return filled_by[0]


async def test_read_verbs_print_tables_and_json_without_secrets(
    store_url: str, app: Path, filled: dict[str, str]
) -> None:
    run = lambda *a: asyncio.to_thread(ujobs_here, *a, url=store_url)  # noqa: E731
    # Every call reads only: the listing a process of its own prints down a pipe (parsed as
    # JSON, as a script would) runs beside the others, which run here one after another.
    (
        listed_out,
        (
            dead_out,
            page_out,
            shown_out,
            table,
            queues_out,
            queues_table,
            workers_out,
            stats_out,
            stats_table,
            missing,
        ),
    ) = await asyncio.gather(
        asyncio.to_thread(ujobs, "jobs", "list", "--json", url=store_url, cwd=app),
        in_turn(
            run("jobs", "list", "--state", "dead", "--json"),
            run("jobs", "list", "--limit", "1", "--json"),
            run("jobs", "show", filled["dead"], "--json"),
            run("jobs", "show", filled["done"]),
            run("queues", "--json"),
            run("queues"),
            run("workers", "--json"),
            run("stats", "--json"),
            run("stats"),
            run("jobs", "show", "no-such-job"),
        ),
    )
    listed = json.loads(ok(listed_out))
    assert {j["id"] for j in listed["jobs"]} == {filled["done"], filled["dead"], filled["later"]}
    assert listed["next_cursor"] is None
    dead = json.loads(ok(dead_out))
    assert [j["id"] for j in dead["jobs"]] == [filled["dead"]]
    page = json.loads(ok(page_out))
    assert len(page["jobs"]) == 1 and page["next_cursor"]
    rest_out = await run("jobs", "list", "--limit", "5", "--cursor", page["next_cursor"], "--json")
    wrong_filter = await run("jobs", "list", "--state", "dead", "--cursor", page["next_cursor"])
    assert len(json.loads(ok(rest_out))["jobs"]) == 2
    refused(wrong_filter, "X_JOB_PAGE_INVALID")

    # A live worker declares `charge`: its card is masked, everything else shows.
    shown = json.loads(ok(shown_out))
    assert shown["input"] == {"n": 2, "card": "[redacted]", "fail": True}
    assert shown["state"] == "dead" and shown["error"]["type"] == "RuntimeError"
    table = ok(table)
    assert "completed" in table, table
    assert "[redacted]" in table, table
    # Times carry their age: "(3 s ago)", or "(now)" within the second the fixture settled it.
    assert "ago)" in table or "(now)" in table, table
    for out in (json.dumps(shown), table, json.dumps(listed)):
        assert CARD not in out

    queues = json.loads(ok(queues_out))
    (payments,) = [q for q in queues if q["queue"] == "payments"]
    assert payments["counts"]["completed"] == 1 and payments["counts"]["dead"] == 1
    assert payments["counts"]["ready"] == 1 and payments["demand"] == 0
    assert payments["settled"]["completed"] == 1 and payments["settled"]["dead_lettered"] == 1
    assert "payments" in ok(queues_table)
    workers = json.loads(ok(workers_out))
    assert [w["worker_id"] for w in workers] == [filled["worker"]]
    assert workers[0]["jobs"] == ["charge"] and workers[0]["queues"] == ["payments"]
    stats = json.loads(ok(stats_out))
    assert stats["states"]["dead"] == 1 and stats["names"]["charge"]["completed"] == 1
    assert "charge" in ok(stats_table)
    refused(missing, "X_JOB_NOT_FOUND")


async def test_an_input_no_live_worker_declares_is_redacted_whole(
    store_url: str, app: Path, filled_by: tuple[dict[str, str], Worker]
) -> None:
    # Stopped, the fixture's worker leaves the registry. A forget alone would race the still
    # running worker, whose next beat (a claim carries it) puts its row back.
    filled, worker = filled_by
    await worker.stop()
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        live = await driver.worker_list(SystemClock().now_ms())
    assert filled["worker"] not in {w.worker_id for w in live}
    run = lambda *a: asyncio.to_thread(ujobs_here, *a, url=store_url)  # noqa: E731
    shown = json.loads(ok(await run("jobs", "show", filled["done"], "--json")))
    assert shown["input"] == "[redacted]" and shown["result"] == "[redacted]"
    assert not shown["declared"]
    told = json.loads(ok(await run("jobs", "show", filled["done"], "--app", "payapp", "--json")))
    assert told["input"] == {"n": 1, "card": "[redacted]", "org": "acme"}
    assert told["result"] == {"charged": 1, "card": "[redacted]"}


async def test_steering_verbs_act_and_refuse_with_their_codes(
    store_url: str, app: Path, filled: dict[str, str]
) -> None:
    run = lambda *a: asyncio.to_thread(ujobs_here, *a, url=store_url)  # noqa: E731
    # No driver named anywhere: refused, never a silent memory store. A process of its own (its
    # exit status is the shell's), beside every step below: a refusal changes nothing.
    unnamed = asyncio.ensure_future(
        asyncio.to_thread(ujobs, "jobs", "list", url=store_url, cwd=app, env_driver=False)
    )
    cancel, requeue, promote, remove, requeue_all, pause_none = await in_turn(
        run("jobs", "cancel", filled["done"]),
        run("jobs", "requeue", filled["later"]),
        run("jobs", "promote", filled["done"]),
        run("jobs", "remove", "nobody"),
        run("jobs", "requeue", "--all"),
        run("pause"),
    )
    refused(cancel, "X_JOB_NOT_CANCELLABLE")
    refused(requeue, "X_JOB_NOT_REQUEUEABLE")
    refused(promote, "X_JOB_NOT_PROMOTABLE")
    refused(remove, "X_JOB_NOT_FOUND")
    refused(requeue_all, "X_CLI_USAGE_INVALID")
    refused(pause_none, "X_CLI_USAGE_INVALID")
    # The fixture's worker still runs: paused, it cannot run the requeued job to `dead` again
    # before the cancel below.
    assert "paused" in ok(await run("pause", "payments"))
    promoted_out = await run("jobs", "promote", filled["later"], "--json")
    bulk_out = await run("jobs", "requeue", "--all", "--state", "dead", "--json")
    promoted = json.loads(ok(promoted_out))
    assert promoted == [{"id": filled["later"], "answer": "promoted"}]
    bulk = json.loads(ok(bulk_out))
    assert bulk["answers"] == {"requeued": 1} and bulk["done"] == 1
    assert "cancelled" in ok(await run("jobs", "cancel", filled["dead"]))
    assert "removed" in ok(await run("jobs", "remove", filled["dead"]))
    refused(await run("jobs", "show", filled["dead"]), "X_JOB_NOT_FOUND")
    assert json.loads(ok(await run("queues", "--json")))[0]["paused"] is True
    assert "resumed" in ok(await run("resume", "payments"))
    assert "paused" in ok(await run("pause", "--name", "charge"))
    refused(await unnamed, "X_CLI_DRIVER_REQUIRED")


def test_a_cli_worker_serves_metrics_and_health(store_url: str, app: Path) -> None:
    """`ujobs worker --metrics-port 0` prints where it serves; a scrape shows its settles and
    the store's queue gauges; /healthz is 200 while it works; SIGTERM drains it."""
    import os
    import re
    import signal
    import time
    import urllib.request

    async def enqueue() -> None:
        import importlib

        sys.path.insert(0, str(app))
        try:
            payapp = sys.modules.get("payapp") or importlib.import_module("payapp")
            driver: JobDriver = driver_from_url(store_url)
            async with driver:
                jobs = Jobs(driver)
                for n in range(3):
                    await jobs.enqueue(payapp.charge, {"n": n, "card": CARD})
                await jobs.enqueue(payapp.charge, {"n": 9, "card": CARD, "fail": True})
        finally:
            sys.path.remove(str(app))

    asyncio.run(enqueue())
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobs_core.cli",
            "worker",
            "payapp",
            "--metrics-port",
            "0",
            "--quiet",
        ],
        cwd=app,
        env={
            **os.environ,
            "UJOBS_DRIVER": store_url,
            "PYTHONPATH": code_path(app),
            "COLUMNS": "200",
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    try:
        assert proc.stdout is not None
        port = None
        deadline = time.monotonic() + 30
        while port is None:
            assert time.monotonic() < deadline and proc.poll() is None, "no metrics line"
            line = proc.stdout.readline().decode()
            found = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", line)
            port = int(found.group(1)) if found else None
        base = f"http://127.0.0.1:{port}"
        text = ""
        while 'ujobs_jobs_processed_total{name="charge",queue="payments"} 4.0' not in text:
            assert time.monotonic() < deadline, text
            time.sleep(0.2)
            with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
                text = r.read().decode()
        assert 'ujobs_jobs_failed_total{name="charge",queue="payments"} 1.0' in text
        assert 'ujobs_queue_dead_jobs{queue="payments"}' in text
        assert "ujobs_store_up 1.0" in text and CARD not in text
        with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
            assert r.status == 200 and json.loads(r.read())["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


async def test_an_unwound_saga_is_requeued_only_fresh(store_url: str, app: Path) -> None:
    """A saga run that failed for good (its run holds the saga mark): `requeue ID` refuses it
    naming `--fresh`, `requeue --all` answers it `unwound` and says what to do, and
    `requeue --fresh` starts it as a new run."""
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        now = SystemClock().now_ms()
        await driver.job_enqueue(replace(new_job("saga-1", "k-saga"), run_at_ms=now))
        (held,) = (await driver.job_claim(ClaimParams(("q",), "w", 1, 60_000, now))).jobs
        puts = [StepPut(held.fence, SAGA, "{}", now), StepPut(held.fence, "book", "1", now)]
        assert await driver.step_put(puts) == [True, True]
        assert await driver.job_nack([Nack(held.fence, NackKind.FAIL, now, error="no")]) == [True]
    run = lambda *a: asyncio.to_thread(ujobs_here, *a, url=store_url)  # noqa: E731
    plain = await run("jobs", "requeue", "saga-1")
    refused(plain, "X_JOB_REQUEUE_UNWOUND")
    assert "--fresh" in plain.stdout + plain.stderr
    bulk = await run("jobs", "requeue", "--all", "--state", "dead")
    assert "1 unwound" in ok(bulk) and "--fresh" in bulk.stdout
    fresh = json.loads(ok(await run("jobs", "requeue", "--fresh", "saga-1", "--json")))
    assert fresh == [{"id": "saga-1", "answer": "requeued"}]
    shown = json.loads(ok(await run("jobs", "show", "saga-1", "--json")))
    assert shown["state"] == "ready" and shown["run_id"] != "run-saga-1" and shown["steps"] == []


async def test_the_all_refusal_suggests_a_command_that_acts_on_its_verbs_jobs(
    store_url: str, app: Path, filled: dict[str, str]
) -> None:
    """`ujobs jobs VERB --all` alone names an example to copy: run as written, it finds jobs
    that verb can act on (a delayed job promoted and cancelled, a dead one requeued), never a
    state the verb refuses (`promote --all --state dead` promotes nothing)."""
    run = lambda *a: asyncio.to_thread(ujobs_here, *a, url=store_url)  # noqa: E731
    # Paused, the fixture's worker cannot run the promoted or requeued job meanwhile.
    assert "paused" in ok(await run("pause", "payments"))
    for verb, answer in (("promote", "promoted"), ("cancel", "cancelled"), ("requeue", "requeued")):
        done = await run("jobs", verb, "--all")
        refused(done, "X_CLI_USAGE_INVALID")
        suggested = re.search(r"`ujobs (jobs [^`]+)`", done.stdout + done.stderr)
        assert suggested, done.stdout + done.stderr
        bulk = json.loads(ok(await run(*shlex.split(suggested.group(1)), "--json")))
        assert bulk["answers"] == {answer: 1}, (verb, suggested.group(1), bulk)
