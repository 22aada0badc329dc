"""Limits in bytes, the same on every driver, and an `enqueue_many` that is all or nothing.

A record at the contract's limits (200-byte id, names, queue and tenant of 4-byte characters,
a 1,024-byte non-ASCII key, 1 MiB of JSON) is accepted and read back unchanged by Postgres,
Redis and memory; one byte more is refused by all three, before anything is written. A refused
`enqueue_many` leaves nothing behind: on every driver the checks run before the first write,
and on Postgres every chunk of one call is one transaction, so even the server's own refusal in
a late chunk rolls the earlier chunks back (and sends no wake).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest

from jobs_core.driver import MAX_KEY_BYTES, MAX_NAME_BYTES, JobDriver
from jobs_core.errors import JobsError
from jobs_core.jsonform import MAX_JSON_BYTES
from jobs_core.records import Ack, ClaimParams, EnqueueResult, NewJob
from jobs_memory import MemoryDriver
from jobs_pg import PgDriver
from tests.core.support import T0, new_job
from tests.pg.conftest import PG_URL, fresh_driver
from tests.redis.conftest import REDIS_URL, _real

DRIVERS = ("memory", "postgres", "redis")
#: The fields with a byte limit the tests push one byte past.
FIELDS = ("id", "name", "queue", "tenant_id", "idempotency_key", "input_json")


def wide(n_bytes: int, seed: int) -> str:
    """Random 4-byte characters filling exactly `n_bytes` (a multiple of 4): incompressible."""
    assert n_bytes % 4 == 0
    rnd = random.Random(seed)
    return "".join(chr(rnd.randrange(0x20000, 0x2A6DF)) for _ in range(n_bytes // 4))


def json_of(n_bytes: int, seed: int) -> str:
    """A JSON string literal of exactly `n_bytes` UTF-8 bytes, mostly 4-byte characters."""
    body = n_bytes - 2
    return '"' + wide(body - body % 4, seed) + "a" * (body % 4) + '"'


def at_limits(tag: str) -> NewJob:
    return NewJob(
        id=tag + wide(MAX_NAME_BYTES - 4, 1),
        run_id=wide(MAX_NAME_BYTES, 2),
        name=wide(MAX_NAME_BYTES, 3),
        queue=wide(MAX_NAME_BYTES, 4),
        tenant_id=wide(MAX_NAME_BYTES, 5),
        idempotency_key=tag + wide(MAX_KEY_BYTES - 4, 6),
        input_json=json_of(MAX_JSON_BYTES, 7),
        priority=0,
        run_at_ms=T0,
        max_attempts=3,
        created_at_ms=T0,
        enqueued_by=wide(MAX_NAME_BYTES, 8),
    )


def small(i: int, *, key: str | None = None, tenant: str | None = None) -> NewJob:
    k = key if key is not None else f"k{i}"
    return new_job(f"s{i:05}", k, run_id=f"r{i}", tenant=tenant, max_attempts=3)


@contextlib.asynccontextmanager
async def driver_on(kind: str) -> AsyncIterator[JobDriver]:
    if kind == "memory":
        async with MemoryDriver() as mem:
            yield mem
    elif kind == "postgres":
        async with fresh_driver() as pg:
            yield pg
    else:
        async with _real(REDIS_URL) as rd:
            yield rd


@pytest.fixture(params=DRIVERS)
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with driver_on(request.param) as d:
        yield d


async def test_a_record_at_the_limits_round_trips_and_one_byte_more_is_refused(
    driver: JobDriver,
) -> None:
    one, many = at_limits("\U0001f600"), at_limits("\U0001f601")
    assert await driver.job_enqueue(one) == EnqueueResult(one.id, deduped=False)
    assert await driver.job_enqueue_many([many]) == [EnqueueResult(many.id, deduped=False)]
    got = await driver.job_get_many([one.id, many.id])
    for rec in (one, many):
        row = got[rec.id]
        stored = (row.id, row.run_id, row.name, row.queue, row.tenant_id, row.idempotency_key)
        assert stored == (
            rec.id,
            rec.run_id,
            rec.name,
            rec.queue,
            rec.tenant_id,
            rec.idempotency_key,
        )
        assert row.input_json == rec.input_json
        assert row.enqueued_by == rec.enqueued_by
    claimed = await driver.job_claim(ClaimParams((one.queue,), one.enqueued_by or "w", 2, 1000, T0))
    assert sorted(j.id for j in claimed.jobs) == sorted([one.id, many.id])
    result = json_of(MAX_JSON_BYTES, 9)
    assert await driver.job_ack([Ack(j.fence, T0 + 1, result) for j in claimed.jobs]) == [True] * 2
    done = await driver.job_get_many([one.id])
    assert done[one.id].result_json == result
    for field in FIELDS:
        with pytest.raises(JobsError) as err:
            await driver.job_enqueue(past(field))
        assert field in str(err.value)


def past(field: str) -> NewJob:
    rec = at_limits("\U0001f602")
    over = {
        "id": rec.id + "a",
        "name": rec.name + "a",
        "queue": rec.queue + "a",
        "tenant_id": (rec.tenant_id or "") + "a",
        "idempotency_key": rec.idempotency_key + "a",
        "input_json": rec.input_json[:-1] + 'a"',
    }
    fields: dict[str, Any] = {f: getattr(rec, f) for f in NewJob.__dataclass_fields__}
    fields[field] = over[field]
    return NewJob(**fields)


@pytest.mark.parametrize("field", FIELDS)
async def test_one_byte_past_a_limit_is_refused_before_anything_is_written(
    driver: JobDriver, field: str
) -> None:
    bad = past(field)
    batch = [small(i) for i in range(2_500)]
    batch[2_400] = bad
    for call in (lambda: driver.job_enqueue(bad), lambda: driver.job_enqueue_many(batch)):
        with pytest.raises(JobsError) as err:
            await call()
        assert err.value.code in ("X_JOB_RECORD_INVALID", "X_JOB_INPUT_INVALID"), str(err.value)
        assert field in str(err.value)
    assert await driver.job_get_many([b.id for b in batch if b is not bad]) == {}
    assert await driver.queue_demand(["q"], T0) == {"q": 0}


async def test_a_key_past_the_index_limit_is_refused_by_every_driver_alike(
    driver: JobDriver,
) -> None:
    # The record: 512 three-byte characters of key with a 200-character tenant passed a
    # limit in characters, was taken by memory and Redis, and broke Postgres's index after the
    # first chunks of the batch had been committed.
    bad = small(2_400, key="\u4e2d" * 512, tenant="\u6587" * 200)
    batch = [small(i) for i in range(2_500)]
    batch[2_400] = bad
    with pytest.raises(JobsError) as err:
        await driver.job_enqueue_many(batch)
    assert err.value.code == "X_JOB_RECORD_INVALID"
    assert await driver.job_get_many([b.id for b in batch]) == {}


def incompressible(n: int, seed: int) -> str:
    rnd = random.Random(seed)
    return "".join(chr(rnd.randrange(0x4E00, 0x9FFF)) for _ in range(n))


async def test_a_server_refusal_in_a_late_chunk_rolls_the_whole_batch_back() -> None:
    async with fresh_driver() as pg:
        assert isinstance(pg, PgDriver)
        listener = await psycopg.AsyncConnection.connect(
            PG_URL.replace("+psycopg", ""), autocommit=True
        )
        try:
            await listener.execute(f'LISTEN "{pg.channel}"')
            batch = [small(i) for i in range(2_500)]
            # Past the contract (the driver's own method trusts its caller): only the server's
            # btree limit refuses it, in the third chunk.
            batch[2_400] = small(2_400, key=incompressible(700, 1), tenant=incompressible(200, 2))
            with pytest.raises(JobsError) as err:
                await pg._job_enqueue_many(batch)
            assert err.value.code == "X_DRIVER_LIMIT", str(err.value)
            assert await pg.job_get_many([b.id for b in batch]) == {}
            assert await pg.queue_demand(["q"], T0) == {"q": 0}
            assert await notifications(listener) == []

            # The same batch without that record: every record written, one wake for the queue.
            good = batch[:2_400] + batch[2_401:]
            got = await pg.job_enqueue_many(good)
            assert [r.deduped for r in got] == [False] * len(good)
            assert [r.id for r in got] == [b.id for b in good]
            assert await pg.queue_demand(["q"], T0) == {"q": len(good)}
            assert await notifications(listener) == ["q:q"]
        finally:
            await listener.close()


async def notifications(conn: psycopg.AsyncConnection[Any]) -> list[str]:
    """The payloads delivered to `conn` so far (waiting briefly for stragglers)."""
    out: list[str] = []
    async for n in conn.notifies(timeout=0.5):
        out.append(n.payload)
    return out
