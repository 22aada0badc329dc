"""The Postgres driver: SQLAlchemy Core statements run on psycopg 3, schema by alembic.

`PgDriver(url, schema=…)` is the `JobDriver`; `jobs_pg.migrate.upgrade(url, schema)` installs
or upgrades its tables; `jobs_pg.schema` declares them. `PgOutbox` is the transactional outbox
(`stage(conn, handle, input)` in the caller's own transaction), `stage` its shortcut.
"""

from jobs_pg.driver import PgDriver
from jobs_pg.outbox import PgOutbox, stage

__all__ = ["PgDriver", "PgOutbox", "stage"]
