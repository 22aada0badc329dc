"""The step and event families on real Postgres, where the parity suite cannot look: a publish
racing a waiting park on two connections, the advisory lock both take, what purge and remove
take along, the statement counts, and the index a publish reads."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
from psycopg import sql

from jobs_core.records import (
    Ack,
    ClaimedJob,
    ClaimParams,
    EventRecord,
    EventWait,
    Nack,
    NackKind,
    PurgeParams,
    RemoveAnswer,
    StepPut,
)
from jobs_core.states import JobState
from jobs_pg import PgDriver
from tests.core.support import T0, new_job
from tests.pg.conftest import PG_URL, admin

LEASE = 60_000


async def claim_one(d: PgDriver, job_id: str, now: int = T0, queue: str = "q") -> ClaimedJob:
    got = await d.job_claim(ClaimParams((queue,), "w", 1, LEASE, now))
    assert [j.id for j in got.jobs] == [job_id]
    return got.jobs[0]


def waits_of(schema: str) -> dict[str, tuple[Any, ...]]:
    """Every stored wait: job id -> (event, match, since)."""
    with admin() as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT id, wait_event, wait_match_json, wait_since_ms FROM {}.jobs"
                " WHERE wait_event IS NOT NULL OR wait_match_json IS NOT NULL"
                " OR wait_since_ms IS NOT NULL"
            ).format(sql.Identifier(schema))
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in rows}


def steps_of(schema: str) -> list[tuple[str, str]]:
    with admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT run_id, name FROM {}.steps ORDER BY run_id, name").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    return [(r[0], r[1]) for r in rows]


async def test_a_publish_racing_a_waiting_park_never_loses_the_wake(pg: PgDriver) -> None:
    """Two drivers (two connections): one parks a run waiting for `go {n}`, the other publishes
    that very event, started together, many times over. Every run ends `ready` with no wait
    stored — woken by the publish, or sent on by the park that found the event — never parked."""
    publisher = PgDriver(PG_URL, schema=pg.schema, pool_size=2)
    rounds = 150
    woke_by_publish = 0
    try:
        for n in range(rounds):
            job_id = f"j{n:03}"
            await pg.job_enqueue(new_job(job_id, job_id))
            held = await claim_one(pg, job_id)
            wait = EventWait("go", f'{{"n": {n}}}', T0)
            park = Nack(held.fence, NackKind.PARK, T0 + 1, None, wait=wait)
            event = EventRecord(f"e{n}", "go", f'{{"n": {n}, "x": 1}}', T0 + 1, T0 + 10**9)
            # Alternate who is sent first; the server decides who locks first.
            if n % 2:
                parked, woken = await asyncio.gather(
                    pg.job_nack([park]), publisher.event_publish(event)
                )
            else:
                woken, parked = await asyncio.gather(
                    publisher.event_publish(event), pg.job_nack([park])
                )
            assert parked == [True]
            row = (await pg.job_get_many([job_id]))[job_id]
            assert row.state is JobState.READY, (n, row.state, woken)
            assert row.run_at_ms == T0 + 1
            woke_by_publish += woken
    finally:
        await publisher.close()
    assert waits_of(pg.schema) == {}
    print(f"of {rounds} races, {woke_by_publish} woken by the publish, the rest by the park")


async def advisory_waiters(schema: str, min_count: int) -> int:
    """Sessions named after `schema` waiting on an advisory lock, once there are `min_count`;
    fails after 20 s. (Only this test's own: tests running beside it take advisory locks too.)"""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with admin() as conn:
            (n,) = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory'"
                " AND application_name = %s",
                (schema,),
            ).fetchone() or (0,)
        if n >= min_count:
            return int(n)
        await asyncio.sleep(0.05)
    raise AssertionError(f"{min_count} call(s) never waited on the event's lock")


