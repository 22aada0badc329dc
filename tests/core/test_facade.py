"""The enqueue facade from async and from plain sync code; the tenant and JSON it stores."""

from __future__ import annotations

import asyncio
import datetime as dt
from dataclasses import dataclass
from typing import Any

import pytest

import jobs_core
from jobs_core.clock import FakeClock
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs, configure
from jobs_core.job import JobRegistry, job
from jobs_core.tenant import acting_for
from jobs_memory import MemoryDriver


async def body(input: Any, ctx: Any) -> None:
    return None


def make_handle() -> Any:
    return job(body, tenant="none", idempotency_key=lambda i: str(i["n"]), registry=JobRegistry())


def test_sync_enqueue_needs_no_event_loop_and_dedupes() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    h = make_handle()
    first = jobs.enqueue_sync(h, {"n": 1})
    again = jobs.enqueue_sync(h, {"n": 1})
    many = jobs.enqueue_many_sync(h, [{"n": 1}, {"n": 2}])
    assert first.deduped is False and again.deduped is True and again.id == first.id
    assert [r.deduped for r in many] == [True, False] and many[0].id == first.id
    jobs.close_sync()


async def test_sync_enqueue_refuses_to_block_a_running_loop() -> None:
    jobs = Jobs(MemoryDriver())
    # Its own code (a RuntimeError still, as before), so the error reference says what to do:
    # a newcomer meets it first in `python -m asyncio` or a FastAPI `async def` view.
    with pytest.raises(RuntimeError) as caught:
        jobs.enqueue_sync(make_handle(), {"n": 1})
    assert isinstance(caught.value, JobsError) and caught.value.code == "X_SYNC_CALL_IN_LOOP"
    assert "await" in str(caught.value)


async def test_the_row_carries_the_enqueuers_tenant_and_the_json_form() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    h = make_handle()
    with acting_for("org-9"):
        ambient = await jobs.enqueue(h, {"n": 1, "at": dt.datetime(2026, 1, 2, 3, 4, 5)})
    explicit = await jobs.enqueue(h, {"n": 2}, tenant_id="org-1")
    rows = await driver.job_get_many([ambient.id, explicit.id])
    assert rows[ambient.id].tenant_id == "org-9"
    assert rows[ambient.id].input == {"n": 1, "at": "2026-01-02T03:04:05"}
    assert rows[explicit.id].tenant_id == "org-1"


async def test_same_key_under_another_tenant_is_another_job() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    h = make_handle()
    a = await jobs.enqueue(h, {"n": 1}, tenant_id="org-a")
    b = await jobs.enqueue(h, {"n": 1}, tenant_id="org-b")
    none = await jobs.enqueue(h, {"n": 1}, tenant_id=None)
    assert len({a.id, b.id, none.id}) == 3
    with pytest.raises(JobsError) as info:
        await jobs.enqueue(h, {"n": 1}, tenant_id="")
    assert info.value.code == "X_JOB_RECORD_INVALID" and info.value.detail == "tenant_id"


def test_configured_client_serves_handle_enqueue_from_sync_and_async() -> None:
    driver = MemoryDriver()
    configure(driver)
    h = make_handle()
    sync_result = h.enqueue_sync({"n": 1})
    async_result = asyncio.run(h.enqueue({"n": 1}))
    assert async_result.deduped and async_result.id == sync_result.id
    jobs_core.facade.default_client().close_sync()


@dataclass
class Signup:
    org_id: str
    user_id: int


async def test_declaration_functions_see_the_json_form_at_enqueue_as_at_run() -> None:
    # The worker hands the functions the stored JSON form (a dict), so a function written for
    # the caller's object must be refused at enqueue, not discovered at run.
    driver = MemoryDriver()
    jobs = Jobs(driver)
    seen: list[Any] = []

    def tenant_of(i: Any) -> str:
        seen.append(i)
        return str(i["org_id"])

    h = job(
        body, tenant=tenant_of, idempotency_key=lambda i: f"{i['user_id']}", registry=JobRegistry()
    )
    when = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    got = await jobs.enqueue(h, {"org_id": "o1", "user_id": 7, "at": when, "tags": ("a",)})
    assert seen == [
        {"org_id": "o1", "user_id": 7, "at": "2026-01-02T00:00:00+00:00", "tags": ["a"]}
    ]
    row = (await driver.job_get_many([got.id]))[got.id]
    assert row.idempotency_key == "7" and row.input == seen[0]
    await jobs.enqueue(h, Signup("o2", 8))
    assert seen[-1] == {"org_id": "o2", "user_id": 8}


