"""`webhook()`: ONE event to ONE endpoint per job, signed in the Standard Webhooks wire format.

A factory over `job()`, with no steps: each run is one attempt. It reads the endpoint from the
ledger (the `webhooks` family); a disabled one is not sent to (terminal
`X_WEBHOOK_ENDPOINT_DISABLED`). It checks the URL and every address its host resolves to, POSTs
the event to a checked address, and RECORDS the attempt — status, latency, a bounded excerpt —
moving the endpoint's failure streak in the same fenced write, BEFORE it returns or raises. A
cancelled attempt is not recorded. Then: 2xx completes; 5xx, no answer and 429 are retried on
the job's backoff (429 with `Retry-After` is deferred by that long instead, as a rate limit:
`X_RATE_LIMITED`, the attempt given back); any other 4xx, or a redirect, is terminal
(`X_WEBHOOK_REJECTED`). The attempt that brings the streak to `disable_after` disables the
endpoint, and its job fails terminal too; an operator re-enables it (`ujobs webhooks enable`).

The input (`webhook_event()` builds it): `{"endpoint", "type", "id", "data", "timestamp"?,
"org_id"?}`. `id` is the event's (the `webhook-id` header, the same on every attempt) and,
with the endpoint, the job's idempotency key: one job per event and endpoint while it is live.
An org tenant (`tenant="org"`, the default) reads its org off the input (`org_id`); none, or
another org than the enqueuer acts for, is `X_JOB_TENANT_MISMATCH` (refused at enqueue, and
terminal in a run). `tenant="none"` sends to the endpoints of no tenant only.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import inspect
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import httpx
from standardwebhooks import Webhook

from jobs_core.clock import Clock
from jobs_core.context import JobContext
from jobs_core.driver import MAX_KEY_BYTES, MAX_WEBHOOK_DISABLE_AFTER
from jobs_core.errors import (
    LeaseLostError,
    RateLimitedError,
    TenantMismatchError,
    WebhookDeclarationInvalidError,
    WebhookDeliveryFailedError,
    WebhookEndpointDisabledError,
    WebhookEndpointUnknownError,
    WebhookEventInvalidError,
    WebhookRejectedError,
    WebhookUrlRefusedError,
)
from jobs_core.factories.webhook_tally import ATTEMPTS, Sender, note_sender
from jobs_core.factories.webhooks.endpoints import check_endpoint_id
from jobs_core.factories.webhooks.send import Answer, excerpt_of, post
from jobs_core.factories.webhooks.sign import headers, signers
from jobs_core.factories.webhooks.url import IpNetwork, Target, networks, resolve
from jobs_core.ids import new_id
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.jsonform import JsonValue, dumps
from jobs_core.options import count, finite_number
from jobs_core.records import WebhookAttemptPut, WebhookEndpoint
from jobs_core.resend import again_if_lost
from jobs_core.retry import Retry
from jobs_core.tenant import current_tenant

#: The name of the job `webhook()` declares unless told otherwise.
DEFAULT_NAME: Final = "ujobs.webhook"
#: Failed attempts in a row that disable an endpoint unless the declaration says otherwise.
DEFAULT_DISABLE_AFTER: Final = 20
#: Seconds to connect (and to resolve the host), and to wait for each read, by default.
DEFAULT_CONNECT_TIMEOUT: Final = 5.0
DEFAULT_READ_TIMEOUT: Final = 15.0
#: The longest `Retry-After` honoured, in seconds (a longer one is cut to it).
DEFAULT_MAX_RETRY_AFTER: Final = 3_600.0
#: The largest body a delivery sends, in bytes.
DEFAULT_MAX_BODY_BYTES: Final = 256 * 1024
#: Redirect hops followed at most when the declaration allows redirects.
MAX_REDIRECTS: Final = 5
#: An event id (`webhook-id`): 1 to 128 of ASCII letters, digits and `._:~-`.
EVENT_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:~-]{0,127}")
#: An event type: 1 to 128 of ASCII letters, digits and `._:/-`.
EVENT_TYPE_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")

#: The secrets that sign an endpoint's deliveries: one list for every endpoint, or a function
#: of (tenant, endpoint id) answering that endpoint's active secrets (sync or async).
Secrets = (
    Sequence[str]
    | Callable[[str | None, str], Sequence[str]]
    | Callable[[str | None, str], Awaitable[Sequence[str]]]
)


def webhook_event(
    endpoint: str,
    type: str,
    data: JsonValue,
    *,
    id: str | None = None,
    org_id: str | None = None,
    timestamp: dt.datetime | None = None,
) -> dict[str, JsonValue]:
    """The input of one `webhook()` job: `data` as event `type` to `endpoint`, under event id
    `id` (a fresh `msg_…` one by default) stamped `timestamp` (now by default)."""
    at = timestamp or dt.datetime.now(dt.UTC)
    event: dict[str, JsonValue] = {
        "endpoint": endpoint,
        "type": type,
        "id": id if id is not None else f"msg_{new_id()}",
        "timestamp": at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "data": data,
    }
    if org_id is not None:
        event["org_id"] = org_id
    return event


@dataclass(frozen=True, slots=True)
class Event:
    """A checked input: where it goes, what it is, and the body every attempt sends."""

    endpoint: str
    id: str
    org_id: str | None
    body: bytes

    @property
    def key(self) -> str:
        return f"{self.id}@{self.endpoint}"


@dataclass(frozen=True, slots=True)
class _Plan:
    """A declaration's settings, read by each run."""

    tenant: Literal["org", "none"]
    secrets: Secrets
    disable_after: int
    connect_s: float
    read_s: float
    max_retry_after_ms: int
    max_body_bytes: int
    allowed: tuple[IpNetwork, ...]
    allow_redirects: bool


