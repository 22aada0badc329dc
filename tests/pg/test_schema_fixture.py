"""The tests' schemas (`migrate`: the migrations' offline script) are the ones `upgrade` builds.

Every Postgres test runs on a schema `tests.pg.conftest.migrate` made; this pins that it is what
a user's `ujobs db upgrade` makes, catalog entry for catalog entry, so no test runs on a schema
no user has; and that a schema a test gave back is handed to the next one only as new as that
(the same catalog, revision and statistics, no rows), else dropped.
"""

from __future__ import annotations

import pytest

from jobs_pg.migrate import upgrade, version_of
from tests.pg import conftest
from tests.pg.conftest import (
    HEAD_REVISION,
    PG_URL,
    admin,
    catalog,
    drop_schema,
    fresh_schema,
    give_back,
    migrate,
    take_schema,
)


def test_migrate_builds_the_schema_upgrade_builds_and_upgrade_finds_it_current() -> None:
    online, offline = fresh_schema(), fresh_schema()
    try:
        upgrade(PG_URL, online)
        migrate(offline)
        built = catalog(online)
        assert all(built.values()), built  # every kind of entry is there to compare
        assert catalog(offline) == built
        assert version_of(PG_URL, offline) == HEAD_REVISION
        assert "nothing to do" in upgrade(PG_URL, offline)
        # The comparison sees a difference as small as one index more.
        with admin() as conn:
            conn.execute(f'CREATE INDEX extra ON "{offline}".jobs (name)')  # type: ignore[arg-type]
        assert catalog(offline) != built
    finally:
        drop_schema(online)
        drop_schema(offline)


def _schemas() -> set[str]:
    with admin() as conn:
        return {n for (n,) in conn.execute("SELECT nspname FROM pg_namespace").fetchall()}


def _new_again(schema: str) -> None:
    """`schema`, given back, is the next one `take_schema` hands out, with no row left."""
    give_back(schema)
    again = take_schema()
    try:
        assert again == schema
        assert catalog(again) == conftest._PRISTINE[0]
        with admin() as conn:
            tables = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (again,)
            ).fetchall()
            for (table,) in tables:
                count = conn.execute(f'SELECT count(*) FROM "{again}"."{table}"').fetchone()
                assert count == ((1,) if table == conftest.VERSION_TABLE else (0,)), table
        assert version_of(PG_URL, again) == HEAD_REVISION
    finally:
        give_back(again)


def test_a_schema_given_back_with_rows_is_handed_out_again_as_new() -> None:
    schema = take_schema()
    with admin() as conn:
        conn.execute(f"INSERT INTO \"{schema}\".pauses VALUES ('queue', 'q')")  # type: ignore[arg-type]
        conn.execute(f"SELECT nextval('\"{schema}\".lease_tokens')")  # type: ignore[arg-type]
        conn.execute(f"SELECT nextval('\"{schema}\".lease_tokens')")  # type: ignore[arg-type]
    _new_again(schema)


@pytest.mark.parametrize(
    "change",
    [
        'CREATE INDEX extra ON "{s}".jobs (name)',
        'ALTER TABLE "{s}".jobs DROP COLUMN acts_for',
        'DROP TABLE "{s}".pauses',
        'CREATE TABLE "{s}".app_orders (id int)',
        'ANALYZE "{s}".jobs',
        "UPDATE \"{s}\".ujobs_alembic_version SET version_num = '0001_jobs'",
        "INSERT INTO \"{s}\".pauses SELECT 'queue', 'q' || g FROM generate_series(1, 3000) g",
    ],
    ids=["index", "column", "table-dropped", "table-added", "analyzed", "revision", "ten-pages"],
)
def test_a_schema_a_test_changed_is_dropped_not_handed_out(change: str) -> None:
    """A schema whose catalog, revision or statistics a test changed, or whose deleted rows
    fill 10 pages, is dropped: the next test gets another, new."""
    schema = take_schema()
    with admin() as conn:
        conn.execute(change.format(s=schema))  # type: ignore[arg-type]
    give_back(schema)
    other = take_schema()
    try:
        assert other != schema
        assert schema not in _schemas()
        assert catalog(other) == conftest._PRISTINE[0]
    finally:
        give_back(other)
