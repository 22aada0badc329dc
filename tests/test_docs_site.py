"""The documentation site (mkdocs.yml, docs/): it builds with `mkdocs build --strict` (a broken
link or anchor, a page left out of the navigation, a docstring or click command the renderers
cannot read fails), its generated parts hold what the code holds, and every code block on it is
run by a test, or named below with the test that runs it or the reason it is not run."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs_core.cli import main
from jobs_core.error_help import what_to_do
from jobs_core.errors import CODES
from jobs_core.states import JobState
from tests.core.support import cli_commands
from tests.test_docs_factories import SECTIONS, example
from tests.test_readme_examples import FENCE, PAGES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SITE_PAGES = sorted(DOCS.rglob("*.md"))

#: Blocks of the other pages that another test runs as written: (page, first line) -> the test.
RUN_ELSEWHERE = {
    ("factories.md", "from sqlalchemy import select"): "tests/core/test_backfill.py (backfill())",
    ("factories.md", "from jobs_core.factories import ledger"): "tests/core/test_ledger.py",
    ("pg.md", "[tool.alembic]"): "tests/pg/test_migrations.py's TOOL_ALEMBIC (equal: below)",
    ("pg.md", "from jobs_pg import PgDriver"): "test_the_driver_construction_examples_run below",
    ("redis.md", "from jobs_redis import RedisDriver"): "test_the_driver_construction_examples_run",
    ("factories.md", "from jobs_core import task"): "test_the_purge_declaration_runs below",
}
#: Blocks no test should run, each with why (the README's own excuses were of these kinds).
EXCUSED = {
    ("pg.md", "pip install 'ultimat3-jobs[pg]'"): "installs from PyPI",
    ("redis.md", "pip install 'ultimat3-jobs[redis]'"): "installs from PyPI",
    ("writing-a-driver.md", "pip install 'ultimat3-jobs[testing]'"): "installs from PyPI",
    (
        "bench.md",
        "make bench-pg",
    ): "16 min of benchmarks by hand; test_bench_report checks its report",
    ("chaos.md", "make chaos"): "14 min of fault injection by hand; test_chaos_selfcheck checks it",
    ("flows.md", "make bench-flows"): "10 min of benchmarks by hand; test_bench_flows checks it",
    ("pg.md", ".venv/bin/python -m bench.pg_profile"): "a benchmark run by hand (minutes)",
    ("pg.md", ".venv/bin/python -m bench.pg_pair"): "a benchmark run by hand (minutes)",
    ("pg.md", ".venv/bin/python -m bench.pg_growth"): "a benchmark run by hand (minutes)",
    ("writing-a-driver.md", "HYPOTHESIS_PROFILE=ci pytest"): "runs the reader's own suite file",
    ("writing-a-driver.md", "# your pyproject.toml"): "the reader's entry point (ours: pyproject)",
    ("writing-a-driver.md", "# my_driver/plugin.py"): "a template naming the reader's module",
    ("writing-a-driver.md", "# tests/test_my_outbox_parity.py"): (
        "a template naming the reader's store; tests/test_outbox_parity.py runs OutboxSuite"
    ),
}
#: Languages of blocks that show output, not code to run (a table, a plan, a directory tree).
OUTPUT = {"text", ""}
#: A block that only includes a file of deploy/, which tests/test_ops_kit.py checks.
DEPLOY_SNIPPET = re.compile(r'^--8<-- "deploy/[\w/.-]+"\n$')


def test_the_site_builds_strictly_with_the_codes_metrics_and_states_generated(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    errors = (tmp_path / "reference" / "errors" / "index.html").read_text(encoding="utf-8")
    for code in CODES:
        assert f'id="{code.lower()}"' in errors, code
    concepts = (tmp_path / "concepts" / "index.html").read_text(encoding="utf-8")
    assert "stateDiagram-v2" in concepts
    for state in JobState:
        assert f"{state.value} --&gt;" in concepts or f"--&gt; {state.value}" in concepts
    operations = (tmp_path / "operations" / "index.html").read_text(encoding="utf-8")
    for metric in ("ujobs_queue_demand", "ujobs_scheduler_leading", "ujobs_jobs_failed_total"):
        assert f"<code>{metric}</code>" in operations, metric
    cli = (tmp_path / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--log-format" in cli
    for path in cli_commands(main, ("ujobs",)):
        assert f'id="{"-".join(path)}"' in cli, " ".join(path)
    api = (tmp_path / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "enqueue_sync" in api and "DriverSuite" in api


def test_every_error_code_has_a_meaning_and_advice() -> None:
    for code, meaning in CODES.items():
        assert meaning and what_to_do(code), f"{code}: add advice to jobs_core/error_help.py"


def _blocks(page: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(page.read_text(encoding="utf-8"))]


def test_the_readmes_blocks_are_copies_of_the_sites_which_are_run() -> None:
    """The README is a landing page: its code is the site's, verbatim, so what runs there
    (tests/test_readme_examples.py) is what a reader of the README copies."""
    site = {b for page in PAGES for b in _blocks(page)}
    readme = _blocks(ROOT / "README.md")
    assert readme
    for block in readme:
        assert block in site, f"README block {block[1].splitlines()[0]!r} is no site page's"


@pytest.mark.parametrize("page", SITE_PAGES, ids=lambda p: p.relative_to(DOCS).as_posix())
def test_every_code_block_on_the_site_is_run_or_named(page: Path) -> None:
    name = page.relative_to(DOCS).as_posix()
    if page in PAGES:  # tests/test_readme_examples.py runs its python and sh blocks
        for lang, text in _blocks(page):
            run = lang in ("python", "sh") or lang in OUTPUT or DEPLOY_SNIPPET.match(text)
            assert run, f"{name}: a {lang} block no test runs: {text.splitlines()[0]!r}"
        return
    seen: dict[str, int] = {}
    tested = {b for p in PAGES for b in _blocks(p)}
    tested |= {("python", example(section).text) for section in SECTIONS}
    for lang, text in _blocks(page):
        first = text.splitlines()[0].strip()
        # A block run there, or its verbatim twin; or one tests/test_docs_factories.py runs.
        if lang in OUTPUT or (lang, text) in tested:
            continue
        known = [k for k in (*RUN_ELSEWHERE, *EXCUSED) if k[0] == name and first.startswith(k[1])]
        nth = seen[first] = seen.get(first, 0) + 1
        known = [k for k in known if (k[2] if len(k) > 2 else 1) == nth]  # type: ignore[misc]
        assert len(known) == 1, f"{name}: the {lang} block {first!r} is run by no test"


@pytest.mark.parametrize(
    ("page", "describes"),
    [("pg.md", "schema=ujobs"), ("redis.md", "prefix=myapp")],
)
def test_the_driver_construction_examples_run(page: str, describes: str) -> None:
    """pg.md's and redis.md's driver blocks, run as written: a driver connects lazily, so
    building one with the page's options (its host unreachable here) says what it will use."""
    (code,) = [text for lang, text in _blocks(DOCS / page) if lang == "python"]
    scope: dict[str, object] = {}
    exec(compile(code, f"docs/{page}", "exec"), scope)
    driver = scope["driver"]
    text = driver.describe()  # type: ignore[attr-defined]
    assert describes in text and "secret" not in text and "password" not in text.split("@")[0]
    asyncio.run(driver.close())  # type: ignore[attr-defined]


def test_pg_md_shows_the_tool_alembic_block_the_migration_tests_run() -> None:
    from tests.pg.test_migrations import TOOL_ALEMBIC

    assert ("toml", TOOL_ALEMBIC) in _blocks(DOCS / "pg.md")


def test_the_purge_declaration_runs() -> None:
    """factories.md's purge() block, run as written in a process of its own (it registers a
    task and a job in the default registries): the task fires the purge every 15 minutes."""
    (code,) = [
        text
        for lang, text in _blocks(DOCS / "factories.md")
        if lang == "python" and text.startswith("from jobs_core import task")
    ]
    check = (
        "\nfrom jobs_core.scheduler.task import default_task_registry\n"
        "t = default_task_registry.get('purge')\n"
        "print(t.cron, '|', t.tz, '|', t.job is purge_handle, '|', purge_handle.name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code + check],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    cron, tz, same, name = (x.strip() for x in done.stdout.split("|"))
    assert (cron, tz, same) == ("*/15 * * * *", "UTC", "True") and name, done.stdout
