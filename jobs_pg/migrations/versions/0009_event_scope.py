"""Events keep to their tenant, and a wait ends at its until: the columns and the wait index.

Revision ID: 0009_event_scope
Revises: 0008_outbox
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0009_event_scope"
down_revision: str | None = "0008_outbox"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Through `run_step`, like every version script: under an app's own alembic env it keeps
    # our version table too, so `ujobs db upgrade` and the app's env agree on where we are.
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _create(schema: str) -> None:
    # Nullable columns, and a NOT NULL one with a constant default: catalog changes only,
    # whatever the tables' sizes. A wait or an event stored before this is for no tenant, and a
    # wait has no end: what they meant then, but for the tenants they never named.
    op.add_column("jobs", sa.Column("wait_tenant_id", sa.Text(collation="C")), schema=schema)
    op.add_column("jobs", sa.Column("wait_until_ms", sa.BigInteger()), schema=schema)
    op.add_column("events", sa.Column("tenant_id", sa.Text(collation="C")), schema=schema)
    op.add_column(
        "events",
        sa.Column("all_tenants", sa.Boolean(), nullable=False, server_default=sa.false()),
        schema=schema,
    )
    # The publish's wake lookup, keyed by tenant too. The index holds only the rows that wait
    # (few), but building it reads `jobs` once while holding its writes: a quiet moment on a big
    # table, as for 0003 and 0005 (docs/pg.md).
    op.drop_index("jobs_waits", table_name="jobs", schema=schema)
    op.create_index(
        "jobs_waits",
        "jobs",
        ["wait_event", sa.text("COALESCE(wait_tenant_id, '')"), "id"],
        schema=schema,
        postgresql_where=sa.text("wait_event IS NOT NULL"),
    )


def _drop(schema: str) -> None:
    op.drop_index("jobs_waits", table_name="jobs", schema=schema)
    op.create_index(
        "jobs_waits",
        "jobs",
        ["wait_event", "id"],
        schema=schema,
        postgresql_where=sa.text("wait_event IS NOT NULL"),
    )
    op.drop_column("events", "all_tenants", schema=schema)
    op.drop_column("events", "tenant_id", schema=schema)
    op.drop_column("jobs", "wait_until_ms", schema=schema)
    op.drop_column("jobs", "wait_tenant_id", schema=schema)
