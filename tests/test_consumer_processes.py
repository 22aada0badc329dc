"""`consumer()` under SIGKILL, with real `ujobs worker` processes on real Postgres and Redis: the
worker running a consumer's turns is killed (`kill -9`) in the middle of one, a standby takes the
run over, and what was handled is read from what really ran.

- Postgres: a table source. The handler writes each record it is given to `seen` on the turn's
  own connection, so its writes and the cursor share one transaction. The first process to get
  the held record holds (sleeps) there, inside the transaction, until the test kills it: that
  transaction goes with it. Every record shows in `seen` exactly once.
- Redis: a stream source; the handler notes each record in `seen` (Postgres, committed on a
  connection of its own) and holds after noting the held one. The killed run never stored its
  cursor nor acknowledged the batch: its successor takes the group's pending entries back.
  Every record shows; the ones of the batch cut short twice (the documented at-least-once
  batch), no other record twice. A turn's notes commit before its cursor is stored, so the
  cursor is read once it names the stream's last entry, not as soon as every record shows.

A killed worker's claim lapses (2 s), and so does the consumer's lease (2 s); the nudge job's
wake makes an idle standby claim at once (as in tests/test_factories_processes.py).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_pg.urls import libpq_url, sqlalchemy_url
from tests.core.support import ledger_worker, reaping
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema
from tests.redis.conftest import REDIS_URL

RECORDS = 120
BATCH = 10
#: The record whose turn the first kill lands in (the fifth batch).
HOLD = 45
LEASE_S = "2"
WORKERS = 2
HOLD_FILE = "held"

APP = f"""
import asyncio, os, time
from pathlib import Path
import psycopg
import sqlalchemy as sa
from psycopg import sql
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import create_async_engine
from jobs_core import job
from jobs_core.factories import consumer
from jobs_core.factories.consumers import stream, table

SCHEMA = os.environ["DATA_SCHEMA"]
HERE = Path(__file__).parent
meta = sa.MetaData(schema=SCHEMA)
events = sa.Table("events", meta, sa.Column("id", sa.Integer, primary_key=True))
seen = sa.Table(
    "seen", meta, sa.Column("key", sa.Integer), sa.Column("pid", sa.Integer)
)


def first_here():
    try:
        (HERE / "{HOLD_FILE}").open("x").close()
        return True
    except FileExistsError:
        return False


async def into_the_turn(rows, turn):
    await turn.conn.execute(seen.insert(), [{{"key": r.id, "pid": os.getpid()}} for r in rows])
    if any(r.id == {HOLD} for r in rows) and first_here():
        await asyncio.sleep(3600)  # inside the turn's transaction, until killed


def noted(records, turn):
    keys = [int(fields["n"]) for _, fields in records]
    with psycopg.connect(os.environ["DATA_URL"]) as conn, conn.cursor() as cur:
        cur.executemany(
            sql.SQL("INSERT INTO {{}} (key, pid) VALUES (%s, %s)").format(
                sql.Identifier(SCHEMA, "seen")
            ),
            [(k, os.getpid()) for k in keys],
        )
    if {HOLD} in keys and first_here():
        time.sleep(3600)  # handled and committed, its cursor not stored, until killed


if os.environ["UJOBS_DRIVER"].startswith("redis"):
    client = Redis.from_url(os.environ["STREAM_URL"], decode_responses=True)
    feed = consumer(
        "feed", source=stream(client, os.environ["STREAM"]), handle=noted, tenant="none",
        batch={BATCH}, run_for=120, idle=0.05, lease={LEASE_S},
    )
else:
    engine = create_async_engine(os.environ["DATA_SA_URL"], pool_size=2)
    feed = consumer(
        "feed", source=table(sa.select(events), engine=engine, key="id"),
        handle=into_the_turn, tenant="none", batch={BATCH}, run_for=120, idle=0.05,
        lease={LEASE_S},
    )
feed_job = feed.job


@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def nudge(input, ctx):
    return None
