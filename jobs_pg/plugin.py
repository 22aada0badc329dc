"""The `postgresql`, `postgresql+psycopg` and `postgres` URL schemes for `ujobs --driver`."""

from __future__ import annotations

from jobs_pg.urls import from_url

__all__ = ["from_url"]
