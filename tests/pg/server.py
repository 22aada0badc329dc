"""A throwaway Postgres this test owns: initdb'd in a temp dir, on a spare port, stopped at will.

Outage tests stop and start THIS server (never the shared one on 5432). It reuses the helpers of
`scripts/with_services.py` (finding the binaries, a spare port, running as the `postgres` user
when the tests run as root), so both start a server the same way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Literal

from jobs_pg.migrate import upgrade
from scripts.with_services import answers, as_user, find, spare_port


class PgServer:
    """initdb, start, stop (`fast` or `immediate`) and restart a Postgres on one spare port."""

    def __init__(self, *, fsync: bool = False) -> None:
        """`fsync` off (the tests' default) trades durability for speed; a benchmark measuring
        what a commit costs turns it on."""
        # Not pytest's tmp_path: its parents are private to the test user, and the server runs
        # as `postgres` when the tests run as root.
        self.dir = Path(tempfile.mkdtemp(prefix="ujobs-pg-"))
        os.chmod(self.dir, 0o755)
        self.data = self.dir / "data"
        self.port = spare_port()
        self._created = False
        self._fsync = fsync

    @property
    def url(self) -> str:
        """The SQLAlchemy-style URL of the server's `test` database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/test"

    def _bin(self, name: str) -> str:
        found = find(name)
        if found is None:
            raise RuntimeError(f"no {name} on this machine: install PostgreSQL 15+")
        return found

    def _run(self, *cmd: str) -> None:
        subprocess.run(
            as_user(list(cmd)),
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            timeout=120,
        )

    def start(self) -> None:
        """Start the server (initdb on first use) and wait until it accepts connections."""
        if not self.data.exists():
            self.data.mkdir()
            if os.geteuid() == 0:
                shutil.chown(self.dir, "postgres")
                shutil.chown(self.data, "postgres")
            self._run(self._bin("initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust")
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir}"
        if not self._fsync:
            opts += " -c fsync=off"
        self._run(
            self._bin("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.data / "log"),
            "-w",
            "start",
        )
        deadline = time.monotonic() + 30
        while not answers(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start on port {self.port}")
            time.sleep(0.05)
        if not self._created:
            self._run(
                self._bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres",
                "test",
            )  # fmt: skip
            self._created = True

    def stop(self, mode: Literal["fast", "immediate"] = "fast") -> None:
        """Stop the server: `fast` ends sessions cleanly, `immediate` is a crash."""
        self._run(self._bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: Literal["fast", "immediate"] = "fast") -> None:
        self.stop(mode)
        self.start()

    def running(self) -> bool:
        return answers(self.port)

    def migrate(self, schema: str) -> None:
        """Install the jobs schema `schema` on this server."""
        upgrade(self.url, schema)

    def close(self) -> None:
        """Stop the server if it runs and remove its directory."""
        if (self.data / "postmaster.pid").exists():
            subprocess.run(
                as_user([self._bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"]),
                check=False,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
            )
        shutil.rmtree(self.dir, ignore_errors=True)
