"""The Postgres schema's alembic environment and versions, shipped inside the wheel.

`jobs_pg.migrate.upgrade(url, schema)` runs them from an installed package; the top-level
`alembic/env.py` (a checkout's `alembic upgrade head`) delegates to `environment.run()` here;
an app with its own alembic setup adds `jobs_pg/migrations/versions` to its `version_locations` (our
revisions carry the branch label `ujobs`, and our version table is `ujobs_alembic_version` in our
schema, so the histories never mix).
"""
