"""The webhook family's scenarios: the endpoint ledger `webhook()` sends through. Endpoints put,
moved and listed, one tenant's apart from another's (no tenant is a key of its own); a failure
streak that disables an endpoint at exactly its `disable_after`, cleared by a delivery and by
the operator's enable; every attempt fenced on the claim that made it (a lapsed lease nobody
reclaimed still holds), one per claim (a retried call moves nothing twice); attempts listed
newest first, excerpts kept whole at their byte limit; attempts purged by age, oldest first,
endpoints and streaks untouched; refused calls writing nothing.

Each attempt is made under a row of its own queue, claimed by `w1` unless said. A driver that
does not declare `webhooks` must refuse the calls with `X_DRIVER_CAPABILITY_MISSING`; these
scenarios check that much and stop there.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from jobs_core.driver import (
    MAX_PURGE_LIMIT,
    MAX_WEBHOOK_EXCERPT_BYTES,
    MAX_WEBHOOK_LIST,
    MAX_WEBHOOK_URL_BYTES,
    JobDriver,
)
from jobs_core.records import (
    Ack,
    ClaimedJob,
    EnqueueResult,
    Fence,
    WebhookAttempt,
    WebhookAttemptAnswer,
    WebhookAttemptListParams,
    WebhookAttemptPut,
    WebhookEndpoint,
    WebhookEndpointEnable,
    WebhookEndpointPut,
    WebhookOutcome,
)
from jobs_core.testing.compare import exactly_bytes
from jobs_core.testing.scenarios.support import T0, Scenario, claim_one, new_job, refused

URL = "https://hooks.example.com/in?x='1'&y=<b>"
LONG_URL = "https://h.example/" + exactly_bytes("", "é☃😀", MAX_WEBHOOK_URL_BYTES - 18)
LONG_EXCERPT = exactly_bytes("<html>\n", "é☃😀'\"", MAX_WEBHOOK_EXCERPT_BYTES)


async def _unsupported(driver: JobDriver) -> bool:
    if driver.capabilities().webhooks:
        return False
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.webhook_endpoint_list(10))
    await refused(
        "X_DRIVER_CAPABILITY_MISSING", driver.webhook_attempt_put(_attempt(Fence("j", 1, "w1")))
    )
    await refused("X_DRIVER_CAPABILITY_MISSING", driver.webhook_attempt_purge(T0, 10))
    return True


async def _held(driver: JobDriver, job_id: str, now: int = T0, worker: str = "w1") -> ClaimedJob:
    """Row `job_id` in a queue of its own, claimed at `now` by `worker` (lease 1000 ms)."""
    job = new_job(job_id, queue=f"q-{job_id}", run_at_ms=now, created_at_ms=now)
    assert await driver.job_enqueue(job) == EnqueueResult(job_id, deduped=False)
    return await claim_one(driver, now, job.queue, worker=worker)


def _attempt(
    f: Fence,
    outcome: WebhookOutcome = "failed",
    *,
    tenant: str | None = "t1",
    endpoint: str = "orders",
    now: int = T0,
    disable_after: int = 3,
    status: int | None = 500,
    excerpt: str = "oops",
) -> WebhookAttemptPut:
    return WebhookAttemptPut(
        fence=f,
        tenant_id=tenant,
        endpoint=endpoint,
        event_id=f"msg-{f.job_id}",
        outcome=outcome,
        status_code=200 if outcome == "delivered" else status,
        latency_ms=12,
        excerpt=excerpt,
        error=None if outcome == "delivered" else "X_WEBHOOK_DELIVERY_FAILED",
        disable_after=disable_after,
        now_ms=now,
    )


async def _put(
    driver: JobDriver, tenant: str | None = "t1", endpoint: str = "orders", now: int = T0
) -> WebhookEndpoint:
    return await driver.webhook_endpoint_put(WebhookEndpointPut(tenant, endpoint, URL, now))


async def _get(
    driver: JobDriver, tenant: str | None = "t1", endpoint: str = "orders"
) -> WebhookEndpoint:
    got = await driver.webhook_endpoint_get(tenant, endpoint)
    assert got is not None, f"no endpoint {tenant!r}/{endpoint!r}"
    return got


async def _attempts(
    driver: JobDriver, tenant: str | None = "t1", endpoint: str = "orders"
) -> list[WebhookAttempt]:
    return await driver.webhook_attempt_list(
        WebhookAttemptListParams(tenant, endpoint, MAX_WEBHOOK_LIST)
    )


async def _fail(
    driver: JobDriver, job_id: str, now: int, **options: object
) -> WebhookAttemptAnswer:
    """One failed attempt under a fresh claim of a fresh row."""
    job = await _held(driver, job_id, now)
    return await driver.webhook_attempt_put(_attempt(job.fence, now=now, **options))  # type: ignore[arg-type]


# -- endpoints ------------------------------------------------------------------------------------


async def scenario_webhooks_endpoints_put_and_listed(driver: JobDriver) -> None:
    """A put stores an endpoint enabled with no failures; a second put moves its URL and keeps
    its state and creation time; no tenant and each tenant hold their own endpoint of one id;
    the listing is by (tenant, endpoint) in code points, no tenant first, cut by its limit."""
    if await _unsupported(driver):
        return
    first = await driver.webhook_endpoint_put(WebhookEndpointPut("t1", "orders", URL, T0))
    assert first == WebhookEndpoint("t1", "orders", URL, True, 0, None, T0, T0), first
    assert (await _fail(driver, "a", T0 + 1)).recorded
    moved = await driver.webhook_endpoint_put(WebhookEndpointPut("t1", "orders", LONG_URL, T0 + 2))
    assert moved == WebhookEndpoint("t1", "orders", LONG_URL, True, 1, None, T0, T0 + 2), moved
    assert await driver.webhook_endpoint_get("t1", "orders") == moved
    none = await _put(driver, None, "orders", T0 + 3)
    other = await _put(driver, "☃ org", "orders", T0 + 4)
    b = await _put(driver, "t1", "Orders", T0 + 5)
    assert await driver.webhook_endpoint_get(None, "orders") == none
    assert await driver.webhook_endpoint_get("t2", "orders") is None
    assert await driver.webhook_endpoint_get("t1", "nope") is None
    assert await driver.webhook_endpoint_list(MAX_WEBHOOK_LIST) == [none, b, moved, other]
    assert await driver.webhook_endpoint_list(2) == [none, b]


# -- the streak -----------------------------------------------------------------------------------


async def scenario_webhooks_a_streak_disables_at_its_limit(driver: JobDriver) -> None:
    """Failed attempts in a row grow the streak; the one that makes it `disable_after` long
    disables the endpoint at its time — not one sooner, not one later; failures after that keep
    counting but leave it disabled at that time, and so does a delivery (which clears the
    streak); the operator's enable opens it with no streak."""
    if await _unsupported(driver):
        return
    await _put(driver)
    for i, now in enumerate((T0 + 1, T0 + 2), start=1):
        got = await _fail(driver, f"f{i}", now)
        assert got.recorded and got.endpoint is not None
        assert (got.endpoint.enabled, got.endpoint.failures) == (True, i), got
    third = await _fail(driver, "f3", T0 + 3)
    assert third.endpoint is not None
    assert (third.endpoint.enabled, third.endpoint.failures, third.endpoint.disabled_at_ms) == (
        False,
        3,
        T0 + 3,
    ), third
    fourth = await _fail(driver, "f4", T0 + 4)
    assert fourth.endpoint == replace(third.endpoint, failures=4, updated_at_ms=T0 + 4), fourth
    back = await driver.webhook_endpoint_enable(WebhookEndpointEnable("t1", "orders", T0 + 5))
    assert back == WebhookEndpoint("t1", "orders", URL, True, 0, None, T0, T0 + 5), back
    # Enabled with no streak: the next failure counts from one.
    after = await _fail(driver, "f5", T0 + 6)
    assert after.endpoint is not None
    assert (after.endpoint.enabled, after.endpoint.failures) == (True, 1), after
    assert await driver.webhook_endpoint_enable(WebhookEndpointEnable("t1", "gone", T0)) is None
    # A streak of one disables at its first failure; a delivery then clears the streak and
    # leaves it disabled (only the operator enables).
    await _put(driver, "t1", "fragile")
    once = await _fail(driver, "g1", T0 + 7, endpoint="fragile", disable_after=1)
    assert once.endpoint is not None and not once.endpoint.enabled
    job = await _held(driver, "d1", T0 + 8)
    delivered = await driver.webhook_attempt_put(
        _attempt(job.fence, "delivered", endpoint="fragile", now=T0 + 8)
    )
    assert delivered.endpoint == replace(once.endpoint, failures=0, updated_at_ms=T0 + 8)


