"""The `webhook_*` statements: the endpoint ledger `webhook()` sends through, and its attempts.

Each is ONE autocommit statement. A tenant is spelled '' for None (a tenant is never empty), so
(tenant_id, endpoint) is a plain key. `WEBHOOK_ATTEMPT_PUT` is fenced as `STEP_PUT` is: the
fence's job row is read `FOR SHARE` while `running` with those `claims` and that worker, so a
concurrent ack, nack, cancel or re-claim of it waits for this statement, or this one waits and
re-checks the fence on the row it left and records nothing. Lock order: the job row, then the
endpoint row (`FOR UPDATE`), which orders every attempt of one endpoint: a streak never loses a
step to a racing attempt.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import jobs, lit, webhook_attempts, webhook_endpoints
from jobs_pg.statements._build import BIGINT, INT, TEXT, p

#: An endpoint's columns, in `WebhookEndpoint` field order.
ENDPOINT_COLUMNS: Final = (
    "tenant_id",
    "endpoint",
    "url",
    "enabled",
    "failures",
    "disabled_at_ms",
    "created_at_ms",
    "updated_at_ms",
)
#: An attempt's columns, in `WebhookAttempt` field order.
ATTEMPT_COLUMNS: Final = (
    "tenant_id",
    "endpoint",
    "job_id",
    "claims",
    "event_id",
    "outcome",
    "status_code",
    "latency_ms",
    "excerpt",
    "error",
    "at_ms",
)
_endpoint = [webhook_endpoints.c[c] for c in ENDPOINT_COLUMNS]
_attempt = [webhook_attempts.c[c] for c in ATTEMPT_COLUMNS]
_this_endpoint = sa.and_(
    webhook_endpoints.c.tenant_id == p("tenant_id", TEXT),
    webhook_endpoints.c.endpoint == p("endpoint", TEXT),
)

# -- WEBHOOK_ENDPOINT_PUT -----------------------------------------------------------------------
# Insert enabled with no failures, or move a known endpoint's URL (its state kept).
WEBHOOK_ENDPOINT_PUT: Final = (
    pg_insert(webhook_endpoints)
    .values(
        tenant_id=p("tenant_id", TEXT),
        endpoint=p("endpoint", TEXT),
        url=p("url", TEXT),
        enabled=sa.true(),
        failures=sa.literal(0, INT),
        disabled_at_ms=sa.null(),
        created_at_ms=p("now_ms", BIGINT),
        updated_at_ms=p("now_ms", BIGINT),
    )
    .on_conflict_do_update(
        index_elements=[webhook_endpoints.c.tenant_id, webhook_endpoints.c.endpoint],
        set_={"url": p("url", TEXT), "updated_at_ms": p("now_ms", BIGINT)},
    )
    .returning(*_endpoint)
)

# -- WEBHOOK_ENDPOINT_GET -----------------------------------------------------------------------
WEBHOOK_ENDPOINT_GET: Final = sa.select(*_endpoint).where(_this_endpoint)

# -- WEBHOOK_ENDPOINT_LIST ----------------------------------------------------------------------
# Along the primary key: (tenant_id, endpoint) in code-point order, '' (no tenant) first.
WEBHOOK_ENDPOINT_LIST: Final = (
    sa.select(*_endpoint)
    .order_by(webhook_endpoints.c.tenant_id, webhook_endpoints.c.endpoint)
    .limit(p("limit", INT))
)

# -- WEBHOOK_ENDPOINT_ENABLE --------------------------------------------------------------------
WEBHOOK_ENDPOINT_ENABLE: Final = (
    sa.update(webhook_endpoints)
    .where(_this_endpoint)
    .values(
        enabled=sa.true(),
        failures=sa.literal(0, INT),
        disabled_at_ms=sa.null(),
        updated_at_ms=p("now_ms", BIGINT),
    )
    .returning(*_endpoint)
)

# -- WEBHOOK_ATTEMPT_PUT ------------------------------------------------------------------------
# `held` is the fence; `found` locks the endpoint row while it holds. `recorded` inserts the
# claim's attempt when the endpoint is there (a retried call finds its own row: DO NOTHING);
# only a row it inserted lets `moved` move the streak — reset on `delivered`, one more on
# `failed`, disabling an enabled endpoint at `:disable_after`. The answer: 'm' the endpoint as
# moved, 'f' as found (before any move); no row at all when the fence or the endpoint is missing.
_held = (
    sa.select(jobs.c.id)
    .where(
        jobs.c.id == p("job_id", TEXT),
        jobs.c.state == lit("running"),
        jobs.c.claims == p("claims", BIGINT),
        jobs.c.claimed_by == p("worker_id", TEXT),
    )
    .with_for_update(of=jobs, read=True)
    .cte("held")
)
_found = (
    sa.select(*_endpoint)
    .where(_this_endpoint, sa.select(sa.literal_column("1")).select_from(_held).exists())
    .with_for_update(of=webhook_endpoints)
    .cte("found")
)
_recorded = (
    pg_insert(webhook_attempts)
    .from_select(
        list(ATTEMPT_COLUMNS),
        sa.select(
            _found.c.tenant_id,
            _found.c.endpoint,
            p("job_id", TEXT),
            p("claims", BIGINT),
            p("event_id", TEXT),
            p("outcome", TEXT),
            p("status_code", INT),
            p("latency_ms", BIGINT),
            p("excerpt", TEXT),
            p("error", TEXT),
            p("now_ms", BIGINT),
        ),
    )
    .on_conflict_do_nothing(index_elements=[webhook_attempts.c.job_id, webhook_attempts.c.claims])
    .returning(webhook_attempts.c.job_id)
    .cte("recorded")
)
_failed = p("outcome", TEXT) == lit("failed")
_disables = sa.and_(
    _failed,
    webhook_endpoints.c.enabled,
    webhook_endpoints.c.failures + 1 >= p("disable_after", INT),
)
_moved = (
    sa.update(webhook_endpoints)
    .where(_this_endpoint, sa.select(sa.literal_column("1")).select_from(_recorded).exists())
    .values(
        failures=sa.case((_failed, webhook_endpoints.c.failures + 1), else_=sa.literal(0, INT)),
        enabled=sa.case((_disables, sa.false()), else_=webhook_endpoints.c.enabled),
        disabled_at_ms=sa.case(
            (_disables, p("now_ms", BIGINT)), else_=webhook_endpoints.c.disabled_at_ms
        ),
        updated_at_ms=p("now_ms", BIGINT),
    )
    .returning(*_endpoint)
    .cte("moved")
)
WEBHOOK_ATTEMPT_PUT: Final = sa.union_all(
    sa.select(sa.literal("m", TEXT).label("tag"), *_moved.c),
    sa.select(sa.literal("f", TEXT).label("tag"), *_found.c),
)

# -- WEBHOOK_ATTEMPT_LIST -----------------------------------------------------------------------
# One endpoint's attempts, newest first, read backwards along `webhook_attempts_endpoint`.
WEBHOOK_ATTEMPT_LIST: Final = (
    sa.select(*_attempt)
    .where(
        webhook_attempts.c.tenant_id == p("tenant_id", TEXT),
        webhook_attempts.c.endpoint == p("endpoint", TEXT),
    )
    .order_by(
        webhook_attempts.c.at_ms.desc(),
        webhook_attempts.c.job_id.desc(),
        webhook_attempts.c.claims.desc(),
    )
    .limit(p("limit", INT))
)

# -- WEBHOOK_ATTEMPT_PURGE ----------------------------------------------------------------------
# The oldest `:limit` attempts made before `:before_ms`, by (at, job id, claims), one range of
# `webhook_attempts_age`; SKIP LOCKED so purgers side by side take disjoint rows and never wait
# on each other. No endpoint row is read or locked: a purge never holds up an attempt's write.
_old = (
    sa.select(webhook_attempts.c.job_id, webhook_attempts.c.claims)
    .where(webhook_attempts.c.at_ms < p("before_ms", BIGINT))
    .order_by(webhook_attempts.c.at_ms, webhook_attempts.c.job_id, webhook_attempts.c.claims)
    .limit(p("limit", INT))
    .with_for_update(skip_locked=True)
    .cte("old")
)
_gone = (
    sa.delete(webhook_attempts)
    .where(
        sa.tuple_(webhook_attempts.c.job_id, webhook_attempts.c.claims).in_(
            sa.select(_old.c.job_id, _old.c.claims)
        )
    )
    .returning(webhook_attempts.c.job_id)
    .cte("gone")
)
WEBHOOK_ATTEMPT_PURGE: Final = sa.select(sa.func.count().label("purged")).select_from(_gone)
