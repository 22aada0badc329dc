"""The `lease_*` statements: a key's holdings, granted under the key's lock and named by
`(key, token)` ever after, each call working on a key at the KEY'S TIME.

Each lease key has a row in `lease_clocks`: its clock, the latest `now_ms` any take, renewal,
release or abandon of it used (a purge moves it to the latest end it deleted). Every such call
first upserts the rows of its keys (`_clock_moved`: sorted by key, `now_ms = greatest(clock,
:now_ms)`), which both moves each key's clock to the call's time and locks the row until the
call commits: the row is the key's lock, and its value the time the call works at (the later of
the caller's now and every earlier call's), so a key's time never runs back whatever order
callers land in or however their clocks disagree.

A take is one transaction of two statements, pipelined by the driver (one round trip):
`LEASE_CLOCK` upserts (and so locks) the clock of each key of the batch, then `LEASE_TAKE`
counts and grants at each key's time. Under READ COMMITTED a statement's snapshot is taken when
it starts, before it waits on any lock, so counting and granting in the statement that waits for
the key could see a racing take's holdings too late (the limit exceeded) or a release too late
(a refusal with room left). `LEASE_TAKE` starts only once the lock is granted, after the
previous writer of the key committed: its snapshot holds every grant ever made of its keys, and
nobody else writes one until it commits.

Renewals, releases and abandons are one statement each: the clock upsert as a CTE, then the rows
they name, locked in `(key, token)` order by a primary-key lookup each (each read after its
key's clock row is locked: it needs that row's time) and decided as they are under the lock.
Every writer locks clock rows first, in key order, and a holding only under its key's clock, so
no two wait on each other in a cycle. The purge never waits (SKIP LOCKED on a holding and its
key's clock): it joins no cycle either.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import REGCLASS, distinct_on
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import C, lease_clocks, leases
from jobs_pg.statements._build import BIGINT, BOOL, INT, TEXT, arr, ex, p, unnest

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


def _clock_moved(keys: Any) -> Any:
    """Upsert the clock of each distinct key of `keys` (a FROM with a `key` column), in key
    order, to `greatest(clock, :now_ms)`: the row locked until commit (the key's lock), its
    `now_ms` the key's time for this call."""
    rows = sa.select(keys.c.key, _NOW).distinct().order_by(keys.c.key)
    ins = pg_insert(lease_clocks).from_select(["key", "now_ms"], rows)
    return ins.on_conflict_do_update(
        index_elements=[lease_clocks.c.key],
        set_={"now_ms": sa.func.greatest(lease_clocks.c.now_ms, ins.excluded.now_ms)},
    )


# -- LEASE_CLOCK --------------------------------------------------------------------------------
# A take's first statement: the clock of each key of the batch (`:keys`, sorted and distinct)
# moved to the take's time and locked until the take commits.
_clock_keys = (
    sa.func.unnest(arr("keys", TEXT))
    .table_valued(sa.column("key", TEXT))
    .render_derived(name="clock_keys", with_types=False)
)
LEASE_CLOCK: Final = _clock_moved(
    sa.select(_clock_keys.c.key.collate(C).label("key")).subquery("clock_key")
)

# -- LEASE_TAKE ---------------------------------------------------------------------------------
# Run after LEASE_CLOCK, in its transaction: each key's time `at` is its clock row (moved there
# by LEASE_CLOCK, locked by this transaction), and "live" and "expired" below are at that time.
# Per key, in item order: a holder with a live holding gets it replaced (a new token, the count
# unchanged); any other item is granted while the live holdings plus the items of its key
# granted before it are fewer than `lim`. Every decision is made on the keys' holdings as they
# are: the snapshot's rows this take does not write (live, of holders it does not name), and the
# rows it may write (`touched`: expired ones and those of its holders) as they are under their
# row lock (every other writer of the key waits on its clock row, so none changed since the
# snapshot; the row locks keep this statement right on its own). Expired holdings are deleted,
# replaced ones too; tokens are drawn in item order; a new holding ends at its key's time +
# ttl. Answers `(ord, token, expires_at_ms)` for each item granted.
_items = _batch("items", holder=TEXT, lim=INT, ttl_ms=BIGINT, stamp=BOOL)
_at = (
    sa.select(lease_clocks.c.key, lease_clocks.c.now_ms.label("at"))
    .where(lease_clocks.c.key == sa.func.any(arr("key", TEXT)))
    .cte("at")
)
_seen = (
    sa.select(leases.c.key, leases.c.holder, leases.c.token, leases.c.expires_at_ms, _at.c.at)
    .select_from(leases.join(_at, _at.c.key == leases.c.key))
    .cte("seen")
)


def _named(t: Any) -> sa.ColumnElement[bool]:
    """The row of `t` is held by a holder an item of its key names."""
    return sa.tuple_(t.c.key, t.c.holder).in_(sa.select(_items.c.key, _items.c.holder))


_may_write = (
    sa.select(_seen.c.key, _seen.c.token, _seen.c.at)
    .where(sa.or_(_seen.c.expires_at_ms <= _seen.c.at, _named(_seen)))
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
        _may_write.c.key,
        _may_write.c.token,
        _may_write.c.at,
        _touched_row.c.holder,
        _touched_row.c.expires_at_ms,
    )
    .select_from(_may_write.join(_touched_row, sa.true()))
    .cte("touched")
)
_live = sa.union_all(
    sa.select(_seen.c.key, _seen.c.holder).where(
        _seen.c.expires_at_ms > _seen.c.at, ~_named(_seen)
    ),
    sa.select(_touched.c.key, _touched.c.holder).where(_touched.c.expires_at_ms > _touched.c.at),
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
        _at.c.at,
        _is_mine.label("mine"),
        sa.func.coalesce(_counts.c.n, sa.literal_column("0")).label("n_live"),
        # The new holdings of this key up to this item: a replacement adds none.
        sa.func.count()
        .filter(~_is_mine)
        .over(partition_by=_items.c.key, order_by=_items.c.ord)
        .label("nth_new"),
    )
    .select_from(
        _items.join(_at, _at.c.key == _items.c.key)
        .outerjoin(_counts, _counts.c.key == _items.c.key)
        .outerjoin(_mine, sa.and_(_mine.c.key == _items.c.key, _mine.c.holder == _items.c.holder))
    )
    .subquery("decided")
)
# Volatile output is computed after the sort (Postgres ≥ 9.6), so tokens follow item order.
_granted = (
    sa.select(
        _decided.c.ord,
        _decided.c.key,
        _decided.c.holder,
        (_decided.c.at + _decided.c.ttl_ms).label("ends"),
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
        sa.or_(_touched.c.expires_at_ms <= _touched.c.at, _named(_touched)),
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
            _granted.c.ends,
            _granted.c.stamp,
        ),
    )
    .returning(leases.c.token)
    .cte("put")
)
LEASE_TAKE: Final = sa.select(_granted.c.ord, _granted.c.token, _granted.c.ends).add_cte(
    _gone, _put
)

