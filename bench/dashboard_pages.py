"""How long the dashboard takes to render each page over a big Postgres table (docs/dashboard.md,
"Speed with 1,000,000 jobs").

    .venv/bin/python -m bench.dashboard_pages [--rows 1000000] [--requests 30]

In a schema of its own (`dash_<hex>`, made with `jobs_pg.migrate.upgrade`, dropped at the end,
also on failure):

* `--rows` job rows are loaded by SQL (one `INSERT … SELECT generate_series`, not through the
  driver, so the load takes seconds), shaped as the driver's own statements leave them (the
  enqueue, claim, ack, nack, park and cancel of `jobs_pg/statements/job.py`): over six queues,
  eleven job names (one rare: about 1 row in 10,000) and 300 tenants (skewed: a few are common),
  created over the past 7 days, inserted in creation order. About 92.5 % completed (finished
  within 30 s of their creation, 5 % of them after a retry that left its `last_error`), 1.5 %
  failed, 1.5 % dead
  (after 3 attempts, `last_error` the worker's JSON with a real traceback), 0.5 % cancelled,
  2 % ready and due (created over the last 2 hours, a tenth of them waiting for a retry), 1.5 %
  ready and scheduled up to 3 days ahead, 0.5 % parked on an event, 0.02 % running (leases 10
  minutes ahead). Then VACUUM ANALYZE.
* Counters for the last hour come from real work: twelve rounds of an in-process `Worker`, one
  every 5 minutes of the past hour (its clock shifted back), each over 250 jobs enqueued
  through `Jobs` in queue `live` (a tenth of the `live.charge` half fail twice and go dead with
  a traceback; the loaded queues have no counter rows in the hour: their rows are older). A
  last worker keeps running on `live` during the measurement (the live worker of `/workers`),
  and a `Scheduler` tick arms the marks of two declared tasks (`/schedule`).

Then every page is requested through the ASGI app in-process (`httpx2.ASGITransport`, bearer
token): `/`, `/jobs`, `/jobs?state=dead`, `/jobs?state=ready&queue=emails`,
`/jobs?name=<the rare name>`, `/jobs?tenant=org-7`, the next page of `/jobs` (its "next" link),
`/jobs/<id>` of a dead job with a traceback, `/workers` and `/schedule`, and `/` once more as
a first view (`Dashboard.recount()` before each request, so each waits for its own count, as
the first view after 30 s unwatched or after an action does): 3 warm-up requests,
then `--requests` timed ones one after another; p50, p95 and max in ms (the time from the
request to the whole response body: the driver's statements, the rendering, the ASGI and
client layers in-process; no network). The app's driver (a pool of its own, apart from the
workers') times every statement it runs: per page, each statement's calls and ms per request.
Afterwards each statement a page ran is EXPLAIN (ANALYZE, BUFFERS)ed once with the values of
its first timed request, as a custom plan and as its prepared statement's generic plan.
Results: printed, and `bench/results/dashboard-<stamp>.json` (the commit measured, the plans).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
import psycopg
from psycopg import sql

from bench.pg_growth import summary
from bench.retention import PG_URL, about, quantile, write
from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.dashboard import Dashboard
from jobs_core.dashboard.security import Access
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import JobFilter, JobListParams
from jobs_core.retry import Retry
from jobs_core.scheduler import Scheduler, TaskHandle, TaskRegistry, task
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_core.worker.failure import error_text
from jobs_pg import PgDriver
from jobs_pg.driver import STATEMENTS
from jobs_pg.migrate import upgrade
from jobs_pg.urls import libpq_url

TOKEN = "bench-token-0123456789"
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
RARE_NAME = "reports.yearly_audit"
TENANT = "org-7"
READY_QUEUE = "emails"

# (queue, name, share of the rows, tenanted, priority). Shares add up to 1.
NAMES: tuple[tuple[str, str, float, bool, int], ...] = (
    ("default", "default.resize_image", 0.20, True, 0),
    ("default", "default.sync_contacts", 0.15, True, 0),
    ("emails", "emails.send_receipt", 0.15, True, 0),
    ("emails", "emails.send_welcome", 0.10, True, 0),
    ("webhooks", "webhooks.deliver", 0.15, True, 0),
    ("reports", "reports.daily_summary", 0.0599, True, 0),
    ("reports", RARE_NAME, 0.0001, False, 0),
    ("reports", "reports.export_csv", 0.04, True, 0),
    ("billing", "billing.charge", 0.06, True, 10),
    ("billing", "billing.invoice_pdf", 0.04, True, 0),
    ("imports", "imports.parse_upload", 0.05, False, -5),
)

# The rows. `d` draws each row's queue/name (`r1`), tenant (`r3`), state (`r4`) and times
# (`r5`, `r6`); every column is what the statement that put a row in its state writes:
# enqueue (ready: attempt 0, claims 0), claim (+1 each, claimed_by, a lease), ack (completed,
# lease NULL, finished_at, result), nack fail (dead or failed, last_error, finished_at), nack
# retry (ready again, last_error kept, run_at later), park (attempt given back, the wait set),
# cancel of a ready row (cancelled, finished_at). Ids are UUIDv7 of the creation time. Inserted
# in creation order, so the heap is in roughly the order enqueues would have appended it.
_LOAD = """
INSERT INTO {jobs} (id, run_id, name, queue, tenant_id, idempotency_key, input_json, state,
    priority, attempt, max_attempts, claims, claimed_by, lease_until_ms, run_at_ms,
    created_at_ms, finished_at_ms, last_error, progress_json, result_json, enqueued_by,
    traceparent, wait_event, wait_match_json, wait_since_ms)
