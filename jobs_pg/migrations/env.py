"""alembic's entry script for the packaged migrations (the logic is in `environment.py`)."""

from __future__ import annotations

from jobs_pg.migrations.environment import run

run()
