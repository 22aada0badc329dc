"""Consumers: the `consumers` table (each consumer's cursor per tenant).

Revision ID: 0015_consumers
Revises: 0012_lease_expiry
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0015_consumers"
down_revision: str | None = "0014_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # A new table, nothing existing read or rewritten. Spelled out in full: a version script is
    # frozen history and imports nothing a later change could move.
    op.create_table(
        "consumers",
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("tenant", sa.Text(collation="C"), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("cursor_json", sa.Text(), nullable=False),
        sa.Column("turns", sa.BigInteger(), nullable=False),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.Column("lag", sa.BigInteger(), nullable=True),
        sa.Column("holder", sa.Text(collation="C"), nullable=False),
        sa.Column("job_id", sa.Text(collation="C"), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", "tenant", name=op.f("consumers_pkey")),
        schema=schema,
    )


def _drop(schema: str) -> None:
    # The cursors go with their table: a consumer upgraded again reads its source from the start.
    op.drop_table("consumers", schema=schema)
