"""acts-for on a saga's unwind, on every store that declares flows (memory, Postgres, Redis): the
`ujobs.unwind` job acts for the org the failed run acted for — enqueued by the worker whose run
failed for good, and by the worker whose claim buried a run that died on its final attempt —
unless that org is one of the failed input's secrets (the unwind's row would show it)."""

from __future__ import annotations

from typing import Any

from jobs_core.clock import SystemClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import TerminalError
from jobs_core.facade import Jobs
from jobs_core.records import ClaimParams, JobFilter, StepPut
from jobs_core.steps.api import SAGA
from jobs_core.steps.unwind import UNWIND_JOB
from tests.core.flows_support import ONCE, driver, listed, working
from tests.core.support import declare

__all__ = ["driver"]  # the fixture, parametrized over the kinds that declare flows


def _saga(undone: list[Any], **options: Any) -> Any:
    async def order(input: Any, ctx: JobContext) -> None:
        await ctx.step.run("charge", lambda: "ch_1", compensate=undone.append)
        raise TerminalError("the shipment was refused")

    return declare(order, name="order", tenant=lambda i: i["org"], retry=ONCE, **options)


async def _unwinds(driver: JobDriver) -> list[Any]:
    return await listed(driver, JobFilter(name=UNWIND_JOB))


async def test_a_failed_sagas_unwind_acts_for_its_org(driver: JobDriver) -> None:
    undone: list[Any] = []
    handle = _saga(undone)
    client = Jobs(driver)
    done = await client.enqueue(handle, {"n": 1, "org": "acme"})

    async def refunded() -> bool:
        return undone == ["ch_1"]

    await working(driver, [handle], refunded)
    (unwind,) = await _unwinds(driver)
    assert unwind.acts_for == "acme"
    assert (await driver.job_get_many([done.id]))[done.id].acts_for == "acme"
    # An operator listing acme's jobs finds the undoing beside the run it undoes.
    acting = {r.id for r in await listed(driver, JobFilter(acts_for="acme"))}
    assert acting == {done.id, unwind.id}
    await client.close()


async def test_an_unwind_never_shows_an_org_its_failed_row_hides(driver: JobDriver) -> None:
    undone: list[Any] = []
    handle = _saga(undone, sensitive=("org",))
    client = Jobs(driver)
    await client.enqueue(handle, {"n": 1, "org": "acme"})

    async def refunded() -> bool:
        return undone == ["ch_1"]

    await working(driver, [handle], refunded)
    (unwind,) = await _unwinds(driver)
    assert unwind.acts_for is None
    await client.close()


async def test_a_buried_sagas_unwind_acts_for_its_org(driver: JobDriver) -> None:
    """The run's lease lapsed on its final attempt: the worker whose claim buries it reads the
    row (its stored org) and enqueues the unwind acting for it."""
    undone: list[Any] = []
    handle = _saga(undone)
    client = Jobs(driver)
    long_ago = SystemClock().now_ms() - 60_000
    done = await client.enqueue(handle, {"n": 1, "org": "acme"}, run_at_ms=long_ago)
    got = await driver.job_claim(ClaimParams(("default",), "gone", 1, 1_000, long_ago))
    (held,) = got.jobs
    puts = [
        StepPut(held.fence, "charge", '"ch_1"', long_ago),
        StepPut(held.fence, SAGA, '{"first": "charge"}', long_ago),
    ]
    assert await driver.step_put(puts) == [True, True]

    async def refunded() -> bool:
        return undone == ["ch_1"]

    await working(driver, [handle], refunded)
    (unwind,) = await _unwinds(driver)
    assert unwind.acts_for == "acme" and unwind.run_id == held.run_id
    assert (await driver.job_get_many([done.id]))[done.id].state.value == "dead"
    await client.close()