WITH names (queue, name, lo, hi, tenanted, priority) AS (
    SELECT * FROM unnest(%(n_queue)s::text[], %(n_name)s::text[], %(n_lo)s::float8[],
        %(n_hi)s::float8[], %(n_tenanted)s::bool[], %(n_priority)s::int[])
), d AS (
    SELECT g, random() AS r1, random() AS r3, random() AS r4, random() AS r5, random() AS r6
    FROM generate_series(1, %(rows)s::bigint) AS g
), s AS (
    SELECT d.*, n.queue, n.name, n.priority,
        CASE WHEN n.tenanted THEN 'org-' || floor(300 * d.r3 * d.r3)::int END AS tenant_id,
        CASE WHEN d.r4 < 0.925 THEN 'completed' WHEN d.r4 < 0.940 THEN 'failed'
             WHEN d.r4 < 0.955 THEN 'dead' WHEN d.r4 < 0.960 THEN 'cancelled'
             WHEN d.r4 < 0.980 THEN 'due' WHEN d.r4 < 0.995 THEN 'scheduled'
             WHEN d.r4 < 0.9998 THEN 'parked' ELSE 'running' END AS kind
    FROM d JOIN names n ON d.r1 >= n.lo AND d.r1 < n.hi
), t AS (
    SELECT s.*,
        CASE kind
            WHEN 'due' THEN %(now)s - (s.r5 * 2 * %(hour)s)::bigint
            WHEN 'scheduled' THEN %(now)s - (s.r5 * 3 * %(day)s)::bigint
            WHEN 'parked' THEN %(now)s - (s.r5 * %(day)s)::bigint
            WHEN 'running' THEN %(now)s - (s.r5 * %(minute)s)::bigint
            ELSE %(now)s - %(minute)s - (s.r5 * 7 * %(day)s)::bigint
        END AS created,
        kind = 'completed' AND s.r6 < 0.05 OR kind = 'due' AND s.r6 < 0.1 AS retried,
        md5(s.g::text || %(salt)s) AS h
    FROM s
)
SELECT
    substr(lpad(to_hex(created), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(created), 12, '0'), 9)
        || '-7' || substr(h, 1, 3) || '-8' || substr(h, 4, 3) || '-' || substr(h, 7, 12),
    substr(lpad(to_hex(created), 12, '0'), 1, 8) || '-' || substr(lpad(to_hex(created), 12, '0'), 9)
        || '-7' || substr(h, 19, 3) || '-9' || substr(h, 22, 3) || '-' || substr(h, 25, 8)
        || substr(h, 1, 4),
    name, queue, tenant_id, 'k-' || g,
    '{{"account_id": ' || g || ', "email": "user' || g || '@example.com", "plan": "pro"}}',
    CASE kind WHEN 'due' THEN 'ready' WHEN 'scheduled' THEN 'ready' ELSE kind END,
    priority,
    CASE WHEN kind IN ('dead', 'failed') THEN 3 WHEN retried THEN (kind = 'completed')::int + 1
         WHEN kind IN ('completed', 'running') THEN 1 ELSE 0 END,
    3,
    CASE WHEN kind IN ('dead', 'failed') THEN 3 WHEN retried THEN (kind = 'completed')::int + 1
         WHEN kind IN ('completed', 'running', 'parked') THEN 1 ELSE 0 END,
    CASE WHEN kind IN ('due', 'scheduled', 'cancelled') AND NOT retried THEN NULL
         ELSE 'worker-' || (g %% 8) END,
    CASE WHEN kind = 'running' THEN %(now)s + 10 * %(minute)s END,
    CASE kind
        WHEN 'scheduled' THEN %(now)s + (r6 * 3 * %(day)s)::bigint
        WHEN 'parked' THEN created + 1000 + %(day)s
        WHEN 'due' THEN least(%(now)s, created + CASE WHEN retried THEN 2000 ELSE 0 END)
        ELSE created
    END,
    created,
    CASE WHEN kind IN ('completed', 'failed', 'dead') THEN created + 50 + (r6 * 30000)::bigint
         WHEN kind = 'cancelled' THEN created + (r6 * %(hour)s)::bigint END,
    CASE WHEN kind IN ('dead', 'failed') OR retried THEN (%(errors)s::text[])[1 + g %% 3] END,
    NULL,
    CASE WHEN kind = 'completed' THEN '{{"ok": true, "took_ms": ' || (g %% 900) || '}}' END,
    NULL, NULL,
    CASE WHEN kind = 'parked' THEN 'payment.settled' END,
    CASE WHEN kind = 'parked' THEN '{{"account_id": ' || g || '}}' END,
    CASE WHEN kind = 'parked' THEN created + 1000 END
