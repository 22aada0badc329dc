"""Helpers the core tests share."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.leases import RateLimit
from jobs_core.records import NewJob

D = TypeVar("D", bound=JobDriver)
#: A store class: a driver, or an outbox store.
S = TypeVar("S")

ROOT = Path(__file__).resolve().parents[2]

#: The instant the tests' records are created and due at (their claims and acks count from it).
T0 = 1_800_000_000_000


#: Values `repr` cannot spell, which every refusal naming a value must survive: an int past
#: Python's 4,300 digits (ValueError) and a list nested past the recursion limit (RecursionError).
HUGE_INT = 10**5000


def deep_list(levels: int = 10_000) -> list[Any]:
    """A list nested `levels` deep."""
    nested: list[Any] = []
    for _ in range(levels):
        nested = [nested]
    return nested


def code_path(*first: Path) -> str:
    """A PYTHONPATH for a subprocess: `first` (an app's directory), then this checkout.

    The checkout is named by absolute path so a subprocess runs the code under test, not the
    installed package (a git worktree beside it) — a relative `PYTHONPATH=.` would mean the
    subprocess's own working directory instead.
    """
    return os.pathsep.join([*(str(p) for p in first), str(ROOT)])


def free_port() -> int:
    """A loopback port free right now (the OS's pick), for a server a test starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ujobs(*args: str, cwd: Path = ROOT, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the `ujobs` CLI as a user would, in a subprocess; its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "jobs_core.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": code_path(cwd)},
    )


def ledger_process(app: Path, url: str, *args: str, **env: str) -> subprocess.Popen[str]:
    """`ujobs <args>` on `url` as its own process in `app`, its output piped; the app's code
    writes what it runs to `app/ledger.txt` (`LEDGER`), outside the store."""
    return subprocess.Popen(
        [sys.executable, "-m", "jobs_core.cli", *args],
        cwd=app,
        env={
            **os.environ,
            "UJOBS_DRIVER": url,
            "LEDGER": str(app / "ledger.txt"),
            "PYTHONPATH": code_path(app),
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def ledger_worker(
    app: Path, module: str, url: str, *args: str, **env: str
) -> subprocess.Popen[str]:
    """`ujobs worker <module>` on `url` as its own process in `app` (`ledger_process`)."""
    return ledger_process(app, url, "worker", module, *args, "--quiet", **env)


async def until(check: Callable[[], bool | Awaitable[bool]], within: float = 10.0) -> None:
    """Poll `check` (sync or async) until it answers True; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        answer = check()
        if inspect.isawaitable(answer):
            answer = await answer
        if answer:
            return
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


def declare(fn: Any, **options: Any) -> JobHandle:
    """`fn` declared on a registry of its own, tenant-free, keyed by its input's `n`."""
    options.setdefault("tenant", "none")
    options.setdefault("idempotency_key", lambda i: str(i["n"]))
    handle: JobHandle = job(fn, registry=JobRegistry(), **options)
    return handle


def limited_noop() -> JobHandle:
    """A no-op job declaring a keyed limit and a rate limit, for the idle-cost tests: an idle
    worker takes no lease, so its limits must cost it nothing."""

    async def noop(input: Any, ctx: JobContext) -> None:
        return None

    return job(
        noop,
        tenant="none",
        idempotency_key=lambda i: "k",
        registry=JobRegistry(),
        concurrency={"key": lambda i: "k", "limit": 2},
        rate_limit=RateLimit(10, per=1.0),
    )


def cancel_recorder(
    reasons: list[str], wait: Callable[[], Coroutine[Any, Any, None]] | None = None
) -> Callable[[Any, JobContext], Awaitable[None]]:
    """A body that awaits `wait()` (by default an hour of real time) and, when cancelled, adds
    its signal's reason code (`?` for none) to `reasons` before it lets the cancel through."""

    async def body(input: Any, ctx: JobContext) -> None:
        try:
            await (wait() if wait is not None else asyncio.sleep(3600))
        except asyncio.CancelledError:
            reasons.append(ctx.signal.reason.code if ctx.signal.reason else "?")
            raise

    return body


def new_job(
    job_id: str,
    key: str,
    *,
    run_id: str | None = None,
    queue: str = "q",
    tenant: str | None = None,
    max_attempts: int = 5,
) -> NewJob:
    """A valid record for job `job_id` under live key `key`: name `n`, input `{}`, priority 0,
    created and due at `T0`; its run id is `run-<job_id>` unless given."""
    return NewJob(
        id=job_id,
        run_id=run_id if run_id is not None else f"run-{job_id}",
        name="n",
        queue=queue,
        tenant_id=tenant,
        idempotency_key=key,
        input_json="{}",
        priority=0,
        run_at_ms=T0,
        max_attempts=max_attempts,
        created_at_ms=T0,
    )


def counting(base: type[S], *extra: str, contract: type = JobDriver) -> type[S]:
    """A subclass of store class `base` that records each store call in `self.calls`.

    Every backend method of `contract` (the `_`-prefixed ones; a driver's by default, or an
    `OutboxStore`'s) is one round-trip; `extra` names more methods that reach the store (a wake
    probe).
    """

    def counted(name: str) -> Callable[..., Awaitable[object]]:
        async def method(self: Any, *args: Any, **kwargs: Any) -> object:
            self.calls.append(name)
            result: object = await getattr(base, name)(self, *args, **kwargs)
            return result

        return method

    # Every `_` coroutine of the contract, each optional family's included.
    backend = {
        name
        for name, value in vars(contract).items()
        if name.startswith("_") and not name.startswith("__") and inspect.iscoroutinefunction(value)
    }
    names = sorted(backend | set(extra))
    namespace: dict[str, Any] = {name: counted(name) for name in names}
    cls = type(f"Counting{base.__name__}", (base,), namespace)

    original_init = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        self.calls = []
        original_init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
    return cls


async def advance_quietly(clock: FakeClock, ms: int, *, sleepers: int, step_ms: int = 100) -> None:
    """Advance `clock` by `ms` in steps, each once `sleepers` tasks wait on it.

    Code under test that does real I/O (a database) finishes its call before time moves on,
    as it would on a real clock; without this the fake clock runs ahead of the store.
    """
    left = ms
    while left > 0:
        deadline = time.monotonic() + 10
        while clock.pending_sleepers() < sleepers:
            assert time.monotonic() < deadline, "the code under test never went idle"
            await asyncio.sleep(0.001)
        step = min(step_ms, left)
        await clock.advance(step)
        left -= step


@contextlib.asynccontextmanager
async def fresh_store(kind: str, *, counted: bool = False) -> AsyncIterator[JobDriver]:
    """A fresh, empty store of `kind` — `memory`, `pg` (a migrated schema of its own) or `redis`
    (a key prefix of its own) — dropped on the way out. `counted`: its driver records each
    store call in `calls` (`counting`)."""
    from jobs_memory import MemoryDriver
    from jobs_pg import PgDriver
    from jobs_redis import RedisDriver
    from tests.pg.conftest import PG_URL, drop_schema, fresh_schema, migrate
    from tests.redis.conftest import CONNECT_TIMEOUT_S, REDIS_URL, fresh_prefix, purge

    def kind_of(cls: type[D]) -> type[D]:
        return counting(cls) if counted else cls

    if kind == "memory":
        yield kind_of(MemoryDriver)()
    elif kind == "pg":
        schema = fresh_schema()
        try:
            await asyncio.to_thread(migrate, schema)
            async with kind_of(PgDriver)(PG_URL, schema=schema, pool_size=4) as pg:
                yield pg
        finally:
            await asyncio.to_thread(drop_schema, schema)
    else:
        redis = kind_of(RedisDriver)(
            REDIS_URL, prefix=fresh_prefix(), connect_timeout=CONNECT_TIMEOUT_S
        )
        async with redis:
            try:
                yield redis
            finally:
                await purge(redis)


def reaping() -> Iterator[list[subprocess.Popen[str]]]:
    """A list for a test's started processes (a fixture's body: `yield from reaping()`); each
    one still running when the test ends is killed and reaped, so none outlives it."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.communicate()


def cli_commands(group: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command under `group`, as its words (`("ujobs", "jobs", "list")`)."""
    found = [path]
    if isinstance(group, click.Group):
        for name, command in group.commands.items():
            found += cli_commands(command, (*path, name))
    return found
