"""Redis test setup: a fresh key prefix per driver, and three backends to run every test on.

- `real`: the shared server at `JOBS_TEST_REDIS_URL` (default `redis://127.0.0.1:6379/0`); each
  driver gets its own prefix and its keys are deleted (SCAN + UNLINK) when it closes.
- `fake`: fakeredis with Lua through lupa, one fresh in-process server per driver.
- `cluster`: a one-node Redis Cluster this session starts on a spare loopback port, in its own
  temp dir, reached through `redis+cluster://`.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest

from jobs_core.driver import JobDriver
from jobs_core.testing.profiles import selected_profile
from jobs_redis import RedisDriver
from jobs_redis.scratch import unlink_prefix
from tests.redis.proxy import RedisProxy

REDIS_URL = os.environ.get("JOBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
BACKENDS = ("real", "fake", "cluster")

Factory = Callable[..., AbstractAsyncContextManager[RedisDriver]]

#: The connect timeout of the tests' drivers on the shared server (the driver's default is 1 s).
#: The loopback server never drops a connect, but on a loaded 2-core runner (CPU pressure near
#: 70%, steal) a test process was once starved for over a second between starting a connect and
#: seeing it done, and a parity property failed on that, not on a difference. 5 s is what the
#: Postgres driver allows by default; tests of a timeout set their own.
CONNECT_TIMEOUT_S = 5.0


def fresh_prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


async def purge(driver: RedisDriver) -> None:
    """Delete every key of the driver's prefix (`unlink_prefix`: SCAN + UNLINK, never FLUSHDB:
    others share the server)."""
    await unlink_prefix(driver)


@contextlib.asynccontextmanager
async def several_drivers(n: int) -> AsyncIterator[list[RedisDriver]]:
    """`n` open drivers on one fresh prefix, each with connections of its own (racing writers
    from several processes, as far as the server can tell); the prefix purged after."""
    prefix = fresh_prefix()
    async with contextlib.AsyncExitStack() as stack:
        drivers = [
            RedisDriver(REDIS_URL, prefix=prefix, connect_timeout=CONNECT_TIMEOUT_S)
            for _ in range(n)
        ]
        for d in drivers:
            await stack.enter_async_context(d)
        try:
            yield drivers
        finally:
            await purge(drivers[0])


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def spare_port() -> int:
    """A free loopback port whose cluster-bus twin (port + 10000) is free too."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, 40_000)
        if _free(port) and _free(port + 10_000):
            return port
    raise RuntimeError("no spare loopback port")


class RedisServer:
    """A throwaway redis-server this test session owns, on a spare loopback port."""

    def __init__(self, directory: Path, *extra: str) -> None:
        self.dir = directory
        self.port = spare_port()
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                shutil.which("redis-server") or "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.dir),
                "--save",
                "",
                "--appendonly",
                "no",
                *self.extra,
            ],
            stdout=(self.dir / "redis.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        self.wait_ready()

    def cli(self, *args: str) -> str:
        return subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            answer = self.cli("ping").strip()
            if answer == "PONG" or answer.startswith("NOAUTH"):
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


@pytest.fixture(scope="session")
def cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A one-node Redis Cluster owning all 16384 slots, for this session only."""
    server = RedisServer(
        tmp_path_factory.mktemp("redis-cluster"),
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    )
    server.start()
    try:
        server.cli("cluster", "addslotsrange", "0", "16383")
        deadline = time.monotonic() + 20
        while "cluster_state:ok" not in server.cli("cluster", "info"):
            if time.monotonic() > deadline:
                raise RuntimeError("the one-node cluster never reached cluster_state:ok")
            time.sleep(0.1)
        yield f"redis+cluster://127.0.0.1:{server.port}"
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def _real(
    url: str, driver_class: type[RedisDriver] = RedisDriver, **kw: Any
) -> AsyncIterator[RedisDriver]:
    kw.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    driver = driver_class(url, prefix=kw.pop("prefix", None) or fresh_prefix(), **kw)
    try:
        async with driver:
            yield driver
    finally:
        with contextlib.suppress(Exception):
            await purge(driver)
        await driver.close()


@contextlib.asynccontextmanager
async def _fake(**kw: Any) -> AsyncIterator[RedisDriver]:
    import fakeredis

    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer(), decode_responses=True)
    driver = RedisDriver(
        "fakeredis://", prefix=kw.pop("prefix", None) or fresh_prefix(), client=client, **kw
    )
    try:
        async with driver:
            yield driver
    finally:
        await client.aclose()


def factory_for(backend: str, request: pytest.FixtureRequest) -> Factory:
    if backend == "real":
        return lambda **kw: _real(REDIS_URL, **kw)
    if backend == "fake":
        return lambda **kw: _fake(**kw)
    url = request.getfixturevalue("cluster_url")
    return lambda **kw: _real(url, **kw)


@pytest.fixture(params=BACKENDS)
def make_driver(request: pytest.FixtureRequest) -> Factory:
    """Makes a fresh driver on each backend in turn (an async context manager)."""
    return factory_for(request.param, request)


def _waking_backends() -> tuple[str, ...]:
    from redis.asyncio.cluster import RedisCluster

    # redis-py's asyncio cluster client subscribes from 8.0 on; before, a cluster driver declares
    # no wake (the parity suite's `wake` scenario pins that it then answers no channel).
    return BACKENDS if hasattr(RedisCluster, "pubsub") else ("real", "fake")


@pytest.fixture(params=_waking_backends())
def make_waking_driver(request: pytest.FixtureRequest) -> Factory:
    """`make_driver` on each backend whose driver declares a wake channel."""
    return factory_for(request.param, request)


@pytest.fixture
async def driver(make_driver: Factory) -> AsyncIterator[JobDriver]:
    async with make_driver() as d:
        yield d


@pytest.fixture
async def proxy() -> AsyncIterator[RedisProxy]:
    """A TCP proxy to the real server that a test can cut, or cut right after a reply."""
    p = RedisProxy(REDIS_URL)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


#: The family walks run on fakeredis and on the cluster under the quick `ci` profile: the job
#: family and steps and events, whose scripts (the claim, the settles, waits) lean on fakeredis's
#: Lua emulation and touch the most keys of one hash slot. Every family's walk runs on the real
#: server in every run, every family's scenarios on all three (so each script meets the cluster's
#: one-slot rule), and every walk on fakeredis and the cluster too under any other profile
#: (`HYPOTHESIS_PROFILE=nightly`): a fakeredis walk costs about twice a real one, a cluster walk
#: one and a half, over the same scripts; the suite must stay inside CI's 10 minutes.
CI_FAKE_WALKS = frozenset({"jobs", "durable"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `ci`, leave out the other families' fakeredis and cluster walks (CI_FAKE_WALKS)."""
    if selected_profile() != "ci":
        return
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        test, _, ident = item.nodeid.partition("::TestRedisParity::test_state_machine[")
        backend, _, family = ident.rstrip("]").partition("-")
        walk = test.endswith("test_parity.py") and backend in ("fake", "cluster")
        if walk and family not in CI_FAKE_WALKS:
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
