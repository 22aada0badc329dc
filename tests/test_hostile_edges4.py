"""Hostile values at the edges the earlier passes left: each one refused with its stable `X_*`
code before anything is written (the store unchanged), never an untyped exception raised late
or a declaration that silently means something else.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.leases import RateLimit, with_lock
from jobs_core.outbox.stage import staged_record
from jobs_core.records import ClaimParams, JobListParams
from jobs_core.tenant import acting_for
from tests.core.support import HUGE_INT, T0, deep_list, fresh_store

TRACE = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


def body(ctx: Any, x: Any) -> Any:
    return x


def repr_id(value: object) -> str:
    """A test id for `value` (an int past 4,300 digits has no `str`)."""
    return type(value).__name__ if value == HUGE_INT else repr(value)[:20]


def declared(**options: Any) -> JobHandle:
    return job(body, tenant="none", name="edges4", registry=JobRegistry(), **options)


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as store:
        yield store


async def stored_ids(driver: JobDriver) -> list[str]:
    page = await driver.job_list(JobListParams(limit=100))
    return [r.id for r in page.jobs]


def refused(code: str, call: Any) -> JobsError:
    with pytest.raises(JobsError) as caught:
        call()
    assert caught.value.code == code, caught.value
    return caught.value


# --- the enqueue's traceparent: stamped by tracing, never a caller's option --------------------


@pytest.mark.parametrize("value", ["00-" + "a" * 32 + "-" + "b" * 16 + "-01", None, "\x00", 5])
async def test_enqueue_refuses_a_traceparent_option_with_its_code_storing_nothing(
    driver: JobDriver, value: Any
) -> None:
    """`traceparent=` was a bare TypeError ("multiple values for keyword argument") from
    enqueue, enqueue_many and the outbox's stage: it is the tracing's to stamp."""
    jobs = Jobs(driver)
    handle = declared()
    for call in (
        lambda: jobs.enqueue(handle, {"a": 1}, key="k", traceparent=value),
        lambda: jobs.enqueue_many(handle, [{"a": 1}], key="k", traceparent=value),
    ):
        with pytest.raises(JobsError) as caught:
            await call()
        assert caught.value.code == "X_JOB_OPTION_INVALID"
        assert caught.value.detail == "traceparent"
    refused(
        "X_JOB_OPTION_INVALID",
        lambda: staged_record(handle, {"a": 1}, clock=FakeClock(0), key="k", traceparent=value),
    )
    assert await stored_ids(driver) == []


# --- job() options typed as one thing and given another ---------------------------------------


@pytest.mark.parametrize(
    "value", ["abc", 3, 3.0, True, {"attempts": 2}, HUGE_INT], ids=lambda v: type(v).__name__
)
def test_job_refuses_a_retry_that_is_not_a_retry(value: Any) -> None:
    """A non-`Retry` was accepted, then every enqueue raised AttributeError ('attempts')."""
    error = refused("X_JOB_DECLARATION_INVALID", lambda: declared(retry=value))
    assert error.detail == "retry"


@pytest.mark.parametrize("value", ["abc", 3, True, ["x"]])
def test_job_refuses_an_on_settled_hook_that_is_not_callable(value: Any) -> None:
    """It was accepted, and each settle's call of it failed (logged, given up): the hook
    never ran. The worker's own `on_settled` was already refused so."""
    error = refused("X_JOB_DECLARATION_INVALID", lambda: declared(on_settled=value))
    assert error.detail == "on_settled"


@pytest.mark.parametrize(
    "value",
    ["card", "", 3, 1.5, None, True, [3], ["card", None], [["card"]], deep_list()],
    ids=lambda v: type(v).__name__ + str(len(str(v)) if not isinstance(v, list) else len(v)),
)
def test_job_refuses_sensitive_that_is_not_field_names(value: Any) -> None:
    """`sensitive="card"` was read as the fields c, a, r, d — the card went unredacted; a
    number was a bare TypeError, a nested list 'unhashable type'."""
    error = refused("X_JOB_DECLARATION_INVALID", lambda: declared(sensitive=value))
    assert error.detail == "sensitive"


