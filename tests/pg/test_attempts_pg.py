"""The attempt history on Postgres: an ack stores no entry (its `completed` row spells it), and
every reader and the requeue see exactly the history the memory driver keeps — rows acked
before that form, and rows last claimed before migration 0016, included."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from jobs_core.attempts import ATTEMPT_HISTORY, AttemptOutcome, AttemptRecord
from jobs_core.driver import JobDriver
from jobs_core.records import Ack, ClaimParams, Fence, Nack, NackKind
from jobs_memory import MemoryDriver
from jobs_pg import PgDriver
from tests.pg.conftest import PG_URL, admin
from tests.pg.test_driver import T0, job


def _stored(schema: str, job_id: str) -> Any:
    with admin() as conn:
        row = conn.execute(f'SELECT attempts FROM "{schema}".jobs WHERE id = %s', (job_id,))
        return row.fetchone()


async def _run_once(d: JobDriver, at: int, *, retry: bool = False) -> None:
    (held,) = (await d.job_claim(ClaimParams(("q",), f"w{at}", 1, 60_000, at))).jobs
    if retry:
        nack = Nack(held.fence, NackKind.RETRY, at + 1, run_at_ms=at + 2, error="boom")
        assert await d.job_nack([nack]) == [True]
    else:
        assert await d.job_ack([Ack(held.fence, at + 1)]) == [True]


async def _history(d: JobDriver, job_id: str) -> tuple[AttemptRecord, ...]:
    got = (await d.job_get_many([job_id]))[job_id].attempts
    watched = (await d.job_watch([job_id]))[job_id].attempts
    assert got == watched
    return got


async def test_an_ack_stores_no_entry_and_every_reader_shows_it(pg_schema: str) -> None:
    async with PgDriver(PG_URL, schema=pg_schema) as d:
        await d.job_enqueue(replace(job(1), max_attempts=1))
        await _run_once(d, T0)
        assert _stored(pg_schema, "id-1") == (None,)
        (entry,) = await _history(d, "id-1")
        assert entry == AttemptRecord(
            attempt=1,
            claims=1,
            worker_id=f"w{T0}",
            claimed_at_ms=T0,
            settled_at_ms=T0 + 1,
            outcome=AttemptOutcome.COMPLETED,
        )


async def test_requeues_keep_the_same_history_as_the_memory_driver(pg_schema: str) -> None:
    """Past the bound: each requeue stores the entry its `completed` row spelled."""
    memory = MemoryDriver()
    async with PgDriver(PG_URL, schema=pg_schema) as pg:
        for d in (memory, pg):
            await d.job_enqueue(replace(job(1), max_attempts=2))
            at = T0
            for i in range(ATTEMPT_HISTORY + 2):
                await _run_once(d, at, retry=i % 3 == 1)
                if i % 3 == 1:
                    at += 10
                    await _run_once(d, at)
                await d.job_requeue("id-1", at + 3)
                at += 10
            await _run_once(d, at)
        expected = await _history(memory, "id-1")
        assert len(expected) == ATTEMPT_HISTORY
        assert await _history(pg, "id-1") == expected
        (stored,) = _stored(pg_schema, "id-1")
        assert len(stored) == ATTEMPT_HISTORY and stored[-1]["outcome"] == "completed"
        assert stored[-1]["claims"] == expected[-2].claims


async def test_rows_acked_in_the_older_forms_read_their_entry_once(pg_schema: str) -> None:
    async with PgDriver(PG_URL, schema=pg_schema) as d:
        await d.job_enqueue_many([job(1), job(2), job(3)])
        with admin() as conn:
            # id-2 was last claimed before migration 0016 (no claim time).
            conn.execute(
                f"""UPDATE "{pg_schema}".jobs SET state = 'running', claims = 1, attempt = 1,
                claimed_by = 'old', lease_until_ms = {T0 + 60_000} WHERE id = 'id-2'"""
            )
            # id-3 finished before migration 0016: no history, no claim time.
            conn.execute(
                f"""UPDATE "{pg_schema}".jobs SET state = 'completed', claims = 1, attempt = 1,
                claimed_by = 'old', finished_at_ms = {T0} WHERE id = 'id-3'"""
            )
        (held,) = (await d.job_claim(ClaimParams(("q",), "w", 1, 60_000, T0))).jobs
        assert held.id == "id-1"
        assert await d.job_ack([Ack(held.fence, T0 + 1)]) == [True]
        (implicit,) = await _history(d, "id-1")
        with admin() as conn:
            # id-1 as an ack before the implicit entry left it: the entry stored.
            conn.execute(
                f"""UPDATE "{pg_schema}".jobs SET attempts = jsonb_build_array(jsonb_build_object(
                'attempt', 1, 'claims', 1, 'worker', 'w', 'claimed_at', {T0},
                'settled_at', {T0 + 1}, 'outcome', 'completed')) WHERE id = 'id-1'"""
            )
        assert await _history(d, "id-1") == (implicit,)
        assert await d.job_ack([Ack(Fence("id-2", 1, "old"), T0 + 5)]) == [True]
        (stored,) = _stored(pg_schema, "id-2")
        assert [e["claimed_at"] for e in stored] == [T0 + 5]
        (entry,) = await _history(d, "id-2")
        assert (entry.worker_id, entry.claimed_at_ms, entry.settled_at_ms) == (
            "old",
            T0 + 5,
            T0 + 5,
        )
        assert await _history(d, "id-3") == ()
