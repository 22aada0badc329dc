"""The migrations create exactly the declared schema, step down and up, and run from the CLI."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from psycopg import sql

from jobs_core.records import ClaimParams, NewJob
from jobs_pg import PgDriver
from jobs_pg.migrate import downgrade, upgrade
from jobs_pg.schema import metadata_in
from jobs_pg.urls import libpq_url, sqlalchemy_url
from tests.pg.conftest import (
    HEAD_REVISION,
    PG_URL,
    admin,
    drop_schema,
    fresh_schema,
    kept_database,
)
from tests.test_cli_operator import ujobs_here

REPO = Path(__file__).resolve().parents[2]

#: The block pyproject.toml needs for a checkout's `alembic upgrade head` (see docs/pg.md).
TOOL_ALEMBIC = """\
[tool.alembic]
script_location = "%(here)s/alembic"
version_locations = ["%(here)s/jobs_pg/migrations/versions"]
path_separator = "os"
prepend_sys_path = ["."]
"""


#: Every table of ours at the head revision.
TABLES = {
    "jobs",
    "pauses",
    "workers",
    "wakes",
    "counters",
    "steps",
    "events",
    "leases",
    "lease_clocks",
    "task_marks",
    "outbox",
    "joins",
    "sweeps",
    "postings",
    "posting_balances",
    "consumers",
    # -- webhooks --
    "webhook_endpoints",
    "webhook_attempts",
}


def _diff(schema: str) -> list[object]:
    engine = sa.create_engine(sqlalchemy_url(PG_URL), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            ctx = MigrationContext.configure(
                conn,
                opts={
                    "include_schemas": True,
                    "include_name": lambda name, type_, _p: type_ != "schema" or name == schema,
                    "include_object": lambda obj, name, type_, _r, _c: (
                        not (type_ == "table" and name == "ujobs_alembic_version")
                    ),
                    "compare_type": True,
                    "compare_server_default": True,
                },
            )
            return list(compare_metadata(ctx, metadata_in(schema)))
    finally:
        engine.dispose()


def _tables(schema: str) -> set[str]:
    with admin() as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    return {r[0] for r in rows}


def _indexes(schema: str) -> dict[str, str]:
    with admin() as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s", (schema,)
        ).fetchall()
    return {name: d.replace(f'"{schema}".', "").replace(f"{schema}.", "") for name, d in rows}


def test_migrated_schema_equals_declared(pg_schema: str) -> None:
    assert _diff(pg_schema) == []
    # Autogenerate does not read partial-index predicates or expressions: pin them here.
    idx = _indexes(pg_schema)
    assert "WHERE (state = ANY (ARRAY['parked'::text, 'ready'::text]))" in idx["jobs_due"]
    assert "(queue, priority, run_at_ms, id)" in idx["jobs_due"]
    assert "WHERE (state = 'running'::text)" in idx["jobs_lease"]
    assert idx["jobs_live_key"].startswith("CREATE UNIQUE INDEX jobs_live_key")
    assert "(name, COALESCE(tenant_id, ''::text), idempotency_key)" in idx["jobs_live_key"]
    assert "'parked'::text, 'ready'::text, 'running'::text" in idx["jobs_live_key"]
    assert "(state, finished_at_ms, id)" in idx["jobs_finished"]
    assert (
        "'cancelled'::text, 'completed'::text, 'dead'::text, 'failed'::text"
        in (idx["jobs_finished"])
    )
    assert idx["jobs_listing"].endswith(
        "(created_at_ms, id) INCLUDE (queue, state) WHERE (state <> 'running'::text)"
    )
    assert idx["counters_pkey"].endswith("(width_ms, bucket_ms, name, queue, shard)")
    assert idx["jobs_waits"].endswith(
        "(wait_event, COALESCE(wait_tenant_id, ''::text), id) WHERE (wait_event IS NOT NULL)"
    )
    assert idx["steps_pkey"].endswith("(run_id, name)")
    assert idx["events_by_name"].endswith("(name, published_at_ms, id)")
    assert idx["events_expiry"].endswith("(expires_at_ms, id)")
    assert idx["leases_pkey"].endswith("(key, token)")
    assert idx["webhook_attempts_age"].endswith("(at_ms, job_id, claims)")


def test_declared_indexes_are_the_migrated_ones_word_for_word(pg_schema: str) -> None:
    """Every index as the server spells it (predicate, INCLUDE, expressions), built once from the
    declaration and once by the migrations: the same set, the same definitions."""
    declared = fresh_schema()
    engine = sa.create_engine(sqlalchemy_url(PG_URL), poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text(f'CREATE SCHEMA "{declared}"'))
            metadata_in(declared).create_all(conn)
        migrated = _indexes(pg_schema)
        del migrated["ujobs_alembic_version_pkc"]  # the version table is alembic's, not declared
        assert _indexes(declared) == migrated
    finally:
        engine.dispose()
        drop_schema(declared)


def test_a_drifted_schema_is_caught(pg_schema: str) -> None:
    """The comparison has teeth: a column the declaration lacks shows up as a difference."""
    with admin() as conn:
        conn.execute(f'ALTER TABLE "{pg_schema}".jobs ADD COLUMN extra integer')
    assert _diff(pg_schema) != []


def _sequences(schema: str) -> set[str]:
    with admin() as conn:
        rows = conn.execute(
            "SELECT sequencename FROM pg_sequences WHERE schemaname = %s", (schema,)
        ).fetchall()
    return {r[0] for r in rows}


def test_downgrade_then_upgrade(pg_schema: str) -> None:
    assert _tables(pg_schema) >= TABLES
    assert _sequences(pg_schema) == {"lease_tokens"}
    downgrade(PG_URL, pg_schema, "0005_durable")
    assert "leases" not in _tables(pg_schema)
    assert _sequences(pg_schema) == set()
    upgrade(PG_URL, pg_schema)
    assert _diff(pg_schema) == []
    assert _sequences(pg_schema) == {"lease_tokens"}
    downgrade(PG_URL, pg_schema, "base")
    assert _tables(pg_schema) == {"ujobs_alembic_version"}
    upgrade(PG_URL, pg_schema)
    upgrade(PG_URL, pg_schema)  # idempotent at head
    assert _diff(pg_schema) == []


async def test_0018_gives_every_key_holding_anything_a_clock(pg_schema: str) -> None:
    """Holdings stored before 0018 get their key's clock at 0 (no call's time known), so the
    purge, which reads a holding with its key's clock row, still takes them; a later take of the
    key works at its own now, and the purge moves the clock to the end it deleted."""
    s = sql.Identifier(pg_schema)
    downgrade(PG_URL, pg_schema, "0017_acts_for")
    with admin() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.leases (key, holder, token, expires_at_ms, stamp) VALUES"
                " ('old', 'h', 1, 1000, true), ('old', 'h2', 2, 5000, false)"
            ).format(s)
        )
    upgrade(PG_URL, pg_schema)
    with admin() as conn:
        rows = conn.execute(sql.SQL("SELECT key, now_ms FROM {}.lease_clocks").format(s)).fetchall()
    assert rows == [("old", 0)]
    async with PgDriver(PG_URL, schema=pg_schema) as d:
        assert await d.lease_purge(1000, 10) == 1
        assert [h.token for h in await d.lease_holders("old", 0)] == [2]
        # The purge moved the clock to the end it deleted: a caller behind is judged there.
        with admin() as conn:
            (clock,) = conn.execute(
                sql.SQL("SELECT now_ms FROM {}.lease_clocks WHERE key = 'old'").format(s)
            ).fetchone() or (None,)
        assert clock == 1000


def _pause_check(schema: str) -> str:
    """The `pauses` kind check as the server spells it."""
    with admin() as conn:
        row = conn.execute(
            "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c"
            " JOIN pg_namespace n ON n.oid = c.connamespace"
            " WHERE n.nspname = %s AND c.conname = 'pauses_kind_check'",
            (schema,),
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_0007_task_pauses_and_marks_down_and_up(pg_schema: str) -> None:
    """0007 widens the pause kinds to 'task' (autogenerate does not compare checks: read the
    server's); its downgrade drops the task pauses the old check would refuse, and the marks."""
    s = sql.Identifier(pg_schema)
    add_pause = sql.SQL("INSERT INTO {}.pauses (kind, value) VALUES (%s, %s)").format(s)
    assert "'task'" in _pause_check(pg_schema)
    with admin() as conn:
        conn.execute(add_pause, ("task", "nightly"))
        conn.execute(add_pause, ("name", "nightly"))
        conn.execute(
            sql.SQL("INSERT INTO {}.task_marks (name, watermark_ms) VALUES ('nightly', 5)").format(
                s
            )
        )
    downgrade(PG_URL, pg_schema, "0006_leases")
    assert "task_marks" not in _tables(pg_schema)
    assert "'task'" not in _pause_check(pg_schema)
    read = sql.SQL("SELECT kind, value FROM {}.pauses ORDER BY kind").format(s)
    with admin() as conn:
        assert conn.execute(read).fetchall() == [("name", "nightly")]
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(add_pause, ("task", "nightly"))
    upgrade(PG_URL, pg_schema)
    assert _diff(pg_schema) == []
    assert "'task'" in _pause_check(pg_schema)
    with admin() as conn:
        conn.execute(add_pause, ("task", "nightly"))
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute(add_pause, ("job", "nightly"))


def test_0004_places_old_counter_rows_in_a_queue_and_back(pg_schema: str) -> None:
    """Rows counted before 0004 know no queue: a name whose stored jobs all sit in one queue
    gets that queue, any other name `default`; a downgrade sums a bucket's queues again."""
    downgrade(PG_URL, pg_schema, "0003_operator")
    s = sql.Identifier(pg_schema)
    insert_job = sql.SQL(
        "INSERT INTO {}.jobs (id, run_id, name, queue, idempotency_key, input_json, state,"
        " priority, attempt, max_attempts, claims, created_at_ms)"
        " VALUES (%s, %s, %s, %s, %s, '1', 'ready', 0, 0, 1, 0, 0)"
    ).format(s)
    insert_counter = sql.SQL(
        "INSERT INTO {}.counters VALUES (60000, 0, %s, 0, %s, 0, 0, 0, 0, 0, 0, 0, 0)"
    ).format(s)
    with admin() as conn:
        for job_id, name, queue in (("1", "one", "mail"), ("2", "one", "mail"), ("3", "two", "a")):
            conn.execute(insert_job, (job_id, job_id, name, queue, job_id))
        conn.execute(insert_job, ("4", "4", "two", "b", "4"))
        for name, n in (("one", 5), ("two", 7), ("gone", 9)):
            conn.execute(insert_counter, (name, n))
    upgrade(PG_URL, pg_schema)
    read = sql.SQL("SELECT name, queue, completed FROM {}.counters ORDER BY name").format(s)
    with admin() as conn:
        assert conn.execute(read).fetchall() == [
            ("gone", "default", 9),
            ("one", "mail", 5),
            ("two", "default", 7),
        ]
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.counters (width_ms, bucket_ms, name, queue, shard, completed,"
                " retried, dead_lettered, dropped, refused, interrupted, shed, suspended,"
                " cancelled) VALUES (60000, 0, 'one', 'x', 0, 1, 0, 0, 0, 0, 0, 0, 0, 0)"
            ).format(s)
        )
    downgrade(PG_URL, pg_schema, "0003_operator")
    read_down = sql.SQL("SELECT name, completed FROM {}.counters ORDER BY name").format(s)
    with admin() as conn:
        assert conn.execute(read_down).fetchall() == [("gone", 9), ("one", 6), ("two", 7)]
    upgrade(PG_URL, pg_schema)
    assert _diff(pg_schema) == []


