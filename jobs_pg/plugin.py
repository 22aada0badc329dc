"""The `postgresql`, `postgresql+psycopg` and `postgres` URL schemes for `ujobs --driver`."""

from __future__ import annotations

from jobs_core.urlparams import pop_param
from jobs_pg.driver import PgDriver


def from_url(url: str) -> PgDriver:
    """A `PgDriver` for `url`; `?schema=name` selects the schema (default `ujobs`)."""
    plain, schema = pop_param(url, "schema", "ujobs")
    return PgDriver(plain, schema=schema)
