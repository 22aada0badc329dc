"""Dependencies (`after=`) and batches on every store that declares flows: a job waits parked
for its dependencies, runs after them (SUCCESS) or however they ended (ALWAYS), is failed
unrun when one failed (SUCCESS), and is refused before any write for an unknown one; a batch's
callback is enqueued exactly once and handed the counts."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    DeclarationInvalidError,
    DependencyUnknownError,
    OptionInvalidError,
    RecordInvalidError,
    TerminalError,
)
from jobs_core.facade import Jobs
from jobs_core.ids import derived_id
from jobs_core.records import JobFilter, JoinPolicy, JoinState
from jobs_core.retry import Retry
from jobs_core.states import JobState
from tests.core.flows_support import ONCE, driver, ended, listed, row, working
from tests.core.support import HUGE_INT, declare, deep_list

__all__ = ["driver"]  # the fixture, parametrized over the kinds that declare flows


def recorder(ran: list[Any], *, fail_on: object = None) -> Any:
    async def body(input: Any, ctx: JobContext) -> Any:
        ran.append(input)
        if fail_on is not None and input.get("n") == fail_on:
            raise TerminalError(f"member {fail_on} fails")
        return input.get("n") if isinstance(input, dict) else None

    return body


async def test_after_success_waits_parked_then_runs(driver: JobDriver) -> None:
    ran: list[Any] = []
    h = declare(recorder(ran), name="step")
    client = Jobs(driver)
    first = await client.enqueue(h, {"n": 1})
    second = await client.enqueue(h, {"n": 2})
    then = await client.enqueue(h, {"n": 3}, after=[first.id, second.id, first.id])
    assert (await row(driver, then.id)).state is JobState.PARKED
    await working(driver, [h], ended(driver, then.id))
    done = await row(driver, then.id)
    assert done.state is JobState.COMPLETED
    assert ran[-1] == {"n": 3} and sorted(r["n"] for r in ran[:2]) == [1, 2]
    assert done.join == JoinState(2, 0, 0, JoinPolicy.SUCCESS)  # an id named twice counts once


async def test_a_failed_dependency_fails_a_success_waiter_unrun_and_always_runs(
    driver: JobDriver,
) -> None:
    ran: list[Any] = []
    h = declare(recorder(ran, fail_on=1), name="dep", retry=ONCE)
    waiter_ran: list[Any] = []
    joins: list[JoinState | None] = []

    async def waiter(input: Any, ctx: JobContext) -> None:
        waiter_ran.append(input)
        joins.append(ctx.join)

    w = declare(waiter, name="waiter", retry=Retry(attempts=3, dead_letter=False))
    client = Jobs(driver)
    dep = await client.enqueue(h, {"n": 1})
    strict = await client.enqueue(w, {"n": 10}, after=[dep.id])
    lenient = await client.enqueue(w, {"n": 11}, after=[dep.id], after_policy="always")
    await working(driver, [h, w], ended(driver, strict.id, lenient.id))
    assert (await row(driver, dep.id)).state is JobState.DEAD
    failed = await row(driver, strict.id)
    # Dropped, not dead-lettered: the waiter's own `Retry(dead_letter=False)` decides; one
    # attempt, terminal (the dependency stays failed), and its body never ran.
    assert failed.state is JobState.FAILED and failed.attempt == 1
    assert failed.last_error is not None and "X_JOB_DEPENDENCY_FAILED" in failed.last_error
    assert waiter_ran == [{"n": 11}]
    # The body that runs however its dependencies ended is told how they ended.
    assert joins == [JoinState(1, 0, 1, JoinPolicy.ALWAYS)]
    assert (await row(driver, lenient.id)).join == JoinState(1, 0, 1, JoinPolicy.ALWAYS)


async def test_an_unknown_dependency_is_refused_before_anything_is_written(
    driver: JobDriver,
) -> None:
    h = declare(lambda i, c: None)
    client = Jobs(driver)
    known = await client.enqueue(h, {"n": 1})
    with pytest.raises(DependencyUnknownError) as raised:
        await client.enqueue(h, {"n": 2}, id="would-be", after=[known.id, "nobody"])
    assert raised.value.code == "X_JOB_DEPENDENCY_UNKNOWN" and raised.value.detail == "nobody"
    assert await driver.job_get_many(["would-be"]) == {}
    with pytest.raises(OptionInvalidError):
        await client.enqueue(h, {"n": 3}, after=[known.id], after_policy="sometimes")
    with pytest.raises(OptionInvalidError):
        await client.enqueue(h, {"n": 3}, after=known.id)
    # Ids and policies of other types, and ones `repr` cannot spell: typed, nothing written
    # (a list in the list was a TypeError, a deep policy a RecursionError).
    deep = deep_list()
    for bad in ([known.id, ["x"]], [{"id": known.id}], [deep], [HUGE_INT]):
        with pytest.raises(OptionInvalidError) as refused:
            await client.enqueue(h, {"n": 4}, id="would-be", after=bad)
        assert refused.value.detail == "after"
    with pytest.raises(OptionInvalidError):
        await client.enqueue(h, {"n": 4}, id="would-be", after=[known.id], after_policy=deep)
    for bad_id in (["x"], {"id": known.id}, "a\x00b", "x" * 201):
        with pytest.raises(RecordInvalidError):
            await client.result(bad_id, timeout=0.01)  # type: ignore[arg-type]
    assert await driver.job_get_many(["would-be"]) == {}


async def test_a_batch_callback_runs_exactly_once_with_the_counts(driver: JobDriver) -> None:
    ran: list[Any] = []
    member = declare(recorder(ran, fail_on=2), name="member", retry=ONCE)
    completes: Counter[str] = Counter()
    seen: list[Any] = []

    async def report(input: Any, ctx: JobContext) -> None:
        completes[ctx.job_id] += 1
        seen.append(input)

    on_complete = declare(report, name="report", idempotency_key=None)
    success_ran: list[Any] = []
    on_success = declare(recorder(success_ran), name="publish", idempotency_key=None, retry=ONCE)
    client = Jobs(driver)
    async with client.batch(on_complete=on_complete, on_success=on_success, input={"run": 7}) as b:
        for n in range(5):
            await b.enqueue(member, {"n": n})
    callback = derived_id(b.id, "on_complete")
    success = derived_id(b.id, "on_success")
    # The end of the block again (a retry of it): deduped on the derived ids.
    again = await b.close()
    assert [a.id for a in again] == [callback, success] and all(a.deduped for a in again)
    await working(driver, [member, on_complete, on_success], ended(driver, callback, success))
    assert completes == {callback: 1}
    assert seen == [
        {"batch_id": b.id, "total": 5, "succeeded": 4, "failed": 1, "input": {"run": 7}}
    ]
    skipped = await row(driver, success)
    assert skipped.state is JobState.DEAD and success_ran == []
    assert skipped.last_error is not None and "X_JOB_DEPENDENCY_FAILED" in skipped.last_error
    members = await listed(driver, JobFilter(batch_id=b.id))
    assert sorted(m.id for m in members) == sorted(b.member_ids) and len(members) == 5


async def test_one_handle_for_both_callbacks_with_one_key_is_refused(driver: JobDriver) -> None:
    """`key=` is both callbacks' key: with one handle for both they share a namespace, so the
    `on_success` record deduped against `on_complete`'s parked row and was never enqueued,
    silently (`close` answered it `deduped`). Refused at the batch, before any member."""
    report = declare(lambda i, c: None, name="report", idempotency_key=lambda i: "r")
    client = Jobs(driver)
    for key in ("nightly", None):
        with pytest.raises(DeclarationInvalidError) as refused:
            client.batch(on_complete=report, on_success=report, key=key)
        assert refused.value.detail == "key"
    # Apart they are fine: the default keys are derived per role.
    async with client.batch(on_complete=report, on_success=report) as b:
        await b.enqueue(report, {"n": 1})
    rows = await driver.job_get_many([derived_id(b.id, r) for r in ("on_complete", "on_success")])
    assert len(rows) == 2


async def test_a_batch_that_all_succeeds_runs_on_success(driver: JobDriver) -> None:
    member = declare(recorder([]), name="ok-member")
    got: list[Any] = []

    async def publish(input: Any, ctx: JobContext) -> None:
        got.append(input)

    done = declare(lambda i, c: None, name="done", idempotency_key=None)
    ok = declare(publish, name="publish-ok", idempotency_key=None)
    client = Jobs(driver)
    async with client.batch(on_complete=done, on_success=ok) as b:
        await b.enqueue_many(member, [{"n": n} for n in range(3)])
    await working(driver, [member, done, ok], ended(driver, derived_id(b.id, "on_success")))
    assert got == [{"batch_id": b.id, "total": 3, "succeeded": 3, "failed": 0, "input": None}]


async def test_an_exception_in_the_block_enqueues_no_callback(driver: JobDriver) -> None:
    member = declare(lambda i, c: None, name="kept-member")
    report = declare(lambda i, c: None, name="never", idempotency_key=None)
    client = Jobs(driver)
    with pytest.raises(RuntimeError, match="boom"):
        async with client.batch(on_complete=report) as b:
            await b.enqueue(member, {"n": 1})
            raise RuntimeError("boom")
    assert await driver.job_get_many([derived_id(b.id, "on_complete")]) == {}
    # The member enqueued before the exception stays.
    kept = await listed(driver, JobFilter(batch_id=b.id))
    assert [k.state for k in kept] == [JobState.READY]


async def test_an_empty_batch_runs_its_callback_at_once_with_zeros(driver: JobDriver) -> None:
    got: list[Any] = []

    async def report(input: Any, ctx: JobContext) -> None:
        got.append(input)

    cb = declare(report, name="empty-report", idempotency_key=None)
    client = Jobs(driver)
    async with client.batch(on_complete=cb, input=[1]) as b:
        pass
    await working(driver, [cb], ended(driver, derived_id(b.id, "on_complete")))
    assert got == [{"batch_id": b.id, "total": 0, "succeeded": 0, "failed": 0, "input": [1]}]


async def test_the_sync_and_handle_spellings_of_after(driver: JobDriver) -> None:
    from jobs_core.facade import bound_client

    ran: list[Any] = []
    h = declare(recorder(ran), name="spelled")
    client = Jobs(driver)
    first = await client.enqueue(h, {"n": 1})
    with bound_client(client):
        second = await h.enqueue({"n": 2}, after=[first.id], after_policy=JoinPolicy.ALWAYS)
    sync_client = Jobs(driver)
    third = await asyncio.to_thread(
        lambda: sync_client.enqueue_sync(h, {"n": 3}, after=[second.id])
    )
    with pytest.raises(DependencyUnknownError):
        await asyncio.to_thread(lambda: sync_client.enqueue_sync(h, {"n": 4}, after=["gone"]))
    if sync_client._portal is not None:  # its loop only: the driver is this test's
        sync_client._portal.stop()
    assert (await row(driver, third.id)).state is JobState.PARKED
    await working(driver, [h], ended(driver, third.id))
    assert [r["n"] for r in ran] == [1, 2, 3]  # each waited for the one before
