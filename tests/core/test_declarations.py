"""job() and the enqueue facade refuse bad input with a typed code, before anything is written."""

from __future__ import annotations

import datetime as dt
import enum
import math
import random
import types
from typing import Any

import pytest

from jobs_core.driver import MAX_ENQUEUE_BATCH
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.job import JobRegistry, job, jobs_of
from jobs_core.jsonform import dumps, holds_nul
from jobs_core.leases import Concurrency, RateLimit
from jobs_core.records import ClaimParams
from jobs_core.retry import Retry
from jobs_memory import MemoryDriver
from tests.core.support import HUGE_INT, deep_list


async def body(input: Any, ctx: Any) -> None:
    return None


def code_of(fn: Any) -> str:
    with pytest.raises(JobsError) as info:
        fn()
    return info.value.code


def test_name_defaults_to_the_function_and_a_second_handle_is_refused() -> None:
    reg = JobRegistry()
    first = job(body, tenant="none", registry=reg)
    assert first.name == "body"
    assert code_of(lambda: job(body, tenant="none", registry=reg)) == "X_JOB_DUPLICATE"
    named = job(body, tenant="none", name="other", registry=reg)
    assert named.name == "other" and reg.names() == ["body", "other"]


def test_module_export_names_are_checked() -> None:
    reg = JobRegistry()
    handle = job(body, tenant="none", registry=reg)
    good = types.ModuleType("good")
    good.body = handle  # type: ignore[attr-defined]
    assert jobs_of(good) == [handle]
    renamed = types.ModuleType("renamed")
    renamed.elsewhere = handle  # type: ignore[attr-defined]
    assert code_of(lambda: jobs_of(renamed)) == "X_JOB_DUPLICATE"
    twice = types.ModuleType("twice")
    twice.body = handle  # type: ignore[attr-defined]
    twice.alias = handle  # type: ignore[attr-defined]
    assert code_of(lambda: jobs_of(twice)) == "X_JOB_DUPLICATE"


def test_tenant_is_required() -> None:
    reg = JobRegistry()
    bad: Any = None
    assert code_of(lambda: job(body, tenant=bad, registry=reg)) == "X_JOB_TENANT_REQUIRED"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("timeout", math.nan),
        ("timeout", -1.0),
        ("timeout", 0),
        ("timeout", math.inf),
        ("step_timeout", math.nan),
        ("step_timeout", 0.0),
        # Ints past a float's range: refused, no OverflowError escaping.
        pytest.param("timeout", 10**400, id="timeout-huge"),
        pytest.param("step_timeout", -(10**400), id="step_timeout-huge"),
        pytest.param("event_poll", 10**400, id="event_poll-huge"),
        ("event_poll", -0.5),
        ("priority", 101),
        ("priority", -1),
        ("priority", 1.5),
    ],
)
def test_numeric_options_are_refused_by_name(option: str, value: Any) -> None:
    reg = JobRegistry()
    with pytest.raises(JobsError) as info:
        job(body, tenant="none", registry=reg, **{option: value})
    assert info.value.code == "X_JOB_OPTION_INVALID"
    assert info.value.detail == option
    assert reg.names() == []


@pytest.mark.parametrize(
    ("concurrency", "code", "detail"),
    [
        (-1, "X_JOB_OPTION_INVALID", "concurrency"),
        (2.5, "X_JOB_OPTION_INVALID", "concurrency"),
        (math.nan, "X_JOB_OPTION_INVALID", "concurrency"),
        (True, "X_JOB_OPTION_INVALID", "concurrency"),
        (10_001, "X_JOB_OPTION_INVALID", "concurrency"),
        ({"key": lambda i: "k", "limit": -1}, "X_JOB_OPTION_INVALID", "concurrency.limit"),
        ({"key": "k", "limit": 1}, "X_JOB_DECLARATION_INVALID", "concurrency.key"),
        ({"limit": 1}, "X_JOB_DECLARATION_INVALID", "concurrency"),
        ({"key": lambda i: "k", "limit": 1, "per": 2}, "X_JOB_DECLARATION_INVALID", "concurrency"),
        (
            {"key": lambda i: "k", "limit": 1, "when_busy": "queue"},
            "X_JOB_DECLARATION_INVALID",
            "concurrency.when_busy",
        ),
        (Concurrency(2, when_busy="fail"), "X_JOB_DECLARATION_INVALID", "concurrency.when_busy"),
    ],
)
def test_concurrency_is_refused_by_name(concurrency: Any, code: str, detail: str) -> None:
    reg = JobRegistry()
    with pytest.raises(JobsError) as info:
        job(body, tenant="none", registry=reg, concurrency=concurrency)
    assert (info.value.code, info.value.detail) == (code, detail)
    assert reg.names() == []


