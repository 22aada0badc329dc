"""Real `ujobs relay` processes over a real Postgres outbox, publishing into real Postgres and
real Redis: rows staged in an app's transaction become jobs under their staged ids; a relay
SIGKILLed between publish and mark is replaced, and each job exists once and runs once; two
relays at once publish each row once; `ujobs worker --with-relay` relays from the driver's own
database; the CLI's refusals.

The kill lands between publish and mark deterministically: the relays run on a driver scheme
(`hooked://`) that a distribution in the app's directory declares, which wraps the real driver
(`INNER_DRIVER`) and, after each `job_enqueue_many`, writes its answers to a ledger and then,
when told (`HANG`), never returns — the mark never comes.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.outbox import OutboxRow, Staged
from jobs_core.records import JobFilter, JobListParams, JobRecord
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_pg.outbox import PgOutbox
from jobs_pg.urls import libpq_url
from tests.core.support import ledger_process, reaping, ujobs
from tests.pg.conftest import PG_URL, drop_schema, fresh_schema, migrate

APP = """
import os
from pathlib import Path
from jobs_core import job

LEDGER = Path(os.environ.get("LEDGER", "ledger.txt"))


@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def mail(input, ctx):
    with LEDGER.open("a") as f:
        f.write(f"ran {input['n']} {ctx.job_id} {os.getpid()}\\n")
"""

#: A driver scheme for the relays under test: the real driver, its batch enqueue observed.
HOOK = """
import asyncio, os
from pathlib import Path
from jobs_core.urls import driver_from_url

RELAY_LEDGER = Path(os.environ["RELAY_LEDGER"])


def note(line):
    with RELAY_LEDGER.open("a") as f:
        f.write(line + "\\n")


def from_url(url):
    driver = driver_from_url(os.environ["INNER_DRIVER"])
    many = driver.job_enqueue_many

    async def enqueue_many(jobs):
        answers = await many(jobs)
        inserted = sum(1 for a in answers if not a.deduped)
        note(f"{os.getpid()} {inserted} {len(answers) - inserted}")
        if os.environ.get("HANG"):
            await asyncio.sleep(3600)  # published, never marked: the kill lands here
        await asyncio.sleep(float(os.environ.get("SLOW", "0")))
        return answers

    driver.job_enqueue_many = enqueue_many
    note(f"{os.getpid()} ready")
    return driver
"""


async def mail_body(input: Any, ctx: JobContext) -> None:
    return None


#: The app's job as the staging code declares it (the worker imports the app's own).
MAIL: JobHandle = job(
    mail_body,
    name="mail",
    tenant="none",
    idempotency_key=lambda i: str(i["n"]),
    registry=JobRegistry(),
)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "relayapp.py").write_text(APP, encoding="utf-8")
    (tmp_path / "relayhook.py").write_text(HOOK, encoding="utf-8")
    dist = tmp_path / "relayhook-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: relayhook\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[ujobs.drivers]\nhooked = relayhook:from_url\n")
    return tmp_path


@pytest.fixture
def outbox_schema() -> Iterator[str]:
    """The app's database: a migrated schema of its own holding the outbox table."""
    schema = fresh_schema()
    migrate(schema)
    try:
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A migrated Postgres schema for the jobs, by URL."""
    schema = fresh_schema()
    migrate(schema)
    try:
        yield schema_url(schema)
    finally:
        drop_schema(schema)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


def schema_url(schema: str) -> str:
    return f"{PG_URL}?schema={schema}"


def stage(schema: str, ns: range) -> list[Staged]:
    """Stage a `mail` per `n` in ONE transaction of the app's own psycopg connection."""
    outbox = PgOutbox(schema=schema)
    with psycopg.connect(libpq_url(PG_URL)) as conn, conn.transaction():
        return [outbox.stage(conn, MAIL, {"n": n}) for n in ns]


async def _pending(schema: str) -> list[OutboxRow]:
    async with PgOutbox(PG_URL, schema=schema) as outbox:
        return await outbox.outbox_pending(1000)


def pending(schema: str) -> list[OutboxRow]:
    return asyncio.run(_pending(schema))


async def _jobs(url: str) -> list[JobRecord]:
    driver: JobDriver = driver_from_url(url)
    async with driver:
        page = await driver.job_list(JobListParams(JobFilter(), limit=500))
        rows = await driver.job_get_many([j.id for j in page.jobs])
    return sorted(rows.values(), key=lambda r: r.id)


def jobs(url: str) -> list[JobRecord]:
    return asyncio.run(_jobs(url))


def lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def wait_for(check: Any, what: str, procs: list[subprocess.Popen[str]], within: float = 60) -> None:
    deadline = time.monotonic() + within
    while not check():
        for p in procs:
            assert p.poll() is None, p.communicate()[0]
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def relay(app: Path, driver_url: str, outbox_url: str, *args: str, **env: str) -> Any:
    return ledger_process(app, driver_url, "-v", "relay", "--outbox", outbox_url, *args, **env)


def hooked(app: Path, inner: str) -> dict[str, str]:
    return {"INNER_DRIVER": inner, "RELAY_LEDGER": str(app / "relays.txt")}


