"""Jobs, pauses, the worker registry and the wake slots.

Revision ID: 0001_jobs
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0001_jobs"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = ("ujobs",)
depends_on: str | Sequence[str] | None = None

_LIVE = "state IN ('parked', 'ready', 'running')"


def upgrade() -> None:
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Text(collation="C"), nullable=False),
        sa.Column("run_id", sa.Text(collation="C"), nullable=False),
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("queue", sa.Text(collation="C"), nullable=False),
        sa.Column("tenant_id", sa.Text(collation="C"), nullable=True),
        sa.Column("idempotency_key", sa.Text(collation="C"), nullable=False),
        sa.Column("input_json", sa.Text(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("claims", sa.BigInteger(), nullable=False),
        sa.Column("claimed_by", sa.Text(collation="C"), nullable=True),
        sa.Column("lease_until_ms", sa.BigInteger(), nullable=True),
        sa.Column("run_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("created_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("progress_json", sa.Text(), nullable=True),
        sa.Column("result_json", sa.Text(), nullable=True),
        sa.Column("enqueued_by", sa.Text(collation="C"), nullable=True),
        sa.CheckConstraint(
            "state IN ('cancelled', 'completed', 'dead', 'failed', 'parked', 'ready', 'running')",
            name=op.f("jobs_state_check"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("jobs_pkey")),
        schema=schema,
    )
    op.create_index(
        "jobs_due",
        "jobs",
        ["queue", "priority", "run_at_ms", "id"],
        schema=schema,
        postgresql_where=sa.text("state IN ('parked', 'ready')"),
    )
    op.create_index(
        "jobs_lease",
        "jobs",
        ["queue", "lease_until_ms"],
        schema=schema,
        postgresql_where=sa.text("state = 'running'"),
    )
    op.create_index(
        "jobs_live_key",
        "jobs",
        ["name", sa.text("coalesce(tenant_id, '')"), "idempotency_key"],
        unique=True,
        schema=schema,
        postgresql_where=sa.text(_LIVE),
    )
    op.create_table(
        "pauses",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(collation="C"), nullable=False),
        sa.CheckConstraint("kind IN ('name', 'queue')", name=op.f("pauses_kind_check")),
        sa.PrimaryKeyConstraint("kind", "value", name=op.f("pauses_pkey")),
        schema=schema,
    )
    op.create_table(
        "workers",
        sa.Column("worker_id", sa.Text(collation="C"), nullable=False),
        sa.Column("info_json", sa.Text(), nullable=False),
        sa.Column("last_beat_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("workers_pkey")),
        schema=schema,
    )
    op.create_table(
        "wakes",
        sa.Column("queue", sa.Text(collation="C"), nullable=False),
        sa.Column("slot", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("queue", name=op.f("wakes_pkey")),
        schema=schema,
    )


def _drop(schema: str) -> None:
    op.drop_table("wakes", schema=schema)
    op.drop_table("workers", schema=schema)
    op.drop_table("pauses", schema=schema)
    op.drop_index("jobs_live_key", table_name="jobs", schema=schema)
    op.drop_index("jobs_lease", table_name="jobs", schema=schema)
    op.drop_index("jobs_due", table_name="jobs", schema=schema)
    op.drop_table("jobs", schema=schema)