@pytest.mark.parametrize("which", ["tenant", "key"])
async def test_a_declaration_function_that_raises_is_a_typed_refusal_before_any_write(
    which: str,
) -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    attr: Any = lambda i: i.org_id  # noqa: E731 - written for the dataclass, not its JSON form
    h = job(
        body,
        name=f"signup_{which}",
        tenant=attr if which == "tenant" else "none",
        idempotency_key=attr if which == "key" else (lambda i: "k"),
        registry=JobRegistry(),
    )
    with pytest.raises(JobsError) as info:
        await jobs.enqueue(h, Signup("o1", 1))
    code = "X_JOB_TENANT_REQUIRED" if which == "tenant" else "X_JOB_KEY_REQUIRED"
    assert info.value.code == code and info.value.detail == f"signup_{which}"
    function = "tenant" if which == "tenant" else "idempotency_key"
    assert f"the {function} function raised AttributeError" in info.value.message
    with pytest.raises(JobsError) as many:
        await jobs.enqueue_many(h, [Signup("o1", 1)])
    assert many.value.code == code
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}


def test_a_raising_key_function_is_typed_at_run_time_too() -> None:
    h = job(body, tenant="none", idempotency_key=lambda i: i["missing"], registry=JobRegistry())
    with pytest.raises(JobsError) as info:
        h.key_for({"n": 1})
    assert info.value.code == "X_JOB_KEY_REQUIRED" and "KeyError" in info.value.message


async def test_run_at_and_delay_take_datetime_and_timedelta() -> None:
    clock = FakeClock(1_800_000_000_000)
    jobs = Jobs(MemoryDriver(), clock=clock)
    h = make_handle()
    at = dt.datetime.fromtimestamp(1_800_000_123.456, tz=dt.timezone(dt.timedelta(hours=2)))
    assert jobs.build_record(h, {"n": 1}, run_at=at).run_at_ms == 1_800_000_123_456
    later = jobs.build_record(h, {"n": 1}, delay=dt.timedelta(seconds=5, microseconds=1500))
    assert later.run_at_ms == 1_800_000_005_001
    assert jobs.build_record(h, {"n": 1}, delay=dt.timedelta(0)).run_at_ms == clock.now_ms()
    assert jobs.build_record(h, {"n": 1}, run_at_ms=5).run_at_ms == 5


@pytest.mark.parametrize(
    ("options", "code", "detail"),
    [
        ({"run_at": dt.datetime(2030, 1, 1)}, "X_JOB_OPTION_INVALID", "run_at"),
        ({"run_at": dt.date(2030, 1, 1)}, "X_JOB_OPTION_INVALID", "run_at"),
        ({"run_at": 1_800_000_000_000}, "X_JOB_OPTION_INVALID", "run_at"),
        ({"run_at": dt.datetime(1960, 1, 1, tzinfo=dt.UTC)}, "X_JOB_OPTION_INVALID", "run_at"),
        ({"delay": dt.timedelta(seconds=-1)}, "X_JOB_OPTION_INVALID", "delay"),
        ({"delay": 5}, "X_JOB_OPTION_INVALID", "delay"),
        ({"delay": dt.timedelta(1), "delay_ms": 1}, "X_JOB_DECLARATION_INVALID", "run_at"),
        (
            {"run_at": dt.datetime(2030, 1, 1, tzinfo=dt.UTC), "delay": dt.timedelta(1)},
            "X_JOB_DECLARATION_INVALID",
            "run_at",
        ),
        ({"run_at_ms": 1, "delay_ms": 1}, "X_JOB_DECLARATION_INVALID", "run_at"),
    ],
)
async def test_run_time_options_are_refused_before_any_write(
    options: dict[str, Any], code: str, detail: str
) -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    with pytest.raises(JobsError) as info:
        await jobs.enqueue(make_handle(), {"n": 1}, **options)
    assert (info.value.code, info.value.detail) == (code, detail)
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}


@pytest.mark.parametrize("many", [False, True])
async def test_an_option_no_enqueue_takes_is_refused_by_name_before_any_write(many: bool) -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    with pytest.raises(JobsError) as info:
        if many:
            await jobs.enqueue_many(make_handle(), [{"n": 1}], delay_s=5, zz=1)
        else:
            await jobs.enqueue(make_handle(), {"n": 1}, delay_s=5)
    assert (info.value.code, info.value.detail) == ("X_JOB_OPTION_INVALID", "delay_s")
    assert "'delay_s'" in str(info.value) and "delay_ms" in str(info.value)
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}


async def test_enqueue_many_takes_one_id_per_input_so_a_retry_inserts_once() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver)
    h = make_handle()
    first = await jobs.enqueue_many(h, [{"n": 1}, {"n": 2}], ids=["a-1", "a-2"])
    assert [(r.id, r.deduped) for r in first] == [("a-1", False), ("a-2", False)]
    # The caller's own retry (say its answer was lost) sends the same ids: nothing new.
    again = await jobs.enqueue_many(h, [{"n": 1}, {"n": 2}], ids=["a-1", "a-2"])
    assert [(r.id, r.deduped) for r in again] == [("a-1", True), ("a-2", True)]
    assert sorted(await driver.job_get_many(["a-1", "a-2"])) == ["a-1", "a-2"]


