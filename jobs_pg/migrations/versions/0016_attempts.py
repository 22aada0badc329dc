"""Attempts: each job's latest claim time and the history of how its claims ended.

Revision ID: 0016_attempts
Revises: 0015_consumers
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0016_attempts"
down_revision: str | None = "0015_consumers"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Nullable without a default: adding them rewrites no row and takes the table's lock only
    # for the catalog change. A row settled before this version has no history (NULL reads as
    # none) and its first settle after starts one.
    op.add_column("jobs", sa.Column("claimed_at_ms", sa.BigInteger(), nullable=True), schema=schema)
    op.add_column("jobs", sa.Column("attempts", pg.JSONB(), nullable=True), schema=schema)
    # Every settle rewrites the history (a few KiB once tracebacks pile up): lz4 compresses it
    # for a fraction of pglz's CPU (measured: an ack after two failures cost about 20 ms per
    # 100 with pglz, 12 with lz4, 8 before this column). Only where the server has lz4.
    name = "'" + schema.replace("'", "''") + "'"
    op.execute(
        "DO $ujobs$ BEGIN IF EXISTS (SELECT 1 FROM pg_settings"
        " WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN"
        " EXECUTE 'ALTER TABLE ' || quote_ident("
        + name
        + ") || '.jobs ALTER COLUMN attempts SET COMPRESSION lz4'; END IF; END $ujobs$"
    )


def _drop(schema: str) -> None:
    op.drop_column("jobs", "attempts", schema=schema)
    op.drop_column("jobs", "claimed_at_ms", schema=schema)
