"""Child jobs from a durable body, on every store that declares flows: `ctx.step.enqueue` once
per run (even across a crash between the enqueue and its record), `gather` parking the parent
on its children and waking it once, 100 children, failures typed or returned, the sync twins,
and a child acting for its parent's tenant."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import ResultFailedError, TenantMismatchError, TerminalError
from jobs_core.facade import Jobs
from jobs_core.ids import derived_id
from jobs_core.records import JobFilter, JoinPolicy, JoinState, StepPut
from jobs_core.states import JobState
from jobs_core.tenant import acting_for
from jobs_core.worker import Worker
from tests.core.flows_support import FAST, ONCE, driver, ended, listed, row, working
from tests.core.support import declare, until

__all__ = ["driver"]  # the fixture, parametrized over the kinds that declare flows


async def test_a_child_is_enqueued_once_across_a_crash_before_its_record(
    driver: JobDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first record of the child's step does not land (the claim looks lost): the attempt
    fails AFTER the child was enqueued. The retry enqueues the same derived id again — deduped
    — and records it; one child row exists, run once, linked to its parent."""
    ran: Counter[str] = Counter()

    async def child(input: Any, ctx: JobContext) -> int:
        ran[ctx.job_id] += 1
        return int(input["n"]) * 10

    ch = declare(child, name="child")

    async def parent(input: Any, ctx: JobContext) -> Any:
        kid = await ctx.step.enqueue("kid", ch, {"n": 4})
        return {"kid": kid, "result": await ctx.step.result("kid-result", kid)}

    ph = declare(parent, name="parent", retry=FAST)
    put = driver._step_put
    refused: list[str] = []

    async def first_record_lost(items: Any) -> list[bool]:
        if not refused and any(i.name == "kid" for i in items):
            refused.append("kid")
            return [False] * len(items)  # the fence looks lost: the body fails its attempt
        return await put(items)

    monkeypatch.setattr(driver, "_step_put", first_record_lost)
    client = Jobs(driver)
    done = await client.enqueue(ph, {"n": 1})
    await working(driver, [ph, ch], ended(driver, done.id))
    parent_row = await row(driver, done.id)
    assert refused == ["kid"]
    assert parent_row.state is JobState.COMPLETED and parent_row.attempt == 2
    kid_id = derived_id(parent_row.run_id, "kid")
    assert await client.result(done.id) == {"kid": kid_id, "result": 40}
    children = await listed(driver, JobFilter(parent_id=done.id))
    assert [c.id for c in children] == [kid_id]
    assert children[0].parent_id == done.id and ran == {kid_id: 1}
    await client.close()


async def test_gather_parks_once_and_wakes_once_when_the_last_child_finishes(
    driver: JobDriver,
) -> None:
    gates = [asyncio.Event() for _ in range(3)]
    starts: list[int] = []

    async def child(input: Any, ctx: JobContext) -> int:
        await gates[input["n"]].wait()
        return int(input["n"])

    ch = declare(child, name="gated")

    async def parent(input: Any, ctx: JobContext) -> list[Any]:
        starts.append(ctx.attempt)
        ids = await ctx.step.enqueue_many("kids", ch, [{"n": n} for n in range(3)])
        return await ctx.step.gather("all", ids)

    ph = declare(parent, name="gatherer")
    client = Jobs(driver)
    done = await client.enqueue(ph, {"n": 1})
    worker_task = asyncio.create_task(working(driver, [ph, ch], ended(driver, done.id), within=30))

    async def parked() -> bool:
        return (await row(driver, done.id)).state is JobState.PARKED

    await until(parked, within=20)
    parent_row = await row(driver, done.id)
    kids = [derived_id(parent_row.run_id, "kids", n) for n in range(3)]
    for n in range(3):
        gates[n].set()
        await until(ended(driver, kids[n]), within=20)
        if n < 2:  # a child finishing while others run leaves the parent parked
            assert (await row(driver, done.id)).state is JobState.PARKED
    await worker_task
    parent_row = await row(driver, done.id)
    assert parent_row.state is JobState.COMPLETED
    assert starts == [1, 1]  # parked once, woken once; the park spent no attempt
    assert parent_row.join == JoinState(3, 0, 0, JoinPolicy.ALWAYS)
    assert await client.result(done.id) == [0, 1, 2]
    await client.close()


