"""The wake's own statement: the probe that proves a LISTEN session receives notifications."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

from jobs_pg.statements._build import TEXT, p

# Sent through the POOL (the path enqueues take), never the listening session itself: only a
# notification that crossed from another session proves the channel delivers (behind PgBouncer
# in transaction mode it never arrives, and the listener stays unproven).
WAKE_PROBE: Final = sa.select(sa.func.pg_notify(p("channel", TEXT), p("payload", TEXT)))

#: `$n` text, so the probe goes as a lone `Round` (`PgDriver._alone`) like a lone enqueue: a
#: trailing wake follows every burst's slot, and psycopg's cursor cost it a fifth more.
RAW_TEXT: Final = frozenset({"WAKE_PROBE"})