@pytest.mark.parametrize(
    ("make", "code", "detail"),
    [
        (lambda: RateLimit(0, per=1), "X_JOB_OPTION_INVALID", "rate_limit.limit"),
        (lambda: RateLimit(5, per=math.nan), "X_JOB_OPTION_INVALID", "rate_limit.per"),
        (lambda: RateLimit(5, per=0), "X_JOB_OPTION_INVALID", "rate_limit.per"),
        (lambda: RateLimit(5, per=30 * 86_400), "X_JOB_OPTION_INVALID", "rate_limit.per"),
        (lambda: RateLimit(5, per=1, by="user"), "X_JOB_DECLARATION_INVALID", "rate_limit.by"),
        (
            lambda: job(
                body, tenant="none", registry=JobRegistry(), rate_limit=[RateLimit(1, per=1)] * 2
            ),
            "X_JOB_DECLARATION_INVALID",
            "rate_limit",
        ),
    ],
)
def test_rate_limits_are_refused_by_name(make: Any, code: str, detail: str) -> None:
    with pytest.raises(JobsError) as info:
        make()
    assert (info.value.code, info.value.detail) == (code, detail)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attempts", 0),
        ("attempts", math.nan),
        ("base_ms", 0),
        ("factor", 0.5),
        ("factor", math.inf),
        ("cap_ms", 1),
        ("jitter", "sometimes"),
    ],
)
def test_retry_options_are_refused_by_name(field: str, value: Any) -> None:
    with pytest.raises(JobsError) as info:
        Retry(**{field: value})
    assert info.value.code == "X_JOB_OPTION_INVALID"
    assert info.value.detail == f"retry.{field}"


def test_backoff_curve_and_jitter_modes() -> None:
    rng = random.Random(7)
    plain = Retry(attempts=10, base_ms=100, factor=2, cap_ms=1_000, jitter="none")
    assert [plain.delay_ms(n, rng) for n in range(1, 7)] == [100, 200, 400, 800, 1000, 1000]
    full = Retry(attempts=10, base_ms=100, cap_ms=1_000, jitter="full")
    equal = Retry(attempts=10, base_ms=100, cap_ms=1_000, jitter="equal")
    for n in range(1, 8):
        d = min(1_000, 100 * 2 ** (n - 1))
        assert all(0 <= full.delay_ms(n, rng) <= d for _ in range(50))
        assert all(d // 2 <= equal.delay_ms(n, rng) <= d for _ in range(50))


def test_a_curve_past_a_floats_range_stays_at_its_cap() -> None:
    """`factor ** (n - 1)` passes a float's range within the attempts a declaration may give
    (100.0 ** 154 already does): the delay is the cap, never an OverflowError out of the
    worker's settle (which left the job to its lease at each such attempt)."""
    rng = random.Random(7)
    steep = Retry(attempts=1_000, base_ms=1, factor=100.0, cap_ms=60_000, jitter="none")
    assert [steep.delay_ms(n, rng) for n in (1, 2, 155, 160, 1_000)] == [1, 100] + [60_000] * 3
    # An attempt past the declaration's own (a row enqueued under an older one) too.
    assert Retry(jitter="none").delay_ms(5_000, rng) == Retry().cap_ms


@pytest.mark.parametrize(
    "bad_input",
    [{"x": math.nan}, {"s": {1, 2}}, {"o": object()}, {"nul": "a\x00b"}, {(1, 2): "tuple key"}],
)
async def test_non_json_input_is_refused_before_any_write(bad_input: Any) -> None:
    driver = MemoryDriver()
    reg = JobRegistry()
    h = job(body, tenant="none", idempotency_key=lambda i: "k", registry=reg)
    with pytest.raises(JobsError) as info:
        await Jobs(driver).enqueue(h, bad_input)
    assert info.value.code == "X_JOB_INPUT_INVALID"
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}


class Color(enum.Enum):
    RED = "red"


def test_the_json_form_is_what_json_makes_of_a_value() -> None:
    # A literal backslash-u0000 in a string is text, not a NUL: stored, not refused.
    value = {1: "a", None: [dt.date(2026, 1, 2), Color.RED], "lit": "\\u0000 stays"}
    text = dumps(value)
    assert text == '{"1":"a","null":["2026-01-02","red"],"lit":"\\\\u0000 stays"}'
    assert not holds_nul(text)
    assert holds_nul('{"a":"\\u0000"}')