def webhook(
    name: str = DEFAULT_NAME,
    *,
    secrets: Secrets,
    tenant: Literal["org", "none"] = "org",
    disable_after: int = DEFAULT_DISABLE_AFTER,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    read_timeout: float = DEFAULT_READ_TIMEOUT,
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allow_networks: Sequence[str] = (),
    allow_redirects: bool = False,
    queue: str = "default",
    priority: int = 0,
    retry: Retry | None = None,
    timeout: float | None = None,
    registry: JobRegistry | None = None,
) -> JobHandle:
    """Declare the webhook sender `name`; answers its handle (enqueue `webhook_event(...)`).

    `secrets`: the Standard Webhooks secrets (`whsec_…`) that sign, each of them, every
    delivery — a list, or a function of (tenant, endpoint id) answering an endpoint's active
    ones (rotation: answer the old and the new together until receivers moved). `tenant`:
    `"org"` (the org is the input's `org_id`) or `"none"`. `disable_after`: failed attempts in
    a row that disable an endpoint (default 20). `connect_timeout`/`read_timeout`: seconds.
    `max_retry_after`: the longest `Retry-After` honoured, seconds. `allow_networks`: CIDR
    blocks a URL may resolve into though not public (none by default: private, loopback,
    link-local, multicast and unspecified addresses are refused). `allow_redirects`: follow up
    to 5 redirects, each target checked like the first (refused by default). `queue`,
    `priority`, `retry`, `timeout`, `registry` are the job's. Refused at declaration, nothing
    registered: `X_WEBHOOK_DECLARATION_INVALID` (secrets, tenant, networks),
    `X_JOB_OPTION_INVALID` (a number out of range).
    """
    if tenant not in ("org", "none"):
        raise WebhookDeclarationInvalidError("'org' or 'none'", detail="tenant")
    if not callable(secrets):
        signers(secrets, "secrets")
    if not isinstance(allow_redirects, bool):
        raise WebhookDeclarationInvalidError("True or False", detail="allow_redirects")
    plan = _Plan(
        tenant=tenant,
        secrets=secrets,
        disable_after=count(
            disable_after, "disable_after", minimum=1, maximum=MAX_WEBHOOK_DISABLE_AFTER
        ),
        connect_s=finite_number(
            connect_timeout, "connect_timeout", minimum=0.0, exclusive_minimum=True, maximum=600
        ),
        read_s=finite_number(
            read_timeout, "read_timeout", minimum=0.0, exclusive_minimum=True, maximum=3600
        ),
        max_retry_after_ms=round(
            finite_number(max_retry_after, "max_retry_after", minimum=0.0, maximum=7 * 86_400)
            * 1000
        ),
        max_body_bytes=count(max_body_bytes, "max_body_bytes", minimum=1, maximum=16 * 2**20),
        allowed=networks(allow_networks),
        allow_redirects=allow_redirects,
    )

    def org_of(input: Any) -> str | None:
        return _org(plan, input)

    async def body(input: Any, ctx: JobContext) -> dict[str, JsonValue]:
        return await _deliver(plan, input, ctx)

    note_sender(body, Sender(name, tenant, plan.disable_after))
    return job(
        body,
        tenant="none" if tenant == "none" else org_of,
        name=name,
        queue=queue,
        priority=priority,
        retry=retry,
        timeout=timeout,
        idempotency_key=lambda input: _event(plan, input).key,
        registry=registry,
    )


