"""Sweeps: the `sweeps` ledger table (what backfills, imports and exports swept, by run).

Revision ID: 0011_sweeps
Revises: 0010_flows
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0011_sweeps"
down_revision: str | None = "0010_flows"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # A new table and its indexes: nothing existing is read or rewritten, whatever the tables'
    # sizes. The checks are spelled out (a version script is frozen history: it imports no
    # constant that a later change could move under it).
    op.create_table(
        "sweeps",
        sa.Column("run_id", sa.Text(collation="C"), nullable=False),
        sa.Column("job_id", sa.Text(collation="C"), nullable=False),
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("scope", sa.Text(collation="C"), nullable=False),
        sa.Column("environment", sa.Text(collation="C"), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("checksum", sa.Text(collation="C"), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("batches", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=False),
        sa.Column("errors", sa.BigInteger(), nullable=False),
        sa.Column("expected", sa.BigInteger(), nullable=True),
        sa.Column("cursor_json", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("started_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("finished_at_ms", sa.BigInteger(), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'failed')", name=op.f("sweeps_status_check")
        ),
        sa.CheckConstraint(
            "kind IN ('backfill', 'import', 'export')", name=op.f("sweeps_kind_check")
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("sweeps_pkey")),
        schema=schema,
    )
    op.create_index(
        "sweeps_key",
        "sweeps",
        ["name", "scope", "environment", "checksum", "run_id"],
        schema=schema,
    )
    op.create_index("sweeps_started", "sweeps", ["started_at_ms", "run_id"], schema=schema)
    op.create_index(
        "sweeps_name_started", "sweeps", ["name", "started_at_ms", "run_id"], schema=schema
    )


def _drop(schema: str) -> None:
    # The ledger goes with its table: a later upgrade starts it empty (no sweep blocks a re-run).
    op.drop_index("sweeps_name_started", table_name="sweeps", schema=schema)
    op.drop_index("sweeps_started", table_name="sweeps", schema=schema)
    op.drop_index("sweeps_key", table_name="sweeps", schema=schema)
    op.drop_table("sweeps", schema=schema)