async def test_a_hundred_children_gather_in_order(driver: JobDriver) -> None:
    async def child(input: Any, ctx: JobContext) -> int:
        return int(input["n"]) ** 2

    ch = declare(child, name="square", idempotency_key=None)

    async def parent(input: Any, ctx: JobContext) -> int:
        ids = await ctx.step.enqueue_many("kids", ch, [{"n": n} for n in range(100)])
        squares = await ctx.step.gather("squares", ids)
        assert squares == [n * n for n in range(100)]
        return sum(squares)

    ph = declare(parent, name="summer")
    client = Jobs(driver)
    done = await client.enqueue(ph, {"n": 1})
    await working(driver, [ph, ch], ended(driver, done.id), within=60, concurrency=20)
    assert await client.result(done.id) == sum(n * n for n in range(100))
    children = await listed(driver, JobFilter(parent_id=done.id))
    assert len(children) == 100 and {c.state for c in children} == {JobState.COMPLETED}
    await client.close()


async def test_a_failed_child_raises_typed_unless_errors_are_returned(driver: JobDriver) -> None:
    async def child(input: Any, ctx: JobContext) -> int:
        if input["n"] == 1:
            raise TerminalError("child one fails")
        return int(input["n"])

    # No key function: a child's key is its derived id, so two parents' children never dedupe.
    ch = declare(child, name="flaky", retry=ONCE, idempotency_key=None)
    seen: list[Any] = []

    async def lenient(input: Any, ctx: JobContext) -> list[Any]:
        ids = await ctx.step.enqueue_many("kids", ch, [{"n": n} for n in range(3)])
        got = await ctx.step.gather("all", ids, return_errors=True)
        seen.append(got)
        return [g if not isinstance(g, ResultFailedError) else g.state for g in got]

    async def strict(input: Any, ctx: JobContext) -> None:
        ids = await ctx.step.enqueue_many("kids", ch, [{"n": n} for n in range(3)])
        await ctx.step.gather("all", ids)

    lh = declare(lenient, name="lenient")
    sh = declare(strict, name="strict", retry=FAST)
    client = Jobs(driver)
    a = await client.enqueue(lh, {"n": 1})
    b = await client.enqueue(sh, {"n": 1})
    await working(driver, [lh, sh, ch], ended(driver, a.id, b.id), within=30)
    assert await client.result(a.id) == [0, "dead", 2]
    failure = seen[-1][1]
    assert isinstance(failure, ResultFailedError) and failure.state == "dead"
    assert failure.error is not None and "child one fails" in failure.error
    strict_row = await row(driver, b.id)
    # The failure is terminal: no retry of the parent could make its child complete.
    assert strict_row.state is JobState.DEAD and strict_row.attempt == 1
    assert strict_row.last_error is not None and "X_RESULT_FAILED" in strict_row.last_error
    await client.close()


async def test_a_run_that_waits_for_its_own_job_is_refused_not_parked_forever(
    driver: JobDriver,
) -> None:
    """Its own row is live while it waits, so a park on it was never released: the run sat
    `parked`, no run time, for good. It is refused before anything is recorded, and fails."""

    async def selfish(input: Any, ctx: JobContext) -> Any:
        if input["how"] == "result":
            return await ctx.step.result("me", ctx.job_id)
        return await ctx.step.gather("all", ["nobody", ctx.job_id])

    h = declare(selfish, name="selfish", retry=ONCE)
    client = Jobs(driver)
    ids = [
        (await client.enqueue(h, {"n": n, "how": how})).id
        for n, how in enumerate(["result", "gather"])
    ]
    await working(driver, [h], ended(driver, *ids), within=10)
    for job_id in ids:
        r = await row(driver, job_id)
        assert r.state is JobState.DEAD and r.join is None, r
        assert r.last_error is not None and "X_JOB_DECLARATION_INVALID" in r.last_error
        assert await driver.step_list(r.run_id) == []


async def test_def_bodies_enqueue_and_gather_through_sync_step(driver: JobDriver) -> None:
    def child(input: Any, ctx: JobContext) -> str:
        return f"hi {input['n']}"

    ch = declare(child, name="greet")

    def parent(input: Any, ctx: JobContext) -> Any:
        one = ctx.sync_step.enqueue("one", ch, {"n": 1})
        more = ctx.sync_step.enqueue_many("more", ch, [{"n": 2}, {"n": 3}])
        return [ctx.sync_step.result("first", one), ctx.sync_step.gather("rest", more)]

    ph = declare(parent, name="sync-parent")
    client = Jobs(driver)
    done = await client.enqueue(ph, {"n": 1})
    await working(driver, [ph, ch], ended(driver, done.id), within=30)
    assert await client.result(done.id) == ["hi 1", ["hi 2", "hi 3"]]
    await client.close()


