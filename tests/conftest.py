"""Shared test setup: the Hypothesis profiles `jobs_core.testing` ships (`HYPOTHESIS_PROFILE`),
and `store_url`, a fresh store on each real backend for tests that run processes against it.

Our test command runs `ci` (the Makefile and scripts set it); `nightly` is the long run. The
profiles live in the package, so a third-party driver's tests get the very same ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from _pytest.faulthandler import fault_handler_stderr_fd_key

from jobs_core.testing.profiles import register_profiles

register_profiles()


@contextlib.contextmanager
def fresh_store_url(kind: str) -> Iterator[str]:
    """A fresh store's URL: `memory://`, a migrated Postgres schema, or a Redis key prefix;
    dropped (purged) after."""
    from jobs_core.urls import driver_from_url
    from tests.pg.conftest import PG_URL, drop_schema, fresh_schema, migrate
    from tests.redis.conftest import REDIS_URL, fresh_prefix, purge

    if kind == "memory":
        yield "memory://"
        return
    if kind == "pg":
        schema = fresh_schema()
        migrate(schema)
        try:
            yield f"{PG_URL}?schema={schema}"
        finally:
            drop_schema(schema)
        return
    url = f"{REDIS_URL}?prefix={fresh_prefix()}"
    try:
        yield url
    finally:

        async def drop() -> None:
            driver: Any = driver_from_url(url)
            async with driver:
                await purge(driver)

        asyncio.run(drop())


@pytest.fixture(params=["pg", "redis"])
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh store's URL: a migrated Postgres schema, or a Redis key prefix; dropped after."""
    with fresh_store_url(request.param) as url:
        yield url


@pytest.fixture(autouse=True)
def _cli_logging_undone() -> Iterator[None]:
    """What running `ujobs` in this process (click's runner) leaves behind is undone after each
    test: `main` puts its own handler on the root logger (on the runner's stream, closed once
    it returns) and `demo` quiets the `jobs` logger to CRITICAL, which would hide every later
    test's records from its `caplog`."""
    root, jobs = logging.getLogger(), logging.getLogger("jobs")
    before, root_level, jobs_level = root.handlers[:], root.level, jobs.level
    yield
    for handler in root.handlers[:]:
        # Only the CLI's own (a plain StreamHandler): pytest's capture handlers come and go
        # with each phase of a test, by themselves.
        if handler not in before and type(handler) is logging.StreamHandler:
            root.removeHandler(handler)
    root.setLevel(root_level)
    jobs.setLevel(jobs_level)


#: Seconds after which a test still going names itself and its asyncio tasks on stderr, just
#: before pytest's `faulthandler_timeout` (pyproject) dumps every thread: that dump names no
#: test and no task, and twice a suite run held a test past it.
_SLOW_TEST_S = 230.0


@pytest.fixture(autouse=True)
def _slow_test_named(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test still running after `_SLOW_TEST_S` prints its id and each live task's stack."""
    node = request.node.nodeid
    # The stream faulthandler's dump goes to (pytest keeps it past its capture), else stderr.
    fd = request.config.stash.get(fault_handler_stderr_fd_key, None)

    def name_it() -> None:
        out = open(fd, "w", closefd=False) if fd is not None else sys.__stderr__  # noqa: SIM115
        if out is None:
            return
        print(f"\nslow test: {node} still running after {_SLOW_TEST_S:.0f} s", file=out)
        # Read from another thread, best effort: a diagnosis, not a result.
        for task in list(getattr(asyncio.tasks, "_all_tasks", ())):
            if not task.done():
                print(f"  task {task.get_name()}: {task.get_coro()!r}", file=out)
                task.print_stack(limit=8, file=out)
        out.flush()

    timer = threading.Timer(_SLOW_TEST_S, name_it)
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()
