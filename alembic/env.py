"""`alembic upgrade head` from a checkout: the packaged environment does the work.

The versions live in `jobs_pg/migrations/versions` (so a wheel ships them); `[tool.alembic]` in
pyproject.toml points `version_locations` there. URL: `-x url=…` or env `JOBS_DATABASE_URL`;
schema: `-x schema=…` or env `JOBS_PG_SCHEMA` (default `ujobs`).
"""

from __future__ import annotations

from jobs_pg.migrations.environment import run

run()
