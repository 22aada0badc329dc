"""Throwaway stores the chaos run owns and restarts: Postgres (initdb/pg_ctl, through the helpers
of `scripts/with_services.py`) and redis-server, each on a spare loopback port in a temp dir,
never the shared 5432/6379."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Final, Protocol

ROOT: Final = Path(__file__).resolve().parents[2]
#: The Postgres schema / Redis key prefix the run writes to.
NAMESPACE: Final = "chaos"
#: How long a (re)start may take before the run gives up on the store.
START_SECONDS: Final = 60


def _with_services() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "with_services", ROOT / "scripts" / "with_services.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ws = _with_services()


class StoreError(Exception):
    """The throwaway store could not be set up or started; the message says why."""


class Store(Protocol):
    """A store the run may stop and start; `url` is what the workers get as `--driver`."""

    url: str
    port: int
    #: Whether an acknowledged write survives a restart (losses then count as failures).
    durable: bool
    #: What each outage does, for the report.
    graceful_stop_text: str
    crash_text: str
    restart_text: str

    def start(self) -> None: ...
    def stop_graceful(self) -> None: ...
    def crash(self) -> None: ...
    def restart(self) -> None: ...
    def up(self) -> bool: ...
    def close(self) -> None: ...
    def list_rows(self) -> dict[str, str]:
        """Every job id in the store with its state, read directly (not through the driver)."""
        ...


def _wait(check: Callable[[], bool], what: str, seconds: float = START_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise StoreError(f"{what} did not answer within {seconds:.0f} s")


class PgStore:
    """A Postgres cluster of its own (fsync on: a crash must keep what was committed)."""

    durable = True
    graceful_stop_text = "pg_ctl stop -m fast"
    crash_text = "pg_ctl stop -m immediate"
    restart_text = "pg_ctl restart -m fast"

    def __init__(self, tmp: Path, name: str = "pg") -> None:
        """A cluster in `tmp/name`: the jobs' store, or the app's database holding the outbox."""
        self._tmp = tmp
        initdb, self._pg_ctl, createdb = ws.find("initdb"), ws.find("pg_ctl"), ws.find("createdb")
        if not initdb or not self._pg_ctl or not createdb:
            raise StoreError("no initdb/pg_ctl/createdb: install PostgreSQL 15+")
        self._data = tmp / name
        self._data.mkdir()
        if os.geteuid() == 0:
            os.chmod(tmp, 0o755)
            shutil.chown(tmp, "postgres")
            shutil.chown(self._data, "postgres")
        self.port = int(ws.spare_port())
        self._opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {tmp}"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/test?schema={NAMESPACE}"
        self._run(ws.as_user([initdb, "-D", str(self._data), "-U", "postgres", "-A", "trust"]))
        self.start()
        self._run(
            ws.as_user(
                [createdb, "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "test"]
            )
        )
        from jobs_pg import migrate

        migrate.upgrade(f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/test", NAMESPACE)

    def _run(self, cmd: list[str], check: bool = True) -> None:
        done = subprocess.run(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=START_SECONDS,
            check=False,
            start_new_session=True,
        )
        if check and done.returncode != 0:
            raise StoreError(f"{' '.join(cmd[-3:])} failed: {done.stderr.strip()[-400:]}")

    def _ctl(self, *args: str, check: bool = True) -> None:
        assert self._pg_ctl is not None
        self._run(ws.as_user([self._pg_ctl, "-D", str(self._data), "-w", "-t", "60", *args]), check)

    def start(self) -> None:
        self._ctl("-o", self._opts, "-l", str(self._data / "log"), "start")
        _wait(self.up, "postgres")

    def stop_graceful(self) -> None:
        self._ctl("-m", "fast", "stop")

    def crash(self) -> None:
        self._ctl("-m", "immediate", "stop")

    def restart(self) -> None:
        self._ctl("-m", "fast", "-o", self._opts, "-l", str(self._data / "log"), "restart")
        _wait(self.up, "postgres")

    def up(self) -> bool:
        import psycopg

        try:
            # The maintenance database: `test` does not exist before the first start.
            url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def _libpq(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/test"

    def list_rows(self) -> dict[str, str]:
        return {str(i): str(s) for i, s in self.query(f'SELECT id, state FROM "{NAMESPACE}".jobs')}

    def query(self, sql: str) -> list[tuple[object, ...]]:
        """The rows of one statement on the run's database (the app's side of the outbox)."""
        import psycopg

        with psycopg.connect(self._libpq(), connect_timeout=5, autocommit=True) as conn:
            return [tuple(r) for r in conn.execute(sql).fetchall()]

    def close(self) -> None:
        self._ctl("-m", "immediate", "stop", check=False)


class RedisStore:
    """A redis-server of its own: AOF with `appendfsync always`, or no persistence at all."""

    graceful_stop_text = "SHUTDOWN NOSAVE"
    crash_text = "kill -9 redis-server"
    restart_text = "SHUTDOWN NOSAVE, then start at once"

    def __init__(self, tmp: Path, *, aof: bool) -> None:
        server = ws.find("redis-server")
        if not server:
            raise StoreError("no redis-server: install Redis 7")
        self._server = server
        self.durable = aof
        self._dir = tmp / "redis"
        self._dir.mkdir()
        self.port = int(ws.spare_port())
        self.url = f"redis://127.0.0.1:{self.port}/0?prefix={NAMESPACE}"
        self._persist = (
            ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
            if aof
            else ["--save", "", "--appendonly", "no"]
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        log = (self._dir / "redis.log").open("ab")
        self._proc = subprocess.Popen(
            [
                self._server,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self._dir),
                *self._persist,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        _wait(self.up, "redis-server")

    def up(self) -> bool:
        import redis

        client = redis.Redis(port=self.port, socket_timeout=2, socket_connect_timeout=2)
        try:
            return bool(client.ping())
        except redis.RedisError:  # refused, or still loading the AOF
            return False
        finally:
            client.close()

    def _reap(self) -> None:
        if self._proc is not None:
            try:
                self._proc.wait(timeout=START_SECONDS)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def stop_graceful(self) -> None:
        # A bare socket: a client library would retry the command the server closes on.
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock,
        ):
            sock.sendall(b"SHUTDOWN NOSAVE\r\n")
            sock.recv(64)
        self._reap()

    def crash(self) -> None:
        if self._proc is not None:
            self._proc.kill()
        self._reap()

    def restart(self) -> None:
        self.stop_graceful()
        self.start()

    def list_rows(self) -> dict[str, str]:
        import redis

        client = redis.Redis(port=self.port, socket_timeout=10, decode_responses=True)
        try:
            raw = client.hgetall("{" + NAMESPACE + "}:job:state")
        finally:
            client.close()
        # The row's first NUL-joined field is its state (jobs_redis/driver.py, key layout).
        return {str(i): str(v).split("\x00", 1)[0] for i, v in dict(raw).items()}

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._reap()
