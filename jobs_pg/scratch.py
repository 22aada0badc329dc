"""A scratch store on Postgres: a fresh schema per test, created by `migrate()`, dropped after
(`jobs_core.testing.stores`; found through this package's `ujobs.drivers` entry point)."""

from __future__ import annotations

import uuid

from jobs_core.errors import DriverError, DriverUnavailableError
from jobs_core.urlparams import add_params
from jobs_core.urls import mask_text
from jobs_pg.urls import libpq_url, split_options


class PgScratch:
    """A schema named `ujobs_test_<random>` on the server of `url`, replacing any `schema` the
    URL names. The wake channel is off unless the URL sets `wake` (a test's worker rounds never
    wait for one, and each listener costs a connection)."""

    def __init__(self, url: str) -> None:
        base, options = split_options(url)
        self.schema = f"ujobs_test_{uuid.uuid4().hex[:12]}"
        options["schema"] = self.schema
        options.setdefault("wake", "0")
        self._base = base
        self.url = add_params(base, options)

    async def drop(self) -> None:
        """Drop the schema and all it holds; idempotent."""
        import psycopg
        from psycopg import sql

        try:
            async with await psycopg.AsyncConnection.connect(
                libpq_url(self._base), autocommit=True
            ) as conn:
                await conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
                )
        except psycopg.OperationalError as exc:
            raise DriverUnavailableError(detail=mask_text(str(exc), self._base)) from None
        except psycopg.Error as exc:
            raise DriverError(mask_text(str(exc), self._base), detail=self.schema) from None


def scratch_store(url: str) -> PgScratch:
    """A new scratch schema's store on the server `url` names (no I/O until used)."""
    return PgScratch(url)
