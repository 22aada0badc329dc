"""The task family on real Postgres, where the parity suite cannot look: fires racing from four
drivers (lined up behind a session holding the mark, and running free), a fire whose key's
holder or id is committed by another session while it waits, arms racing on the same new names,
and a 'task' pause next to the claim."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from psycopg import sql

from jobs_core.records import (
    Ack,
    ClaimParams,
    EnqueueResult,
    NewJob,
    Pause,
    TaskFire,
    TaskMark,
)
from jobs_pg import PgDriver
from tests.core.support import T0
from tests.pg.conftest import admin
from tests.pg.support import locker, named_drivers, sessions_waiting

TASK = "nightly"


def job(job_id: str, key: str | None = None, *, name: str = TASK) -> NewJob:
    return NewJob(job_id, f"run-{job_id}", name, "q", None, key or job_id, "{}", 0, T0, 1, T0)


def fire(expect_ms: int, j: NewJob, *, step: int = 60_000) -> TaskFire:
    return TaskFire(TASK, expect_ms, expect_ms + step, expect_ms + step, j, T0)


def rows(schema: str, table: str, columns: str = "*") -> list[tuple[Any, ...]]:
    with admin() as conn:
        return conn.execute(
            sql.SQL("SELECT {} FROM {}.{} ORDER BY 1").format(
                sql.SQL(columns), sql.Identifier(schema), sql.Identifier(table)
            )
        ).fetchall()


def insert_job_sql(schema: str) -> sql.Composed:
    """A ready job row as another enqueuer would store it: (id, name, idempotency_key)."""
    return sql.SQL(
        "INSERT INTO {}.jobs (id, run_id, name, queue, idempotency_key, input_json, state,"
        " priority, attempt, max_attempts, claims, run_at_ms, created_at_ms)"
        " VALUES (%s, %s, %s, 'q', %s, '{{}}', 'ready', 0, 0, 1, 0, %s, %s)"
    ).format(sql.Identifier(schema))


async def test_fires_lined_up_behind_the_mark_land_once(pg_schema: str) -> None:
    """Four drivers fire the same occurrence (same expect, their own job ids and keys) while a
    session holds the mark's row: all four read the old watermark in their snapshot and wait.
    Once it lets go, exactly one lands: one job row, and the mark names it. Ten rounds."""
    async with named_drivers(pg_schema, 4, pool_size=2) as drivers:
        (mark,) = await drivers[0].task_arm([TASK], T0)
        expect = mark.watermark_ms
        for r in range(10):
            other = await locker()
            try:
                await other.execute(
                    sql.SQL("SELECT 1 FROM {}.task_marks WHERE name = %s FOR UPDATE").format(
                        sql.Identifier(pg_schema)
                    ),
                    (TASK,),
                )
                calls = [
                    asyncio.create_task(d.task_fire(fire(expect, job(f"r{r}-d{i}"))))
                    for i, d in enumerate(drivers)
                ]
                await sessions_waiting(pg_schema, ("transactionid", "tuple"), 4)
                await other.commit()
            finally:
                await other.close()
            answers = await asyncio.gather(*calls)
            landed = [a for a in answers if a.fired]
            assert len(landed) == 1, answers
            (won,) = landed
            assert won.enqueued is not None and not won.enqueued.deduped
            new = TaskMark(TASK, expect + 60_000, expect + 60_000, won.enqueued.id, T0)
            assert won.mark == new
            for a in answers:
                if not a.fired:
                    # The refused see the mark as the winner left it, not their snapshot's.
                    assert a.mark == new
            ids = [i for (i,) in rows(pg_schema, "jobs", "id") if i.startswith(f"r{r}-")]
            assert ids == [won.enqueued.id]
            assert await drivers[1].task_marks([TASK]) == {TASK: new}
            expect = new.watermark_ms
        assert len(rows(pg_schema, "jobs")) == 10


async def test_free_running_fires_from_four_drivers_land_each_occurrence_once(
    pg_schema: str,
) -> None:
    """Four drivers each fire 40 times from whatever watermark they last saw (never re-reading
    first), so many of their fires are stale: every occurrence lands at most once, the landed
    fires chain watermark to watermark from the armed one to the stored one, and every job row
    is a landed fire's."""
    seed = random.randrange(2**32)
    print(f"task race seed {seed}")
    rng = random.Random(seed)
    landed: list[tuple[int, int, str]] = []
    async with named_drivers(pg_schema, 4, pool_size=2) as drivers:
        (mark,) = await drivers[0].task_arm([TASK], T0)

        async def scheduler(i: int, d: PgDriver) -> None:
            seen = mark.watermark_ms
            for n in range(40):
                a = await d.task_fire(fire(seen, job(f"d{i}-{n}"), step=rng.randint(1, 3)))
                if a.fired:
                    assert a.enqueued is not None and a.mark is not None
                    landed.append((seen, a.mark.watermark_ms, a.enqueued.id))
                assert a.mark is not None
                seen = a.mark.watermark_ms
                if rng.random() < 0.3:
                    await asyncio.sleep(rng.random() * 0.002)

        await asyncio.gather(*(scheduler(i, d) for i, d in enumerate(drivers)))
        landed.sort()
        expects = [e for e, _, _ in landed]
        assert len(expects) == len(set(expects)), "an occurrence landed twice"
        # Each landed fire moved the watermark on from the one the previous one left.
        chain = [mark.watermark_ms] + [w for _, w, _ in landed]
        assert expects == chain[:-1]
        final = (await drivers[0].task_marks([TASK]))[TASK]
        assert (final.watermark_ms, final.fired_job_id) == (chain[-1], landed[-1][2])
        assert {i for (i,) in rows(pg_schema, "jobs", "id")} == {i for _, _, i in landed}
        # A driver's fire is refused only after another landed since its last answer.
        assert len(landed) >= 40


