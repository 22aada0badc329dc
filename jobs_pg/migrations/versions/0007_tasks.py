"""Scheduled tasks: the `task_marks` table, and a pause may name a task.

Revision ID: 0007_tasks
Revises: 0006_leases
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0007_tasks"
down_revision: str | None = "0006_leases"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _q(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def _create(schema: str) -> None:
    # A new table, and a check constraint replaced on `pauses` (a handful of rows: the
    # re-check reads nothing worth mentioning). Nothing else existing is read or rewritten.
    op.create_table(
        "task_marks",
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("watermark_ms", sa.BigInteger(), nullable=False),
        sa.Column("fired_ms", sa.BigInteger(), nullable=True),
        sa.Column("fired_job_id", sa.Text(collation="C"), nullable=True),
        sa.Column("fired_at_ms", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("task_marks_pkey")),
        schema=schema,
    )
    _pause_kinds(schema, "kind IN ('name', 'queue', 'task')")


def _drop(schema: str) -> None:
    # A task pause means nothing before this revision, and the old check would refuse it.
    op.execute(f"DELETE FROM {_q(schema)}.pauses WHERE kind = 'task'")
    _pause_kinds(schema, "kind IN ('name', 'queue')")
    op.drop_table("task_marks", schema=schema)


def _pause_kinds(schema: str, check: str) -> None:
    """Replace the check on `pauses.kind` (same name, so the declared schema still matches)."""
    op.drop_constraint(op.f("pauses_kind_check"), "pauses", schema=schema, type_="check")
    op.create_check_constraint(op.f("pauses_kind_check"), "pauses", check, schema=schema)