async def test_a_publish_and_a_waiting_park_both_wait_for_the_events_lock(pg: PgDriver) -> None:
    """While a third session holds the advisory lock of `go`, a publish of `go` and a park
    waiting for `go` both stop at it (and a park waiting for another name does not); let go,
    the park sees the event or the publish the wait — here the publish was sent first."""
    for i in ("a", "b"):
        await pg.job_enqueue(new_job(i, i))
    got = await pg.job_claim(ClaimParams(("q",), "w", 2, LEASE, T0))
    a, b = sorted(got.jobs, key=lambda j: j.id)
    other_name = Nack(b.fence, NackKind.PARK, T0, None, wait=EventWait("stop", "{}", T0))
    assert await pg.job_nack([other_name]) == [True]
    named = f"{PG_URL}?application_name={pg.schema}"
    publisher = PgDriver(named, schema=pg.schema, pool_size=2)
    parker = PgDriver(named, schema=pg.schema, pool_size=2)
    holder = await psycopg.AsyncConnection.connect(PG_URL.replace("+psycopg", ""))
    try:
        await holder.execute("SELECT pg_advisory_xact_lock(%s)", (pg._event_key("go"),))
        publish = asyncio.create_task(
            publisher.event_publish(EventRecord("e1", "go", "{}", T0 + 5, T0 + 10**9))
        )
        await advisory_waiters(pg.schema, 1)
        park = asyncio.create_task(
            parker.job_nack(
                [Nack(a.fence, NackKind.PARK, T0 + 6, None, wait=EventWait("go", "{}", T0))]
            )
        )
        await advisory_waiters(pg.schema, 2)
        assert not publish.done() and not park.done()
        await holder.commit()
        woken, parked = await asyncio.wait_for(asyncio.gather(publish, park), 30)
    finally:
        await holder.close()
        await publisher.close()
        await parker.close()
    # The publish locked first, found nobody waiting; the park then found the event.
    assert (woken, parked) == (0, [True])
    rows = await pg.job_get_many(["a", "b"])
    assert (rows["a"].state, rows["a"].run_at_ms) == (JobState.READY, T0 + 6)
    assert rows["b"].state is JobState.PARKED
    assert waits_of(pg.schema) == {"b": ("stop", "{}", T0)}


async def test_steps_and_waits_go_with_their_row(pg: PgDriver) -> None:
    """A purge and a remove take the run's steps; a cancel, a claim and a purge or remove leave
    no wait behind."""
    for i in ("done", "parked", "cancelled", "timeout"):
        await pg.job_enqueue(new_job(i, i))
    got = await pg.job_claim(ClaimParams(("q",), "w", 4, LEASE, T0))
    held = {j.id: j for j in got.jobs}
    puts = [StepPut(j.fence, "s1", "1.0", T0) for j in got.jobs]
    assert await pg.step_put(puts) == [True] * 4
    assert await pg.job_ack([Ack(held["done"].fence, T0)]) == [True]
    wait = EventWait("go", "{}", T0)
    parks = [
        Nack(held["parked"].fence, NackKind.PARK, T0, None, wait=wait),
        Nack(held["cancelled"].fence, NackKind.PARK, T0, None, wait=wait),
        Nack(held["timeout"].fence, NackKind.PARK, T0, T0 + 10, wait=wait),
    ]
    assert await pg.job_nack(parks) == [True] * 3
    assert set(waits_of(pg.schema)) == {"parked", "cancelled", "timeout"}
    # The output is stored as its text: `1.0` stays `1.0`.
    assert [s.output_json for s in await pg.step_list("run-done")] == ["1.0"]

    await pg.job_cancel("cancelled", T0 + 1)
    again = await pg.job_claim(ClaimParams(("q",), "w", 5, LEASE, T0 + 10))
    assert [j.id for j in again.jobs] == ["timeout"]
    assert set(waits_of(pg.schema)) == {"parked"}

    assert await pg.job_purge(PurgeParams(T0 + 10**6, 10, 0, 0, None, None)) == 2
    assert await pg.job_remove(["parked"]) == [RemoveAnswer.REMOVED]
    assert waits_of(pg.schema) == {}
    assert steps_of(pg.schema) == [("run-timeout", "s1")]
    # Published now, the event wakes nothing: no wait is left to match it.
    assert await pg.event_publish(EventRecord("e", "go", "{}", T0 + 20, T0 + 10**9)) == 0