async def test_a_child_acts_for_its_parents_tenant(driver: JobDriver) -> None:
    async def child(input: Any, ctx: JobContext) -> None:
        return None

    ch = declare(child, name="tenantless-child")

    async def parent(input: Any, ctx: JobContext) -> list[str]:
        via_step = await ctx.step.enqueue("kid", ch, {"n": 1})
        plain = await ch.enqueue({"n": 2}, key="plain")  # enqueue inside a body, for contrast
        return [via_step, plain.id]

    ph = declare(parent, name="org-parent", tenant=lambda i: i["org"])
    client = Jobs(driver)
    done = await client.enqueue(ph, {"n": 1, "org": "acme"})
    await working(driver, [ph, ch], ended(driver, done.id))
    answer = await client.result(done.id)
    assert isinstance(answer, list)
    ids = [str(i) for i in answer]
    rows = await driver.job_get_many(ids)
    assert [rows[i].tenant_id for i in ids] == ["acme", "acme"]
    assert rows[ids[0]].parent_id == done.id and rows[ids[1]].parent_id is None
    await client.close()


async def test_a_step_child_inside_acting_for_another_org_says_to_name_it(
    driver: JobDriver,
) -> None:
    """Inside `acting_for(other)` a step child naming no `tenant_id=` would go to the RUN's
    tenant: refused, enqueue and enqueue_many alike (the batch went to the run's tenant
    silently), nothing enqueued, the message saying what happened and what to write; with
    `tenant_id=other` it goes to that org."""

    async def child(input: Any, ctx: JobContext) -> None:
        return None

    ch = declare(child, name="org-child")

    async def parent(input: Any, ctx: JobContext) -> dict[str, str]:
        said: dict[str, str] = {}
        with acting_for("globex"):
            try:
                said["one"] = await ctx.step.enqueue("one", ch, {"n": 1})
            except TenantMismatchError as exc:
                said["one"] = str(exc)
            try:
                said["many"] = str(await ctx.step.enqueue_many("many", ch, [{"n": 2}]))
            except TenantMismatchError as exc:
                said["many"] = str(exc)
            said["named"] = await ctx.step.enqueue("named", ch, {"n": 3}, tenant_id="globex")
        return said

    ph = declare(parent, name="acme-parent", tenant=lambda i: i["org"])
    client = Jobs(driver)
    done = await client.enqueue(ph, {"n": 1, "org": "acme"})
    await working(driver, [ph, ch], ended(driver, done.id))
    said = await client.result(done.id)
    for call in ("one", "many"):
        text = said[call]
        assert text.startswith("X_JOB_TENANT_MISMATCH"), said
        assert "the run's tenant ('acme')" in text and "tenant_id='globex'" in text, said
        assert "acting_for" in text, said
    children = await listed(driver, JobFilter(parent_id=done.id))
    assert [(c.id, c.tenant_id) for c in children] == [(said["named"], "globex")]
    await client.close()


async def test_an_unwinding_replay_answers_recorded_children_and_stops_at_the_rest() -> None:
    """In unwind mode a recorded child step answers its id without enqueueing; the first
    unrecorded one ends the replay (as a sleep's or a wait's does)."""
    from jobs_core.clock import FakeClock
    from jobs_core.context import CancelSignal
    from jobs_core.records import ClaimParams
    from jobs_core.steps.api import StepApi
    from jobs_core.steps.suspend import UnwindReached
    from jobs_memory import MemoryDriver

    driver = MemoryDriver()
    clock = FakeClock()
    ch = declare(lambda i, c: None, name="c")
    p = declare(lambda i, c: None, name="p")
    done = await Jobs(driver, clock=clock).enqueue(p, {"n": 1})
    claim = await driver.job_claim(ClaimParams((p.queue,), "w", 1, 60_000, clock.now_ms()))
    job = claim.jobs[0]
    recorded = derived_id(job.run_id, "kid")
    await driver.step_put([StepPut(job.fence, "kid", f'{{"id": "{recorded}"}}', clock.now_ms())])
    api = StepApi(driver, clock, job, CancelSignal()).unwinding()
    assert await api.enqueue("kid", ch, {"n": 1}) == recorded
    try:
        await api.gather("never", [recorded])
    except UnwindReached as reached:
        assert reached.name == "never"
    else:
        raise AssertionError("the replay went past a step the run never recorded")
    assert set((await driver.job_get_many([recorded, done.id])).keys()) == {done.id}


