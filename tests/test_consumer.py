"""`consumer()` in one process, on memory, Postgres and Redis: turns over a function source, a
Postgres table (the handler's writes and the cursor in one transaction, rolled back together
when the claim is lost) and a Redis Stream (pending entries taken back, those already recorded
acknowledged without the handler); one run per name (the lease); a run never enqueuing its own
job; hostile declarations and cursors refused before anything is written."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.factories import consumer
from jobs_core.factories.consumers import Consumer, Turn, function, stream, table
from jobs_core.factories.consumers.run import lease_key
from jobs_core.job import JobRegistry
from jobs_core.jsonform import loads
from jobs_core.records import ClaimedJob, ClaimParams, LeaseTake
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.tenant import acting_for
from tests.core.support import fresh_store

LEASE_MS = 60_000


def declare(name: str = "feed", **options: Any) -> Consumer:
    """A consumer on registries of its own, a run a fraction of a second."""
    options.setdefault("tenant", "none")
    options.setdefault("run_for", 0.3)
    options.setdefault("idle", 0.02)
    options.setdefault("lease", 5.0)
    return consumer(name, registry=JobRegistry(), task_registry=TaskRegistry(), **options)


async def claimed(driver: JobDriver, c: Consumer) -> ClaimedJob:
    await Jobs(driver).enqueue(c.job, None, key=uuid.uuid4().hex)
    now = SystemClock().now_ms()
    got = await driver.job_claim(ClaimParams((c.job.queue,), "w1", 1, LEASE_MS, now))
    (job,) = got.jobs
    return job


async def run_once(driver: JobDriver, c: Consumer, job: ClaimedJob | None = None) -> Any:
    """One run of `c`'s job as a worker would run it; what its body answered."""
    job = job or await claimed(driver, c)
    tenant = c.job.tenant_for(loads(job.input_json))
    ctx = JobContext.for_test(job, driver, tenant=tenant)
    with acting_for(tenant):
        return await c.job.fn(None, ctx)


def numbers(total: int, calls: list[Any]) -> Any:
    def fetch(cursor: Any, limit: int) -> tuple[list[int], Any]:
        calls.append(cursor)
        start = 0 if cursor is None else cursor
        rows = list(range(start, min(start + limit, total)))
        return rows, start + len(rows)

    return fetch


