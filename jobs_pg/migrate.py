"""Apply the packaged migrations from code (tests, `ujobs db upgrade`), no alembic.ini needed."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from alembic.config import Config

from alembic import command

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


def upgrade(url: str, schema: str = "ujobs", revision: str = "head") -> None:
    """Create or upgrade the jobs schema `schema` at `url` to `revision` (idempotent)."""
    command.upgrade(config(url, schema), revision)


def downgrade(url: str, schema: str = "ujobs", revision: str = "base") -> None:
    """Step the jobs schema back to `revision` (`base` drops every table we created)."""
    command.downgrade(config(url, schema), revision)