async def test_a_wait_that_closes_a_cycle_is_refused_not_parked_forever(
    driver: JobDriver,
) -> None:
    """A child enqueued with `after=[parent]` waits for its parent; the parent then gathering
    it parked both for good (each waiting for the other). The gather that would close the
    cycle is refused with `X_JOB_WAIT_CYCLE` before anything is recorded, and fails (terminal:
    a retry would close it again); the child is then released by its parent's finish. A chain
    (parent waits on a child that waits on a grandchild that waits on the parent) is refused
    the same way."""

    async def child(input: Any, ctx: JobContext) -> int:
        return 1

    ch = declare(child, name="cyc-child")

    async def parent(input: Any, ctx: JobContext) -> Any:
        if input["how"] == "direct":
            kid = await ctx.step.enqueue("kid", ch, {"n": 1}, after=[ctx.job_id])
        else:
            grand = await ctx.step.enqueue("grand", ch, {"n": 2}, after=[ctx.job_id])
            kid = await ctx.step.enqueue("kid", ch, {"n": 3}, after=[grand])
        return await ctx.step.gather("all", [kid])

    ph = declare(parent, name="cyc-parent", retry=ONCE)
    client = Jobs(driver)
    ids = [(await client.enqueue(ph, {"n": how, "how": how})).id for how in ("direct", "chain")]

    async def all_ended() -> bool:
        kids = [k.id for i in ids for k in await listed(driver, JobFilter(parent_id=i))]
        return len(kids) == 3 and await ended(driver, *ids, *kids)()

    await working(driver, [ph, ch], all_ended, within=10)
    for job_id in ids:
        r = await row(driver, job_id)
        assert r.state is JobState.DEAD and r.join is None, r
        assert r.last_error is not None and "X_JOB_WAIT_CYCLE" in r.last_error, r.last_error
        assert "all" not in [s.name for s in await driver.step_list(r.run_id)]
        # Released by their parent's finish, the children fail as their dependency did.
        for k in await listed(driver, JobFilter(parent_id=job_id)):
            assert k.state is JobState.DEAD and k.join is not None, k
    await client.close()


async def test_two_runs_that_start_waiting_for_each_other_at_once_are_never_both_parked(
    driver: JobDriver,
) -> None:
    """Two runs each gather the other, both bodies past their start before either gathers: each
    check reads the other still running, so both park. The check after the park sees the cycle
    (at least one of the two does: each park lands before its own read) and that run's row is
    cancelled, which releases the other: never both parked. Half the pairs meet at a barrier
    (the race forced), half start as they are claimed (the race as timing makes it). With
    `return_errors=True` the released run completes: when both see the cycle only the one of
    least id is ended (the other waits `RING_DEFER_S`, a second, for that cancel: a few round
    trips)."""
    arrived: dict[str, int] = Counter()
    both_in: dict[str, asyncio.Event] = {}

    async def pair(input: Any, ctx: JobContext) -> Any:
        if input["barrier"]:
            arrived[input["pair"]] += 1
            if arrived[input["pair"]] == 2:
                both_in[input["pair"]].set()
            await asyncio.wait_for(both_in[input["pair"]].wait(), 5)
        got = await ctx.step.gather("other", [input["other"]], return_errors=True)
        return [str(g) for g in got]

    ph = declare(pair, name="cyc-pair", retry=ONCE)
    client = Jobs(driver)
    worker = Worker(driver, [ph], concurrency=4, poll_floor=0.001, poll_ceiling=0.02, lease=5.0)
    ended_as: list[tuple[JobState, ...]] = []
    await worker.start()
    try:
        for n in range(12):
            key, barrier = f"p{n}", n % 2 == 0
            both_in[key] = asyncio.Event()
            a, b = f"{key}-a", f"{key}-b"
            for me, other in ((a, b), (b, a)):
                await client.enqueue(
                    ph, {"n": me, "pair": key, "other": other, "barrier": barrier}, id=me
                )
            try:
                await until(ended(driver, a, b), within=5)
            except AssertionError:
                rows = await driver.job_get_many([a, b])
                raise AssertionError(f"pair {key} left live: {rows}") from None
            rows = await driver.job_get_many([a, b])
            ended_as.append(tuple(sorted(r.state for r in rows.values())))
    finally:
        await worker.stop()
        await client.close()
    assert set(ended_as) <= {
        (JobState.CANCELLED, JobState.COMPLETED),
        (JobState.COMPLETED, JobState.DEAD),  # the check before the park saw the other parked
        (JobState.CANCELLED, JobState.CANCELLED),
        (JobState.COMPLETED, JobState.COMPLETED),  # the first ran before the second was enqueued
    }, ended_as
    assert (JobState.CANCELLED, JobState.CANCELLED) not in ended_as, ended_as
