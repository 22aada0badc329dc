"""Postgres-specific behaviour beyond the parity suite: URLs, batching edges, concurrency, plans."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg
import psycopg.sql
import pytest

from jobs_core.errors import DriverUrlInvalidError
from jobs_core.records import (
    Ack,
    ClaimParams,
    EnqueueResult,
    Heartbeat,
    Nack,
    NackKind,
    NewJob,
    NewJobs,
    Pause,
    Progress,
    WorkerBeat,
)
from jobs_memory import MemoryDriver
from jobs_pg import PgDriver
from jobs_pg.driver import STATEMENTS, unique_runs
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema, migrate

T0 = 1_800_000_000_000
ODD = ("q'uo\"te", "100%", "%s", "%(x)s", "$1", "new\nline", "☃ ünï", "back\\slash", "--", "a;b")


def job(
    i: int | str,
    *,
    key: str | None = None,
    name: str = "n",
    queue: str = "q",
    tenant: str | None = None,
    priority: int = 0,
    run_at: int = T0,
    input_json: str = '{"i":1}',
) -> NewJob:
    return NewJob(
        id=f"id-{i}",
        run_id=f"run-{i}",
        name=name,
        queue=queue,
        tenant_id=tenant,
        idempotency_key=key if key is not None else f"k-{i}",
        input_json=input_json,
        priority=priority,
        run_at_ms=run_at,
        max_attempts=3,
        created_at_ms=T0,
    )


def test_describe_masks_the_password() -> None:
    d = PgDriver("postgresql+psycopg://app:s3cr%40t@db.example:5432/jobs?sslmode=require")
    assert "s3cr" not in d.describe()
    assert "app:***@db.example:5432/jobs" in d.describe()
    d2 = PgDriver("postgresql://app@db/jobs?password=hunter2&sslmode=disable")
    assert "hunter2" not in d2.describe()


def test_url_schemes() -> None:
    PgDriver("postgresql://postgres@127.0.0.1/test")
    PgDriver("postgresql+psycopg://postgres@127.0.0.1/test")
    with pytest.raises(DriverUrlInvalidError) as err:
        PgDriver("mysql://u:pw@h/db")
    assert "pw" not in str(err.value)


def test_unique_runs_split_where_a_key_repeats() -> None:
    assert unique_runs(["a", "b", "a", "c", "b", "b"]) == [[0, 1], [2, 3, 4], [5]]
    assert unique_runs([]) == [[]]


def test_statements_name_their_columns() -> None:
    for name, sql in STATEMENTS.items():
        text = sql.render("s").upper()
        assert "SELECT *" not in text and "RETURNING *" not in text, name
        assert ".*" not in text, name


def test_a_raw_statement_numbers_each_parameter_once_in_order() -> None:
    raw = {name: sql for name, sql in STATEMENTS.items() if sql.raw}
    assert {"JOB_CLAIM", "JOB_ACK", "JOB_NACK"} <= raw.keys()
    for name, sql in raw.items():
        numbers = [int(n) for n in re.findall(r"\$(\d+)", sql.text)]
        # Each `$n` first appears in order; a name bound again (same cast) reuses its number.
        assert list(dict.fromkeys(numbers)) == list(range(1, len(sql.order) + 1)), name
        assert "%b" not in sql.text and "%s" not in sql.text, name
    # The claim binds its queues three times and the ack its ids twice: each is sent once.
    assert STATEMENTS["JOB_CLAIM"].order.count("queues") == 1
    assert STATEMENTS["JOB_ACK"].order.count("id") == 1
    # Each statement keeps its own name (its parameters' names are another thing).
    assert all(sql.name == name for name, sql in STATEMENTS.items())


async def test_claims_and_acks_in_a_non_ascii_schema_with_one_value_arrays() -> None:
    """The raw claim and ack run on a schema whose name is not ASCII (their text goes as it is)
    and an ack batch's columns of one value throughout (its worker, results all None, one result
    for all) land as each item's own value, like a batch of different values."""
    schema = fresh_schema() + "_☃ q'u%"
    worker = "wörker ☃ %s $1"
    try:
        await asyncio.to_thread(migrate, schema)
        async with PgDriver(PG_URL, schema=schema, pool_size=2) as d:
            await d.job_enqueue_many([job(i, queue="q☃") for i in range(9)])
            claimed = (await d.job_claim(ClaimParams(("q☃",), worker, 9, 60_000, T0))).jobs
            assert len(claimed) == 9
            results: list[list[str | None]] = [
                [None, None, None],
                ['"ü ☃"', '"ü ☃"', '"ü ☃"'],
                ['"a"', None, '""'],
            ]
            for i, batch in enumerate(results):
                held = claimed[3 * i : 3 * i + 3]
                acks = [Ack(j.fence, T0 + 1, r) for j, r in zip(held, batch, strict=True)]
                assert await d.job_ack(acks) == [True] * 3
                rows = await d.job_get_many([j.id for j in held])
                assert [rows[j.id].result_json for j in held] == batch
                assert {rows[j.id].state.value for j in held} == {"completed"}
    finally:
        await asyncio.to_thread(drop_schema, schema)


