"""What the examples' tests share: a schema, the app's URL on it, what a good sign-up leaves
(one staged welcome, one row of the app's), and one relay pass and worker run after it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any
from urllib.parse import quote

from psycopg import sql

from jobs_core.job import JobHandle
from jobs_core.outbox import OutboxRow, Relay
from jobs_core.records import JobRecord
from jobs_core.states import LIVE_STATES
from jobs_core.worker import Worker
from jobs_pg import PgDriver, PgOutbox
from tests.core.support import until
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema, migrate

#: The sign-up every test makes.
ANN = {"email": "ann@example.com", "name": "Ann"}
#: Sign-up bodies no example may take (each view answers 400 or 422, nothing written), by case.
UNREADABLE_SIGN_UPS: dict[str, bytes] = {
    "not-json": b"{not json",
    "a-list": b"[1, 2]",
    "a-field-missing": b'{"email": "a@example.com"}',
    "a-lone-surrogate": b'{"email": "b@example.com", "name": "\\ud800"}',
    "a-nul": b'{"email": "c@example.com", "name": "a\\u0000b"}',
    "not-a-string": b'{"email": 1, "name": "x"}',
}


@contextlib.contextmanager
def migrated_schema() -> Iterator[str]:
    """A fresh schema holding the jobs' tables and the outbox (an app adds its own), dropped
    after."""
    name = fresh_schema()
    try:
        migrate(name)
        yield name
    finally:
        drop_schema(name)


def on_schema(url: str, schema: str) -> str:
    """`url` with `schema` alone on its search path, as an app's database URL says it."""
    return f"{url}{'&' if '?' in url else '?'}options={quote(f'-csearch_path={schema}')}"


def jobs_url(schema: str) -> str:
    """The jobs' store on `schema`: the same database as the app's, as most apps run it."""
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"


async def pending(schema: str) -> list[OutboxRow]:
    """Every unpublished outbox row of `schema`, in stage order."""
    async with PgOutbox(PG_URL, schema=schema) as outbox:
        return await outbox.outbox_pending(100)


def table(schema: str, name: str) -> list[tuple[Any, ...]]:
    """The app's rows of table `name` (email, name), in id order."""
    query = sql.SQL("SELECT email, name FROM {}.{} ORDER BY id").format(
        sql.Identifier(schema), sql.Identifier(name)
    )
    with admin() as conn:
        return conn.execute(query).fetchall()


def signed_up(schema: str, app_table: str, job: JobHandle, staged_id: str, user_id: int) -> None:
    """Ann's sign-up left its row in `app_table` and one staged `job` (its welcome), under
    `staged_id`, for her id and e-mail; nothing else."""
    [row] = asyncio.run(pending(schema))
    assert (row.job.id, row.job.name) == (staged_id, job.name)
    assert json.loads(row.job.input_json) == {"user_id": user_id, "email": ANN["email"]}
    assert table(schema, app_table) == [(ANN["email"], ANN["name"])]


async def relay_and_work(schema: str, jobs: ModuleType, job_id: str) -> JobRecord:
    """One relay pass publishes the one staged row; a worker of `jobs` then runs it until it
    finished. Answers the job's row."""
    async with (
        PgOutbox(PG_URL, schema=schema) as outbox,
        PgDriver(PG_URL, schema=schema, pool_size=2) as driver,
    ):
        assert await Relay(outbox, driver).tick() == 1
        assert await outbox.outbox_pending(100) == []
        worker = Worker(driver, jobs, poll_floor=0.01)

        async def finished() -> bool:
            row = (await driver.job_get_many([job_id])).get(job_id)
            return row is not None and row.state not in LIVE_STATES

        await worker.start()
        try:
            await until(finished)
        finally:
            await worker.stop()
        return (await driver.job_get_many([job_id]))[job_id]
