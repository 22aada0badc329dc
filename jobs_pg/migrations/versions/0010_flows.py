"""Flows: parent and batch links, a row's join, the join edges, and the finish trigger.

Revision ID: 0010_flows
Revises: 0009_event_scope
Create Date: 2026-12-06
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0010_flows"
down_revision: str | None = "0009_event_scope"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# THE finish rule (`jobs_core.driver`, "Flows"), run by the very statement that finishes a row,
# whichever it is (ack, nack, the claim's bury, cancel; remove of a live row), in its transaction.
# A trigger, not a second statement of each caller: the settles run in autocommit (one round
# trip), and a statement cannot see an edge committed after its snapshot — a join racing the
# dependency's ack would be missed. The trigger body runs after the finishing statement, its
# queries each on a fresh snapshot (a volatile function under READ COMMITTED), so it sees every
# edge committed before the dependency's row lock was granted. Its WHEN keeps the hot path free:
# a row nobody waits for and nobody watches fires nothing.
# Lock order: the dependency's row first (held by the finishing statement), then its waiters
# sorted by id. Each edge is deleted as it is counted: a (waiter, dependency) pair counts once.
# A waiter released is due at once: its queue's wake (`q:<queue>` on the schema's wake channel,
# delivered at commit like an enqueue's) has an idle worker claim it now, not at its next poll.
_FINISH_FN = """
CREATE FUNCTION {s}.jobs_finish() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    v_id text;
    v_completed boolean;
    v_at bigint;
    v_woken bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- A live row removed: a finish that did not complete, with no clock of its own (a waiter
        -- it releases is due at its own created_at_ms, as the memory driver does).
        v_id := OLD.id; v_completed := false; v_at := NULL;
        IF OLD.watched THEN PERFORM pg_notify('{channel}', 'f:' || v_id); END IF;
        IF NOT OLD.waiters THEN RETURN NULL; END IF;
    ELSE
        v_id := NEW.id; v_completed := NEW.state = 'completed'; v_at := NEW.finished_at_ms;
        IF NEW.watched THEN PERFORM pg_notify('{channel}', 'f:' || v_id); END IF;
        IF NOT NEW.waiters THEN RETURN NULL; END IF;
    END IF;
    WITH gone AS (
        DELETE FROM {s}.joins e WHERE e.dep_id = v_id RETURNING e.waiter_id
    ), moving AS (
        SELECT w.id FROM {s}.jobs w
        WHERE w.id IN (SELECT g.waiter_id FROM gone g)
          AND w.state = 'parked' AND w.claims = w.join_claims
        ORDER BY w.id
        FOR UPDATE
    ), moved AS (
        UPDATE {s}.jobs w SET
            join_pending = w.join_pending - 1,
            join_failed = w.join_failed + CASE WHEN v_completed THEN 0 ELSE 1 END,
            state = CASE WHEN w.join_pending <= 1 THEN 'ready' ELSE w.state END,
            run_at_ms = CASE WHEN w.join_pending <= 1 THEN coalesce(v_at, w.created_at_ms)
                        ELSE w.run_at_ms END
        FROM moving m
        WHERE w.id = m.id AND w.state = 'parked' AND w.claims = w.join_claims
        RETURNING w.queue, w.join_pending
    )
    SELECT count(pg_notify('{wake}', 'q:' || r.queue)) INTO v_woken
    FROM (SELECT DISTINCT queue FROM moved WHERE join_pending = 0) r;
    RETURN NULL;
END
$fn$
"""
_LIVE = "('parked', 'ready', 'running')"
_FINISHED = "('cancelled', 'completed', 'dead', 'failed')"
_TRIGGERS = (
    f"""
CREATE TRIGGER jobs_finished AFTER UPDATE ON {{s}}.jobs FOR EACH ROW
WHEN ((NEW.waiters OR NEW.watched) AND OLD.state IN {_LIVE} AND NEW.state IN {_FINISHED})
EXECUTE FUNCTION {{s}}.jobs_finish()
""",
    """
CREATE TRIGGER jobs_removed AFTER DELETE ON {s}.jobs FOR EACH ROW
WHEN ((OLD.waiters OR OLD.watched) AND OLD.state IN ('parked', 'ready'))
EXECUTE FUNCTION {s}.jobs_finish()
""",
)


def upgrade() -> None:
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Nullable columns and constant defaults: catalog changes only, whatever the table's size.
    for name, type_ in (
        ("parent_id", sa.Text(collation="C")),
        ("batch_id", sa.Text(collation="C")),
        ("join_total", sa.Integer()),
        ("join_pending", sa.Integer()),
        ("join_failed", sa.Integer()),
        ("join_policy", sa.Text()),
        ("join_claims", sa.BigInteger()),
    ):
        op.add_column("jobs", sa.Column(name, type_), schema=schema)
    for name in ("waiters", "watched"):
        op.add_column(
            "jobs",
            sa.Column(name, sa.Boolean(), nullable=False, server_default=sa.false()),
            schema=schema,
        )
    # Both partial: empty on a table whose rows have no links, so quick to build there.
    for name, column in (("jobs_parent", "parent_id"), ("jobs_batch", "batch_id")):
        op.create_index(
            name,
            "jobs",
            [column, "created_at_ms", "id"],
            schema=schema,
            postgresql_where=sa.text(f"{column} IS NOT NULL"),
        )
    op.create_table(
        "joins",
        sa.Column("dep_id", sa.Text(collation="C"), nullable=False),
        sa.Column("waiter_id", sa.Text(collation="C"), nullable=False),
        sa.PrimaryKeyConstraint("dep_id", "waiter_id", name="joins_pkey"),
        schema=schema,
    )
    op.create_index("joins_waiter", "joins", ["waiter_id"], schema=schema)
    quoted = _quoted(schema)
    channel = _channel(schema, "finish").replace("'", "''")
    wake = _channel(schema, "wake").replace("'", "''")
    text = _FINISH_FN.replace("{s}", quoted).replace("{channel}", channel).replace("{wake}", wake)
    op.execute(sa.text(text))
    for trigger in _TRIGGERS:
        op.execute(sa.text(trigger.replace("{s}", quoted)))


def _channel(schema: str, family: str) -> str:
    """`jobs_pg.driver.wake_channel(schema, family)`, spelled out: a version script is frozen
    history and imports no driver code (a test pins the two equal)."""
    channel = f"ujobs_{family}.{schema}"
    if len(channel.encode()) > 63:
        channel = f"ujobs_{family}." + hashlib.sha1(schema.encode()).hexdigest()[:32]
    return channel


def _quoted(schema: str) -> str:
    """The schema as an SQL identifier (any name a schema may have: quotes, %, non-ASCII)."""
    return '"' + schema.replace('"', '""') + '"'


def _drop(schema: str) -> None:
    quoted = _quoted(schema)
    op.execute(sa.text(f"DROP TRIGGER jobs_removed ON {quoted}.jobs"))
    op.execute(sa.text(f"DROP TRIGGER jobs_finished ON {quoted}.jobs"))
    op.execute(sa.text(f"DROP FUNCTION {quoted}.jobs_finish()"))
    op.drop_index("joins_waiter", table_name="joins", schema=schema)
    op.drop_table("joins", schema=schema)
    op.drop_index("jobs_batch", table_name="jobs", schema=schema)
    op.drop_index("jobs_parent", table_name="jobs", schema=schema)
    for name in (
        "watched",
        "waiters",
        "join_claims",
        "join_policy",
        "join_failed",
        "join_pending",
        "join_total",
        "batch_id",
        "parent_id",
    ):
        op.drop_column("jobs", name, schema=schema)
