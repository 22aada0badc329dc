"""`webhook()` (jobs_core/factories/webhooks/) against a real HTTP server on a spare loopback
port, on each driver: signed deliveries a receiver verifies with `standardwebhooks`, an endpoint
that fails, recovers and is disabled after N failures in a row (its next job not sent until
re-enabled), 429/4xx/redirect/network outcomes, every attempt recorded before the raise, SSRF
refusals at registration and at send time, hostile inputs refused before anything is written,
and the org tenant read off the input."""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from standardwebhooks import Webhook

from jobs_core import Jobs
from jobs_core.context import JobContext
from jobs_core.driver import MAX_WEBHOOK_EXCERPT_BYTES, JobDriver
from jobs_core.errors import JobsError, RateLimitedError
from jobs_core.factories import (
    enable_endpoint,
    register_endpoint,
    webhook,
    webhook_event,
)
from jobs_core.job import JobHandle, JobRegistry
from jobs_core.records import (
    ClaimParams,
    WebhookAttempt,
    WebhookAttemptListParams,
    WebhookEndpoint,
    WebhookEndpointPut,
)
from jobs_core.retry import Retry
from jobs_core.tenant import acting_for
from tests.core.support import fresh_store, until

OLD = "whsec_" + base64.b64encode(b"old-secret-0123456789abcdef").decode()
NEW = "whsec_" + base64.b64encode(b"new-secret-0123456789abcdef").decode()
LOOPBACK = ["127.0.0.1/32"]


@dataclass
class Endpoint:
    """A local HTTP server that answers each POST with the next of `script` (then the last)."""

    script: list[tuple[int, dict[str, str], bytes]] = field(default_factory=list)
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    port: int = 0

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, *statuses: int | tuple[int, dict[str, str], bytes]) -> None:
        self.script = [s if isinstance(s, tuple) else (s, {}, b"ok") for s in statuses]


