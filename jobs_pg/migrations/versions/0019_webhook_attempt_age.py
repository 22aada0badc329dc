"""The webhook attempts' purge index: attempts by age (`webhook_attempt_purge`).

Revision ID: 0019_webhook_attempt_age
Revises: 0018_lease_clocks
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0019_webhook_attempt_age"
down_revision: str | None = "0018_lease_clocks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Building it reads `webhook_attempts` once while holding its writes (an attempt's put
    # waits): the table held every attempt ever made until this purge existed, so a quiet
    # moment on a store that sent many webhooks, as for 0012 (docs/pg.md).
    op.create_index(
        "webhook_attempts_age", "webhook_attempts", ["at_ms", "job_id", "claims"], schema=schema
    )


def _drop(schema: str) -> None:
    op.drop_index("webhook_attempts_age", table_name="webhook_attempts", schema=schema)
