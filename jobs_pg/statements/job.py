"""The `job_*` statements, one per driver method (plus the enqueue's wake), named after it.

Every statement names its columns; every value is a bound parameter; states are SQL literals so
the partial indexes' predicates are provably implied (see `jobs_pg.schema`). Batched settles
bind one array per field and `unnest` them, so one round-trip settles a whole list, each item
still fenced by its own claim.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_core.semantics import SAGA_STEP, UNWOUND_STATES
from jobs_pg.schema import C, jobs, lit, pauses, steps, wakes, workers
from jobs_pg.statements._build import (
    BIGINT,
    BOOL,
    INT,
    LIVE_KEY_TARGET,
    LIVE_KEY_WHERE,
    NEW_JOB_ARRAYS,
    NO_WAIT,
    SMALLINT,
    TEXT,
    arr,
    due_states,
    ex,
    live,
    live_key_matches,
    p,
    unnest,
)
from jobs_pg.statements.attempts import (
    ack_attempts,
    attempt_entry,
    attempts_appended,
    attempts_read,
)
from jobs_pg.statements.counter import minute_of, moved

#: The columns a `JobRecord` is built from, in its field order.
RECORD_COLUMNS: Final = (
    "id",
    "run_id",
    "name",
    "queue",
    "tenant_id",
    "idempotency_key",
    "input_json",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "claims",
    "claimed_by",
    "lease_until_ms",
    "run_at_ms",
    "created_at_ms",
    "finished_at_ms",
    "last_error",
    "progress_json",
    "result_json",
    "enqueued_by",
    "traceparent",
    # -- acts-for (migration 0017); `JobRecord` takes it by name --
    "acts_for",
)

#: A row's flows fields (`parent_id`, `batch_id`, its `join`), read after `WAIT_COLUMNS` by
#: `JOB_GET_MANY` and after the claimed columns by `JOB_CLAIM`'s claimed rows.
FLOW_COLUMNS: Final = (
    "parent_id",
    "batch_id",
    "join_total",
    "join_pending",
    "join_failed",
    "join_policy",
)

# -- attempts --
#: A row's latest claim time and attempt history (`jobs_core.attempts`, the implicit entry of a
#: `completed` row spelled out: `attempts_read`), read after `FLOW_COLUMNS` by `JOB_GET_MANY`
#: and `JOB_WATCH` (never by the listings).
ATTEMPT_COLUMNS: Final = (jobs.c.claimed_at_ms, attempts_read().label("attempts"))

#: A row's event wait (NULL unless it is `parked` with one), read after `RECORD_COLUMNS` by
#: `JOB_GET_MANY`: together they make its `JobRecord.wait`.
WAIT_COLUMNS: Final = (
    "wait_event",
    "wait_match_json",
    "wait_since_ms",
    "wait_tenant_id",
    "wait_until_ms",
)

_INSERT_COLUMNS: Final = (
    "id",
    "run_id",
    "name",
    "queue",
    "tenant_id",
    "idempotency_key",
    "input_json",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "claims",
    "run_at_ms",
    "created_at_ms",
    "enqueued_by",
    "traceparent",
    "parent_id",
    "batch_id",
    "acts_for",  # acts-for
)

#: `NEW_JOB_ARRAYS` and the flows links: the rows of a job batch (the outbox stages no links).
_JOB_ARRAYS: Final[dict[str, sa.types.TypeEngine[Any]]] = {
    **NEW_JOB_ARRAYS,
    "parent_id": TEXT,
    "batch_id": TEXT,
}


def _fenced(t: sa.FromClause) -> sa.ColumnElement[bool]:
    """The fence: the row is running under exactly the claim the item presents."""
    return sa.and_(
        jobs.c.id == t.c.id,
        jobs.c.state == lit("running"),
        jobs.c.claims == t.c.claims,
        jobs.c.claimed_by == t.c.worker_id,
    )


def _ids_of(cte: sa.CTE) -> sa.ColumnElement[Any]:
    """The CTE's ids as one text[] value (an expression, so `= ANY(...)` is an index lookup)."""
    return sa.cast(sa.select(sa.func.array_agg(cte.c.id)).scalar_subquery(), pg.ARRAY(sa.Text))


def _not_paused_name(t: sa.FromClause) -> sa.ColumnElement[bool]:
    return ~ex(pauses.c.kind == lit("name"), pauses.c.value == t.c.name)


def wake_cte(source: sa.CTE, name: str) -> sa.CTE:
    """Record this slot for each queue that got a due row, unless this slot is already recorded.

    The NOT EXISTS is a plain snapshot read: in the common case (the queue already notified in
    this slot) the enqueue takes no lock and writes nothing here. Two enqueues racing on a new
    slot both reach the upsert; the second waits for the first's row lock, re-reads the row, sees
    the slot already set and returns nothing — so each queue notifies at most once per slot.
    `:slot` NULL (wake disabled) writes nothing.
    """
    excluded = pg_insert(wakes).excluded
    # The distinct queues first, then one probe of `wakes` each (a batch of a thousand rows of
    # one queue probed it a thousand times).
    queues = (
        sa.select(source.c.queue)
        .where(p("slot", BIGINT).is_not(None), source.c.run_at_ms <= source.c.created_at_ms)
        .distinct()
        .subquery("due_queues")
    )
    due = (
        sa.select(queues.c.queue, p("slot", BIGINT))
        .where(~ex(wakes.c.queue == queues.c.queue, wakes.c.slot == p("slot", BIGINT)))
        # Wake rows are locked in queue order, as every statement that writes them does.
        .order_by(queues.c.queue)
    )
    return (
        pg_insert(wakes)
        .from_select(["queue", "slot"], due)
        .on_conflict_do_update(
            index_elements=[wakes.c.queue],
            set_={"slot": excluded.slot},
            where=wakes.c.slot != excluded.slot,
        )
        .returning(wakes.c.queue)
        .cte(name)
    )


def notified(wake: sa.CTE) -> sa.Label[Any]:
    """NOTIFY once per queue the wake CTE recorded (delivered at commit, so never early)."""
    return (
        sa.select(
            sa.func.count(
                sa.func.pg_notify(p("channel", TEXT), sa.literal_column("'q:'") + wake.c.queue)
            )
        )
        .scalar_subquery()
        .label("notified")
    )


# -- JOB_ENQUEUE --------------------------------------------------------------------------------
# One round-trip, at most two writes (the row, and the queue's wake slot once per slot). The id
# test comes first (an id naming any row, live or finished, inserts nothing); the live key is
# the ON CONFLICT target, so a concurrent enqueue of the same key cannot slip between a lookup
# and the insert. The answer columns read the statement's snapshot: `existing` says the id was
# taken, `holder` names the live row that holds the key. A holder committed by a concurrent
# enqueue after this snapshot is invisible here; the driver then asks once more.
_ENQ_VALUES: Final = {
    "id": p("id", TEXT),
    "run_id": p("run_id", TEXT),
    "name": p("name", TEXT),
    "queue": p("queue", TEXT),
    "tenant_id": p("tenant_id", TEXT),
    "idempotency_key": p("idempotency_key", TEXT),
    "input_json": p("input_json", TEXT),
    "state": lit("ready"),
    "priority": p("priority", INT),
    "attempt": sa.literal_column("0"),
    "max_attempts": p("max_attempts", INT),
    "claims": sa.literal_column("0"),
    "run_at_ms": p("run_at_ms", BIGINT),
    "created_at_ms": p("created_at_ms", BIGINT),
    "enqueued_by": p("enqueued_by", TEXT),
    "traceparent": p("traceparent", TEXT),
    "parent_id": p("parent_id", TEXT),
    "batch_id": p("batch_id", TEXT),
    "acts_for": p("acts_for", TEXT),  # acts-for
}


