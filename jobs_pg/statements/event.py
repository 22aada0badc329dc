"""The `event_*` statements, and the lock a publish and a waiting park share.

Whether an event matches a wait is decided in Python (`jobs_core.semantics.event_matches`), not
with jsonb: jsonb compares numbers as `numeric` (`0.1` and `0.10000000000000001` differ there,
not as JSON's doubles; `1e400` is a number there, not in Python) and its `@>` matches arrays and
nested objects as subsets, where the contract wants them equal. The statements narrow by name
and time through the indexes; the driver decides the match inside the same transaction.

The publish-versus-park race: a publish and a PARK with a wait on the same event name both take
`EVENT_LOCK` (a transaction-scoped advisory lock per name) in a statement of its own, before they
read each other's tables. Whichever comes second reads, in a statement that starts after the
first committed, what the first wrote: the park sees the stored event (and goes `ready`), or the
publish sees the stored wait (and wakes it). Neither can miss the other.
"""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import events, jobs, lit
from jobs_pg.statements._build import BIGINT, INT, NO_WAIT, TEXT, arr, ex, p, xact_locks

# -- EVENT_LOCK ---------------------------------------------------------------------------------
# The advisory locks of these keys (one per event name; the driver passes them sorted, and each
# is taken in that order, so two parks of several names never wait on each other in a cycle).
# Held until the transaction ends.
EVENT_LOCK: Final = xact_locks()


def _tenant_key(column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """`coalesce(tenant, '')`: a tenant as `jobs_waits` keys it (a tenant is never '')."""
    return sa.func.coalesce(column, sa.literal_column("''"))


# -- EVENT_FIND ---------------------------------------------------------------------------------
# One page of a name's unexpired events for the wait's tenant (`:tenant`, '' for none) or for
# every tenant, in (published_at, id) order, strictly after (`:after_ms`, `:after_id`) and
# published before `:until_ms` (the driver passes one past every time for a wait without an
# end): the driver starts at (`since_ms`, '') — every id is non-empty, so that is "published at
# or after since" — and pages on until an event matches. `events_by_name` serves it as one range
# read, bounded at both ends.
EVENT_FIND: Final = (
    sa.select(
        events.c.id,
        events.c.name,
        events.c.data_json,
        events.c.published_at_ms,
        events.c.expires_at_ms,
        events.c.tenant_id,
        events.c.all_tenants,
    )
    .where(
        events.c.name == p("name", TEXT),
        sa.tuple_(events.c.published_at_ms, events.c.id)
        > sa.tuple_(p("after_ms", BIGINT), p("after_id", TEXT)),
        events.c.published_at_ms < p("until_ms", BIGINT),
        events.c.expires_at_ms > p("now_ms", BIGINT),
        sa.or_(events.c.all_tenants, _tenant_key(events.c.tenant_id) == p("tenant", TEXT)),
    )
    .order_by(events.c.published_at_ms, events.c.id)
    .limit(p("limit", INT))
)


# -- EVENT_PUBLISH, EVENT_PUBLISH_ALL_TENANTS ----------------------------------------------------
# Run after EVENT_LOCK, in its transaction: store the event (with its tenant) unless its id is
# taken, and — only when it was stored — lock and answer the parked rows waiting for its name
# that it reaches: of its tenant (`:tenant`, '' for none; the _ALL_TENANTS form: of every
# tenant), whose window holds its time (since at or before it, until after it or none). Both
# are one range read of `jobs_waits`: (name, tenant) for the first, the name for the second.
# Answers one row per such wait (id, match), or one row with a NULL id when the event was stored
# and nobody waits; no row when the id was taken.
def _publish(all_tenants: bool) -> sa.Select[Any]:
    stored = (
        pg_insert(events)
        .values(
            id=p("id", TEXT),
            name=p("name", TEXT),
            data_json=p("data_json", TEXT),
            published_at_ms=p("published_at_ms", BIGINT),
            expires_at_ms=p("expires_at_ms", BIGINT),
            tenant_id=p("tenant_id", TEXT),
            all_tenants=sa.true() if all_tenants else sa.false(),
        )
        .on_conflict_do_nothing(index_elements=[events.c.id])
        .returning(events.c.id)
        .cte("stored")
    )
    scope = [] if all_tenants else [_tenant_key(jobs.c.wait_tenant_id) == p("tenant", TEXT)]
    waiting = (
        sa.select(jobs.c.id, jobs.c.wait_match_json)
        .where(
            jobs.c.wait_event == p("name", TEXT),
            *scope,
            jobs.c.state == lit("parked"),
            jobs.c.wait_since_ms <= p("published_at_ms", BIGINT),
            sa.or_(
                jobs.c.wait_until_ms.is_(None),
                jobs.c.wait_until_ms > p("published_at_ms", BIGINT),
            ),
            ex(stored.c.id.is_not(None)),
        )
        .order_by(jobs.c.id)
        .with_for_update(of=jobs)
        .cte("waiting")
    )
    return sa.select(waiting.c.id, waiting.c.wait_match_json).select_from(
        stored.outerjoin(waiting, sa.true())
    )


EVENT_PUBLISH: Final = _publish(all_tenants=False)
EVENT_PUBLISH_ALL_TENANTS: Final = _publish(all_tenants=True)

# -- EVENT_WAKE ---------------------------------------------------------------------------------
# The second half of a publish, for the waits whose match the driver confirmed (rows it holds
# locked): `ready` at the event's publish time, the wait dropped; then one NOTIFY per queue that
# got a due row (`:channel` NULL: the wake is off). Answers how many rows it woke.
_woken = (
    sa.update(jobs)
    .where(jobs.c.id == sa.func.any(arr("ids", TEXT)), jobs.c.state == lit("parked"))
    .values(
        state=lit("ready"),
        run_at_ms=p("run_at_ms", BIGINT),
        **NO_WAIT,
    )
    .returning(jobs.c.queue)
    .cte("woken")
)
_woken_queues = (
    sa.select(_woken.c.queue)
    .where(p("channel", TEXT).is_not(None))
    .distinct()
    .subquery("woken_queues")
)
_notes: Any = (
    sa.select(
        sa.func.count(
            sa.func.pg_notify(p("channel", TEXT), sa.literal_column("'q:'") + _woken_queues.c.queue)
        )
    )
    .scalar_subquery()
    .label("notified")
)
EVENT_WAKE: Final = sa.select(
    sa.select(sa.func.count()).select_from(_woken).scalar_subquery().label("woken"), _notes
)

# -- EVENT_PURGE --------------------------------------------------------------------------------
# The least `:limit` expired events by (expires_at, id) through `events_expiry`; SKIP LOCKED so
# purgers side by side take disjoint rows and never wait on each other.
_expired = (
    sa.select(events.c.id)
    .where(events.c.expires_at_ms <= p("now_ms", BIGINT))
    .order_by(events.c.expires_at_ms, events.c.id)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True)
    .cte("expired")
)
_purged = (
    sa.delete(events)
    .where(events.c.id.in_(sa.select(_expired.c.id)))
    .returning(events.c.id)
    .cte("purged")
)
EVENT_PURGE: Final = sa.select(sa.func.count().label("purged")).select_from(_purged)
