"""The `consumer_*` statements: each consumer's cursor per tenant, one statement per method.

`CONSUMER_CURSOR_PUT` is ONE statement, so its fence and its write are one transaction — the
driver's own autocommit one, or the caller's: the table source of `consumer()` runs the very
same text on the connection that holds the handler's writes (`PgDriver.consumer_cursor_put_on`),
so the cursor and the batch commit or roll back together. The fence is `STEP_PUT`'s: the job row
read `FOR SHARE` while `running` with those `claims` and that worker; a concurrent ack, nack,
cancel or re-claim waits for the put's transaction, or the put waits for it and re-checks the
fence on the row it left. Lock order: the job row, then the consumer's row.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import consumers, jobs, lit
from jobs_pg.statements._build import BIGINT, INT, TEXT, p

#: An entry's columns, in `ConsumerCursor` field order (`tenant` '' is None).
RECORD_COLUMNS: Final = (
    "name",
    "tenant",
    "source",
    "cursor_json",
    "turns",
    "records",
    "lag",
    "holder",
    "job_id",
    "updated_at_ms",
)
_record = [consumers.c[c] for c in RECORD_COLUMNS]
_this = sa.and_(consumers.c.name == p("name", TEXT), consumers.c.tenant == p("tenant", TEXT))

# -- CONSUMER_CURSOR_GET ------------------------------------------------------------------------
# One lookup of `consumers_pkey`.
CONSUMER_CURSOR_GET: Final = sa.select(*_record).where(_this)

# -- CONSUMER_CURSOR_PUT ------------------------------------------------------------------------
# `held`: the fence's job row, locked FOR SHARE. With `:expect_json` NULL (nothing stored yet)
# `inserted` adds the entry, or nothing when one exists (ON CONFLICT: a racing first turn that
# committed before wins, the other lands nothing). Otherwise `updated` moves the entry only while
# its cursor is `:expect_json`: two turns from one cursor at once — the second waits for the
# first's row lock, re-checks its WHERE on the row the first left and writes nothing. Each branch
# is switched off by a test of `:expect_json` alone. Answers 1 when it landed, else 0.
_put_held = (
    sa.select(jobs.c.id)
    .where(
        jobs.c.id == p("job_id", TEXT),
        jobs.c.state == lit("running"),
        jobs.c.claims == p("claims", BIGINT),
        jobs.c.claimed_by == p("worker_id", TEXT),
    )
    .with_for_update(of=jobs, read=True)
    .cte("put_held")
)
_holds = sa.select(sa.literal_column("1")).select_from(_put_held).exists()
_inserted = (
    pg_insert(consumers)
    .from_select(
        list(RECORD_COLUMNS),
        sa.select(
            p("name", TEXT),
            p("tenant", TEXT),
            p("source", TEXT),
            p("cursor_json", TEXT),
            sa.literal(1, BIGINT),
            p("records", BIGINT),
            p("lag", BIGINT),
            p("worker_id", TEXT),
            p("job_id", TEXT),
            p("now_ms", BIGINT),
        ).where(p("expect_json", TEXT).is_(None), _holds),
    )
    .on_conflict_do_nothing(index_elements=[consumers.c.name, consumers.c.tenant])
    .returning(consumers.c.name)
    .cte("inserted")
)
_updated = (
    sa.update(consumers)
    .where(
        _this,
        p("expect_json", TEXT).is_not(None),
        consumers.c.cursor_json == p("expect_json", TEXT),
        _holds,
    )
    .values(
        source=p("source", TEXT),
        cursor_json=p("cursor_json", TEXT),
        turns=consumers.c.turns + 1,
        records=consumers.c.records + p("records", BIGINT),
        lag=p("lag", BIGINT),
        holder=p("worker_id", TEXT),
        job_id=p("job_id", TEXT),
        updated_at_ms=p("now_ms", BIGINT),
    )
    .returning(consumers.c.name)
    .cte("updated")
)
CONSUMER_CURSOR_PUT: Final = sa.select(
    (
        sa.select(sa.func.count()).select_from(_inserted).scalar_subquery()
        + sa.select(sa.func.count()).select_from(_updated).scalar_subquery()
    ).label("landed")
)

# -- CONSUMER_LIST ------------------------------------------------------------------------------
# The primary key's order, read forward: of every consumer (`:name` NULL), or of one name's. Two
# branches, each switched off by a test of `:name` alone, so a generic plan reads `:limit` rows.
_order = (consumers.c.name, consumers.c.tenant)
CONSUMER_LIST: Final = sa.union_all(
    sa.select(*_record).where(p("name", TEXT).is_(None)).order_by(*_order).limit(p("limit", INT)),
    sa.select(*_record)
    .where(consumers.c.name == p("name", TEXT))
    .order_by(*_order)
    .limit(p("limit", INT)),
)
