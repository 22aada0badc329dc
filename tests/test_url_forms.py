"""Every driver URL form the README, docs/pg.md and docs/redis.md list works, from code
(`driver_from_url`) and from the CLI (`ujobs … --driver URL`), on real servers and the newest
releases of every dependency (redis-py 8 refuses `unix:/path`, the form a parse-and-rebuild of
`unix:///path` gave).

Forms: Postgres by `postgresql+psycopg`, `postgresql` and `postgres`, with a password
percent-encoded or holding an unencoded `@`, `/` and `:`, with every driver option
(`schema`, `pool_size`, `wake`, `prepare`, `listen_url`), a libpq parameter, and libpq's empty
host with `?host=` (where a socket directory goes). Redis by `redis://` with and without a db,
a password in the userinfo (encoded, or raw with `@` and `/`) or in `?password=`, `rediss://`
(TLS), `unix://` sockets with and without `?db=`, `?prefix=` and a password, and
`redis+cluster://`. The Redis servers with a password, TLS or a socket are throwaway ones this
module starts (`--port 0 --unixsocket` for the plain socket), never the shared one.

From code each form stores a job and reads it back; from the CLI `ujobs enqueue` stores another
and `ujobs jobs list --json` lists both (the same store, prefix and schema), both run in this
process (click's runner: the URL is read by the CLI's code either way, and an interpreter's
imports cost each run about a second); on a Unix socket a `ujobs worker` process runs them.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from click.testing import Result

from jobs_core.driver import JobDriver
from jobs_core.states import JobState
from jobs_core.urlparams import add_params, split_params
from jobs_core.urls import driver_from_url, mask_url
from tests.core.support import code_path, new_job, until
from tests.pg.conftest import PG_URL, drop_schema, fresh_schema
from tests.redis.conftest import (
    REDIS_URL,
    RedisServer,
    cluster_url,  # noqa: F401  (the session's one-node cluster, a fixture)
    fresh_prefix,
    spare_port,
)
from tests.redis.conftest import (
    purge as purge_prefix,
)
from tests.test_cli_operator import ujobs_here

#: Every character a URL's userinfo must escape, so a raw one tests where the password ends.
PASSWORD = "p@ss/w:rd"
ENCODED = quote(PASSWORD, safe="")

#: The app both kinds of run import (`ping`).
APP = "tests.urlapp"


@dataclass(frozen=True)
class Servers:
    """The throwaway Redis servers: a plain one on a socket only, and one that wants a password
    on a TCP port, a TLS port and a socket."""

    plain_sock: str
    guarded_port: int
    tls_port: int
    guarded_sock: str
    ca: str


def _redis_ping(*args: str) -> bool:
    done = subprocess.run(
        ["redis-cli", *args, "ping"], capture_output=True, text=True, timeout=10, check=False
    )
    return done.stdout.strip() == "PONG"


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (its own CA), and its key."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            shutil.which("openssl") or "openssl",
            *("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    # A short directory of our own: a socket path must stay under ~100 bytes.
    directory = Path(tempfile.mkdtemp(prefix="ujobs-url-"))
    plain_sock = directory / "plain.sock"
    guarded_sock = directory / "guarded.sock"
    cert, key = _certificate(directory)
    plain = subprocess.Popen(
        [
            shutil.which("redis-server") or "redis-server",
            *("--port", "0", "--unixsocket", str(plain_sock), "--unixsocketperm", "700"),
            *("--dir", str(directory), "--save", "", "--appendonly", "no"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tls_port = spare_port()
    guarded = RedisServer(
        directory / "guarded",
        *("--requirepass", PASSWORD, "--unixsocket", str(guarded_sock), "--unixsocketperm", "700"),
        *("--tls-port", str(tls_port), "--tls-cert-file", str(cert), "--tls-key-file", str(key)),
        *("--tls-ca-cert-file", str(cert), "--tls-auth-clients", "no"),
    )
    try:
        guarded.start()
        deadline = time.monotonic() + 10
        while not _redis_ping("-s", str(plain_sock)):
            assert time.monotonic() < deadline and plain.poll() is None, "no socket server"
            time.sleep(0.05)
        yield Servers(str(plain_sock), guarded.port, tls_port, str(guarded_sock), str(cert))
    finally:
        guarded.stop()
        plain.terminate()
        plain.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)


@dataclass
class Form:
    label: str
    url: str
    #: The Postgres schema it names (dropped after), else None.
    schema: str | None = None


def pg_forms() -> list[Form]:
    base = urlsplit(PG_URL)
    user, host, port = base.username or "postgres", base.hostname, base.port or 5432
    db = base.path.lstrip("/")
    at = f"{host}:{port}/{db}"
    listen = quote(f"postgresql://{user}@{at}", safe="")
    forms = [
        ("pg-encoded-password", f"postgresql+psycopg://{user}:{ENCODED}@{at}?schema="),
        ("pg-raw-password", f"postgresql://{user}:{PASSWORD}@{at}?schema="),
        ("pg-options", f"postgres://{user}@{at}?pool_size=2&wake=0&prepare=0&schema="),
        ("pg-listen-url", f"postgresql+psycopg://{user}@{at}?listen_url={listen}&schema="),
        ("pg-host-in-query", f"postgresql:///{db}?host={host}&port={port}&user={user}&schema="),
        ("pg-libpq-parameter", f"postgresql://{user}@{at}?application_name=ujobs%20t&schema="),
    ]
    return [Form(label, url + (s := fresh_schema()), s) for label, url in forms]


def redis_forms(srv: Servers, cluster: str) -> list[Form]:
    shared = urlsplit(REDIS_URL)
    hp = f"{shared.hostname}:{shared.port or 6379}"
    db = shared.path.lstrip("/") or "0"
    g = f"127.0.0.1:{srv.guarded_port}"
    tls = f"127.0.0.1:{srv.tls_port}/0?ssl_ca_certs={quote(srv.ca)}"
    forms = [
        ("redis", f"redis://{hp}/{db}?prefix="),
        ("redis-no-db", f"redis://{hp}?prefix="),
        ("redis-encoded-password", f"redis://:{ENCODED}@{g}/0?prefix="),
        ("redis-raw-password", f"redis://default:{PASSWORD}@{g}/0?prefix="),
        ("redis-password-param", f"redis://{g}/0?password={ENCODED}&prefix="),
        ("rediss", f"rediss://:{ENCODED}@{tls}&prefix="),
        ("unix-db-prefix", f"unix://{srv.plain_sock}?db=0&prefix="),
        ("unix-password", f"unix://:{ENCODED}@{srv.guarded_sock}?db=0&prefix="),
        ("unix-password-param", f"unix://{srv.guarded_sock}?db=0&password={ENCODED}&prefix="),
        ("redis-cluster", f"{cluster}?prefix="),
    ]
    # The bare socket form, on the plain server of our own: its keys have the default prefix.
    return [Form("unix", f"unix://{srv.plain_sock}")] + [
        Form(label, url + fresh_prefix()) for label, url in forms
    ]


LABELS = [
    "pg-encoded-password",
    "pg-raw-password",
    "pg-options",
    "pg-listen-url",
    "pg-host-in-query",
    "pg-libpq-parameter",
    "redis",
    "redis-no-db",
    "redis-encoded-password",
    "redis-raw-password",
    "redis-password-param",
    "rediss",
    "unix",
    "unix-db-prefix",
    "unix-password",
    "unix-password-param",
    "redis-cluster",
    "memory",
]


@pytest.fixture
def form(request: pytest.FixtureRequest, servers: Servers, cluster_url: str) -> Iterator[Form]:  # noqa: F811
    if request.param == "memory":
        yield Form("memory", "memory")
        return
    chosen = {f.label: f for f in pg_forms() + redis_forms(servers, cluster_url)}[request.param]
    try:
        yield chosen
    finally:
        if chosen.schema is not None:
            drop_schema(chosen.schema)
        else:

            async def purge() -> None:
                driver: Any = driver_from_url(chosen.url)
                async with driver:
                    await purge_prefix(driver)

            asyncio.run(purge())


def ujobs(*args: str, url: str) -> Result:
    """`ujobs ARGS --driver URL` in this process, UJOBS_DRIVER unset."""
    return ujobs_here(*args, "--driver", url, url=url, env_driver=False)


@pytest.mark.parametrize("form", LABELS, indirect=True)
def test_every_documented_url_form_works_from_code_and_from_the_cli(form: Form) -> None:
    async def from_code() -> str:
        driver: JobDriver = driver_from_url(form.url)
        async with driver:
            await driver.migrate()
            stored = await driver.job_enqueue(new_job("from-code", "k-code"))
            rows = await driver.job_get_many([stored.id])
            assert rows[stored.id].state is JobState.READY
            return driver.describe()

    described = asyncio.run(from_code())
    assert PASSWORD not in described and ENCODED not in described, described

    enqueued = ujobs("enqueue", APP, "ping", '{"n": 7}', url=form.url)
    assert enqueued.exit_code == 0, (mask_url(form.url), enqueued.stdout, enqueued.stderr)
    job_id = json.loads(enqueued.stdout)["id"]
    if form.url == "memory":
        return  # each command opens a memory store of its own: nothing more to read back
    listed = ujobs("jobs", "list", "--json", url=form.url)
    assert listed.exit_code == 0, (listed.stdout, listed.stderr)
    assert {j["id"] for j in json.loads(listed.stdout)["jobs"]} == {"from-code", job_id}


def test_a_worker_runs_on_a_unix_socket_url(servers: Servers, tmp_path: Path) -> None:
    """`ujobs worker --driver unix:///…` starts, and runs what was enqueued on that socket."""
    url = f"unix://{servers.plain_sock}?db=0&prefix={fresh_prefix()}"
    enqueued = ujobs("enqueue", APP, "ping", '{"n": 1}', url=url)
    assert enqueued.exit_code == 0, (enqueued.stdout, enqueued.stderr)
    job_id = json.loads(enqueued.stdout)["id"]
    env = {**os.environ, "PYTHONPATH": code_path(), "UJOBS_DRIVER": url}
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobs_core.cli", "worker", APP, "--quiet"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        async def completed() -> bool:
            driver = driver_from_url(url)
            async with driver:
                rows = await driver.job_get_many([job_id])
            return rows[job_id].state is JobState.COMPLETED

        asyncio.run(until(completed, within=60))
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    assert "ujobs worker" in out and "X_DRIVER_URL_INVALID" not in out, out


@pytest.mark.parametrize(
    ("url", "plain", "taken"),
    [
        ("unix:///run/r.sock?db=0&prefix=a", "unix:///run/r.sock?db=0", {"prefix": "a"}),
        ("unix:///run/r.sock?prefix=a", "unix:///run/r.sock", {"prefix": "a"}),
        (
            "postgresql:///db?host=/run/pg&schema=s",
            "postgresql:///db?host=/run/pg",
            {"schema": "s"},
        ),
        ("redis://:a?b@h/0?prefix=p#f", "redis://:a?b@h/0#f", {"prefix": "p"}),
        ("redis://h/0?x=%2F+y&prefix=a%20b", "redis://h/0?x=%2F+y", {"prefix": "a b"}),
        ("redis://h/0", "redis://h/0", {}),
    ],
)
def test_a_lifted_parameter_leaves_the_rest_of_the_url_as_written(
    url: str, plain: str, taken: dict[str, str]
) -> None:
    assert split_params(url, ("prefix", "schema")) == (plain, taken)
    assert split_params(add_params(plain, taken), ("prefix", "schema")) == (plain, taken)