def test_job_sensitive_names_are_kept_as_given() -> None:
    handle = declared(sensitive=("card", "<script>", "é" * 300))
    assert handle.sensitive == frozenset({"card", "<script>", "é" * 300})
    assert declared(sensitive=frozenset({"cvv"})).sensitive == frozenset({"cvv"})


@pytest.mark.parametrize("value", [3, 1.5, True, "", "limit"])
def test_job_refuses_a_rate_limit_that_is_not_rate_limits(value: Any) -> None:
    """A number was a bare TypeError ('not iterable'); an empty string read as no limit."""
    error = refused("X_JOB_DECLARATION_INVALID", lambda: declared(rate_limit=value))
    assert error.detail == "rate_limit"
    assert declared(rate_limit=RateLimit(limit=1, per=1.0)).rate_limits


# --- with_lock's key: a string, never what str() makes of another value -----------------------


@pytest.mark.parametrize(
    "value",
    [None, 5, True, b"ab", 1.5, ["a"], "", HUGE_INT, deep_list()],
    ids=["None", "int", "bool", "bytes", "float", "list", "empty", "huge-int", "deep-list"],
)
async def test_with_lock_refuses_a_key_that_is_not_a_non_empty_string(
    driver: JobDriver, value: Any
) -> None:
    """`key=None` took the lock "lock:None" (the one `key="None"` takes), `key=5` the one of
    "5"; an int past 4,300 digits raised ValueError, a deep list RecursionError — all before
    any refusal. Now `X_JOB_OPTION_INVALID` before the store is asked, and nothing held."""
    clock = FakeClock(T0)

    async def take() -> None:
        async with with_lock(value, driver=driver, clock=clock):
            pytest.fail("the block ran under a refused key")

    with pytest.raises(JobsError) as caught:
        await take()
    assert (caught.value.code, caught.value.detail) == ("X_JOB_OPTION_INVALID", "key")
    async with with_lock("None", driver=driver, clock=clock, wait=0):
        pass  # free: the refused call held nothing
    assert await driver.lease_holders("lock:None", clock.now_ms()) == []


# --- a caller acting for an org enqueues only for that org -------------------------------------


async def test_code_acting_for_an_org_cannot_enqueue_for_another_tenant(driver: JobDriver) -> None:
    """The row's tenant is the idempotency namespace and the rate bucket: acme's code naming
    `tenant_id="globex"` with globex's key was answered `deduped` with GLOBEX's job id (then
    `result()` of it read globex's result), and spent globex's per-tenant rate. Refused as
    `send_event` refuses it (`X_JOB_TENANT_MISMATCH`), nothing stored; `acting_for(other)`
    around the call says the crossing in code."""
    jobs = Jobs(driver)
    handle = declared()
    theirs = await jobs.enqueue(handle, {"invoice": 42}, key="inv-42", tenant_id="globex")
    with acting_for("acme"):
        for other in ("globex", None):
            for many in (False, True):
                with pytest.raises(JobsError) as caught:
                    if many:
                        await jobs.enqueue_many(handle, [{}], key="inv-42", tenant_id=other)
                    else:
                        await jobs.enqueue(handle, {}, key="inv-42", tenant_id=other)
                assert (caught.value.code, caught.value.detail) == (
                    "X_JOB_TENANT_MISMATCH",
                    "tenant_id",
                )
        refused(
            "X_JOB_TENANT_MISMATCH",
            lambda: staged_record(handle, {}, clock=FakeClock(T0), key="k", tenant_id="globex"),
        )
        assert await stored_ids(driver) == [theirs.id]
        own = await jobs.enqueue(handle, {"x": 1}, key="inv-42", tenant_id="acme")
        assert not own.deduped
    with acting_for("globex"):
        again = await jobs.enqueue(handle, {"invoice": 42}, key="inv-42", tenant_id="globex")
    assert again.deduped and again.id == theirs.id


