"""`ujobs db upgrade` installs the schema a Postgres driver needs, is idempotent, says which it
did, and answers a server that is down with one line (all it prints, as a process of its own;
the other commands run in this process, where an interpreter's imports cost no second each)."""

from __future__ import annotations

from tests.core.support import ujobs
from tests.pg.conftest import HEAD_REVISION, PG_URL, admin, drop_schema, fresh_schema
from tests.redis.conftest import spare_port
from tests.test_cli_operator import ujobs_here


def test_db_upgrade_creates_the_tables_once_and_again_changes_nothing() -> None:
    schema = fresh_schema()
    url = f"{PG_URL}?schema={schema}"
    try:
        said = []
        for flag in ("--url", "--driver"):
            done = ujobs_here("db", "upgrade", flag, url, url=url, env_driver=False)
            assert done.exit_code == 0, (done.stdout, done.stderr, done.exception)
            said.append(done.stdout)
        with admin() as conn:
            tables = {
                r[0]
                for r in conn.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                    (schema,),
                )
            }
        assert {"jobs", "pauses", "workers", "ujobs_alembic_version"} <= tables
        # It says what it did: created the tables the first time, found them current after.
        assert said[0].startswith(f"created the jobs tables in schema '{schema}' at revision")
        assert said[1].startswith(f"schema '{schema}' is current (revision {HEAD_REVISION})")
    finally:
        drop_schema(schema)


def test_db_upgrade_on_a_server_that_is_down_is_one_line() -> None:
    url = f"postgresql+psycopg://postgres:hunter2@127.0.0.1:{spare_port()}/test?schema=s"
    done = ujobs("db", "upgrade", "--url", url)
    out = (done.stdout + done.stderr).strip()
    assert done.returncode == 2, out
    assert out.startswith("X_DRIVER_UNAVAILABLE: ") and "\n" not in out, out
    assert "Traceback" not in out and "hunter2" not in out
    assert "Connection refused" in out  # the real cause, in the one line


def test_db_upgrade_on_a_driver_without_a_schema_says_so() -> None:
    done = ujobs_here("db", "upgrade", "--driver", "memory", url="memory", env_driver=False)
    assert done.exit_code == 0, (done.stdout, done.stderr, done.exception)
    assert "keeps no schema" in done.stdout