async def test_missing_key_and_missing_tenant_are_refused_before_any_write() -> None:
    driver = MemoryDriver()
    reg = JobRegistry()
    keyless = job(body, tenant="none", name="keyless", registry=reg)
    orgless = job(
        body,
        tenant=lambda i: i.get("org"),
        idempotency_key=lambda i: "k",
        name="orgless",
        registry=reg,
    )
    jobs = Jobs(driver)
    with pytest.raises(JobsError) as info:
        await jobs.enqueue(keyless, {})
    assert info.value.code == "X_JOB_KEY_REQUIRED"
    with pytest.raises(JobsError) as info:
        await jobs.enqueue(orgless, {"org": None})
    assert info.value.code == "X_JOB_TENANT_REQUIRED"
    with pytest.raises(JobsError) as info:
        await jobs.enqueue_many(keyless, [{}, {}])
    assert info.value.code == "X_JOB_KEY_REQUIRED"
    assert await driver.queue_demand(["default"], 2**41) == {"default": 0}
    assert (await jobs.enqueue(keyless, {}, key="given")).deduped is False


async def test_one_bad_record_refuses_the_whole_batch_and_keeps_the_store() -> None:
    driver = MemoryDriver()
    reg = JobRegistry()
    h = job(body, tenant="none", idempotency_key=lambda i: str(i["n"]), registry=reg)
    jobs = Jobs(driver)
    first = await jobs.enqueue(h, {"n": 0})
    with pytest.raises(JobsError) as info:
        await jobs.enqueue_many(h, [{"n": 1}, {"n": 2, "bad": math.inf}])
    assert info.value.code == "X_JOB_INPUT_INVALID"
    with pytest.raises(JobsError) as info:
        await jobs.enqueue_many(h, [{"n": i} for i in range(MAX_ENQUEUE_BATCH + 1)])
    assert info.value.code == "X_JOB_BATCH_TOO_LARGE"
    assert await driver.queue_demand(["default"], 2**41) == {"default": 1}
    assert list(await driver.job_get_many([first.id])) == [first.id]


async def test_a_claim_must_name_a_queue() -> None:
    driver = MemoryDriver()
    with pytest.raises(JobsError) as info:
        await driver.job_claim(ClaimParams((), "w", 1, 1000, 0))
    assert info.value.code == "X_JOB_CLAIM_QUEUES_EMPTY"


@pytest.mark.parametrize("value", [HUGE_INT, deep_list()], ids=["huge int", "deep list"])
def test_a_value_repr_cannot_spell_is_refused_typed(value: Any) -> None:
    """Every refusal that names the offending value names one `repr` cannot make by its type:
    the refusal stays the typed one, never a ValueError or RecursionError out of its message."""
    from jobs_core.factories import backfill, consumer
    from jobs_core.factories.consumers.sources import function
    from jobs_core.factories.ledger import posting_lines
    from jobs_core.factories.purge import PurgeTarget, purge

    def lines(amount: Any, account: Any = "cash", currency: Any = "EUR") -> Any:
        return lambda: posting_lines(
            [{"account": account, "currency": currency, "amount": amount}, ("bank", "EUR", -1)]
        )

    reg = JobRegistry()
    assert code_of(lines(value)) == "X_LEDGER_AMOUNT_INVALID"
    assert code_of(lines(1, account=value)) == "X_LEDGER_ACCOUNT_INVALID"
    assert code_of(lines(1, currency=value)) == "X_LEDGER_CURRENCY_INVALID"

    async def fetch(cursor: Any, limit: int) -> Any:
        return [], cursor

    assert (
        code_of(
            lambda: consumer(
                value,
                source=function(fetch),
                handle=lambda r, t: None,
                tenant="none",
                registry=reg,
            )
        )
        == "X_CONSUMER_DECLARATION_INVALID"
    )
    made = lambda: backfill(name=value, tenant="none", handle=print, pages=fetch)  # noqa: E731
    assert code_of(made) == "X_BACKFILL_DECLARATION_INVALID"
    target = PurgeTarget(name=value, purge=lambda d, c, n: None)  # type: ignore[arg-type,return-value]
    assert code_of(lambda: purge(name="p", targets=[target])) == "X_PURGE_DECLARATION_INVALID"
    assert code_of(lambda: purge(name="p", targets=[value])) == "X_PURGE_DECLARATION_INVALID"