def _org(plan: _Plan, input: Any) -> str:
    """The org a run of `input` acts for: its `org_id`, which must be the one the caller acts
    for when it acts for one (`X_JOB_TENANT_MISMATCH` otherwise; at enqueue, the enqueuer)."""
    org = input.get("org_id") if isinstance(input, Mapping) else None
    if not isinstance(org, str) or not org:
        raise TenantMismatchError("the event names no org_id", detail="org_id")
    asking = current_tenant()
    if asking is not None and asking != org:
        raise TenantMismatchError(f"tenant {asking!r} sent an event of org {org!r}", detail=org)
    return org


def _event(plan: _Plan, input: Any) -> Event:
    """The input checked, every refusal `X_WEBHOOK_EVENT_INVALID` naming its field (at enqueue
    through the key function, so nothing is written; again in each run)."""
    if not isinstance(input, Mapping):
        raise WebhookEventInvalidError("an object made by webhook_event()", detail="input")
    unknown = sorted(set(input) - {"endpoint", "type", "id", "data", "timestamp", "org_id"})
    if unknown:
        raise WebhookEventInvalidError(f"unknown field {unknown[0]!r:.60}", detail="input")
    endpoint = check_endpoint_id(input.get("endpoint"))
    for field, pattern in (("id", EVENT_ID_PATTERN), ("type", EVENT_TYPE_PATTERN)):
        value = input.get(field)
        if not isinstance(value, str) or pattern.fullmatch(value) is None:
            raise WebhookEventInvalidError(
                f"must match {pattern.pattern} (got {value!r:.60})", detail=field
            )
    stamp = input.get("timestamp")
    if stamp is not None and not _is_timestamp(stamp):
        raise WebhookEventInvalidError("an ISO 8601 time", detail="timestamp")
    org = input.get("org_id")
    if plan.tenant == "none" and org is not None:
        raise TenantMismatchError("a tenant='none' sender takes no org_id", detail="org_id")
    payload: dict[str, Any] = {"type": input["type"]}
    if stamp is not None:
        payload["timestamp"] = stamp
    payload["data"] = input.get("data")
    body = dumps(payload).encode("utf-8")
    if len(body) > plan.max_body_bytes:
        raise WebhookEventInvalidError(
            f"the body is {len(body)} bytes, past max_body_bytes {plan.max_body_bytes}",
            detail="data",
        )
    event = Event(endpoint, input["id"], org if isinstance(org, str) else None, body)
    if len(event.key) > MAX_KEY_BYTES:  # ASCII: characters are bytes
        raise WebhookEventInvalidError("id and endpoint too long together", detail="id")
    return event


def _is_timestamp(value: object) -> bool:
    if not isinstance(value, str) or len(value) > 40:
        return False
    try:
        dt.datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


async def _deliver(plan: _Plan, input: Any, ctx: JobContext) -> dict[str, JsonValue]:
    """One run: one attempt, recorded before anything is answered or raised."""
    event = _event(plan, input)
    org = ctx.tenant if plan.tenant == "org" else None
    if plan.tenant == "org" and (
        event.org_id != org or (ctx.enqueued_tenant is not None and ctx.enqueued_tenant != org)
    ):
        raise TenantMismatchError(
            f"the event's org {event.org_id!r} is not the run's ({ctx.enqueued_tenant!r})",
            detail=event.endpoint,
        )
    step = ctx.step
    driver = step.driver
    driver.require("webhooks", what="webhook()")
    ep = await driver.webhook_endpoint_get(org, event.endpoint)
    if ep is None:
        raise WebhookEndpointUnknownError(detail=_where(org, event.endpoint))
    if not ep.enabled:
        raise _disabled(ep)
    signed_by = signers(await _secrets_of(plan, org, event.endpoint), "secrets")
    ctx.signal.raise_if_cancelled()
    clock = step.clock
    answer, refused = await _attempt(plan, ep.url, event, signed_by, clock)
    outcome: Literal["delivered", "failed"] = "failed"
    code: str | None = None
    if refused is not None:
        code = refused.code
    elif answer.status_code is not None and 200 <= answer.status_code < 300:
        outcome = "delivered"
    elif answer.status_code is None or _retried(answer.status_code):
        code = WebhookDeliveryFailedError.code
    else:
        code = WebhookRejectedError.code
    put = WebhookAttemptPut(
        fence=step.fence,
        tenant_id=org,
        endpoint=event.endpoint,
        event_id=event.id,
        outcome=outcome,
        status_code=answer.status_code,
        latency_ms=min(answer.latency_ms, 86_400_000),
        excerpt=answer.excerpt,
        error=code,
        disable_after=plan.disable_after,
        now_ms=clock.now_ms(),
    )
    # The POST is made; its record may land unanswered. A claim records one attempt (a repeat
    # writes nothing and answers it), so it is resent rather than the attempt failing and the
    # next one POSTing the event a second time.
    recorded = await again_if_lost(lambda: driver.webhook_attempt_put(put))
    if not recorded.recorded or recorded.endpoint is None:
        raise LeaseLostError("the attempt was made but its claim was lost", detail=ctx.job_id)
    ATTEMPTS.add(outcome)
    status = answer.status_code
    if outcome == "delivered":
        return {
            "event_id": event.id,
            "endpoint": event.endpoint,
            "status": status,
            "latency_ms": answer.latency_ms,
        }
    after = recorded.endpoint
    if not after.enabled:
        raise _disabled(after)
    if refused is not None:
        raise refused
    said = f"{status}: {answer.excerpt[:200]}" if status is not None else answer.excerpt[:200]
    if status == 429 and answer.retry_after is not None:
        wait = _retry_after_ms(answer.retry_after, clock.now_ms())
        if wait is not None:
            raise RateLimitedError(
                f"the endpoint answered 429, retry after {wait} ms",
                detail=event.endpoint,
                retry_after_ms=min(wait, plan.max_retry_after_ms),
            )
    if code == WebhookRejectedError.code:
        raise WebhookRejectedError(f"the endpoint answered {said}", detail=event.endpoint)
    raise WebhookDeliveryFailedError(f"the endpoint answered {said}", detail=event.endpoint)