def enqueue_insert(cte_name: str, *guard: sa.ColumnElement[bool]) -> sa.CTE:
    """JOB_ENQUEUE's insert of the bound job (`:id`, `:name`, …) as a CTE, made only when every
    `guard` holds too (`TASK_FIRE` fences it on its task's watermark); returns the row's `id`,
    `queue`, `run_at_ms`, `created_at_ms`."""
    return (
        pg_insert(jobs)
        .from_select(
            list(_INSERT_COLUMNS),
            sa.select(*(_ENQ_VALUES[c] for c in _INSERT_COLUMNS)).where(
                *guard, ~ex(jobs.c.id == p("id", TEXT))
            ),
        )
        .on_conflict_do_nothing(index_elements=LIVE_KEY_TARGET, index_where=LIVE_KEY_WHERE)
        .returning(jobs.c.id, jobs.c.queue, jobs.c.run_at_ms, jobs.c.created_at_ms)
        .cte(cte_name)
    )


def enqueue_answer(ins: sa.CTE) -> tuple[sa.Label[Any], sa.Label[Any], sa.Label[Any]]:
    """What an enqueue through `ins` did, read from the statement's snapshot: `inserted` (the
    id), else `existing` (the id names a stored row), else `holder` (the live row holding the
    key; NULL when it was committed after the snapshot — ask again in a fresh one)."""
    held = jobs.alias("held")
    inserted = sa.select(ins.c.id).scalar_subquery()
    return (
        inserted.label("inserted"),
        # The lookups sit in CASE so that, on the common path (inserted), neither probe runs: an
        # InitPlan is evaluated only when its value is first needed.
        sa.case(
            (
                inserted.is_(None),
                sa.select(jobs.c.id).where(jobs.c.id == p("id", TEXT)).scalar_subquery(),
            )
        ).label("existing"),
        sa.case(
            (
                inserted.is_(None),
                sa.select(held.c.id)
                .where(
                    live_key_matches(
                        held, p("name", TEXT), p("tenant_id", TEXT), p("idempotency_key", TEXT)
                    )
                )
                .scalar_subquery(),
            )
        ).label("holder"),
    )


_enq_ins = enqueue_insert("ins")
_enq_answer = enqueue_answer(_enq_ins)
JOB_ENQUEUE: Final = sa.select(*_enq_answer, notified(wake_cte(_enq_ins, "wake")))

# -- JOB_ENQUEUE_QUIET --------------------------------------------------------------------------
# JOB_ENQUEUE without the wake: the driver runs it when this process already knows the queue's
# current wake slot is spent (it notified, or found the slot recorded, earlier in the slot), so
# a busy enqueuer skips even the wake table's read. Skipping only ever removes a NOTIFY that
# would not have been sent, so the once-per-slot bound and its delivery are unchanged.
JOB_ENQUEUE_QUIET: Final = sa.select(*_enq_answer)

# -- JOB_ENQUEUE_CARRIED ------------------------------------------------------------------------
# JOB_ENQUEUE with its queue's NOTIFY whatever the wakes row says: the driver runs it for a due
# job that would go in quiet (its slot's NOTIFY already out) when it may send a trailing NOTIFY
# now (`jobs_core.wake.Trails.may_carry`): the job's own commit carries that wake, so it is not
# one more transaction at the slot's end. A deduped enqueue inserts nothing and notifies nobody.
JOB_ENQUEUE_CARRIED: Final = sa.select(*_enq_answer, notified(_enq_ins))

# -- JOB_ENQUEUE_MANY ---------------------------------------------------------------------------
# One statement per chunk (the driver splits a chunk where an id repeats, so ids are unique per
# statement). Rows are inserted in batch order with the SAME conflict target as JOB_ENQUEUE:
# Postgres checks each proposed row against rows this very statement already inserted, so a
# later record of the batch dedupes against an earlier one exactly as sequential enqueues would.
# Per record the answer says: id already taken (`existed`), inserted, or the holder of its key —
# an earlier record of this batch (`batch_holder`) or a live row already stored (`holder`).
# The lookups into `jobs` are correlated scalar subqueries on purpose: each is one index probe
# per record (`jobs_pkey`, `jobs_live_key`), whatever the table's size — a join would let the
# planner hash the whole table — and the holder probe sits in a CASE, so it runs only for the
# records that were neither inserted nor deduped by id or by the batch itself.
# The fields of `SHARED_COLUMNS` come in one of two ways: as arrays (one value per record), or,
# when every record of the batch holds the same value (a batch from `Jobs.enqueue_many` does),
# as one scalar `:<field>_all` with the array NULL. `coalesce` takes whichever was sent (a NULL
# array unnests as NULLs; a NULL scalar leaves a record's own NULL), so the client dumps four
# arrays instead of thirteen and the rows are the same either way.
SHARED_COLUMNS: Final = (
    "name",
    "queue",
    "tenant_id",
    "priority",
    "max_attempts",
    "run_at_ms",
    "created_at_ms",
    "enqueued_by",
    "traceparent",
    "parent_id",
    "batch_id",
)
_rows_src = unnest("r", **_JOB_ARRAYS)
_taken = jobs.alias("taken")
_rows = sa.select(
    *(
        sa.func.coalesce(c, p(f"{c.name}_all", _JOB_ARRAYS[c.name])).label(c.name)
        if c.name in SHARED_COLUMNS
        else c
        for c in _rows_src.c
    ),
    sa.select(_taken.c.id).where(_taken.c.id == _rows_src.c.id).scalar_subquery().label("taken"),
).cte("rows")
_many_values: dict[str, Any] = {c: _rows.c[c] for c in _INSERT_COLUMNS if c in _rows.c}
_many_values.update(
    state=lit("ready"), attempt=sa.literal_column("0"), claims=sa.literal_column("0")
)
_many_ins = (
    pg_insert(jobs)
    .from_select(
        list(_INSERT_COLUMNS),
        sa.select(*(_many_values[c] for c in _INSERT_COLUMNS))
        .where(_rows.c.taken.is_(None))
        # Insert (and so lock each key's index entry) in namespace order, never the caller's:
        # two batches over the same keys in different orders then wait, never deadlock. Within
        # one key the caller's order stays (`ord`), so the first record of a key still wins.
        # COLLATE "C" (code points, as the driver sorts a multi-statement batch): the unnested
        # text has the database's collation, whose comparisons cost several times more.
        .order_by(
            _rows.c.name.collate(C),
            sa.func.coalesce(_rows.c.tenant_id, sa.literal_column("''")).collate(C),
            _rows.c.idempotency_key.collate(C),
            _rows.c.ord,
        ),
    )
    .on_conflict_do_nothing(index_elements=LIVE_KEY_TARGET, index_where=LIVE_KEY_WHERE)
    .returning(
        jobs.c.id,
        jobs.c.name,
        jobs.c.tenant_id,
        jobs.c.idempotency_key,
        jobs.c.queue,
        jobs.c.run_at_ms,
        jobs.c.created_at_ms,
    )
    .cte("ins")
)
_many_wake = wake_cte(_many_ins, "wake")
_mine = _many_ins.alias("mine")
_twin = _many_ins.alias("twin")
_holder = jobs.alias("holder")
JOB_ENQUEUE_MANY: Final = (
    sa.select(
        _rows.c.ord,
        (_rows.c.taken.is_not(None)).label("existed"),
        (_mine.c.id.is_not(None)).label("inserted"),
        _twin.c.id.label("batch_holder"),
        sa.case(
            (
                sa.and_(_rows.c.taken.is_(None), _mine.c.id.is_(None), _twin.c.id.is_(None)),
                sa.select(_holder.c.id)
                .where(
                    live_key_matches(
                        _holder, _rows.c.name, _rows.c.tenant_id, _rows.c.idempotency_key
                    )
                )
                .scalar_subquery(),
            ),
        ).label("holder"),
        notified(_many_wake),
    )
    .select_from(
        _rows.outerjoin(_mine, _mine.c.id == _rows.c.id).outerjoin(
            _twin,
            sa.and_(
                _twin.c.name == _rows.c.name,
                sa.func.coalesce(_twin.c.tenant_id, sa.literal_column("''"))
                == sa.func.coalesce(_rows.c.tenant_id, sa.literal_column("''")),
                _twin.c.idempotency_key == _rows.c.idempotency_key,
            ),
        )
    )
    .order_by(_rows.c.ord)
)

