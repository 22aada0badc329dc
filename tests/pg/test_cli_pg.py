"""On a migrated schema, `ujobs enqueue` and `ujobs worker --driver postgresql+psycopg://…?schema=…`
as a user runs them: the jobs land in Postgres, the worker completes them, then drains on SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from psycopg import sql

from jobs_core.states import JobState
from tests.cli_forks import forked
from tests.core.support import code_path
from tests.pg.conftest import PG_URL, admin


def test_enqueue_then_worker_on_postgres(pg_schema: str, tmp_path: Path) -> None:
    (tmp_path / "pgjobs.py").write_text(
        "from jobs_core.job import job\n"
        "@job(tenant='none', idempotency_key=lambda i: str(i['n']))\n"
        "async def double(input, ctx):\n"
        "    return input['n'] * 2\n",
        encoding="utf-8",
    )
    url = f"{PG_URL}?schema={pg_schema}"
    env = {**os.environ, "PYTHONPATH": code_path(tmp_path)}
    # Five enqueues, each a fork of one interpreter that imported the CLI (an interpreter of
    # its own each cost a second of imports): the same `main` a user's command runs.
    enqueues = [
        (["enqueue", "pgjobs", "double", json.dumps({"n": n}), "--driver", url], env, tmp_path)
        for n in range(5)
    ]
    ids = []
    for done in forked(enqueues, tmp_path / "runs"):
        assert done.returncode == 0, done.stdout + done.stderr
        ids.append(json.loads(done.stdout)["id"])
    worker = subprocess.Popen(
        [sys.executable, "-m", "jobs_core.cli", "worker", "pgjobs", "--driver", url, "--quiet"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        query = sql.SQL("SELECT id, state, result_json FROM {}.jobs").format(
            sql.Identifier(pg_schema)
        )
        deadline = time.monotonic() + 30
        while True:
            with admin() as conn:
                found = conn.execute(query).fetchall()
            rows = {r[0]: (r[1], r[2]) for r in found}
            if all(rows[i][0] == JobState.COMPLETED.value for i in ids):
                break
            assert time.monotonic() < deadline, "the worker did not complete the jobs"
            assert worker.poll() is None, worker.communicate()[0]
            time.sleep(0.1)
        assert [rows[i][1] for i in ids] == ["0", "2", "4", "6", "8"]
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
        assert worker.returncode == 0, out
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
