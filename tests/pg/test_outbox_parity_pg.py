"""`PgOutbox` against the outbox parity suite: the same answers as the reference model.

Each example (and each scenario) gets a schema of its own holding the declared `outbox` table
(test_migrations.py proves it equal to the migrated one), dropped after. The harness stages
through `stage_records` on the app's side of a real transaction, its connection kind taken in
turn from a SQLAlchemy `AsyncConnection`, a psycopg `AsyncConnection` and a sync psycopg
`Connection` (driven from a thread), so every walk and the scenarios cross all three.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from jobs_core.records import NewJob
from jobs_core.testing import OutboxFactory, OutboxHarness, OutboxSuite
from jobs_pg import PgOutbox
from jobs_pg.schema import metadata_in
from jobs_pg.urls import libpq_url
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema

#: The connection kinds a harness stages on, one per harness in turn.
KINDS = ("sqlalchemy async", "psycopg async", "psycopg sync")


def create_outbox_schema(schema: str) -> None:
    """A new schema holding the declared `outbox` table and its indexes."""
    table = metadata_in(schema).tables[f"{schema}.outbox"]
    ddl: list[sa.schema.ExecutableDDLElement] = [sa.schema.CreateTable(table)]
    ddl += [sa.schema.CreateIndex(i) for i in table.indexes]
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    with admin() as conn, conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        for statement in ddl:
            conn.execute(str(statement.compile(dialect=dialect)))


@asynccontextmanager
async def pg_harness(kind: str) -> AsyncIterator[OutboxHarness]:
    """A `PgOutbox` on a fresh schema, and a stage on a connection of `kind`."""
    schema = fresh_schema()
    await asyncio.to_thread(create_outbox_schema, schema)
    try:
        async with AsyncExitStack() as stack:
            outbox = PgOutbox(PG_URL, schema=schema, pool_size=2)
            await stack.enter_async_context(outbox)
            # Each stage ends its transaction whatever the write raised (an app that caught a
            # refusal and went on to its commit), then the refusal propagates.
            if kind == "sqlalchemy async":
                engine = create_async_engine(PG_URL, poolclass=NullPool)
                stack.push_async_callback(engine.dispose)
                conn = await stack.enter_async_context(engine.connect())

                async def stage(records: Sequence[NewJob], commit: bool) -> None:
                    await conn.begin()
                    try:
                        await outbox.stage_records(conn, records)
                    finally:
                        await (conn.commit() if commit else conn.rollback())

            elif kind == "psycopg async":
                aconn = await psycopg.AsyncConnection.connect(libpq_url(PG_URL))
                stack.push_async_callback(aconn.close)

                async def stage(records: Sequence[NewJob], commit: bool) -> None:
                    try:
                        await outbox.stage_records(aconn, records)
                    finally:
                        await (aconn.commit() if commit else aconn.rollback())

            else:
                url = libpq_url(PG_URL)
                sconn: psycopg.Connection[Any] = await asyncio.to_thread(
                    lambda: psycopg.connect(url)
                )
                stack.callback(sconn.close)

                def in_thread(records: Sequence[NewJob], commit: bool) -> None:
                    try:
                        outbox.stage_records(sconn, records)
                    finally:
                        sconn.commit() if commit else sconn.rollback()

                async def stage(records: Sequence[NewJob], commit: bool) -> None:
                    await asyncio.to_thread(in_thread, records, commit)

            yield OutboxHarness(outbox, stage)
    finally:
        await asyncio.to_thread(drop_schema, schema)


class TestPgOutboxParity(OutboxSuite):
    @pytest.fixture
    def outbox_factory(self) -> OutboxFactory:
        kinds = itertools.cycle(KINDS)
        return lambda: pg_harness(next(kinds))