@pytest.fixture(params=["memory", "pg", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as driver:
        yield driver


async def test_function_source_turns_each_record_once(store: JobDriver) -> None:
    seen: list[int] = []
    calls: list[Any] = []
    c = declare(
        source=function(numbers(25, calls), lag=lambda cursor: 25 - cursor),
        handle=lambda records, turn: seen.extend(records),
        batch=10,
        tenant="t1",
    )
    got = await run_once(store, c)
    assert seen == list(range(25))
    assert got["turns"] == 3 and got["records"] == 25 and got["cursor"] == 25
    entry = await store.consumer_cursor_get("feed", "t1")
    assert entry is not None
    assert (entry.cursor_json, entry.turns, entry.records, entry.lag) == ("25", 3, 25, 0)
    assert entry.source == "function:fetch"
    assert await store.consumer_cursor_get("feed", None) is None
    # A later run goes on from the stored cursor: nothing is handled twice.
    again = declare(
        "feed", source=function(numbers(30, calls)), handle=lambda r, t: seen.extend(r), tenant="t1"
    )
    assert (await run_once(store, again))["records"] == 5
    assert seen == list(range(30))


async def test_one_run_per_name_across_the_fleet(store: JobDriver) -> None:
    seen: list[int] = []
    c = declare(source=function(numbers(5, [])), handle=lambda r, t: seen.extend(r))
    now = SystemClock().now_ms()
    taken = await store.lease_take([LeaseTake(lease_key("feed", None), "other", 1, 60_000)], now)
    assert taken[0] is not None
    got = await run_once(store, c)
    assert got == {"turns": 0, "records": 0, "held_by": "other"}
    assert seen == [] and await store.consumer_list(None, 10) == []


async def test_a_run_never_enqueues_its_own_job(store: JobDriver) -> None:
    jobs = Jobs(store)
    refused: list[str] = []

    async def handle(records: list[int], turn: Turn) -> None:
        try:
            await jobs.enqueue(c.job, None, key="again")
        except JobsError as exc:
            refused.append(exc.code)

    c = declare(source=function(numbers(3, [])), handle=handle)
    await run_once(store, c)
    assert refused == ["X_CONSUMER_SELF_ENQUEUE"]
    # Outside its run (the supervisor, an operator) the job enqueues as any other.
    assert not (await jobs.enqueue(c.job, None, key="later")).deduped


async def test_a_cursor_no_store_can_hold_is_refused_before_the_handler(store: JobDriver) -> None:
    seen: list[Any] = []
    deep: Any = []
    for _ in range(600):
        deep = [deep]
    for after in ("x" * 9_000, deep, float("nan"), "\ud800"):
        c = declare(source=function(lambda cursor, limit, a=after: ([1], a)), handle=seen.append)
        with pytest.raises(JobsError) as caught:
            await run_once(store, c)
        assert caught.value.code == "X_CONSUMER_SOURCE_INVALID", caught.value
    assert seen == [] and await store.consumer_list(None, 10) == []


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"name": "a\x00b"}, "X_CONSUMER_DECLARATION_INVALID"),
        ({"name": "a\ud800"}, "X_CONSUMER_DECLARATION_INVALID"),
        ({"name": "<b>" * 70}, "X_CONSUMER_DECLARATION_INVALID"),
        ({"tenant": ""}, "X_CONSUMER_DECLARATION_INVALID"),
        ({"tenant": None}, "X_CONSUMER_DECLARATION_INVALID"),
        ({"source": "orders"}, "X_CONSUMER_DECLARATION_INVALID"),
        ({"handle": 3}, "X_CONSUMER_DECLARATION_INVALID"),
        ({"batch": 0}, "X_JOB_OPTION_INVALID"),
        ({"batch": 10_001}, "X_JOB_OPTION_INVALID"),
        ({"run_for": float("inf")}, "X_JOB_OPTION_INVALID"),
        ({"every": "61 * * * *"}, "X_TASK_CRON_INVALID"),
    ],
)
def test_declarations_refused_before_anything_is_registered(
    options: dict[str, Any], code: str
) -> None:
    jobs, tasks = JobRegistry(), TaskRegistry()
    base: dict[str, Any] = {
        "name": "feed",
        "source": function(numbers(1, [])),
        "handle": print,
        "tenant": "none",
    }
    with pytest.raises(JobsError) as caught:
        consumer(**{**base, **options}, registry=jobs, task_registry=tasks)
    assert caught.value.code == code
    assert jobs.names() == [] and tasks.names() == []


# -- a Postgres table: the batch, the handler's writes and the cursor in one transaction ----------


@pytest.fixture
async def pg_tables() -> AsyncIterator[tuple[JobDriver, Any, sa.Table, sa.Table]]:
    from tests.pg.conftest import PG_URL

    async with fresh_store("pg") as driver:
        schema = driver.schema  # type: ignore[attr-defined]
        meta = sa.MetaData(schema=schema)
        events = sa.Table(
            f"events_{uuid.uuid4().hex[:6]}",
            meta,
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("org", sa.Text, nullable=False),
        )
        seen = sa.Table(
            f"seen_{uuid.uuid4().hex[:6]}", meta, sa.Column("id", sa.Integer, primary_key=True)
        )
        engine = create_async_engine(PG_URL)
        async with engine.begin() as conn:
            await conn.run_sync(meta.create_all)
            rows = [{"id": i, "org": "t1" if i % 3 else "t2"} for i in range(1, 31)]
            await conn.execute(events.insert(), rows)
        try:
            yield driver, engine, events, seen
        finally:
            await engine.dispose()


async def test_table_source_commits_the_handlers_writes_with_the_cursor(
    pg_tables: tuple[JobDriver, Any, sa.Table, sa.Table],
) -> None:
    driver, engine, events, seen = pg_tables

    async def handle(rows: list[Any], turn: Turn) -> None:
        await turn.conn.execute(seen.insert(), [{"id": r.id} for r in rows])

    src = table(sa.select(events), engine=engine, key="id", tenant_column="org")
    # Five turns in one run, each a transaction on the server: a run long enough for a loaded box.
    c = declare(source=src, handle=handle, tenant="t1", batch=4, run_for=2.0)
    got = await run_once(driver, c)
    t1 = [i for i in range(1, 31) if i % 3]
    assert got["records"] == len(t1) and got["cursor"] == t1[-1]
    async with engine.connect() as conn:
        ids = [r[0] for r in await conn.execute(sa.select(seen.c.id).order_by(seen.c.id))]
    assert ids == t1  # only the tenant's rows, each once
    entry = await driver.consumer_cursor_get("feed", "t1")
    assert entry is not None and entry.lag == 0 and entry.source.startswith("table:")