async def scenario_webhooks_a_delivery_clears_the_streak(driver: JobDriver) -> None:
    """A delivery sets the streak to 0, so the next failures count from 1: two failures, a
    delivery, two failures leave a `disable_after=3` endpoint enabled."""
    if await _unsupported(driver):
        return
    await _put(driver)
    await _fail(driver, "a", T0 + 1)
    await _fail(driver, "b", T0 + 2)
    job = await _held(driver, "c", T0 + 3)
    got = await driver.webhook_attempt_put(_attempt(job.fence, "delivered", now=T0 + 3))
    assert got.endpoint is not None and got.endpoint.failures == 0, got
    await _fail(driver, "d", T0 + 4)
    last = await _fail(driver, "e", T0 + 5)
    assert last.endpoint is not None
    assert (last.endpoint.enabled, last.endpoint.failures) == (True, 2), last


# -- the fence ------------------------------------------------------------------------------------


async def scenario_webhooks_attempts_are_fenced_on_the_claim(driver: JobDriver) -> None:
    """An attempt lands only while the claim that made it holds: not under another worker's
    name, another claim count, after an ack, or after its lapsed lease was claimed again —
    nothing is written then, not the attempt, not the streak. A lapsed lease nobody claimed
    again still holds. No endpoint: nothing written either."""
    if await _unsupported(driver):
        return
    await _put(driver)
    job = await _held(driver, "a", T0)
    f = job.fence
    for off in (replace(f, worker_id="w2"), replace(f, claims=f.claims + 1)):
        assert await driver.webhook_attempt_put(_attempt(off)) == WebhookAttemptAnswer(False, None)
    gone = _attempt(f, endpoint="gone")
    assert await driver.webhook_attempt_put(gone) == WebhookAttemptAnswer(False, None)
    # Lapsed (lease 1000 ms) and nobody claimed it since: the claim still holds.
    lapsed = await driver.webhook_attempt_put(_attempt(f, now=T0 + 5000))
    assert lapsed.recorded and lapsed.endpoint is not None and lapsed.endpoint.failures == 1
    # Claimed again by another worker: the old claim writes nothing, the new one does.
    again = await claim_one(driver, T0 + 6000, job.queue, worker="w2")
    assert again.id == "a"
    before = await _get(driver)
    stale = await driver.webhook_attempt_put(_attempt(f, now=T0 + 6001))
    assert stale == WebhookAttemptAnswer(False, None), stale
    assert await _get(driver) == before
    landed = await driver.webhook_attempt_put(_attempt(again.fence, now=T0 + 6002))
    assert landed.endpoint is not None and landed.endpoint.failures == 2
    assert await driver.job_ack([Ack(again.fence, T0 + 6003)]) == [True]
    after_ack = await driver.webhook_attempt_put(_attempt(again.fence, "delivered", now=T0 + 6004))
    assert after_ack == WebhookAttemptAnswer(False, None), after_ack
    assert (await _get(driver)).failures == 2
    acked = await _held(driver, "b", T0 + 7000)
    assert await driver.job_ack([Ack(acked.fence, T0 + 7001)]) == [True]
    late = await driver.webhook_attempt_put(_attempt(acked.fence, now=T0 + 7002))
    assert late == WebhookAttemptAnswer(False, None)
    assert [(a.job_id, a.claims) for a in await _attempts(driver)] == [
        ("a", again.fence.claims),
        ("a", f.claims),
    ]


