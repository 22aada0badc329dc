"""The migrations create exactly the declared schema, step down and up, and run from the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from jobs_core.records import ClaimParams, NewJob
from jobs_pg import PgDriver
from jobs_pg.migrate import downgrade, upgrade
from jobs_pg.schema import metadata_in
from jobs_pg.urls import sqlalchemy_url
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema

REPO = Path(__file__).resolve().parents[2]

#: The block pyproject.toml needs for a checkout's `alembic upgrade head` (see docs/pg.md).
TOOL_ALEMBIC = """\
[tool.alembic]
script_location = "%(here)s/alembic"
version_locations = ["%(here)s/jobs_pg/migrations/versions"]
path_separator = "os"
prepend_sys_path = ["."]
"""


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


def test_a_drifted_schema_is_caught(pg_schema: str) -> None:
    """The comparison has teeth: a column the declaration lacks shows up as a difference."""
    with admin() as conn:
        conn.execute(f'ALTER TABLE "{pg_schema}".jobs ADD COLUMN extra integer')
    assert _diff(pg_schema) != []


def test_downgrade_then_upgrade(pg_schema: str) -> None:
    assert {"jobs", "pauses", "workers", "wakes"} <= _tables(pg_schema)
    downgrade(PG_URL, pg_schema, "base")
    assert _tables(pg_schema) == {"ujobs_alembic_version"}
    upgrade(PG_URL, pg_schema)
    upgrade(PG_URL, pg_schema)  # idempotent at head
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
        assert "0002_jobs_finished (head)" in out.stdout
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
