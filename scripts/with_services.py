"""Run a command with Postgres and Redis reachable, starting throwaway servers when none is.

Uses the servers on 127.0.0.1:5432 and :6379 when they answer. Otherwise it starts its own
from the machine's binaries (initdb/pg_ctl, redis-server) in a temp dir on spare ports, points
JOBS_TEST_PG_URL / JOBS_TEST_REDIS_URL at them, and stops them after. With no binaries either,
it fails with a message naming what to install: tests never skip a backend.
JOBS_TEST_THROWAWAY=1 starts the throwaway servers even when the standard ports answer.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

PG_DEFAULT = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REDIS_DEFAULT = "redis://127.0.0.1:6379/0"


#: Set to 1 to start throwaway servers even when the standard ports answer (tries that path).
FORCE_THROWAWAY = os.environ.get("JOBS_TEST_THROWAWAY") == "1"


def answers(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
        return True
    return False


def shared(port: int) -> bool:
    """True when the machine's own server on `port` is to be used."""
    return not FORCE_THROWAWAY and answers(port)


def spare_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def find(binary: str) -> str | None:
    found = shutil.which(binary)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{binary}"), reverse=True)
    return candidates[0] if candidates else None


def wait_for(port: int, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not answers(port):
        if time.monotonic() > deadline:
            sys.exit(f"{what} did not start on port {port}")
        time.sleep(0.2)


def as_user(cmd: list[str]) -> list[str]:
    # initdb refuses to run as root; the postgres system user owns the throwaway cluster.
    if os.geteuid() != 0:
        return cmd
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        sys.exit("running as root: create a 'postgres' user or run the tests as another user")
    return ["runuser", "-u", "postgres", "--", *cmd]


@contextlib.contextmanager
def postgres(tmp: str) -> Iterator[str]:
    if shared(5432):
        yield os.environ.get("JOBS_TEST_PG_URL", PG_DEFAULT)
        return
    initdb, pg_ctl, createdb = find("initdb"), find("pg_ctl"), find("createdb")
    if not initdb or not pg_ctl or not createdb:
        sys.exit(
            "no Postgres on 127.0.0.1:5432 and no initdb/pg_ctl/createdb to start one: install"
            " PostgreSQL 15+ (Debian: apt-get install postgresql) or start a server there"
        )
    data = os.path.join(tmp, "pg")
    os.makedirs(data)
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres")
        shutil.chown(data, "postgres")
    port = spare_port()
    subprocess.run(
        as_user([initdb, "-D", data, "-U", "postgres", "-A", "trust"]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    opts = f"-p {port} -c listen_addresses=127.0.0.1 -k {tmp} -c fsync=off"
    subprocess.run(
        as_user([pg_ctl, "-D", data, "-o", opts, "-l", f"{data}/log", "start"]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(port, "postgres")
        time.sleep(0.5)
        subprocess.run(
            as_user(
                [
                    createdb,
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-U",
                    "postgres",
                    "test",
                ]
            ),
            check=True,
        )
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/test"
    finally:
        subprocess.run(
            as_user([pg_ctl, "-D", data, "-m", "immediate", "stop"]),
            stdout=subprocess.DEVNULL,
            check=False,
        )


@contextlib.contextmanager
def redis(tmp: str) -> Iterator[str]:
    if shared(6379):
        yield os.environ.get("JOBS_TEST_REDIS_URL", REDIS_DEFAULT)
        return
    server = find("redis-server")
    if not server:
        sys.exit(
            "no Redis on 127.0.0.1:6379 and no redis-server to start one: install Redis 7"
            " (Debian: apt-get install redis-server) or start a server there"
        )
    port = spare_port()
    proc = subprocess.Popen(
        [
            server,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            tmp,
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for(port, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> int:
    command = sys.argv[1:]
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        sys.exit("usage: with_services.py -- COMMAND...")
    with tempfile.TemporaryDirectory(prefix="ujobs-services-") as tmp:
        os.chmod(tmp, 0o755)
        with postgres(tmp) as pg_url, redis(tmp) as redis_url:
            env = dict(os.environ, JOBS_TEST_PG_URL=pg_url, JOBS_TEST_REDIS_URL=redis_url)
            return subprocess.call(command, env=env)


if __name__ == "__main__":
    sys.exit(main())