async def test_special_schema_name_migrates_and_serves() -> None:
    schema = fresh_schema() + "_q'u\"o%te ☃"
    try:
        upgrade(PG_URL, schema)
        assert {"jobs", "pauses", "workers", "wakes"} <= _tables(schema)
        async with PgDriver(PG_URL, schema=schema, pool_size=2) as d:
            new = NewJob("i", "r", "n", "q", None, "k", "{}", 0, 1000, 1, 1000)
            assert (await d.job_enqueue(new)).deduped is False
            got = await d.job_claim(ClaimParams(("q",), "w", 5, 100, 1000))
            assert [j.id for j in got.jobs] == ["i"]
    finally:
        drop_schema(schema)


def test_alembic_cli_with_the_pyproject_block(tmp_path: Path) -> None:
    """`alembic upgrade head` as a user runs it, from a checkout whose pyproject has our block."""
    (tmp_path / "pyproject.toml").write_text(TOOL_ALEMBIC)
    (tmp_path / "alembic").symlink_to(REPO / "alembic")
    (tmp_path / "jobs_pg").symlink_to(REPO / "jobs_pg")
    schema = fresh_schema()
    env = {**os.environ, "JOBS_DATABASE_URL": PG_URL}
    alembic = [sys.executable, "-m", "alembic", "-c", "pyproject.toml"]
    try:
        subprocess.run(
            [*alembic, "-x", f"schema={schema}", "upgrade", "head"],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
        )
        assert {"jobs", "pauses", "workers", "wakes"} <= _tables(schema)
        out = subprocess.run(
            [*alembic, "-x", f"schema={schema}", "current"],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        assert f"{HEAD_REVISION} (head)" in out.stdout
        # JOBS_PG_SCHEMA is the other way to name the schema.
        subprocess.run(
            [*alembic, "downgrade", "base"],
            cwd=tmp_path,
            env={**env, "JOBS_PG_SCHEMA": schema},
            check=True,
            capture_output=True,
        )
        assert _tables(schema) == {"ujobs_alembic_version"}
    finally:
        drop_schema(schema)


# -- every path the README names, as a user runs it ------------------------------------------

ALEMBIC = str(Path(sys.executable).parent / "alembic")


def _readme_line(starts: str) -> str:
    """The one line of the Postgres block of the site's backends guide (the README's section,
    moved) that starts with `starts`, comment dropped."""
    text = (REPO / "docs" / "guides" / "backends.md").read_text(encoding="utf-8")
    block = text.split("## Postgres", 1)[1].split("```", 2)[1]
    found = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.startswith(starts)]
    assert len(found) == 1, found
    return found[0]


