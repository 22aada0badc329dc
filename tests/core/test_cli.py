"""`ujobs` as a user runs it: the demo, enqueue, and typed refusals."""

from __future__ import annotations

import json
from pathlib import Path

from tests.core.support import ujobs


def test_demo_keeps_every_promise() -> None:
    done = ujobs("demo", "--jobs", "2000")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "outcomes" in done.stdout and "NO" not in done.stdout
    assert "jobs/s" in done.stdout


def test_enqueue_prints_the_id_and_dedupes_nothing_on_a_fresh_store(tmp_path: Path) -> None:
    (tmp_path / "myjobs.py").write_text(
        "from jobs_core.job import job\n"
        "@job(tenant='none', idempotency_key=lambda i: str(i['n']))\n"
        "async def hello(input, ctx):\n"
        "    return None\n",
        encoding="utf-8",
    )
    done = ujobs("enqueue", "myjobs", "hello", '{"n": 1}', "--driver", "memory", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["deduped"] is False and len(answer["id"]) == 36


def test_an_unknown_driver_url_is_a_typed_refusal_with_the_password_masked() -> None:
    done = ujobs("demo", "--driver", "nosuch://user:hunter2@host/db", "--jobs", "1")
    assert done.returncode == 2
    assert "X_DRIVER_URL_INVALID" in done.stdout and "hunter2" not in done.stdout


def test_a_role_process_freezes_what_it_built_before_it_runs() -> None:
    # `ujobs worker` calls `started()` before its run: what the imports made is skipped by
    # every collection while it runs (docs/pg.md, issue 29).
    import gc

    from jobs_core.cli.schedule import started

    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        started()
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