async def test_a_step_put_is_one_statement_and_a_step_list_one_read(pg: PgDriver) -> None:
    await pg.job_enqueue(new_job("j", "j"))
    held = await claim_one(pg, "j")
    seen: list[str] = []
    real = pg._execute

    async def spy(conn: Any, text: str, args: Any, **kw: Any) -> Any:
        seen.append(pg._name_of(text))
        return await real(conn, text, args, **kw)

    pg._execute = spy  # type: ignore[method-assign]
    puts = [StepPut(held.fence, f"s{i}", str(i), T0 + i) for i in range(3)]
    assert await pg.step_put(puts) == [True] * 3
    assert seen == ["STEP_PUT"]
    seen.clear()
    assert [s.name for s in await pg.step_list(held.run_id)] == ["s0", "s1", "s2"]
    assert seen == ["STEP_LIST"]


async def test_a_publish_reads_the_waits_index(pg: PgDriver) -> None:
    """Among thousands of rows, few of them waiting, the publish's read of the waiting rows is
    a scan of `jobs_waits`, and a name's events are read through `events_by_name`."""
    s = sql.Identifier(pg.schema)
    with admin() as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.jobs (id, run_id, name, queue, idempotency_key, input_json,"
                " state, priority, attempt, max_attempts, claims, run_at_ms, created_at_ms,"
                " wait_event, wait_match_json, wait_since_ms)"
                " SELECT 'j' || i, 'r' || i, 'n', 'q', 'k' || i, '{{}}',"
                " CASE WHEN i % 100 = 0 THEN 'parked' ELSE 'ready' END, 0, 0, 1, 0, 0, 0,"
                " CASE WHEN i % 100 = 0 THEN 'ev' || (i % 700) END,"
                " CASE WHEN i % 100 = 0 THEN '{{}}' END,"
                " CASE WHEN i % 100 = 0 THEN 0 END"
                " FROM generate_series(1, 20000) AS i"
            ).format(s)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.events SELECT 'e' || i, 'ev' || (i % 50), '{{}}', i, i + 1000000"
                " FROM generate_series(1, 20000) AS i"
            ).format(s)
        )
        conn.execute(sql.SQL("ANALYZE {}.jobs").format(s))
        conn.execute(sql.SQL("ANALYZE {}.events").format(s))

    async def plan(name: str, values: dict[str, Any]) -> str:
        stmt = pg._q[name]
        async with pg._conn() as conn:
            cur = await conn.execute("EXPLAIN " + stmt.text, stmt.args(values))
            return "\n".join(r[0] for r in await cur.fetchall())

    event = {
        "id": "new",
        "name": "ev100",
        "data_json": "{}",
        "published_at_ms": 5,
        "expires_at_ms": 10**9,
        "tenant_id": "t1",
        "tenant": "t1",
    }
    # An event of a tenant reads that tenant's waits of its name; one for every tenant, the
    # name's.
    for statement in ("EVENT_PUBLISH", "EVENT_PUBLISH_ALL_TENANTS"):
        publish = await plan(statement, event)
        assert "jobs_waits" in publish, publish
    find = await plan(
        "EVENT_FIND",
        {
            "name": "ev7",
            "after_ms": 0,
            "after_id": "",
            "until_ms": 10**6,
            "tenant": "t1",
            "now_ms": 0,
            "limit": 100,
        },
    )
    assert "events_by_name" in find, find
    purge = await plan("EVENT_PURGE", {"now_ms": 5, "limit": 100})
    assert "events_expiry" in purge, purge
