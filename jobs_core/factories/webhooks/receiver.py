"""`webhook_receiver()`: an inbound webhook route that stores the event as a job before it acks.

    from jobs_core.factories.webhooks import (
        receiver_starlette, standard_webhooks_verifier, webhook_receiver,
    )

    async def on_event(event, ctx):               # a ReceivedEvent: .id, .payload
        ...

    orders = webhook_receiver(
        name="acme.orders",
        verify=standard_webhooks_verifier(os.environ["ACME_WEBHOOK_SECRET"]),
        tenant="org_acme",                         # or a function of the verified event
        handle=on_event,
    )
    app.router.routes.append(receiver_starlette.route(orders, "/webhooks/acme"))  # FastAPI

What one request does, in this order, answering small JSON (`{"code", "title"}` on a refusal,
never a byte of the request's body):

1. Not a POST: 405. A `Content-Length` that is not a number: 400; past `max_bytes`: 413 before a
   byte is read. A content type not in `content_types`: 415 (`X_WEBHOOK_REQUEST_INVALID`,
   `X_WEBHOOK_BODY_TOO_LARGE`, `X_WEBHOOK_CONTENT_TYPE_INVALID`).
2. The body is read as a stream and the read stops past `max_bytes` (413): never more is held.
3. `verify(body, headers)` runs on the raw bytes BEFORE anything parses them, and answers the
   event id and payload from what it verified (`ReceivedEvent`); a failed verification is 401
   (`X_WEBHOOK_SIGNATURE_INVALID`), a verified body that is not storable JSON 400.
4. The id must be a string matching `id_pattern` (422, `X_WEBHOOK_EVENT_ID_INVALID`).
5. The tenant: a fixed org per route (`tenant="org_1"`), a function of the verified event
   (`tenant=lambda event: ...`; it sees nothing a caller sends outside the signed data), or
   `"none"`. A function that raises or answers no usable org is 422 (`X_WEBHOOK_TENANT_INVALID`):
   an event whose tenant cannot be verified is never enqueued for some default one.
6. The job is enqueued — input `{"event_id", "payload"}`, key the event id, its id derived from
   (name, tenant, event id) — and only then the 200 is sent (`{"job_id", "deduped"}`). A store
   that cannot take it answers 503 (`X_DRIVER_UNAVAILABLE`), so the sender retries. A
   duplicate delivery (the sender's retry after a lost 200) finds the row by its derived id,
   live or finished, and answers 200 `deduped: true`: one job per event, until the finished
   row is purged by retention.

The payload is stored as a sensitive field (`payload` masks it in every operator view, log and
error report; add more with `sensitive=`). The job body is `handle(event, ctx)`, AT LEAST once
per event like any job, acting for the tenant derived again from the stored event.
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from jobs_core.context import JobContext
from jobs_core.driver import MAX_KEY_BYTES, name_refusal
from jobs_core.errors import (
    DriverLimitError,
    DriverUnavailableError,
    InputInvalidError,
    JobsError,
    RecordInvalidError,
    WebhookBodyInvalidError,
    WebhookBodyTooLargeError,
    WebhookContentTypeError,
    WebhookEventIdInvalidError,
    WebhookReceiverDeclarationInvalidError,
    WebhookRequestInvalidError,
    WebhookSignatureInvalidError,
    WebhookTenantInvalidError,
)
from jobs_core.factories.sweep import call
from jobs_core.factories.webhooks.verify import ReceivedEvent, Verifier
from jobs_core.ids import derived_id
from jobs_core.job import (
    JobHandle,
    JobRegistry,
    SettledHook,
    TenantSpec,
    default_registry,
    factory_handle,
    job,
)
from jobs_core.jsonform import MAX_JSON_BYTES, JsonValue
from jobs_core.leases.limits import ConcurrencySpec, RateLimit
from jobs_core.retry import Retry

if TYPE_CHECKING:
    from jobs_core.facade import Jobs

log = logging.getLogger("jobs.webhooks")

#: The default bound on an event id: what Standard Webhooks (`msg_…`) and Stripe (`evt_…`)
#: send, and nothing a terminal or a log line acts on.
EVENT_ID_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,254}")
#: The default and the largest `max_bytes`: the stored input (the payload and its id) must stay
#: within one JSON text's bound.
DEFAULT_MAX_BYTES: Final = 262_144
MAX_MAX_BYTES: Final = MAX_JSON_BYTES - 4_096
#: The content types read unless told otherwise (the media type; parameters are ignored).
JSON_TYPES: Final = ("application/json",)
#: The input's fields: the payload is always among the job's sensitive fields.
EVENT_ID: Final = "event_id"
PAYLOAD: Final = "payload"
#: The methods the Starlette route takes in, so that all but POST get the receiver's own 405.
METHODS: Final = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
#: The most characters of a Content-Length header read as a number.
_LENGTH_DIGITS: Final = 19

#: `handle(event, ctx)`: the job body, sync (on a thread) or async.
HandleFn = Callable[[ReceivedEvent, JobContext], Any]
#: `tenant=`: a fixed org, `"none"`, or a function of the verified event answering the org.
ReceiverTenant = str | Callable[[ReceivedEvent], str | None]


@dataclass(frozen=True, slots=True)
class Answer:
    """What one request is answered: a status and a small JSON body (never the request's)."""

    status: int
    body: dict[str, JsonValue]

    def content(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode()

    @classmethod
    def refusal(cls, status: int, error: JobsError) -> Answer:
        """A refusal: the stable code and its title, not the error's message (which may name
        what the request sent)."""
        return cls(status, {"code": error.code, "title": error.title})


@dataclass(frozen=True, slots=True)
class ReceiverSpec:
    """A receiver as declared, checked."""

    verify: Verifier
    handle: HandleFn
    #: A fixed org, None for `"none"`, or the function of the event.
    tenant: str | Callable[[ReceivedEvent], str | None] | None
    max_bytes: int
    id_pattern: re.Pattern[str]
    content_types: frozenset[str] | None


@dataclass(eq=False, repr=False)
class WebhookReceiver(JobHandle):
    """A declared receiver: the job its events run as (give it to the worker like any job),
    and the request handling every framework adapter shares."""

    spec: ReceiverSpec = field(kw_only=True)

    def __repr__(self) -> str:
        return f"<webhook_receiver {self.name!r} queue={self.queue!r}>"

    # -- before the body is read ---------------------------------------------------------------

    def precheck(
        self, method: str, content_length: str | None, content_type: str | None
    ) -> Answer | None:
        """A refusal decided from the request line and headers alone, or None to read on."""
        if method.upper() != "POST":
            return Answer.refusal(405, WebhookRequestInvalidError())
        if content_length is not None:
            text = content_length.strip()
            if not text.isdigit() or not text.isascii() or len(text) > _LENGTH_DIGITS:
                return Answer.refusal(400, WebhookRequestInvalidError())
            if int(text) > self.spec.max_bytes:
                return Answer.refusal(413, WebhookBodyTooLargeError())
        allowed = self.spec.content_types
        if allowed is not None:
            media = (content_type or "").split(";", 1)[0].strip().lower()
            if media not in allowed:
                return Answer.refusal(415, WebhookContentTypeError())
        return None

    async def read(self, chunks: AsyncIterator[bytes], *, length: str | None = None) -> bytes:
        """The body from `chunks`, stopped as soon as it passes `max_bytes`
        (`WebhookBodyTooLargeError`): no more than `max_bytes` and one chunk is ever held. A
        body that ends before the declared Content-Length `length` is
        `WebhookRequestInvalidError` (a 400): a cut body is never taken for the whole."""
        body = bytearray()
        async for chunk in chunks:
            if len(body) + len(chunk) > self.spec.max_bytes:
                raise WebhookBodyTooLargeError()
            body += chunk
        return _whole(body, length)

    def read_sync(
        self, read: Callable[[int], bytes], chunk: int = 65_536, *, length: str | None = None
    ) -> bytes:
        """`read` for a WSGI input (`read(n)` answering b"" at its end). A client that went
        away mid-body — the server's read raises `OSError` (Django's `UnreadablePostError`
        is one), or the input ends before the declared Content-Length `length` — is
        `WebhookRequestInvalidError` (a 400): a cut body is never taken for the whole."""
        body = bytearray()
        while True:
            try:
                part = read(min(chunk, self.spec.max_bytes + 1 - len(body)))
            except OSError:
                raise WebhookRequestInvalidError("the client went away mid-body") from None
            if not part:
                break
            body += part
            if len(body) > self.spec.max_bytes:
                raise WebhookBodyTooLargeError()
        return _whole(body, length)

    # -- the body read -------------------------------------------------------------------------

    async def receive(self, body: bytes, headers: Mapping[str, str], client: Jobs) -> Answer:
        """Verify, bound the id, derive the tenant, enqueue; the answer to send. Never raises
        (an unexpected failure answers 401 before the enqueue, 503 at it)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        try:
            event = await call(self.spec.verify, body, lowered)
        except WebhookSignatureInvalidError as exc:
            return Answer.refusal(401, exc)
        except WebhookBodyInvalidError as exc:
            return Answer.refusal(400, exc)
        except DriverUnavailableError as exc:
            return Answer.refusal(503, exc)
        except Exception as exc:
            # Fail closed: a verifier that breaks has verified nothing.
            log.warning("jobs.webhook.verify_failed: %s raised %s", self.name, _kind(exc))
            return Answer.refusal(401, WebhookSignatureInvalidError())
        if not isinstance(event, ReceivedEvent):
            log.warning("jobs.webhook.verify_failed: %s answered no ReceivedEvent", self.name)
            return Answer.refusal(401, WebhookSignatureInvalidError())
        if (
            name_refusal(event.id, MAX_KEY_BYTES) is not None  # the key every store can hold
            or self.spec.id_pattern.fullmatch(event.id) is None
        ):
            return Answer.refusal(422, WebhookEventIdInvalidError())
        try:
            org = self.tenant_of(event)
        except WebhookTenantInvalidError as exc:
            return Answer.refusal(422, exc)
        return await self._enqueue(event, org, client)

    def receive_sync(
        self, body: bytes, headers: Mapping[str, str], client: Jobs | Callable[[], Jobs] | None
    ) -> Answer:
        """`receive` from a sync view (Flask, Django): run on the client's own loop, as
        `enqueue_sync` runs. A client that cannot be had answers 503 (the sender retries)."""
        try:
            jobs = resolve_client(client)
        except Exception as exc:
            log.warning("jobs.webhook.no_client: %s: %s", self.name, _kind(exc))
            return Answer.refusal(503, DriverUnavailableError())
        return jobs._run_sync(self.receive(body, headers, jobs))

    def tenant_of(self, event: ReceivedEvent) -> str | None:
        """The org `event` is run for (None: `"none"`); `WebhookTenantInvalidError` when the
        declaration's function raises or answers no org a store can hold."""
        tenant = self.spec.tenant
        if tenant is None or isinstance(tenant, str):
            return tenant
        try:
            org = tenant(event)
        except Exception as exc:
            raise WebhookTenantInvalidError(f"the tenant function raised {_kind(exc)}") from None
        if name_refusal(org) is not None:
            raise WebhookTenantInvalidError("the tenant function answered no usable org")
        assert isinstance(org, str)
        return org

    def job_id_for(self, event_id: str, org: str | None) -> str:
        """The job's id for one event: the same for every delivery of it, so a retry dedupes."""
        return derived_id("webhook_receiver", self.name, org or "", event_id)

    async def _enqueue(self, event: ReceivedEvent, org: str | None, client: Jobs) -> Answer:
        try:
            done = await client.enqueue(
                self,
                {EVENT_ID: event.id, PAYLOAD: event.payload},
                key=event.id,
                tenant_id=org,
                id=self.job_id_for(event.id, org),
            )
        except (InputInvalidError, RecordInvalidError, DriverLimitError):
            return Answer.refusal(422, WebhookBodyInvalidError())
        except DriverUnavailableError as exc:
            log.warning("jobs.webhook.unavailable: %s: the sender will retry", self.name)
            return Answer.refusal(503, exc)
        except Exception as exc:
            # Not stored: the sender must retry, whatever broke.
            log.warning("jobs.webhook.enqueue_failed: %s raised %s", self.name, _kind(exc))
            return Answer.refusal(503, DriverUnavailableError())
        return Answer(200, {"job_id": done.id, "deduped": done.deduped})


def event_of(input: Any) -> ReceivedEvent:
    """The event a stored input holds (what the job body is handed)."""
    return ReceivedEvent(input[EVENT_ID], input[PAYLOAD])


def resolve_client(client: Jobs | Callable[[], Jobs] | None) -> Jobs:
    """The client that enqueues: the one given, the answer of the function given, else the
    configured one."""
    from jobs_core.facade import Jobs, default_client

    if client is None:
        return default_client()
    if isinstance(client, Jobs):
        return client
    return client()


def _whole(body: bytearray, length: str | None) -> bytes:
    """`body`, unless the request declared a Content-Length it falls short of: the client went
    away mid-body (`WebhookRequestInvalidError`)."""
    declared = (length or "").strip()
    if declared.isdigit() and declared.isascii() and len(body) < int(declared):
        raise WebhookRequestInvalidError("the body ended before its Content-Length")
    return bytes(body)


def _kind(exc: BaseException) -> str:
    """An error named by its type and code alone: its message may carry what was sent."""
    code = getattr(exc, "code", None)
    return f"{type(exc).__name__}" + (f" ({code})" if isinstance(code, str) else "")


def webhook_receiver(
    *,
    name: str,
    verify: Verifier,
    handle: HandleFn,
    tenant: ReceiverTenant,
    max_bytes: int = DEFAULT_MAX_BYTES,
    id_pattern: str | re.Pattern[str] = EVENT_ID_PATTERN,
    content_types: Iterable[str] | None = JSON_TYPES,
    queue: str = "default",
    retry: Retry | None = None,
    priority: int = 0,
    timeout: float | None = None,
    step_timeout: float | None = None,
    sensitive: Iterable[str] = (),
    on_settled: SettledHook | None = None,
    concurrency: ConcurrencySpec = None,
    rate_limit: RateLimit | Sequence[RateLimit] | None = None,
    registry: JobRegistry | None = None,
) -> WebhookReceiver:
    """Declare a webhook receiver: a job named `name` run once per verified event, and the
    route that enqueues it (`receiver_starlette.route`, `receiver_flask.view`,
    `receiver_django.view`: the framework's adapter, imported by the app that mounts it).

    `verify(body, headers)`: `standard_webhooks_verifier`, `stripe_verifier` or your own (see
    `jobs_core.factories.webhooks.verify`). `tenant`: a fixed org for every event of this route,
    `"none"`, or a function of the verified event. `max_bytes`: the longest body read (at most
    `MAX_MAX_BYTES`). `id_pattern`: what an event id must fully match. `content_types`: the
    media types read (None: any). The other options are `job()`'s. Every refusal is
    `X_WEBHOOK_RECEIVER_DECLARATION_INVALID` naming its option (`X_JOB_DUPLICATE` for a name
    taken).
    """
    refusal = name_refusal(name)
    if refusal is not None:
        raise WebhookReceiverDeclarationInvalidError(refusal, detail="name")
    if not callable(verify):
        raise WebhookReceiverDeclarationInvalidError("verify must be a function", detail="verify")
    if not callable(handle):
        raise WebhookReceiverDeclarationInvalidError("handle must be a function", detail="handle")
    spec = ReceiverSpec(
        verify=verify,
        handle=handle,
        tenant=_tenant(tenant),
        max_bytes=_max_bytes(max_bytes),
        id_pattern=_pattern(id_pattern),
        content_types=_content_types(content_types),
    )

    async def body(input: Any, ctx: JobContext) -> Any:
        return await call(spec.handle, event_of(input), ctx)

    made = factory_handle(
        WebhookReceiver,
        WebhookReceiverDeclarationInvalidError,
        functools.partial(
            job,
            body,
            tenant=_job_tenant(spec.tenant),
            name=name,
            queue=queue,
            idempotency_key=lambda input: input[EVENT_ID],
            retry=retry,
            priority=priority,
            timeout=timeout,
            step_timeout=step_timeout,
            sensitive=(PAYLOAD, *_names(sensitive)),
            on_settled=on_settled,
            concurrency=concurrency,
            rate_limit=rate_limit,
            registry=JobRegistry(),  # checked there, registered below as the receiver it is
        ),
        spec=spec,
    )
    (registry if registry is not None else default_registry).add(made)
    return made


def _tenant(tenant: object) -> str | Callable[[ReceivedEvent], str | None] | None:
    if tenant == "none":
        return None
    if callable(tenant):
        if inspect.iscoroutinefunction(tenant):
            raise WebhookReceiverDeclarationInvalidError(
                "the tenant function is a plain function (the worker calls it too)",
                detail="tenant",
            )
        return tenant
    if name_refusal(tenant) is not None:
        raise WebhookReceiverDeclarationInvalidError(
            "tenant is an org id, 'none', or a function of the verified event", detail="tenant"
        )
    assert isinstance(tenant, str)
    return tenant


def _job_tenant(tenant: str | Callable[[ReceivedEvent], str | None] | None) -> TenantSpec:
    """The job's own tenant: the route's org, or the function over the stored event (the run
    acts for what the verified event said, derived again, never a field stored beside it)."""
    if tenant is None:
        return "none"
    if isinstance(tenant, str):
        org = tenant
        return lambda input: org
    fn = tenant
    return lambda input: fn(event_of(input))


def _max_bytes(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MAX_BYTES:
        raise WebhookReceiverDeclarationInvalidError(
            f"must be an integer in [1, {MAX_MAX_BYTES}]", detail="max_bytes"
        )
    return value


def _pattern(value: object) -> re.Pattern[str]:
    try:
        pattern = re.compile(value) if isinstance(value, str) else value
    except re.error:
        pattern = None
    if not isinstance(pattern, re.Pattern) or not isinstance(pattern.pattern, str):
        raise WebhookReceiverDeclarationInvalidError(
            "a regular expression (text) an event id must fully match", detail="id_pattern"
        )
    return pattern


def _content_types(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise WebhookReceiverDeclarationInvalidError(
            "a list of media types (None: any)", detail="content_types"
        )
    types = [t.strip().lower() if isinstance(t, str) else t for t in value]
    if not types or not all(isinstance(t, str) and "/" in t for t in types):
        raise WebhookReceiverDeclarationInvalidError(
            "a list of media types like 'application/json'", detail="content_types"
        )
    return frozenset(types)


def _names(sensitive: Iterable[str]) -> tuple[str, ...]:
    if isinstance(sensitive, str | bytes) or not isinstance(sensitive, Iterable):
        # A number was a bare TypeError ('not iterable').
        raise WebhookReceiverDeclarationInvalidError("a list of field names", detail="sensitive")
    return tuple(sensitive)
