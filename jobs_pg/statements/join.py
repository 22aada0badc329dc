"""The flows statements (`join_enqueue`, a PARK nack's join, `job_watch`), named after them.

The finish rule itself is not here: it is the `jobs_finish` trigger (migration 0010), which
runs inside every statement that finishes a row nobody could otherwise see the waiters of.
These statements write the other side of it: the join on the waiting row, its edges, and the
markers (`waiters`, `watched`) the trigger's WHEN reads. Lock order, as the trigger's: the
dependencies' rows first (sorted by id), then the waiter's.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import jobs, joins, lit
from jobs_pg.statements._build import (
    BIGINT,
    INT,
    LIVE_KEY_TARGET,
    LIVE_KEY_WHERE,
    TEXT,
    arr,
    ex,
    p,
    unnest,
)
from jobs_pg.statements.job import (
    _ENQ_VALUES,
    _INSERT_COLUMNS,
    ATTEMPT_COLUMNS,
    FLOW_COLUMNS,
    RECORD_COLUMNS,
    WAIT_COLUMNS,
    _bulk_locked,
    enqueue_answer,
    notified,
    wake_cte,
)

# -- JOIN_DEPS ----------------------------------------------------------------------------------
# The rows `:ids` names that exist, locked one by one in id order, with their state as of the
# lock: a dependency cannot finish between this count and the edge written for it (its finish
# waits for our lock and its trigger then sees the edge), nor finish before it unseen (we wait
# for its lock and read the finished state).
_deps = _bulk_locked("join_locked", "state")
JOIN_DEPS: Final = sa.select(_deps.c.id, _deps.c.state)

# -- JOIN_ENQUEUE -------------------------------------------------------------------------------
# JOB_ENQUEUE's insert with the row's join: `parked` with no `run_at_ms` while `:join_pending` >
# 0 (the driver passes the state and the due time), answered and woken as JOB_ENQUEUE is.
_join_values = {
    **_ENQ_VALUES,
    "state": p("state", TEXT),
    "join_total": p("join_total", INT),
    "join_pending": p("join_pending", INT),
    "join_failed": p("join_failed", INT),
    "join_policy": p("join_policy", TEXT),
    "join_claims": sa.literal_column("0"),
}
_join_columns = (
    *_INSERT_COLUMNS,
    "join_total",
    "join_pending",
    "join_failed",
    "join_policy",
    "join_claims",
)
_join_ins = (
    pg_insert(jobs)
    .from_select(
        list(_join_columns),
        sa.select(*(_join_values[c] for c in _join_columns)).where(~ex(jobs.c.id == p("id", TEXT))),
    )
    .on_conflict_do_nothing(index_elements=LIVE_KEY_TARGET, index_where=LIVE_KEY_WHERE)
    .returning(jobs.c.id, jobs.c.queue, jobs.c.run_at_ms, jobs.c.created_at_ms)
    .cte("ins")
)
JOIN_ENQUEUE: Final = sa.select(*enqueue_answer(_join_ins), notified(wake_cte(_join_ins, "wake")))

# -- JOIN_UNLINK --------------------------------------------------------------------------------
# A waiter parking on a fresh join drops the edges of its old one (`joins_waiter`).
JOIN_UNLINK: Final = sa.delete(joins).where(joins.c.waiter_id == sa.func.any(arr("ids", TEXT)))

# -- JOIN_LINK ----------------------------------------------------------------------------------
# The edges (`:dep_id[i]`, `:waiter_id[i]`), inserted in key order, and the `waiters` marker on
# each dependency that lacked it (rows the caller already holds locked, by JOIN_DEPS).
_edges = unnest("e", dep_id=TEXT, waiter_id=TEXT)
_linked = (
    pg_insert(joins)
    .from_select(
        ["dep_id", "waiter_id"],
        sa.select(_edges.c.dep_id, _edges.c.waiter_id).order_by(
            _edges.c.dep_id, _edges.c.waiter_id
        ),
    )
    .on_conflict_do_nothing()
    .returning(joins.c.dep_id)
    .cte("linked")
)
_marked = (
    sa.update(jobs)
    .where(jobs.c.id == sa.func.any(arr("dep_id", TEXT)), ~jobs.c.waiters)
    .values(waiters=sa.true())
    .returning(jobs.c.id)
    .cte("marked")
)
JOIN_LINK: Final = sa.select(
    sa.select(sa.func.count()).select_from(_linked).scalar_subquery().label("linked"),
    sa.select(sa.func.count()).select_from(_marked).scalar_subquery().label("marked"),
)

# -- JOIN_PARK ----------------------------------------------------------------------------------
# A PARK nack's join, written on the rows the nack just parked (in the same transaction): the
# counts, `join_claims` = the row's claims (so its edges count only while it stays parked on this
# very join), and `ready` at `:now_ms` for a join with nothing pending; answers each row's queue
# and state (the caller wakes the queues of the rows made ready).
_parks = unnest("j", id=TEXT, join_total=INT, join_pending=INT, join_failed=INT, now_ms=BIGINT)
JOIN_PARK: Final = (
    sa.update(jobs)
    .where(jobs.c.id == _parks.c.id, jobs.c.state == lit("parked"))
    .values(
        join_total=_parks.c.join_total,
        join_pending=_parks.c.join_pending,
        join_failed=_parks.c.join_failed,
        join_policy=lit("always"),
        join_claims=jobs.c.claims,
        state=sa.case(
            (_parks.c.join_pending > sa.literal_column("0"), lit("parked")), else_=lit("ready")
        ),
        run_at_ms=sa.case(
            (_parks.c.join_pending > sa.literal_column("0"), jobs.c.run_at_ms),
            else_=_parks.c.now_ms,
        ),
    )
    .returning(jobs.c.queue, jobs.c.state)
)

# -- JOIN_PENDING -------------------------------------------------------------------------------
# The edges still uncounted of each asked row parked on its current join (`join_claims` = its
# claims: an edge left behind by a waiter that was claimed, cancelled or requeued since counts
# no more). A finish deletes the edges it counts, so what is left is what the join waits for.
_waiter = jobs.alias("w")
JOIN_PENDING: Final = (
    sa.select(joins.c.waiter_id, joins.c.dep_id)
    .select_from(joins.join(_waiter, _waiter.c.id == joins.c.waiter_id))
    .where(
        joins.c.waiter_id == sa.func.any(arr("ids", TEXT)),
        _waiter.c.state == lit("parked"),
        _waiter.c.claims == _waiter.c.join_claims,
        _waiter.c.join_pending > sa.literal_column("0"),
    )
    .order_by(joins.c.waiter_id, joins.c.dep_id)
)

# -- JOB_WATCH ----------------------------------------------------------------------------------
# Mark the rows watched and answer them from the version the mark locked (RETURNING, not the
# statement's snapshot): a finish committed before the mark is in the answer, a later one sees
# the mark and announces itself — never neither.
JOB_WATCH: Final = (
    sa.update(jobs)
    .where(jobs.c.id == sa.func.any(arr("ids", TEXT)))
    .values(watched=sa.true())
    .returning(
        *(jobs.c[c] for c in (*RECORD_COLUMNS, *WAIT_COLUMNS, *FLOW_COLUMNS)),
        *ATTEMPT_COLUMNS,
    )
)
