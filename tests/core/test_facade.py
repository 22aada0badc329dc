"""The enqueue facade from async and from plain sync code; the tenant and JSON it stores."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

import jobs_core
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
    with pytest.raises(RuntimeError):
        jobs.enqueue_sync(make_handle(), {"n": 1})


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