# -- JOB_ENQUEUE_MANY_WAKE ----------------------------------------------------------------------
# The wake of an `enqueue_many` that spans several statements in one transaction: its chunks run
# with `:slot` NULL (no wake row touched, so no wake lock is held while keys are still being
# locked) and this last statement records the slot of every queue that got a due row, in queue
# order. Its NOTIFYs are delivered at commit, with the rows.
_wake_src = unnest("wq", queue=TEXT)
_wake_rows = sa.select(
    _wake_src.c.queue,
    sa.literal_column("0").label("run_at_ms"),
    sa.literal_column("0").label("created_at_ms"),
).cte("wake_rows")
JOB_ENQUEUE_MANY_WAKE: Final = sa.select(notified(wake_cte(_wake_rows, "wake")))

# -- JOB_KEY_HOLDER -----------------------------------------------------------------------------
# The second look an enqueue takes only when a concurrent enqueue's row, committed after its
# snapshot, won the key: a fresh snapshot names it.
JOB_KEY_HOLDER: Final = sa.select(jobs.c.id).where(
    live_key_matches(jobs, p("name", TEXT), p("tenant_id", TEXT), p("idempotency_key", TEXT))
)

# The claim's custom plan is the generic one, but a fresh plan costs more server time than the
# claim's execution (measured in docs/pg.md, "Where the time goes").
GENERIC_PLANS: Final = frozenset({"JOB_CLAIM"})
# The claim: over 4 KiB (`sqltext.compile_all`), and several of its parameters bound more than
# once. The settles: each binds its ids twice (the lock, the update), and they run once a batch.
# The lone enqueue's three: sent as one `wire.Round` (`$n` placeholders) outside a transaction.
RAW_TEXT: Final = frozenset(
    {
        "JOB_CLAIM",
        "JOB_ACK",
        "JOB_NACK",
        "JOB_HEARTBEAT",
        "JOB_PROGRESS",
        "JOB_ENQUEUE",
        "JOB_ENQUEUE_QUIET",
        "JOB_ENQUEUE_CARRIED",
    }
)
# With the driver's `lazy_claim`, the claim commits without waiting for its WAL to reach the
# disk (`synchronous_commit = off` for its own transaction): a job's pickup then waits for one
# flush (its enqueue's), not two. What a crash can undo is only a claim nothing durable has
# followed yet: WAL is flushed in order, so the first settle, heartbeat or step of the claim (all
# fenced on it, all waiting for their flush) makes the claim durable too. An undone claim leaves
# its job ready with its claim count as before, to be claimed again: its body, already started,
# runs again (at-least-once, as after a worker crash). Off by default: a crash just after a claim
# must not run a body twice (tests/pg/test_outage.py, "completed once" across an immediate
# shutdown).
LAZY_COMMIT: Final = frozenset({"JOB_CLAIM"})

