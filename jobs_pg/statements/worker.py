"""The `worker_*` statements: the TTL'd registry of live workers."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import workers
from jobs_pg.statements._build import BIGINT, INT, TEXT, p

# An upsert: the first beat inserts, every later one refreshes in place (one write either way).
_ex = pg_insert(workers).excluded
WORKER_BEAT: Final = (
    pg_insert(workers)
    .values(
        worker_id=p("worker_id", TEXT),
        info_json=p("info_json", TEXT),
        last_beat_ms=p("now_ms", BIGINT),
        expires_at_ms=p("expires_at_ms", BIGINT),
    )
    .on_conflict_do_update(
        index_elements=[workers.c.worker_id],
        set_={
            "info_json": _ex.info_json,
            "last_beat_ms": _ex.last_beat_ms,
            "expires_at_ms": _ex.expires_at_ms,
        },
    )
)

# DELETE … RETURNING answers "did it exist" in the same write.
WORKER_FORGET: Final = (
    sa.delete(workers)
    .where(workers.c.worker_id == p("worker_id", TEXT))
    .returning(workers.c.worker_id)
)

# Expired rows are simply not listed (the caller's clock decides); `WORKER_PURGE` sweeps them.
WORKER_LIST: Final = sa.select(
    workers.c.worker_id, workers.c.info_json, workers.c.last_beat_ms, workers.c.expires_at_ms
).where(workers.c.expires_at_ms > p("now_ms", BIGINT))

# The first `:limit` rows expired by `:now_ms`, by (expires_at, worker_id), deleted. No index:
# the registry holds one row per worker not yet forgotten or purged (a fleet's size, plus the
# dead since the last purge), and an index on the expiry would make every beat, the hottest
# write here, update it. SKIP LOCKED: purgers side by side take disjoint rows and never wait on
# a beat (a row being beaten is alive again); a beat of a row this purge holds waits for this
# one statement, then inserts it afresh.
_expired = (
    sa.select(workers.c.worker_id)
    .where(workers.c.expires_at_ms <= p("now_ms", BIGINT))
    .order_by(workers.c.expires_at_ms, workers.c.worker_id)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True)
    .cte("expired")
)
_purged = (
    sa.delete(workers)
    .where(workers.c.worker_id.in_(sa.select(_expired.c.worker_id)))
    .returning(workers.c.worker_id)
    .cte("purged")
)
WORKER_PURGE: Final = sa.select(sa.func.count().label("purged")).select_from(_purged)
