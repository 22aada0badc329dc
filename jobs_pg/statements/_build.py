"""Small builders the statement modules share: typed bind parameters and `unnest` row sets."""

from __future__ import annotations

from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.selectable import TableValuedAlias

from jobs_core.states import LIVE_STATES
from jobs_pg.schema import jobs, lit

TEXT = sa.Text()
BIGINT = sa.BigInteger()
INT = sa.Integer()
SMALLINT = sa.SmallInteger()
BOOL = sa.Boolean()


def p(name: str, type_: sa.types.TypeEngine[Any]) -> BindParameter[Any]:
    """A named, typed bind parameter (typed so psycopg sends a cast, never a guess)."""
    return sa.bindparam(name, type_=type_)


def arr(name: str, type_: sa.types.TypeEngine[Any]) -> BindParameter[Any]:
    """A named array parameter: one value per item of a batch."""
    return sa.bindparam(name, type_=pg.ARRAY(type_))


#: A `NewJob`'s fields as `unnest` columns: what a batch of records binds, one array each (the
#: jobs' batch enqueue and the outbox's stage write the same record).
NEW_JOB_ARRAYS: Final[dict[str, sa.types.TypeEngine[Any]]] = {
    "id": TEXT,
    "run_id": TEXT,
    "name": TEXT,
    "queue": TEXT,
    "tenant_id": TEXT,
    "idempotency_key": TEXT,
    "input_json": TEXT,
    "priority": INT,
    "max_attempts": INT,
    "run_at_ms": BIGINT,
    "created_at_ms": BIGINT,
    "enqueued_by": TEXT,
    "traceparent": TEXT,
    # -- acts-for --
    "acts_for": TEXT,
}


#: The values that drop a row's event wait (a wait lives only while its row is `parked`).
NO_WAIT: Final[dict[str, Any]] = {
    "wait_event": sa.null(),
    "wait_match_json": sa.null(),
    "wait_since_ms": sa.null(),
    "wait_tenant_id": sa.null(),
    "wait_until_ms": sa.null(),
}


def unnest(alias: str, **columns: sa.types.TypeEngine[Any]) -> TableValuedAlias:
    """`unnest(:a, :b, …) WITH ORDINALITY AS alias(a, b, …, ord)`: a batch as rows, in order.

    Each column is bound as one array, so a batch of any size is a handful of parameters and
    the statement text (and its prepared plan) never changes with the batch size.
    """
    fn = sa.func.unnest(*(arr(name, t) for name, t in columns.items()))
    return fn.table_valued(
        *(sa.column(name, t) for name, t in columns.items()), with_ordinality="ord"
    ).render_derived(name=alias, with_types=False)


def xact_locks() -> sa.Select[int]:
    """Take the transaction-scoped advisory lock of each of `:keys` (bigints), in array order.

    Callers pass the keys sorted and distinct, so two transactions that lock overlapping sets
    wait for each other and never in a cycle. Held until the transaction ends.
    """
    keys = (
        sa.func.unnest(arr("keys", BIGINT))
        .table_valued(sa.column("key", BIGINT), with_ordinality="ord")
        .render_derived(name="k", with_types=False)
    )
    return sa.select(
        sa.func.count(sa.func.pg_advisory_xact_lock(keys.c.key)).label("locked")
    ).select_from(keys)


def ex(*where: sa.ColumnElement[bool]) -> sa.Exists:
    """`EXISTS (SELECT 1 …)`: a test of presence that names no column."""
    return sa.select(sa.literal_column("1")).where(*where).exists()


def live(t: sa.FromClause) -> sa.ColumnElement[bool]:
    """`state IN ('parked', 'ready', 'running')` as literals, as the partial indexes spell it."""
    return t.c.state.in_([lit(s.value) for s in sorted(LIVE_STATES)])


def due_states(t: sa.FromClause) -> sa.ColumnElement[bool]:
    """`state IN ('parked', 'ready')`: the `jobs_due` index predicate."""
    return t.c.state.in_([lit("parked"), lit("ready")])


def live_key_matches(
    t: sa.FromClause,
    name: sa.ColumnElement[Any],
    tenant_id: sa.ColumnElement[Any],
    key: sa.ColumnElement[Any],
) -> sa.ColumnElement[bool]:
    """Live rows of `t` holding this idempotency namespace, spelled as `jobs_live_key` is."""
    return sa.and_(
        t.c.name == name,
        sa.func.coalesce(t.c.tenant_id, sa.literal_column("''"))
        == sa.func.coalesce(tenant_id, sa.literal_column("''")),
        t.c.idempotency_key == key,
        live(t),
    )


#: The live-key ON CONFLICT target: exactly the `jobs_live_key` index expression and predicate.
LIVE_KEY_TARGET: list[Any] = [
    jobs.c.name,
    sa.func.coalesce(jobs.c.tenant_id, sa.literal_column("''")),
    jobs.c.idempotency_key,
]
LIVE_KEY_WHERE = live(jobs)