async def test_a_refused_fire_writes_nothing(pg_schema: str) -> None:
    """A stale expect, and a task never armed: no job row, no mark changed or made, no wake."""
    async with named_drivers(pg_schema, 1, pool_size=2) as (d,):
        assert (await d.task_fire(fire(T0, job("ghost")))).mark is None
        assert rows(pg_schema, "task_marks") == []
        (mark,) = await d.task_arm([TASK], T0)
        before = rows(pg_schema, "task_marks")
        for stale in (T0 - 1, T0 + 1, 0):
            a = await d.task_fire(fire(stale, job(f"stale-{stale}")))
            assert not a.fired and a.enqueued is None
            assert a.mark == mark
        assert rows(pg_schema, "jobs") == []
        assert rows(pg_schema, "wakes") == []
        assert rows(pg_schema, "task_marks") == before


async def test_a_fire_deduped_by_a_live_key_moves_the_watermark_to_the_holder(
    pg_schema: str,
) -> None:
    """The occurrence's key is held by a live row: the fire lands (the watermark moves) and
    records the holder's id, as the enqueue answers it; no row of the fire's id is written.
    Deduped by an id naming a finished row, likewise."""
    async with named_drivers(pg_schema, 1, pool_size=2) as (d,):
        assert await d.job_enqueue(job("holder", "occ-1")) == EnqueueResult("holder", False)
        (mark,) = await d.task_arm([TASK], T0)
        a = await d.task_fire(fire(mark.watermark_ms, job("fresh", "occ-1")))
        assert a.enqueued == EnqueueResult("holder", deduped=True)
        assert a.mark == TaskMark(TASK, T0 + 60_000, T0 + 60_000, "holder", T0)
        assert [i for (i,) in rows(pg_schema, "jobs", "id")] == ["holder"]
        # By id: the holder finishes, and a fire reuses its id under another key.
        claimed = await d.job_claim(ClaimParams(("q",), "w", 1, 60_000, T0))
        (c,) = claimed.jobs
        assert await d.job_ack([Ack(c.fence, T0, "null")]) == [True]
        b = await d.task_fire(fire(T0 + 60_000, job("holder", "occ-2")))
        assert b.enqueued == EnqueueResult("holder", deduped=True)
        assert b.mark is not None and b.mark.fired_job_id == "holder"
        assert b.mark.watermark_ms == T0 + 120_000
        assert rows(pg_schema, "jobs", "id, state") == [("holder", "completed")]


async def test_a_holder_committed_while_the_fire_waits_is_the_one_recorded(
    pg_schema: str,
) -> None:
    """Another session inserts the live row of the occurrence's key and commits only once the
    fire waits on it: the fire's snapshot cannot see that holder, so its first run writes
    nothing; the run again lands and names it (never a NULL job id on a moved mark)."""
    async with named_drivers(pg_schema, 1, pool_size=2) as (d,):
        (mark,) = await d.task_arm([TASK], T0)
        other = await locker()
        try:
            await other.execute(insert_job_sql(pg_schema), ("theirs", "r", TASK, "occ", T0, T0))
            call = asyncio.create_task(d.task_fire(fire(mark.watermark_ms, job("ours", "occ"))))
            await sessions_waiting(pg_schema, ("transactionid", "tuple"))
            await other.commit()
        finally:
            await other.close()
        a = await call
        assert a.enqueued == EnqueueResult("theirs", deduped=True)
        assert a.mark is not None and a.mark.fired_job_id == "theirs"
        assert [i for (i,) in rows(pg_schema, "jobs", "id")] == ["theirs"]


