"""The `sweep_*` statements: the ledger of what factories swept, one entry per run.

Each is ONE autocommit statement, so its fence and its write are one transaction. The fence is
`STEP_PUT`'s, narrowed to the run: the fence's job row is read `FOR SHARE` while `running` with
those `claims` and that worker AND in run `:run_id` (a run writes only its own entry). A
concurrent ack, nack, cancel or re-claim of that row then waits for this statement, or this one
waits for it and re-checks the fence on the row it left (READ COMMITTED's re-check of a locked
row) and finds it broken: a run that lost its claim records nothing. (A row's run id moves only
by a requeue, which takes no running row.) Lock order, every statement: the job row first, then
ledger rows (in run_id order).
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import jobs, lit, steps, sweeps
from jobs_pg.statements._build import BIGINT, INT, TEXT, p

#: An entry's columns, in `SweepRecord` field order.
RECORD_COLUMNS: Final = (
    "run_id",
    "job_id",
    "name",
    "scope",
    "environment",
    "kind",
    "checksum",
    "status",
    "batches",
    "rows",
    "errors",
    "expected",
    "cursor_json",
    "error",
    "started_at_ms",
    "updated_at_ms",
    "finished_at_ms",
)
_record = [sweeps.c[c] for c in RECORD_COLUMNS]


def _held(name: str) -> sa.CTE:
    """The fence's job row, locked FOR SHARE while the fence holds for the run (`:job_id`,
    `:claims`, `:worker_id`, and the row's run is `:run_id`); no row when it does not."""
    return (
        sa.select(jobs.c.id)
        .where(
            jobs.c.id == p("job_id", TEXT),
            jobs.c.state == lit("running"),
            jobs.c.claims == p("claims", BIGINT),
            jobs.c.claimed_by == p("worker_id", TEXT),
            jobs.c.run_id == p("run_id", TEXT),
        )
        .with_for_update(of=jobs, read=True)
        .cte(name)
    )


def _holds(held: sa.CTE) -> sa.Exists:
    return sa.select(sa.literal_column("1")).select_from(held).exists()


# -- SWEEP_START --------------------------------------------------------------------------------
# `held` is the fence. `locked` then locks, in run_id order, every entry of the sweep (same name,
# scope, environment, checksum: `sweeps_key`) and the run's own entry, FOR NO KEY UPDATE — the
# lock `sweep_finish`'s and `sweep_advance`'s UPDATEs take. So a start and a finish completing
# another run of the sweep go one after the other: the start either waits for the finish and
# reads the entry as it left it (`completed`: blocked), or holds it until the start commits,
# and no reader ever sees the finish before the start it did not block. Two starts of one sweep
# lock the same rows in the same order and never deadlock.
# `blocker`: among them, another run's completed entry, the one finished last (ties: the greater
# run_id). Only without one, `written` inserts the run's entry or, when it has one (ON CONFLICT:
# the row `locked` holds), makes a `failed` or `running` entry `running` again with no error and
# no end; a `completed` one is left untouched (no write) and answered from `locked`.
# The answer: one row, `held`, then the tag of what follows — 'b' the blocker, 'w' the entry
# written, 'o' the run's own entry left as it was — or NULLs.
_start_held = _held("start_held")
_start_fence = _holds(_start_held)
_same_sweep = sa.and_(
    sweeps.c.name == p("name", TEXT),
    sweeps.c.scope == p("scope", TEXT),
    sweeps.c.environment == p("environment", TEXT),
    sweeps.c.checksum == p("checksum", TEXT),
)
_locked = (
    sa.select(*_record)
    .where(_start_fence, sa.or_(_same_sweep, sweeps.c.run_id == p("run_id", TEXT)))
    .order_by(sweeps.c.run_id)
    .with_for_update(of=sweeps, key_share=True)
    .cte("locked")
)
_blocker = (
    sa.select(*_locked.c)
    .where(_locked.c.status == lit("completed"), _locked.c.run_id != p("run_id", TEXT))
    .order_by(_locked.c.finished_at_ms.desc(), _locked.c.run_id.desc())
    .limit(1)
    .cte("blocker")
)
_blocked = sa.select(sa.literal_column("1")).select_from(_blocker).exists()
_new_entry = sa.select(
    p("run_id", TEXT),
    p("job_id", TEXT),
    p("name", TEXT),
    p("scope", TEXT),
    p("environment", TEXT),
    p("kind", TEXT),
    p("checksum", TEXT),
    lit("running"),
    sa.literal(0, BIGINT),
    sa.literal(0, BIGINT),
    sa.literal(0, BIGINT),
    p("expected", BIGINT),
    sa.cast(sa.null(), TEXT),
    sa.cast(sa.null(), TEXT),
    p("now_ms", BIGINT),
    p("now_ms", BIGINT),
    sa.cast(sa.null(), BIGINT),
).where(_start_fence, ~_blocked)
_written = (
    pg_insert(sweeps)
    .from_select(list(RECORD_COLUMNS), _new_entry)
    .on_conflict_do_update(
        index_elements=[sweeps.c.run_id],
        set_={
            "status": lit("running"),
            "error": sa.null(),
            "finished_at_ms": sa.null(),
            "updated_at_ms": p("now_ms", BIGINT),
        },
        where=sweeps.c.status != lit("completed"),
    )
    .returning(*_record)
    .cte("written")
)
_answers = sa.union_all(
    sa.select(sa.literal("b", TEXT).label("tag"), *_blocker.c),
    sa.select(sa.literal("w", TEXT).label("tag"), *_written.c),
    sa.select(sa.literal("o", TEXT).label("tag"), *_locked.c).where(
        _locked.c.run_id == p("run_id", TEXT), _locked.c.status == lit("completed")
    ),
).subquery("answers")
SWEEP_START: Final = sa.select(
    _start_fence.label("held"), _answers.c.tag, *(_answers.c[c] for c in RECORD_COLUMNS)
).select_from(
    sa.select(sa.literal(1, INT).label("one")).subquery("one").outerjoin(_answers, sa.true())
)

