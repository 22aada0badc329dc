"""The operator family: the trace context column, the listing index and the counters table.

Revision ID: 0003_operator
Revises: 0002_jobs_finished
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0003_operator"
down_revision: str | None = "0002_jobs_finished"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The counted outcomes, in `jobs_core.records.COUNTED_OUTCOMES` order (spelled out: a shipped
#: migration never changes with the code it was written beside).
_COUNTS = (
    "completed",
    "retried",
    "dead_lettered",
    "dropped",
    "refused",
    "interrupted",
    "shed",
    "suspended",
    "cancelled",
)


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Nullable, no default: a catalog change only, whatever the table's size.
    op.add_column("jobs", sa.Column("traceparent", sa.Text(), nullable=True), schema=schema)
    # A plain CREATE INDEX (like 0002's) holds writes on `jobs` while it reads the table: on a
    # table of millions of rows, upgrade in a quiet moment (docs/pg.md).
    op.create_index(
        "jobs_listing",
        "jobs",
        ["created_at_ms", "id"],
        schema=schema,
        postgresql_include=["queue", "state"],
        postgresql_where=sa.text("state <> 'running'"),
    )
    op.create_table(
        "counters",
        sa.Column("width_ms", sa.Integer(), nullable=False),
        sa.Column("bucket_ms", sa.BigInteger(), nullable=False),
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("shard", sa.SmallInteger(), nullable=False),
        *(sa.Column(c, sa.BigInteger(), nullable=False) for c in _COUNTS),
        sa.PrimaryKeyConstraint(
            "width_ms", "bucket_ms", "name", "shard", name=op.f("counters_pkey")
        ),
        schema=schema,
    )


def _drop(schema: str) -> None:
    op.drop_table("counters", schema=schema)
    op.drop_index("jobs_listing", table_name="jobs", schema=schema)
    op.drop_column("jobs", "traceparent", schema=schema)
