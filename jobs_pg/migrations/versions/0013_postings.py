"""Postings: the `postings` and `posting_balances` tables (`ledger()`'s posting ledger).

Revision ID: 0013_postings
Revises: 0012_lease_expiry
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0013_postings"
down_revision: str | None = "0012_lease_expiry"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Two new tables: nothing existing is read or rewritten, whatever the tables' sizes.
    op.create_table(
        "postings",
        sa.Column("tenant_id", sa.Text(collation="C"), nullable=False),
        sa.Column("key", sa.Text(collation="C"), nullable=False),
        sa.Column("job_id", sa.Text(collation="C"), nullable=False),
        sa.Column("lines_json", sa.Text(), nullable=False),
        sa.Column("posted_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "key", name=op.f("postings_pkey")),
        schema=schema,
    )
    op.create_table(
        "posting_balances",
        sa.Column("tenant_id", sa.Text(collation="C"), nullable=False),
        sa.Column("account", sa.Text(collation="C"), nullable=False),
        sa.Column("currency", sa.Text(collation="C"), nullable=False),
        sa.Column("debits", sa.Numeric(), nullable=False),
        sa.Column("credits", sa.Numeric(), nullable=False),
        sa.PrimaryKeyConstraint(
            "tenant_id", "account", "currency", name=op.f("posting_balances_pkey")
        ),
        schema=schema,
    )


def _drop(schema: str) -> None:
    # The postings go with their tables: a downgrade forgets what was posted (keys post again).
    op.drop_table("posting_balances", schema=schema)
    op.drop_table("postings", schema=schema)
