"""One driver, several event loops (issue 7, item 10), on Redis: `enqueue_sync` (the portal's
loop) beside `async def` callers on the main loop, and several `asyncio.run()` in a row. Every
call answers right, and each job is written once (before, a sync call wrote its job and then
failed with "Future attached to a different loop")."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from jobs_redis import RedisDriver
from tests.loops_cases import (
    Backend,
    consecutive_asyncio_runs_share_one_driver,
    sync_and_async_callers_alternate,
)
from tests.redis.conftest import CONNECT_TIMEOUT_S, REDIS_URL, fresh_prefix, purge


async def keys_stored(driver: RedisDriver) -> list[str]:
    """Every idempotency key stored, one entry per row (so a second row shows twice)."""
    rows = await driver.client.hvals(driver.keys.state)
    return sorted(str(r).split("\x00")[12] for r in rows)


async def clients_named(name: str) -> int:
    """Connections the server holds for clients of this test (closing must leave none)."""
    from redis.asyncio import Redis

    admin = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        for _ in range(100):
            listed = await admin.client_list()
            held = sum(1 for c in listed if c.get("name") == name)
            if held == 0:
                return 0
            await asyncio.sleep(0.05)  # the server notices a closed socket a moment later
        return held
    finally:
        await admin.aclose()


def named(prefix: str) -> str:
    return f"{REDIS_URL}?client_name={prefix}"


def backend() -> Backend:
    prefix = fresh_prefix()
    driver = RedisDriver(named(prefix), prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S)

    async def finish() -> list[str]:
        stored = await keys_stored(driver)
        await purge(driver)
        await driver.close()
        return stored

    return Backend(driver, finish, lambda: asyncio.run(clients_named(prefix)))


def test_sync_and_async_callers_alternate_on_one_driver() -> None:
    sync_and_async_callers_alternate(backend())


def test_consecutive_asyncio_runs_share_one_driver() -> None:
    consecutive_asyncio_runs_share_one_driver(backend())


def test_a_script_that_enqueues_sync_exits_without_asyncio_noise(tmp_path: Path) -> None:
    """A plain script (`configure(url)`, `enqueue_sync`, exit: no `close_sync`) ends quietly.

    The portal's loop lives on a daemon thread that the interpreter abandons at exit, its
    per-loop connection guard still waiting to be cancelled: asyncio used to print "Task was
    destroyed but it is pending!" with the guard's repr at the end of every such script."""
    prefix = fresh_prefix()
    # The jobs in a module of the app's own, as the guides lay an app out (declared in the
    # script itself, the interpreter happened to tear things down in an order that hid it).
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(
        "from jobs_core import job\n"
        "@job(tenant='none', idempotency_key=lambda i: str(i['n']))\n"
        "async def mail(inp, ctx):\n"
        "    return None\n"
    )
    script = tmp_path / "enqueue_once.py"
    script.write_text(
        "import sys\n"
        "import jobs_core\n"
        "from myapp.jobs import mail\n"
        "jobs_core.configure(sys.argv[1])\n"
        "print(mail.enqueue_sync({'n': 1}).deduped)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, str(script), f"{REDIS_URL}?prefix={prefix}"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
    finally:

        async def clean() -> None:
            driver = RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S)
            await purge(driver)
            await driver.close()

        asyncio.run(clean())
    assert done.returncode == 0, done.stderr
    assert done.stdout == "False\n"
    assert done.stderr == ""