def test_a_text_array_that_cannot_be_encoded_is_a_data_error() -> None:
    from jobs_pg.sqltext import TextArray, _TextArrayDumper

    dumper = _TextArrayDumper(TextArray)
    for values in (["\ud800"] * 3, ["a", "\ud800"], ["\ud800", "\ud800", "b"]):
        with pytest.raises(psycopg.DataError, match="text\\[\\] parameter"):
            dumper.dump(TextArray(values))


async def _pair(ops_pg: PgDriver, records: Sequence[NewJob]) -> None:
    mem = MemoryDriver()
    assert await ops_pg.job_enqueue_many(records) == await mem.job_enqueue_many(records)
    ids = sorted({r.id for r in records})
    assert await ops_pg.job_get_many(ids) == await mem.job_get_many(ids)


async def test_special_characters_round_trip(pg: PgDriver) -> None:
    mem = MemoryDriver()
    records = [
        job(
            f"{n}-{i}",
            key=n,
            name=n,
            queue=n,
            tenant=n,
            input_json=json.dumps({n: [n, 1.5e300, -0.0, 10**30]}, ensure_ascii=False),
        )
        for i, n in enumerate(ODD)
    ]
    for d in (pg, mem):
        assert [r.deduped for r in await d.job_enqueue_many(records)] == [False] * len(ODD)
        await d.pause_add(Pause("name", ODD[0]))
        await d.pause_add(Pause("queue", ODD[1]))
        await d.worker_beat(WorkerBeat(ODD[2], json.dumps({"h": ODD[3]}), 1000, T0))
    ids = [r.id for r in records]
    got = await pg.job_get_many(ids)
    assert got == await mem.job_get_many(ids)
    for r in records:
        assert got[r.id].input_json == r.input_json  # text kept byte for byte, not re-rendered
    assert await pg.pause_list() == await mem.pause_list()
    assert await pg.worker_list(T0) == await mem.worker_list(T0)
    claim = ClaimParams(tuple(ODD), "w'%", 100, 1000, T0)
    assert await pg.job_claim(claim) == await mem.job_claim(claim)
    assert await pg.queue_demand(list(ODD), T0) == await mem.queue_demand(list(ODD), T0)


async def test_enqueue_many_in_batch_duplicates_behave_sequentially(pg: PgDriver) -> None:
    # A live row holding "held"; then a batch where the same id first loses to that holder and
    # then, with a free key, is inserted; a key taken by an earlier record of the batch; ids
    # repeated after an insert.
    await pg.job_enqueue(job("x", key="held"))
    mem = MemoryDriver()
    await mem.job_enqueue(job("x", key="held"))
    batch = [
        job(1, key="held"),
        job(1, key="free"),
        job(2, key="free"),
        job(1, key="other"),
        job(3, key="k3"),
        job(4, key="k3", tenant=""),  # '' and None share a namespace...
        job(5, key="k3", tenant="t"),  # ...a real tenant does not
        job("x", key="zzz"),
    ]
    batch = [b for b in batch if b.tenant_id != ""]  # '' is refused by the contract's checks
    got = await pg.job_enqueue_many(batch)
    assert got == await mem.job_enqueue_many(batch)
    assert got[0] == EnqueueResult("id-x", True)
    assert got[1] == EnqueueResult("id-1", False)
    ids = ["id-x", "id-1", "id-2", "id-3", "id-5"]
    assert await pg.job_get_many(ids) == await mem.job_get_many(ids)


