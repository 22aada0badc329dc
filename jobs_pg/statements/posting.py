"""The `posting_*` statements: `ledger()`'s postings and the balances they move.

Each is ONE autocommit statement, so a posting's fence, its insert and its balance moves are one
transaction: the posting lands only while the fence holds. The fence is `STEP_PUT`'s narrowed
to the key: the fence's job row is read `FOR SHARE` while `running` with those `claims` and
that worker AND holding `:key` as its idempotency key (a run posts only under its own job's
key). A concurrent ack, nack, cancel or re-claim of that row waits for this statement, or this
one waits for it and re-checks the fence on the row it left, and finds it broken. Lock order:
the job row, then the posting's key (the primary key's insert lock), then the balance rows in
(account, currency) order — the order the driver binds the lines in —, so two postings touching
the same accounts wait for each other and never in a cycle.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import jobs, lit, posting_balances, postings
from jobs_pg.statements._build import BIGINT, TEXT, p, unnest

# -- POSTING_PUT --------------------------------------------------------------------------------
# `held` is the fence. `written` inserts the posting only under it; a key already posted (or
# being posted by a transaction this one waited for) inserts nothing. `moved` adds each line to
# its balance row only when `written` inserted: a repeat, a conflict or a lost fence moves
# nothing. The answer: one row — held, written, and the posting stored under the key as this
# statement's snapshot sees it (NULLs when none: a key posted by a transaction that committed
# after the snapshot began answers held, not written, no posting, and the driver runs it again).
_held = (
    sa.select(jobs.c.id)
    .where(
        jobs.c.id == p("job_id", TEXT),
        jobs.c.state == lit("running"),
        jobs.c.claims == p("claims", BIGINT),
        jobs.c.claimed_by == p("worker_id", TEXT),
        jobs.c.idempotency_key == p("key", TEXT),
    )
    .with_for_update(of=jobs, read=True)
    .cte("held")
)
_holds = sa.select(sa.literal_column("1")).select_from(_held).exists()
_written = (
    pg_insert(postings)
    .from_select(
        ["tenant_id", "key", "job_id", "lines_json", "posted_at_ms"],
        sa.select(
            p("tenant_id", TEXT),
            p("key", TEXT),
            p("job_id", TEXT),
            p("lines_json", TEXT),
            p("now_ms", BIGINT),
        ).where(_holds),
    )
    .on_conflict_do_nothing(index_elements=[postings.c.tenant_id, postings.c.key])
    .returning(postings.c.key)
    .cte("written")
)
_lines = unnest("l", account=TEXT, currency=TEXT, amount=BIGINT)
_moved = (
    pg_insert(posting_balances)
    .from_select(
        ["tenant_id", "account", "currency", "debits", "credits"],
        sa.select(
            p("tenant_id", TEXT),
            _lines.c.account,
            _lines.c.currency,
            sa.func.greatest(_lines.c.amount, 0).cast(sa.Numeric),
            sa.func.greatest(-_lines.c.amount, 0).cast(sa.Numeric),
        )
        .where(sa.select(sa.literal_column("1")).select_from(_written).exists())
        .order_by(_lines.c.ord),
    )
    .on_conflict_do_update(
        index_elements=[
            posting_balances.c.tenant_id,
            posting_balances.c.account,
            posting_balances.c.currency,
        ],
        set_={
            "debits": posting_balances.c.debits + sa.literal_column("excluded.debits"),
            "credits": posting_balances.c.credits + sa.literal_column("excluded.credits"),
        },
    )
    .returning(posting_balances.c.account)
    .cte("moved")
)
_stored = (
    sa.select(postings.c.job_id, postings.c.lines_json, postings.c.posted_at_ms)
    .where(postings.c.tenant_id == p("tenant_id", TEXT), postings.c.key == p("key", TEXT))
    .subquery("stored")
)
POSTING_PUT: Final = sa.select(
    _holds.label("held"),
    sa.select(sa.func.count()).select_from(_written).scalar_subquery().label("written"),
    sa.select(sa.func.count()).select_from(_moved).scalar_subquery().label("moved"),
    _stored.c.job_id,
    _stored.c.lines_json,
    _stored.c.posted_at_ms,
).select_from(
    sa.select(sa.literal(1, BIGINT).label("one")).subquery("one").outerjoin(_stored, sa.true())
)

# -- POSTING_GET --------------------------------------------------------------------------------
# The posting under (tenant, key), by its primary key: no row, or one.
POSTING_GET: Final = sa.select(
    postings.c.job_id, postings.c.lines_json, postings.c.posted_at_ms
).where(postings.c.tenant_id == p("tenant_id", TEXT), postings.c.key == p("key", TEXT))

# -- POSTING_BALANCES ---------------------------------------------------------------------------
# The balance rows of `:accounts` in one tenant's ledger, along the primary key (tenant, account,
# currency): one index range per account named.
_accounts = unnest("a", account=TEXT)
POSTING_BALANCES: Final = (
    sa.select(
        posting_balances.c.account,
        posting_balances.c.currency,
        posting_balances.c.debits,
        posting_balances.c.credits,
    )
    .select_from(_accounts)
    .join(
        posting_balances,
        sa.and_(
            posting_balances.c.tenant_id == p("tenant_id", TEXT),
            posting_balances.c.account == _accounts.c.account,
        ),
    )
    .order_by(posting_balances.c.account, posting_balances.c.currency)
)