FROM t
ORDER BY t.created
"""


def _failing_three_deep(account: int) -> None:
    def charge(amount: int) -> None:
        raise ConnectionError(f"payment gateway timed out after 30 s (account {account})")

    def settle() -> None:
        try:
            charge(1999)
        except ConnectionError as exc:
            raise RuntimeError("could not settle the invoice") from exc

    settle()


def error_docs() -> list[str]:
    """Three `last_error` values as the worker stores them (`error_text` of a raised error)."""
    out = []
    for kind in range(3):
        try:
            if kind == 0:
                _failing_three_deep(kind)
            elif kind == 1:
                {"plan": "pro"}["seats"]  # raises the KeyError stored
            else:
                int("twelve")
        except Exception as exc:  # every kind is stored the same way
            out.append(error_text(exc))
    return out


def load(conn: psycopg.Connection[Any], jobs: str, rows: int, now: int) -> float:
    """`rows` job rows in the mix described above, then VACUUM ANALYZE; seconds."""
    started = time.perf_counter()
    hi = 0.0
    cols: dict[str, list[Any]] = {k: [] for k in ("queue", "name", "lo", "hi", "tenanted", "pri")}
    for queue, name, share, tenanted, priority in NAMES:
        lo, hi = hi, hi + share
        for k, v in zip(cols, (queue, name, lo, hi, tenanted, priority), strict=True):
            cols[k].append(v)
    cols["hi"][-1] = 1.01  # whatever the float sum, every draw lands in a name
    args = {
        "n_queue": cols["queue"],
        "n_name": cols["name"],
        "n_lo": cols["lo"],
        "n_hi": cols["hi"],
        "n_tenanted": cols["tenanted"],
        "n_priority": cols["pri"],
        "rows": rows,
        "now": now,
        "minute": MINUTE_MS,
        "hour": HOUR_MS,
        "day": DAY_MS,
        "salt": uuid.uuid4().hex,
        "errors": error_docs(),
    }
    conn.execute(sql.SQL(_LOAD).format(jobs=sql.SQL(jobs)), args)
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.SQL(jobs)))
    return time.perf_counter() - started


class ShiftedClock(SystemClock):
    """Wall-clock time `behind_ms` in the past (a worker round of the last hour, run now)."""

    def __init__(self, behind_ms: int) -> None:
        self.behind_ms = behind_ms

    def now_ms(self) -> int:
        return super().now_ms() - self.behind_ms


async def thumbnail(input: Any, ctx: JobContext) -> dict[str, int]:
    return {"bytes": 1000 + input["n"]}


async def charge_card(input: Any, ctx: JobContext) -> None:
    if input["n"] % 10 == 0:
        _failing_three_deep(input["n"])


def live_jobs() -> list[JobHandle]:
    registry = JobRegistry()
    return [
        job(thumbnail, name="live.thumbnail", queue="live", tenant="none",
            idempotency_key=lambda i: f"t-{i['n']}", registry=registry),
        job(charge_card, name="live.charge", queue="live", tenant=lambda i: f"org-{i['n'] % 5}",
            idempotency_key=lambda i: f"c-{i['n']}", registry=registry,
            retry=Retry(attempts=2, base_ms=1, cap_ms=1, jitter="none")),
    ]  # fmt: skip


async def work_round(driver: PgDriver, handles: list[JobHandle], behind_ms: int, n: int) -> None:
    """Enqueue `n` jobs (half each handle) at the shifted time and run a worker until every
    one settled for good."""
    clock = ShiftedClock(behind_ms)
    client = Jobs(driver, clock=clock, enqueue_retry_s=0)
    tag = uuid.uuid4().hex[:6]
    for h in handles:
        await client.enqueue_many(h, [{"n": i, "tag": tag} for i in range(n // 2)])
    worker = Worker(driver, handles, concurrency=20, clock=clock, retention=None)
    await worker.start()
    s = worker.stats
    while s.completed + s.dead_lettered + s.dropped < 2 * (n // 2):  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    await worker.stop()


def declared_tasks(handles: list[JobHandle]) -> list[TaskHandle]:
    registry = TaskRegistry()
    return [
        task("nightly-thumbnails", cron="0 2 * * *", tz="Europe/Berlin", job=handles[0],
             input={"n": 1}, registry=registry),
        task("hourly-charge", cron="5 * * * *", tz="UTC", job=handles[1], input={"n": 3},
             registry=registry),
    ]  # fmt: skip


class TimedDriver(PgDriver):
    """The dashboard's driver: keeps each statement it runs, its time (ms) and its values."""

    calls: list[tuple[str, float, dict[str, Any]]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = []

    async def _rows(self, name: str, values: Any) -> list[tuple[Any, ...]]:
        started = time.perf_counter()
        try:
            return await super()._rows(name, values)
        finally:
            self.calls.append((name, (time.perf_counter() - started) * 1000, dict(values)))


_EXPLAIN = "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "


def explain(conn: psycopg.Connection[Any], schema: str, name: str, values: Any) -> dict[str, Any]:
    """One statement the driver ran, EXPLAIN (ANALYZE, BUFFERS)ed with the same values: as a
    custom plan (planned for them) and as the generic plan of its prepared statement (what the
    server may switch to after five runs). Read-only statements only (the pages run no other)."""
    st = STATEMENTS[name]
    text, args = st.render(schema), st.args(values)
    out: dict[str, Any] = {}
    cur = psycopg.RawCursor(conn) if st.raw else conn.cursor()
    row = cur.execute(_EXPLAIN + text, args).fetchone()
    out["custom"] = summary(row[0] if row else None)
    numbers = iter(range(1, len(args) + 1))
    prepared = text if st.raw else re.sub("%b", lambda _: f"${next(numbers)}", text)
    literals = ", ".join(sql.Literal(a).as_string(conn) for a in args)
    conn.execute(f"PREPARE dash_explain AS {prepared}")
    try:
        with conn.transaction():
            conn.execute("SET LOCAL plan_cache_mode = force_generic_plan")
            call = f"EXECUTE dash_explain({literals})" if args else "EXECUTE dash_explain"
            row = conn.execute(_EXPLAIN + call).fetchone()
            out["generic"] = summary(row[0] if row else None)
    finally:
        conn.execute("DEALLOCATE dash_explain")
    return out


async def timed(
    get: Callable[[], Awaitable[httpx2.Response]], requests: int, driver: TimedDriver
) -> dict[str, Any]:
    """3 warm-ups, then `requests` timed requests: p50/p95/max ms, the load average, and per
    statement the driver ran its calls and ms per request (means)."""
    for _ in range(3):
        r = await get()
        assert r.status_code == 200, (r.status_code, r.text[:500])
    driver.calls.clear()
    samples = []
    for _ in range(requests):
        started = time.perf_counter()
        r = await get()
        samples.append((time.perf_counter() - started) * 1000)
        assert r.status_code == 200, r.status_code
    statements: dict[str, dict[str, float]] = {}
    for name, ms, _ in driver.calls:
        st = statements.setdefault(name, {"calls": 0.0, "ms": 0.0})
        st["calls"] += 1 / requests
        st["ms"] += ms / requests
    return {
        "p50_ms": round(quantile(samples, 0.5), 1),
        "p95_ms": round(quantile(samples, 0.95), 1),
        "max_ms": round(max(samples), 1),
        "bytes": len(r.content),
        "load": os.getloadavg()[0],
        "statements_per_request": {
            n: {"calls": round(v["calls"], 2), "ms": round(v["ms"], 2)}
            for n, v in statements.items()
        },
        "values": {n: v for n, _, v in reversed(driver.calls)},
    }


_NEXT = re.compile(r'<a rel="next" href="[^"?]*\?([^"]+)"')


async def measure(
    driver: TimedDriver, requests: int, tasks: list[TaskHandle], schema: str
) -> dict[str, Any]:
    handles = [t.job for t in tasks]
    board = Dashboard(driver, access=Access(token=TOKEN), handles=handles, tasks=tasks)
    app = board.app
    dead = await driver.job_list(
        JobListParams(JobFilter(states=frozenset({JobState.DEAD}), queue="live"), 1, scan=10_000)
    )
    assert dead.jobs, "no dead job in queue live"
    headers = {"authorization": f"Bearer {TOKEN}"}
    out: dict[str, Any] = {}
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=app), base_url="http://bench", headers=headers
    ) as client:
        first = await client.get("/jobs")
        found = _NEXT.search(first.text)
        assert found, "no next link on /jobs"
        next_page = "/jobs?" + found.group(1).replace("&amp;", "&")
        pages = {
            "/": "/",
            "/jobs": "/jobs",
            "/jobs?state=dead": "/jobs?state=dead",
            f"/jobs?state=ready&queue={READY_QUEUE}": f"/jobs?state=ready&queue={READY_QUEUE}",
            f"/jobs?name={RARE_NAME}": f"/jobs?name={RARE_NAME}",
            f"/jobs?tenant={TENANT}": f"/jobs?tenant={TENANT}",
            "/jobs (next page)": next_page,
            "/jobs/<dead id>": f"/jobs/{dead.jobs[0].id}",
            "/workers": "/workers",
            "/schedule": "/schedule",
        }
        # The queues page answers from a count shared by its viewers (read at most every 5 s);
        # a first view after 30 s unwatched (or after an action) waits for a count of its own.
        cold = "/ (first view: counts read)"
        for label, url in {cold: "/", **pages}.items():

            def get(url: str = url, fresh: bool = label == cold) -> Awaitable[httpx2.Response]:
                if fresh:
                    board.recount()
                return client.get(url)

            out[label] = f = await timed(get, requests, driver)
            print(
                f"{label:<40} p50 {f['p50_ms']:7.1f}  p95 {f['p95_ms']:7.1f}  "
                f"max {f['max_ms']:7.1f} ms  load {f['load']:.2f}  "
                + ", ".join(
                    f"{n} {v['calls']:g}x {v['ms']:.1f} ms"
                    for n, v in sorted(
                        f["statements_per_request"].items(), key=lambda kv: -kv[1]["ms"]
                    )
                )
            )
    # The plans of every statement a page ran, with the values of its first timed request.
    with psycopg.connect(libpq_url(PG_URL), autocommit=True, prepare_threshold=None) as conn:
        for f in out.values():
            values = f.pop("values")
            f["plans"] = {n: explain(conn, schema, n, v) for n, v in values.items()}
            f["statements_per_request"] = {
                n: {**v, "custom_exec_ms": f["plans"][n]["custom"]["execution_ms"],
                    "generic_exec_ms": f["plans"][n]["generic"]["execution_ms"]}
                for n, v in f["statements_per_request"].items()
            }  # fmt: skip
    return out


