"""Webhooks: the endpoint ledger `webhook()` sends through, and its attempts.

Revision ID: 0014_webhooks
Revises: 0012_lease_expiry
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0014_webhooks"
down_revision: str | None = "0013_postings"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Two new tables: nothing existing is read or rewritten, whatever the tables' sizes. The
    # checks are spelled out (a version script is frozen history).
    op.create_table(
        "webhook_endpoints",
        sa.Column("tenant_id", sa.Text(collation="C"), nullable=False),
        sa.Column("endpoint", sa.Text(collation="C"), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("disabled_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "endpoint", name=op.f("webhook_endpoints_pkey")),
        schema=schema,
    )
    op.create_table(
        "webhook_attempts",
        sa.Column("job_id", sa.Text(collation="C"), nullable=False),
        sa.Column("claims", sa.BigInteger(), nullable=False),
        sa.Column("tenant_id", sa.Text(collation="C"), nullable=False),
        sa.Column("endpoint", sa.Text(collation="C"), nullable=False),
        sa.Column("event_id", sa.Text(collation="C"), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("latency_ms", sa.BigInteger(), nullable=False),
        sa.Column("excerpt", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("at_ms", sa.BigInteger(), nullable=False),
        sa.CheckConstraint(
            "outcome IN ('delivered', 'failed')", name=op.f("webhook_attempts_outcome_check")
        ),
        sa.PrimaryKeyConstraint("job_id", "claims", name=op.f("webhook_attempts_pkey")),
        schema=schema,
    )
    op.create_index(
        "webhook_attempts_endpoint",
        "webhook_attempts",
        ["tenant_id", "endpoint", "at_ms", "job_id", "claims"],
        schema=schema,
    )


def _drop(schema: str) -> None:
    op.drop_index("webhook_attempts_endpoint", table_name="webhook_attempts", schema=schema)
    op.drop_table("webhook_attempts", schema=schema)
    op.drop_table("webhook_endpoints", schema=schema)