async def test_enqueue_many_across_chunks(pg: PgDriver) -> None:
    # 2,500 records: chunks of 1,000, keys repeating across chunk borders, ids repeating too.
    records = [job(i % 2100, key=f"k{i % 1700}") for i in range(2500)]
    await _pair(pg, records)
    # Unique ids (the batch is then written in key order): keys shared across chunks, some
    # held by rows stored before, answers still those of the caller's order.
    mem = MemoryDriver()
    before = [job(f"h{i}", key=f"v{i * 97}") for i in range(10)]
    assert await pg.job_enqueue_many(before) == await mem.job_enqueue_many(before)
    records = [job(f"u{i}", key=f"v{(i * 7919) % 1300}") for i in range(2500)]
    assert await pg.job_enqueue_many(records) == await mem.job_enqueue_many(records)
    ids = [r.id for r in records]
    assert await pg.job_get_many(ids) == await mem.job_get_many(ids)


@pytest.mark.parametrize("uniform", [True, False])
async def test_enqueue_many_stores_each_records_own_fields_shared_or_not(
    pg: PgDriver, uniform: bool
) -> None:
    # A batch whose records share every field but the id, key and input binds those fields
    # once (JOB_ENQUEUE_MANY's SHARED_COLUMNS); a batch that differs in any binds arrays.
    shared = {
        "name": "nm",
        "queue": "qq",
        "tenant_id": "org",
        "priority": 7,
        "max_attempts": 4,
        "run_at_ms": T0 + 5,
        "created_at_ms": T0,
        "enqueued_by": "me",
        "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
    }
    odd = {"name": "n2", "queue": "q2", "tenant_id": None, "priority": 9, "max_attempts": 1}
    odd |= {"run_at_ms": T0, "created_at_ms": T0 - 1, "enqueued_by": None, "traceparent": None}
    records = [
        NewJob(
            id=f"s{i}",
            run_id=f"r{i}",
            idempotency_key=f"k{i}",
            input_json=json.dumps({"i": i}),
            **(shared if uniform or i % 2 else {**shared, field: odd[field]}),
        )
        for i, field in enumerate([*shared, *shared])
    ]
    mem = MemoryDriver()
    assert await pg.job_enqueue_many(records) == await mem.job_enqueue_many(records)
    ids = [r.id for r in records]
    assert await pg.job_get_many(ids) == await mem.job_get_many(ids)


def _columns(n: int, acts: list[str | None] | None, shared_acts: str | None) -> NewJobs:
    """A `NewJobs` of `n` records of tenant "org", keys repeating every 700 records."""
    shared = replace(job(0, tenant="org"), acts_for=shared_acts)
    return NewJobs(
        shared,
        [f"c{i}" for i in range(n)],
        [f"r{i}" for i in range(n)],
        [f"k{(i * 7919) % 700}" for i in range(n)],
        [json.dumps({"i": i}) for i in range(n)],
        acts,
    )


