"""The Postgres driver: SQLAlchemy Core statements run on psycopg 3, schema by alembic.

`PgDriver(url, schema=…)` is the `JobDriver`; `jobs_pg.migrate.upgrade(url, schema)` installs
or upgrades its tables; `jobs_pg.schema` declares them.
"""

from jobs_pg.driver import PgDriver

__all__ = ["PgDriver"]
