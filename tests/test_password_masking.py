"""No password is ever printed (SPEC §16): every URL form × every driver × every output path.

Forms: a userinfo password, one with `%40`, one with an UNENCODED `@`, `?password=`, `rediss`,
`redis+cluster`, `unix://`, a Postgres `listen_url=` nested URL, and bad URLs. Paths:
`describe()`, the error (and its whole chained traceback) that opening a closed port raises,
the logs at DEBUG (the drivers' libraries included), and the CLI's output at `-vv`: the
`ujobs worker` banner, its retries and its drain, and `ujobs db upgrade`. The passwords are
made of the pieces `PWa`, `PWb`, so a password cut at its `@` is caught too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import traceback
from pathlib import Path
from urllib.parse import quote

import pytest

from jobs_core.errors import JobsError
from jobs_core.urls import driver_from_url, mask_text, mask_url, secrets_of
from tests.core.support import code_path
from tests.redis.conftest import spare_port

PIECES = ("PWa", "PWb", "PWn")
PORT = spare_port()  # nothing listens here: every connect is refused
#: A CLI run still going then hangs: each ends in seconds (a worker drains on SIGTERM), so this
#: bounds a hang, never the speed of a loaded host.
HANG_S = 180.0
#: CLI runs side by side (forks: a few MB each, a fraction of a second of CPU).
AT_ONCE = 8
#: What a worker logs, masked, each time the store it waits for refuses it.
RETRY = "jobs.worker.store_unavailable"


def pg_forms(port: int) -> list[str]:
    nested = quote(f"postgresql://postgres:PWn@127.0.0.1:{port}/test", safe="")
    return [
        f"postgresql+psycopg://postgres:PWa@127.0.0.1:{port}/test",
        f"postgresql://postgres:PWa%40PWb@127.0.0.1:{port}/test",
        f"postgresql://postgres:PWa@PWb@127.0.0.1:{port}/test",
        f"postgresql://postgres@127.0.0.1:{port}/test?password=PWa",
        f"postgres://postgres:PWa@127.0.0.1:{port}/test?listen_url={nested}",
    ]


def redis_forms(port: int) -> list[str]:
    return [
        f"redis://:PWa@127.0.0.1:{port}/0",
        f"redis://default:PWa%40PWb@127.0.0.1:{port}/0",
        f"redis://default:PWa@PWb@127.0.0.1:{port}/0",
        f"redis://127.0.0.1:{port}/0?password=PWa",
        f"rediss://:PWa@127.0.0.1:{port}/0",
        f"redis+cluster://:PWa@127.0.0.1:{port}",
        "unix://:PWa@/nonexistent-ujobs-dir/redis.sock?db=0",
        "unix:///nonexistent-ujobs-dir/redis.sock?db=0&password=PWa",
    ]


FORMS = pg_forms(PORT) + redis_forms(PORT)
#: URLs that are refused before any connect: each refusal must be masked too.
BAD = [
    "nosuch://user:PWa@host/db",
    "nosuch://user:PWa@PWb@host/db",
    f"postgresql://postgres:PWa@127.0.0.1:{PORT}/test?pool_size=many",
    f"postgresql://postgres:PWa@PWb@127.0.0.1:{PORT}/test?wake=maybe",
    "mysql://root:PWa@db/app",
    "redis://:PWa@127.0.0.1:notaport/0",
    f"redis://:PWa@PWb@127.0.0.1:{PORT}/0?socket_timeout=soon",
]


def leaks(text: str) -> list[str]:
    return [p for p in PIECES if p in text]


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:PWa@h:1/0", "redis://:***@h:1/0"),
        ("redis://u:PWa%40PWb@h/0", "redis://u:***@h/0"),
        ("redis://u:PWa@PWb@h:1/0?prefix=x", "redis://u:***@h:1/0?prefix=x"),
        ("redis://h:1/0?password=PWa&prefix=a", "redis://h:1/0?password=***&prefix=a"),
        ("rediss://u:PWa@h", "rediss://u:***@h"),
        ("redis+cluster://u:PWa@h1:1,h2:2", "redis+cluster://u:***@h1:1,h2:2"),
        ("unix://:PWa@/run/redis/s.sock?db=0", "unix://:***@/run/redis/s.sock?db=0"),
        ("postgresql://u:PWa/PWb@h/db", "postgresql://u:***@h/db"),
        ("postgresql://u:PWa?PWb@h/db", "postgresql://u:***@h/db"),
        (
            "postgresql://u@h/db?listen_url=postgresql%3A%2F%2Fu%3APWa%40h2%2Fdb&schema=s",
            "postgresql://u@h/db?listen_url=postgresql://u:***@h2/db&schema=s",
        ),
        ("host=h password='PWa PWb' user=x", "host=h password=*** user=x"),
        ("host=h password=PWa user=x", "host=h password=*** user=x"),
        ("redis://user@h:1/0", "redis://user@h:1/0"),
        ("memory", "memory"),
    ],
)
def test_mask_url_masks_every_form_and_keeps_the_rest(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    # An error text that repeats the URL, or its password raw or decoded, is masked too.
    text = f"failed at {url}: " + " ".join(secrets_of(url))
    assert leaks(mask_text(text, url)) == []
    assert (secrets_of(url) == []) == (masked == url)


def test_the_drivers_mask_with_the_one_function() -> None:
    from jobs_pg import urls as pg_urls
    from jobs_redis import driver as redis_driver

    assert pg_urls.mask is not None and "mask_url" in pg_urls.mask.__code__.co_names
    assert "mask_text" in redis_driver._why.__code__.co_names


# Ids without the port: it is picked at import, so two test processes must still agree on names.
@pytest.mark.parametrize(
    "url", FORMS + BAD, ids=[u.replace(str(PORT), "PORT") for u in FORMS + BAD]
)
async def test_describe_errors_and_debug_logs_never_carry_the_password(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("psycopg", "psycopg.pool", "redis", "sqlalchemy", "alembic"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    seen: list[str] = []
    try:
        driver = driver_from_url(url)
    except JobsError as exc:
        assert url in BAD, f"{url} refused: {exc}"
        seen.append("".join(traceback.format_exception(exc)))
    else:
        assert url not in BAD, url
        seen.append(driver.describe())
        try:
            async with asyncio.timeout(30):
                await driver.open()
                await driver.migrate()
        except JobsError as exc:
            assert exc.code == "X_DRIVER_UNAVAILABLE", exc
            seen.append("".join(traceback.format_exception(exc)))
        else:
            raise AssertionError(f"{mask_url(url)} answered on a closed port")
        finally:
            await driver.close()
    seen.append(caplog.text)
    assert seen[0] and leaks("\n".join(seen)) == [], "\n".join(seen)


def _jobs_module(tmp: Path) -> Path:
    (tmp / "maskjobs.py").write_text(
        "from jobs_core.job import job\n"
        "@job(tenant='none')\n"
        "async def noop(input, ctx):\n"
        "    return None\n",
        encoding="utf-8",
    )
    return tmp


def test_cli_banner_db_upgrade_and_vv_logs_never_carry_the_password(tmp_path: Path) -> None:
    """Every form's `ujobs -vv worker` (its banner, a retry of the store it waits for, then the
    drain SIGTERM starts) and `ujobs -vv db upgrade`, each run a process of its own: their whole
    output holds no password. The runs are forks of one interpreter that imported the CLI once
    (tests/cli_forks.py), side by side: 44 interpreters' imports made this the suite's slowest
    test. A run that has not ended by `HANG_S` hangs; no bound here is on speed."""
    cwd = _jobs_module(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": code_path(cwd)}
    env.pop("UJOBS_DRIVER", None)
    runs: list[tuple[str, str, list[str], dict[str, str]]] = []
    for url in FORMS + BAD:
        for command in (["worker", "maskjobs", "--quiet"], ["db", "upgrade"]):
            runs.append(
                (f"{command[0]} {mask_url(url)}", url, ["-vv", *command, "--driver", url], env)
            )
    for url in (FORMS[0], FORMS[7]):
        # The URL in UJOBS_DRIVER (kept off `ps`) takes the same masked paths.
        for command in (["worker", "maskjobs", "--quiet"], ["db", "upgrade"]):
            runs.append(
                (
                    f"{command[0]} {mask_url(url)}",
                    url,
                    ["-vv", *command],
                    {**env, "UJOBS_DRIVER": url},
                )
            )
    spec = {
        "at_once": AT_ONCE,
        "hang_s": HANG_S,
        "runs": [
            {
                "args": args,
                "env": run_env,
                "cwd": str(cwd),
                "out": str(tmp_path / f"run{i}.out"),
                # A worker waits out a store that does not answer: stopped once it retried.
                "stop_when": ["ujobs worker", RETRY] if args[1] == "worker" else [],
            }
            for i, (_, _, args, run_env) in enumerate(runs)
        ],
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "tests.cli_forks", str(tmp_path / "spec.json")],
        env=env,
        check=True,
        timeout=HANG_S * -(-len(runs) // AT_ONCE) + 60,  # each run is killed at HANG_S
    )
    ended = json.loads((tmp_path / "spec.json.done").read_text(encoding="utf-8"))["ended"]
    banners = 0
    for i, (label, url, _, _) in enumerate(runs):
        out = (tmp_path / f"run{i}.out").read_text(encoding="utf-8", errors="replace")
        assert ended[i], f"{label} still running after {HANG_S} s:\n{out}"
        assert out.strip(), label
        assert leaks(out) == [], f"{label}:\n{out}"
        if label.startswith("worker") and url not in BAD:
            # The banner, a retry of the store and the whole drain were printed.
            assert "ujobs worker" in out and RETRY in out, f"{label}:\n{out}"
            assert "jobs.worker.stopped" in out and "worker stopped" in out, f"{label}:\n{out}"
            banners += 1
        if label.startswith("db") and url.startswith("postgres") and url not in BAD:
            assert "X_DRIVER_UNAVAILABLE" in out and "Traceback" not in out, out
    assert banners == len(FORMS) + 2