async def test_enqueue_many_reads_a_batch_of_columns_as_given(pg: PgDriver) -> None:
    # The facade's `NewJobs` reaches the driver as it is (no `NewJob` built a record).
    given: list[object] = []
    read = pg._job_enqueue_many

    async def spy(jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        given.append(type(jobs))
        return await read(jobs)

    pg._job_enqueue_many = spy  # type: ignore[method-assign]
    await pg.job_enqueue_many(_columns(3, None, None))
    assert given == [NewJobs]


@pytest.mark.parametrize(
    ("n", "acts", "shared_acts"),
    [
        (2500, None, None),  # several statements, one transaction
        (2500, None, "u-shared"),  # every record acts for the shared record's
        (2500, "each", None),  # a column of its own
        (600, None, "u-shared"),  # one statement
        (600, "each", None),
    ],
)
async def test_enqueue_many_of_columns_stores_and_answers_as_records_one_by_one(
    pg: PgDriver, n: int, acts: str | None, shared_acts: str | None
) -> None:
    # Repeated keys across chunks, ids stored before the call, each record's acts-for: the
    # columns' answers and rows are those of the same records as a list, in the memory store.
    column = [None if i % 3 else f"u{i % 5}" for i in range(n)] if acts else None
    batch = _columns(n, column, shared_acts)
    mem = MemoryDriver()
    before = [batch[5], batch[n - 1]]
    assert await pg.job_enqueue_many(before) == await mem.job_enqueue_many(before)
    got = await pg.job_enqueue_many(batch)
    assert got == await mem.job_enqueue_many(list(batch))
    assert sum(not r.deduped for r in got) == min(n, 700) - 2  # two keys held before
    ids = [r.id for r in batch]
    assert await pg.job_get_many(ids) == await mem.job_get_many(ids)


async def test_concurrent_enqueues_of_one_key_insert_once(pg: PgDriver) -> None:
    results = await asyncio.gather(*(pg.job_enqueue(job(i, key="same")) for i in range(24)))
    inserted = [r for r in results if not r.deduped]
    assert len(inserted) == 1
    assert {r.id for r in results} == {inserted[0].id}


async def test_concurrent_enqueue_many_of_one_id(pg: PgDriver) -> None:
    batches = [[job(i), job("shared", key=f"s{n}")] for n, i in enumerate(range(8))]
    results = await asyncio.gather(*(pg.job_enqueue_many(b) for b in batches))
    shared = [r[1] for r in results]
    assert sum(not r.deduped for r in shared) == 1
    assert {r.id for r in shared} == {"id-shared"}


async def test_concurrent_claims_never_share_a_job(pg_schema: str) -> None:
    drivers = [PgDriver(PG_URL, schema=pg_schema, pool_size=2) for _ in range(4)]
    try:
        await drivers[0].job_enqueue_many([job(i, priority=i % 3) for i in range(600)])

        async def drain(d: PgDriver, w: str) -> list[str]:
            got: list[str] = []
            while True:
                r = await d.job_claim(ClaimParams(("q",), w, 25, 60_000, T0))
                if not r.jobs:
                    return got
                got.extend(j.id for j in r.jobs)
                acks = [Ack(j.fence, T0) for j in r.jobs]
                assert await d.job_ack(acks) == [True] * len(acks)

        claimed = await asyncio.gather(*(drain(d, f"w{n}") for n, d in enumerate(drivers)))
        flat = [i for c in claimed for i in c]
        assert len(flat) == len(set(flat)) == 600
    finally:
        for d in drivers:
            await d.close()


async def test_batched_settles_answer_per_item_in_order(pg: PgDriver) -> None:
    mem = MemoryDriver()
    records = [job(i) for i in range(6)]
    claim = ClaimParams(("q",), "w", 6, 1000, T0)
    for d in (pg, mem):
        await d.job_enqueue_many(records)
    pr, mr = await pg.job_claim(claim), await mem.job_claim(claim)
    assert pr == mr
    f = [j.fence for j in pr.jobs]
    stale = type(f[0])(f[0].job_id, f[0].claims + 1, "w")
    for d in (pg, mem):
        beats = [Heartbeat(f[0], 500, T0 + 1), Heartbeat(stale, 500, T0 + 1)]
        prog = [Progress(f[1], '{"p":1}', T0), Progress(f[1], '{"p":2}', T0)]
        nacks = [
            Nack(f[2], NackKind.RETRY, T0, run_at_ms=T0 + 5, error="e"),
            Nack(f[3], NackKind.PARK, T0),
            Nack(f[2], NackKind.FAIL, T0),
        ]
        acks = [Ack(f[1], T0, '"r"'), Ack(f[1], T0), Ack(stale, T0), Ack(f[4], T0, None, "[1]")]
        assert await d.job_heartbeat(beats) == [True, False]
        assert await d.job_progress(prog) == [True, True]
        assert await d.job_nack(nacks) == [True, True, False]
        assert await d.job_ack(acks) == [True, False, False, True]
    ids = [r.id for r in records]
    assert await pg.job_get_many(ids) == await mem.job_get_many(ids)


def _claim_values(queues: list[str], limit: int) -> dict[str, Any]:
    """The claim statement's parameters, as `_job_claim` binds them (no registry beat)."""
    return {
        "queues": queues,
        "now_ms": T0,
        "lapsed_by": T0,
        "limit": limit,
        "worker_id": "w",
        "lease_until_ms": T0 + 1000,
        "drop_exhausted": [],
        "lapsed_error": "x",
        "abandoned_code": "X_JOB_LEASE_LOST",
        "abandoned_message": "x",
        "shard": 0,
        "beat_worker_id": None,
        "beat_info_json": None,
        "beat_now_ms": None,
        "beat_expires_at_ms": None,
    }


async def test_the_claim_reads_its_indexes(pg: PgDriver) -> None:
    """With a real backlog the claim walks `jobs_due` / `jobs_lease`, never a sequential scan."""
    await pg.job_enqueue_many([job(i, priority=i % 5, run_at=T0 - i) for i in range(3000)])
    await pg.job_enqueue_many(
        [job(f"b{i}", queue=f"other{i % 7}", priority=i % 5) for i in range(3000)]
    )
    with admin() as conn:
        conn.execute(f'ANALYZE "{pg.schema}".jobs')
        sql = STATEMENTS["JOB_CLAIM"]
        args = sql.args(_claim_values(["q", "other1"], 50))
        assert sql.raw  # its text has $n placeholders
        text = sql.render(pg.schema)
        custom = psycopg.RawCursor(conn).execute("EXPLAIN " + text, args).fetchall()
        # The plan the driver runs: the generic one (`GENERIC_PLANS`).
        conn.execute("PREPARE claim AS " + text)
        conn.execute("SET plan_cache_mode = force_generic_plan")
        literals = ", ".join(psycopg.sql.Literal(a).as_string(conn) for a in args)
        generic = conn.execute(f"EXPLAIN EXECUTE claim({literals})").fetchall()
    for rows in (custom, generic):
        plan = "\n".join(r[0] for r in rows)
        assert "jobs_due" in plan
        assert "jobs_lease" in plan
        assert "Seq Scan on jobs" not in plan, plan
    assert "$" in "\n".join(r[0] for r in generic)  # parameters unbound: the generic plan


async def test_the_claim_leases_a_due_row_updated_after_its_snapshot(pg: PgDriver) -> None:
    """A due row that another transaction rewrote after the claim's snapshot is locked at its
    new version, which that snapshot cannot see, and is still leased: the UPDATE follows the row
    to it. (An UPDATE that went back to the locked rows by their heap place, a TID scan, passed
    it over: docs/pg.md, "The server's side of claim and ack".)"""
    await pg.job_enqueue_many([job("late")])
    sql = STATEMENTS["JOB_CLAIM"]
    text, args = sql.render(pg.schema), sql.args(_claim_values(["q"], 10))
    table = f'"{pg.schema}".jobs'
    with admin() as claimer, admin() as blocker, admin() as writer:
        claimer.execute("SET plan_cache_mode = force_generic_plan")
        # Planned now, while nothing blocks: later runs open the indexes only as they start,
        # after the statement's snapshot is taken.
        warm = sql.args(_claim_values(["none"], 10))
        psycopg.RawCursor(claimer).execute(text, warm, prepare=True)
        blocker.autocommit = False
        # Holds `pauses_pkey` until it commits: the claim takes its snapshot, then waits here.
        blocker.execute(f'REINDEX INDEX "{pg.schema}".pauses_pkey')
        pid = claimer.info.backend_pid
        claim = asyncio.create_task(
            asyncio.to_thread(
                lambda: psycopg.RawCursor(claimer).execute(text, args, prepare=True).fetchall()
            )
        )
        for _ in range(500):
            row = writer.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if row is not None and row[0] == "Lock":
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the claim never waited on pauses_pkey")
        # A new version of the due row, committed after the claim's snapshot: still due.
        writer.execute(f"UPDATE {table} SET priority = priority WHERE id = 'id-late'")
        blocker.commit()
        rows = await claim
    assert [(r[0], r[1]) for r in rows] == [("c", "id-late")]
    with admin() as conn:
        state = conn.execute(f"SELECT state, claims FROM {table} WHERE id = 'id-late'").fetchone()
    assert state == ("running", 1)


def test_from_url_reads_driver_options_and_hides_them_from_libpq() -> None:
    from jobs_pg.urls import from_url, mask

    d = from_url(
        "postgresql+psycopg://app:pw@127.0.0.1:5432/test?sslmode=disable&schema=s%20x"
        "&pool_size=3&wake=0&prepare=0&lazy_claim=1&listen_url=postgresql://l:lpw@h/db"
    )
    assert d.schema == "s x"
    assert d._lazy_claim is True
    assert d.capabilities().wake is False
    assert d.listen_conninfo == "postgresql://l:lpw@h/db"
    assert d.describe() == (
        "postgres postgresql+psycopg://app:***@127.0.0.1:5432/test?sslmode=disable schema=s x"
    )
    masked = mask("postgresql://a:pw1@h/db?password=pw2&listen_url=postgresql://l:pw3@h/db")
    assert "pw" not in masked
    assert "listen_url=postgresql://l:***@h/db" in masked
    with pytest.raises(DriverUrlInvalidError):
        from_url("postgresql://h/db?wake=maybe")


async def test_from_url_drives_a_real_schema(pg_schema: str) -> None:
    from jobs_pg.urls import from_url

    d = from_url(f"{PG_URL}?schema={pg_schema}&pool_size=2")
    async with d:
        assert (await d.job_enqueue(job(1))).deduped is False
        assert list(await d.job_get_many(["id-1"])) == ["id-1"]


def test_the_entry_point_module_is_from_url() -> None:
    from jobs_core.urls import driver_from_url

    d = driver_from_url("postgresql+psycopg://u:pw@127.0.0.1/test?schema=app&wake=0")
    assert isinstance(d, PgDriver)
    assert d.schema == "app" and d.capabilities().wake is False


async def test_a_lost_prepared_statement_turns_preparing_off(pg_schema: str) -> None:
    """What a pooler without prepared-statement support does, made deterministic: the server
    session forgets our statements; the driver reruns the statement unprepared, once."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=False)  # one enqueue statement
    try:
        assert (await d.job_enqueue(job(1))).deduped is False  # prepared on first use
        pool = await d._ready()
        async with pool.connection() as conn:
            # Inside DO, so psycopg does not see it and still believes its statements exist.
            await conn.execute("DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$")
        assert (await d.job_enqueue(job(2))).deduped is False
        assert (await d.job_enqueue(job(2))).deduped is True
        assert d._prepare_threshold is None
        assert sorted(await d.job_get_many(["id-1", "id-2", "id-3"])) == ["id-1", "id-2"]
    finally:
        await d.close()


def _claim(worker: str = "w") -> ClaimParams:
    return ClaimParams(queues=("q",), worker_id=worker, limit=1, lease_ms=30_000, now_ms=T0)


async def test_the_claim_runs_on_its_generic_plan_and_the_setting_ends_with_it(
    pg_schema: str,
) -> None:
    """Postgres would re-plan the prepared claim on every call (its generic plan's estimate is
    far above the custom ones'); the driver forces the generic plan for that statement only,
    and the session's own setting is untouched after it."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=False)  # one session for all
    try:
        await d.job_enqueue_many([job(i) for i in range(12)])
        for _ in range(12):
            assert len((await d.job_claim(_claim())).jobs) == 1
        # The server shows `$n` where a psycopg text has `%b`: compare up to the first one.
        claim_head = d._q["JOB_CLAIM"].text.split("%b")[0]
        async with d._conn() as conn:
            plans = await (
                await conn.execute(
                    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
                )
            ).fetchall()
            mode = await (await conn.execute("SHOW plan_cache_mode")).fetchone()
        claims = [(g, c) for text, g, c in plans if text.startswith(claim_head)]
        assert claims == [(12, 0)]
        assert mode == ("auto",)
        # Every other statement keeps the server's choice: the enqueue's first plans are custom.
        assert any(c > 0 for text, _, c in plans if not text.startswith(claim_head))
    finally:
        await d.close()


def test_the_claims_settings_keep_the_server_from_compiling_it(pg_schema: str) -> None:
    """A generic claim's estimate grows with the due rows (past about 650,000 in a queue, over
    the server's `jit_above_cost`); what the driver sends ahead of the claim turns JIT off for
    it. Here the threshold is lowered to 0 instead of loading a million rows."""
    from jobs_pg.driver import GENERIC_PLAN_SETTINGS

    sql = STATEMENTS["JOB_CLAIM"]
    values = _claim_values(["q"], 10)

    def plan(settings: str) -> str:
        # A connection each: psycopg deallocates every prepared statement after a rollback.
        with admin() as conn:
            conn.execute("SET jit = on")
            conn.execute("SET jit_above_cost = 0")
            conn.execute("PREPARE claim AS " + sql.render(pg_schema))
            literals = ", ".join(psycopg.sql.Literal(a).as_string(conn) for a in sql.args(values))
            with conn.transaction(force_rollback=True):
                conn.execute(settings)
                rows = conn.execute(f"EXPLAIN ANALYZE EXECUTE claim({literals})").fetchall()
            return "\n".join(r[0] for r in rows)

    with admin() as conn:
        available = conn.execute("SELECT pg_jit_available()").fetchone() == (True,)
    if available:  # else no server compiles anything, and the setting only has to be sent
        generic_only = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
        assert "JIT:" in plan(generic_only)  # the threshold reached: the server compiles it
        assert "JIT:" not in plan(GENERIC_PLAN_SETTINGS)
    assert "set_config('jit', 'off', true)" in GENERIC_PLAN_SETTINGS


@pytest.mark.parametrize(("prepare", "lazy"), [(True, True), (False, True), (True, False)])
async def test_a_lazy_claim_alone_commits_without_waiting_for_its_flush(
    pg_schema: str, prepare: bool, lazy: bool
) -> None:
    """With `lazy_claim` the claim's transaction runs with `synchronous_commit = off`
    (`LAZY_COMMIT`), prepared or not; without it (the default) the claim keeps the server's
    setting. The enqueue before it and the ack after it, on the same session, keep it either
    way. A trigger on `jobs` records the setting each write ran under."""
    q = f'"{pg_schema}"'
    with admin() as conn:
        server = conn.execute("SHOW synchronous_commit").fetchone()
        conn.execute(f"CREATE TABLE {q}.seen (n serial, what text, sync text)")
        conn.execute(
            f"CREATE FUNCTION {q}.note() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" INSERT INTO {q}.seen (what, sync) VALUES"
            " (TG_OP || ' ' || NEW.state, current_setting('synchronous_commit'));"
            " RETURN NEW; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER note AFTER INSERT OR UPDATE ON {q}.jobs"
            f" FOR EACH ROW EXECUTE FUNCTION {q}.note()"
        )
    assert server == ("on",)
    d = PgDriver(
        PG_URL, schema=pg_schema, pool_size=1, wake=False, prepare=prepare, lazy_claim=lazy
    )
    try:
        await d.job_enqueue(job(1))
        claimed = (await d.job_claim(_claim())).jobs
        assert [c.id for c in claimed] == ["id-1"]
        assert await d.job_ack([Ack(claimed[0].fence, T0)]) == [True]
    finally:
        await d.close()
    with admin() as conn:
        seen = conn.execute(f"SELECT what, sync FROM {q}.seen ORDER BY n").fetchall()
    claim = "off" if lazy else "on"
    assert seen == [("INSERT ready", "on"), ("UPDATE running", claim), ("UPDATE completed", "on")]


async def test_a_lost_prepared_claim_runs_again_unprepared(pg_schema: str) -> None:
    """The claim's pipeline (the plan setting, then the prepared claim) meets a session that
    forgot the statement: nothing ran, and the claim runs again unprepared, once."""
    d = PgDriver(PG_URL, schema=pg_schema, pool_size=1, wake=False)
    try:
        await d.job_enqueue_many([job(1), job(2)])
        assert [c.id for c in (await d.job_claim(_claim())).jobs] == ["id-1"]
        pool = await d._ready()
        async with pool.connection() as conn:
            await conn.execute("DO $$ BEGIN EXECUTE 'DEALLOCATE ALL'; END $$")
        assert [c.id for c in (await d.job_claim(_claim())).jobs] == ["id-2"]
        assert d._prepare_threshold is None
        rows = await d.job_get_many(["id-1", "id-2"])
        assert [(r.state.value, r.claims) for r in rows.values()] == [("running", 1)] * 2
    finally:
        await d.close()


async def test_a_missing_schema_says_how_to_install_it() -> None:
    """Typed on the first call that meets it: `X_DRIVER_SCHEMA_MISSING` (still a
    `DriverError`), naming the schema and the command that installs it — a table never made,
    and a column a later migration adds (a schema behind this version) alike."""
    from jobs_core.errors import DriverError, DriverSchemaMissingError

    async with PgDriver(PG_URL, schema="never_migrated_here", pool_size=2) as d:
        with pytest.raises(DriverError) as err:
            await d.job_enqueue(job(1))
    assert isinstance(err.value, DriverSchemaMissingError)
    assert err.value.code == "X_DRIVER_SCHEMA_MISSING"
    assert "alembic upgrade head" in str(err.value) and "ujobs db upgrade" in str(err.value)
    schema = fresh_schema()
    migrate(schema)
    with admin() as conn:
        conn.execute(f"ALTER TABLE {schema}.jobs DROP COLUMN acts_for")
    try:
        async with PgDriver(PG_URL, schema=schema, pool_size=2) as d:
            with pytest.raises(DriverSchemaMissingError) as behind:
                await d.job_enqueue(job(2))
        assert "is behind this version" in str(behind.value)
    finally:
        drop_schema(schema)