@pytest.mark.parametrize(
    ("options", "detail"),
    [
        ({"id": "x"}, "id"),
        ({"run_id": "x"}, "run_id"),
        ({"ids": ["x"]}, "ids"),
        ({"ids": "xy"}, "ids"),
    ],
)
async def test_enqueue_many_refuses_one_id_for_every_record(
    options: dict[str, Any], detail: str
) -> None:
    driver = MemoryDriver()
    with pytest.raises(JobsError) as info:
        await Jobs(driver).enqueue_many(make_handle(), [{"n": 1}, {"n": 2}], **options)
    assert (info.value.code, info.value.detail) == ("X_JOB_DECLARATION_INVALID", detail)
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}


async def test_an_empty_id_is_refused_not_replaced() -> None:
    with pytest.raises(JobsError) as info:
        await Jobs(MemoryDriver()).enqueue(make_handle(), {"n": 1}, id="")
    assert info.value.code == "X_JOB_RECORD_INVALID"


@pytest.mark.parametrize("many", [False, True])
async def test_an_empty_queue_is_refused_not_replaced_by_the_default(many: bool) -> None:
    """`queue=""` (a form field left blank, an unset environment variable) went silently to
    the job's declared queue, where workers of another queue never look; it is refused as
    an empty id is, and nothing is stored."""
    driver = MemoryDriver()
    client = Jobs(driver)
    with pytest.raises(JobsError) as info:
        if many:
            await client.enqueue_many(make_handle(), [{"n": 1}], queue="")
        else:
            await client.enqueue(make_handle(), {"n": 1}, queue="")
    assert (info.value.code, info.value.detail) == ("X_JOB_RECORD_INVALID", "queue")
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}


class _TickingClock(FakeClock):
    """A clock that moves one millisecond every time it is read."""

    def now_ms(self) -> int:
        self.set(super().now_ms() + 1)
        return super().now_ms()


async def test_enqueue_many_builds_a_batch_at_one_time_under_its_options_once() -> None:
    driver = MemoryDriver()
    jobs = Jobs(driver, clock=_TickingClock())
    with acting_for("org-3"):
        results = await jobs.enqueue_many(make_handle(), [{"n": n} for n in range(3)], delay_ms=5)
    rows = await driver.job_get_many([r.id for r in results])
    created = {rows[r.id].created_at_ms for r in results}
    # One reading of the clock for the whole batch: the batch is enqueued at one time.
    assert len(created) == 1
    assert {(rows[r.id].run_at_ms, rows[r.id].tenant_id) for r in results} == {
        (created.pop() + 5, "org-3")
    }


def test_acting_for_what_is_no_org_id_is_refused_where_it_is_written() -> None:
    """`acting_for(5)` was taken, and refused only at the first enqueue inside the block (if
    any came), far from the line that was wrong: it is `X_JOB_OPTION_INVALID` at once, naming
    the type given; a str and None go through as before."""
    from jobs_core.errors import OptionInvalidError
    from jobs_core.tenant import current_tenant

    for bad in (5, b"acme", ["acme"], True):
        with pytest.raises(OptionInvalidError) as refused:
            acting_for(bad)  # type: ignore[arg-type]
        assert refused.value.detail == "tenant", refused.value
        assert f"not {type(bad).__name__}" in str(refused.value), refused.value
        assert current_tenant() is None
    with acting_for("acme"):
        assert current_tenant() == "acme"
        with acting_for(None):
            assert current_tenant() is None
        assert current_tenant() == "acme"


async def test_what_is_no_job_handle_or_no_list_of_inputs_is_refused_typed() -> None:
    """A handle that is no declared job raised a bare AttributeError from inside the facade, and
    a batch of inputs given as one string enqueued one job per letter. Each is a typed
    refusal naming the argument, nothing stored."""
    driver = MemoryDriver()
    client = Jobs(driver)
    calls: list[tuple[str, Any]] = [
        ("handle", lambda: client.enqueue("send_welcome", {})),  # type: ignore[arg-type]
        ("handle", lambda: client.enqueue_many(print, [{}])),  # type: ignore[arg-type]
        ("inputs", lambda: client.enqueue_many(make_handle(), "abc")),
        ("inputs", lambda: client.enqueue_many(make_handle(), b"ab")),  # type: ignore[arg-type]
    ]
    for detail, call in calls:
        with pytest.raises(JobsError) as info:
            await call()
        assert (info.value.code, info.value.detail) == ("X_JOB_DECLARATION_INVALID", detail)
    for options in ({"on_complete": "report"}, {"on_complete": make_handle(), "on_success": 5}):
        with pytest.raises(JobsError) as info:
            client.batch(**options)  # type: ignore[arg-type]
        assert info.value.code == "X_JOB_DECLARATION_INVALID", options
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}
