"""The tests' schemas (`migrate`: the migrations' offline script) are the ones `upgrade` builds.

Every Postgres test runs on a schema `tests.pg.conftest.migrate` made; this pins that it is what
a user's `ujobs db upgrade` makes, catalog entry for catalog entry, so no test runs on a schema
no user has.
"""

from __future__ import annotations

from jobs_pg.migrate import upgrade, version_of
from tests.pg.conftest import HEAD_REVISION, PG_URL, admin, drop_schema, fresh_schema, migrate

_CATALOG = {
    "relations": """
        SELECT c.relname, c.relkind, c.relpersistence, c.relhasindex, c.relhastriggers
        FROM pg_class c WHERE c.relnamespace = %(s)s::regnamespace""",
    "columns": """
        SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
               a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), ''),
               coalesce(co.collname, ''), a.attidentity, a.attgenerated
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        LEFT JOIN pg_collation co ON co.oid = a.attcollation AND a.attcollation <> 0
        WHERE c.relnamespace = %(s)s::regnamespace AND a.attnum > 0 AND NOT a.attisdropped""",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = %(s)s::regnamespace""",
    "indexes": "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s",
    "triggers": """
        SELECT t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relnamespace = %(s)s::regnamespace AND NOT t.tgisinternal""",
    "functions": """
        SELECT proname, pg_get_functiondef(oid)
        FROM pg_proc WHERE pronamespace = %(s)s::regnamespace""",
    "sequences": """
        SELECT sequencename, data_type, start_value, increment_by, min_value, max_value, cycle,
               last_value
        FROM pg_sequences WHERE schemaname = %(s)s""",
}


def catalog(schema: str) -> dict[str, list[tuple[str, ...]]]:
    """What `schema` holds, its own name written `S`: each kind of catalog entry, sorted."""
    with admin() as conn:
        found = {
            kind: sorted(
                tuple(str(v).replace(schema, "S") for v in row)
                for row in conn.execute(query, {"s": schema}).fetchall()  # type: ignore[arg-type]
            )
            for kind, query in _CATALOG.items()
        }
    return found


def test_migrate_builds_the_schema_upgrade_builds_and_upgrade_finds_it_current() -> None:
    online, offline = fresh_schema(), fresh_schema()
    try:
        upgrade(PG_URL, online)
        migrate(offline)
        built = catalog(online)
        assert all(built.values()), built  # every kind of entry is there to compare
        assert catalog(offline) == built
        assert version_of(PG_URL, offline) == HEAD_REVISION
        assert "nothing to do" in upgrade(PG_URL, offline)
        # The comparison sees a difference as small as one index more.
        with admin() as conn:
            conn.execute(f'CREATE INDEX extra ON "{offline}".jobs (name)')  # type: ignore[arg-type]
        assert catalog(offline) != built
    finally:
        drop_schema(online)
        drop_schema(offline)