# -- JOB_CLAIM ----------------------------------------------------------------------------------
# ONE statement: beat the registry (optional), bury lapsed final attempts, pick and lease.
# * `due` walks each asked, unpaused queue's `jobs_due` index in claim order through a LATERAL
#   (Postgres 15 cannot merge one ordered index scan over `queue = ANY(...)`), locking with
#   SKIP LOCKED so concurrent claimers never wait on each other nor take the same row.
# * `lapsed` adds running rows whose lease ended on a non-final attempt (`jobs_lease` index) by
#   `:lapsed_by` (`semantics.lapsed_by`: now, or the earlier bound of a worker back from an
#   outage).
# * `picked` keeps the first `:limit` of both by (priority, run_at, id) — id in COLLATE "C",
#   i.e. code-point order, as the memory driver compares.
# * `buried` moves running rows whose lease lapsed (by `:lapsed_by`) on the final attempt to
#   dead/failed; it ignores pauses (burying is bookkeeping, not work) and touches rows disjoint
#   from `picked`.
# The claimed and buried rows come back in one result (`kind` tells them apart); the driver
# orders them (claimed by claim order, buried by id).
_q = (
    sa.func.unnest(arr("queues", TEXT))
    .table_valued(sa.column("queue", TEXT))
    .render_derived(name="q", with_types=False)
)
_due_scan = (
    sa.select(jobs.c.id, jobs.c.priority, jobs.c.run_at_ms)
    .where(
        jobs.c.queue == _q.c.queue,
        due_states(jobs),
        jobs.c.run_at_ms <= p("now_ms", BIGINT),
        _not_paused_name(jobs),
    )
    .order_by(jobs.c.priority, jobs.c.run_at_ms, jobs.c.id)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True, of=jobs)
    .lateral("due_scan")
)
_due = (
    sa.select(_due_scan.c.id, _due_scan.c.priority, _due_scan.c.run_at_ms)
    .select_from(_q.join(_due_scan, sa.true()))
    .where(~ex(pauses.c.kind == lit("queue"), pauses.c.value == _q.c.queue))
    .cte("due")
)
_queue_unpaused = ~ex(pauses.c.kind == lit("queue"), pauses.c.value == jobs.c.queue)
_lapsed = (
    sa.select(jobs.c.id, jobs.c.priority, jobs.c.run_at_ms)
    .where(
        jobs.c.state == lit("running"),
        jobs.c.queue == sa.func.any(arr("queues", TEXT)),
        jobs.c.lease_until_ms <= p("lapsed_by", BIGINT),
        jobs.c.attempt < jobs.c.max_attempts,
        _not_paused_name(jobs),
        _queue_unpaused,
    )
    .order_by(jobs.c.priority, jobs.c.run_at_ms, jobs.c.id)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True, of=jobs)
    .cte("lapsed")
)
_cand = sa.union_all(
    sa.select(_due.c.id, _due.c.priority, _due.c.run_at_ms),
    sa.select(_lapsed.c.id, _lapsed.c.priority, _lapsed.c.run_at_ms),
).subquery("cand")
_picked = (
    sa.select(_cand.c.id)
    .order_by(_cand.c.priority, _cand.c.run_at_ms, _cand.c.id)
    .limit(p("limit", INT))
    .cte("picked")
)
# -- attempts -- the entry of a lapsed claim that a claim reclaims or buries.
_abandoned_entry = attempt_entry(
    p("now_ms", BIGINT),
    lit("abandoned"),
    p("abandoned_code", TEXT),
    p("abandoned_message", TEXT),
)
_claimed = (
    sa.update(jobs)
    # `= ANY(array of the picked ids)` makes the UPDATE a primary-key lookup per picked row; a
    # join to the CTE lets the planner hash-join against a sequential scan of every job.
    .where(jobs.c.id == sa.func.any(_ids_of(_picked)))
    .values(
        state=lit("running"),
        attempt=jobs.c.attempt + sa.literal_column("1"),
        claims=jobs.c.claims + sa.literal_column("1"),
        claimed_by=p("worker_id", TEXT),
        lease_until_ms=p("lease_until_ms", BIGINT),
        # A parked row's wait ends when it is claimed (its timeout came first).
        **NO_WAIT,
        # -- attempts -- a reclaimed (running) row's lapsed claim ends abandoned.
        claimed_at_ms=p("now_ms", BIGINT),
        attempts=sa.case(
            (jobs.c.state == lit("running"), attempts_appended(_abandoned_entry)),
            else_=jobs.c.attempts,
        ),
    )
    .returning(
        jobs.c.id,
        jobs.c.run_id,
        jobs.c.name,
        jobs.c.queue,
        jobs.c.tenant_id,
        jobs.c.idempotency_key,
        jobs.c.input_json,
        jobs.c.state,
        jobs.c.priority,
        jobs.c.attempt,
        jobs.c.max_attempts,
        jobs.c.claims,
        jobs.c.run_at_ms,
        jobs.c.created_at_ms,
        jobs.c.enqueued_by,
        jobs.c.traceparent,
        *(jobs.c[c] for c in FLOW_COLUMNS[2:]),
    )
    .cte("claimed")
)
_exhausted = (
    sa.select(jobs.c.id)
    .where(
        jobs.c.state == lit("running"),
        jobs.c.queue == sa.func.any(arr("queues", TEXT)),
        jobs.c.lease_until_ms <= p("lapsed_by", BIGINT),
        jobs.c.attempt >= jobs.c.max_attempts,
    )
    .with_for_update(skip_locked=True, of=jobs)
    .cte("exhausted")
)
_buried = (
    sa.update(jobs)
    .where(jobs.c.id == sa.func.any(_ids_of(_exhausted)))
    .values(
        state=sa.case(
            (jobs.c.name == sa.func.any(arr("drop_exhausted", TEXT)), lit("failed")),
            else_=lit("dead"),
        ),
        finished_at_ms=p("now_ms", BIGINT),
        lease_until_ms=sa.null(),
        last_error=p("lapsed_error", TEXT),
        attempts=attempts_appended(_abandoned_entry),  # -- attempts --
    )
    .returning(jobs.c.id, jobs.c.name, jobs.c.queue, jobs.c.state)
    .cte("buried")
)
# Each buried row moves its outcome's counter (dead: dead-lettered, failed: dropped) in the
# minute of this claim, on the claiming worker's shard.
_buried_counted = moved(
    _buried,
    "buried_counted",
    name=_buried.c.name,
    queue=_buried.c.queue,
    bucket_ms=minute_of(p("now_ms", BIGINT)),
    shard=p("shard", SMALLINT),
    outcomes={
        "dead_lettered": _buried.c.state == lit("dead"),
        "dropped": _buried.c.state == lit("failed"),
    },
)
_wex = pg_insert(workers).excluded
_beat = (
    pg_insert(workers)
    .from_select(
        ["worker_id", "info_json", "last_beat_ms", "expires_at_ms"],
        sa.select(
            p("beat_worker_id", TEXT),
            p("beat_info_json", TEXT),
            p("beat_now_ms", BIGINT),
            p("beat_expires_at_ms", BIGINT),
        ).where(p("beat_worker_id", TEXT).is_not(None)),
    )
    .on_conflict_do_update(
        index_elements=[workers.c.worker_id],
        set_={
            "info_json": _wex.info_json,
            "last_beat_ms": _wex.last_beat_ms,
            "expires_at_ms": _wex.expires_at_ms,
        },
    )
    .returning(workers.c.worker_id)
    .cte("beat")
)
_null = sa.null
JOB_CLAIM: Final = sa.union_all(
    sa.select(
        lit("c").label("kind"),
        _claimed.c.id,
        _claimed.c.run_id,
        _claimed.c.name,
        _claimed.c.queue,
        _claimed.c.tenant_id,
        _claimed.c.idempotency_key,
        _claimed.c.input_json,
        _claimed.c.state,
        _claimed.c.priority,
        _claimed.c.attempt,
        _claimed.c.max_attempts,
        _claimed.c.claims,
        _claimed.c.run_at_ms,
        _claimed.c.created_at_ms,
        _claimed.c.enqueued_by,
        _claimed.c.traceparent,
        *(_claimed.c[c] for c in FLOW_COLUMNS[2:]),
    ),
    sa.select(
        lit("b"),
        _buried.c.id,
        _null(),
        _buried.c.name,
        _buried.c.queue,
        _null(),
        _null(),
        _null(),
        _buried.c.state,
        _null(),
        _null(),
        _null(),
        _null(),
        _null(),
        _null(),
        _null(),
        _null(),
        *(_null() for _ in FLOW_COLUMNS[2:]),
    ),
).add_cte(_beat, _buried_counted)

# -- JOB_CLAIM_LOST -----------------------------------------------------------------------------
# The rows a claim whose answer was lost may have taken (`PgDriver._lost_look`), with the claim
# count each is fenced by: `running` for its worker, leased to its lease end and claimed at its
# time, in its queues (the `jobs_lease` index). A claim of the same worker, time and lease end
# takes rows that look the same: the driver leaves out those it answered.
JOB_CLAIM_LOST: Final = sa.select(jobs.c.id, jobs.c.claims).where(
    jobs.c.state == lit("running"),
    jobs.c.queue == sa.func.any(arr("queues", TEXT)),
    jobs.c.lease_until_ms == p("lease_until_ms", BIGINT),
    jobs.c.claimed_by == p("worker_id", TEXT),
    jobs.c.claimed_at_ms == p("now_ms", BIGINT),
)

# -- JOB_CLAIM_LOST_BURIED ----------------------------------------------------------------------
# The rows a claim whose answer was lost may have buried (`PgDriver._lost_buried_look`): lapsed
# final attempts of its queues it moved to `dead` or `failed` at its time, `last_error` the
# lapse's (the `jobs_finished` index: state, finished_at_ms). A claim of another worker in the
# same millisecond may have buried some of them too.
JOB_CLAIM_LOST_BURIED: Final = (
    sa.select(jobs.c.id, jobs.c.name, jobs.c.queue, jobs.c.state)
    .where(
        jobs.c.state.in_([lit("dead"), lit("failed")]),
        jobs.c.finished_at_ms == p("now_ms", BIGINT),
        jobs.c.queue == sa.func.any(arr("queues", TEXT)),
        jobs.c.last_error == p("error", TEXT),
    )
    .order_by(jobs.c.id)
)

