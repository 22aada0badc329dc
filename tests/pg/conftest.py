"""Postgres test setup: every test (and every parity example) gets its own migrated schema.

The server is `JOBS_TEST_PG_URL` (default `postgresql+psycopg://postgres@127.0.0.1:5432/test`).
A schema is created by the packaged migrations (`migrate`: their offline SQL, rendered once per
process) and dropped when the test or example ends, so runs are safe twice over and side by side.
The tests of the migrations themselves run `jobs_pg.migrate.upgrade`, and
tests/pg/test_schema_fixture.py pins that both build the same schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg
import pytest
from psycopg import sql

from alembic import command
from jobs_core.driver import JobDriver
from jobs_pg import PgDriver
from jobs_pg.migrate import config, upgrade
from jobs_pg.urls import libpq_url
from tests.pg.proxy import Proxy

PG_URL = os.environ.get("JOBS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
#: The newest migration of ours: what an upgraded schema records (`jobs_pg/migrations/versions`).
HEAD_REVISION = "0019_webhook_attempt_age"


def fresh_schema() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def admin() -> psycopg.Connection[tuple[Any, ...]]:
    """A short-lived autocommit connection for setup and inspection."""
    return psycopg.connect(libpq_url(PG_URL), autocommit=True)


#: The schema name the offline script is rendered for, replaced by a test's own.
_PLACEHOLDER = "ujobs_tests_placeholder_schema"
#: A name the script can take unquoted and unchanged (every `fresh_schema()` is one).
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")


@functools.cache
def _migration_script() -> str:
    """Every packaged migration as one SQL script (alembic's offline `upgrade head --sql`, the
    output `docs/pg.md` documents), for the placeholder schema."""
    cfg = config(PG_URL, _PLACEHOLDER)
    out = io.StringIO()
    cfg.output_buffer = out
    command.upgrade(cfg, "head", sql=True)
    script = out.getvalue()
    assert _PLACEHOLDER in script and HEAD_REVISION in script, script[:500]
    return script


def migrate(schema: str) -> None:
    """Create `schema` at the newest revision, as `jobs_pg.migrate.upgrade` would on a new one.

    The offline script is rendered once per process and sent in one round trip: a test's schema
    costs half what the online upgrade's per-revision inspection and transactions do (0.2 s
    against 0.4 s, measured). Only for a new schema; a name the script cannot take as it is
    goes through `upgrade`.
    """
    if not _PLAIN_NAME.fullmatch(schema) or schema == _PLACEHOLDER:
        upgrade(PG_URL, schema)
        return
    script = re.sub(rf"\b{_PLACEHOLDER}\b", schema, _migration_script())
    with admin() as conn:
        conn.execute(script.encode())


def kept_database(name: str, options: str = "") -> str:
    """Database `name` on the test server (made with `options` by whichever run first finds it
    missing), kept between runs and never dropped: a DROP DATABASE makes the whole server
    checkpoint, which took 20-80 s on a loaded 2-core runner (2026-12-06/07) while every other
    test waited on the disk. Tests share it through schemas of their own. Answers its encoding.
    """
    query = "SELECT pg_encoding_to_char(encoding) FROM pg_database WHERE datname = %s"
    with admin() as conn:
        found = conn.execute(query, (name,)).fetchone()
        if found is None:
            # Two runs may both find it missing: the one that loses the race finds it made.
            with contextlib.suppress(
                psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation
            ):
                create = sql.SQL("CREATE DATABASE {} {}")
                conn.execute(create.format(sql.Identifier(name), sql.SQL(options)))
            found = conn.execute(query, (name,)).fetchone()
    assert found is not None, name
    return str(found[0])


def drop_schema(schema: str) -> None:
    with admin() as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextlib.asynccontextmanager
async def fresh_driver(**kwargs: Any) -> AsyncIterator[PgDriver]:
    """A driver on a newly migrated schema of its own, dropped on the way out."""
    schema = fresh_schema()
    try:
        await asyncio.to_thread(migrate, schema)
        driver = PgDriver(PG_URL, schema=schema, pool_size=kwargs.pop("pool_size", 4), **kwargs)
        async with driver:
            yield driver
    finally:
        await asyncio.to_thread(drop_schema, schema)


#: The tables of a schema at the head revision, but the migration's record of itself: every
#: schema `empty_schema` empties was migrated by `migrate`, so the first one's are every one's.
_TABLES: list[tuple[str, ...]] = []


def _deletes(conn: psycopg.Connection[tuple[Any, ...]], schema: str) -> sql.Composed:
    if not _TABLES:
        # pg_tables costs 35-50 ms a read on a loaded runner: more than a walk's whole reset.
        names = conn.execute(
            "SELECT tablename FROM pg_tables"
            " WHERE schemaname = %s AND tablename <> 'ujobs_alembic_version' ORDER BY tablename",
            (schema,),
        ).fetchall()
        _TABLES.append(tuple(n for (n,) in names))
    return sql.SQL("; ").join(
        sql.SQL("DELETE FROM {}").format(sql.Identifier(schema, n)) for n in _TABLES[0]
    )


def empty_schema(schema: str, conn: psycopg.Connection[tuple[Any, ...]] | None = None) -> None:
    """Delete every row of `schema` (migrated by `migrate`) but the migration's record of itself
    (DELETE: a few rows go several times faster than a TRUNCATE's new files), on `conn` when
    given (a new connection's first statements read the catalog afresh)."""
    if conn is not None:
        conn.execute(_deletes(conn, schema))
        return
    with admin() as fresh:
        fresh.execute(_deletes(fresh, schema))


@contextlib.contextmanager
def parity_factory(schema: str) -> Iterator[Callable[[], AbstractAsyncContextManager[JobDriver]]]:
    """The parity suite's factory on `schema`, migrated once for the test: a fresh driver per
    call, every table emptied when it is left (a migration per walk cost more than the walk),
    through one connection kept for the test (one per walk cost 5-20 ms more a walk)."""
    kept: list[psycopg.Connection[tuple[Any, ...]]] = []

    def empty() -> None:
        if not kept:
            kept.append(admin())
        empty_schema(schema, kept[0])

    @contextlib.asynccontextmanager
    async def fresh() -> AsyncIterator[JobDriver]:
        try:
            async with PgDriver(PG_URL, schema=schema, pool_size=4) as driver:
                yield driver
        finally:
            await asyncio.to_thread(empty)

    try:
        yield fresh
    finally:
        for conn in kept:
            conn.close()


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A migrated schema for one test."""
    schema = fresh_schema()
    try:
        migrate(schema)
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
async def pg(pg_schema: str) -> AsyncIterator[PgDriver]:
    """An open driver on the test's own schema."""
    driver = PgDriver(PG_URL, schema=pg_schema, pool_size=4)
    async with driver:
        yield driver


@pytest.fixture(scope="module")
def module_schema() -> Iterator[str]:
    """One migrated schema for a whole module (a migration costs more than some modules' cases):
    the module's tests share it through `pg_shared`, which empties it after each."""
    schema = fresh_schema()
    try:
        migrate(schema)
        yield schema
    finally:
        drop_schema(schema)


@pytest.fixture
async def pg_shared(module_schema: str) -> AsyncIterator[PgDriver]:
    """A driver on the module's schema, every table emptied after the test."""
    driver = PgDriver(PG_URL, schema=module_schema, pool_size=4)
    try:
        async with driver:
            yield driver
    finally:
        await asyncio.to_thread(empty_schema, module_schema)


@pytest.fixture
async def proxy() -> AsyncIterator[Proxy]:
    """A cuttable proxy in front of the test server (`proxy.url(PG_URL)` reaches it)."""
    p = Proxy(PG_URL)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()
