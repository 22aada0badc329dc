"""The `postgresql`, `postgresql+psycopg` and `postgres` URL schemes: `from_url` for `ujobs
--driver` (`ujobs.drivers`), `outbox_from_url` for `ujobs relay --outbox` (`ujobs.outboxes`)."""

from __future__ import annotations

from jobs_pg.outbox import outbox_from_url
from jobs_pg.urls import from_url

__all__ = ["from_url", "outbox_from_url"]
