"""`--log-format json` on `ujobs scheduler` and `ujobs relay`: their banners (and the relay's
final count) are JSON log lines with an `event`, on stderr, whatever the log level; nothing is
printed on stdout. (`ujobs worker`'s: tests/core/test_cli_user.py; where its bodies run and
on which loop, in both its banners: here.)"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from jobs_core.cli.banner import announce_relay, announce_relay_stopped, json_logs
from jobs_core.cli.base import _Formatter
from jobs_core.outbox import Relay
from jobs_memory import MemoryDriver, MemoryOutbox

TASKS = (
    "from jobs_core import job, task\n"
    "@job(tenant='none')\n"
    "def hello(x: dict) -> None:\n"
    "    return None\n"
    "nightly = task('nightly', cron='0 3 * * *', tz='Europe/Paris', job=hello)\n"
)


def test_the_scheduler_banner_is_one_json_line_and_stdout_stays_empty(tmp_path: Path) -> None:
    (tmp_path / "jsontasks.py").write_text(TASKS, encoding="utf-8")
    argv = [sys.executable, "-m", "jobs_core.cli", "scheduler", "jsontasks", "--driver", "memory"]
    proc = subprocess.Popen(
        [*argv, "--log-format", "json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        bufsize=0,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        first = proc.stderr.readline().decode()
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, first + err.decode()
    assert out == b""
    plan = json.loads(first)
    assert plan["event"] == "jobs.scheduler.plan" and plan["driver"] == "memory"
    assert plan["tasks"] == [
        {"name": "nightly", "cron": "0 3 * * *", "tz": "Europe/Paris", "job": "hello"}
    ]
    assert plan["lease_s"] == 30 and plan["scheduler_id"].startswith("scheduler-")
    for line in err.decode().splitlines():
        assert json.loads(line)["event"]


def test_the_relay_banner_and_count_are_json_lines_at_any_level() -> None:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_Formatter("json", ["postgresql://app:secret@db/app"]))
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # no -v: the banner shows all the same
    try:
        assert json_logs()
        relay = Relay(MemoryOutbox(), MemoryDriver(), batch=7)
        announce_relay(relay)
        relay.published = 3
        announce_relay_stopped(relay)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    plan, counts = (json.loads(line) for line in stream.getvalue().splitlines())
    assert plan["event"] == "jobs.relay.plan" and plan["level"] == "INFO"
    assert (plan["outbox"], plan["driver"], plan["batch"]) == ("memory outbox", "memory", 7)
    assert plan["lease_s"] == 30 and plan["relay_id"] == relay.relay_id
    assert counts["event"] == "jobs.relay.counts" and counts["published"] == 3


BODIES = (
    "from jobs_core import job\n"
    "@job(tenant='none')\n"
    "async def a(x: dict) -> None:\n"
    "    return None\n"
    "@job(tenant='none')\n"
    "def t(x: dict) -> None:\n"
    "    return None\n"
    "@job(tenant='none', executor='process')\n"
    "def p(x: dict) -> None:\n"
    "    return None\n"
)


def _banner(cwd: Path, *args: str) -> tuple[str, str]:
    """`ujobs worker bodies --driver memory ARGS` until its banner is out, then drained: its
    first stderr line and its stdout so far (the table ends with its bottom rule)."""
    argv = [sys.executable, "-m", "jobs_core.cli", "worker", "bodies", "--driver", "memory"]
    proc = subprocess.Popen(
        [*argv, "--quiet", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"},
        text=True,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        if "json" in args:
            first, out = proc.stderr.readline(), ""
        else:
            first, out = "", ""
            while not out.rstrip().endswith("┘"):
                line = proc.stdout.readline()
                assert line, out
                out += line
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return first, out


def test_the_worker_banners_say_where_each_body_runs_and_on_which_loop(tmp_path: Path) -> None:
    """`async`, `thread` or `process` per job, and the event loop `--loop` picked, in the JSON
    `jobs.worker.plan` and in the text table alike."""
    (tmp_path / "bodies.py").write_text(BODIES, encoding="utf-8")
    first, _ = _banner(tmp_path, "--log-format", "json", "--loop", "asyncio")
    plan = json.loads(first)
    assert plan["event"] == "jobs.worker.plan", plan
    assert {j["name"]: j["body"] for j in plan["jobs"]} == {
        "a": "async",
        "t": "thread",
        "p": "process",
    }
    _, table = _banner(tmp_path, "--loop", "uvloop")
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines()]
    assert {r[0]: r[4] for r in rows if len(r) == 6 and len(r[0]) == 1} == {
        "a": "async",
        "t": "thread",
        "p": "process",
    }, table
    assert plan["loop"] == "asyncio" and " · loop uvloop" in table, (plan, table)
