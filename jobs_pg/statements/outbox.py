"""The `outbox_*` statements, one per `PgOutbox` method, named after it.

`OUTBOX_STAGE` runs on the CALLER's connection inside the caller's transaction; the others on
the outbox's own pool, each its own transaction. Every time is a bound value from a caller's
clock, never the server's `now()`, so one fake clock drives the outbox as it drives the driver.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import outbox
from jobs_pg.statements._build import BIGINT, INT, NEW_JOB_ARRAYS, TEXT, arr, ex, p, unnest

#: The columns an `OutboxRow` is read from: its job's `NewJob` fields in order, then the claim's.
ROW_COLUMNS: Final = (
    "id",
    "run_id",
    "name",
    "queue",
    "tenant_id",
    "idempotency_key",
    "input_json",
    "priority",
    "run_at_ms",
    "max_attempts",
    "created_at_ms",
    "enqueued_by",
    "traceparent",
    "attempts",
    "available_at_ms",
    "claimed_by",
    "lease_until_ms",
    "last_error",
    # -- acts-for (migration 0017): the job's last field, read after the claim's --
    "acts_for",
)
#: The `NewJob` part of `ROW_COLUMNS`: what a stage binds, one array each.
JOB_COLUMNS: Final = (*ROW_COLUMNS[:13], "acts_for")
#: The payload a committed stage notifies (the channel is the outbox's alone; see `PgOutbox`).
STAGED_PAYLOAD: Final = "s"

_row = tuple(outbox.c[c] for c in ROW_COLUMNS)
_stage_order = (outbox.c.created_at_ms, outbox.c.id)

# -- OUTBOX_CLAIM --------------------------------------------------------------------------------
# ONE statement: pick the first `:limit` claimable rows in stage order, locking them and skipping
# rows another claim holds locked (so two claims never wait on each other, nor take one row),
# lease them to `:token`, answer them in stage order as they are after the claim. A row that a
# concurrent claim leased after this snapshot fails the re-check of the WHERE under its lock and
# is skipped, so a claim may answer fewer rows than were free, never a row twice.
_picked = (
    sa.select(outbox.c.id)
    .where(
        outbox.c.available_at_ms <= p("now_ms", BIGINT),
        sa.or_(
            outbox.c.claimed_by.is_(None),
            outbox.c.lease_until_ms <= p("now_ms", BIGINT),
        ),
    )
    .order_by(*_stage_order)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True)
    .cte("picked")
)
# The picked ids as one array value, so the UPDATE finds each by `outbox_pkey`: a join with the
# CTE lets the planner hash the whole table (a sequential scan per claim).
_picked_ids = sa.cast(
    sa.select(sa.func.array_agg(_picked.c.id)).scalar_subquery(), pg.ARRAY(sa.Text)
)
_claimed = (
    sa.update(outbox)
    .where(outbox.c.id == sa.any_(_picked_ids))
    .values(
        claimed_by=p("token", TEXT),
        lease_until_ms=p("now_ms", BIGINT) + p("lease_ms", BIGINT),
    )
    .returning(*_row)
    .cte("claimed")
)
OUTBOX_CLAIM: Final = sa.select(*(_claimed.c[c] for c in ROW_COLUMNS)).order_by(
    _claimed.c.created_at_ms, _claimed.c.id
)

# -- OUTBOX_PENDING ------------------------------------------------------------------------------
# The first `:limit` rows in stage order, claimed or not; reads only (an `outbox_order` walk).
OUTBOX_PENDING: Final = sa.select(*_row).order_by(*_stage_order).limit(p("limit", INT))

# -- OUTBOX_PUBLISH ------------------------------------------------------------------------------
# Remove the named rows `:token` still holds (its lease lapsed or not): a row another claim took
# since is not this token's, so a stale relay removes nothing. `:ids` are distinct (the store
# dedupes them, keeping the caller's order, in which it answers).
OUTBOX_PUBLISH: Final = (
    sa.delete(outbox)
    .where(outbox.c.id == sa.any_(arr("ids", TEXT)), outbox.c.claimed_by == p("token", TEXT))
    .returning(outbox.c.id)
)

# -- OUTBOX_RELEASE ------------------------------------------------------------------------------
# Free the named rows `:token` still holds, claimable again from `:retry_at_ms`; an `:error`
# records a failed publish (attempts + 1, last_error), none only frees them.
_error = p("error", TEXT)
OUTBOX_RELEASE: Final = (
    sa.update(outbox)
    .where(outbox.c.id == sa.any_(arr("ids", TEXT)), outbox.c.claimed_by == p("token", TEXT))
    .values(
        claimed_by=sa.null(),
        lease_until_ms=sa.null(),
        available_at_ms=p("retry_at_ms", BIGINT),
        attempts=outbox.c.attempts
        + sa.case((_error.is_not(None), sa.literal_column("1")), else_=sa.literal_column("0")),
        last_error=sa.func.coalesce(_error, outbox.c.last_error),
    )
    .returning(outbox.c.id)
)

# -- OUTBOX_STAGE --------------------------------------------------------------------------------
# Stage a batch (one record or many: one array per column, so the text never changes with the
# batch size) in the caller's transaction. An id already staged keeps its first row (ON CONFLICT
# DO NOTHING, also within the batch: rows go in in the caller's order). When a row went in, one
# NOTIFY on the outbox's channel: Postgres queues it with the transaction and delivers it only at
# COMMIT (never on a rollback), and folds repeats of it within one transaction into one.
# `:channel` NULL (the wake off) notifies nothing.
_src = unnest("s", **NEW_JOB_ARRAYS)
_staged = (
    pg_insert(outbox)
    .from_select(
        [*JOB_COLUMNS, "attempts", "available_at_ms"],
        sa.select(
            *(_src.c[c] for c in JOB_COLUMNS),
            sa.literal_column("0"),
            _src.c.created_at_ms,
        ).order_by(_src.c.ord),
    )
    .on_conflict_do_nothing(index_elements=[outbox.c.id])
    .returning(outbox.c.id)
    .cte("staged")
)
_channel = p("channel", TEXT)
OUTBOX_STAGE: Final = sa.select(
    sa.select(sa.func.count()).select_from(_staged).scalar_subquery().label("staged"),
    sa.select(sa.func.count(sa.func.pg_notify(_channel, sa.literal_column(f"'{STAGED_PAYLOAD}'"))))
    .where(_channel.is_not(None), ex(_staged.c.id.is_not(None)))
    .scalar_subquery()
    .label("notified"),
)