async def _attempt(
    plan: _Plan, url: str, event: Event, signed_by: Sequence[Webhook], clock: Clock
) -> tuple[Answer, WebhookUrlRefusedError | None]:
    """The POST, following allowed redirects (each hop checked); a URL refused now answers
    no status and the refusal (recorded like any failed attempt, then raised)."""
    latency = 0
    for _ in range(MAX_REDIRECTS + 1):
        try:
            target: Target = await resolve(url, plan.allowed, plan.connect_s)
        except WebhookUrlRefusedError as exc:
            return Answer(None, latency, excerpt_of(exc.message)), exc
        except OSError as exc:
            why = f"{type(exc).__name__}: {exc}"
            return Answer(None, latency, excerpt_of(why), error=why), None
        sent = headers(event.id, clock.now_ms(), event.body, signed_by)
        answer = await post(target, event.body, sent, connect_s=plan.connect_s, read_s=plan.read_s)
        latency += answer.latency_ms
        status = answer.status_code
        if status is not None and not 100 <= status <= 599:
            return Answer(None, latency, excerpt_of(f"status {status} out of range")), None
        if (
            plan.allow_redirects
            and status in (301, 302, 303, 307, 308)
            and answer.location is not None
        ):
            url = str(_join(target.url, answer.location))
            continue
        return Answer(status, latency, answer.excerpt, answer.retry_after), None
    return Answer(None, latency, excerpt_of("too many redirects")), WebhookUrlRefusedError(
        f"more than {MAX_REDIRECTS} redirects", detail="url"
    )


def _join(base: str, location: str) -> str:
    return str(httpx.URL(base).join(location))


def _retried(status: int) -> bool:
    return status >= 500 or status == 429


def _retry_after_ms(value: str, now_ms: int) -> int | None:
    """`Retry-After` as ms from now: delta seconds or an HTTP date; None when unreadable."""
    value = value.strip()
    # ASCII digits only: `str.isdigit` takes '²' and other digits `int` refuses.
    if value.isascii() and value.isdigit():
        return int(value) * 1000 if len(value) < 12 else None
    try:
        at = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, OverflowError):  # a year past `datetime`'s overflows
        return None
    if at.tzinfo is None:
        return None
    ms = at.timestamp() * 1000 - now_ms
    return max(0, math.ceil(ms)) if math.isfinite(ms) else None


async def _secrets_of(plan: _Plan, tenant: str | None, endpoint: str) -> Sequence[str]:
    if not callable(plan.secrets):
        return plan.secrets
    got = plan.secrets(tenant, endpoint)
    if inspect.isawaitable(got):
        got = await got
    return got


def _disabled(ep: WebhookEndpoint) -> WebhookEndpointDisabledError:
    return WebhookEndpointDisabledError(
        f"disabled after {ep.failures} failed attempts in a row; not sent (re-enable it: ujobs"
        f" webhooks enable {ep.endpoint})",
        detail=_where(ep.tenant_id, ep.endpoint),
    )


def _where(tenant: str | None, endpoint: str) -> str:
    return endpoint if tenant is None else f"{tenant}/{endpoint}"


__all__ = [
    "DEFAULT_DISABLE_AFTER",
    "DEFAULT_NAME",
    "Secrets",
    "webhook",
    "webhook_event",
]