# -- JOB_CLAIM_LOST_OPEN ------------------------------------------------------------------------
# How many of the driver's sessions (this database and `application_name`), this one aside, are
# in a transaction begun `:since_ms` before this statement or earlier: a claim whose connection
# dropped may still be running on the server (waiting on a lock, say), to commit after a look
# for its rows found none. While any is, `JOB_CLAIM_LOST` waits (in a statement of its own: its
# snapshot must come after they ended). `statement_timestamp() - :since_ms` is no earlier than
# the server's clock at the loss: the driver measures `since_ms` before the statement is sent.
_activity = sa.table(
    "pg_stat_activity",
    sa.column("pid", sa.Integer),
    sa.column("datname", sa.Text),
    sa.column("application_name", sa.Text),
    sa.column("xact_start", sa.DateTime(timezone=True)),
    schema="pg_catalog",
)
JOB_CLAIM_LOST_OPEN: Final = sa.select(sa.func.count()).where(
    _activity.c.datname == sa.func.current_database(),
    _activity.c.application_name == sa.func.current_setting("application_name"),
    _activity.c.pid != sa.func.pg_backend_pid(),
    _activity.c.xact_start
    <= sa.func.statement_timestamp()
    - p("since_ms", BIGINT) * sa.literal_column("interval '1 millisecond'"),
)

# -- settles: JOB_ACK, JOB_NACK, JOB_HEARTBEAT, JOB_PROGRESS ------------------------------------
# Each is one UPDATE … FROM unnest(arrays) over the whole list, fenced per item (state running,
# same claims, same worker). RETURNING gives the ordinal of each item that landed; the driver
# answers True exactly for those. Ids are unique within one statement (the driver splits a list
# where an id repeats), so "the item that landed" is never ambiguous.
# Each first locks its rows in id order (`_locked`, an InitPlan that runs to its end before the
# UPDATE touches a row): a worker's heartbeat batch (claim order) and its ack batch (completion
# order) name the same rows in opposite orders, and locking in the caller's order deadlocked.
# An ack or nack also moves the minute counters of the items that landed, in the same statement
# (`moved`, after the job rows: the counter rows are the last locks it takes), on the shard of
# the caller's worker (`:shard`, from its worker id): workers never queue on one counter row.


def _locked(name: str) -> sa.CTE:
    """The batch's rows, locked one by one in id order.

    A LATERAL primary-key lookup per sorted id: `WHERE id = ANY(…) ORDER BY id FOR UPDATE`
    would lock in the same order, but the planner picks a sequential scan for it on tables of a
    few ten thousand rows (a 250-id heartbeat went from 4 to 35 ms).
    """
    ids = (
        sa.func.unnest(arr("id", TEXT))
        .table_valued(sa.column("id", TEXT))
        .render_derived(name=f"{name}_ids", with_types=False)
    )
    in_order = sa.select(ids.c.id).order_by(ids.c.id).subquery(f"{name}_sorted")
    row = (
        sa.select(jobs.c.id)
        .where(jobs.c.id == in_order.c.id)
        .with_for_update(of=jobs)
        .lateral(f"{name}_row")
    )
    return sa.select(row.c.id).select_from(in_order.join(row, sa.true())).cte(name)


def _settles_counted(
    settled: sa.CTE, cte_name: str, outcomes: dict[str, sa.ColumnElement[bool] | None]
) -> sa.CTE:
    """The counters of the items `settled` returns (each with `name`, `queue` and `now_ms`), on the
    caller's shard (`:shard`)."""
    return moved(
        settled,
        cte_name,
        name=settled.c.name,
        queue=settled.c.queue,
        bucket_ms=minute_of(settled.c.now_ms),
        shard=p("shard", SMALLINT),
        outcomes=outcomes,
    )


def _fenced_locked(t: sa.FromClause, name: str) -> sa.ColumnElement[bool]:
    """The fence, once `_locked` holds the rows (a one-time filter: it runs before any row)."""
    held = sa.select(sa.func.count()).select_from(_locked(name)).scalar_subquery()
    return sa.and_(held >= sa.literal_column("0"), _fenced(t))


_acks = unnest(
    "a",
    id=TEXT,
    claims=BIGINT,
    worker_id=TEXT,
    now_ms=BIGINT,
    result_json=TEXT,
    progress_json=TEXT,
)
_acked = (
    sa.update(jobs)
    .where(_fenced_locked(_acks, "ack_locked"))
    .values(
        state=lit("completed"),
        lease_until_ms=sa.null(),
        finished_at_ms=_acks.c.now_ms,
        result_json=_acks.c.result_json,
        # The last progress rides the ack; none given keeps what was recorded.
        progress_json=sa.func.coalesce(_acks.c.progress_json, jobs.c.progress_json),
        # -- attempts -- the entry is implicit in the completed row (`attempts_read`).
        attempts=ack_attempts(_acks.c.now_ms),
    )
    .returning(_acks.c.ord, jobs.c.name, jobs.c.queue, _acks.c.now_ms)
    .cte("acked")
)
JOB_ACK: Final = sa.select(_acked.c.ord).add_cte(
    _settles_counted(_acked, "ack_counted", {"completed": None})
)