async def test_table_turn_rolls_back_whole_when_the_claim_is_lost(
    pg_tables: tuple[JobDriver, Any, sa.Table, sa.Table],
) -> None:
    driver, engine, events, seen = pg_tables
    src = table(sa.select(events), engine=engine, key="id")

    async def handle(rows: list[Any], turn: Turn) -> None:
        await turn.conn.execute(seen.insert(), [{"id": r.id} for r in rows])
        # The claim goes to another worker while this turn is open: its put must not land.
        now = SystemClock().now_ms() + 2 * LEASE_MS
        await driver.job_claim(ClaimParams((c.job.queue,), "w2", 1, LEASE_MS, now))

    c = declare(source=src, handle=handle, batch=5)
    job = await claimed(driver, c)
    with pytest.raises(JobsError) as caught:
        await run_once(driver, c, job)
    assert caught.value.code == "X_JOB_LEASE_LOST"
    async with engine.connect() as conn:
        assert (await conn.execute(sa.select(sa.func.count()).select_from(seen))).scalar() == 0
    assert await driver.consumer_cursor_get("feed", None) is None


def test_table_source_declarations() -> None:
    from sqlalchemy.ext.asyncio import create_async_engine as make

    engine = make("postgresql+psycopg://u@127.0.0.1/x")
    t = sa.table("events", sa.column("id"), sa.column("org"))
    src = table(sa.select(t), engine=engine, key="id", tenant_column="org")
    for options in (
        {"tenant": "none"},  # a cross-tenant consumer takes no tenant column
        {"tenant": "t1", "handle": lambda rows, turn: None},  # a sync handler, an async engine
    ):
        with pytest.raises(JobsError) as caught:
            declare(source=src, **{"handle": _async_noop, **options})
        assert caught.value.code == "X_CONSUMER_DECLARATION_INVALID"
    with pytest.raises(JobsError) as caught:
        declare(
            source=table(sa.select(t), engine=engine, key="id"), handle=_async_noop, tenant="t1"
        )
    assert caught.value.code == "X_CONSUMER_DECLARATION_INVALID"


async def _async_noop(rows: list[Any], turn: Turn) -> None:
    return None


# -- a Redis Stream: acknowledged after the cursor ------------------------------------------------


async def test_stream_source_takes_pending_entries_back() -> None:
    from redis.asyncio import Redis

    from tests.redis.conftest import REDIS_URL

    async with fresh_store("redis") as driver:
        client = Redis.from_url(REDIS_URL, decode_responses=True)
        key = f"ujobs-test-stream-{uuid.uuid4().hex[:8]}"
        try:
            for i in range(12):
                await client.xadd(key, {"n": str(i)})
            seen: list[str] = []
            crash = [True]

            def handle(records: list[tuple[str, dict[str, str]]], turn: Turn) -> None:
                if crash[0] and seen:
                    crash[0] = False
                    raise RuntimeError("killed mid-turn")
                seen.extend(f["n"] for _, f in records)

            c = declare(source=stream(client, key), handle=handle, batch=5)
            with pytest.raises(RuntimeError):
                await run_once(driver, c)
            assert seen == [str(i) for i in range(5)]
            # The second batch was delivered, not acknowledged: the next run takes it back.
            got = await run_once(driver, c)
            assert seen == [str(i) for i in range(12)]
            assert got["records"] == 7
            info = await client.xinfo_groups(key)
            assert info[0]["pending"] == 0 and info[0]["lag"] == 0
            entry = await driver.consumer_cursor_get("feed", None)
            assert entry is not None and entry.records == 12 and entry.lag == 0
        finally:
            await client.delete(key)
            await client.aclose()


# -- the operator's view: `ujobs consumers list` and the lag gauge --------------------------------