#: One `ujobs` command in this process at a time: click's runner swaps the process's stdout.
_IN_PROCESS = threading.Lock()


def _db_upgrade(url: str) -> str:
    """What `ujobs db upgrade --url URL` printed, run in this process: it checks what the
    alembic runs beside it installed, and an interpreter's imports would cost it a second."""
    with _IN_PROCESS:
        done = ujobs_here("db", "upgrade", "--url", url, url=url, env_driver=False)
    assert done.exit_code == 0, (done.stdout, done.stderr, done.exception)
    return done.stdout


def test_the_readme_alembic_command_line_works_from_a_checkout() -> None:
    """The README's `alembic -x url=… -x schema=… upgrade head`, word for word but the values."""
    line = _readme_line("alembic ")
    words = shlex.split(line)
    assert words[0] == "alembic" and words[-2:] == ["upgrade", "head"], line
    schema = fresh_schema()
    values = {"url": PG_URL, "schema": schema}
    for i, word in enumerate(words):
        if words[i - 1] == "-x":
            key = word.split("=", 1)[0]
            words[i] = f"{key}={values.pop(key)}"
    assert values == {}, f"the README's line names no -x {sorted(values)}: {line}"
    try:
        done = subprocess.run(
            [ALEMBIC, *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert {"jobs", "pauses", "workers", "wakes", "ujobs_alembic_version"} <= _tables(schema)
        # `ujobs db upgrade` reads the same version table and finds the schema current.
        assert "is current" in _db_upgrade(f"{PG_URL}?schema={schema}")
    finally:
        drop_schema(schema)


def _database_url(base: str, name: str) -> str:
    parts = urlsplit(libpq_url(base))
    return urlunsplit(parts._replace(path="/" + name))


#: A database of the test server that holds only these tests' schemas, kept between runs
#: (`kept_database`: a DROP DATABASE would make the whole server checkpoint).
OFFLINE_DB = "ujobs_tests_offline_sql"


def test_offline_sql_applied_with_psql_to_an_empty_database() -> None:
    """`alembic … upgrade head --sql` output builds the schema (CREATE SCHEMA included), in a
    database where the schema is not, on a connection with nothing set up before."""
    kept_database(OFFLINE_DB)
    url = _database_url(PG_URL, OFFLINE_DB)
    schema = fresh_schema()
    try:
        out = subprocess.run(
            [ALEMBIC, "-x", f"url={url}", "-x", f"schema={schema}", "upgrade", "head", "--sql"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        assert f'CREATE SCHEMA IF NOT EXISTS "{schema}"' in out
        applied = subprocess.run(
            ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url],
            input=out,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert applied.returncode == 0, applied.stderr
        with psycopg.connect(url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            ).fetchall()
            version = conn.execute(
                sql.SQL("SELECT version_num FROM {}.ujobs_alembic_version").format(
                    sql.Identifier(schema)
                )
            ).fetchall()
        assert {r[0] for r in rows} == {*TABLES, "ujobs_alembic_version"}
        assert version == [(HEAD_REVISION,)]
        assert "is current" in _db_upgrade(
            f"postgresql+psycopg{url.removeprefix('postgresql')}?schema={schema}"
        )
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


APP_ENV = '''\
"""An app's own alembic environment, as an app writes it: its history in its own schema."""
import sqlalchemy as sa
from alembic import context

x = context.get_x_argument(as_dictionary=True)
engine = sa.create_engine(x["url"], poolclass=sa.pool.NullPool)
with engine.connect() as conn:
    conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{x["app_schema"]}"'))
    conn.commit()
    context.configure(connection=conn, version_table_schema=x["app_schema"])
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
'''

APP_REVISION = '''\
"""The app's own first table."""
import sqlalchemy as sa
from alembic import context, op

revision = "a1_app"
down_revision = None
branch_labels = ("app",)
depends_on = None


def upgrade() -> None:
    schema = context.get_x_argument(as_dictionary=True)["app_schema"]
    op.create_table("things", sa.Column("id", sa.Integer, primary_key=True), schema=schema)


def downgrade() -> None:
    schema = context.get_x_argument(as_dictionary=True)["app_schema"]
    op.drop_table("things", schema=schema)
'''


def _app(tmp: Path) -> Path:
    """A small app with its own alembic env whose `version_locations` adds our versions."""
    import jobs_pg.migrations

    ours = Path(jobs_pg.migrations.__file__).parent / "versions"
    (tmp / "migrations" / "versions").mkdir(parents=True)
    (tmp / "migrations" / "env.py").write_text(APP_ENV, encoding="utf-8")
    (tmp / "migrations" / "script.py.mako").write_text("", encoding="utf-8")
    (tmp / "migrations" / "versions" / "a1_app.py").write_text(APP_REVISION, encoding="utf-8")
    (tmp / "alembic.ini").write_text(
        "[alembic]\n"
        "script_location = %(here)s/migrations\n"
        "path_separator = os\n"
        f"version_locations = %(here)s/migrations/versions{os.pathsep}{ours}\n",
        encoding="utf-8",
    )
    return tmp


def _app_alembic(app: Path, schema: str, app_schema: str, *command: str) -> str:
    done = subprocess.run(
        [
            ALEMBIC,
            "-c",
            str(app / "alembic.ini"),
            "-x",
            f"url={sqlalchemy_url(PG_URL)}",
            "-x",
            f"schema={schema}",
            "-x",
            f"app_schema={app_schema}",
            *command,
        ],
        cwd=app,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_an_apps_own_alembic_env_with_our_versions_agrees_with_ujobs_db_upgrade(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    first, second, app_schema = fresh_schema(), fresh_schema(), fresh_schema()

    def app_env_first() -> None:
        # The app's env creates our (missing) schema, and our version table records the step.
        _app_alembic(app, first, app_schema, "upgrade", "heads")
        assert {"jobs", "pauses", "workers", "wakes", "ujobs_alembic_version"} <= _tables(first)
        assert _tables(app_schema) == {"alembic_version", "things"}
        assert "is current" in _db_upgrade(f"{PG_URL}?schema={first}")
        assert _diff(first) == []

    def ujobs_first() -> None:
        # The other order: `ujobs db upgrade` first, then the app's env finds nothing to do.
        assert "created" in _db_upgrade(f"{PG_URL}?schema={second}")
        _app_alembic(app, second, app_schema + "_2", "upgrade", "heads")
        assert HEAD_REVISION in _app_alembic(app, second, app_schema + "_2", "current")
        assert _diff(second) == []

    try:
        # The two orders touch different schemas: they run side by side (each step is a process).
        with ThreadPoolExecutor(max_workers=2) as pool:
            for order in [pool.submit(app_env_first), pool.submit(ujobs_first)]:
                order.result()
        # The app's env steps our branch back, and our version table follows it.
        _app_alembic(app, first, app_schema, "downgrade", "ujobs@base")
        assert _tables(first) == {"ujobs_alembic_version"}
        assert "created" in _db_upgrade(f"{PG_URL}?schema={first}")
    finally:
        for schema in (first, second, app_schema, app_schema + "_2"):
            drop_schema(schema)


def test_ujobs_db_upgrade_from_a_built_wheel(tmp_path: Path) -> None:
    """The wheel ships the migrations: a venv with only the wheel of ours (its dependencies
    borrowed from this venv) runs `ujobs db upgrade`, away from the checkout."""
    # Built from a copy, so the build leaves nothing in the checkout (runs side by side).
    src = tmp_path / "src"
    for name in ("pyproject.toml", "README.md"):
        src.mkdir(exist_ok=True)
        shutil.copy2(REPO / name, src / name)
    for package in ("jobs_core", "jobs_memory", "jobs_pg", "jobs_redis"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            str(src),
            "-w",
            str(tmp_path / "dist"),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("ultimat3_jobs-*.whl")
    venv = tmp_path / "venv"
    # Without pip: seeding a venv with its own pip (ensurepip) cost this test about 5 s of CPU;
    # this venv's pip installs into it (`--python`), writing the same files and `ujobs` script.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300
    )
    python = venv / "bin" / "python"
    # Nothing of the checkout on the path (a worktree's PYTHONPATH would shadow the wheel).
    away_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        env=away_env,
    ).stdout.strip()
    deps = sysconfig.get_paths()["purelib"]  # this venv's: sqlalchemy, psycopg, alembic, …
    (Path(site) / "borrowed_deps.pth").write_text(deps + "\n", encoding="utf-8")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
        # With the checkout on PYTHONPATH, pip finds its dist-info and installs nothing.
        env=away_env,
    )
    away = tmp_path / "elsewhere"
    away.mkdir()
    where = subprocess.run(
        [str(python), "-c", "import jobs_pg.migrations as m; print(m.__file__)"],
        cwd=away,
        check=True,
        capture_output=True,
        text=True,
        env=away_env,
    ).stdout
    assert where.startswith(str(venv)), where  # the wheel's copy, not the checkout's
    schema = fresh_schema()
    try:
        done = subprocess.run(
            [str(venv / "bin" / "ujobs"), "db", "upgrade", "--url", f"{PG_URL}?schema={schema}"],
            cwd=away,
            capture_output=True,
            text=True,
            timeout=120,
            env=away_env,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "created" in done.stdout
        assert _diff(schema) == []
    finally:
        drop_schema(schema)


PROBE_REVISION = f'''\
"""A later revision of ours, for the test of what an upgrade reports."""
import sqlalchemy as sa
from alembic import op
from jobs_pg.migrations.environment import run_step

revision = "9999_probe"
down_revision = "{HEAD_REVISION}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_step(revision, down_revision, "upgrade", lambda s: op.create_table(
        "probe", sa.Column("id", sa.Integer, primary_key=True), schema=s))


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", lambda s: op.drop_table("probe", schema=s))
'''


def test_upgrade_says_created_upgraded_from_to_or_current(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a later revision beside ours, `upgrade` names the revisions it went from and to."""
    import jobs_pg.migrate as migrate

    (tmp_path / "9999_probe.py").write_text(PROBE_REVISION, encoding="utf-8")
    plain = migrate.config

    def with_probe(url: str, schema: str = "ujobs") -> Config:
        cfg = plain(url, schema)
        ours = cfg.get_main_option("version_locations")
        cfg.set_main_option("version_locations", f"{ours}{os.pathsep}{tmp_path}")
        return cfg

    monkeypatch.setattr(migrate, "config", with_probe)
    schema = fresh_schema()
    try:
        said = migrate.upgrade(PG_URL, schema, "0001_jobs")
        assert said == f"created the jobs tables in schema '{schema}' at revision 0001_jobs"
        said = migrate.upgrade(PG_URL, schema)
        assert said == f"upgraded schema '{schema}' from revision 0001_jobs to 9999_probe"
        assert "probe" in _tables(schema)
        said = migrate.upgrade(PG_URL, schema)
        assert said == f"schema '{schema}' is current (revision 9999_probe); nothing to do"
    finally:
        drop_schema(schema)