_nacks = unnest(
    "n",
    id=TEXT,
    claims=BIGINT,
    worker_id=TEXT,
    kind=TEXT,
    now_ms=BIGINT,
    run_at_ms=BIGINT,
    error=TEXT,
    dead_letter=BOOL,
    progress_json=TEXT,
    wait_event=TEXT,
    wait_match_json=TEXT,
    wait_since_ms=BIGINT,
    wait_tenant_id=TEXT,
    wait_until_ms=BIGINT,
    woken=BOOL,
    # -- attempts -- the ended claim's outcome and error (`jobs_core.attempts`, from Python).
    a_outcome=TEXT,
    a_code=TEXT,
    a_message=TEXT,
    a_traceback=TEXT,
)
_k = _nacks.c.kind
# One statement for every kind: each column's CASE mirrors `jobs_memory.driver.nacked`.
_nacked = (
    sa.update(jobs)
    .where(_fenced_locked(_nacks, "nack_locked"))
    .values(
        state=sa.case(
            (_k == lit("retry"), lit("ready")),
            (_k == lit("fail"), sa.case((_nacks.c.dead_letter, lit("dead")), else_=lit("failed"))),
            # A park whose event is already stored (the driver found it under the event's
            # lock, and passes `run_at_ms = now_ms`) goes on at once instead.
            (_k == lit("park"), sa.case((_nacks.c.woken, lit("ready")), else_=lit("parked"))),
            (_k == lit("refuse"), lit("failed")),
            else_=lit("ready"),  # shed, interrupt
        ),
        lease_until_ms=sa.null(),
        progress_json=sa.func.coalesce(_nacks.c.progress_json, jobs.c.progress_json),
        # Set only by a park that waits (NULL otherwise: a running row holds no wait).
        wait_event=_nacks.c.wait_event,
        wait_match_json=_nacks.c.wait_match_json,
        wait_since_ms=_nacks.c.wait_since_ms,
        wait_tenant_id=_nacks.c.wait_tenant_id,
        wait_until_ms=_nacks.c.wait_until_ms,
        run_at_ms=sa.case(
            (_k.in_([lit("retry"), lit("park")]), _nacks.c.run_at_ms),
            (
                _k.in_([lit("shed"), lit("interrupt")]),
                sa.func.coalesce(_nacks.c.run_at_ms, _nacks.c.now_ms),
            ),
            else_=jobs.c.run_at_ms,
        ),
        last_error=sa.case(
            (_k.in_([lit("retry"), lit("fail"), lit("refuse")]), _nacks.c.error),
            else_=jobs.c.last_error,
        ),
        finished_at_ms=sa.case(
            (_k.in_([lit("fail"), lit("refuse")]), _nacks.c.now_ms),
            else_=jobs.c.finished_at_ms,
        ),
        # Suspensions, sheds, drains and refusals give the attempt back.
        attempt=sa.case(
            (
                _k.in_([lit("park"), lit("shed"), lit("interrupt"), lit("refuse")]),
                jobs.c.attempt - sa.literal_column("1"),
            ),
            else_=jobs.c.attempt,
        ),
        # -- attempts --
        attempts=attempts_appended(
            attempt_entry(
                _nacks.c.now_ms,
                _nacks.c.a_outcome,
                _nacks.c.a_code,
                _nacks.c.a_message,
                _nacks.c.a_traceback,
            )
        ),
    )
    .returning(
        _nacks.c.ord,
        jobs.c.id,
        jobs.c.name,
        jobs.c.queue,
        _nacks.c.now_ms,
        _nacks.c.kind,
        _nacks.c.dead_letter,
    )
    .cte("nacked")
)
_nk = _nacked.c.kind
# Each landed nack moves `nack_outcome(kind, dead_letter)` (jobs_core.semantics).
JOB_NACK: Final = sa.select(_nacked.c.ord).add_cte(
    _settles_counted(
        _nacked,
        "nack_counted",
        {
            "retried": _nk == lit("retry"),
            "dead_lettered": sa.and_(_nk == lit("fail"), _nacked.c.dead_letter),
            "dropped": sa.and_(_nk == lit("fail"), ~_nacked.c.dead_letter),
            "suspended": _nk == lit("park"),
            "shed": _nk == lit("shed"),
            "interrupted": _nk == lit("interrupt"),
            "refused": _nk == lit("refuse"),
        },
    )
)

_beats = unnest("h", id=TEXT, claims=BIGINT, worker_id=TEXT, lease_until_ms=BIGINT)
JOB_HEARTBEAT: Final = (
    sa.update(jobs)
    .where(_fenced_locked(_beats, "beat_locked"))
    .values(lease_until_ms=_beats.c.lease_until_ms)
    .returning(_beats.c.ord)
)

_progress = unnest("g", id=TEXT, claims=BIGINT, worker_id=TEXT, progress_json=TEXT)
JOB_PROGRESS: Final = (
    sa.update(jobs)
    .where(_fenced_locked(_progress, "progress_locked"))
    .values(progress_json=_progress.c.progress_json)
    .returning(_progress.c.ord)
)

# -- the operator's bulk calls: JOB_CANCEL_MANY, JOB_PROMOTE, JOB_REMOVE, JOB_REQUEUE_MANY ------
# One statement each for up to 1,000 ids (`:ids`, distinct, in the caller's first-mention
# order; the driver answers repeats from what the first mention did, as sequential calls would).
# Each first locks the named rows one by one in id order (`_bulk_locked`, the settles' lock
# order), reading each row's latest version under its lock; the write then takes exactly the
# rows it decided on, by primary key. The answer per id comes from that locked version, so a row
# a concurrent settle moved meanwhile is answered as it is now, not as the snapshot saw it.


def _bulk_locked(
    name: str, *columns: str, carried: dict[str, sa.types.TypeEngine[Any]] | None = None
) -> sa.CTE:
    """The rows `:ids` names that exist, locked in id order: `id`, `ord` (the position in
    `:ids`) and `columns` as of the lock, then each `carried` array's item for the id (bound
    beside `:ids`, one per id)."""
    extra = carried or {}
    ids = unnest(f"{name}_ids", ids=TEXT, **extra)
    in_order = (
        sa.select(ids.c.ids.label("id"), ids.c.ord, *(ids.c[c] for c in extra))
        .order_by(ids.c.ids)
        .subquery(f"{name}_sorted")
    )
    row = (
        sa.select(jobs.c.id, *(jobs.c[c] for c in columns))
        .where(jobs.c.id == in_order.c.id)
        .with_for_update(of=jobs)
        .lateral(f"{name}_row")
    )
    return (
        sa.select(
            row.c.id,
            in_order.c.ord,
            *(row.c[c] for c in columns),
            *(in_order.c[c] for c in extra),
        )
        .select_from(in_order.join(row, sa.true()))
        .cte(name)
    )


def _ids_where(cte: sa.CTE, *where: sa.ColumnElement[bool]) -> sa.ColumnElement[Any]:
    """The ids of `cte`'s rows that pass `where`, as one text[] (so the write that takes them
    is a primary-key lookup each, after `cte` has run to its end)."""
    return sa.cast(
        sa.select(sa.func.array_agg(cte.c.id)).where(*where).scalar_subquery(), pg.ARRAY(sa.Text)
    )


# JOB_CANCEL_MANY: live rows become cancelled, each moving its `cancelled` counter (in the minute
# of `:now_ms`, shard 0: an operator's call, no worker's). Answers per existing id its state under
# the lock and whether it was cancelled; an id not answered does not exist.
_cx_locked = _bulk_locked("cancel_locked", "state")
_cancelled = (
    sa.update(jobs)
    .where(jobs.c.id == sa.func.any(_ids_where(_cx_locked, live(_cx_locked))), live(jobs))
    .values(
        state=lit("cancelled"),
        lease_until_ms=sa.null(),
        finished_at_ms=p("now_ms", BIGINT),
        **NO_WAIT,
        # -- attempts -- a running row's claim ends cancelled.
        attempts=sa.case(
            (
                jobs.c.state == lit("running"),
                attempts_appended(attempt_entry(p("now_ms", BIGINT), lit("cancelled"))),
            ),
            else_=jobs.c.attempts,
        ),
    )
    .returning(jobs.c.id, jobs.c.name, jobs.c.queue)
    .cte("cancelled")
)
JOB_CANCEL_MANY: Final = (
    sa.select(_cx_locked.c.id, _cancelled.c.id.is_not(None).label("cancelled"))
    .select_from(_cx_locked.outerjoin(_cancelled, _cancelled.c.id == _cx_locked.c.id))
    .add_cte(
        moved(
            _cancelled,
            "cancel_counted",
            name=_cancelled.c.name,
            queue=_cancelled.c.queue,
            bucket_ms=minute_of(p("now_ms", BIGINT)),
            shard=sa.literal_column("0", sa.SmallInteger),
            outcomes={"cancelled": None},
        )
    )
)

