"""Who a job acts for: the `acts_for` column on `jobs` and on `outbox`.

Revision ID: 0017_acts_for
Revises: 0016_attempts
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0017_acts_for"
# Merge note: 0016 (attempt history) lands beside this in parallel; whichever merges second
# names the other here, so the chain stays one line.
down_revision: str | None = "0016_attempts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Nullable columns without a default: catalog changes only, whatever the tables' sizes. A
    # row stored before this acts for no org that the store knows (NULL); its runs still derive
    # theirs from the input, as they always did. No index: listings filter during their walk.
    op.add_column("jobs", sa.Column("acts_for", sa.Text(collation="C")), schema=schema)
    op.add_column("outbox", sa.Column("acts_for", sa.Text(collation="C")), schema=schema)


def _drop(schema: str) -> None:
    op.drop_column("outbox", "acts_for", schema=schema)
    op.drop_column("jobs", "acts_for", schema=schema)