# -- LEASE_HOLDERS ------------------------------------------------------------------------------
# One range of `leases_pkey`: the key's live holdings at its time (the later of `:now_ms` and its
# clock; `greatest` skips a NULL: no clock), read only (the public method sorts by token).
_clock_of = (
    sa.select(lease_clocks.c.now_ms).where(lease_clocks.c.key == p("key", TEXT)).scalar_subquery()
)
LEASE_HOLDERS: Final = sa.select(
    leases.c.key, leases.c.holder, leases.c.token, leases.c.expires_at_ms, leases.c.stamp
).where(leases.c.key == p("key", TEXT), leases.c.expires_at_ms > sa.func.greatest(_NOW, _clock_of))

# -- LEASE_RENEW --------------------------------------------------------------------------------
# The keys' clocks moved and locked first; each named holding once (with the ttl of its last
# mention: the one that lands last), locked in (key, token) order by a primary-key lookup each,
# and only while live at its key's time under the lock; those move to that time + ttl. Answers
# the ordinal of every item whose holding was live.
_renews = _batch("renews", token=BIGINT, ttl_ms=BIGINT)
_renew_clock = (
    _clock_moved(_renews)
    .returning(lease_clocks.c.key, lease_clocks.c.now_ms.label("at"))
    .cte("renew_clock")
)
_renew_last = (
    sa.select(_renews.c.key, _renews.c.token, _renews.c.ttl_ms, _renew_clock.c.at)
    .select_from(_renews.join(_renew_clock, _renew_clock.c.key == _renews.c.key))
    .ext(distinct_on(_renews.c.key, _renews.c.token))
    .order_by(_renews.c.key, _renews.c.token, _renews.c.ord.desc())
    .subquery("renew_last")
)
_renew_row = (
    sa.select(leases.c.token)
    .where(_pk(leases, _renew_last), leases.c.expires_at_ms > _renew_last.c.at)
    .with_for_update(of=leases)
    .lateral("renew_row")
)
_renew_locked = (
    sa.select(
        _renew_last.c.key,
        _renew_last.c.token,
        (_renew_last.c.at + _renew_last.c.ttl_ms).label("ends"),
    )
    .select_from(_renew_last.join(_renew_row, sa.true()))
    .cte("renew_locked")
)
_renewed = (
    sa.update(leases)
    .where(_pk(leases, _renew_locked))
    .values(expires_at_ms=_renew_locked.c.ends)
    .returning(leases.c.key, leases.c.token)
    .cte("renewed")
)
LEASE_RENEW: Final = sa.select(_renews.c.ord).select_from(
    _renews.join(_renewed, _pk(_renews, _renewed))
)

