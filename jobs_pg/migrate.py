"""Apply the packaged migrations from code (tests, `ujobs db upgrade`), no alembic.ini needed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import sqlalchemy as sa
from alembic.config import Config

from alembic import command
from jobs_core.errors import DriverError, DriverUnavailableError, DriverUrlInvalidError
from jobs_core.urls import mask_text, mask_url
from jobs_pg.migrations.environment import VERSION_TABLE, _quote
from jobs_pg.urls import sqlalchemy_url

MIGRATIONS: Final = Path(__file__).parent / "migrations"


def config(url: str, schema: str = "ujobs") -> Config:
    """An alembic `Config` for our packaged migrations against `url`, in `schema`."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", str(MIGRATIONS / "versions"))
    cfg.attributes["url"] = url
    cfg.attributes["schema"] = schema
    return cfg


@contextmanager
def _typed(url: str) -> Iterator[None]:
    """Database failures as typed errors, their text masked: a server that is down is
    `X_DRIVER_UNAVAILABLE`, anything else the store says `X_DRIVER_ERROR`."""
    try:
        yield
    except sa.exc.OperationalError as exc:
        raise DriverUnavailableError(detail=_reason(exc, url)) from None
    except sa.exc.DBAPIError as exc:
        raise DriverError(detail=_reason(exc, url)) from None
    except (ValueError, sa.exc.ArgumentError) as exc:
        # SQLAlchemy's URL parser refusing the URL (a port that is not a number, …).
        raise DriverUrlInvalidError(mask_text(str(exc), url), detail=mask_url(url)) from None


def _reason(exc: sa.exc.DBAPIError, url: str) -> str:
    text = str(exc.orig).strip() or type(exc.orig).__name__
    return mask_text(" ".join(text.split()), url)


def version_of(url: str, schema: str = "ujobs") -> str | None:
    """The revision `<schema>.ujobs_alembic_version` records, or None when it has none."""
    with _typed(url):
        engine = sa.create_engine(sqlalchemy_url(url), poolclass=sa.pool.NullPool)
        try:
            with engine.connect() as conn:
                if not sa.inspect(conn).has_table(VERSION_TABLE, schema=schema):
                    return None
                row = conn.execute(
                    sa.text(f"SELECT version_num FROM {_quote(schema)}.{VERSION_TABLE}")
                ).first()
                return None if row is None else str(row[0])
        finally:
            engine.dispose()


def upgrade(url: str, schema: str = "ujobs", revision: str = "head") -> str:
    """Create or upgrade the jobs schema `schema` at `url` to `revision` (idempotent).

    Answers one line saying what it did: created the tables, upgraded them from one revision
    to another, or found them current. A server that is down: `DriverUnavailableError`.
    """
    before = version_of(url, schema)
    with _typed(url):
        command.upgrade(config(url, schema), revision)
    after = version_of(url, schema)
    if before is None:
        return f"created the jobs tables in schema {schema!r} at revision {after}"
    if before != after:
        return f"upgraded schema {schema!r} from revision {before} to {after}"
    return f"schema {schema!r} is current (revision {after}); nothing to do"


def downgrade(url: str, schema: str = "ujobs", revision: str = "base") -> None:
    """Step the jobs schema back to `revision` (`base` drops every table we created)."""
    with _typed(url):
        command.downgrade(config(url, schema), revision)
