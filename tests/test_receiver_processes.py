"""`webhook_receiver()` served by real uvicorn processes on real Postgres and real Redis.

- A receiver SIGKILLed after the enqueue landed and before its 200 left: the sender saw its
  connection drop, so it sends the same delivery again (to the restarted server); the retry is
  deduped onto the job the killed process stored, and the store holds exactly one job.
- The store going down under a running receiver: a delivery then is answered 503 (so the sender
  retries, nothing acked that was not stored), and the same delivery once the store is back is
  stored, once. The outage is a throwaway server of the test's own (`tests.outage`).

The kill lands at its place deterministically through the app module below, not the library:
its jobs client (a `Jobs` whose `enqueue` the app wraps, a test-only seam of the app, never of
the receiver) notes the stored job's id in a file and SIGKILLs its own process right after the
first enqueue answered, before the route can send anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobs_core.urls import driver_from_url
from tests.core.support import code_path, free_port, reaping
from tests.outage import throwaway_pg, throwaway_redis
from tests.pg.conftest import fresh_schema
from tests.webhooks.support import SECRET, all_ids, event_body, sign

APP = """
import os, signal
from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette

from jobs_core.facade import Jobs
from jobs_core.factories.webhooks import (
    receiver_starlette,
    standard_webhooks_verifier,
    webhook_receiver,
)
from jobs_core.urls import driver_from_url

#: Test-only: where the first enqueue's job id is written before this process kills itself.
CRASH_MARK = os.environ.get("CRASH_MARK")


class AppJobs(Jobs):
    async def enqueue(self, handle, input, **options):
        done = await super().enqueue(handle, input, **options)
        if CRASH_MARK and not Path(CRASH_MARK).exists():
            Path(CRASH_MARK).write_text(done.id)
            os.kill(os.getpid(), signal.SIGKILL)  # stored, and the 200 never leaves
        return done


async def on_event(event, ctx):
    return event.id


orders = webhook_receiver(
    name="acme.orders",
    verify=standard_webhooks_verifier(os.environ["SECRET"]),
    tenant="org_acme",
    handle=on_event,
)


@asynccontextmanager
async def lifespan(app):
    driver = driver_from_url(os.environ["STORE"])
    async with driver:
        app.state.jobs = AppJobs(driver, enqueue_retry_s=0.5)
        yield


app = Starlette(lifespan=lifespan)
app.router.routes.append(
    receiver_starlette.route(orders, "/hooks/acme", client=lambda: app.state.jobs)
)
"""


@contextlib.contextmanager
def throwaway_store(backend: str, app_dir: Path) -> Iterator[tuple[str, Any, Any]]:
    """A throwaway server of `backend` (never the standard ones): its store URL, stop, start."""
    if backend == "pg":
        with throwaway_pg() as server:
            schema = fresh_schema()
            server.migrate(schema)
            yield (
                f"{server.url}?schema={schema}&pool_size=2&connect_timeout=1",
                server.stop,
                server.start,
            )
    else:
        with throwaway_redis(app_dir / "redis") as rserver:
            yield f"{rserver.url}?prefix=receiver", rserver.stop, rserver.start


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "receiver_app.py").write_text(APP)
    return tmp_path


def serve(
    app_dir: Path, store: str, procs: list[subprocess.Popen[str]], **env: str
) -> tuple[subprocess.Popen[str], str]:
    """A uvicorn serving the app on `store`, answering; its process and base URL."""
    port = free_port()
    log = app_dir / f"uvicorn-{port}.log"
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "receiver_app:app", "--port", str(port),
             "--host", "127.0.0.1", "--log-level", "warning"],
            cwd=app_dir,
            env={**os.environ, "PYTHONPATH": code_path(app_dir), "STORE": store, "SECRET": SECRET,
                 **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
    procs.append(proc)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            up = httpx.get(base + "/hooks/acme", timeout=1)
            assert up.json()["code"] == "X_WEBHOOK_REQUEST_INVALID"  # a 405: the app answers
            return proc, base
        except httpx.TransportError:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "uvicorn did not answer"
            time.sleep(0.1)


def stored(store: str) -> list[str]:
    async def read() -> list[str]:
        driver: Any = driver_from_url(store)
        async with driver:
            return await all_ids(driver)

    return asyncio.run(read())


def test_a_receiver_killed_between_the_enqueue_and_its_200_dedupes_the_retry(
    store_url: str, app_dir: Path, procs: list[subprocess.Popen[str]]
) -> None:
    mark = app_dir / "crash-mark"
    body = event_body()
    headers = sign(body, "msg_kill_1")
    proc, base = serve(app_dir, store_url, procs, CRASH_MARK=str(mark))
    with pytest.raises(httpx.TransportError):  # the connection dies with the process
        httpx.post(base + "/hooks/acme", content=body, headers=headers, timeout=10)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    stored_id = mark.read_text()
    assert stored(store_url) == [stored_id]  # enqueued, though never acked

    _, base = serve(app_dir, store_url, procs, CRASH_MARK=str(mark))
    retry = httpx.post(base + "/hooks/acme", content=body, headers=headers, timeout=10)
    assert retry.status_code == 200, retry.text
    assert retry.json() == {"job_id": stored_id, "deduped": True}
    assert stored(store_url) == [stored_id]


@pytest.mark.parametrize("backend", ["pg", "redis"])
def test_a_store_down_answers_503_and_the_same_delivery_after_is_stored_once(
    backend: str, app_dir: Path, procs: list[subprocess.Popen[str]]
) -> None:
    body = event_body()
    headers = sign(body, "msg_outage_1")
    with throwaway_store(backend, app_dir) as (store, stop, start):
        _, base = serve(app_dir, store, procs)
        stop()
        down = httpx.post(base + "/hooks/acme", content=body, headers=headers, timeout=30)
        assert down.status_code == 503, down.text
        assert json.loads(down.text)["code"] == "X_DRIVER_UNAVAILABLE"
        start()
        deadline = time.monotonic() + 20
        while True:  # the pool reconnects on its own: the sender's retries reach it
            back = httpx.post(base + "/hooks/acme", content=body, headers=headers, timeout=30)
            if back.status_code != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert back.status_code == 200 and back.json()["deduped"] is False, back.text
        again = httpx.post(base + "/hooks/acme", content=body, headers=headers, timeout=30)
        assert again.json() == {"job_id": back.json()["job_id"], "deduped": True}
        assert stored(store) == [back.json()["job_id"]]
