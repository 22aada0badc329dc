"""The `lease_*` statements: a key's holdings, granted under the key's lock and named by
`(key, token)` ever after.

A take is one transaction of two statements, pipelined by the driver (one round trip):
`LEASE_LOCK` takes the advisory lock of each key of the batch (sorted), then `LEASE_TAKE` counts
and grants. Under READ COMMITTED a statement's snapshot is taken when it starts, before it waits
on any lock, so counting and granting in the statement that waits for the key could see a
racing take's holdings too late (the limit exceeded) or a release too late (a refusal with room
left). `LEASE_TAKE` starts only once the lock is granted, after the previous taker of the key
committed: its snapshot holds every grant ever made of its keys, and nobody else inserts one
until it commits.

Renewals, releases and abandons take no advisory lock: each is one statement that locks the
rows it names in `(key, token)` order and decides from each row as it is under its lock. A take
locks the rows it may write (expired ones and those of its own holders) in that same order,
reads them as they are under the lock, and never waits on a row otherwise, so none of these
statements waits on another in a cycle. The purge takes no advisory lock and never waits on a
row (SKIP LOCKED): it joins no cycle either.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import REGCLASS, distinct_on
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import C, leases
from jobs_pg.statements._build import BIGINT, BOOL, INT, TEXT, arr, p, unnest, xact_locks

_NOW = p("now_ms", BIGINT)
#: The token sequence, by name (`:tokens`, the schema-qualified name the driver passes): a
#: name rendered into the text would sit inside a string literal, where the schema's quoting
#: does not reach.
_next_token = sa.func.nextval(sa.cast(p("tokens", TEXT), REGCLASS))


def _batch(name: str, **columns: sa.types.TypeEngine[Any]) -> sa.CTE:
    """A batch as rows (`unnest`, with `ord`), its `key` collated as the table's: the
    statements sort by it to lock rows, and every statement must sort alike."""
    rows = unnest(f"{name}_items", key=TEXT, **columns)
    return sa.select(
        rows.c.key.collate(C).label("key"), *(c for c in rows.c if c.name != "key")
    ).cte(name)


def _pk(a: Any, b: Any) -> sa.ColumnElement[bool]:
    """`a` and `b` name the same holding."""
    return sa.and_(a.c.key == b.c.key, a.c.token == b.c.token)


# -- LEASE_LOCK ---------------------------------------------------------------------------------
# The advisory lock of each key of a take (`:keys`, hashes of schema and key, sorted and
# distinct), held until the take commits. Two keys that hash alike only take turns.
LEASE_LOCK: Final = xact_locks()

# -- LEASE_TAKE ---------------------------------------------------------------------------------
# Run after LEASE_LOCK, in its transaction. Per key, in item order: a holder with a live holding
# gets it replaced (a new token, the count unchanged); any other item is granted while the live
# holdings plus the items of its key granted before it are fewer than `lim`. Every decision is
# made on the keys' holdings as they are: the snapshot's rows this take does not write (live,
# of holders it does not name), and the rows it may write (`touched`: expired ones and those of
# its holders) as they are under their row lock — a renewal that committed after the snapshot
# may have brought an expired one back. A release that commits meanwhile counts as coming after
# this take. Expired holdings are deleted, replaced ones too; tokens are drawn in item order.
# Answers `(ord, token)` for each item granted.
_items = _batch("items", holder=TEXT, lim=INT, ttl_ms=BIGINT, stamp=BOOL)
_seen = (
    sa.select(leases.c.key, leases.c.holder, leases.c.token, leases.c.expires_at_ms)
    .where(leases.c.key == sa.func.any(arr("key", TEXT)))
    .cte("seen")
)


def _named(t: Any) -> sa.ColumnElement[bool]:
    """The row of `t` is held by a holder an item of its key names."""
    return sa.tuple_(t.c.key, t.c.holder).in_(sa.select(_items.c.key, _items.c.holder))


_may_write = (
    sa.select(_seen.c.key, _seen.c.token)
    .where(sa.or_(_seen.c.expires_at_ms <= _NOW, _named(_seen)))
    .order_by(_seen.c.key, _seen.c.token)
    .subquery("may_write")
)
_touched_row = (
    sa.select(leases.c.holder, leases.c.expires_at_ms)
    .where(_pk(leases, _may_write))
    .with_for_update(of=leases)
    .lateral("touched_row")
)
_touched = (
    sa.select(
        _may_write.c.key, _may_write.c.token, _touched_row.c.holder, _touched_row.c.expires_at_ms
    )
    .select_from(_may_write.join(_touched_row, sa.true()))
    .cte("touched")
)
_live = sa.union_all(
    sa.select(_seen.c.key, _seen.c.holder).where(_seen.c.expires_at_ms > _NOW, ~_named(_seen)),
    sa.select(_touched.c.key, _touched.c.holder).where(_touched.c.expires_at_ms > _NOW),
).cte("live")
_counts = (
    sa.select(_live.c.key, sa.func.count().label("n")).group_by(_live.c.key).subquery("counts")
)
_mine = sa.select(_live.c.key, _live.c.holder).distinct().subquery("mine")
_is_mine = _mine.c.holder.is_not(None)
_decided = (
    sa.select(
        _items.c.ord,
        _items.c.key,
        _items.c.holder,
        _items.c.lim,
        _items.c.ttl_ms,
        _items.c.stamp,
        _is_mine.label("mine"),
        sa.func.coalesce(_counts.c.n, sa.literal_column("0")).label("n_live"),
        # The new holdings of this key up to this item: a replacement adds none.
        sa.func.count()
        .filter(~_is_mine)
        .over(partition_by=_items.c.key, order_by=_items.c.ord)
        .label("nth_new"),
    )
    .select_from(
        _items.outerjoin(_counts, _counts.c.key == _items.c.key).outerjoin(
            _mine, sa.and_(_mine.c.key == _items.c.key, _mine.c.holder == _items.c.holder)
        )
    )
    .subquery("decided")
)
# Volatile output is computed after the sort (Postgres ≥ 9.6), so tokens follow item order.
_granted = (
    sa.select(
        _decided.c.ord,
        _decided.c.key,
        _decided.c.holder,
        _decided.c.ttl_ms,
        _decided.c.stamp,
        _next_token.label("token"),
    )
    .where(
        sa.or_(_decided.c.mine, _decided.c.n_live + _decided.c.nth_new <= _decided.c.lim),
    )
    .order_by(_decided.c.ord)
    .cte("granted")
)
_gone = (
    sa.delete(leases)
    .where(
        _pk(leases, _touched),
        sa.or_(_touched.c.expires_at_ms <= _NOW, _named(_touched)),
    )
    .returning(leases.c.token)
    .cte("gone")
)
_put = (
    pg_insert(leases)
    .from_select(
        ["key", "holder", "token", "expires_at_ms", "stamp"],
        sa.select(
            _granted.c.key,
            _granted.c.holder,
            _granted.c.token,
            _NOW + _granted.c.ttl_ms,
            _granted.c.stamp,
        ),
    )
    .returning(leases.c.token)
    .cte("put")
)
LEASE_TAKE: Final = sa.select(_granted.c.ord, _granted.c.token).add_cte(_gone, _put)

# -- LEASE_HOLDERS ------------------------------------------------------------------------------
# One range of `leases_pkey`: the key's live holdings (the public method sorts by token).
LEASE_HOLDERS: Final = sa.select(
    leases.c.key, leases.c.holder, leases.c.token, leases.c.expires_at_ms, leases.c.stamp
).where(leases.c.key == p("key", TEXT), leases.c.expires_at_ms > _NOW)

# -- LEASE_RENEW --------------------------------------------------------------------------------
# Each named holding once (with the ttl of its last mention: the one that lands last), locked
# in (key, token) order by a primary-key lookup each, and only while live under the lock; those
# move to `now + ttl`. Answers the ordinal of every item whose holding was live.
_renews = _batch("renews", token=BIGINT, ttl_ms=BIGINT)
_renew_last = (
    sa.select(_renews.c.key, _renews.c.token, _renews.c.ttl_ms)
    .ext(distinct_on(_renews.c.key, _renews.c.token))
    .order_by(_renews.c.key, _renews.c.token, _renews.c.ord.desc())
    .subquery("renew_last")
)
_renew_row = (
    sa.select(leases.c.token)
    .where(_pk(leases, _renew_last), leases.c.expires_at_ms > _NOW)
    .with_for_update(of=leases)
    .lateral("renew_row")
)
_renew_locked = (
    sa.select(_renew_last.c.key, _renew_last.c.token, _renew_last.c.ttl_ms)
    .select_from(_renew_last.join(_renew_row, sa.true()))
    .cte("renew_locked")
)
_renewed = (
    sa.update(leases)
    .where(_pk(leases, _renew_locked))
    .values(expires_at_ms=_NOW + _renew_locked.c.ttl_ms)
    .returning(leases.c.key, leases.c.token)
    .cte("renewed")
)
LEASE_RENEW: Final = sa.select(_renews.c.ord).select_from(
    _renews.join(_renewed, _pk(_renews, _renewed))
)

# -- LEASE_RELEASE, LEASE_ABANDON ---------------------------------------------------------------
# Each named holding once, locked in (key, token) order by a primary-key lookup each and read as
# it is under the lock; then deleted (a release keeps a live stamp). Answers the ordinal of every
# item that found its holding live, as the items one after another would: a holding's later
# mentions find it only when it stayed (a released live stamp).


def _ended(name: str, *, stamps_stay: bool) -> sa.Select[Any]:
    refs = _batch(f"{name}_refs", token=BIGINT)
    in_order = (
        sa.select(refs.c.key, refs.c.token)
        .distinct()
        .order_by(refs.c.key, refs.c.token)
        .subquery(f"{name}_sorted")
    )
    row = (
        sa.select(leases.c.expires_at_ms, leases.c.stamp)
        .where(_pk(leases, in_order))
        .with_for_update(of=leases)
        .lateral(f"{name}_row")
    )
    found = (
        sa.select(
            in_order.c.key,
            in_order.c.token,
            (row.c.expires_at_ms > _NOW).label("live"),
            row.c.stamp,
        )
        .select_from(in_order.join(row, sa.true()))
        .cte(f"{name}_found")
    )
    stays = sa.and_(found.c.live, found.c.stamp) if stamps_stay else sa.false()
    gone = (
        sa.delete(leases)
        .where(_pk(leases, found), ~stays)
        .returning(leases.c.token)
        .cte(f"{name}_gone")
    )
    mentions = (
        sa.select(
            refs.c.ord,
            found.c.live,
            found.c.stamp,
            sa.func.row_number()
            .over(partition_by=[refs.c.key, refs.c.token], order_by=refs.c.ord)
            .label("nth"),
        )
        .select_from(refs.join(found, _pk(refs, found)))
        .subquery(f"{name}_mentions")
    )
    again = mentions.c.stamp if stamps_stay else sa.false()
    return (
        sa.select(mentions.c.ord)
        .where(mentions.c.live, sa.or_(mentions.c.nth == sa.literal_column("1"), again))
        .add_cte(gone)
    )


LEASE_RELEASE: Final = _ended("release", stamps_stay=True)
LEASE_ABANDON: Final = _ended("abandon", stamps_stay=False)

# -- LEASE_PURGE --------------------------------------------------------------------------------
# The first `:limit` holdings expired by `:now_ms`, in (expires_at, key, token) order through
# `leases_expiry` (one index range, read until `:limit` rows are locked), deleted. SKIP LOCKED:
# purgers side by side take disjoint rows, and a purge never waits on a take, renewal or release
# (a row one of them holds is left for the next pass); the expiry is re-checked on the row as it
# is under its lock. The rows it locks are expired ones, which a take of their key would delete
# itself: such a take (or a release naming one) waits at most for this one bounded statement,
# then finds the row gone. No advisory lock: a take's count never depends on an expired row.
_purgeable = (
    sa.select(leases.c.key, leases.c.token)
    .where(leases.c.expires_at_ms <= _NOW)
    .order_by(leases.c.expires_at_ms, leases.c.key, leases.c.token)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True, of=leases)
    .cte("purgeable")
)
_purged = (
    sa.delete(leases)
    .where(
        sa.tuple_(leases.c.key, leases.c.token).in_(sa.select(_purgeable.c.key, _purgeable.c.token))
    )
    .returning(leases.c.token)
    .cte("purged")
)
LEASE_PURGE: Final = sa.select(sa.func.count().label("purged")).select_from(_purged)
