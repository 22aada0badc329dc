"""`ledger()` (jobs_core/factories/ledger.py): a run posts its lines once on every driver, a
replay and a crash between the posting and its step record post nothing more, a conflict is
terminal, refusals come before anything is written (at enqueue and in the run), the tenant
holds on every path, and the real worker runs it end to end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobs_core import FakeClock, JobContext, Jobs, errors
from jobs_core.driver import MAX_POSTING_AMOUNT, JobDriver
from jobs_core.errors import JobsError
from jobs_core.factories import ledger
from jobs_core.factories.ledger import POST_STEP, Ledger, posting_lines
from jobs_core.job import JobRegistry
from jobs_core.records import BalanceRow, ClaimedJob, ClaimParams, PostingLine, PostingPut
from jobs_core.states import Outcome
from jobs_core.tenant import acting_for
from jobs_core.testing import ujobs_for
from jobs_core.testing.scenarios.support import new_job
from tests.core.support import fresh_store

T0 = 1_800_000_000_000
#: docs/factories.md, whose `ledger()` example runs here as written.
GUIDE = (Path(__file__).resolve().parents[2] / "docs" / "factories.md").read_text(encoding="utf-8")


def charge_input(org: str = "acme", invoice: str = "inv-1", cents: int = 1250) -> dict[str, Any]:
    return {
        "org": org,
        "invoice": invoice,
        "lines": [
            {"account": "customer:c9", "currency": "EUR", "amount": cents},
            {"account": "revenue", "currency": "EUR", "amount": -cents},
        ],
    }


def charges(name: str = "charge", **options: Any) -> Ledger:
    return ledger(
        name=name,
        tenant=lambda i: i["org"],
        idempotency_key=lambda i: f"charge:{i['invoice']}",
        registry=JobRegistry(),
        **options,
    )


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as store:
        yield store


async def claimed(driver: JobDriver, handle: Ledger, now: int = T0) -> ClaimedJob:
    got = await driver.job_claim(ClaimParams((handle.queue,), "w1", 1, 60_000, now))
    (job,) = got.jobs
    return job


async def run(driver: JobDriver, handle: Ledger, job: ClaimedJob, input: Any) -> Any:
    ctx = JobContext.for_test(job, driver, clock=FakeClock(T0 + 5), tenant=handle.tenant_for(input))
    return await handle.fn(input, ctx)


async def test_a_run_posts_once_and_a_replay_posts_nothing_more(driver: JobDriver) -> None:
    handle = charges()
    await Jobs(driver, clock=FakeClock(T0)).enqueue(handle, charge_input())
    job = await claimed(driver, handle)
    result = await run(driver, handle, job, charge_input())
    assert result == {
        "key": "charge:inv-1",
        "status": "applied",
        "posted_at_ms": T0 + 5,
        "lines": 2,
    }
    # The same attempt's body again (a replay): the step answers, nothing is posted again.
    assert await run(driver, handle, job, charge_input()) == result
    assert [s.name for s in await driver.step_list(job.run_id)] == [POST_STEP]
    assert await handle.balances(["revenue", "customer:c9"], tenant="acme", driver=driver) == [
        BalanceRow("customer:c9", "EUR", 1250, 0),
        BalanceRow("revenue", "EUR", 0, 1250),
    ]
    posted = await handle.posting("charge:inv-1", tenant="acme", driver=driver)
    assert posted is not None and posted.job_id == job.id


async def test_a_crash_between_the_posting_and_its_record_posts_once(driver: JobDriver) -> None:
    """The posting landed, the worker died before the step's record: the next attempt finds
    the key posted with the same lines and completes, the balances moved once."""
    handle = charges()
    await Jobs(driver, clock=FakeClock(T0)).enqueue(handle, charge_input())
    first = await claimed(driver, handle)
    lines = posting_lines(charge_input()["lines"])
    landed = await driver.posting_put(PostingPut(first.fence, "acme", "charge:inv-1", lines, T0))
    assert landed.status == "applied"
    # Its lease lapsed; another worker's claim is the next attempt of the same run.
    second = await claimed(driver, handle, T0 + 61_000)
    assert second.claims == first.claims + 1
    result = await run(driver, handle, second, charge_input())
    assert result["status"] == "already_applied" and result["posted_at_ms"] == T0
    # The old attempt, had it lived, posts nothing: its claim is gone, and its run's step
    # is recorded now (a replay of its body answers the record).
    late = await driver.posting_put(PostingPut(first.fence, "acme", "charge:inv-1", lines, T0))
    assert late.status == "fence_lost"
    assert await run(driver, handle, first, charge_input()) == result
    rows = await handle.balances(["revenue"], tenant="acme", driver=driver)
    assert rows == [BalanceRow("revenue", "EUR", 0, 1250)]


async def test_other_lines_under_a_posted_key_are_a_terminal_conflict(driver: JobDriver) -> None:
    handle = charges()
    jobs = Jobs(driver, clock=FakeClock(T0))
    await jobs.enqueue(handle, charge_input())
    await run(driver, handle, await claimed(driver, handle), charge_input())
    # The first job is still running (this test holds its claim): a second job of the same key
    # has another name's namespace, so it is enqueued and runs.
    other = charges("charge-again")
    await jobs.enqueue(other, charge_input(cents=999))
    with pytest.raises(JobsError) as caught:
        await run(driver, other, await claimed(driver, other), charge_input(cents=999))
    assert caught.value.code == "X_LEDGER_POSTING_CONFLICT" and caught.value.terminal
    rows = await handle.balances(["revenue"], tenant="acme", driver=driver)
    assert rows == [BalanceRow("revenue", "EUR", 0, 1250)]


@pytest.mark.parametrize(
    ("lines", "code"),
    [
        ([{"account": "cash", "currency": "EUR", "amount": 5}], "X_LEDGER_LINES_INVALID"),
        (
            [
                {"account": "cash", "currency": "EUR", "amount": 5},
                {"account": "bank", "currency": "EUR", "amount": -4},
            ],
            "X_LEDGER_UNBALANCED",
        ),
        (
            [
                {"account": "cash", "currency": "EUR", "amount": 5.0},
                {"account": "bank", "currency": "EUR", "amount": -5},
            ],
            "X_LEDGER_AMOUNT_INVALID",
        ),
        (
            [
                {"account": "cash", "currency": "EUR", "amount": MAX_POSTING_AMOUNT + 1},
                {"account": "bank", "currency": "EUR", "amount": -MAX_POSTING_AMOUNT - 1},
            ],
            "X_LEDGER_AMOUNT_INVALID",
        ),
        (
            [
                {"account": "<img src=x>", "currency": "EUR", "amount": 5},
                {"account": "bank", "currency": "EUR", "amount": -5},
            ],
            "X_LEDGER_ACCOUNT_INVALID",
        ),
        (
            [
                {"account": "cash", "currency": "€", "amount": 5},
                {"account": "bank", "currency": "€", "amount": -5},
            ],
            "X_LEDGER_CURRENCY_INVALID",
        ),
        (
            [
                {"account": "cash", "currency": "EUR", "amount": 5, "memo": "x"},
                {"account": "bank", "currency": "EUR", "amount": -5},
            ],
            "X_LEDGER_LINES_INVALID",
        ),
        ("cash 5 EUR", "X_LEDGER_LINES_INVALID"),
    ],
)
async def test_refused_lines_are_never_enqueued(lines: Any, code: str) -> None:
    with ujobs_for("memory") as ujobs:
        handle = charges()
        for given in (None, "charge:given"):
            with pytest.raises(JobsError) as caught:
                await ujobs.client.enqueue(handle, {**charge_input(), "lines": lines}, key=given)
            assert caught.value.code == code
        assert (await ujobs.driver.queue_demand([handle.queue], T0 * 2))[handle.queue] == 0


async def test_refused_lines_in_a_run_write_nothing(driver: JobDriver) -> None:
    """Lines a function computes in the run (not at enqueue): refused there, terminal, nothing
    posted, no step recorded."""
    calls = iter([charge_input()["lines"], [{"account": "cash", "currency": "EUR", "amount": 1}]])
    handle = charges(lines=lambda _i: next(calls))
    await Jobs(driver, clock=FakeClock(T0)).enqueue(handle, charge_input())
    job = await claimed(driver, handle)
    with pytest.raises(JobsError) as caught:
        await run(driver, handle, job, charge_input())
    assert caught.value.code == "X_LEDGER_LINES_INVALID" and caught.value.terminal
    assert await driver.step_list(job.run_id) == []
    assert await handle.balances(["cash", "revenue"], tenant="acme", driver=driver) == []


async def test_a_tenant_posts_only_into_its_own_ledger(driver: JobDriver) -> None:
    handle = charges()
    jobs = Jobs(driver, clock=FakeClock(T0))
    # Enqueued by org-b's code for org-a: refused at the enqueue.
    with acting_for("org-b"), pytest.raises(JobsError) as caught:
        await jobs.enqueue(handle, charge_input(org="org-a"))
    assert caught.value.code == "X_LEDGER_SCOPE_INVALID"
    # A row that says org-b enqueued it (written past the facade): refused in the run, terminal.
    await driver.job_enqueue(
        new_job(
            "sneaky",
            name=handle.name,
            queue=handle.queue,
            tenant_id="org-b",
            idempotency_key="charge:inv-1",
            input_json='{"org": "org-a", "invoice": "inv-1", "lines": '
            '[{"account": "cash", "currency": "EUR", "amount": 5},'
            ' {"account": "bank", "currency": "EUR", "amount": -5}]}',
            run_at_ms=T0,
        )
    )
    job = await claimed(driver, handle)
    with pytest.raises(JobsError) as caught:
        await run(driver, handle, job, job.input)
    assert caught.value.code == "X_LEDGER_SCOPE_INVALID" and caught.value.terminal
    assert await handle.posting("charge:inv-1", tenant="org-a", driver=driver) is None
    # Reads: a run acting for org-b reads no other tenant's ledger.
    with acting_for("org-b"):
        assert await handle.balances(["cash"], driver=driver) == []
        with pytest.raises(JobsError) as caught:
            await handle.balances(["cash"], tenant="org-a", driver=driver)
    assert caught.value.code == "X_LEDGER_SCOPE_INVALID"


async def test_the_cross_tenant_ledger_is_apart_and_refused_to_a_tenant(driver: JobDriver) -> None:
    house = ledger(
        name="house",
        tenant="none",
        idempotency_key=lambda i: i["id"],
        registry=JobRegistry(),
    )
    org = charges()
    jobs = Jobs(driver, clock=FakeClock(T0))
    body = {"id": "charge:inv-1", "lines": charge_input()["lines"]}
    with acting_for("acme"), pytest.raises(JobsError) as caught:
        await jobs.enqueue(house, body)
    assert caught.value.code == "X_LEDGER_SCOPE_INVALID"
    await jobs.enqueue(house, body)
    result = await run(driver, house, await claimed(driver, house), body)
    assert result["status"] == "applied"
    # The same key in acme's ledger is another posting.
    await jobs.enqueue(org, charge_input())
    assert (await run(driver, org, await claimed(driver, org), charge_input()))["status"] == (
        "applied"
    )
    assert await house.balances(["revenue"], driver=driver) == [
        BalanceRow("revenue", "EUR", 0, 1250)
    ]
    with pytest.raises(JobsError):
        await house.balances(["revenue"], tenant="acme", driver=driver)


def test_declaration_refusals() -> None:
    cases: tuple[tuple[dict[str, Any], str], ...] = (
        ({"tenant": "every"}, "tenant"),
        ({"tenant": "none", "lines": "input"}, "lines"),
        ({"tenant": "none", "idempotency_key": "k"}, "idempotency_key"),
        ({"tenant": "none", "queue": ""}, "queue"),
    )
    for options, what in cases:
        with pytest.raises(JobsError) as caught:
            ledger(name="l", registry=JobRegistry(), **options)
        assert caught.value.code == "X_LEDGER_DECLARATION_INVALID", options
        assert caught.value.detail == what
    registry = JobRegistry()
    ledger(name="l", tenant="none", registry=registry)
    with pytest.raises(JobsError) as caught:
        ledger(name="l", tenant="none", registry=registry)
    assert caught.value.code == "X_JOB_DUPLICATE"


async def test_a_driver_without_postings_is_refused_before_anything() -> None:
    from tests.core_driver import CoreDriver

    handle = charges()
    driver = CoreDriver()
    await Jobs(driver, clock=FakeClock(T0)).enqueue(handle, charge_input())
    with pytest.raises(JobsError) as caught:
        await run(driver, handle, await claimed(driver, handle), charge_input())
    assert caught.value.code == "X_DRIVER_CAPABILITY_MISSING"


async def test_the_worker_runs_it_end_to_end() -> None:
    """Enqueued with the configured client, run by the real worker: one posting per key, a
    second enqueue of the key after the first completed finds it posted."""
    with ujobs_for("memory") as ujobs:
        handle = charges()
        await handle.enqueue(charge_input())
        (first,) = await ujobs.drain([handle])
        assert first.outcome is Outcome.COMPLETED and isinstance(first.result, dict)
        assert first.result["status"] == "applied"
        await handle.enqueue(charge_input())
        (again,) = await ujobs.drain([handle])
        assert again.outcome is Outcome.COMPLETED and isinstance(again.result, dict)
        assert again.result["status"] == "already_applied"
        await handle.enqueue(charge_input(cents=1))
        (conflict,) = await ujobs.drain([handle])
        assert conflict.attempt == 1 and conflict.error is not None
        assert conflict.error.code == "X_LEDGER_POSTING_CONFLICT"
        rows = await handle.balances(["customer:c9", "revenue"], tenant="acme")
        assert [r.balance for r in rows] == [1250, -1250]


def test_lines_take_mappings_triples_and_records_alike() -> None:
    as_maps = posting_lines(charge_input()["lines"])
    as_triples = posting_lines([["revenue", "EUR", -1250], ("customer:c9", "EUR", 1250)])
    as_records = posting_lines(
        [PostingLine("customer:c9", "EUR", 1250), PostingLine("revenue", "EUR", -1250)]
    )
    assert as_maps == as_triples == as_records


async def test_the_guide_example_runs_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/factories.md's `ledger()` example, run as written, a drain where it says a worker
    runs the job: the balances it asserts, and the second enqueue answered already_applied."""
    import re
    import sys

    # `jobs_core.factories.ledger` names the function there; the module is this one.
    module = sys.modules["jobs_core.factories.ledger"]

    guide = GUIDE
    section = guide[guide.index("## ledger()") :]
    block = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert block is not None
    code = block.group(1).replace("# ... a worker runs it:", "await ujobs.drain([charge])  #")
    code += "\nagain = await ujobs.drain([charge])\n"
    monkeypatch.setattr(module, "default_registry", JobRegistry())
    with ujobs_for("memory") as ujobs:
        scope: dict[str, Any] = {"ujobs": ujobs}
        body = "async def example():\n" + "".join(f"    {line}\n" for line in code.splitlines())
        body += "    return again\n"
        exec(compile(body, "docs/factories.md", "exec"), scope)
        (again,) = await scope["example"]()
        assert again.outcome is Outcome.COMPLETED and isinstance(again.result, dict)
        assert again.result["status"] == "already_applied"


def test_every_refusal_of_a_posting_is_terminal() -> None:
    """The same lines would be refused again: no posting refusal is retried (the declaration's
    own refusal is raised at import time, before any job exists)."""
    codes = {c: errors.error_class(c) for c in errors.CODES if c.startswith("X_LEDGER_")}
    assert set(codes) == {
        "X_LEDGER_ACCOUNT_INVALID",
        "X_LEDGER_AMOUNT_INVALID",
        "X_LEDGER_CURRENCY_INVALID",
        "X_LEDGER_DECLARATION_INVALID",
        "X_LEDGER_LINES_INVALID",
        "X_LEDGER_POSTING_CONFLICT",
        "X_LEDGER_SCOPE_INVALID",
        "X_LEDGER_UNBALANCED",
    }
    assert [c for c, cls in codes.items() if not cls.terminal] == ["X_LEDGER_DECLARATION_INVALID"]
