"""The `postgresql`, `postgresql+psycopg` and `postgres` URL schemes: `from_url` for `ujobs
--driver` (`ujobs.drivers`), `outbox_from_url` for `ujobs relay --outbox` (`ujobs.outboxes`),
and `scratch_store` for the `ujobs` test fixture."""

from __future__ import annotations

from jobs_pg.outbox import outbox_from_url
from jobs_pg.scratch import scratch_store
from jobs_pg.urls import from_url

__all__ = ["from_url", "outbox_from_url", "scratch_store"]
