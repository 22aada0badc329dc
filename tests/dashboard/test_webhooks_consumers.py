"""The `/webhooks` and `/consumers` pages over HTTP, in process, on memory, Postgres and Redis:
every endpoint (tenant, URL, state, streak, a declared sender's `disable_after`, its last
attempts), an endpoint's attempts, the re-enable action behind the dashboard's guards, and each
consumer's cursor. Hostile stored values (markup, bidi overrides, long text) are rendered
escaped; a driver without a family says so (a list) or refuses with 501 (a page, an action)."""

from __future__ import annotations

import html
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import httpx2 as httpx
import pytest

from jobs_core.dashboard import Access, dashboard_app
from jobs_core.dashboard.app import endpoint_path
from jobs_core.driver import Capabilities, JobDriver
from jobs_core.facade import Jobs
from jobs_core.factories.webhook_tally import Sender, note_sender
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import (
    ClaimParams,
    ConsumerPut,
    WebhookAttemptPut,
    WebhookEndpointPut,
)
from jobs_memory import MemoryDriver
from tests.core.support import fresh_store

TOKEN = "s3cret-token-for-tests"
BEARER = {"authorization": f"Bearer {TOKEN}"}
#: A tenant, a URL, an excerpt and consumer fields no page may show raw: markup, a bidi
#: override, template syntax, long text.
TENANT = "<b>acme</b>\u202e"
URL = "https://hooks.example/in?<script>alert(1)</script>&\u202egnp.exe" + "x" * 1_500
EXCERPT = "<img src=x onerror=alert(1)>\u2066{{ 7 * 7 }}" + "é" * 300
RAW = ("<script>alert(1)", "<img src=x", "<b>acme", "\u202e", "\u2066", "<i>feed")


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def csrf_of(page: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', page)
    assert found, "the page carries no CSRF token"
    return found.group(1)


def sender_handle(disable_after: int) -> JobHandle:
    """A declaration the dashboard reads as a `webhook()` sender (as `webhook()` notes it)."""

    async def body(input: Any, ctx: Any) -> None:
        return None

    note_sender(body, Sender("hooks-out", "org", disable_after))
    return job(body, name="hooks-out", tenant="none", registry=JobRegistry())


async def fill(driver: JobDriver) -> None:
    """An endpoint of a hostile tenant disabled by a failed attempt, an enabled one of no tenant,
    and a consumer whose every field is hostile; written under one claimed job's fence."""
    plain = job(lambda input, ctx: None, name="carrier", tenant="none", registry=JobRegistry())
    await Jobs(driver).enqueue(plain, {}, key="carrier")
    t0 = time.time_ns() // 1_000_000 + 10
    (claimed,) = (await driver.job_claim(ClaimParams(("default",), "w1", 1, 60_000, t0))).jobs
    await driver.webhook_endpoint_put(WebhookEndpointPut(TENANT, "orders", URL, t0))
    await driver.webhook_endpoint_put(WebhookEndpointPut(None, "ops:alerts", "https://a.b/", t0))
    got = await driver.webhook_attempt_put(
        WebhookAttemptPut(
            claimed.fence, TENANT, "orders", "msg_1", "failed", 500, 42, EXCERPT,
            "X_WEBHOOK_DELIVERY_FAILED", 1, t0 + 1,
        )
    )  # fmt: skip
    assert got.recorded and got.endpoint is not None and not got.endpoint.enabled
    put = ConsumerPut(
        claimed.fence, "<i>feed</i>", TENANT, "table:<b>x</b>", None, '"<script>alert(1)"',
        3, 7, t0 + 2,
    )  # fmt: skip
    assert await driver.consumer_cursor_put(put)


@pytest.fixture(params=["memory", "pg", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as driver:
        await fill(driver)
        yield driver


def assert_escaped(page: str) -> None:
    # A hidden field carries the tenant back exactly (an attribute, escaped, never shown).
    shown = re.sub(r'<input type="hidden" name="tenant" value="[^"]*">', "", page)
    for raw in RAW:
        assert raw not in shown, raw


async def test_the_pages_show_every_endpoint_its_attempts_and_the_consumers_escaped(
    store: JobDriver,
) -> None:
    app = dashboard_app(store, access=Access(token=TOKEN), handles=[sender_handle(5)])
    async with client(app) as c:
        listed = await c.get("/webhooks", headers=BEARER)
        assert listed.status_code == 200, listed.text
        assert_escaped(listed.text)
        text = html.unescape(listed.text)
        assert "<b>acme</b>\\u202e" in text and "\\u202egnp.exe" in text  # tenant, URL spelled
        assert "ops:alerts" in text and ">disabled<" in text and ">enabled<" in text
        assert "5 <span" in listed.text  # the org sender's disable_after beside the org endpoint
        assert ">re-enable</button>" in listed.text  # only the disabled one offers it
        assert listed.text.count(">re-enable</button>") == 1
        one = await c.get(endpoint_path(TENANT, "orders"), headers=BEARER)
        assert one.status_code == 200, one.text
        assert_escaped(one.text)
        text = html.unescape(one.text)
        assert "X_WEBHOOK_DELIVERY_FAILED" in text and "42 ms" in text and ">500<" in one.text
        assert "\\u2066{{ 7 * 7 }}" in text  # shown as it is stored, never evaluated
        consumers = await c.get("/consumers", headers=BEARER)
        assert consumers.status_code == 200, consumers.text
        assert_escaped(consumers.text)
        text = html.unescape(consumers.text)
        assert "<i>feed</i>" in text and "table:<b>x</b>" in text and ">7<" in consumers.text

        # Re-enabled with the credentials and this browser's CSRF token, like every action.
        csrf = csrf_of(one.text)
        done = await c.post(
            endpoint_path(None, "orders", "enable"),
            data={"csrf": csrf, "tenant": TENANT},
            headers=BEARER,
        )
        assert done.status_code == 303 and done.headers["location"] == endpoint_path(
            TENANT, "orders"
        )
        back = await c.get(done.headers["location"], headers=BEARER)
        assert "enabled " in back.text and ">re-enable</button>" not in back.text
    ep = await store.webhook_endpoint_get(TENANT, "orders")
    assert ep is not None and (ep.enabled, ep.failures) == (True, 0)


@pytest.fixture
async def memory() -> MemoryDriver:
    driver = MemoryDriver()
    await fill(driver)
    return driver


async def test_re_enable_is_refused_without_credentials_read_only_or_a_forged_token(
    memory: MemoryDriver,
) -> None:
    path = endpoint_path(None, "orders", "enable")
    form = {"tenant": TENANT}
    async with client(dashboard_app(memory, access=Access())) as c:
        page = await c.get(endpoint_path(TENANT, "orders"))
        assert page.status_code == 200 and '<form method="post"' not in page.text
        refused = await c.post(path, data={**form, "csrf": csrf_of(page.text)})
        assert refused.status_code == 403 and "X_DASHBOARD_READ_ONLY" in refused.text
    async with client(dashboard_app(memory, access=Access(token=TOKEN, read_only=True))) as c:
        page = await c.get("/webhooks", headers=BEARER)
        assert ">re-enable</button>" not in page.text
        refused = await c.post(path, data={**form, "csrf": csrf_of(page.text)}, headers=BEARER)
        assert refused.status_code == 403 and "X_DASHBOARD_READ_ONLY" in refused.text
    async with client(dashboard_app(memory, access=Access(token=TOKEN))) as c:
        page = await c.get("/webhooks", headers=BEARER)
        unsigned = await c.post(path, data={**form, "csrf": csrf_of(page.text)})
        assert unsigned.status_code == 401 and "X_DASHBOARD_AUTH_REQUIRED" in unsigned.text
        forged = await c.post(path, data={**form, "csrf": "forged"}, headers=BEARER)
        assert forged.status_code == 403 and "X_DASHBOARD_CSRF_INVALID" in forged.text
        # Another tenant's endpoint of the same id is not this one: refused as a notice.
        other = await c.post(
            path, data={"tenant": "globex", "csrf": csrf_of(page.text)}, headers=BEARER
        )
        assert other.status_code == 303
        notice = await c.get(other.headers["location"], headers=BEARER)
        assert "X_WEBHOOK_ENDPOINT_UNKNOWN" in notice.text
        unknown = await c.get(endpoint_path("globex", "orders"), headers=BEARER)
        assert unknown.status_code == 404 and "X_WEBHOOK_ENDPOINT_UNKNOWN" in unknown.text
    ep = await memory.webhook_endpoint_get(TENANT, "orders")
    assert ep is not None and not ep.enabled


class Bare(MemoryDriver):
    """A driver declaring neither the webhooks nor the consumers family."""

    def capabilities(self) -> Capabilities:
        return replace(super().capabilities(), webhooks=False, consumers=False)


async def test_a_driver_without_the_families_says_so_and_never_answers_500() -> None:
    access = Access(token=TOKEN)
    async with client(dashboard_app(Bare(), access=access)) as c:
        for path, says in (("/webhooks", "webhooks"), ("/consumers", "consumers")):
            page = await c.get(path, headers=BEARER)
            assert page.status_code == 200 and f"<code>{says}</code> family" in page.text
        one = await c.get("/webhooks/orders", headers=BEARER)
        assert one.status_code == 501 and "X_DRIVER_CAPABILITY_MISSING" in one.text
        csrf = csrf_of(one.text)
        act = await c.post("/webhooks/orders/enable", data={"csrf": csrf}, headers=BEARER)
        assert act.status_code == 303
        notice = await c.get(act.headers["location"], headers=BEARER)
        assert "X_DRIVER_CAPABILITY_MISSING" in notice.text
