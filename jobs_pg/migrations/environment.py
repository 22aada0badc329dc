"""The alembic environment for the jobs schema: where to connect and which schema to build.

URL: `-x url=…`, else the config's `sqlalchemy.url` / attribute `url`, else env
`JOBS_DATABASE_URL`. Schema: `-x schema=…`, else attribute `schema`, else env `JOBS_PG_SCHEMA`,
else `ujobs`. The schema is created when missing, and alembic's version table lives in it under
our own name (`ujobs_alembic_version`), apart from any app's history.
"""

from __future__ import annotations

import os
from typing import Final

import sqlalchemy as sa

from alembic import context
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