# --- a batch's callbacks: refused when the batch is made, before any member is written ---------


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"input": float("nan")}, "X_JOB_INPUT_INVALID"),
        ({"input": deep_list()}, "X_JOB_INPUT_INVALID"),
        ({"priority": "high"}, "X_JOB_OPTION_INVALID"),
        ({"delay_s": 5}, "X_JOB_OPTION_INVALID"),
        ({"queue": "a\x00b"}, "X_JOB_RECORD_INVALID"),
        ({"tenant_id": ""}, "X_JOB_RECORD_INVALID"),
        ({"key": "\ud800"}, "X_JOB_RECORD_INVALID"),
        ({"enqueued_by": "é" * 201}, "X_JOB_RECORD_INVALID"),
        ({"id": "a\x00b"}, "X_JOB_RECORD_INVALID"),
        ({"id": 5}, "X_JOB_RECORD_INVALID"),
        ({"id": "\ud800"}, "X_JOB_RECORD_INVALID"),
        ({"id": ""}, "X_JOB_RECORD_INVALID"),
    ],
    ids=[
        "nan-input",
        "deep-input",
        "priority",
        "unknown",
        "queue",
        "tenant",
        "key",
        "by",
        "id",
        "int-id",
        "surrogate-id",
        "empty-id",
    ],
)
async def test_a_batch_refuses_what_its_callbacks_cannot_carry_before_any_member(
    driver: JobDriver, options: dict[str, Any], code: str
) -> None:
    """They were refused only by `close()`, after the members were written: the members ran
    as a batch whose callback could never be enqueued."""
    jobs = Jobs(driver)
    member = job(body, tenant="none", name="member", registry=JobRegistry())
    with pytest.raises(JobsError) as caught:
        batch = jobs.batch(on_complete=declared(), **options)
        await batch.enqueue(member, {"n": 1}, key="m1")
        await batch.close()
    assert caught.value.code == code
    assert await stored_ids(driver) == []


# --- after= and ids=: typed as lists, refused as such -----------------------------------------


@pytest.mark.parametrize("value", [5, True, 1.5, HUGE_INT, {"a": 1}, b"ab"], ids=repr_id)
async def test_enqueue_refuses_an_after_that_is_not_a_list_of_ids(
    driver: JobDriver, value: Any
) -> None:
    """A number was a bare TypeError ('not iterable'); a dict waited on its keys."""
    jobs = Jobs(driver)
    with pytest.raises(JobsError) as caught:
        await jobs.enqueue(declared(), {"a": 1}, key="k", after=value)
    assert (caught.value.code, caught.value.detail) == ("X_JOB_OPTION_INVALID", "after")
    assert await stored_ids(driver) == []


@pytest.mark.parametrize("value", [5, True, 1.5, HUGE_INT, ["x", "x"]], ids=repr_id)
async def test_enqueue_many_refuses_ids_that_are_not_one_distinct_id_per_input(
    driver: JobDriver, value: Any
) -> None:
    """A number was a bare TypeError ('has no len()'); one id twice stored the first input
    and answered the second `deduped` under its id — the second input silently dropped."""
    jobs = Jobs(driver)
    with pytest.raises(JobsError) as caught:
        await jobs.enqueue_many(declared(), [{"n": 1}, {"n": 2}], key="k", ids=value)
    assert (caught.value.code, caught.value.detail) == ("X_JOB_DECLARATION_INVALID", "ids")
    assert await stored_ids(driver) == []


# --- what a worker and a scheduler are given to run ---------------------------------------------


@pytest.mark.parametrize("value", [5, "charge", [5], {"charge": 5}, [None]], ids=repr_id)
def test_a_worker_and_a_scheduler_refuse_what_is_no_declaration(value: Any) -> None:
    """A number, a string, or a list or mapping holding one was an untyped TypeError or
    AttributeError ('has no attribute name') out of the constructor."""
    from jobs_core.scheduler import Scheduler
    from jobs_core.worker import Worker
    from jobs_memory import MemoryDriver

    error = refused("X_JOB_DECLARATION_INVALID", lambda: Worker(MemoryDriver(), value))
    assert error.detail == "jobs"
    error = refused("X_TASK_DECLARATION_INVALID", lambda: Scheduler(MemoryDriver(), value))
    assert error.detail == "tasks"


