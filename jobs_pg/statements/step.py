"""The `step_*` statements: a run's recorded steps, read at once and written fenced."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import jobs, lit, steps
from jobs_pg.statements._build import BIGINT, TEXT, p, unnest

# -- STEP_LIST ----------------------------------------------------------------------------------
# One range read of `steps_pkey`: every step of the run (the public method sorts).
STEP_LIST: Final = sa.select(
    steps.c.run_id, steps.c.name, steps.c.output_json, steps.c.recorded_at_ms
).where(steps.c.run_id == p("run_id", TEXT))

# -- STEP_PUT -----------------------------------------------------------------------------------
# Each item's row is read FOR SHARE under its fence, in id order (the settles' lock order): a
# concurrent ack, nack or cancel of that row waits for this statement, or this one re-checks the
# fence on the row it wrote and finds it broken — so a cancelled or lease-lost run records
# nothing. The held items insert `(run_id, name)` in the caller's order; a step recorded already
# (earlier, or by an earlier item of this batch) keeps its first record (DO NOTHING). Answers the
# ordinal of each item whose fence held.
_puts = unnest(
    "s", id=TEXT, claims=BIGINT, worker_id=TEXT, name=TEXT, output_json=TEXT, now_ms=BIGINT
)
_in_order = sa.select(*_puts.c).order_by(_puts.c.id).subquery("puts_sorted")
_row = (
    sa.select(jobs.c.run_id)
    .where(
        jobs.c.id == _in_order.c.id,
        jobs.c.state == lit("running"),
        jobs.c.claims == _in_order.c.claims,
        jobs.c.claimed_by == _in_order.c.worker_id,
    )
    .with_for_update(of=jobs, read=True)
    .lateral("put_row")
)
_held = (
    sa.select(
        _in_order.c.ord,
        _row.c.run_id,
        _in_order.c.name,
        _in_order.c.output_json,
        _in_order.c.now_ms,
    )
    .select_from(_in_order.join(_row, sa.true()))
    .cte("held")
)
_recorded = (
    pg_insert(steps)
    .from_select(
        ["run_id", "name", "output_json", "recorded_at_ms"],
        sa.select(_held.c.run_id, _held.c.name, _held.c.output_json, _held.c.now_ms).order_by(
            _held.c.ord
        ),
    )
    .on_conflict_do_nothing(index_elements=[steps.c.run_id, steps.c.name])
    .cte("recorded")
)
STEP_PUT: Final = sa.select(_held.c.ord).add_cte(_recorded)
