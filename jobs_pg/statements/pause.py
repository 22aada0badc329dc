"""The `pause_*` statements: the pause rows the claim reads (by queue or by job name)."""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from jobs_pg.schema import pauses
from jobs_pg.statements._build import TEXT, p

# ON CONFLICT DO NOTHING + RETURNING answers "was it new" in the same write, race-free.
PAUSE_ADD: Final = (
    pg_insert(pauses)
    .values(kind=p("kind", TEXT), value=p("value", TEXT))
    .on_conflict_do_nothing(index_elements=[pauses.c.kind, pauses.c.value])
    .returning(pauses.c.kind)
)

# Sorted by the driver (the contract sorts `Pause` records in Python, code-point order).
PAUSE_LIST: Final = sa.select(pauses.c.kind, pauses.c.value)

# DELETE … RETURNING answers "did it exist" without a separate read.
PAUSE_REMOVE: Final = (
    sa.delete(pauses)
    .where(pauses.c.kind == p("kind", TEXT), pauses.c.value == p("value", TEXT))
    .returning(pauses.c.kind)
)
