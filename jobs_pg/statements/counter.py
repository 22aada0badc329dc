"""The `counter_*` statements, and the counting step every settling statement carries.

A contract bucket (name, queue, bucket, width) is up to `COUNTER_SHARDS` rows here (see
`jobs_pg.schema.counters`): the settles add to their worker's shard, reads sum the shards, the
fold merges them into one hour row. Every statement that writes counter rows writes them in key
order (width, bucket, name, queue, shard), after the job rows it settles, so writers wait for each
other and never deadlock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_core.semantics import HOUR_MS, MINUTE_MS
from jobs_pg.schema import COUNTER_COLUMNS, counters
from jobs_pg.statements._build import BIGINT, INT, TEXT, arr, p

_KEY: Final = ("width_ms", "bucket_ms", "name", "queue", "shard")
_MINUTE: Final = sa.literal_column(str(MINUTE_MS), sa.Integer)
_HOUR: Final = sa.literal_column(str(HOUR_MS), sa.Integer)
_ZERO: Final = sa.literal_column("0", sa.BigInteger)


def minute_of(ms: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """`minute_of` (jobs_core.semantics) in SQL: the start of the minute bucket of `ms`."""
    return ms - sa.func.mod(ms, _MINUTE)


def moved(
    source: sa.FromClause,
    cte_name: str,
    *,
    name: sa.ColumnElement[Any],
    queue: sa.ColumnElement[Any],
    bucket_ms: sa.ColumnElement[Any],
    shard: sa.ColumnElement[Any],
    outcomes: Mapping[str, sa.ColumnElement[bool] | None],
) -> sa.CTE:
    """An upsert of the minute counters for the settles in `source` (one row per settle that
    landed): per (bucket, name, queue, shard), each outcome column in `outcomes` grows by the number
    of source rows its condition holds for (None: every row).

    Given to the settling statement with `add_cte` and referenced by nothing, it runs after the
    statement's main part (Postgres finishes such a data-modifying CTE last), so its row locks
    come after every job row's, in key order. A settle that did not land is not in `source` and
    moves nothing.
    """
    flags = {c: cond for c, cond in outcomes.items() if cond is not None}
    # The key is computed once per item, so a parameter in it (the shard, a claim's bucket) is
    # bound once and grouped as a column.
    items = (
        sa.select(
            bucket_ms.label("bucket_ms"),
            name.label("name"),
            queue.label("queue"),
            shard.label("shard"),
            *(cond.label(f"is_{c}") for c, cond in flags.items()),
        )
        .select_from(source)
        .subquery(f"{cte_name}_items")
    )
    key = (items.c.bucket_ms, items.c.name, items.c.queue, items.c.shard)

    def count(c: str) -> sa.ColumnElement[Any]:
        if c not in outcomes:
            return _ZERO
        if c not in flags:
            return sa.func.count()
        return sa.func.count().filter(items.c[f"is_{c}"])

    rows = (
        sa.select(_MINUTE, *key, *(count(c).label(c) for c in COUNTER_COLUMNS))
        .group_by(*key)
        .order_by(*key)
    )
    ins = pg_insert(counters)
    return (
        ins.from_select([*_KEY, *COUNTER_COLUMNS], rows)
        .on_conflict_do_update(
            index_elements=[counters.c[k] for k in _KEY],
            set_={c: counters.c[c] + ins.excluded[c] for c in outcomes},
        )
        .cte(cte_name)
    )


def _summed() -> list[sa.Label[Any]]:
    return [sa.cast(sa.func.sum(counters.c[c]), sa.BigInteger).label(c) for c in COUNTER_COLUMNS]


# -- COUNTER_READ -------------------------------------------------------------------------------
# The buckets of a window, shards summed, both widths. `width_ms IN (…)` is spelled so the key's
# leading columns bound the scan to the window; `:names` / `:queues` NULL read every one.
COUNTER_READ: Final = (
    sa.select(
        counters.c.name, counters.c.queue, counters.c.bucket_ms, counters.c.width_ms, *_summed()
    )
    .where(
        counters.c.width_ms.in_([_MINUTE, _HOUR]),
        counters.c.bucket_ms >= p("since_ms", BIGINT),
        counters.c.bucket_ms < p("until_ms", BIGINT),
        sa.or_(
            arr("names", TEXT).is_(None),
            counters.c.name == sa.func.any(arr("names", TEXT)),
        ),
        sa.or_(
            arr("queues", TEXT).is_(None),
            counters.c.queue == sa.func.any(arr("queues", TEXT)),
        ),
    )
    .group_by(counters.c.name, counters.c.queue, counters.c.bucket_ms, counters.c.width_ms)
)

# -- COUNTER_FOLD -------------------------------------------------------------------------------
# The oldest `:limit` minute buckets (by bucket, name, queue) starting before `:before`, every
# shard row of each, are deleted and added into their hour bucket (one row, shard 0), in one
# statement; it answers how many contract buckets (name, queue, bucket) it folded.
# Two folds at once: the shard rows are locked FOR UPDATE (waiting, not skipping) in key order,
# so the second folder waits at the first row the first one holds and, once it commits, finds
# those rows gone (Postgres re-checks a locked row and drops a deleted one). No bucket is ever
# split between two folders, so each is folded, and counted, once; the second answers only what
# it folded itself (it may come back short while buckets remain: the next round takes them).
# A shard row that a late settle adds after a fold is a new minute bucket, folded next time.
_cand = (
    sa.select(counters.c.bucket_ms, counters.c.name, counters.c.queue)
    .where(counters.c.width_ms == _MINUTE, counters.c.bucket_ms < p("before", BIGINT))
    .group_by(counters.c.bucket_ms, counters.c.name, counters.c.queue)
    .order_by(counters.c.bucket_ms, counters.c.name, counters.c.queue)
    .limit(p("limit", INT))
    .cte("cand")
)
_fold_locked = (
    sa.select(counters.c.bucket_ms, counters.c.name, counters.c.queue, counters.c.shard)
    .join(
        _cand,
        sa.and_(
            _cand.c.bucket_ms == counters.c.bucket_ms,
            _cand.c.name == counters.c.name,
            _cand.c.queue == counters.c.queue,
        ),
    )
    .where(counters.c.width_ms == _MINUTE)
    .order_by(counters.c.bucket_ms, counters.c.name, counters.c.queue, counters.c.shard)
    .with_for_update(of=counters)
    .cte("fold_locked")
)
_gone = (
    sa.delete(counters)
    .where(
        counters.c.width_ms == _MINUTE,
        sa.tuple_(counters.c.bucket_ms, counters.c.name, counters.c.queue, counters.c.shard).in_(
            sa.select(
                _fold_locked.c.bucket_ms,
                _fold_locked.c.name,
                _fold_locked.c.queue,
                _fold_locked.c.shard,
            )
        ),
    )
    .returning(
        counters.c.bucket_ms,
        counters.c.name,
        counters.c.queue,
        *(counters.c[c] for c in COUNTER_COLUMNS),
    )
    .cte("gone")
)
_hour_of = _gone.c.bucket_ms - sa.func.mod(_gone.c.bucket_ms, _HOUR)
_hours_rows = (
    sa.select(
        _HOUR,
        _hour_of,
        _gone.c.name,
        _gone.c.queue,
        sa.literal_column("0", sa.SmallInteger),
        *(sa.cast(sa.func.sum(_gone.c[c]), sa.BigInteger) for c in COUNTER_COLUMNS),
    )
    .group_by(_hour_of, _gone.c.name, _gone.c.queue)
    # Hour rows are locked in key order too (after every minute row: `gone` is read whole first).
    .order_by(_hour_of, _gone.c.name, _gone.c.queue)
)
_hours_ins = pg_insert(counters)
_hours = (
    _hours_ins.from_select([*_KEY, *COUNTER_COLUMNS], _hours_rows)
    .on_conflict_do_update(
        index_elements=[counters.c[k] for k in _KEY],
        set_={c: counters.c[c] + _hours_ins.excluded[c] for c in COUNTER_COLUMNS},
    )
    .cte("hours")
)
_folded_buckets = (
    sa.select(_gone.c.bucket_ms, _gone.c.name, _gone.c.queue).distinct().subquery("folded")
)
COUNTER_FOLD: Final = (
    sa.select(sa.func.count().label("folded")).select_from(_folded_buckets).add_cte(_hours)
)

# -- COUNTER_DROP -------------------------------------------------------------------------------
# The second half of a fold, run only while budget is left (a statement of its own, so it sees
# the hour rows the fold just wrote, as the contract's order wants): the oldest `:limit` hour
# buckets starting before `:before`. An hour bucket is one row, so SKIP LOCKED splits nothing:
# two droppers take disjoint rows.
_expired_hours = (
    sa.select(counters.c.bucket_ms, counters.c.name, counters.c.queue)
    .where(counters.c.width_ms == _HOUR, counters.c.bucket_ms < p("before", BIGINT))
    .order_by(counters.c.bucket_ms, counters.c.name, counters.c.queue)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True)
    .cte("expired_hours")
)
_dropped = (
    sa.delete(counters)
    .where(
        counters.c.width_ms == _HOUR,
        sa.tuple_(counters.c.bucket_ms, counters.c.name, counters.c.queue).in_(
            sa.select(_expired_hours.c.bucket_ms, _expired_hours.c.name, _expired_hours.c.queue)
        ),
    )
    .returning(counters.c.name)
    .cte("dropped")
)
COUNTER_DROP: Final = sa.select(sa.func.count().label("dropped")).select_from(_dropped)
