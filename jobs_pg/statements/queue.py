"""The `queue_*` statements: what autoscalers and operators read about queues."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from jobs_pg.schema import jobs, lit, pauses
from jobs_pg.statements._build import BIGINT, TEXT, arr, due_states, ex, p

# Per asked queue, its ready rows due by `:now_ms`; a paused queue answers 0 without counting.
# `due_states` AND `state = 'ready'` keeps the count on the `jobs_due` index (its predicate is
# implied), reading only the due prefix of each queue; parked rows are filtered out on the way.
_q = (
    sa.func.unnest(arr("queues", TEXT))
    .table_valued(sa.column("queue", TEXT))
    .render_derived(name="q", with_types=False)
)
_count = (
    sa.select(sa.func.count())
    .where(
        jobs.c.queue == _q.c.queue,
        due_states(jobs),
        jobs.c.state == lit("ready"),
        jobs.c.run_at_ms <= p("now_ms", BIGINT),
    )
    .scalar_subquery()
)
QUEUE_DEMAND: Final = sa.select(
    _q.c.queue,
    sa.case(
        (ex(pauses.c.kind == lit("queue"), pauses.c.value == _q.c.queue), sa.literal_column("0")),
        else_=_count,
    ).label("ready"),
).select_from(_q)
