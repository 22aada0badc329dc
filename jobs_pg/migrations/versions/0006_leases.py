"""Leases: the `leases` table and the `lease_tokens` sequence its tokens come from.

Revision ID: 0006_leases
Revises: 0005_durable
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0006_leases"
down_revision: str | None = "0005_durable"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # New objects only: nothing existing is read or rewritten, whatever the tables' sizes.
    op.create_table(
        "leases",
        sa.Column("key", sa.Text(collation="C"), nullable=False),
        sa.Column("token", sa.BigInteger(), nullable=False),
        sa.Column("holder", sa.Text(collation="C"), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("stamp", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("key", "token", name=op.f("leases_pkey")),
        schema=schema,
    )
    op.execute(sa.schema.CreateSequence(sa.Sequence("lease_tokens", schema=schema)))


def _drop(schema: str) -> None:
    op.execute(sa.schema.DropSequence(sa.Sequence("lease_tokens", schema=schema)))
    op.drop_table("leases", schema=schema)
