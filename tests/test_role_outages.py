"""Every long-running role the CLI starts — `ujobs worker`, `ujobs scheduler`, `ujobs relay`, a
worker `--with-scheduler` or `--with-relay` — as a real process, through an outage of a
throwaway Postgres or a throwaway Redis of this test's own (never the shared servers):

- started while its store is down, each waits for it (logged, with the worker's outage backoff)
  and answers SIGTERM meanwhile with exit 0; once the store is up, each does its work;
- a store that refuses a role for another reason (a schema not installed) ends it at once: one
  `X_*` line, exit 2;
- drained while its store is down — shut down, or frozen (it takes connections and never
  answers) — each exits 0 within its `--drain-timeout` plus the README's "about a second"
  (SPEC §7: a worker outlives an outage at start, mid-run and in a drain; §9: the scheduler).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from jobs_core.driver import JobDriver
from jobs_core.errors import DriverUnavailableError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import JobFilter, JobListParams
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_pg.outbox import PgOutbox
from jobs_pg.urls import libpq_url
from tests.core.support import code_path, ujobs
from tests.outage import throwaway_pg, throwaway_redis
from tests.pg.conftest import PG_URL, drop_schema, fresh_schema, migrate
from tests.pg.server import PgServer
from tests.redis.conftest import RedisServer

APP = """
import asyncio
from jobs_core import job
from jobs_core.scheduler import task


@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def quick(input, ctx):
    return None


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), concurrency=2)
async def endless(input, ctx):  # holds a fleet-wide slot (a lease) until the drain aborts it
    await asyncio.sleep(3600)


@job(tenant="none", idempotency_key=lambda i: "tick")
async def tick(input, ctx):
    return None


ticks = task("ticks", cron="* * * * * *", tz="UTC", job=tick)
"""

#: `--drain-timeout` of every drained role.
DRAIN_S = 2.0
#: What the README promises past it: "A drain ends within --drain-timeout plus about a second".
PROMISED_S = 1.0
#: Room for a loaded 2-core machine (signal delivery, the interpreter's exit, the parent's
#: polling): this is a contract, not a benchmark.
LOADED_S = 1.0


async def _nothing(input: Any, ctx: Any) -> None:
    return None


def _handles() -> tuple[JobHandle, JobHandle]:
    """Handles named like the app's `quick` and `endless` (their bodies never run here)."""
    reg = JobRegistry()

    def key(i: Any) -> str:
        return str(i["n"])

    return (
        job(_nothing, name="quick", tenant="none", idempotency_key=key, registry=reg),
        job(_nothing, name="endless", tenant="none", idempotency_key=key, registry=reg),
    )


QUICK, ENDLESS = _handles()


@dataclass
class Backend:
    """The throwaway server a test takes down, and fresh stores on it (a schema, a prefix)."""

    kind: str
    server: PgServer | RedisServer
    #: Outbox schemas made on the shared Postgres (the Redis case's app database), dropped after.
    shared_schemas: list[str] = field(default_factory=list)
    frozen: list[int] = field(default_factory=list)

    def store(self) -> str:
        """The URL of a fresh, empty jobs store on the throwaway server (installed)."""
        if isinstance(self.server, PgServer):
            schema = fresh_schema()
            self.server.migrate(schema)
            return f"{self.server.url}?schema={schema}"
        return f"{self.server.url}?prefix=t-{uuid.uuid4().hex[:12]}"

    def outbox_for(self, store: str) -> str:
        """An outbox to relay into `store`: on Postgres the store's own schema (it is down with
        it); with Redis a fresh schema of the shared Postgres, which stays up."""
        if self.kind == "pg":
            return store
        schema = fresh_schema()
        migrate(schema)
        self.shared_schemas.append(schema)
        return f"{PG_URL}?schema={schema}"

    def shut_down(self) -> None:
        if isinstance(self.server, PgServer):
            self.server.stop("immediate")  # a crash, as in the chaos run's finding
        else:
            self.server.stop()

    def start(self) -> None:
        self.server.start()

    def freeze(self) -> None:
        """Stop the server's processes (SIGSTOP): connections are taken, nothing is answered."""
        self.frozen = _server_pids(self.server)
        for pid in self.frozen:
            # A backend listed a moment ago may have exited since (a client's connection closed).
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.frozen = []


def _server_pids(server: PgServer | RedisServer) -> list[int]:
    if isinstance(server, RedisServer):
        assert server.proc is not None
        return [server.proc.pid]
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # The fields after the command's closing parenthesis: state, then the parent's pid.
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                children.append(int(stat.parent.name))
    return [postmaster, *children]


@pytest.fixture(scope="module")
def pg_server() -> Iterator[PgServer]:
    with throwaway_pg() as s:
        yield s