async def run(rows: int, requests: int, schema: str) -> dict[str, Any]:
    await asyncio.to_thread(upgrade, PG_URL, schema)
    conn = psycopg.connect(libpq_url(PG_URL), autocommit=True)
    jobs = f'"{schema}".jobs'
    out: dict[str, Any] = {"schema": "dash_<hex>"}
    try:
        took = load(conn, jobs, rows, SystemClock().now_ms())
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(jobs))).fetchone()
        print(f"loaded {row[0] if row else 0:,} rows in {took:.1f} s")
        out["load_s"] = round(took, 1)
        driver = PgDriver(PG_URL, schema=schema)
        async with driver:
            handles = live_jobs()
            started = time.perf_counter()
            for behind in range(55, -5, -5):  # twelve rounds: 55 minutes ago … now
                await work_round(driver, handles, behind * MINUTE_MS, 250)
            out["work_rounds_s"] = round(time.perf_counter() - started, 1)
            print(f"twelve worker rounds in {out['work_rounds_s']} s")
            conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.SQL(jobs)))
            tasks = declared_tasks(handles)
            await Scheduler(driver, tasks).tick()
            counts = conn.execute(
                sql.SQL("SELECT state, count(*) FROM {} GROUP BY state ORDER BY state").format(
                    sql.SQL(jobs)
                )
            ).fetchall()
            out["rows_by_state"] = {s: n for s, n in counts}
            row = conn.execute(
                sql.SQL("SELECT count(*) FROM {}").format(sql.SQL(f'"{schema}".counters'))
            ).fetchone()
            out["counter_rows"] = row[0] if row else 0
            print(f"rows by state: {out['rows_by_state']}; counter rows: {out['counter_rows']}")
            live = Worker(driver, handles, concurrency=10, retention=None)
            await live.start()
            try:
                timed_driver = TimedDriver(PG_URL, schema=schema)
                async with timed_driver:
                    out["pages"] = await measure(timed_driver, requests, tasks, schema)
            finally:
                await live.stop()
    finally:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.close()
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000, help="job rows loaded")
    ap.add_argument("--requests", type=int, default=30, help="timed requests per page")
    args = ap.parse_args()
    # The failing rounds' jobs log every failure with its traceback: not what is measured.
    logging.getLogger("jobs").setLevel(logging.CRITICAL)
    result = about("bench.dashboard_pages", vars(args))
    result["pg"] = await run(args.rows, args.requests, f"dash_{uuid.uuid4().hex[:8]}")
    write(result, "dashboard")


if __name__ == "__main__":
    asyncio.run(main())
