"""Issue 9, item 8: at 1,000,000 jobs the operator's reads stay index reads.

One schema, migrated as a user's is (its jobs table then made unlogged, for the fill's speed
alone: plans do not weigh it), filled with a million rows shaped like a production table
(time-ordered uuid7-like ids, a 250-byte JSON input, results and errors on finished rows; 97 %
finished, 3 % live, a thousand running), then VACUUM ANALYZEd as autovacuum would have. Each
statement's plan is read twice, as the driver runs it: with its values (Postgres's first, custom
plans) and as the generic plan a prepared statement may switch to. Run with `-s` to print them
(docs/pg.md quotes this output).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from psycopg import sql

from jobs_core.records import JobFilter, JobListParams
from jobs_core.states import JobState
from jobs_pg import PgDriver
from jobs_pg.driver import STATEMENTS, list_values
from jobs_pg.migrate import upgrade
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema

ROWS = 1_000_000
T_END = 1_800_000_000_000

# Secondary indexes are dropped for the fill and rebuilt from their own definitions (as the
# migrations made them), which is twice as fast as maintaining them row by row.
_FILL = """
INSERT INTO {jobs} (id, run_id, name, queue, tenant_id, idempotency_key, input_json, state,
  priority, attempt, max_attempts, claims, claimed_by, lease_until_ms, run_at_ms, created_at_ms,
  finished_at_ms, last_error, result_json)
SELECT lpad(to_hex(c), 12, '0') || '-7' || substr(md5('job' || i), 1, 21), md5('run' || i),
  'app.jobs.task_' || (mod(i, 20)), 'queue_' || (mod(i, 5)),
  CASE WHEN mod(i, 3) = 0 THEN 'tenant_' || (mod(i, 11)) END, 'key-' || i,
  '{{"user_id": ' || i || ', "email": "user' || i || '@example.com", "payload": "'
    || repeat('x', 180) || '"}}',
  s.state, mod(i, 3), CASE WHEN s.state = 'ready' THEN 0 ELSE 1 END, 3,
  CASE WHEN s.state = 'ready' THEN 0 ELSE 1 END,
  CASE WHEN s.state <> 'ready' THEN 'worker-' || (mod(i, 4)) || '-0123456789abcdef' END,
  CASE WHEN s.state = 'running' THEN %(end)s + 60000 END,
  CASE WHEN s.state = 'parked' AND mod(i, 2) = 0 THEN NULL
       WHEN s.state = 'ready' AND mod(i, 10) = 0 THEN %(end)s + 600000 ELSE c END,
  c,
  CASE WHEN s.state IN ('completed', 'dead', 'failed', 'cancelled') THEN c + 20 END,
  CASE WHEN s.state IN ('dead', 'failed')
       THEN '{{"code":"X_JOB_FAILED","message":"' || repeat('e', 150) || '"}}' END,
  CASE WHEN s.state = 'completed' THEN '{{"ok": true}}' END
FROM generate_series(1, %(rows)s) i,
LATERAL (SELECT %(end)s - (%(rows)s - i) * 50 AS c) t,
LATERAL (SELECT CASE
  WHEN i > %(rows)s - 30000 AND mod(i, 30) < 20 THEN 'ready'
  WHEN i > %(rows)s - 30000 AND mod(i, 30) < 22 THEN 'parked'
  WHEN i > %(rows)s - 30000 AND mod(i, 30) < 23 THEN 'running'
  WHEN mod(i, 100) < 4 THEN 'dead' WHEN mod(i, 100) < 7 THEN 'failed'
  WHEN mod(i, 100) < 10 THEN 'cancelled' ELSE 'completed' END AS state) s
