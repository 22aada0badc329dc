"""Durable steps and events: the `steps` and `events` tables, and a parked row's wait.

Revision ID: 0005_durable
Revises: 0004_counter_queue
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0005_durable"
down_revision: str | None = "0004_counter_queue"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Nullable, no default: catalog changes only, whatever the table's size.
    op.add_column("jobs", sa.Column("wait_event", sa.Text(collation="C")), schema=schema)
    op.add_column("jobs", sa.Column("wait_match_json", sa.Text()), schema=schema)
    op.add_column("jobs", sa.Column("wait_since_ms", sa.BigInteger()), schema=schema)
    # Every row has a NULL wait here, so the index is empty; building it still reads `jobs` once
    # while holding its writes (a quiet moment on a big table, as for 0003; docs/pg.md).
    op.create_index(
        "jobs_waits",
        "jobs",
        ["wait_event", "id"],
        schema=schema,
        postgresql_where=sa.text("wait_event IS NOT NULL"),
    )
    op.create_table(
        "steps",
        sa.Column("run_id", sa.Text(collation="C"), nullable=False),
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("output_json", sa.Text(), nullable=False),
        sa.Column("recorded_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "name", name=op.f("steps_pkey")),
        schema=schema,
    )
    op.create_table(
        "events",
        sa.Column("id", sa.Text(collation="C"), nullable=False),
        sa.Column("name", sa.Text(collation="C"), nullable=False),
        sa.Column("data_json", sa.Text(), nullable=False),
        sa.Column("published_at_ms", sa.BigInteger(), nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("events_pkey")),
        schema=schema,
    )
    op.create_index("events_by_name", "events", ["name", "published_at_ms", "id"], schema=schema)
    op.create_index("events_expiry", "events", ["expires_at_ms", "id"], schema=schema)


def _drop(schema: str) -> None:
    op.drop_table("events", schema=schema)
    op.drop_table("steps", schema=schema)
    op.drop_index("jobs_waits", table_name="jobs", schema=schema)
    op.drop_column("jobs", "wait_since_ms", schema=schema)
    op.drop_column("jobs", "wait_match_json", schema=schema)
    op.drop_column("jobs", "wait_event", schema=schema)
