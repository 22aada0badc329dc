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

# -- QUEUE_STATS --------------------------------------------------------------------------------
# Per queue, its rows by state, and the least run_at of its due ready rows; answered as rows of
# kind 'c' (queue, state, count) and 'o' (queue, oldest due run_at), assembled by the driver.
# * Counts: every row but the running ones is one entry of `jobs_listing`, which carries queue and
#   state (INCLUDE): an index-only scan, not a read of the table's rows (their JSON included).
#   Running rows come from `jobs_lease` (index-only: its predicate says running).
# * Oldest due ready row: a loose index scan of `jobs_due` visits each (queue, priority) present
#   once (a recursive step to the next pair, one index probe each), then reads the first due ready
#   entry of each pair in run_at order: a few probes per queue, whatever the backlog's size (a
#   min() over the queue's rows would read every ready row).
_not_running = (
    sa.select(jobs.c.queue, jobs.c.state, sa.func.count().label("n"))
    .where(jobs.c.state != lit("running"))
    .group_by(jobs.c.queue, jobs.c.state)
)
_running = (
    sa.select(jobs.c.queue, lit("running").label("state"), sa.func.count().label("n"))
    .where(jobs.c.state == lit("running"))
    .group_by(jobs.c.queue)
)
_counts = sa.union_all(_not_running, _running).subquery("counts")
_first_pair = (
    sa.select(jobs.c.queue, jobs.c.priority)
    .where(due_states(jobs))
    .order_by(jobs.c.queue, jobs.c.priority)
    .limit(sa.literal_column("1"))
)
_pairs = _first_pair.cte("pairs", recursive=True)
_next_pair = (
    sa.select(jobs.c.queue, jobs.c.priority)
    .where(
        due_states(jobs),
        sa.tuple_(jobs.c.queue, jobs.c.priority) > sa.tuple_(_pairs.c.queue, _pairs.c.priority),
    )
    .order_by(jobs.c.queue, jobs.c.priority)
    .limit(sa.literal_column("1"))
    .lateral("next_pair")
)
_pairs = _pairs.union_all(
    sa.select(_next_pair.c.queue, _next_pair.c.priority).select_from(
        _pairs.join(_next_pair, sa.true())
    )
)
_first_due = (
    sa.select(jobs.c.run_at_ms)
    .where(
        jobs.c.queue == _pairs.c.queue,
        jobs.c.priority == _pairs.c.priority,
        due_states(jobs),
        jobs.c.state == lit("ready"),
        jobs.c.run_at_ms <= p("now_ms", BIGINT),
    )
    .order_by(jobs.c.run_at_ms)
    .limit(sa.literal_column("1"))
    .lateral("first_due")
)
_oldest = (
    sa.select(_pairs.c.queue, sa.func.min(_first_due.c.run_at_ms).label("oldest"))
    .select_from(_pairs.join(_first_due, sa.true()))
    .group_by(_pairs.c.queue)
    .subquery("oldest")
)
QUEUE_STATS: Final = sa.union_all(
    sa.select(lit("c").label("kind"), _counts.c.queue, _counts.c.state, _counts.c.n),
    sa.select(lit("o"), _oldest.c.queue, sa.null(), _oldest.c.oldest),
)