"""


@pytest.fixture
def big() -> Iterator[str]:
    """A migrated schema holding `ROWS` jobs, vacuumed and analyzed (for the one test below)."""
    schema = fresh_schema()
    try:
        upgrade(PG_URL, schema)
        with admin() as conn:
            defs = conn.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s"
                " AND tablename = 'jobs' AND indexname <> 'jobs_pkey'",
                (schema,),
            ).fetchall()
            for name, _ in defs:
                conn.execute(
                    sql.SQL("DROP INDEX {}.{}").format(sql.Identifier(schema), sql.Identifier(name))
                )
            jobs = sql.SQL("{}.jobs").format(sql.Identifier(schema)).as_string(conn)
            # Unlogged for the fill (no table of ours references jobs, so it may be): the
            # planner weighs an unlogged table's pages as a logged one's, and the gigabyte of
            # WAL a logged fill writes doubled its time and made the next checkpoint (every
            # DROP DATABASE forces one) flush it while every other test waited on the disk.
            conn.execute(f"ALTER TABLE {jobs} SET UNLOGGED")
            conn.execute(_FILL.format(jobs=jobs), {"rows": ROWS, "end": T_END})
            for _, definition in defs:
                conn.execute(definition)
            # A page is marked all-visible only once no open snapshot on the server is older
            # than its rows (another test process's transaction may be): vacuum until every
            # page is, so the index-only reads below fetch no heap page, whatever runs beside.
            deadline = time.monotonic() + 60
            while True:
                conn.execute(sql.SQL("VACUUM ANALYZE {}.jobs").format(sql.Identifier(schema)))
                pages, visible = conn.execute(
                    "SELECT relpages, relallvisible FROM pg_class WHERE oid = to_regclass(%s)",
                    (jobs,),
                ).fetchone() or (0, 0)
                if visible >= pages or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        yield schema
    finally:
        drop_schema(schema)


def _plans(schema: str, name: str, values: Mapping[str, Any]) -> tuple[str, str]:
    """The statement's plan with its values, and its generic plan, both EXPLAIN ANALYZEd."""
    st = STATEMENTS[name]
    text = st.render(schema)
    args = st.args(values)
    explain = "EXPLAIN (ANALYZE, BUFFERS, COSTS off, TIMING off) "
    with admin() as conn:
        custom = conn.execute(explain + text, args, prepare=False).fetchall()
        numbers = iter(range(1, len(args) + 1))
        conn.execute(f"PREPARE generic AS {re.sub('%b', lambda _: f'${next(numbers)}', text)}")
        conn.execute("SET plan_cache_mode = force_generic_plan")
        literals = ", ".join(sql.Literal(a).as_string(conn) for a in args)
        generic = conn.execute(f"{explain}EXECUTE generic({literals})").fetchall()
    out = ("\n".join(r[0] for r in custom), "\n".join(r[0] for r in generic))
    for kind, plan in zip(("custom", "generic"), out, strict=True):
        print(f"\n-- {name} {dict(values)} ({kind} plan)\n{plan}")
    return out


def _pages(schema: str) -> int:
    with admin() as conn:
        row = conn.execute(
            "SELECT relpages FROM pg_class WHERE oid = %s::regclass",
            (f'"{schema}".jobs',),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _buffers(plan: str) -> int:
    """Shared buffers the whole statement touched (its top node's count)."""
    found = re.search(r"Buffers: shared (?:hit=(\d+))?\s?(?:read=(\d+))?", plan)
    assert found is not None, plan
    return sum(int(g) for g in found.groups() if g)


async def test_at_a_million_rows_the_operators_reads_stay_index_reads(big: str) -> None:
    """Every check of the big table in one test: the fill is the cost (ten seconds and more),
    and pytest-xdist made it once for each process that ran one of four tests."""
    for f in (JobFilter(), JobFilter(states=frozenset({JobState.DEAD}), queue="queue_1")):
        _the_newest_page_reads_the_listing_index_not_the_table(big, f)
    _the_counts_by_state_are_index_only_reads(big)
    await _the_driver_pages_the_big_table(big)


def _the_newest_page_reads_the_listing_index_not_the_table(big: str, f: JobFilter) -> None:
    pages = _pages(big)
    for plan in _plans(big, "JOB_LIST", list_values(f, None, 50, 2_000)):
        assert "Seq Scan on jobs" not in plan, plan
        assert "Index Scan Backward using jobs_listing" in plan
        assert "Merge Append" in plan
        # The window stops the walk at the page's last match (the scans stop with it).
        assert "Run Condition" in plan
        # A page reads a few hundred pages at most (its rows and the running ones), the table
        # holds tens of thousands.
        assert _buffers(plan) < pages // 20, (_buffers(plan), pages)


async def _the_driver_pages_the_big_table(big: str) -> None:
    async with PgDriver(PG_URL, schema=big, pool_size=2) as d:
        page = await d.job_list(JobListParams(limit=50))
        assert len(page.jobs) == 50 and page.next_cursor is not None
        created = [j.created_at_ms for j in page.jobs]
        assert created == sorted(created, reverse=True) and created[0] == T_END
        dead = JobFilter(states=frozenset({JobState.DEAD}))
        got = await d.job_list(JobListParams(dead, limit=20))
        assert 0 < len(got.jobs) <= 20 and {j.state for j in got.jobs} == {JobState.DEAD}
        stats = await d.queue_stats(T_END)
        assert sum(n for s in stats for _, n in s.counts) == ROWS
        assert sum(s.count(JobState.RUNNING) for s in stats) == 1_000
        assert all(s.oldest_ready_at_ms is not None for s in stats)


def _the_counts_by_state_are_index_only_reads(big: str) -> None:
    for plan in _plans(big, "QUEUE_STATS", {"now_ms": T_END}):
        assert "Seq Scan on jobs" not in plan, plan
        # Every row but the running ones, from jobs_listing's entries alone; the running ones
        # from jobs_lease; the oldest due row per queue probed in jobs_due.
        assert re.search(r"Index Only Scan using jobs_listing on jobs .*\n\s+Heap Fetches: 0", plan)
        assert "Index Only Scan using jobs_lease" in plan
        # The oldest due row: one entry of jobs_due per (queue, priority) probe, never a walk
        # through the 20,000 ready rows.
        due = re.findall(r"Scan using jobs_due on jobs \w+ \(actual rows=(\d+) loops=(\d+)\)", plan)
        assert len(due) == 3 and all(int(rows) <= 1 for rows, _ in due), due