@pytest.fixture
def http() -> Iterator[Endpoint]:
    ep = Endpoint()
    ep.answer(200)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("content-length", "0"))
            ep.got.append(({k.lower(): v for k, v in self.headers.items()}, self.rfile.read(n)))
            status, headers, body = ep.script.pop(0) if len(ep.script) > 1 else ep.script[0]
            if self.path == "/slow":
                time.sleep(3)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ep.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield ep
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["memory", "pg", "redis"])
async def driver(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as store:
        yield store


def sender(**options: Any) -> JobHandle:
    options.setdefault("secrets", [OLD, NEW])
    options.setdefault("allow_networks", LOOPBACK)
    options.setdefault("retry", Retry(attempts=50, base_ms=1))
    return webhook(registry=JobRegistry(), **options)


async def send(
    driver: JobDriver, handle: JobHandle, event: dict[str, Any], tenant: str | None = "acme"
) -> Any:
    """Enqueue `event` as `tenant`, claim it, and run its body once: its answer, or the error
    it raised (every attempt is recorded before that)."""
    with acting_for(tenant):
        await Jobs(driver).enqueue(handle, event)
    (claimed,) = (await driver.job_claim(ClaimParams((handle.queue,), "w1", 1, 60_000, now()))).jobs
    ctx = JobContext.for_test(claimed, driver, tenant=handle.tenant_for(claimed_input(event)))
    try:
        return await handle.fn(claimed_input(event), ctx)
    except JobsError as exc:
        return exc


def claimed_input(event: dict[str, Any]) -> dict[str, Any]:
    return event


def now() -> int:
    return time.time_ns() // 1_000_000 + 10


async def attempts(
    driver: JobDriver, endpoint: str, tenant: str | None = "acme"
) -> list[WebhookAttempt]:
    return await driver.webhook_attempt_list(WebhookAttemptListParams(tenant, endpoint, 100))


async def endpoint_of(
    driver: JobDriver, endpoint: str, tenant: str | None = "acme"
) -> WebhookEndpoint:
    got = await driver.webhook_endpoint_get(tenant, endpoint)
    assert got is not None
    return got


def event(
    n: int, endpoint: str = "orders", org: str | None = "acme", **data: Any
) -> dict[str, Any]:
    return webhook_event(endpoint, "order.paid", {"n": n, **data}, id=f"msg_{n}", org_id=org)


async def test_a_delivery_is_signed_with_every_active_secret(
    driver: JobDriver, http: Endpoint
) -> None:
    await register_endpoint(driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK)
    got = await send(driver, sender(), event(1, note="<b>markup</b> ☃"))
    assert got["status"] == 200 and got["event_id"] == "msg_1", got
    ((headers, body),) = http.got
    assert headers["webhook-id"] == "msg_1"
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (OLD, NEW):  # a receiver holding either secret verifies during rotation
        payload = Webhook(secret).verify(body, headers)
        assert payload["type"] == "order.paid" and payload["data"]["note"] == "<b>markup</b> ☃"
    with pytest.raises(Exception, match="No matching signature"):
        Webhook("whsec_" + base64.b64encode(b"another").decode()).verify(body, headers)
    (a,) = await attempts(driver, "orders")
    assert (a.outcome, a.status_code, a.event_id, a.error, a.excerpt) == (
        "delivered",
        200,
        "msg_1",
        None,
        "ok",
    )
    assert (await endpoint_of(driver, "orders")).failures == 0


async def test_an_endpoint_fails_recovers_and_is_disabled_after_n_failures(
    driver: JobDriver, http: Endpoint
) -> None:
    await register_endpoint(driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK)
    handle = sender(disable_after=3)
    http.answer(500, 503, 200, 500, 502, 500, 200)
    first = await send(driver, handle, event(1))
    assert getattr(first, "code", None) == "X_WEBHOOK_DELIVERY_FAILED" and not first.terminal
    assert (await endpoint_of(driver, "orders")).failures == 1
    assert (await send(driver, handle, event(2))).code == "X_WEBHOOK_DELIVERY_FAILED"
    assert (await endpoint_of(driver, "orders")).failures == 2
    # Recovered: the streak is cleared, so two more failures do not disable it.
    assert (await send(driver, handle, event(3)))["status"] == 200
    assert (await endpoint_of(driver, "orders")).failures == 0
    assert (await send(driver, handle, event(4))).code == "X_WEBHOOK_DELIVERY_FAILED"
    assert (await send(driver, handle, event(5))).code == "X_WEBHOOK_DELIVERY_FAILED"
    ep = await endpoint_of(driver, "orders")
    assert (ep.enabled, ep.failures) == (True, 2)
    third = await send(driver, handle, event(6))
    assert third.code == "X_WEBHOOK_ENDPOINT_DISABLED" and third.terminal, third
    ep = await endpoint_of(driver, "orders")
    assert (ep.enabled, ep.failures) == (False, 3) and ep.disabled_at_ms is not None
    sent = len(http.got)
    # Disabled: the next job is not sent, and says so.
    skipped = await send(driver, handle, event(7))
    assert skipped.code == "X_WEBHOOK_ENDPOINT_DISABLED" and "enable" in str(skipped)
    assert len(http.got) == sent
    assert [a.status_code for a in await attempts(driver, "orders")] == [
        500,
        502,
        500,
        200,
        503,
        500,
    ]
    # The operator re-enables it: the streak cleared, the next job sent.
    back = await enable_endpoint(driver, "orders", tenant_id="acme")
    assert (back.enabled, back.failures, back.disabled_at_ms) == (True, 0, None)
    assert (await send(driver, handle, event(8)))["status"] == 200
    assert len(http.got) == sent + 1


async def test_rate_limits_rejections_redirects_and_network_errors(
    driver: JobDriver, http: Endpoint
) -> None:
    await register_endpoint(driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK)
    handle = sender(max_retry_after=60)
    long_body = ("é" * 5000).encode()
    http.answer(
        (429, {"retry-after": "7"}, b"slow down"),
        (429, {"retry-after": "999999"}, b""),
        (404, {}, long_body),
        (302, {"location": "http://127.0.0.1:1/elsewhere"}, b""),
    )
    limited = await send(driver, handle, event(1))
    assert isinstance(limited, RateLimitedError) and limited.retry_after_ms == 7000
    capped = await send(driver, handle, event(2))
    assert isinstance(capped, RateLimitedError) and capped.retry_after_ms == 60_000
    rejected = await send(driver, handle, event(3))
    assert rejected.code == "X_WEBHOOK_REJECTED" and rejected.terminal
    redirect = await send(driver, handle, event(4))
    assert redirect.code == "X_WEBHOOK_REJECTED" and "302" in str(redirect)
    got = {a.event_id: a for a in await attempts(driver, "orders")}
    assert len(got["msg_3"].excerpt.encode()) <= MAX_WEBHOOK_EXCERPT_BYTES
    assert got["msg_3"].excerpt.startswith("éé") and got["msg_3"].error == "X_WEBHOOK_REJECTED"
    # A port nobody listens on: no status, retried, recorded.
    await driver.webhook_endpoint_put(
        WebhookEndpointPut("acme", "dead", "http://127.0.0.1:1/x", now())
    )
    down = await send(driver, handle, event(5, endpoint="dead"))
    assert down.code == "X_WEBHOOK_DELIVERY_FAILED" and not down.terminal
    (a,) = await attempts(driver, "dead")
    assert a.status_code is None and a.outcome == "failed" and a.excerpt


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1/x", "loopback"),
        ("http://[::1]/x", "loopback"),
        ("http://[::ffff:127.0.0.1]/x", "loopback"),
        ("http://10.1.2.3/x", "private"),
        ("http://192.168.0.1/x", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://0.0.0.0/x", "unspecified"),
        ("http://224.0.0.1/x", "multicast"),
        ("http://localhost/x", "loopback"),
        ("ftp://example.com/x", "scheme"),
        ("file:///etc/passwd", "scheme"),
        ("http://user:pw@example.com/x", "credentials"),
        ("http://exa<script>mple.com/", "markup"),
        ('http://example.com/"onload', "quotes"),
        ("http://example.com/\x00", "NUL"),
        ("http://example.com/\ud800", "surrogate"),
        ("http://example.com/a b", "space"),
        ("http://example.com/\r\nX-Evil: 1", "header"),
        ("", "empty"),
        # Host names no resolver takes (an empty label, one past 63 bytes): refused as a
        # shape, never a UnicodeError out of the lookup.
        ("http://a..example.com/x", "empty label"),
        ("http://.example.com/x", "leading dot"),
        ("https://" + "a" * 64 + ".example.com/x", "label past 63 bytes"),
    ],
)
async def test_ssrf_and_hostile_urls_are_refused_before_anything_is_written(
    url: str, why: str
) -> None:
    async with fresh_store("memory") as driver:
        with pytest.raises(JobsError) as caught:
            await register_endpoint(driver, "orders", url, tenant_id="acme")
        assert caught.value.code == "X_WEBHOOK_URL_REFUSED", (why, caught.value)
        assert await driver.webhook_endpoint_list(10) == []


