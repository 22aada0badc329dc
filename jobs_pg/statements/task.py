"""The `task_*` statements: the scheduler's marks, and the fire that moves one with its job.

A task's mark is one `task_marks` row. A fire is ONE autocommit statement: lock the mark, and
only if its watermark is still the one the firer read, enqueue the occurrence's job exactly as
`JOB_ENQUEUE` does and move the mark in the same write. One statement is one transaction, so
the job and the watermark land together or not at all, and the row lock orders two fires of
one task: under READ COMMITTED the second one's `FOR UPDATE` waits for the first to commit and
then re-reads the row as it is, finds the watermark moved and writes nothing.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import C, task_marks
from jobs_pg.statements._build import BIGINT, TEXT, arr, p, unnest
from jobs_pg.statements.job import enqueue_answer, enqueue_insert, notified, wake_cte

#: A mark's columns, in `TaskMark` field order.
MARK_COLUMNS: Final = ("name", "watermark_ms", "fired_ms", "fired_job_id", "fired_at_ms")

# -- TASK_ARM -----------------------------------------------------------------------------------
# Each named task missing a mark gets one at `:now_ms`; then every named mark, in the caller's
# order (`ord`). The inserts go in name order (code points), so two arms of overlapping names
# wait for each other, never in a cycle. A name armed by a concurrent call that committed after
# this statement's snapshot is neither inserted here (its conflict waits for that commit and
# skips) nor visible to this snapshot: its row comes back without a mark, and the driver reads
# those names again in a fresh statement (`TASK_MARKS`), which sees the other's commit.
_names = unnest("names", name=TEXT)
_wanted = sa.select(_names.c.name.collate(C).label("name"), _names.c.ord).cte("wanted")
_armed = (
    pg_insert(task_marks)
    .from_select(
        ["name", "watermark_ms"],
        sa.select(_wanted.c.name, p("now_ms", BIGINT)).order_by(_wanted.c.name),
    )
    .on_conflict_do_nothing(index_elements=[task_marks.c.name])
    .returning(*(task_marks.c[c] for c in MARK_COLUMNS))
    .cte("armed")
)
_stored = task_marks.alias("stored")
TASK_ARM: Final = (
    sa.select(
        _wanted.c.ord,
        _wanted.c.name,
        # A name is either inserted here (not in the snapshot) or stored before (not inserted).
        *(
            sa.case((_armed.c.name.is_not(None), _armed.c[c]), else_=_stored.c[c]).label(c)
            for c in MARK_COLUMNS[1:]
        ),
        sa.or_(_armed.c.name.is_not(None), _stored.c.name.is_not(None)).label("found"),
    )
    .select_from(
        _wanted.outerjoin(_armed, _armed.c.name == _wanted.c.name).outerjoin(
            _stored, _stored.c.name == _wanted.c.name
        )
    )
    .order_by(_wanted.c.ord)
)

# -- TASK_MARKS ---------------------------------------------------------------------------------
# Reads only: one `task_marks_pkey` probe per name.
TASK_MARKS: Final = sa.select(*(task_marks.c[c] for c in MARK_COLUMNS)).where(
    task_marks.c.name == sa.func.any(arr("names", TEXT))
)

# -- TASK_FIRE ----------------------------------------------------------------------------------
# `locked` takes the mark's row lock first (the job insert reads it, so it runs before any
# write): the mark as it is now, waiting for a concurrent fire of the task to commit. The fence
# holds when its watermark is `:expect_ms`; then, and only then:
# * `ins` is JOB_ENQUEUE's insert (the id test, the live key as ON CONFLICT target), and the
#   answer's lookups are JOB_ENQUEUE's too (`existing`, `holder`), so the job is deduped and
#   woken (`wake`, once per slot) exactly as an enqueue would be;
# * `moved` sets the watermark and the fire's record, `fired_job_id` being the enqueue's answer
#   (inserted, existing or holder). When all three are NULL (the key's holder committed after
#   this snapshot: the insert skipped, the lookup cannot see it) nothing is written at all, and
#   the driver runs the statement again, whose fresh snapshot names the holder.
# The answer: no row when the task has no mark; else the mark as locked (the stored state when
# the fence refused), the enqueue's answer and the moved mark (NULL unless the fire landed).
_locked = (
    sa.select(*(task_marks.c[c] for c in MARK_COLUMNS))
    .where(task_marks.c.name == p("task", TEXT))
    .with_for_update(of=task_marks)
    .cte("locked")
)
_fence = (
    sa.select(sa.literal_column("1"))
    .where(_locked.c.watermark_ms == p("expect_ms", BIGINT))
    .exists()
)
_ins = enqueue_insert("ins", _fence)
_outcome = sa.select(*enqueue_answer(_ins)).where(_fence).cte("outcome")
_fired_id = sa.func.coalesce(_outcome.c.inserted, _outcome.c.existing, _outcome.c.holder)
_moved = (
    sa.update(task_marks)
    .where(
        task_marks.c.name == p("task", TEXT),
        # Under the lock `locked` holds; spelled again so the write never depends on the plan.
        task_marks.c.watermark_ms == p("expect_ms", BIGINT),
        _fired_id.is_not(None),
    )
    .values(
        watermark_ms=p("watermark_ms", BIGINT),
        fired_ms=p("occurrence_ms", BIGINT),
        fired_job_id=_fired_id,
        fired_at_ms=p("now_ms", BIGINT),
    )
    .returning(*(task_marks.c[c] for c in MARK_COLUMNS))
    .cte("moved")
)
TASK_FIRE: Final = sa.select(
    *(_locked.c[c] for c in MARK_COLUMNS),
    _outcome.c.inserted,
    _outcome.c.existing,
    _outcome.c.holder,
    *(_moved.c[c].label(f"moved_{c}") for c in MARK_COLUMNS),
    notified(wake_cte(_ins, "wake")),
).select_from(
    _locked.outerjoin(_outcome, sa.true()).outerjoin(_moved, sa.true()),
)
