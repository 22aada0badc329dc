"""Counters keyed by queue too: (width, bucket, name, queue, shard).

Revision ID: 0004_counter_queue
Revises: 0003_operator
Create Date: 2026-12-02

The rows stored before this revision say which name they counted, not in which queue. They are
kept, not dropped: the hour rows hold up to 30 days of throughput, and an upgrade that emptied
every dashboard would read as an outage. Each name's rows go to the queue its stored jobs sit
in when they all sit in ONE queue (a job declares its queue, so this is exact for the usual
app); any other name's rows go to `default`, the queue a job runs in unless it names one. The
guess only ever concerns counts made before the upgrade, and the fold keeps each guessed row
apart from the exact ones until its hour ends (they differ by queue only if the guess was wrong).
The lookup reads `jobs` once (a grouped scan): on a table of millions of rows, upgrade in a
quiet moment, as for 0003 (docs/pg.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from jobs_pg.migrations.environment import run_step

revision: str = "0004_counter_queue"
down_revision: str | None = "0003_operator"
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
    # A constant default: a catalog change only; it is dropped again once the rows are placed,
    # so no write can ever forget its queue.
    op.add_column(
        "counters",
        sa.Column(
            "queue", sa.Text(collation="C"), nullable=False, server_default=sa.text("'default'")
        ),
        schema=schema,
    )
    s = _q(schema)
    op.execute(
        f"UPDATE {s}.counters AS c SET queue = one.queue"
        f" FROM (SELECT name, min(queue) AS queue FROM {s}.jobs"
        f" WHERE name IN (SELECT name FROM {s}.counters)"
        " GROUP BY name HAVING count(DISTINCT queue) = 1) AS one"
        " WHERE c.name = one.name"
    )
    op.alter_column("counters", "queue", server_default=None, schema=schema)
    op.drop_constraint("counters_pkey", "counters", schema=schema)
    op.create_primary_key(
        "counters_pkey",
        "counters",
        ["width_ms", "bucket_ms", "name", "queue", "shard"],
        schema=schema,
    )


def _drop(schema: str) -> None:
    # Back to one row per (width, bucket, name, shard): the queues of a bucket are summed.
    s = _q(schema)
    counts = (
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
    sums = ", ".join(f"sum({c})::bigint AS {c}" for c in counts)
    cols = ", ".join(counts)
    op.execute(
        f"CREATE TEMPORARY TABLE ujobs_counters_down AS"
        f" SELECT width_ms, bucket_ms, name, shard, {sums} FROM {s}.counters"
        " GROUP BY width_ms, bucket_ms, name, shard"
    )
    op.execute(f"DELETE FROM {s}.counters")
    op.drop_constraint("counters_pkey", "counters", schema=schema)
    op.drop_column("counters", "queue", schema=schema)
    op.create_primary_key(
        "counters_pkey", "counters", ["width_ms", "bucket_ms", "name", "shard"], schema=schema
    )
    op.execute(
        f"INSERT INTO {s}.counters (width_ms, bucket_ms, name, shard, {cols})"
        f" SELECT width_ms, bucket_ms, name, shard, {cols} FROM ujobs_counters_down"
    )
    op.execute("DROP TABLE ujobs_counters_down")