async def test_a_url_that_turned_private_is_refused_at_send_time(
    driver: JobDriver, http: Endpoint
) -> None:
    # Stored without the check (as if its name resolved elsewhere at registration).
    await driver.webhook_endpoint_put(WebhookEndpointPut("acme", "orders", http.url(), now()))
    got = await send(driver, sender(allow_networks=()), event(1))
    assert got.code == "X_WEBHOOK_URL_REFUSED" and got.terminal, got
    assert http.got == []
    (a,) = await attempts(driver, "orders")
    assert (a.outcome, a.status_code, a.error) == ("failed", None, "X_WEBHOOK_URL_REFUSED")


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"endpoint": "<script>"}, "X_WEBHOOK_EVENT_INVALID"),
        ({"endpoint": "a\x00b"}, "X_JOB_INPUT_INVALID"),
        ({"id": "msg_\ud800"}, "X_JOB_INPUT_INVALID"),
        ({"id": "<img src=x>"}, "X_WEBHOOK_EVENT_INVALID"),
        ({"id": "a\r\nwebhook-signature: v1,x"}, "X_WEBHOOK_EVENT_INVALID"),
        ({"type": "a b"}, "X_WEBHOOK_EVENT_INVALID"),
        ({"timestamp": "yesterday"}, "X_WEBHOOK_EVENT_INVALID"),
        ({"extra": 1}, "X_WEBHOOK_EVENT_INVALID"),
        ({"data": "\ud83d"}, "X_JOB_INPUT_INVALID"),
        ({"data": "nul \x00"}, "X_JOB_INPUT_INVALID"),
        ({"data": "x" * 300_000}, "X_WEBHOOK_EVENT_INVALID"),
        ({"org_id": None}, "X_JOB_TENANT_MISMATCH"),
        ({"org_id": "other"}, "X_JOB_TENANT_MISMATCH"),
    ],
)
async def test_hostile_events_are_refused_at_enqueue(change: dict[str, Any], code: str) -> None:
    async with fresh_store("memory") as driver:
        handle = sender()
        bad = {**event(1), **change}
        if change.get("org_id", "") is None:
            del bad["org_id"]
        with acting_for("acme"), pytest.raises(JobsError) as caught:
            await Jobs(driver).enqueue(handle, bad)
        assert caught.value.code == code, caught.value
        assert await driver.queue_demand([handle.queue], now() + 10**9) == {handle.queue: 0}