def test_a_heartbeat_not_shorter_than_the_lease_is_an_option_refusal() -> None:
    """It was a bare JobsError, whose code is X_DRIVER_ERROR: the store's, not the caller's."""
    from jobs_core.worker import Worker
    from jobs_memory import MemoryDriver

    error = refused(
        "X_JOB_OPTION_INVALID",
        lambda: Worker(MemoryDriver(), [declared()], lease=1, heartbeat_every=1),
    )
    assert error.detail == "heartbeat_every"


# --- factory declarations: a list option given a number -----------------------------------------


@pytest.mark.parametrize("value", [5, 1.5, True, HUGE_INT], ids=repr_id)
def test_factory_list_options_refuse_a_number_with_their_code(tmp_path: Path, value: Any) -> None:
    """`webhook_receiver(sensitive=)`, `webhook(allow_networks=)` and `export_rows(columns=)`
    given a number were bare TypeErrors ('not iterable')."""
    from jobs_core.factories.rows.exports import export_rows
    from jobs_core.factories.webhooks.declare import webhook
    from jobs_core.factories.webhooks.receiver import webhook_receiver

    def handle(*args: Any) -> None:
        return None

    error = refused(
        "X_WEBHOOK_RECEIVER_DECLARATION_INVALID",
        lambda: webhook_receiver(
            name="r",
            verify=lambda *a: None,
            handle=handle,
            tenant="none",
            sensitive=value,
            registry=JobRegistry(),
        ),
    )
    assert error.detail == "sensitive"
    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    error = refused(
        "X_WEBHOOK_DECLARATION_INVALID",
        lambda: webhook(
            "w", secrets=[secret], tenant="none", allow_networks=value, registry=JobRegistry()
        ),
    )
    assert error.detail == "allow_networks"
    error = refused(
        "X_EXPORT_DECLARATION_INVALID",
        lambda: export_rows(
            name="e",
            tenant="none",
            sink=str(tmp_path),
            pages=lambda *a: [],
            columns=value,
            registry=JobRegistry(),
        ),
    )
    assert error.detail == "columns"


def test_webhook_allow_networks_refuses_a_value_repr_cannot_spell() -> None:
    """A deep list in the list was a RecursionError making the refusal's text."""
    from jobs_core.factories.webhooks.declare import webhook

    secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    for bad in (deep_list(), HUGE_INT):
        error = refused(
            "X_WEBHOOK_DECLARATION_INVALID",
            lambda bad=bad: webhook(
                "w", secrets=[secret], tenant="none", allow_networks=[bad], registry=JobRegistry()
            ),
        )
        assert error.detail == "allow_networks"


