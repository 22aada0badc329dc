"""The guides' worked examples (docs/guides/*.md, "A worked example"), run as written: each is
read from its page at test time (its line numbers the page's) and found by how it starts.

Most are a reader's test file (`# tests/test_….py`): they use the `ujobs` fixture the package's
pytest plugin gives, and assert what the guide's prose says happens, so running them is checking
the prose. Here each `test_*` function of such a block gets what the fixture gives it
(`ujobs_for(url)`, which the fixture wraps), on the backends the guide says it holds on. The
others are scripts or modules, each run by a case below with the names its prose assumes.

`tests/test_readme_examples.py` counts the blocks named in `GUIDE_CASES` as handled.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobs_core import facade
from jobs_core.job import JobRegistry
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.states import JobState
from jobs_core.testing import ujobs_for
from jobs_redis import RedisDriver
from tests.pg.conftest import PG_URL, drop_schema, fresh_schema, migrate
from tests.redis.conftest import REDIS_URL, _real, fresh_prefix
from tests.test_readme_examples import Block, compiled, python_block

#: How each worked example starts (its first line).
JOBS = "# tests/test_invoices.py"
STEPS = "# tests/test_trials.py"
LIMITS = "# fleet.py"
SCHEDULING = "# tests/test_schedules.py"
OUTBOX = "# myapp/orders.py"
WORKFLOWS = "# tests/test_albums.py"
TESTING = "# tests/test_reminders.py"
GUIDE_CASES = (JOBS, STEPS, LIMITS, SCHEDULING, OUTBOX, WORKFLOWS, TESTING)

BACKENDS = {"memory": "memory", "postgres": PG_URL, "redis": REDIS_URL}


@pytest.fixture(autouse=True)
def own_registries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The blocks declare in the default registries and may `configure` a client: this test's
    own, gone after it, so a block runs again on the next backend as on the first."""
    jobs = JobRegistry()
    for module in ("jobs_core.job", "jobs_core.testing.harness"):
        monkeypatch.setattr(importlib.import_module(module), "default_registry", jobs)
    tasks = importlib.import_module("jobs_core.scheduler.task")
    monkeypatch.setattr(tasks, "default_task_registry", TaskRegistry())
    before = facade._default
    try:
        yield
    finally:
        facade._default = before


def run_test_file(block: Block, url: str) -> list[str]:
    """Every `test_*` function of the reader's test file `block`, in the order it defines
    them, each given a fresh `ujobs` on `url` as the fixture gives it; answers their names."""
    names: dict[str, Any] = {"__name__": "guide_example"}
    exec(compiled(block), names)
    tests = [(n, f) for n, f in names.items() if n.startswith("test_") and callable(f)]
    assert tests, f"{block.page}: {block.marker!r} defines no test"
    for _, test in tests:
        assert list(inspect.signature(test).parameters) == ["ujobs"]
        with ujobs_for(url) as ujobs:
            ran = test(ujobs)
            if inspect.iscoroutine(ran):
                asyncio.run(ran)
    return [n for n, _ in tests]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_jobs_guides_invoice_lives_as_told(backend: str) -> None:
    assert run_test_file(python_block(JOBS), BACKENDS[backend]) == ["test_an_invoices_life"]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_steps_guides_trial_resumes_parks_and_undoes(backend: str) -> None:
    ran = run_test_file(python_block(STEPS), BACKENDS[backend])
    assert ran == ["test_a_trial_resumes_sleeps_waits_and_undoes"]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_the_workflows_guides_album_fans_out_and_in(backend: str) -> None:
    ran = run_test_file(python_block(WORKFLOWS), BACKENDS[backend])
    assert ran == [
        "test_an_album_fans_out_and_back_in",
        "test_a_batch_calls_back_once_every_member_finished",
    ]


def test_the_testing_guides_reminders_run_alone_drained_and_bounded() -> None:
    ran = run_test_file(python_block(TESTING), "memory")
    assert ran == [
        "test_the_body_alone_parks_at_its_sleep",
        "test_the_worker_resumes_it_an_hour_later",
        "test_a_job_that_enqueues_itself_fails_the_test",
    ]


def test_the_scheduling_guides_tasks_fire_once_across_daylight_saving() -> None:
    ran = run_test_file(python_block(SCHEDULING), "memory")
    assert ran == ["test_spring_forward", "test_fall_back"]


def test_the_limits_guides_fleet_holds_its_limits() -> None:
    """The script as written: two workers, its asserts (one run per customer, the rate
    window, growing fencing tokens) are the prose's claims."""
    names: dict[str, Any] = {"__name__": "__main__"}
    exec(compiled(python_block(LIMITS)), names)
    assert names["peak"] == {"acme": 1, "globex": 1}
    assert len(names["api_starts"]) == 6


def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: Block) -> ModuleType:
    """The module the block's first line names (`# myapp/orders.py`), its text the block's,
    imported from a package of this test's own (SQLAlchemy reads a mapped class's
    annotations from its module)."""
    dotted = block.marker.removeprefix("# ").split(":")[0].removesuffix(".py")
    package, name = dotted.split("/")
    (tmp_path / package).mkdir()
    (tmp_path / package / f"{name}.py").write_text(block.text, encoding="utf-8")
    holder = ModuleType(package)
    holder.__path__ = [str(tmp_path / package)]
    monkeypatch.setitem(sys.modules, package, holder)
    module = importlib.import_module(f"{package}.{name}")
    monkeypatch.setitem(sys.modules, f"{package}.{name}", module)  # gone after the test
    return module


def test_the_outbox_guides_order_and_its_job_commit_together(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`place_order` in the app's own SQLAlchemy transaction: a committed order leaves one
    staged job, a refused one neither row nor job; `publish_pending` moves the stage into
    Redis under the staged id, and a second pass finds nothing left."""
    import sqlalchemy as sa

    schema = fresh_schema()
    migrate(schema)
    monkeypatch.setenv("JOBS_PG_SCHEMA", schema)  # the block's `PgOutbox()` reads it
    engine = sa.create_engine(PG_URL, connect_args={"options": f"-c search_path={schema}"})
    prefix = fresh_prefix()
    try:
        names = vars(app_module(tmp_path, monkeypatch, python_block(OUTBOX)))
        names["Base"].metadata.create_all(engine)
        job_id = names["place_order"](engine, "org_1", "ada@example.com", 4_200)
        with pytest.raises(ValueError, match="a total"):
            names["place_order"](engine, "org_1", "bob@example.com", 0)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM orders")).scalar_one() == 1

        async def publish() -> tuple[int, int, Any]:
            async with RedisDriver(REDIS_URL, prefix=prefix) as driver:
                url = f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"
                first = await names["publish_pending"](url, driver)
                again = await names["publish_pending"](url, driver)
                row = (await driver.job_get_many([job_id]))[job_id]
            async with _real(REDIS_URL, prefix=prefix):
                pass  # leaving it deletes every key of the prefix
            return first, again, row

        first, again, row = asyncio.run(publish())
        assert (first, again) == (1, 0)
        assert row.name == "send_confirmation" and row.state is JobState.READY
        assert json.loads(row.input_json) == {"org_id": "org_1", "order_id": 1}
    finally:
        engine.dispose()
        drop_schema(schema)