# JOB_PROMOTE: a ready row due later becomes due at `:now_ms`; nothing else is written.
_pr_locked = _bulk_locked("promote_locked", "state", "run_at_ms")
_promoted = (
    sa.update(jobs)
    .where(
        jobs.c.id
        == sa.func.any(
            _ids_where(
                _pr_locked,
                _pr_locked.c.state == lit("ready"),
                _pr_locked.c.run_at_ms > p("now_ms", BIGINT),
            )
        ),
        jobs.c.state == lit("ready"),
        jobs.c.run_at_ms > p("now_ms", BIGINT),
    )
    .values(run_at_ms=p("now_ms", BIGINT))
    .returning(jobs.c.id)
    .cte("promoted")
)
JOB_PROMOTE: Final = sa.select(
    _pr_locked.c.id,
    _pr_locked.c.state,
    _pr_locked.c.run_at_ms,
    _promoted.c.id.is_not(None).label("promoted"),
).select_from(_pr_locked.outerjoin(_promoted, _promoted.c.id == _pr_locked.c.id))

# JOB_REMOVE: every named row but a running one is deleted, as the purge deletes (the row, its
# wait with it, and its run's steps); counters do not move.


def _steps_gone(deleted: sa.CTE, name: str) -> sa.CTE:
    """Delete the steps of the runs of the rows `deleted` returns (with `run_id`): every
    per-row structure goes with its row. One `steps_pkey` range per run."""
    runs = sa.cast(
        sa.select(sa.func.array_agg(deleted.c.run_id)).scalar_subquery(), pg.ARRAY(sa.Text)
    )
    return (
        sa.delete(steps)
        .where(steps.c.run_id == sa.func.any(runs))
        .returning(steps.c.run_id)
        .cte(name)
    )


_rm_locked = _bulk_locked("remove_locked", "state")
_removed = (
    sa.delete(jobs)
    .where(
        jobs.c.id == sa.func.any(_ids_where(_rm_locked, _rm_locked.c.state != lit("running"))),
        jobs.c.state != lit("running"),
    )
    .returning(jobs.c.id, jobs.c.run_id)
    .cte("removed")
)
JOB_REMOVE: Final = (
    sa.select(_rm_locked.c.id, _rm_locked.c.state, _removed.c.id.is_not(None).label("removed"))
    .select_from(_rm_locked.outerjoin(_removed, _removed.c.id == _rm_locked.c.id))
    .add_cte(_steps_gone(_removed, "removed_steps"))
)

# JOB_REQUEUE_MANY: a finished row becomes ready at `:now_ms` with fresh attempts, in its run, or
# in the fresh run `:fresh` names for it (NULL: a plain requeue) — unless it is a saga run that
# failed for good asked plainly (`unwound`: dead or failed, its run holding the saga mark, read
# under the row's lock: the mark is recorded before the final settle, so it is there once the
# row is), or a live row holds its namespace; of several finished rows of one namespace, the
# first in `:ids` order wins (it holds the namespace for the others, as sequential requeues
# would). A fresh requeue deletes the steps of the run it left, unless that run is unwound (its
# unwind job, holding the run id, still reads them). A holder that a concurrent enqueue commits
# after this statement's snapshot makes the UPDATE hit `jobs_live_key`: the whole statement
# fails (23505) and the driver goes id by id.
_rq_locked = _bulk_locked(
    "requeue_locked",
    "state",
    "name",
    "tenant_id",
    "idempotency_key",
    "run_id",
    carried={"fresh": TEXT},
)
_rq_unwound = sa.and_(
    _rq_locked.c.state.in_([lit(s.value) for s in sorted(UNWOUND_STATES)]),
    ex(steps.c.run_id == _rq_locked.c.run_id, steps.c.name == lit(SAGA_STEP)),
)
_rq_rows = sa.select(
    _rq_locked.c.id,
    _rq_locked.c.ord,
    _rq_locked.c.state,
    _rq_locked.c.name,
    _rq_locked.c.tenant_id,
    _rq_locked.c.idempotency_key,
    _rq_locked.c.run_id,
    _rq_locked.c.fresh,
    _rq_unwound.label("unwound"),
).cte("rq_rows")
_rq_holder = jobs.alias("rq_holder")
_rq_free = (
    sa.select(
        _rq_rows.c.id,
        _rq_rows.c.ord,
        _rq_rows.c.name,
        sa.func.coalesce(_rq_rows.c.tenant_id, sa.literal_column("''")).label("tenant"),
        _rq_rows.c.idempotency_key,
    )
    .where(
        ~live(_rq_rows),
        ~sa.and_(_rq_rows.c.fresh.is_(None), _rq_rows.c.unwound),
        ~ex(
            live_key_matches(
                _rq_holder,
                _rq_rows.c.name,
                _rq_rows.c.tenant_id,
                _rq_rows.c.idempotency_key,
            )
        ),
    )
    .subquery("rq_free")
)
_rq_first = (
    sa.select(
        _rq_free.c.id,
        sa.func.row_number()
        .over(
            partition_by=[_rq_free.c.name, _rq_free.c.tenant, _rq_free.c.idempotency_key],
            order_by=_rq_free.c.ord,
        )
        .label("nth"),
    )
).subquery("rq_first")
_rq_winners = (
    sa.select(_rq_first.c.id).where(_rq_first.c.nth == sa.literal_column("1")).cte("rq_winners")
)
_requeued = (
    sa.update(jobs)
    .where(jobs.c.id == sa.func.any(_ids_of(_rq_winners)), ~live(jobs))
    .values(
        state=lit("ready"),
        attempt=sa.literal_column("0"),
        # -- attempts -- a completed row's implicit entry is stored as it leaves `completed`.
        attempts=attempts_read(),
        run_at_ms=p("now_ms", BIGINT),
        lease_until_ms=sa.null(),
        finished_at_ms=sa.null(),
        # `:ids` holds each id once (the driver dedupes): its fresh run id, or the row's own.
        run_id=sa.func.coalesce(
            sa.type_coerce(sa.Grouping(arr("fresh", TEXT)), pg.ARRAY(sa.Text))[
                sa.func.array_position(arr("ids", TEXT), jobs.c.id)
            ],
            jobs.c.run_id,
        ),
    )
    .returning(jobs.c.id)
    .cte("requeued")
)
_rq_left = (
    sa.delete(steps)
    .where(
        steps.c.run_id
        == sa.func.any(
            sa.cast(
                sa.select(sa.func.array_agg(_rq_rows.c.run_id))
                .where(
                    _rq_rows.c.id.in_(sa.select(_requeued.c.id)),
                    _rq_rows.c.fresh.is_not(None),
                    ~_rq_rows.c.unwound,
                )
                .scalar_subquery(),
                pg.ARRAY(sa.Text),
            )
        )
    )
    .returning(steps.c.run_id)
    .cte("rq_left_steps")
)
JOB_REQUEUE_MANY: Final = (
    sa.select(
        _rq_rows.c.id,
        _rq_rows.c.state,
        _requeued.c.id.is_not(None).label("requeued"),
        _rq_rows.c.unwound,
    )
    .select_from(_rq_rows.outerjoin(_requeued, _requeued.c.id == _rq_rows.c.id))
    .add_cte(_rq_left)
)