async def test_the_lag_gauge_reads_the_stored_cursors() -> None:
    import asyncio

    from jobs_core.operator.metrics import serve
    from jobs_core.records import ConsumerPut
    from jobs_core.worker import Worker
    from jobs_memory import MemoryDriver
    from tests.core.test_observability import _get, _value

    driver = MemoryDriver()
    odd = 'fe"ed\n{x}'
    c = declare(odd, source=function(numbers(7, []), lag=lambda cursor: 40), handle=print)
    await run_once(driver, c)
    # The same consumer's cursor for an org literally named "none": a series of its own.
    job = await claimed(driver, c)
    now = SystemClock().now_ms()
    org = ConsumerPut(job.fence, odd, "none", "function:x", None, "3", 3, 7, now)
    assert await driver.consumer_cursor_put(org)
    worker = Worker(driver, [c.job], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    server = serve(worker, "127.0.0.1", 0)
    try:
        await worker.start()
        text = (await asyncio.to_thread(_get, f"http://127.0.0.1:{server.port}/metrics"))[1]
        shown = 'fe\\"ed\\n{x}'
        # No tenant is the empty label (no org id is empty), never the org "none"'s value.
        assert _value(text, "ujobs_consumer_lag", consumer=shown, tenant="") == 40
        assert _value(text, "ujobs_consumer_lag", consumer=shown, tenant="none") == 7
    finally:
        await worker.stop()
        server.close()


def test_cli_lists_each_consumer_and_tenant() -> None:
    import asyncio
    import json

    from tests.pg.conftest import PG_URL
    from tests.test_cli_operator import ujobs_here

    def ujobs(*args: str) -> Any:
        """`ujobs ARGS` in this process (an interpreter's imports would cost it a second)."""
        return ujobs_here(*args, url="", env_driver=False)

    async def stored() -> str:
        async with fresh_store("pg") as driver:
            name = "feed<b>\u202e"
            for tenant in ("t1", "none"):
                c = declare(name, source=function(numbers(3, [])), handle=print, tenant=tenant)
                await run_once(driver, c)
            url = f"{PG_URL}?schema={driver.schema}"  # type: ignore[attr-defined]
            shown = await asyncio.to_thread(ujobs, "consumers", "list", "--driver", url, "--json")
            assert shown.exit_code == 0, (shown.stderr, shown.exception)
            rows = json.loads(shown.stdout)
            assert [(r["name"], r["tenant"], r["cursor"], r["records"]) for r in rows] == [
                (name, None, 3, 3),
                (name, "t1", 3, 3),
            ]
            table_ = await asyncio.to_thread(ujobs, "consumers", "list", "--driver", url)
            assert table_.exit_code == 0, (table_.stderr, table_.exception)
            assert "\u202e" not in table_.stdout and "t1" in table_.stdout
            return table_.stdout

    asyncio.run(stored())


# -- the store: racing turns, and the put inside a caller's transaction ---------------------------


async def test_turns_racing_from_one_cursor_land_one(store: JobDriver) -> None:
    import asyncio

    from jobs_core.records import ConsumerPut

    c = declare(source=function(numbers(1, [])), handle=print)
    job = await claimed(store, c)
    now = SystemClock().now_ms()

    def put(expect: str | None, cursor: str) -> ConsumerPut:
        return ConsumerPut(job.fence, "race", None, "function:x", expect, cursor, 1, None, now)

    for expect, to in ((None, "b"), ('"b0"', "c")):
        if expect is not None:
            entry = await store.consumer_cursor_get("race", None)
            assert entry is not None
            expect = entry.cursor_json
        puts = (store.consumer_cursor_put(put(expect, f'"{to}{i}"')) for i in range(8))
        got = await asyncio.gather(*puts)
        assert got.count(True) == 1, got
        entry = await store.consumer_cursor_get("race", None)
        assert entry is not None and entry.cursor_json == f'"{to}{got.index(True)}"'
        assert entry.turns == (1 if expect is None else 2)


async def test_the_in_transaction_put_refuses_before_sending(
    pg_tables: tuple[JobDriver, Any, sa.Table, sa.Table],
) -> None:
    from jobs_core.records import ConsumerPut, Fence

    driver, engine, _events, _seen = pg_tables
    pg: Any = driver
    put = ConsumerPut(Fence("j", 1, "w"), "a\x00b", None, "table:x", None, "1", 1, None, 1)
    async with engine.connect() as conn:
        with pytest.raises(JobsError) as caught:
            await pg.consumer_cursor_put_async(conn, put)
        assert caught.value.code == "X_JOB_RECORD_INVALID"
        assert not conn.in_transaction()  # refused before anything was sent
    with pytest.raises(JobsError) as caught:
        async with engine.connect() as conn:
            pg.consumer_cursor_put_sync(conn, put)
    assert caught.value.code == "X_JOB_RECORD_INVALID"


async def test_table_source_on_a_sync_engine(
    pg_tables: tuple[JobDriver, Any, sa.Table, sa.Table],
) -> None:
    from tests.pg.conftest import PG_URL

    driver, _engine, events, seen = pg_tables
    engine = sa.create_engine(PG_URL, poolclass=sa.pool.NullPool)

    def handle(rows: list[Any], turn: Turn) -> None:
        turn.conn.execute(seen.insert(), [{"id": r.id} for r in rows])

    # Five turns in one run, each a new connection in a thread: under load 0.3 s took 21 of 30.
    src = table(sa.select(events), engine=engine, key="id")
    c = declare(source=src, handle=handle, batch=7, run_for=2.0)
    got = await run_once(driver, c)
    assert got["records"] == 30 and got["cursor"] == 30
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(seen)).scalar() == 30
    engine.dispose()