async def scenario_webhooks_one_attempt_per_claim(driver: JobDriver) -> None:
    """A claim records one attempt: a second call under the same claim (a retried write, even
    with another outcome) answers recorded with the endpoint as it is and moves nothing."""
    if await _unsupported(driver):
        return
    await _put(driver)
    job = await _held(driver, "a", T0)
    first = await driver.webhook_attempt_put(_attempt(job.fence, now=T0 + 1))
    assert first.endpoint is not None and first.endpoint.failures == 1
    for again in (
        _attempt(job.fence, now=T0 + 2),
        _attempt(job.fence, "delivered", now=T0 + 3),
    ):
        assert await driver.webhook_attempt_put(again) == first
    (only,) = await _attempts(driver)
    assert (only.at_ms, only.outcome, only.excerpt) == (T0 + 1, "failed", "oops"), only


async def scenario_webhooks_tenants_stay_apart(driver: JobDriver) -> None:
    """One endpoint id under no tenant and under two tenants: an attempt, an enable and a
    listing of one touch that one alone."""
    if await _unsupported(driver):
        return
    for tenant in (None, "t1", "t2"):
        await _put(driver, tenant)
    got = await _fail(driver, "a", T0 + 1, tenant="t1", disable_after=1)
    assert got.endpoint is not None and got.endpoint.tenant_id == "t1" and not got.endpoint.enabled
    await _fail(driver, "b", T0 + 2, tenant=None)
    assert (await _get(driver, "t2")).failures == 0
    assert (await _get(driver, None)).failures == 1
    assert (await _get(driver, "t1")).failures == 1
    assert await driver.webhook_endpoint_enable(WebhookEndpointEnable("t2", "orders", T0 + 3))
    assert not (await _get(driver, "t1")).enabled
    assert [a.job_id for a in await _attempts(driver, "t1")] == ["a"]
    assert [a.job_id for a in await _attempts(driver, None)] == ["b"]
    assert await _attempts(driver, "t2") == []
    missing = await _fail(driver, "c", T0 + 4, tenant="t3")
    assert missing == WebhookAttemptAnswer(False, None)