async def test_the_org_comes_off_the_input_and_tenants_stay_apart(
    driver: JobDriver, http: Endpoint
) -> None:
    await register_endpoint(driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK)
    # Another tenant's endpoint of the same id is not this one: no such endpoint for "other".
    got = await send(driver, sender(), event(1, org="other"), tenant="other")
    assert got.code == "X_WEBHOOK_ENDPOINT_UNKNOWN" and got.terminal
    assert http.got == []
    # A row enqueued by one tenant for another's org (written past the enqueue's check) fails.
    handle = sender()
    await Jobs(driver).enqueue(handle, event(2), tenant_id="acme")
    (claimed,) = (await driver.job_claim(ClaimParams((handle.queue,), "w1", 1, 60_000, now()))).jobs
    forged = event(2, org="evil")
    ctx = JobContext.for_test(claimed, driver, tenant="evil")
    with pytest.raises(JobsError) as caught:
        await handle.fn(forged, ctx)
    assert caught.value.code == "X_JOB_TENANT_MISMATCH" and caught.value.terminal
    assert http.got == [] and await attempts(driver, "orders") == []


@pytest.mark.parametrize("kind", ["pg", "redis"])
async def test_a_worker_delivers_retries_and_stops_at_a_disabled_endpoint(
    kind: str, http: Endpoint
) -> None:
    """The real worker on Postgres and Redis: the endpoint fails twice and recovers (the job
    completes on its third attempt), then fails until its fourth failure in a row disables it
    (the job that made it dead, terminal); the next job is not sent; once re-enabled and
    requeued, it is delivered. Every attempt is in the ledger, with its status."""
    from jobs_core.worker import Worker

    async with fresh_store(kind) as driver:
        await register_endpoint(
            driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK
        )
        handle = sender(disable_after=4, retry=Retry(attempts=3, base_ms=1, jitter="none"))
        http.answer(500, 500, 200, 500)
        jobs = Jobs(driver)
        worker = Worker(driver, [handle], poll_floor=0.001, poll_ceiling=0.01, retention=None)
        await worker.start()

        async def run(n: int) -> Any:
            with acting_for("acme"):
                job_id = (await jobs.enqueue(handle, event(n))).id

            async def settled() -> bool:
                row = (await driver.job_get_many([job_id]))[job_id]
                return row.finished_at_ms is not None

            await until(settled, within=20)
            return (await driver.job_get_many([job_id]))[job_id]

        try:
            first = await run(1)
            assert (first.state.value, first.attempt) == ("completed", 3), first
            second = await run(2)
            assert second.state.value == "dead" and second.attempt == 3, second
            assert (await endpoint_of(driver, "orders")).failures == 3
            third = await run(3)
            assert third.state.value == "dead" and third.attempt == 1, third
            assert "X_WEBHOOK_ENDPOINT_DISABLED" in (third.last_error or "")
            sent = len(http.got)
            fourth = await run(4)
            assert fourth.state.value == "dead" and "X_WEBHOOK_ENDPOINT_DISABLED" in (
                fourth.last_error or ""
            )
            assert len(http.got) == sent == 7
            http.answer(200)
            await enable_endpoint(driver, "orders", tenant_id="acme")
            await driver.job_requeue(fourth.id, now())

            async def delivered() -> bool:
                row = (await driver.job_get_many([fourth.id]))[fourth.id]
                return row.state.value == "completed"

            await until(delivered, within=20)
        finally:
            await worker.stop()
        statuses = [a.status_code for a in await attempts(driver, "orders")]
        assert statuses == [200, 500, 500, 500, 500, 200, 500, 500], statuses
        for headers, body in http.got:
            Webhook(NEW).verify(body, headers)


