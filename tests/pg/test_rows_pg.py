"""`export_rows()` on Postgres: keyset pages of a real table in the test's own schema, read on
an `AsyncEngine`, written one object per page by a real worker whose ledger and steps live in
that same schema; only the run's tenant's rows are read."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from jobs_core.facade import Jobs
from jobs_core.factories.rows import export_rows
from jobs_core.factories.rows.formats import Layout, read_page
from jobs_core.job import JobRegistry
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_pg import PgDriver
from tests.core.support import until
from tests.pg.conftest import PG_URL

NOTES = ['a "quoted", comma', "new\nline", "<b>markup</b>", "😀", "plain"]


def org(i: int) -> str:
    return "globex" if i % 3 == 0 else "acme"


async def test_an_export_pages_a_real_table_by_its_key_for_one_tenant(
    pg: PgDriver, pg_schema: str, tmp_path: Path
) -> None:
    engine = create_async_engine(PG_URL)
    md = sa.MetaData(schema=pg_schema)
    orders = sa.Table(
        "orders",
        md,
        sa.Column("code", sa.Text, primary_key=True),  # a text key: the cursor is a string
        sa.Column("org", sa.Text, nullable=False),
        sa.Column("note", sa.Text, nullable=False),
    )
    try:
        async with engine.begin() as conn:
            await conn.run_sync(md.create_all)
            await conn.execute(
                orders.insert(),
                [
                    {
                        "code": f"k{i:03d}",
                        "org": ("acme", "globex")[i % 3 == 0],
                        "note": NOTES[i % 5],
                    }
                    for i in range(25)
                ],
            )
        h = export_rows(
            name="orders_export",
            tenant=lambda i: i["org"],
            sink=str(tmp_path),
            format="csv",
            query=sa.select(orders.c.code, orders.c.org, orders.c.note),
            key=orders.c.code,
            tenant_column=orders.c.org,
            engine=engine,
            page_rows=5,
            retry=Retry(attempts=2, base_ms=1, cap_ms=1),
            registry=JobRegistry(),
        )
        done = await Jobs(pg).enqueue(h, {"org": "acme", "prefix": "nightly"})
        worker = Worker(pg, [h], poll_floor=0.005, poll_ceiling=0.05, lease=5.0)
        await worker.start()
        try:

            async def finished() -> bool:
                row = (await pg.job_get_many([done.id]))[done.id]
                return row.state in (JobState.COMPLETED, JobState.DEAD)

            await until(finished, within=30)
        finally:
            await worker.stop()
        row = (await pg.job_get_many([done.id]))[done.id]
        assert row.state is JobState.COMPLETED, row.last_error
        folder = tmp_path / "acme" / "nightly"
        names = sorted(os.listdir(folder))
        assert names == [f"part-{i:06d}.csv" for i in range(4)]
        got: list[Any] = []
        for name in names:
            data = (folder / name).read_bytes()
            page = read_page(lambda o, n, d=data: d[o : o + n], Layout("csv", 4096), 0, 1, 1 << 16)
            got.extend(page.rows)
        expected = [
            {"code": f"k{i:03d}", "org": "acme", "note": NOTES[i % 5]}
            for i in range(25)
            if org(i) == "acme"
        ]
        assert got == expected  # 16 rows of acme's, in key order, none of globex's
        (ledger,) = await pg.sweep_list("orders_export", 10)
        assert (ledger.kind, ledger.status, ledger.scope) == ("export", "completed", "acme")
        assert (ledger.batches, ledger.rows, ledger.cursor_json) == (4, 16, '"k023"')
        assert [s.name for s in await pg.step_list(row.run_id)] == [f"page:{i}" for i in range(4)]
    finally:
        await engine.dispose()
