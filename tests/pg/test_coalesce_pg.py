"""A worker's ack and its next claim, asked within a loop turn or two of each other, go to the
server as one pipeline and one transaction (`PgDriver._coalesced`); a failure of either makes
each run again alone, so neither sinks nor hides the other."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobs_core.errors import JobsError
from jobs_core.records import Ack, ClaimedJob, ClaimParams, Fence
from jobs_pg import PgDriver
from tests.pg.conftest import admin
from tests.pg.test_driver import T0, job


def _claim(limit: int) -> ClaimParams:
    return ClaimParams(
        queues=("q",), worker_id="w", limit=limit, lease_ms=60_000, now_ms=T0 + 1_000
    )


def _ack(j: ClaimedJob) -> Ack:
    return Ack(Fence(j.id, j.claims, "w"), now_ms=T0 + 2_000)


def _xmins(schema: str, ids: list[str]) -> set[str]:
    with admin() as conn:
        rows = conn.execute(
            f'SELECT xmin::text FROM "{schema}".jobs WHERE id = ANY(%s)', (ids,)
        ).fetchall()
    return {r[0] for r in rows}


def _states(schema: str) -> dict[str, str]:
    with admin() as conn:
        rows = conn.execute(f'SELECT id, state FROM "{schema}".jobs').fetchall()
    return {r[0]: r[1] for r in rows}


async def test_an_ack_and_a_claim_asked_together_commit_in_one_transaction(pg: PgDriver) -> None:
    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    landed, second = await asyncio.gather(
        pg.job_ack([_ack(j) for j in first]), pg.job_claim(_claim(2))
    )
    assert landed == [True, True]
    assert len(second.jobs) == 2
    ids = [j.id for j in (*first, *second.jobs)]
    # One transaction wrote the acked rows and the claimed ones.
    assert len(_xmins(pg.schema, ids)) == 1
    states = _states(pg.schema)
    assert {states[j.id] for j in first} == {"completed"}
    assert {states[j.id] for j in second.jobs} == {"running"}


async def test_a_claim_the_server_refuses_does_not_sink_the_ack_asked_with_it(
    pg: PgDriver,
) -> None:
    await pg.job_enqueue_many([job(i) for i in range(4)])
    first = (await pg.job_claim(_claim(2))).jobs
    # Past the contract's checks (`job_claim` would refuse it): the server refuses its lease's
    # end, past `bigint`.
    bad = ClaimParams(queues=("q",), worker_id="w", limit=2, lease_ms=2**63, now_ms=T0 + 1_000)
    landed, refused = await asyncio.gather(
        pg._job_ack([_ack(j) for j in first]), pg._job_claim(bad), return_exceptions=True
    )
    assert isinstance(refused, JobsError)
    assert landed == [True, True]
    states = _states(pg.schema)
    assert {states[j.id] for j in first} == {"completed"}
    assert sorted(states.values()) == ["completed", "completed", "ready", "ready"]


async def test_a_claim_cancelled_before_it_went_out_claims_nothing(pg: PgDriver) -> None:
    await pg.job_enqueue_many([job(i) for i in range(2)])
    task = asyncio.create_task(pg.job_claim(_claim(2)))
    await asyncio.sleep(0)  # asked, still gathering company
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(5):
        await asyncio.sleep(0)
    assert set(_states(pg.schema).values()) == {"ready"}
    assert len((await pg.job_claim(_claim(2))).jobs) == 2


async def test_a_lone_claim_and_a_lone_ack_run_in_their_callers_task(pg: PgDriver) -> None:
    await pg.job_enqueue_many([job(0)])
    loop = asyncio.get_running_loop()
    made: list[object] = []
    factory = loop.get_task_factory()

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        made.append(coro)
        return asyncio.Task(coro, loop=loop, **kw)

    # A trickle's claim or ack has no company: no task, answer future or gather of its own.
    loop.set_task_factory(counting)
    try:
        claimed = (await pg.job_claim(_claim(1))).jobs
        landed = await pg.job_ack([_ack(claimed[0])])
    finally:
        loop.set_task_factory(factory)
    assert (len(claimed), landed) == (1, [True])
    assert made == []