async def scenario_webhooks_attempts_listed_newest_first(driver: JobDriver) -> None:
    """Attempts newest first; in one millisecond by the greater job id, then the greater claim
    count; cut by the limit; each kept whole (an excerpt at its byte limit, markup, newlines)."""
    if await _unsupported(driver):
        return
    await _put(driver)
    await _fail(driver, "b", T0 + 5, disable_after=100, excerpt=LONG_EXCERPT)
    await _fail(driver, "ab", T0 + 5, disable_after=100, status=None, excerpt="")
    await _fail(driver, "a", T0 + 5, disable_after=100)
    old = await _fail(driver, "z", T0 + 1, disable_after=100)
    assert old.recorded
    got = await _attempts(driver)
    assert [a.job_id for a in got] == ["b", "ab", "a", "z"], got
    assert got[0].excerpt == LONG_EXCERPT and got[1].status_code is None and got[1].excerpt == ""
    want = WebhookAttempt(
        "t1",
        "orders",
        "a",
        1,
        "msg-a",
        "failed",
        500,
        12,
        "oops",
        "X_WEBHOOK_DELIVERY_FAILED",
        T0 + 5,
    )
    assert got[2] == want, got[2]
    cut = await driver.webhook_attempt_list(WebhookAttemptListParams("t1", "orders", 2))
    assert [a.job_id for a in cut] == ["b", "ab"]


async def scenario_webhooks_attempts_purged_oldest_first(driver: JobDriver) -> None:
    """`webhook_attempt_purge(before, limit)` deletes the first `limit` attempts made before
    `before` (one made at it stays) by (at, job id, claims), whichever tenant's endpoint, and
    never moves an endpoint; purgers at once delete each attempt once; a claim that still
    holds after its attempt went records its attempt once more."""
    if await _unsupported(driver):
        return
    await _put(driver)
    await _put(driver, None)
    await _fail(driver, "z", T0 + 1, disable_after=100)
    await _fail(driver, "n", T0 + 3, tenant=None, disable_after=100)
    for job_id in ("b", "ab", "a"):
        await _fail(driver, job_id, T0 + 5, disable_after=100)
    # Two claims of one row, their attempts in one millisecond: claims 1, then 2.
    first = await _held(driver, "c", T0 + 5)
    put = _attempt(first.fence, now=T0 + 2000, disable_after=100)
    assert (await driver.webhook_attempt_put(put)).recorded
    second = await claim_one(driver, T0 + 2000, "q-c", worker="w2")
    put = _attempt(second.fence, now=T0 + 2000, disable_after=100)
    assert (await driver.webhook_attempt_put(put)).recorded
    ours, nobodys = await _get(driver), await _get(driver, None)
    assert ours.failures == 6 and nobodys.failures == 1, (ours, nobodys)

    assert await driver.webhook_attempt_purge(T0 + 1, 10) == 0, "one made at the bound went"
    assert await driver.webhook_attempt_purge(T0 + 2, 10) == 1
    assert [a.job_id for a in await _attempts(driver)] == ["c", "c", "b", "ab", "a"]
    assert await driver.webhook_attempt_purge(T0 + 5, 10) == 1, "the untenanted one, at T0 + 3"
    assert await _attempts(driver, None) == []
    assert await driver.webhook_attempt_purge(T0 + 6, 2) == 2, "a and ab: ties by job id"
    assert [a.job_id for a in await _attempts(driver)] == ["c", "c", "b"]
    assert await driver.webhook_attempt_purge(T0 + 2001, 2) == 2, "b, then c's first claim"
    assert [(a.job_id, a.claims) for a in await _attempts(driver)] == [("c", 2)]
    assert (await _get(driver), await _get(driver, None)) == (ours, nobodys), "a purge moved one"

    # A claim that still holds after its attempt went: its retried put records anew.
    assert await driver.webhook_attempt_purge(T0 + 2001, 10) == 1
    again = await driver.webhook_attempt_put(
        _attempt(second.fence, now=T0 + 2001, disable_after=100)
    )
    assert again == WebhookAttemptAnswer(True, await _get(driver)) and again.endpoint is not None
    assert again.endpoint.failures == ours.failures + 1, again
    assert [(a.job_id, a.claims) for a in await _attempts(driver)] == [("c", 2)]

    for i in range(6):
        await _fail(driver, f"r{i}", T0 + 3000, disable_after=100)
    counts = await asyncio.gather(*(driver.webhook_attempt_purge(T0 + 3001, 2) for _ in range(4)))
    assert sum(counts) == 7 and all(n <= 2 for n in counts), counts
    assert await _attempts(driver) == []
    code = "X_JOB_RECORD_INVALID"
    await refused(code, driver.webhook_attempt_purge(T0, 0))
    await refused(code, driver.webhook_attempt_purge(T0, MAX_PURGE_LIMIT + 1))
    await refused(code, driver.webhook_attempt_purge(-1, 10))


