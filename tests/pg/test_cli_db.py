"""`ujobs db upgrade` installs the schema a Postgres driver needs, and is idempotent."""

from __future__ import annotations

from tests.core.support import ujobs
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema


def test_db_upgrade_creates_the_tables_once_and_again_changes_nothing() -> None:
    schema = fresh_schema()
    url = f"{PG_URL}?schema={schema}"
    try:
        for flag in ("--url", "--driver"):
            done = ujobs("db", "upgrade", flag, url)
            assert done.returncode == 0, done.stdout + done.stderr
        with admin() as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (schema,),
                )
            }
        assert {"jobs", "pauses", "workers", "ujobs_alembic_version"} <= tables
    finally:
        drop_schema(schema)