async def test_a_crash_between_the_post_and_its_record_resends_the_same_event(
    http: Endpoint,
) -> None:
    """The store fails as the attempt is recorded, and at the record's resend (as a crash
    there would leave it): nothing is recorded, the run fails and is retried, and the retry
    sends the SAME `webhook-id`, so the receiver dedupes the delivery it already has. (One
    failure alone is a lost answer: the resend records it, tests/lost_answer_cases.py.)"""
    from jobs_core.errors import DriverUnavailableError
    from jobs_memory import MemoryDriver

    class DownAtTheRecord(MemoryDriver):
        failed = 0

        async def _webhook_attempt_put(self, put: Any) -> Any:
            if self.failed < 2:
                self.failed += 1
                raise DriverUnavailableError(detail="the store went away")
            return await super()._webhook_attempt_put(put)

    driver = DownAtTheRecord()
    await register_endpoint(driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK)
    handle = sender()
    got = await send(driver, handle, event(1))
    assert got.code == "X_DRIVER_UNAVAILABLE" and await attempts(driver, "orders") == []
    (claimed,) = (
        await driver.job_claim(ClaimParams((handle.queue,), "w1", 1, 60_000, now() + 10**6))
    ).jobs
    ctx = JobContext.for_test(claimed, driver, tenant="acme")
    assert (await handle.fn(event(1), ctx))["status"] == 200
    ids = [h["webhook-id"] for h, _ in http.got]
    assert ids == ["msg_1", "msg_1"]
    (a,) = await attempts(driver, "orders")
    assert a.claims == 2


async def test_a_lost_claim_records_nothing(http: Endpoint) -> None:
    """The claim is taken over while the request is out: the attempt happened, but the write
    of a lost claim lands nowhere — not the attempt, not the streak — and the run says so."""
    async with fresh_store("memory") as driver:
        await register_endpoint(
            driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK
        )
        handle = sender()
        http.answer(500)
        with acting_for("acme"):
            await Jobs(driver).enqueue(handle, event(1))
        t = now()
        (claimed,) = (await driver.job_claim(ClaimParams((handle.queue,), "w1", 1, 1000, t))).jobs
        (other,) = (
            await driver.job_claim(ClaimParams((handle.queue,), "w2", 1, 1000, t + 5000))
        ).jobs
        assert other.id == claimed.id
        ctx = JobContext.for_test(claimed, driver, tenant="acme")
        with pytest.raises(JobsError) as caught:
            await handle.fn(event(1), ctx)
        assert caught.value.code == "X_JOB_LEASE_LOST"
        assert len(http.got) == 1 and await attempts(driver, "orders") == []
        assert (await endpoint_of(driver, "orders")).failures == 0