def drain(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out
    return out


def test_ujobs_relay_publishes_a_postgres_outbox_into_each_driver(
    store_url: str, outbox_schema: str, app: Path, procs: list[subprocess.Popen[str]]
) -> None:
    staged = stage(outbox_schema, range(25))
    # The outbox URL from the environment, as a deploy keeps it off the command line; the
    # server trusts every local login, so the password is only there to be masked.
    outbox_url = schema_url(outbox_schema).replace("postgres@", "postgres:PWrelay@", 1)
    assert "PWrelay" in outbox_url
    proc = ledger_process(app, store_url, "-v", "relay", "--batch", "10", UJOBS_OUTBOX=outbox_url)
    procs.append(proc)
    wait_for(lambda: not pending(outbox_schema), "the outbox emptied", procs)
    out = drain(proc)
    rows = jobs(store_url)
    assert [(r.id, r.run_id, r.name) for r in rows] == sorted(
        (s.id, s.run_id, "mail") for s in staged
    )
    assert all(r.state is JobState.READY for r in rows)
    assert "relay stopped: 25 rows published" in out, out
    assert "jobs.relay.started" in out and "jobs.relay.stopped" in out, out
    assert "relay from" in out and "PWrelay" not in out, out


def test_a_relay_killed_between_publish_and_mark_is_replaced_and_each_job_runs_once(
    store_url: str, outbox_schema: str, app: Path, procs: list[subprocess.Popen[str]]
) -> None:
    staged = stage(outbox_schema, range(5))
    outbox_url = schema_url(outbox_schema)
    first = relay(app, "hooked://", outbox_url, "--lease", "2", HANG="1", **hooked(app, store_url))
    procs.append(first)
    published = app / "relays.txt"
    wait_for(lambda: len(lines(published)) == 2, "the first relay published", procs)
    # Published (the jobs exist) and never marked (the rows are still held): kill it there.
    assert sorted(r.id for r in jobs(store_url)) == sorted(s.id for s in staged)
    assert [r.claimed_by is not None for r in pending(outbox_schema)] == [True] * 5
    first.kill()
    first.communicate()
    procs.remove(first)
    # A worker with its relay: the relay takes the rows once their lease (2 s) lapses.
    second = ledger_process(
        app,
        "hooked://",
        "worker",
        "relayapp",
        "--quiet",
        "--with-relay",
        "--outbox",
        outbox_url,
        **hooked(app, store_url),
    )
    procs.append(second)
    ran = app / "ledger.txt"
    wait_for(lambda: len(lines(ran)) >= 5 and not pending(outbox_schema), "all ran", procs)
    drain(second)
    assert sorted(int(n) for _, n, *_ in lines(ran)) == [0, 1, 2, 3, 4]  # each ran once
    assert sorted(job_id for _, _, job_id, _ in lines(ran)) == sorted(s.id for s in staged)
    rows = jobs(store_url)
    assert len(rows) == 5 and all(r.state is JobState.COMPLETED for r in rows)
    # The first relay inserted the five; the republish deduped all five onto them.
    by_pid = [entry for entry in lines(published) if entry[1] != "ready"]
    assert by_pid == [[str(first.pid), "5", "0"], [str(second.pid), "0", "5"]], by_pid


def test_two_relay_processes_publish_each_row_once(
    pg_url: str, outbox_schema: str, app: Path, procs: list[subprocess.Popen[str]]
) -> None:
    env = hooked(app, pg_url)
    outbox_url = schema_url(outbox_schema)
    for _ in range(2):
        procs.append(relay(app, "hooked://", outbox_url, "--batch", "5", SLOW="0.2", **env))
    published = app / "relays.txt"
    wait_for(lambda: len(lines(published)) == 2, "both relays ready", procs)
    staged = stage(outbox_schema, range(100))
    wait_for(lambda: not pending(outbox_schema), "the outbox emptied", procs)
    for p in procs:
        drain(p)
    batches = [entry for entry in lines(published) if entry[1] != "ready"]
    assert sum(int(inserted) for _, inserted, _ in batches) == 100
    assert sum(int(deduped) for _, _, deduped in batches) == 0, batches  # none published twice
    assert {pid for pid, _, _ in batches} == {str(p.pid) for p in procs}, "one relay did it all"
    assert sorted(r.id for r in jobs(pg_url)) == sorted(s.id for s in staged)


def test_worker_with_relay_relays_from_the_drivers_own_postgres(
    pg_url: str, app: Path, procs: list[subprocess.Popen[str]]
) -> None:
    schema = pg_url.rsplit("schema=", 1)[1]
    staged = stage(schema, range(3))
    proc = ledger_process(app, pg_url, "worker", "relayapp", "--quiet", "--with-relay")
    procs.append(proc)
    wait_for(lambda: len(lines(app / "ledger.txt")) == 3, "the staged jobs ran", procs)
    drain(proc)
    assert sorted(entry[2] for entry in lines(app / "ledger.txt")) == sorted(s.id for s in staged)
    assert pending(schema) == []


def test_the_relay_commands_refuse_what_they_cannot_run(app: Path) -> None:
    no_outbox = ujobs("relay", "--driver", "memory", cwd=app)
    assert no_outbox.returncode == 2 and "X_CLI_DRIVER_REQUIRED" in no_outbox.stdout
    assert "--outbox" in no_outbox.stdout
    # Redis keeps no outbox: --with-relay must be told where the app stages.
    redis = ujobs(
        "worker", "relayapp", "--driver", "redis://127.0.0.1:1/0", "--with-relay", cwd=app
    )
    assert redis.returncode == 2 and "X_CLI_DRIVER_REQUIRED" in redis.stdout, redis.stdout
    stray = ujobs("worker", "relayapp", "--driver", "memory", "--outbox", PG_URL, cwd=app)
    assert stray.returncode == 2 and "X_CLI_USAGE_INVALID" in stray.stdout, stray.stdout