async def test_a_body_acting_for_an_org_cannot_enqueue_children_for_another(
    driver: JobDriver,
) -> None:
    """`ctx.step.enqueue_many` built its records itself, past the enqueue's checks: a body
    acting for acme enqueued children under globex's tenant (and a `traceparent=` of its own)."""
    clock = FakeClock(T0)
    jobs = Jobs(driver, clock=clock)
    parent = job(body, tenant=lambda i: i["org"], name="parent", registry=JobRegistry())
    child = job(body, tenant=lambda i: i["org"], name="child", registry=JobRegistry())
    with acting_for("acme"):
        done = await jobs.enqueue(parent, {"org": "acme"}, key="p")
    (claimed,) = (await driver.job_claim(ClaimParams(("default",), "w", 1, 30_000, T0))).jobs
    with acting_for("acme"):
        ctx = JobContext.for_test(claimed, driver, tenant="acme", clock=clock)
        for n, options in enumerate(({"tenant_id": "globex"}, {"tenant_id": None})):
            with pytest.raises(JobsError) as caught:
                await ctx.step.enqueue_many(f"kids{n}", child, [{"org": "acme"}], **options)
            assert (caught.value.code, caught.value.detail) == (
                "X_JOB_TENANT_MISMATCH",
                "tenant_id",
            )
            with pytest.raises(JobsError) as caught:
                await ctx.step.enqueue(f"kid{n}", child, {"org": "acme"}, **options)
            assert caught.value.code == "X_JOB_TENANT_MISMATCH"
        with pytest.raises(JobsError) as caught:
            await ctx.step.enqueue_many("traced", child, [{"org": "acme"}], traceparent=TRACE)
        assert (caught.value.code, caught.value.detail) == ("X_JOB_OPTION_INVALID", "traceparent")
        assert await stored_ids(driver) == [done.id]
        assert await driver.step_list(claimed.run_id) == []
        ids = await ctx.step.enqueue_many("kids", child, [{"org": "acme"}])
    rows = await driver.job_get_many(ids)
    assert [r.tenant_id for r in rows.values()] == ["acme"]


@pytest.mark.parametrize(
    "value", [5, None, "memory", b"memory", object()], ids=["int", "None", "url", "bytes", "object"]
)
def test_a_client_refuses_what_is_no_driver_when_made(value: Any) -> None:
    """`Jobs("memory")` (a URL where `configure` takes one) and `configure(5)` were accepted,
    and every enqueue then raised AttributeError ('has no attribute job_enqueue')."""
    from jobs_core.facade import configure, current_client

    before = current_client()
    error = refused("X_JOB_DECLARATION_INVALID", lambda: Jobs(value))
    assert error.detail == "driver"
    if not isinstance(value, str):  # a string is a URL to configure
        error = refused("X_JOB_DECLARATION_INVALID", lambda: configure(value))
        assert error.detail == "driver"
    assert current_client() is before


async def test_a_batch_made_acting_for_an_org_cannot_name_another_for_its_callbacks(
    driver: JobDriver,
) -> None:
    """The callbacks' records were built past the enqueue's checks: a batch made acting for
    acme with `tenant_id="globex"` and globex's key answered globex's job from `close()`."""
    jobs = Jobs(driver)
    handle = declared()
    theirs = await jobs.enqueue(handle, {"invoice": 42}, key="inv-42", tenant_id="globex")
    with acting_for("acme"):
        for options in ({"tenant_id": "globex", "key": "inv-42"}, {"traceparent": TRACE}):
            with pytest.raises(JobsError) as caught:
                jobs.batch(on_complete=handle, **options)
            assert caught.value.code in ("X_JOB_TENANT_MISMATCH", "X_JOB_OPTION_INVALID")
            assert caught.value.detail in options
    assert await stored_ids(driver) == [theirs.id]


@pytest.mark.parametrize("value", [5, "now", object()], ids=["int", "str", "object"])
def test_a_clock_that_is_no_clock_is_refused_where_it_is_given(value: Any) -> None:
    """`Jobs`, `Worker` and `Scheduler` took any `clock=`: the worker then failed at start,
    a client at its first enqueue (AttributeError: 'now_ms'); a worker's `rng=` at its first
    jittered retry."""
    from jobs_core.scheduler import Scheduler, TaskRegistry, task
    from jobs_core.worker import Worker
    from jobs_memory import MemoryDriver

    handle = declared()
    every = task("t", cron="* * * * *", tz="UTC", job=handle, registry=TaskRegistry())
    for make in (
        lambda: Jobs(MemoryDriver(), clock=value),
        lambda: Worker(MemoryDriver(), [handle], clock=value),
        lambda: Scheduler(MemoryDriver(), [every], clock=value),
    ):
        assert refused("X_JOB_OPTION_INVALID", make).detail == "clock"
    error = refused("X_JOB_OPTION_INVALID", lambda: Worker(MemoryDriver(), [handle], rng=value))
    assert error.detail == "rng"
