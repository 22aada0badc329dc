"""The `postgresql`, `postgresql+psycopg` and `postgres` URL schemes for `ujobs --driver`, and
their scratch store for the `ujobs` test fixture."""

from __future__ import annotations

from jobs_pg.scratch import scratch_store
from jobs_pg.urls import from_url

__all__ = ["from_url", "scratch_store"]
