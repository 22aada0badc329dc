"""The endpoint ledger as an app and an operator use it: register an endpoint (its URL checked
first), read it, re-enable it after its failures disabled it.

An endpoint is `(tenant, endpoint id)`: the id is the app's name for it (`ENDPOINT_PATTERN`:
ASCII letters, digits and `._:-`, so it travels in logs, headers and a CLI argument as it is),
unique per tenant. Every refusal comes before the store is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

from jobs_core.clock import Clock, SystemClock
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    TenantMismatchError,
    WebhookEndpointUnknownError,
    WebhookEventInvalidError,
    WebhookUrlRefusedError,
)
from jobs_core.factories.webhooks.url import networks, parse_url, resolve
from jobs_core.records import WebhookEndpoint, WebhookEndpointEnable, WebhookEndpointPut
from jobs_core.tenant import current_tenant

#: An endpoint id: 1 to 128 of ASCII letters, digits and `._:-`, starting with a letter or digit.
ENDPOINT_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
#: How long registering waits for the host to resolve, in seconds.
RESOLVE_TIMEOUT_S: Final = 5.0


def check_endpoint_id(endpoint: object) -> str:
    """`endpoint` when it is a valid id, else `X_WEBHOOK_EVENT_INVALID` saying so."""
    if not isinstance(endpoint, str) or ENDPOINT_PATTERN.fullmatch(endpoint) is None:
        raise WebhookEventInvalidError(
            f"an endpoint id is 1-128 of A-Z a-z 0-9 . _ : - (got {endpoint!r:.60})",
            detail="endpoint",
        )
    return endpoint


async def register_endpoint(
    driver: JobDriver,
    endpoint: str,
    url: str,
    *,
    tenant_id: str | None = None,
    allow_networks: Sequence[str] = (),
    resolve_host: bool = True,
    clock: Clock | None = None,
) -> WebhookEndpoint:
    """Store `endpoint` of `tenant_id` at `url` (a new one enabled; a known one moved, its
    state kept). The URL is checked as a send checks it — its shape and, with `resolve_host`,
    every address its host resolves to now (`X_WEBHOOK_URL_REFUSED`, nothing written); a send
    checks again, since a name can resolve elsewhere later. Code acting for a tenant (a body's,
    `acting_for`) registers that tenant's endpoints only: another `tenant_id`, or none (the
    endpoints of no tenant, which a `tenant="none"` sender sends through), is
    `X_JOB_TENANT_MISMATCH`."""
    check_endpoint_id(endpoint)
    _refuse_other(tenant_id, endpoint)
    allowed = networks(allow_networks)
    parse_url(url)
    if resolve_host:
        try:
            await resolve(url, allowed, RESOLVE_TIMEOUT_S)
        except OSError as exc:
            raise WebhookUrlRefusedError(f"the host does not resolve: {exc}", detail="url") from exc
    now = (clock or SystemClock()).now_ms()
    return await driver.webhook_endpoint_put(WebhookEndpointPut(tenant_id, endpoint, url, now))


async def enable_endpoint(
    driver: JobDriver, endpoint: str, *, tenant_id: str | None = None, clock: Clock | None = None
) -> WebhookEndpoint:
    """The operator's re-enable: `endpoint` enabled, its failure streak cleared; answers it
    (`X_WEBHOOK_ENDPOINT_UNKNOWN` when there is none). Jobs that failed while it was disabled
    stay failed: requeue them (`ujobs jobs requeue`) once it is back. Code acting for a tenant
    enables that tenant's endpoints only (`X_JOB_TENANT_MISMATCH`, as `register_endpoint`)."""
    check_endpoint_id(endpoint)
    _refuse_other(tenant_id, endpoint)
    now = (clock or SystemClock()).now_ms()
    got = await driver.webhook_endpoint_enable(WebhookEndpointEnable(tenant_id, endpoint, now))
    if got is None:
        raise WebhookEndpointUnknownError(detail=_name(tenant_id, endpoint))
    return got


def _name(tenant_id: str | None, endpoint: str) -> str:
    return endpoint if tenant_id is None else f"{tenant_id}/{endpoint}"


def _refuse_other(tenant_id: str | None, endpoint: str) -> None:
    """Fail closed: code acting for a tenant writes no other tenant's endpoint, nor one of no
    tenant (an endpoint id or URL taken from a request must not move a system endpoint)."""
    asking = current_tenant()
    if asking is not None and tenant_id != asking:
        raise TenantMismatchError(
            f"code acting for {asking!r} cannot write the endpoint of {tenant_id or 'no tenant'!r}",
            detail=_name(tenant_id, endpoint),
        )
