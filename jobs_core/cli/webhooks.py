"""`ujobs webhooks list|show|enable ENDPOINT`: the endpoint ledger `webhook()` sends through.

`list` shows every endpoint (tenant, id, state, failure streak, URL); `show` one endpoint and
its latest attempts (status, latency, the recorded excerpt); `enable` re-enables an endpoint its
failures disabled, clearing its streak (jobs that failed meanwhile stay failed: requeue them).
An endpoint belongs to a tenant: `--tenant` names it (none: the endpoint of no tenant). Every
verb runs on the driver of `--driver` or `UJOBS_DRIVER`; `--json` prints one JSON document.
Stored text (a URL, an excerpt) is printed as `literal` text, never read as markup.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.text import Text

from jobs_core.cli.base import (
    WHOLE,
    _fail,
    _required_driver,
    console,
    driver_option,
    emit_json,
    json_option,
    literal,
    main,
)
from jobs_core.cli.show import Cell, Col, print_table
from jobs_core.clock import SystemClock
from jobs_core.driver import MAX_WEBHOOK_LIST, JobDriver
from jobs_core.errors import JobsError, OptionInvalidError, WebhookEndpointUnknownError
from jobs_core.records import (
    WebhookAttempt,
    WebhookAttemptListParams,
    WebhookEndpoint,
    WebhookEndpointEnable,
)

T = TypeVar("T")

#: Attempts `show` prints by default.
SHOW_ATTEMPTS = 20

_tenant_option = click.option(
    "--tenant", default=None, help="The endpoint's tenant (default: the endpoint of no tenant)."
)


def _run(url: str | None, work: Callable[[JobDriver], Awaitable[T]]) -> T:
    """Open the driver of `url`, run `work` on it, close it; a refusal is one line, exit 2."""
    from jobs_core.urls import driver_from_url

    try:
        driver = driver_from_url(_required_driver(url, "webhooks"))

        async def go() -> T:
            async with driver:
                driver.require("webhooks", what="ujobs webhooks")
                return await work(driver)

        return asyncio.run(go())
    except JobsError as exc:
        _fail(exc)


@main.group()
def webhooks() -> None:
    """The endpoints webhook() sends to: their state, failure streak and attempts."""


@webhooks.command("list")
@driver_option
@click.option(
    "--limit", default=MAX_WEBHOOK_LIST, show_default=True, type=WHOLE, help="Endpoints at most."
)
@json_option
def webhooks_list(url: str | None, limit: int, as_json: bool) -> None:
    """Every endpoint by tenant and id: enabled or disabled, its failure streak, its URL."""
    from jobs_core.operator.times import relative

    if not 1 <= limit <= MAX_WEBHOOK_LIST:
        _fail(OptionInvalidError(f"--limit must be 1 to {MAX_WEBHOOK_LIST}", detail="--limit"))
    found = _run(url, lambda d: d.webhook_endpoint_list(limit))
    if as_json:
        emit_json([endpoint_json(e) for e in found])
        return
    now = SystemClock().now_ms()
    rows: list[list[Cell]] = [
        [
            e.tenant_id or "-",
            e.endpoint,
            _state(e),
            str(e.failures),
            relative(e.updated_at_ms, now),
            e.url,
        ]
        for e in found
    ]
    cols = [Col("tenant", True), Col("endpoint", True), Col("state", True), Col("streak")]
    print_table([*cols, Col("updated"), Col("url")], rows)
    if not found:
        console.print("no webhook endpoints")


@webhooks.command("show")
@click.argument("endpoint")
@_tenant_option
@driver_option
@click.option(
    "--limit", default=SHOW_ATTEMPTS, show_default=True, type=WHOLE, help="Attempts at most."
)
@json_option
def webhooks_show(
    endpoint: str, tenant: str | None, url: str | None, limit: int, as_json: bool
) -> None:
    """One endpoint and its latest attempts, newest first."""
    from jobs_core.operator.times import relative

    if not 1 <= limit <= MAX_WEBHOOK_LIST:
        _fail(OptionInvalidError(f"--limit must be 1 to {MAX_WEBHOOK_LIST}", detail="--limit"))

    async def read(d: JobDriver) -> tuple[WebhookEndpoint, list[WebhookAttempt]]:
        got = await d.webhook_endpoint_get(tenant, endpoint)
        if got is None:
            raise WebhookEndpointUnknownError(detail=_where(tenant, endpoint))
        tried = await d.webhook_attempt_list(WebhookAttemptListParams(tenant, endpoint, limit))
        return got, tried

    ep, tried = _run(url, read)
    if as_json:
        emit_json({"endpoint": endpoint_json(ep), "attempts": [attempt_json(a) for a in tried]})
        return
    now = SystemClock().now_ms()
    fields: list[list[Cell]] = [
        ["tenant", ep.tenant_id or "-"],
        ["endpoint", ep.endpoint],
        ["url", ep.url],
        ["state", _state(ep)],
        ["failure streak", str(ep.failures)],
        ["created", relative(ep.created_at_ms, now)],
        ["updated", relative(ep.updated_at_ms, now)],
    ]
    if ep.disabled_at_ms is not None:
        fields.append(["disabled", relative(ep.disabled_at_ms, now)])
    print_table([Col("field", True), Col("value", True)], fields, header=False)
    rows: list[list[Cell]] = [
        [
            relative(a.at_ms, now),
            a.job_id,
            a.event_id,
            _outcome(a),
            "-" if a.status_code is None else str(a.status_code),
            f"{a.latency_ms} ms",
            a.excerpt,
        ]
        for a in tried
    ]
    cols = [Col("at"), Col("job", True), Col("event", True), Col("outcome", True)]
    print_table([*cols, Col("status"), Col("latency"), Col("excerpt")], rows)
    if not tried:
        console.print("no attempts recorded")


@webhooks.command("enable")
@click.argument("endpoint")
@_tenant_option
@driver_option
@json_option
def webhooks_enable(endpoint: str, tenant: str | None, url: str | None, as_json: bool) -> None:
    """Enable ENDPOINT again and clear its failure streak."""

    async def enable(d: JobDriver) -> WebhookEndpoint:
        now = SystemClock().now_ms()
        got = await d.webhook_endpoint_enable(WebhookEndpointEnable(tenant, endpoint, now))
        if got is None:
            raise WebhookEndpointUnknownError(detail=_where(tenant, endpoint))
        return got

    ep = _run(url, enable)
    if as_json:
        emit_json(endpoint_json(ep))
        return
    console.print(Text("enabled ") + literal(_where(tenant, endpoint), "bold"), soft_wrap=True)


def endpoint_json(e: WebhookEndpoint) -> dict[str, Any]:
    return {
        "tenant_id": e.tenant_id,
        "endpoint": e.endpoint,
        "url": e.url,
        "enabled": e.enabled,
        "failures": e.failures,
        "disabled_at_ms": e.disabled_at_ms,
        "created_at_ms": e.created_at_ms,
        "updated_at_ms": e.updated_at_ms,
    }


def attempt_json(a: WebhookAttempt) -> dict[str, Any]:
    return {
        "job_id": a.job_id,
        "claims": a.claims,
        "event_id": a.event_id,
        "outcome": a.outcome,
        "status_code": a.status_code,
        "latency_ms": a.latency_ms,
        "excerpt": a.excerpt,
        "error": a.error,
        "at_ms": a.at_ms,
    }


def _state(e: WebhookEndpoint) -> Text:
    return Text("enabled", "green") if e.enabled else Text("disabled", "red")


def _outcome(a: WebhookAttempt) -> Text:
    if a.outcome == "delivered":
        return Text("delivered", "green")
    return literal(a.error or "failed", "red")


def _where(tenant: str | None, endpoint: str) -> str:
    return endpoint if tenant is None else f"{tenant}/{endpoint}"
