"""The attempt history's SQL (`jobs_core.attempts`): the entry a write that ends a claim appends
to `jobs.attempts`, inside that very UPDATE (no statement of its own, no round-trip).

In an UPDATE's SET every `jobs` column is the row as it stood before the write, so the entry
reads the ended claim's `attempt`, `claims`, `claimed_by` and `claimed_at_ms`.

One entry is stored implicitly: the ack (the hot path) leaves `jobs.attempts` as it stands, and
a `completed` row's last entry is the one its own columns spell (`attempts_read`; nothing
changes those columns while the row stays `completed`). Every statement that reads the history
reads `attempts_read`, and the one write that moves a `completed` row on (the requeue) stores it.
Building that jsonb and rewriting the array was a fifth of the ack's execution on the server.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB

from jobs_core.attempts import ATTEMPT_HISTORY
from jobs_pg.schema import jobs, lit


def _str(value: str) -> sa.ColumnElement[Any]:
    # A JSON key: one of OUR constants, spelled as a SQL literal (no bind parameter to send).
    assert value.isidentifier(), value
    return sa.literal_column(f"'{value}'", sa.Text)


def attempt_entry(
    settled_at_ms: sa.ColumnElement[Any],
    outcome: sa.ColumnElement[Any],
    code: sa.ColumnElement[Any] | None = None,
    message: sa.ColumnElement[Any] | None = None,
    traceback: sa.ColumnElement[Any] | None = None,
    *,
    strip_nulls: bool = True,
) -> sa.ColumnElement[Any]:
    """The entry (`jobs_core.attempts.entry_json`'s shape) of the row's running claim, ended at
    `settled_at_ms` as `outcome`; NULL error fields are left out (`jsonb_strip_nulls`).

    `strip_nulls=False` is for a caller whose members are never NULL (no error fields, the
    worker fenced): the same entry without a second pass over it."""
    pairs: list[sa.ColumnElement[Any]] = [
        _str("attempt"),
        jobs.c.attempt,
        _str("claims"),
        jobs.c.claims,
        _str("worker"),
        jobs.c.claimed_by,
        _str("claimed_at"),
        # A row claimed before migration 0016 has no claim time: its settle's stands in.
        sa.func.coalesce(jobs.c.claimed_at_ms, settled_at_ms),
        _str("settled_at"),
        settled_at_ms,
        _str("outcome"),
        outcome,
    ]
    for key, value in (("code", code), ("message", message), ("traceback", traceback)):
        if value is not None:
            pairs += [_str(key), value]
    entry = sa.func.jsonb_build_object(*pairs, type_=JSONB)
    return sa.func.jsonb_strip_nulls(entry, type_=JSONB) if strip_nulls else entry


def attempts_appended(entry: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """`jobs.attempts` with `entry` last, the oldest dropped once it holds `ATTEMPT_HISTORY`
    (one append per write, so dropping one keeps it at the bound). `entry` is an object: `||`
    appends it to the array as one element, no wrapping array built."""
    history = sa.func.coalesce(jobs.c.attempts, sa.literal_column("'[]'::jsonb", JSONB))
    kept = sa.case(
        (
            sa.func.jsonb_array_length(history) >= sa.literal_column(str(ATTEMPT_HISTORY)),
            history.op("-", return_type=JSONB)(sa.literal_column("0")),
        ),
        else_=history,
    )
    return kept.op("||", return_type=JSONB)(entry)


def _claimed_since_0016() -> sa.ColumnElement[bool]:
    # Every claim since migration 0016 sets `claimed_at_ms` and nothing clears it: a row
    # without one was last claimed before it, and its ack stores the entry as it always did.
    return jobs.c.claimed_at_ms.is_not(None)


def ack_attempts(settled_at_ms: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
    """`jobs.attempts` after an ack at `settled_at_ms`: as it stands (the entry is implicit,
    `attempts_read` spells it), but for a row last claimed before migration 0016, whose entry
    is appended (no member is NULL: the fence holds `claimed_by`, the rest are NOT NULL)."""
    return sa.case(
        (
            _claimed_since_0016(),
            jobs.c.attempts,
        ),
        else_=attempts_appended(attempt_entry(settled_at_ms, lit("completed"), strip_nulls=False)),
    )


def attempts_read() -> sa.ColumnElement[Any]:
    """The row's attempt history as every reader sees it: `jobs.attempts`, and after it, for a
    `completed` row whose ack left its entry implicit, that entry, built from the row as the
    ack built it before (`settled_at` is the `finished_at_ms` the ack set).

    An entry names the `claims` of the claim it ended and every claim counts `claims` up, so
    a `completed` row's stored history ends at the row's own `claims` only where its ack
    stored the entry (an ack before this form, or of a row claimed before migration 0016)."""
    last = jobs.c.attempts.op("->", return_type=JSONB)(sa.literal_column("-1"))
    last_claims = sa.cast(last.op("->>", return_type=sa.Text)(_str("claims")), sa.BigInteger)
    implicit = sa.and_(
        jobs.c.state == lit("completed"),
        _claimed_since_0016(),
        jobs.c.claims.is_distinct_from(last_claims),
    )
    entry = attempt_entry(jobs.c.finished_at_ms, lit("completed"), strip_nulls=False)
    return sa.case((implicit, attempts_appended(entry)), else_=jobs.c.attempts)
