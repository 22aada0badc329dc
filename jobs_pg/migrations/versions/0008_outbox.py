"""The transactional outbox: the `outbox` table staged jobs wait in until the relay publishes them.

Revision ID: 0008_outbox
Revises: 0007_tasks
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0008_outbox"
down_revision: str | None = "0007_tasks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # A new table and its index: nothing existing is read or rewritten, whatever the tables' sizes.
    op.create_table(
        "outbox",
        sa.Column("id", sa.Text(collation="C"), nullable=False),
        sa.Column("run_id", sa.Text(collation="C"), nullable=False),
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("queue", sa.Text(collation="C"), nullable=False),
        sa.Column("tenant_id", sa.Text(collation="C"), nullable=True),
        sa.Column("idempotency_key", sa.Text(collation="C"), nullable=False),
        sa.Column("input_json", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("run_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("enqueued_by", sa.Text(collation="C"), nullable=True),
        sa.Column("traceparent", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("available_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("claimed_by", sa.Text(collation="C"), nullable=True),
        sa.Column("lease_until_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("outbox_pkey")),
        schema=schema,
    )
    op.create_index("outbox_order", "outbox", ["created_at_ms", "id"], schema=schema)


def _drop(schema: str) -> None:
    # Rows still staged here are jobs not yet published: a downgrade drops them with the table.
    op.drop_index("outbox_order", table_name="outbox", schema=schema)
    op.drop_table("outbox", schema=schema)