async def test_a_cancelled_sync_table_turn_keeps_its_lease_to_its_end(
    pg_tables: tuple[JobDriver, Any, sa.Table, sa.Table],
) -> None:
    """A run cancelled (a drain's deadline) while its sync turn runs in a thread: the thread
    cannot be stopped, so the run holds its lease until the turn ended — no other run reads the
    batch beside it — and the turn, its claim still held, commits. Found by the chaos run
    (docs/chaos.md, the factories): the lease was let go at once, and a second worker's turn
    handed the same batch to the handler while the first still ran it."""
    import asyncio
    import threading

    from tests.pg.conftest import PG_URL

    driver, _engine, events, seen = pg_tables
    engine = sa.create_engine(PG_URL, poolclass=sa.pool.NullPool)
    inside, release = threading.Event(), threading.Event()

    def handle(rows: list[Any], turn: Turn) -> None:
        turn.conn.execute(seen.insert(), [{"id": r.id} for r in rows])
        inside.set()
        release.wait(10)

    c = declare(source=table(sa.select(events), engine=engine, key="id"), handle=handle, batch=7)
    run = asyncio.ensure_future(run_once(driver, c))
    try:
        assert await asyncio.to_thread(inside.wait, 10)
        run.cancel()
        await asyncio.sleep(0.2)
        assert not run.done()
        held = await driver.lease_holders(lease_key("feed", None), SystemClock().now_ms())
        assert len(held) == 1
    finally:
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await run
        engine.dispose()
    assert await driver.lease_holders(lease_key("feed", None), SystemClock().now_ms()) == []
    entry = await driver.consumer_cursor_get("feed", None)
    assert entry is not None and loads(entry.cursor_json) == 7


async def test_a_function_cursor_that_does_not_move_is_refused(store: JobDriver) -> None:
    seen: list[int] = []
    c = declare(source=function(lambda cursor, limit: ([1], 5)), handle=lambda r, t: seen.extend(r))
    with pytest.raises(JobsError) as caught:
        await run_once(store, c)
    assert caught.value.code == "X_CONSUMER_SOURCE_INVALID"
    assert seen == [1]  # the first batch (from none to 5) landed; the second would not move
    entry = await store.consumer_cursor_get("feed", None)
    assert entry is not None and entry.turns == 1


def test_the_supervisor_fires_the_consumers_job() -> None:
    from jobs_core.scheduler.task import Occurrence

    jobs, tasks = JobRegistry(), TaskRegistry()
    c = consumer(
        "feed",
        source=function(numbers(1, [])),
        handle=print,
        tenant="t1",
        every="*/5 * * * *",
        tz="Europe/Paris",
        registry=jobs,
        task_registry=tasks,
    )
    assert (c.job.name, c.supervisor.name) == ("consumer:feed", "consumer:feed:supervisor")
    assert c.supervisor.job is c.job and (c.supervisor.cron, c.supervisor.tz) == (
        "*/5 * * * *",
        "Europe/Paris",
    )
    assert jobs.get("consumer:feed") is c.job and tasks.get(c.supervisor.name) is c.supervisor
    # Each occurrence is its own fire; the job acts for the consumer's tenant.
    occurrence = Occurrence(c.supervisor.name, 1_000, 1_000, 1_000, "Europe/Paris")
    assert c.supervisor.fire_key(1_000, c.supervisor.input_for(occurrence)) == "task:1000:feed"
    assert c.job.tenant_for(None) == "t1"
    with pytest.raises(JobsError) as caught:
        consumer(
            "feed",
            source=function(numbers(1, [])),
            handle=print,
            tenant="t1",
            registry=jobs,
            task_registry=tasks,
        )
    assert caught.value.code == "X_JOB_DUPLICATE"