async def scenario_webhooks_refusals_write_nothing(driver: JobDriver) -> None:
    """Every call the ABC refuses (`X_JOB_RECORD_INVALID`) writes nothing."""
    if await _unsupported(driver):
        return
    code = "X_JOB_RECORD_INVALID"
    await _put(driver)
    job = await _held(driver, "a", T0)
    good = _attempt(job.fence, now=T0 + 1)
    for bad in (
        replace(good, excerpt=LONG_EXCERPT + "x"),
        replace(good, excerpt="nul \x00"),
        replace(good, excerpt="half \ud800"),
        replace(good, status_code=99),
        replace(good, status_code=600),
        replace(good, outcome="delivered"),
        replace(good, error=None),
        replace(good, outcome="lost"),  # type: ignore[arg-type]
        replace(good, disable_after=0),
        replace(good, latency_ms=-1),
        replace(good, tenant_id=""),
        replace(good, endpoint="a\x00b"),
        replace(good, event_id="\udfff"),
        replace(good, fence=replace(job.fence, claims=0)),
    ):
        await refused(code, driver.webhook_attempt_put(bad))
    await refused(
        code, driver.webhook_endpoint_put(WebhookEndpointPut("t1", "x", LONG_URL + "x", T0))
    )
    await refused(code, driver.webhook_endpoint_put(WebhookEndpointPut("t1", "x", "", T0)))
    await refused(code, driver.webhook_endpoint_put(WebhookEndpointPut("t\x00", "x", URL, T0)))
    await refused(code, driver.webhook_endpoint_enable(WebhookEndpointEnable("t1", "", T0)))
    await refused(code, driver.webhook_endpoint_list(0))
    await refused(code, driver.webhook_endpoint_list(MAX_WEBHOOK_LIST + 1))
    await refused(code, driver.webhook_attempt_list(WebhookAttemptListParams("t1", "orders", 0)))
    assert await _attempts(driver) == []
    assert await driver.webhook_endpoint_list(10) == [await _get(driver)]
    assert (await _get(driver)).failures == 0
    # Still held: the same attempt, well formed, lands.
    assert (await driver.webhook_attempt_put(good)).recorded


WEBHOOK_SCENARIOS: dict[str, Scenario] = {
    fn.__name__.removeprefix("scenario_"): fn
    for fn in (
        scenario_webhooks_a_delivery_clears_the_streak,
        scenario_webhooks_a_streak_disables_at_its_limit,
        scenario_webhooks_attempts_are_fenced_on_the_claim,
        scenario_webhooks_attempts_listed_newest_first,
        scenario_webhooks_attempts_purged_oldest_first,
        scenario_webhooks_endpoints_put_and_listed,
        scenario_webhooks_one_attempt_per_claim,
        scenario_webhooks_refusals_write_nothing,
        scenario_webhooks_tenants_stay_apart,
    )
}