# -- JOB_LIST -----------------------------------------------------------------------------------
# One bounded walk, newest first by (created_at, id), strictly after the cursor (`:after_*`; the
# driver passes a key above every row for the first page). Two arms in the same order are merged:
# the rows that are not running, read backwards from `jobs_listing`, and the running ones (few:
# what workers hold) from `jobs_lease`, sorted. Each arm is capped at `:scan`, and so is the
# merge. A window counts the matches BEFORE each row; `before < :limit` stops the walk right
# after the `:limit`-th match (Postgres 15 turns it into the window's run condition, so the
# scans stop there too). What the walk reached is the rows examined. The answer: the matches
# (kind 'j'), then one row (kind 't') holding the key of the last row examined and whether any
# row follows it (two index probes), when the walk examined anything.
SUMMARY_COLUMNS: Final = (
    "id",
    "name",
    "queue",
    "tenant_id",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "claimed_by",
    "lease_until_ms",
    "run_at_ms",
    "created_at_ms",
    "finished_at_ms",
    "parent_id",
    "batch_id",
    "acts_for",  # acts-for
)
_after = sa.tuple_(p("after_created_at_ms", BIGINT), p("after_id", TEXT))


def _not_running(t: sa.FromClause) -> sa.ColumnElement[bool]:
    """`state <> 'running'`: the `jobs_listing` index predicate."""
    return t.c.state != lit("running")


def _listing_arm(running: bool) -> sa.Select[Any]:
    which = jobs.c.state == lit("running") if running else _not_running(jobs)
    return (
        sa.select(*(jobs.c[c] for c in SUMMARY_COLUMNS))
        .where(which, sa.tuple_(jobs.c.created_at_ms, jobs.c.id) < _after)
        .order_by(jobs.c.created_at_ms.desc(), jobs.c.id.desc())
        .limit(p("scan", INT))
    )


_arms = sa.union_all(_listing_arm(False), _listing_arm(True)).subquery("arms")
_walk = (
    sa.select(*_arms.c)
    .order_by(_arms.c.created_at_ms.desc(), _arms.c.id.desc())
    .limit(p("scan", INT))
    .subquery("walk")
)
_hit = sa.and_(
    sa.or_(
        sa.func.cardinality(arr("states", TEXT)) == sa.literal_column("0"),
        _walk.c.state == sa.func.any(arr("states", TEXT)),
    ),
    sa.or_(p("queue", TEXT).is_(None), _walk.c.queue == p("queue", TEXT)),
    sa.or_(p("name", TEXT).is_(None), _walk.c.name == p("name", TEXT)),
    sa.or_(p("tenant_id", TEXT).is_(None), _walk.c.tenant_id == p("tenant_id", TEXT)),
    sa.or_(p("parent_id", TEXT).is_(None), _walk.c.parent_id == p("parent_id", TEXT)),
    sa.or_(p("batch_id", TEXT).is_(None), _walk.c.batch_id == p("batch_id", TEXT)),
    sa.or_(p("acts_for", TEXT).is_(None), _walk.c.acts_for == p("acts_for", TEXT)),  # acts-for
)
_walked = sa.select(
    *_walk.c,
    _hit.label("hit"),
    sa.func.count()
    .filter(_hit)
    .over(order_by=[_walk.c.created_at_ms.desc(), _walk.c.id.desc()], rows=(None, -1))
    .label("before"),
).subquery("walked")
_examined = sa.select(*_walked.c).where(_walked.c.before < p("limit", INT)).cte("examined")
_last = (
    sa.select(_examined.c.created_at_ms, _examined.c.id)
    .order_by(_examined.c.created_at_ms, _examined.c.id)
    .limit(sa.literal_column("1"))
    .cte("last")
)
_beyond = sa.tuple_(jobs.c.created_at_ms, jobs.c.id) < sa.tuple_(_last.c.created_at_ms, _last.c.id)


def _next_below_last(which: sa.ColumnElement[bool]) -> sa.ColumnElement[bool]:
    """A row of the arm `which` after the last examined one exists. Asked in listing order with
    LIMIT 1, so the plan is one probe of that arm's index (an EXISTS may scan the table)."""
    return (
        sa.select(sa.literal_column("1"))
        .where(which, _beyond)
        .order_by(jobs.c.created_at_ms.desc(), jobs.c.id.desc())
        .limit(sa.literal_column("1"))
        .scalar_subquery()
        .is_not(None)
    )


_follows = sa.or_(
    _next_below_last(_not_running(jobs)), _next_below_last(jobs.c.state == lit("running"))
)
JOB_LIST: Final = sa.union_all(
    sa.select(
        lit("j").label("kind"),
        *(_examined.c[c] for c in SUMMARY_COLUMNS),
        sa.null().label("follows"),
    ).where(_examined.c.hit),
    sa.select(
        lit("t"),
        _last.c.id,
        *(
            _last.c.created_at_ms if c == "created_at_ms" else sa.null()
            for c in SUMMARY_COLUMNS[1:]
        ),
        _follows,
    ),
)

# -- JOB_GET_MANY -------------------------------------------------------------------------------
# One primary-key probe per id through `= ANY(array)`: the statement text does not change with
# the number of ids (one prepared plan), and every column of a `JobRecord` is named, in its order,
# then the three of its wait.
JOB_GET_MANY: Final = sa.select(
    *(jobs.c[c] for c in (*RECORD_COLUMNS, *WAIT_COLUMNS, *FLOW_COLUMNS)),
    *ATTEMPT_COLUMNS,
).where(jobs.c.id == sa.func.any(arr("ids", TEXT)))

# -- JOB_PURGE ----------------------------------------------------------------------------------
# ONE statement: per final state, its expired rows oldest first through `jobs_finished` (state
# is a literal, so each scan is one index range read in (finished_at, id) order and stops at
# `:limit`); the first `:limit` of the four by (finished_at, id) — id in COLLATE "C", code-point
# order — are deleted. SKIP LOCKED: purgers running at once take disjoint rows and never wait on
# each other or on a settle, and a row that a concurrent requeue made live again fails the
# re-checked state test. A state whose cutoff is NULL (kept forever) reads nothing. The locks
# are taken in the scans, not after the merge: a purger racing another fills its batch with the
# next unlocked rows instead of coming back short (which would end its round early). The purged
# rows' runs lose their steps in the same statement (a wait lives on the row and goes with it).
_PURGE_CUTOFFS: Final = {
    "cancelled": "cancelled_before",
    "completed": "completed_before",
    "dead": "dead_before",
    "failed": "failed_before",
}
_expired = [
    sa.select(jobs.c.id, jobs.c.finished_at_ms)
    .where(jobs.c.state == lit(state), jobs.c.finished_at_ms <= p(cutoff, BIGINT))
    .order_by(jobs.c.finished_at_ms, jobs.c.id)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True, of=jobs)
    .cte(f"expired_{state}")
    for state, cutoff in _PURGE_CUTOFFS.items()
]
_expired_all = sa.union_all(*(sa.select(e.c.id, e.c.finished_at_ms) for e in _expired)).subquery(
    "expired"
)
_doomed = (
    sa.select(_expired_all.c.id)
    .order_by(_expired_all.c.finished_at_ms, _expired_all.c.id)
    .limit(p("limit", INT))
    .cte("doomed")
)
_purged = (
    sa.delete(jobs)
    .where(jobs.c.id == sa.func.any(_ids_of(_doomed)))
    .returning(jobs.c.id, jobs.c.run_id)
    .cte("purged")
)
JOB_PURGE: Final = (
    sa.select(sa.func.count().label("purged"))
    .select_from(_purged)
    .add_cte(_steps_gone(_purged, "purged_steps"))
)