# -- SWEEP_ADVANCE ------------------------------------------------------------------------------
# One UPDATE of the run's entry, fenced, moving only from `batches = :batch - :span` (the
# advance's first batch is the one after the entry's last). Two advances of one window at once:
# the second waits for the first's row lock, re-checks its WHERE on the row the first left
# (`batches` moved on) and writes nothing. Answers 1 when it moved, else 0.


def _moved(held: sa.CTE, name: str) -> sa.CTE:
    """The run's running entry moved by the `:span` batches up to `:batch` (from
    `:batch - :span`) while `held` holds."""
    return (
        sa.update(sweeps)
        .where(
            sweeps.c.run_id == p("run_id", TEXT),
            sweeps.c.status == lit("running"),
            sweeps.c.batches == p("batch", BIGINT) - p("span", BIGINT),
            _holds(held),
        )
        .values(
            batches=p("batch", BIGINT),
            rows=sweeps.c.rows + p("rows", BIGINT),
            errors=sweeps.c.errors + p("errors", BIGINT),
            cursor_json=p("cursor_json", TEXT),
            updated_at_ms=p("now_ms", BIGINT),
        )
        .returning(sweeps.c.run_id)
        .cte(name)
    )


SWEEP_ADVANCE: Final = sa.select(sa.func.count().label("moved")).select_from(
    _moved(_held("advance_held"), "advanced")
)

# -- SWEEP_CHECKPOINT ---------------------------------------------------------------------------
# A step's record and its advance (its batches: one, or a backfill's window) in ONE statement
# under ONE fence (`held`, the job row
# FOR SHARE, as above): the step inserted under the run (a step recorded already keeps its first
# record, as STEP_PUT) and the entry moved as SWEEP_ADVANCE moves it. Both data-modifying CTEs
# run in the statement's one snapshot and commit together: a batch is never recorded without
# being counted, for one durable commit. Answers 1 when the fence held, else 0 (no write).
# Committed with the session's `synchronous_commit`, never `off`: a checkpoint lost in a server
# crash while its worker lives on is followed by the next batch's, which records its step but
# cannot move the entry (`batches = :batch - :span` fails), so the ledger's count would stay short
# for the rest of the run (docs/factories.md, "Measured").
_checkpoint_held = _held("checkpoint_held")
_checkpoint_step = (
    pg_insert(steps)
    .from_select(
        ["run_id", "name", "output_json", "recorded_at_ms"],
        sa.select(
            p("run_id", TEXT),
            p("step_name", TEXT),
            p("output_json", TEXT),
            p("step_now_ms", BIGINT),
        ).select_from(_checkpoint_held),
    )
    .on_conflict_do_nothing(index_elements=[steps.c.run_id, steps.c.name])
    .cte("checkpoint_step")
)
SWEEP_CHECKPOINT: Final = (
    sa.select(sa.func.count().label("held"))
    .select_from(_checkpoint_held)
    .add_cte(_checkpoint_step)
    .add_cte(_moved(_checkpoint_held, "checkpoint_moved"))
)

# -- SWEEP_FINISH -------------------------------------------------------------------------------
# One UPDATE of the run's entry while it is `running`, fenced. A finish racing another finish or
# a start of the same sweep: the row lock orders them (see SWEEP_START). Answers 1 or 0.
_finish_held = _held("finish_held")
_finished = (
    sa.update(sweeps)
    .where(
        sweeps.c.run_id == p("run_id", TEXT),
        sweeps.c.status == lit("running"),
        _holds(_finish_held),
    )
    .values(
        status=p("status", TEXT),
        error=p("error", TEXT),
        finished_at_ms=p("now_ms", BIGINT),
        updated_at_ms=p("now_ms", BIGINT),
    )
    .returning(sweeps.c.run_id)
    .cte("finished")
)
SWEEP_FINISH: Final = sa.select(sa.func.count().label("moved")).select_from(_finished)

# -- SWEEP_LIST ---------------------------------------------------------------------------------
# Newest first, read backwards along an index: `sweeps_started` for every entry (`:name` NULL),
# `sweeps_name_started` for one name's. Two branches, each switched off by a test of `:name`
# alone, so even a generic plan reads exactly `:limit` entries of the one index that serves.
_newest = (sweeps.c.started_at_ms.desc(), sweeps.c.run_id.desc())
SWEEP_LIST: Final = sa.union_all(
    sa.select(*_record).where(p("name", TEXT).is_(None)).order_by(*_newest).limit(p("limit", INT)),
    sa.select(*_record)
    .where(sweeps.c.name == p("name", TEXT))
    .order_by(*_newest)
    .limit(p("limit", INT)),
)
