"""Each lease key's clock (`lease_clocks`): a lease call works on a key at the later of its
caller's now and the latest now any call on the key used, so callers landing out of order or on
hosts whose clocks disagree share one timeline; its row is the key's lock.

Revision ID: 0018_lease_clocks
Revises: 0017_acts_for
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0018_lease_clocks"
down_revision: str | None = "0017_acts_for"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    run_step(revision, down_revision, "upgrade", _create)


def downgrade() -> None:
    run_step(revision, down_revision, "downgrade", _drop)


def _q(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def _create(schema: str) -> None:
    op.create_table(
        "lease_clocks",
        sa.Column("key", sa.Text(collation="C"), nullable=False),
        sa.Column("now_ms", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("lease_clocks_pkey")),
        schema=schema,
    )
    op.create_index("lease_clocks_idle", "lease_clocks", ["now_ms", "key"], schema=schema)
    # A clock for every key holding anything: the purge reads a holding with its key's row. At
    # 0 (no call's time known yet): the key's next call sets it, as a purge that deletes one of
    # its holdings does.
    s = _q(schema)
    op.execute(f"INSERT INTO {s}.lease_clocks (key, now_ms) SELECT DISTINCT key, 0 FROM {s}.leases")


def _drop(schema: str) -> None:
    op.drop_table("lease_clocks", schema=schema)
