"""The `worker_*` statements: the TTL'd registry of live workers."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import workers
from jobs_pg.statements._build import BIGINT, TEXT, p

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

# Expired rows are simply not listed (the caller's clock decides); nothing sweeps them here.
WORKER_LIST: Final = sa.select(
    workers.c.worker_id, workers.c.info_json, workers.c.last_beat_ms, workers.c.expires_at_ms
).where(workers.c.expires_at_ms > p("now_ms", BIGINT))