@pytest.fixture(params=["pg", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "pg":
        server: PgServer = request.getfixturevalue("pg_server")
        if not server.running():  # a test that failed mid-outage left it down
            server.start()
        b = Backend("pg", server)
        try:
            yield b
        finally:
            b.thaw()
        return
    with throwaway_redis(tmp_path / "redis") as redis_server:
        b = Backend("redis", redis_server)
        try:
            yield b
        finally:
            b.thaw()
            for schema in b.shared_schemas:
                drop_schema(schema)


class Role:
    """`ujobs <args>` as its own process in `app`, its output (stderr too) in a file."""

    def __init__(self, app: Path, name: str, *args: str) -> None:
        self.name = name
        self.out = app / f"{name.replace(' ', '_')}.log"
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "jobs_core.cli", *args],
                cwd=app,
                env={**os.environ, "PYTHONPATH": code_path(app)},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        return self.out.read_text(encoding="utf-8", errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[tuple[Path, list[Role]]]:
    """The app's directory (its module `outageapp`) and the roles a test starts there, each
    killed if still running when the test ends."""
    (tmp_path / "outageapp.py").write_text(APP, encoding="utf-8")
    roles: list[Role] = []
    try:
        yield tmp_path, roles
    finally:
        for r in roles:
            r.stop()


def until(check: Callable[[], bool], within: float, what: str, roles: list[Role]) -> None:
    """Poll `check` until True; fail on a role that exited meanwhile, or after `within` s."""
    deadline = time.monotonic() + within
    while not check():
        for r in roles:
            assert r.alive(), f"{r.name} exited (rc {r.proc.returncode}):\n{r.output()[-3000:]}"
        assert time.monotonic() < deadline, f"never reached: {what}"
        time.sleep(0.05)


def sigterm_all(roles: list[Role], within: float) -> dict[str, float]:
    """SIGTERM every role at once; how long each took to exit (each must exit 0)."""
    started = time.monotonic()
    for r in roles:
        r.proc.send_signal(signal.SIGTERM)
    took: dict[str, float] = {}
    while len(took) < len(roles) and time.monotonic() - started < within:
        for r in roles:
            if r.name not in took and not r.alive():
                took[r.name] = time.monotonic() - started
        time.sleep(0.01)
    for r in roles:
        assert r.name in took, f"{r.name} did not exit within {within} s:\n{r.output()[-3000:]}"
        assert r.proc.returncode == 0, f"{r.name} rc {r.proc.returncode}:\n{r.output()[-3000:]}"
    return took


def stage(outbox_url: str, ns: range) -> list[str]:
    """Stage `quick` jobs in the outbox at `outbox_url` in one committed transaction."""
    base, _, schema = outbox_url.partition("?schema=")
    with psycopg.connect(libpq_url(base)) as conn:  # the `with` commits
        return [PgOutbox(schema=schema).stage(conn, QUICK, {"n": n}).id for n in ns]


def ask(url: str, question: Callable[[JobDriver], Any]) -> Any:
    """One answer from the store at `url`, on a driver opened for it alone; None while the
    store is still coming back (the roles under test ride that out on their own)."""

    async def go() -> Any:
        try:
            async with driver_from_url(url) as driver:
                return await question(driver)
        except DriverUnavailableError:
            return None

    return asyncio.run(go())


def states(url: str, ids: list[str]) -> set[JobState]:
    async def q(d: JobDriver) -> set[JobState]:
        rows = await d.job_get_many(ids)
        return {r.state for r in rows.values()} if len(rows) == len(ids) else set()

    answer: set[JobState] | None = ask(url, q)
    return answer or set()


def fired(url: str) -> bool:
    async def q(d: JobDriver) -> bool:
        mark = (await d.task_marks(["ticks"])).get("ticks")
        return mark is not None and mark.fired_ms is not None

    answer: bool | None = ask(url, q)
    return bool(answer)


def running(url: str) -> int:
    async def q(d: JobDriver) -> int:
        running = JobFilter(states=frozenset({JobState.RUNNING}))
        return len((await d.job_list(JobListParams(running, limit=50))).jobs)

    answer: int | None = ask(url, q)
    return answer or 0


def enqueue(url: str, handle: JobHandle, ns: range) -> list[str]:
    async def q(d: JobDriver) -> list[str]:
        return [r.id for r in await Jobs(d).enqueue_many(handle, [{"n": n} for n in ns])]

    answer: list[str] = ask(url, q)
    return answer


def waits_for_its_store(role: Role) -> bool:
    """The role has logged that its store is unavailable and that it waits (not exited)."""
    return "store_unavailable" in role.output() and "again in" in role.output()


def test_each_role_started_while_its_store_is_down_waits_for_it_then_works(
    backend: Backend, app: tuple[Path, list[Role]]
) -> None:
    path, roles = app
    # Each role on a store of its own: each proves its own work (and leads its own fleet).
    sched, wsched, relayed, wrelay = (backend.store() for _ in range(4))
    relay_outbox, wrelay_outbox = backend.outbox_for(relayed), backend.outbox_for(wrelay)
    quick_ids = enqueue(wsched, QUICK, range(3))
    relayed_ids = stage(relay_outbox, range(3))
    wrelayed_ids = stage(wrelay_outbox, range(3))
    backend.shut_down()
    drain = ("--drain-timeout", "2")
    roles += [
        Role(path, "scheduler", "scheduler", "outageapp", "--driver", sched, *drain),
        Role(
            path, "worker --with-scheduler",
            "worker", "outageapp", "--driver", wsched, "--with-scheduler", "--quiet", *drain,
        ),
        Role(
            path, "relay",
            "relay", "--outbox", relay_outbox, "--driver", relayed, *drain,
        ),
        Role(
            path, "worker --with-relay",
            "worker", "outageapp", "--driver", wrelay, "--with-relay", "--outbox", wrelay_outbox,
            "--quiet", *drain,
        ),
    ]  # fmt: skip
    until(lambda: all(waits_for_its_store(r) for r in roles), 60, "every role waits", roles)
    backend.start()
    until(lambda: fired(sched), 30, "the scheduler fires", roles)
    until(lambda: fired(wsched), 30, "the worker's scheduler fires", roles)
    until(lambda: states(wsched, quick_ids) == {JobState.COMPLETED}, 30, "worker runs", roles)
    until(lambda: bool(states(relayed, relayed_ids)), 30, "the relay publishes", roles)
    until(
        lambda: states(wrelay, wrelayed_ids) == {JobState.COMPLETED},
        30,
        "the worker's relay publishes and the worker runs what it published",
        roles,
    )
    for r in roles:
        assert "the store answers again" in r.output(), r.output()[-3000:]
    sigterm_all(roles, within=30)


def test_a_role_waiting_for_its_store_answers_sigterm_at_once(
    backend: Backend, app: tuple[Path, list[Role]]
) -> None:
    path, roles = app
    store = backend.store()
    outbox = backend.outbox_for(store)
    backend.shut_down()
    roles += [
        Role(path, "scheduler", "scheduler", "outageapp", "--driver", store),
        Role(
            path, "worker --with-scheduler --with-relay",
            "worker", "outageapp", "--driver", store, "--with-scheduler", "--with-relay",
            "--outbox", outbox, "--quiet",
        ),
        Role(path, "relay", "relay", "--outbox", outbox, "--driver", store),
    ]  # fmt: skip
    until(lambda: all(waits_for_its_store(r) for r in roles), 60, "every role waits", roles)
    # Nothing to drain: each exits at once (the default --drain-timeout is 30 s).
    took = sigterm_all(roles, within=10)
    assert max(took.values()) < PROMISED_S + LOADED_S, took


@pytest.mark.parametrize("role", ["scheduler", "worker"])
def test_a_role_whose_store_lacks_the_schema_exits_2_with_one_line(
    tmp_path: Path, role: str
) -> None:
    """The store answers, but the jobs schema was never installed: the role exits 2 at once
    with one typed line saying how to install it (not the generic `X_DRIVER_ERROR`, and not
    a worker waiting for a store that will never have its tables) — and that line alone: no
    banner before it, as if the role had started (the check comes first)."""
    (tmp_path / "outageapp.py").write_text(APP, encoding="utf-8")
    url = f"{PG_URL}?schema={fresh_schema()}"  # never installed
    done = ujobs(role, "outageapp", "--driver", url, cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("X_DRIVER_SCHEMA_MISSING: ") and "not installed" in last, done.stdout
    assert "ujobs db upgrade" in last, done.stdout
    assert done.stdout.strip().splitlines() == [last], done.stdout
    assert f"ujobs {role}" not in done.stdout + done.stderr, done.stdout + done.stderr


@pytest.mark.parametrize("how", ["shut down", "frozen"])
def test_each_role_drained_while_its_store_is_down_exits_in_time(
    backend: Backend, app: tuple[Path, list[Role]], how: str
) -> None:
    path, roles = app
    worked, scheduled, relayed = (backend.store() for _ in range(3))
    outbox = backend.outbox_for(relayed)
    # Two bodies run (each holding a slot of `concurrency=2`), a third claimed job waits.
    enqueue(worked, ENDLESS, range(3))
    drain = ("--drain-timeout", f"{DRAIN_S:g}")
    roles += [
        Role(
            path, "worker",
            "worker", "outageapp", "--driver", worked, "--concurrency", "2",
            "--max-in-flight", "3", "--quiet", *drain,
        ),
        Role(path, "scheduler", "scheduler", "outageapp", "--driver", scheduled, *drain),
        Role(path, "relay", "relay", "--outbox", outbox, "--driver", relayed, *drain),
    ]  # fmt: skip
    staged = stage(outbox, range(3))
    until(lambda: running(worked) == 3, 60, "all three claimed", roles)
    until(lambda: fired(scheduled), 60, "the scheduler leads and fires", roles)
    until(lambda: bool(states(relayed, staged)), 60, "the relay publishes", roles)
    backend.shut_down() if how == "shut down" else backend.freeze()
    took = sigterm_all(roles, within=30)
    assert max(took.values()) < DRAIN_S + PROMISED_S + LOADED_S, took
