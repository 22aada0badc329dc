"""The alembic environment for the jobs schema: where to connect and which schema to build.

URL: `-x url=…`, else the config's `sqlalchemy.url` / attribute `url`, else env
`JOBS_DATABASE_URL`. Schema: `-x schema=…`, else attribute `schema`, else env `JOBS_PG_SCHEMA`,
else `ujobs`. The schema is created when missing (online, and first thing in `--sql` output).

One version table, one place, whatever runs the migrations: `<schema>.ujobs_alembic_version`.
Our environment (a checkout's `alembic`, `ujobs db upgrade`, `jobs_pg.migrate`) has alembic keep
it. Under an app's own environment (our versions in its `version_locations`, its own version
table elsewhere) each of our scripts keeps it itself (`run_step`), and a script whose revision
that table already records does nothing, so the app's history and ours never disagree about
what the schema holds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final, Literal

import sqlalchemy as sa

from alembic import context, op
from jobs_pg.schema import metadata_in
from jobs_pg.urls import sqlalchemy_url

VERSION_TABLE: Final = "ujobs_alembic_version"
DEFAULT_SCHEMA: Final = "ujobs"


def _setting(name: str, env: str) -> str | None:
    config = context.config
    x = context.get_x_argument(as_dictionary=True)
    value = x.get(name) or config.attributes.get(name)
    if (
        value is None
        and name == "url"
        and config.file_config.has_section(config.config_ini_section)
    ):
        # Only an .ini setup has a main section; pyproject.toml setups pass -x or the env.
        value = config.get_main_option("sqlalchemy.url")
    return value or os.environ.get(env)


def run() -> None:
    """Run the migrations online (offline SQL generation is supported too)."""
    url = _setting("url", "JOBS_DATABASE_URL")
    schema = _setting("schema", "JOBS_PG_SCHEMA") or DEFAULT_SCHEMA
    if not url:
        raise SystemExit("no database URL: pass -x url=… or set JOBS_DATABASE_URL")
    context.config.attributes["ujobs_schema"] = schema
    target = metadata_in(schema)

    def ours(name: str | None, type_: str, _parent: object) -> bool:
        # Autogenerate looks at our schema only, never an app's tables beside it.
        return type_ != "schema" or name == schema

    if context.is_offline_mode():
        context.configure(
            url=sqlalchemy_url(url),
            literal_binds=True,
            target_metadata=target,
            version_table=VERSION_TABLE,
            version_table_schema=schema,
        )
        with context.begin_transaction():
            # Before alembic's CREATE TABLE of the version table, which lives in the schema.
            context.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
            context.run_migrations()
        return
    engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}"))
        conn.commit()
        context.configure(
            connection=conn,
            target_metadata=target,
            version_table=VERSION_TABLE,
            version_table_schema=schema,
            include_schemas=True,
            include_name=ours,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


def _quote(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def schema_of_run() -> str:
    """The schema the running migration targets (read by the version scripts).

    Under our environment it is the one `run()` chose; under an app's own alembic environment
    (our versions added to its `version_locations`) it is `-x schema=…`, else env
    `JOBS_PG_SCHEMA`, else `ujobs`.
    """
    chosen = context.config.attributes.get("ujobs_schema")
    if chosen:
        return str(chosen)
    x = context.get_x_argument(as_dictionary=True)
    return x.get("schema") or os.environ.get("JOBS_PG_SCHEMA") or DEFAULT_SCHEMA


def _ours_keeps_the_version() -> bool:
    """True when alembic itself keeps `<schema>.ujobs_alembic_version` in this run."""
    mc = context.get_context()
    return bool(mc.version_table == VERSION_TABLE and mc.version_table_schema == schema_of_run())


def _recorded(schema: str) -> str | None:
    """The revision our version table records (None: no table or no row; offline: unknown)."""
    if context.is_offline_mode():
        return None
    conn = op.get_bind()
    if not sa.inspect(conn).has_table(VERSION_TABLE, schema=schema):
        return None
    row = conn.execute(sa.text(f"SELECT version_num FROM {_quote(schema)}.{VERSION_TABLE}")).first()
    return None if row is None else str(row[0])


def _at_or_after(revision: str, recorded: str | None) -> bool:
    if recorded is None:
        return False
    script = context.script
    return any(
        r.revision == revision for r in script.revision_map.iterate_revisions(recorded, "base")
    )


def run_step(
    revision: str,
    down_revision: str | None,
    direction: Literal["upgrade", "downgrade"],
    body: Callable[[str], None],
) -> None:
    """Run one of our version scripts' `body(schema)`, keeping our version table in any env.

    Under our environment this only creates the schema (if missing) and runs `body`. Under an
    app's environment it also skips a step our version table says is already applied (an
    upgrade at or below the recorded revision, a downgrade of a revision not recorded), and
    records the step there afterwards.
    """
    schema = schema_of_run()
    if direction == "upgrade":
        op.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
    if _ours_keeps_the_version():
        body(schema)
        return
    recorded = _recorded(schema)
    if direction == "upgrade" and _at_or_after(revision, recorded):
        return
    if direction == "downgrade" and not context.is_offline_mode() and recorded != revision:
        return
    body(schema)
    table = f"{_quote(schema)}.{VERSION_TABLE}"
    op.execute(
        f"CREATE TABLE IF NOT EXISTS {table} (version_num VARCHAR(32) NOT NULL,"
        f" CONSTRAINT {VERSION_TABLE}_pkc PRIMARY KEY (version_num))"
    )
    op.execute(f"DELETE FROM {table}")
    now = revision if direction == "upgrade" else down_revision
    if now is not None:
        op.execute(f"INSERT INTO {table} (version_num) VALUES ('{now}')")