async def test_an_id_committed_while_the_fire_waits_dedupes_it(pg_schema: str) -> None:
    """Another session inserts a row of the fire's very id (another key) and commits while the
    fire waits on it: the fire's insert fails on the id, nothing of it stays, and the run again
    answers the id deduped, the mark moved and naming it."""
    async with named_drivers(pg_schema, 1, pool_size=2) as (d,):
        (mark,) = await d.task_arm([TASK], T0)
        other = await locker()
        try:
            await other.execute(insert_job_sql(pg_schema), ("same", "r", "other", "k", T0, T0))
            call = asyncio.create_task(d.task_fire(fire(mark.watermark_ms, job("same", "occ"))))
            await sessions_waiting(pg_schema, ("transactionid", "tuple"))
            await other.commit()
        finally:
            await other.close()
        a = await call
        assert a.enqueued == EnqueueResult("same", deduped=True)
        assert a.mark == TaskMark(TASK, T0 + 60_000, T0 + 60_000, "same", T0)
        assert rows(pg_schema, "jobs", "id, name") == [("same", "other")]


async def test_a_landed_fire_wakes_its_queue_as_an_enqueue_does(pg_schema: str) -> None:
    """The fire's job is due: the queue's wake slot is recorded (and so NOTIFY sent at commit),
    exactly the write an enqueue makes."""
    async with named_drivers(pg_schema, 1, pool_size=2) as (d,):
        (mark,) = await d.task_arm([TASK], T0)
        assert (await d.task_fire(fire(mark.watermark_ms, job("due")))).fired
        assert rows(pg_schema, "wakes", "queue") == [("q",)]


async def test_racing_arms_of_the_same_new_names_store_one_mark_each(pg_schema: str) -> None:
    """Four drivers arm the same 60 new names, each in its own order and at its own `now_ms`,
    a few rounds: one mark per name, and every caller answers the stored marks, in its order.
    Then a name a session inserts and commits while the arms wait on it: they answer its mark."""
    names = [f"task-{i:02d}" for i in range(60)]
    rng = random.Random(7)
    async with named_drivers(pg_schema, 4, pool_size=2) as drivers:
        for r in range(3):
            batch = [f"{n}-r{r}" for n in names]
            orders = [rng.sample(batch, len(batch)) for _ in drivers]
            answers = await asyncio.gather(
                *(
                    d.task_arm(order, T0 + 1000 * r + i)
                    for i, (d, order) in enumerate(zip(drivers, orders, strict=True))
                )
            )
            stored = await drivers[0].task_marks(batch)
            assert len(stored) == len(batch)
            for order, got in zip(orders, answers, strict=True):
                assert [m.name for m in got] == order
                assert got == [stored[n] for n in order]
        assert len(rows(pg_schema, "task_marks")) == 3 * len(names)

        other = await locker()
        try:
            await other.execute(
                sql.SQL("INSERT INTO {}.task_marks (name, watermark_ms) VALUES (%s, %s)").format(
                    sql.Identifier(pg_schema)
                ),
                ("late", 5),
            )
            calls = [
                asyncio.create_task(d.task_arm(["early", "late", "later"], T0 + i))
                for i, d in enumerate(drivers)
            ]
            await sessions_waiting(pg_schema, ("transactionid", "tuple"), 4)
            await other.commit()
        finally:
            await other.close()
        armed = await asyncio.gather(*calls)
        assert all(a == armed[0] for a in armed)
        assert armed[0][1] == TaskMark("late", 5)


async def test_a_task_pause_round_trips_and_does_not_pause_the_jobs_of_that_name(
    pg_schema: str,
) -> None:
    async with named_drivers(pg_schema, 1, pool_size=2) as (d,):
        task = Pause("task", TASK)
        assert await d.pause_add(task) is True
        assert await d.pause_add(task) is False
        assert await d.pause_add(Pause("name", "other")) is True
        assert sorted(await d.pause_list(), key=lambda p: (p.kind, p.value)) == [
            Pause("name", "other"),
            Pause("task", TASK),
        ]
        await d.job_enqueue(job("a"))
        await d.job_enqueue(job("b", name="other"))
        got = await d.job_claim(ClaimParams(("q",), "w", 5, 60_000, T0))
        assert [j.id for j in got.jobs] == ["a"]
        assert await d.pause_remove(task) is True
        assert await d.pause_remove(task) is False
        assert await d.pause_list() == [Pause("name", "other")]