"""


def stand_in(name: str) -> JobHandle:
    async def body(i: Any, ctx: Any) -> None:
        return None

    handle: JobHandle = job(
        body,
        name=name,
        tenant="none",
        idempotency_key=lambda i: str(i.get("n", "one")),
        registry=JobRegistry(),
    )
    return handle


NUDGE = stand_in("nudge")
FEED = stand_in("consumer:feed")


@pytest.fixture
def schema() -> Iterator[str]:
    name = fresh_schema()
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL("CREATE TABLE {} (key integer NOT NULL, pid integer NOT NULL)").format(
                sql.Identifier(name, "seen")
            )
        )
        events = sql.Identifier(name, "events")
        conn.execute(sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY)").format(events))
        conn.execute(
            sql.SQL("INSERT INTO {} SELECT generate_series(1, %s)").format(events), (RECORDS,)
        )
    try:
        yield name
    finally:
        drop_schema(name)


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


@pytest.fixture
async def stream_key() -> AsyncIterator[str]:
    from redis.asyncio import Redis

    key = f"ujobs-test-feed-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(REDIS_URL, decode_responses=True)
    for n in range(1, RECORDS + 1):
        await client.xadd(key, {"n": str(n)})
    try:
        yield key
    finally:
        await client.delete(key)
        await client.aclose()


async def seen_keys(schema: str) -> list[tuple[int, int]]:
    async with await psycopg.AsyncConnection.connect(libpq_url(PG_URL)) as conn:
        cur = await conn.execute(
            sql.SQL("SELECT key, pid FROM {}").format(sql.Identifier(schema, "seen"))
        )
        return [(int(k), int(p)) for k, p in await cur.fetchall()]


async def last_entry_id(key: str) -> str:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        [(last, _)] = await client.xrevrange(key, count=1)
    finally:
        await client.aclose()
    return str(last)


async def until(check: Any, what: str, workers: list[subprocess.Popen[str]]) -> None:
    deadline = time.monotonic() + 60
    while not await check():
        assert time.monotonic() < deadline, f"never: {what}"
        await asyncio.sleep(0.02)


async def test_a_consumer_killed_mid_turn_loses_nothing(
    store_url: str,
    schema: str,
    stream_key: str,
    tmp_path: Path,
    workers: list[subprocess.Popen[str]],
) -> None:
    """SIGKILL inside a turn: a standby goes on from the stored cursor. Postgres (a table, the
    handler's writes in the turn's transaction): every record exactly once. Redis (a stream):
    every record, only the batch cut short twice."""
    on_redis = store_url.startswith("redis")
    (tmp_path / "consumerapp.py").write_text(APP, encoding="utf-8")
    driver: JobDriver = driver_from_url(store_url)
    async with driver:
        job_id = (await Jobs(driver).enqueue(FEED, {})).id
        for _ in range(WORKERS):
            workers.append(
                ledger_worker(
                    tmp_path,
                    "consumerapp",
                    store_url,
                    "--lease",
                    LEASE_S,
                    DATA_SCHEMA=schema,
                    DATA_URL=libpq_url(PG_URL),
                    DATA_SA_URL=sqlalchemy_url(PG_URL),
                    STREAM_URL=REDIS_URL,
                    STREAM=stream_key,
                )
            )

        async def held() -> bool:
            return (tmp_path / HOLD_FILE).exists()

        began = time.monotonic()
        await until(held, "a turn reached the held record", workers)
        held_s = time.monotonic() - began
        row = (await driver.job_get_many([job_id]))[job_id]
        assert row.state is JobState.RUNNING and row.claimed_by is not None
        victim_pid = int(row.claimed_by.split(":")[-2])
        victim = next(w for w in workers if w.pid == victim_pid)
        # The held turn: Postgres holds inside the transaction (nothing of it committed yet);
        # Redis holds once the batch was noted. Either way its cursor is not stored.
        await asyncio.sleep(0.2)
        before = await driver.consumer_cursor_get("feed", None)
        assert before is not None and before.records == HOLD // BATCH * BATCH, before
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=60)
        nudges = 0

        async def all_seen() -> bool:
            nonlocal nudges
            keys = {k for k, _ in await seen_keys(schema)}
            if len(keys) == RECORDS:
                return True
            now = (await driver.job_get_many([job_id]))[job_id]
            lapsed = now.lease_until_ms is not None and now.lease_until_ms < time.time() * 1000
            if now.claims == row.claims and lapsed:
                nudges += 1
                await Jobs(driver).enqueue(NUDGE, {"n": nudges})
                await asyncio.sleep(0.3)
            return False

        await until(all_seen, "every record handled after the kill", workers)
        print(f"\n{store_url.split(':')[0]}: held at {held_s:.1f}s, all seen at", end=" ")
        print(f"{time.monotonic() - began:.1f}s ({nudges} nudges)")
        # The last record's key (a table), or its entry id (a stream).
        end = json.dumps(await last_entry_id(stream_key)) if on_redis else str(RECORDS)

        async def stored_to_the_end() -> bool:
            # A stream's handler notes its batch (committed on its own connection) before the
            # turn stores the cursor: the last batch shows in `seen` a moment before its cursor
            # does (a loaded machine stretches that moment). A table's turn commits both at once.
            now = await driver.consumer_cursor_get("feed", None)
            return now is not None and now.cursor_json == end

        await until(stored_to_the_end, "the last turn's cursor stored", workers)
        entry = await driver.consumer_cursor_get("feed", None)
        # A drain would wait for the run's turns like any body (up to --drain-timeout): what
        # ran is read already, so the rest of the fleet goes as the victim went.
        for w in workers:
            if w.poll() is None:
                w.send_signal(signal.SIGKILL)
                w.communicate(timeout=60)

    seen = await seen_keys(schema)
    counts = Counter(k for k, _ in seen)
    assert set(counts) == set(range(1, RECORDS + 1))
    held_batch = set(range(HOLD // BATCH * BATCH + 1, (HOLD // BATCH + 1) * BATCH + 1))
    twice = {k for k, n in counts.items() if n > 1}
    if on_redis:
        # The batch the kill cut short, noted before the kill and again after; nothing else.
        assert twice == held_batch, sorted(twice)
        assert max(counts.values()) == 2
        assert {k for k, p in seen if p == victim_pid and k in held_batch} == held_batch
    else:
        # The killed turn's writes went with its transaction: each record exactly once.
        assert twice == set(), sorted(twice)
        assert not any(p == victim_pid and k in held_batch for k, p in seen)
    # Each batch counted once (the one cut short too: the killed run never stored it), and
    # nothing left behind the last entry.
    assert entry is not None and entry.records == RECORDS and entry.lag == 0, entry
    assert entry.holder != row.claimed_by
