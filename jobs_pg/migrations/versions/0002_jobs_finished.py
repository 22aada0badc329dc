"""The retention index: finished rows per state by finish time (`job_purge`).

Revision ID: 0002_jobs_finished
Revises: 0001_jobs
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0002_jobs_finished"
down_revision: str | None = "0001_jobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FINISHED = "state IN ('cancelled', 'completed', 'dead', 'failed')"


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    op.create_index(
        "jobs_finished",
        "jobs",
        ["state", "finished_at_ms", "id"],
        schema=schema,
        postgresql_where=sa.text(_FINISHED),
    )


def _drop(schema: str) -> None:
    op.drop_index("jobs_finished", table_name="jobs", schema=schema)