async def test_a_cancelled_attempt_is_not_recorded(http: Endpoint) -> None:
    async with fresh_store("memory") as driver:
        await register_endpoint(
            driver, "orders", http.url("/slow"), tenant_id="acme", allow_networks=LOOPBACK
        )
        handle = sender()
        with acting_for("acme"):
            await Jobs(driver).enqueue(handle, event(1))
        (claimed,) = (
            await driver.job_claim(ClaimParams((handle.queue,), "w1", 1, 60_000, now()))
        ).jobs
        ctx = JobContext.for_test(claimed, driver, tenant="acme")
        task = asyncio.ensure_future(handle.fn(event(1), ctx))

        async def sent() -> bool:
            return len(http.got) == 1

        await until(sent, within=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await attempts(driver, "orders") == []
        assert (await endpoint_of(driver, "orders")).failures == 0


def test_a_pinned_request_keeps_the_endpoints_name() -> None:
    """The connection goes to the checked address; `Host` and the TLS server name stay the
    endpoint's (an IPv6 literal bracketed, a port kept unless it is the scheme's)."""
    import ipaddress

    from jobs_core.factories.webhooks.send import pinned
    from jobs_core.factories.webhooks.url import Target

    def target(url: str, host: str, port: int, address: str) -> Target:
        scheme = url.split(":", 1)[0]
        return Target(url, scheme, host, port, (ipaddress.ip_address(address),))

    url, headers, ext = pinned(
        target("https://hooks.example.com/in?a=1", "hooks.example.com", 443, "93.184.216.34")
    )
    assert str(url) == "https://93.184.216.34/in?a=1"
    assert headers == {"host": "hooks.example.com"} and ext == {"sni_hostname": "hooks.example.com"}
    url, headers, ext = pinned(target("http://[::1]:8080/x", "::1", 8080, "::1"))
    assert str(url) == "http://[::1]:8080/x" and headers == {"host": "[::1]:8080"} and ext == {}


@pytest.mark.parametrize(
    ("options", "code"),
    [
        ({"secrets": []}, "X_WEBHOOK_DECLARATION_INVALID"),
        ({"secrets": "whsec_abc"}, "X_WEBHOOK_DECLARATION_INVALID"),
        ({"secrets": ["not base64 !!"]}, "X_WEBHOOK_DECLARATION_INVALID"),
        ({"tenant": "org-x"}, "X_WEBHOOK_DECLARATION_INVALID"),
        ({"allow_networks": ["10.0.0.0/33"]}, "X_WEBHOOK_DECLARATION_INVALID"),
        ({"allow_networks": "127.0.0.1/32"}, "X_WEBHOOK_DECLARATION_INVALID"),
        ({"allow_redirects": "yes"}, "X_WEBHOOK_DECLARATION_INVALID"),
        ({"disable_after": 0}, "X_JOB_OPTION_INVALID"),
        ({"connect_timeout": float("nan")}, "X_JOB_OPTION_INVALID"),
        ({"read_timeout": 0}, "X_JOB_OPTION_INVALID"),
        ({"max_retry_after": -1}, "X_JOB_OPTION_INVALID"),
    ],
)
def test_the_declaration_is_refused_before_anything_is_registered(
    options: dict[str, Any], code: str
) -> None:
    registry = JobRegistry()
    with pytest.raises(JobsError) as caught:
        webhook(registry=registry, **{"secrets": [OLD], **options})
    assert caught.value.code == code and registry.names() == []
    # A secret is never echoed in a refusal.
    assert "not base64" not in str(caught.value)


async def test_a_sender_of_no_tenant_sends_to_the_endpoints_of_no_tenant(http: Endpoint) -> None:
    async with fresh_store("memory") as driver:
        await register_endpoint(driver, "ops", http.url(), allow_networks=LOOPBACK)
        await register_endpoint(
            driver, "ops", "http://127.0.0.1:1/x", tenant_id="acme", allow_networks=LOOPBACK
        )
        handle = sender(tenant="none")
        got = await send(driver, handle, event(1, endpoint="ops", org=None), tenant=None)
        assert got["status"] == 200
        assert [a.event_id for a in await attempts(driver, "ops", None)] == ["msg_1"]
        assert await attempts(driver, "ops", "acme") == []
        with pytest.raises(JobsError) as caught:
            await Jobs(driver).enqueue(handle, event(2, endpoint="ops"))
        assert caught.value.code == "X_JOB_TENANT_MISMATCH"


async def test_allowed_redirects_are_checked_hop_by_hop(http: Endpoint) -> None:
    async with fresh_store("memory") as driver:
        await register_endpoint(
            driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK
        )
        handle = sender(allow_redirects=True)
        http.answer((307, {"location": "/moved"}, b""), 200)
        assert (await send(driver, handle, event(1)))["status"] == 200
        assert len(http.got) == 2
        # A hop into a network the declaration does not allow is refused, terminal, recorded.
        http.answer((302, {"location": "http://10.0.0.1/x"}, b""))
        got = await send(driver, handle, event(2))
        assert got.code == "X_WEBHOOK_URL_REFUSED" and got.terminal
        assert len(http.got) == 3
        refused = [a for a in await attempts(driver, "orders") if a.event_id == "msg_2"]
        assert [(a.outcome, a.error) for a in refused] == [("failed", "X_WEBHOOK_URL_REFUSED")]


async def test_a_hostile_answer_is_a_recorded_attempt_with_its_code(
    driver: JobDriver, http: Endpoint
) -> None:
    """What the endpoint answers after the POST went out — a redirect to a host no resolver
    takes, a `Retry-After` of digits `int` cannot read or of a year past `datetime`'s, a body
    its `Content-Encoding` does not decode — is recorded as the attempt it was (the streak
    moves) and raised as its `X_*` code, never an untyped error that skips the record."""
    await register_endpoint(driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK)
    handle = sender(allow_redirects=True)
    http.answer(
        (302, {"location": "http://a..example.com/x"}, b""),
        (429, {"retry-after": "\u00b2"}, b"slow down"),  # '²'.isdigit() is True
        (429, {"retry-after": "01 Jan 10000000000000000 00:00 GMT"}, b""),  # past datetime's years
        (500, {"content-encoding": "gzip"}, b"not gzip at all"),  # httpx.DecodingError
    )
    no_host = await send(driver, handle, event(1))
    assert isinstance(no_host, JobsError), no_host
    assert no_host.code == "X_WEBHOOK_URL_REFUSED" and no_host.terminal
    limited = await send(driver, handle, event(2))
    assert isinstance(limited, JobsError), limited
    assert limited.code == "X_WEBHOOK_DELIVERY_FAILED" and not limited.terminal
    far = await send(driver, handle, event(3))
    assert isinstance(far, JobsError), far
    assert far.code == "X_WEBHOOK_DELIVERY_FAILED" and not far.terminal
    garbled = await send(driver, handle, event(4))
    assert isinstance(garbled, JobsError), garbled
    assert garbled.code == "X_WEBHOOK_DELIVERY_FAILED" and not garbled.terminal
    assert len(http.got) == 4
    got = {
        a.event_id: (a.outcome, a.status_code, a.error) for a in await attempts(driver, "orders")
    }
    assert got == {
        "msg_1": ("failed", None, "X_WEBHOOK_URL_REFUSED"),
        "msg_2": ("failed", 429, "X_WEBHOOK_DELIVERY_FAILED"),
        "msg_3": ("failed", 429, "X_WEBHOOK_DELIVERY_FAILED"),
        "msg_4": ("failed", 500, "X_WEBHOOK_DELIVERY_FAILED"),
    }
    assert (await endpoint_of(driver, "orders")).failures == 4
    (garbled_attempt,) = [a for a in await attempts(driver, "orders") if a.event_id == "msg_4"]
    assert "DecodingError" in garbled_attempt.excerpt


async def test_a_read_timeout_is_a_failed_attempt_retried(http: Endpoint) -> None:
    async with fresh_store("memory") as driver:
        await register_endpoint(
            driver, "orders", http.url("/slow"), tenant_id="acme", allow_networks=LOOPBACK
        )
        got = await send(driver, sender(read_timeout=0.3), event(1))
        assert got.code == "X_WEBHOOK_DELIVERY_FAILED" and not got.terminal, got
        (a,) = await attempts(driver, "orders")
        assert a.status_code is None and "Timeout" in a.excerpt and 250 <= a.latency_ms < 3000


@pytest.mark.parametrize(
    ("endpoint", "tenant", "code"),
    [
        ("<script>", "acme", "X_WEBHOOK_EVENT_INVALID"),
        ("a b", "acme", "X_WEBHOOK_EVENT_INVALID"),
        ("ok\x00", "acme", "X_WEBHOOK_EVENT_INVALID"),
        ("x" * 129, "acme", "X_WEBHOOK_EVENT_INVALID"),
        ("orders", "a\x00b", "X_JOB_RECORD_INVALID"),
        ("orders", "\ud800", "X_JOB_RECORD_INVALID"),
        ("orders", "", "X_JOB_RECORD_INVALID"),
    ],
)
async def test_hostile_endpoints_and_tenants_are_refused_before_anything_is_written(
    endpoint: str, tenant: str, code: str
) -> None:
    async with fresh_store("memory") as driver:
        with pytest.raises(JobsError) as caught:
            await register_endpoint(
                driver, endpoint, "http://127.0.0.1/x", tenant_id=tenant, allow_networks=LOOPBACK
            )
        assert caught.value.code == code, caught.value
        assert await driver.webhook_endpoint_list(10) == []


async def test_code_acting_for_a_tenant_writes_only_its_own_endpoints(driver: JobDriver) -> None:
    """Fail closed, as the sender's org check: a body acting for `acme` that registers or
    enables an endpoint of another tenant — or of none, the endpoints a `tenant="none"` sender
    sends through, which a tenant's request could otherwise repoint — is refused, unwritten."""
    url = "http://127.0.0.1/x"
    await register_endpoint(driver, "billing", url, allow_networks=LOOPBACK)  # no tenant
    with acting_for("acme"):
        for tenant in (None, "other"):
            with pytest.raises(JobsError) as refused:
                await register_endpoint(
                    driver,
                    "billing",
                    "http://127.0.0.2/evil",
                    tenant_id=tenant,
                    allow_networks=LOOPBACK,
                )
            assert refused.value.code == "X_JOB_TENANT_MISMATCH"
            with pytest.raises(JobsError) as refused:
                await enable_endpoint(driver, "billing", tenant_id=tenant)
            assert refused.value.code == "X_JOB_TENANT_MISMATCH"
        own = await register_endpoint(
            driver, "billing", url, tenant_id="acme", allow_networks=LOOPBACK
        )
        assert (own.tenant_id, own.enabled) == ("acme", True)
    assert [(e.tenant_id, e.url) for e in await driver.webhook_endpoint_list(10)] == [
        (None, url),
        ("acme", url),
    ]


async def test_racing_attempts_each_move_the_streak_once(driver: JobDriver) -> None:
    """Twenty attempts of one endpoint at once, each under its own claim, and each claim's
    write sent twice: the streak is twenty, and the endpoint disabled exactly once."""
    from jobs_core.records import WebhookAttemptPut
    from jobs_core.testing.scenarios.support import new_job

    await driver.webhook_endpoint_put(WebhookEndpointPut("acme", "orders", "http://h/x", 1))
    for i in range(20):
        await driver.job_enqueue(new_job(f"r{i}", queue="race", run_at_ms=1))
    held = (await driver.job_claim(ClaimParams(("race",), "w1", 20, 60_000, 2))).jobs
    assert len(held) == 20
    puts = [
        WebhookAttemptPut(
            h.fence,
            "acme",
            "orders",
            f"m{i}",
            "failed",
            503,
            1,
            "",
            "X_WEBHOOK_DELIVERY_FAILED",
            20,
            3 + i,
        )
        for i, h in enumerate(held)
    ]
    answers = await asyncio.gather(*(driver.webhook_attempt_put(p) for p in puts + puts))
    assert all(a.recorded for a in answers)
    ep = await endpoint_of(driver, "orders")
    assert (ep.failures, ep.enabled) == (20, False), ep
    assert len(await attempts(driver, "orders")) == 20
    disabled = {a.endpoint.disabled_at_ms for a in answers if a.endpoint and not a.endpoint.enabled}
    assert disabled == {ep.disabled_at_ms}


# -- the metric: ujobs_webhook_attempts_total ------------------------------------------------------


async def test_the_attempts_counter_moves_on_recorded_attempts_only(http: Endpoint) -> None:
    """Delivered and failed attempts each count once under their outcome; an attempt whose
    claim was lost (its record refused by the fence) counts nothing. Served by a worker's
    `/metrics` on a driver with the webhooks family."""
    from dataclasses import replace

    from jobs_core.operator.metrics import serve
    from jobs_core.worker import Worker
    from tests.core.test_observability import _get, _value

    async def scraped(port: int) -> dict[str, float]:
        text = (await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics"))[1]
        return {
            o: _value(text, "ujobs_webhook_attempts_total", outcome=o)
            for o in ("delivered", "failed")
        }

    async with fresh_store("memory") as driver:
        await register_endpoint(
            driver, "orders", http.url(), tenant_id="acme", allow_networks=LOOPBACK
        )
        handle = sender()
        worker = Worker(driver, [handle], poll_floor=0.001, poll_ceiling=0.01, queues=["idle"])
        server = serve(worker, "127.0.0.1", 0)
        try:
            await worker.start()
            before = await scraped(server.port)
            http.answer(200, 500, 200)
            assert (await send(driver, handle, event(1)))["status"] == 200
            assert (await send(driver, handle, event(2))).code == "X_WEBHOOK_DELIVERY_FAILED"
            assert await scraped(server.port) == {
                "delivered": before["delivered"] + 1,
                "failed": before["failed"] + 1,
            }
            # A run whose claim another worker took: the POST went out, the record did not land.
            with acting_for("acme"):
                await Jobs(driver).enqueue(handle, event(3))
            claim = ClaimParams((handle.queue,), "w1", 1, 60_000, now())
            (claimed,) = (await driver.job_claim(claim)).jobs
            lost = replace(claimed, worker_id="someone-else")
            ctx = JobContext.for_test(lost, driver, tenant="acme")
            with pytest.raises(JobsError, match="X_JOB_LEASE_LOST"):
                await handle.fn(event(3), ctx)
            assert len(http.got) == 3
            assert await scraped(server.port) == {
                "delivered": before["delivered"] + 1,
                "failed": before["failed"] + 1,
            }
        finally:
            await worker.stop()
            server.close()


def test_a_declared_sender_is_known_by_its_handle_for_the_dashboard() -> None:
    from jobs_core.factories.webhook_tally import Sender, senders_of
    from jobs_core.job import job

    org = sender(name="hooks-org", disable_after=7)
    none = sender(name="hooks-none", tenant="none")
    plain = job(lambda input, ctx: None, name="plain", tenant="none", registry=JobRegistry())
    assert senders_of([plain, none, org]) == [
        Sender("hooks-none", "none", 20),
        Sender("hooks-org", "org", 7),
    ]