# -- LEASE_RELEASE, LEASE_ABANDON ---------------------------------------------------------------
# The keys' clocks moved and locked first; each named holding once, locked in (key, token)
# order by a primary-key lookup each and read as it is under the lock, live or not at its key's
# time; then deleted (a release keeps a live stamp). Answers the ordinal of every
# item that found its holding live, as the items one after another would: a holding's later
# mentions find it only when it stayed (a released live stamp).


def _ended(name: str, *, stamps_stay: bool) -> sa.Select[Any]:
    refs = _batch(f"{name}_refs", token=BIGINT)
    clock = (
        _clock_moved(refs)
        .returning(lease_clocks.c.key, lease_clocks.c.now_ms.label("at"))
        .cte(f"{name}_clock")
    )
    in_order = (
        sa.select(refs.c.key, refs.c.token, clock.c.at)
        .select_from(refs.join(clock, clock.c.key == refs.c.key))
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
            (row.c.expires_at_ms > in_order.c.at).label("live"),
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
# First the clocks: the first `:limit` at or before `:idle_ms` (`now - LEASE_CLOCK_KEEP_MS`), by
# (clock, key) through `lease_clocks_idle`, locked (SKIP LOCKED: a key in use is left), and those
# whose key held nothing as the statement began dropped. Then the holdings: the first `:limit`
# expired by `:now_ms`, in (expires_at, key, token) order through `leases_expiry` (one index
# range, read until `:limit` rows are locked), each with its key's clock row; deleted, and each
# key's clock moved to the latest end deleted of it (never back). SKIP LOCKED on both: purgers
# side by side take disjoint rows, and a purge never waits on a take, renewal or release (whose
# key's clock row it holds: such a key is left for the next pass). A clock dropped here and a
# clock moved here are different rows (one key held nothing, the other held what went).
_idle = (
    sa.select(lease_clocks.c.key)
    .where(lease_clocks.c.now_ms <= p("idle_ms", BIGINT))
    .order_by(lease_clocks.c.now_ms, lease_clocks.c.key)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True)
    .cte("idle")
)
_dropped = (
    sa.delete(lease_clocks)
    .where(
        lease_clocks.c.key.in_(sa.select(_idle.c.key)),
        ~ex(leases.c.key == lease_clocks.c.key),
    )
    .returning(lease_clocks.c.key)
    .cte("dropped")
)
_purgeable = (
    sa.select(leases.c.key, leases.c.token)
    .select_from(leases.join(lease_clocks, lease_clocks.c.key == leases.c.key))
    .where(leases.c.expires_at_ms <= _NOW)
    .order_by(leases.c.expires_at_ms, leases.c.key, leases.c.token)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True, of=[leases, lease_clocks])
    .cte("purgeable")
)
_purged = (
    sa.delete(leases)
    .where(
        sa.tuple_(leases.c.key, leases.c.token).in_(sa.select(_purgeable.c.key, _purgeable.c.token))
    )
    .returning(leases.c.key, leases.c.expires_at_ms)
    .cte("purged")
)
_ends = (
    sa.select(_purged.c.key, sa.func.max(_purged.c.expires_at_ms).label("ends"))
    .group_by(_purged.c.key)
    .subquery("ends")
)
_moved = (
    sa.update(lease_clocks)
    .where(lease_clocks.c.key == _ends.c.key)
    .values(now_ms=sa.func.greatest(lease_clocks.c.now_ms, _ends.c.ends))
    .returning(lease_clocks.c.key)
    .cte("moved")
)
LEASE_PURGE: Final = (
    sa.select(sa.func.count().label("purged")).select_from(_purged).add_cte(_dropped, _moved)
)
