"""The lease purge's index: holdings by expiry (`lease_purge`).

Revision ID: 0012_lease_expiry
Revises: 0011_sweeps
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0012_lease_expiry"
down_revision: str | None = "0011_sweeps"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Building it reads `leases` once while holding its writes (takes and renewals wait): the
    # table holds a row per holding, live or expired on a key not taken since, so a quiet
    # moment on a store whose leases piled up, as for 0003 and 0005 (docs/pg.md).
    op.create_index("leases_expiry", "leases", ["expires_at_ms", "key", "token"], schema=schema)


def _drop(schema: str) -> None:
    op.drop_index("leases_expiry", table_name="leases", schema=schema)
