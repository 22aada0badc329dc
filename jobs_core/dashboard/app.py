"""`dashboard_app(driver)`: the operator surface as web pages, an ASGI app to serve alone
(`ujobs dashboard`) or mount in your own (`app.mount("/jobs", dashboard_app(driver))`).

Server-rendered (Starlette and Jinja2); htmx, shipped inside, refreshes the live parts (the
queues, the workers, a job that is not finished, a sweep that runs) and the job list's filters.
Every read and every action goes through `Operator`, so the dashboard works on any driver and
shows inputs redacted as the CLI does; the backfills pages read the sweep ledger's one
projection (`inspect_backfills`, as `ujobs backfills` does) and an import's error report; the
webhooks pages read the endpoint ledger (as `ujobs webhooks` does, with the `disable_after` of
the declared `webhook()` senders) and the consumers page `inspect_consumers`. A page of a
family the driver does not declare answers 501 with the `Operator`'s refusal
(`X_DRIVER_CAPABILITY_MISSING`, naming the family) — but the schedule, backfills, webhooks and
consumers lists, which say so on the page — and an action goes back with it as its notice.
Actions are plain POST forms: they work without JavaScript, carry the CSRF token, and answer
with a redirect to the page they came from and a one-line notice. Who may look and act:
`jobs_core.dashboard.security`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import quote, unquote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from jobs_core.attempts import ATTEMPT_HISTORY
from jobs_core.clock import Clock, SystemClock
from jobs_core.dashboard.instants import ago_html, at_html, said_html, when_html
from jobs_core.dashboard.security import (
    CSRF_COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    SESSION_COOKIE,
    SESSION_TTL_S,
    Access,
)
from jobs_core.dashboard.snapshot import Snapshot
from jobs_core.driver import JobDriver
from jobs_core.errors import (
    BatchTooLargeError,
    CapabilityMissingError,
    DashboardAuthRequiredError,
    DashboardCsrfError,
    DashboardReadOnlyError,
    DashboardRequestInvalidError,
    DriverUnavailableError,
    DriverUnsupportedError,
    JobNotFoundError,
    JobNotRegisteredError,
    JobsError,
    NotCancellableError,
    NotPromotableError,
    NotRemovableError,
    NotRequeueableError,
    OptionInvalidError,
    PageInvalidError,
    RecordInvalidError,
    RequeueDuplicateError,
    WebhookEndpointUnknownError,
)
from jobs_core.factories.backfill import (
    Backfill,
    EntryView,
    Pending,
    SweepView,
    inspect_backfills,
)
from jobs_core.factories.consumers.inspect import inspect_consumers
from jobs_core.factories.rows.report import import_report
from jobs_core.factories.webhook_tally import Sender, senders_of
from jobs_core.job import JobHandle
from jobs_core.operator import Action, Operator, QueueView, Throughput, refusal_for
from jobs_core.operator.times import age, local, relative, when
from jobs_core.operator.waits import step_said, waits_for
from jobs_core.records import (
    JobFilter,
    Pause,
    WebhookAttempt,
    WebhookAttemptListParams,
    WebhookEndpoint,
    WebhookEndpointEnable,
)
from jobs_core.redact import REDACTED, SENSITIVE_HINT, UNDECLARED_HINT
from jobs_core.scheduler.task import TaskHandle
from jobs_core.states import FINISHED_STATES, LIVE_STATES, JobState
from jobs_core.visible import spelled

log = logging.getLogger("jobs.dashboard")

HERE: Final = Path(__file__).parent
#: Rows on one page of the job list.
PAGE_ROWS: Final = 50
#: Listing calls one page of the job list may take (each examines at most the driver's scan
#: budget): a rare filter over a big table answers short, with a link to go on, rather than
#: slow.
PAGE_CALLS: Final = 4
#: The minutes of the queues' throughput sparklines.
SPARK_MINUTES: Final = 60
#: The queues page's counts are read at most this often, whoever watches (`Snapshot`); the
#: page refreshes itself as often.
QUEUES_FRESH_S: Final = 5.0
#: Counts older than this (nobody watched since) are read again before a view is answered.
QUEUES_STALE_S: Final = 30.0
NOTICE_COOKIE: Final = "ujobs_notice"
#: The most rows one press of a bulk button acts on, so a request stays short (the CLI's
#: `--all` has no such bound).
BULK_ROWS: Final = 10_000

#: The actions a job's page offers, by the states they apply to.
JOB_ACTIONS: Final[dict[Action, frozenset[JobState]]] = {
    Action.CANCEL: LIVE_STATES,
    Action.PROMOTE: frozenset({JobState.READY}),
    Action.REQUEUE: FINISHED_STATES,
    Action.REQUEUE_FRESH: FINISHED_STATES,
    Action.REMOVE: frozenset(JobState) - {JobState.RUNNING},
}

#: The HTTP status of each refusal (a subclass answers as its base): what the request asked
#: for is malformed 400, not allowed 401/403, absent 404, refused by the job's state 409; the
#: store down 503. Anything else is the server's fault, 500.
_STATUS: Final[dict[type[JobsError], int]] = {
    PageInvalidError: 400,
    RecordInvalidError: 400,
    OptionInvalidError: 400,
    BatchTooLargeError: 400,
    DashboardRequestInvalidError: 400,
    DashboardAuthRequiredError: 401,
    DashboardCsrfError: 403,
    DashboardReadOnlyError: 403,
    JobNotFoundError: 404,
    WebhookEndpointUnknownError: 404,
    JobNotRegisteredError: 404,
    NotCancellableError: 409,
    NotPromotableError: 409,
    NotRemovableError: 409,
    NotRequeueableError: 409,
    RequeueDuplicateError: 409,
    # Also a page or action of a family the driver does not declare (`CapabilityMissingError`).
    DriverUnsupportedError: 501,
    DriverUnavailableError: 503,
}
#: Text no page can be encoded with (a stored JSON text may decode to a lone surrogate).
_SURROGATES: Final = re.compile("[\ud800-\udfff]")
#: The notice kinds a redirect leaves (`_back`).
_NOTICE_KINDS: Final = frozenset({"ok", "error"})
#: The most a notice says.
NOTICE_CHARS: Final = 300
#: The runs of one sweep the backfills list shows (its newest per scope and environment); the
#: sweep's own page shows every run the ledger answered.
LIST_SCOPES: Final = 20
#: The refused records of an import a sweep's page shows.
REPORT_ROWS: Final = 100
#: The most characters of a stored cursor a page shows (a cursor may hold 8 KiB): in a list,
#: and on a sweep's page.
CURSOR_CHARS: Final = 80
CURSOR_CHARS_LONG: Final = 1_000
#: The endpoints the webhooks page lists, and the attempts it shows of each of the first
#: `ATTEMPT_ROWS` (one read per endpoint: the page stays a bounded number of calls; its own page
#: shows `ENDPOINT_ATTEMPTS`).
WEBHOOK_ROWS: Final = 1_000
ATTEMPT_ROWS: Final = 100
LIST_ATTEMPTS: Final = 3
ENDPOINT_ATTEMPTS: Final = 50
#: The consumers page lists at most this many (name, tenant) cursors.
CONSUMER_ROWS: Final = 1_000
#: The most characters of an attempt's excerpt a list shows (its page shows it whole: at most
#: 1 KiB).
EXCERPT_CHARS: Final = 120


def status_of(error: JobsError) -> int:
    """The HTTP status a page answers `error` with."""
    return next((_STATUS[c] for c in type(error).__mro__ if c in _STATUS), 500)


def job_path(job_id: str, verb: str = "") -> str:
    """The path of a job's page (or of `verb` on it): the id as one percent-encoded segment,
    any characters at all; `.` and `..`, which clients resolve as dot segments, go in the query
    instead (`/jobs/?id=..`)."""
    tail = f"/{verb}" if verb else ""
    if job_id in (".", ".."):
        return f"/jobs/{tail}?{urlencode({'id': job_id})}"
    return f"/jobs/{quote(job_id, safe='')}{tail}"


def batch_path(batch_id: str) -> str:
    """The path of a batch's page, its id encoded as `job_path` encodes a job's."""
    if batch_id in (".", ".."):
        return f"/batches/?{urlencode({'id': batch_id})}"
    return f"/batches/{quote(batch_id, safe='')}"


def endpoint_path(tenant: str | None, endpoint: str, verb: str = "") -> str:
    """The path of a webhook endpoint's page (or of `verb` on it): the id as one
    percent-encoded segment, the tenant (none: the endpoint of no tenant) in the query."""
    tail = f"/{verb}" if verb else ""
    path = f"/webhooks/{quote(endpoint, safe='')}{tail}"
    return path if tenant is None else f"{path}?{urlencode({'tenant': tenant})}"


def sweep_path(name: str, run: str | None = None) -> str:
    """The path of a sweep's page (showing run `run`'s error report, for an import), its name
    encoded as `job_path` encodes a job's id: a ledger name may be any text an import's or an
    export's job name holds."""
    query = {} if run is None else {"run": run}
    if name in (".", ".."):
        return f"/backfills/?{urlencode({'name': name, **query})}"
    path = f"/backfills/{quote(name, safe='')}"
    return f"{path}?{urlencode(query)}" if query else path


def literal(text: object) -> str:
    """`text` on one line, every character a page would hide or reorder spelled as its escape
    (`\\x1b`, `\\u202e`): the CLI's rule (`jobs_core.visible`)."""
    return spelled(text)


def on_page(value: object) -> object:
    """What every `{{ ... }}` of a page prints (the environment's `finalize`): a string as
    `literal` spells it, so no stored text reaches a page raw, whichever view shows it; markup
    (a macro's output, already made of shown parts; `block`, `field`) and non-strings as they
    are."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return spelled(value)
    return value


def block(text: object) -> Markup:
    """`text` kept on its lines (a traceback, a JSON document in a `<pre>`), escaped for HTML,
    each other character `literal` spells spelled."""
    return escape(spelled(text, line=False))


def field(value: object) -> Markup:
    """`value` exactly, for a form field's value: what the form posts back is what was stored
    (a queue or task to act on, a filter), never its spelling. Escaped for HTML, each C0
    control and DEL as a character reference (`&#x1b;`: read back as itself, and no raw
    control in the page); a C1 control stays as it is, since a browser reads `&#x9b;` as the
    Windows-1252 character it once stood for."""
    return Markup(_C0.sub(lambda m: f"&#x{ord(m.group()):x};", str(escape(value))))


_C0: Final = re.compile("[\x01-\x08\x0b-\x1f\x7f]")


def clip(text: object, chars: int) -> str:
    """`text` cut to `chars` characters, an ellipsis marking the cut."""
    s = str(text)
    return s if len(s) <= chars else s[: max(0, chars - 1)] + "\u2026"


def notice_of(cookie: str | None) -> dict[str, str] | None:
    """The notice a redirect left in `cookie`; None for none, and for one this dashboard did
    not write (an edited cookie shows nothing; it never fails the page)."""
    if not cookie:
        return None
    try:
        doc = json.loads(unquote(cookie))
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    kind, text = doc.get("kind"), doc.get("text")
    if kind not in _NOTICE_KINDS or not isinstance(text, str):
        return None
    return {"kind": kind, "text": text[:NOTICE_CHARS]}


_HEADERS: Final = {
    # Scripts, styles and images come from the dashboard itself; nothing frames it.
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


def sparkline(values: Sequence[int], width: int = 120, height: int = 24) -> str:
    """SVG polyline points for `values`, scaled to the box (a flat line at the bottom when all
    are zero)."""
    if not values:
        return ""
    top = max(values) or 1
    step = width / max(1, len(values) - 1)
    return " ".join(
        f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in enumerate(values)
    )


def _pretty(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=on_page,
    )
    env.filters.update(
        pretty=_pretty,
        compact=_compact,
        age=age,
        local=local,
        sparkline=sparkline,
        job_path=job_path,
        batch_path=batch_path,
        sweep_path=sweep_path,
        clip=clip,
        literal=literal,
        block=block,
        field=field,
    )
    env.globals.update(relative=relative, when=when, endpoint_path=endpoint_path)
    # -- acts-for / waits: instants in the viewer's zone, waits in words, redaction hints --
    env.globals.update(
        at=at_html,
        when=when_html,
        ago=ago_html,
        said=said_html,
        waits_for=waits_for,
        step_said=step_said,
        REDACTED=REDACTED,
        UNDECLARED_HINT=UNDECLARED_HINT,
        SENSITIVE_HINT=SENSITIVE_HINT,
    )
    env.globals.update(attempt_history=ATTEMPT_HISTORY)  # -- attempts --
    return env


def _moving(entry: EntryView) -> bool:
    """A run whose entry may still move: running, its job live (an orphaned one never moves)."""
    return entry.record.status == "running" and not entry.orphaned


class _Refused(Exception):
    def __init__(self, error: JobsError) -> None:
        self.error = error


def _job_id(request: Request) -> str:
    """The job a page or action names: its path segment, else (`.` and `..`) `?id=`."""
    return str(request.path_params.get("job_id") or request.query_params.get("id", ""))


def _safe_next(target: str | None) -> str:
    """A path inside the dashboard to go back to (never another site)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


class Dashboard:
    """The pages and actions over one `Operator`; `app` is the ASGI app."""

    def __init__(
        self,
        driver: JobDriver,
        *,
        access: Access,
        handles: Sequence[JobHandle] = (),
        tasks: Sequence[TaskHandle] = (),
        clock: Clock | None = None,
        close_driver: bool = False,
    ) -> None:
        self.driver = driver
        self.access = access
        self.operator = Operator(driver, clock=clock or SystemClock(), handles=handles)
        self.tasks = list(tasks)
        #: The declared backfills among `handles`: what exists, beside what the ledger ran.
        self.backfills = [h for h in handles if isinstance(h, Backfill)]
        #: The declared `webhook()` senders among `handles`: their `disable_after`.
        self.senders = senders_of(handles)
        self.env = _environment()
        self._close_driver = close_driver
        self._queues = Snapshot(self._read_queues, fresh_s=QUEUES_FRESH_S, stale_s=QUEUES_STALE_S)
        page = self._page
        act = self._action
        self.app = Starlette(
            routes=[
                Route("/", page(self.queues_page), name="queues"),
                Route("/queues/pause", act(self._pausing("queue", True)), methods=["POST"]),
                Route("/queues/resume", act(self._pausing("queue", False)), methods=["POST"]),
                Route("/jobs", page(self.jobs_page), name="jobs"),
                Route("/jobs/requeue-dead", act(self.requeue_dead), methods=["POST"]),
                # `path`: an id may hold `/` (its links encode it as %2F, which the server
                # decodes before routing); the verb is the last segment.
                Route("/jobs/{job_id:path}", page(self.job_page), name="job"),
                Route("/jobs/{job_id:path}/{verb}", act(self.job_action), methods=["POST"]),
                Route("/batches/{batch_id:path}", page(self.batch_page), name="batch"),
                Route("/workers", page(self.workers_page), name="workers"),
                Route("/schedule", page(self.schedule_page), name="schedule"),
                Route("/backfills", page(self.backfills_page), name="backfills"),
                Route("/backfills/{name:path}", page(self.backfill_page), name="backfill"),
                # -- webhooks and consumers --
                Route("/webhooks", page(self.webhooks_page), name="webhooks"),
                Route("/webhooks/{endpoint}", page(self.webhook_page), name="webhook"),
                Route("/webhooks/{endpoint}/enable", act(self.webhook_enable), methods=["POST"]),
                Route("/consumers", page(self.consumers_page), name="consumers"),
                Route("/schedule/pause", act(self._pausing("task", True)), methods=["POST"]),
                Route("/schedule/resume", act(self._pausing("task", False)), methods=["POST"]),
                Route("/login", self.login_form, methods=["GET"]),
                Route("/login", self.login, methods=["POST"]),
                Route("/logout", self.logout, methods=["POST"]),
                Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
            ],
            lifespan=self._lifespan,
            exception_handlers={HTTPException: self._http_error},
        )

    @asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        # Runs only when this app is served alone: a mounted app's owner runs the driver, and
        # its first view of the queues waits for their first count.
        self._queues.warm()
        try:
            yield
        finally:
            if self._close_driver:
                await self.driver.close()

    # -- who is asking -------------------------------------------------------------------------

    def _authed(self, request: Request) -> bool:
        a = self.access
        return a.header_ok(request.headers.get("authorization")) or a.session_ok(
            request.cookies.get(SESSION_COOKIE)
        )

    def _may_read(self, request: Request) -> bool:
        return not self.access.guarded or self._authed(request)

    def _challenge(self, request: Request) -> Response:
        """The answer to a request that must sign in first."""
        if self.access.token is not None and request.method == "GET":
            login = f"{self._base(request)}/login?{urlencode({'next': self._here(request)})}"
            if request.headers.get("hx-request"):
                # A live refresh whose session ran out: the whole page goes to sign in, not
                # the refreshed part.
                return Response(status_code=204, headers={"hx-redirect": login})
            return RedirectResponse(login, status_code=303)
        response = self._error(request, DashboardAuthRequiredError())
        if self.access.user is not None:
            response.headers["www-authenticate"] = 'Basic realm="ujobs dashboard", charset="UTF-8"'
        return response

    @staticmethod
    def _cross_site(request: Request) -> bool:
        """A POST another site's page sent (the browser says so), refused before its token is
        even read."""
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return True
        origin = request.headers.get("origin")
        if origin is None:
            return False
        try:
            return urlsplit(origin).netloc != request.headers.get("host")
        except ValueError:  # not a URL at all: no page of ours sent it
            return True

    async def _checked_form(self, request: Request, *, acting: bool = True) -> dict[str, str]:
        """The action's form once every guard passed: signed in, allowed to act (unless it
        only signs out), sent from a dashboard page with this browser's CSRF token."""
        if not self.access.guarded:
            raise _Refused(DashboardReadOnlyError("set credentials to act", detail="dashboard"))
        if not self._authed(request):
            raise _Refused(DashboardAuthRequiredError())
        if acting and self.access.read_only:
            raise _Refused(DashboardReadOnlyError())
        if self._cross_site(request):
            raise _Refused(DashboardCsrfError("the action came from another site"))
        form = await request.form(max_files=0, max_fields=64)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        given = fields.pop(CSRF_FIELD, None) or request.headers.get(CSRF_HEADER)
        if not self.access.csrf_ok(request.cookies.get(CSRF_COOKIE), given):
            raise _Refused(DashboardCsrfError())
        return fields

    # -- rendering -----------------------------------------------------------------------------

    @staticmethod
    def _base(request: Request) -> str:
        return str(request.scope.get("root_path", "")).rstrip("/")

    def _here(self, request: Request) -> str:
        """This request's page as a path inside the dashboard, its query kept."""
        path = request.url.path[len(self._base(request)) :] or "/"
        return f"{path}?{request.url.query}" if request.url.query else path

    def _cookie_path(self, request: Request) -> str:
        return self._base(request) or "/"

    def _render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> HTMLResponse:
        nonce = request.cookies.get(CSRF_COOKIE) or Access.new_nonce()
        notice = request.cookies.get(NOTICE_COOKIE)
        html = self.env.get_template(template).render(
            request=request,
            base=self._base(request),
            access=self.access,
            signed_in=self.access.guarded and self._authed(request),
            csrf=self.access.csrf_token(nonce),
            notice=notice_of(notice),
            now_ms=self.operator.clock.now_ms(),
            **context,
        )
        html = _SURROGATES.sub("\ufffd", html)
        response = HTMLResponse(html, status_code=status, headers=_HEADERS)
        secure = request.url.scheme == "https"
        if CSRF_COOKIE not in request.cookies:
            response.set_cookie(
                CSRF_COOKIE,
                nonce,
                path=self._cookie_path(request),
                httponly=True,
                samesite="lax",
                secure=secure,
            )
        if notice:
            response.delete_cookie(NOTICE_COOKIE, path=self._cookie_path(request))
        return response

    def _error(self, request: Request, error: JobsError) -> HTMLResponse:
        return self._render(request, "error.html", status=status_of(error), error=error)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette's own refusals (no such page, a method a route does not take, a form it
        cannot read) as the dashboard's error page, with their status."""
        status = exc.status_code if isinstance(exc, HTTPException) else 400
        error = DashboardRequestInvalidError(
            f"{status} {exc.detail}" if isinstance(exc, HTTPException) else None
        )
        return self._render(request, "error.html", status=status, error=error)

    def _back(self, request: Request, to: str, kind: str, text: str) -> Response:
        """Back to page `to` (a path inside the dashboard) with a notice for it."""
        response = RedirectResponse(f"{self._base(request)}{_safe_next(to)}", status_code=303)
        response.set_cookie(
            NOTICE_COOKIE,
            quote(json.dumps({"kind": kind, "text": text[:NOTICE_CHARS]})),
            path=self._cookie_path(request),
            httponly=True,
            samesite="lax",
            max_age=60,
        )
        return response

    def _page(
        self, build: Callable[[Request], Awaitable[tuple[str, dict[str, Any]]]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            if not self._may_read(request):
                return self._challenge(request)
            try:
                template, context = await build(request)
            except JobsError as exc:
                return self._error(request, exc)
            return self._render(request, template, **context)

        return endpoint

    def _action(
        self, do: Callable[[Request, dict[str, str]], Awaitable[Response]]
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                fields = await self._checked_form(request)
            except _Refused as refused:
                if isinstance(refused.error, DashboardAuthRequiredError):
                    return self._challenge(request)
                return self._error(request, refused.error)
            try:
                return await do(request, fields)
            except JobsError as exc:
                if status_of(exc) == 400:
                    # A request no page of ours makes (a forged or mangled form): refused as one.
                    return self._error(request, exc)
                self.recount()
                # A refusal of the store (not found, not requeueable…) goes back as a notice.
                to = fields.get("back") or "/"
                return self._back(request, to, "error", f"{exc.code}: {exc.message}")

        return endpoint

    # -- pages ---------------------------------------------------------------------------------

    async def _read_queues(self) -> tuple[list[QueueView], dict[str, Throughput]]:
        views, series = await asyncio.gather(
            self.operator.queues(), self.operator.throughput(SPARK_MINUTES)
        )
        return views, series

    async def queues_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        (views, series), age_s = await self._queues.get()
        totals = {s.value: sum(v.counts[s.value] for v in views) for s in JobState}
        return "queues.html", {
            "nav": "queues",
            "queues": views,
            "series": series,
            "totals": totals,
            "spark_minutes": SPARK_MINUTES,
            "age_s": age_s,
        }

    async def jobs_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        q = request.query_params
        state = q.get("state") or ""
        try:
            states = frozenset({JobState(state)}) if state else frozenset()
        except ValueError:
            raise PageInvalidError(f"no state {state!r}", detail="state") from None
        f = JobFilter(
            states=states,
            queue=q.get("queue") or None,
            name=q.get("name") or None,
            tenant_id=q.get("tenant") or None,
            # flows: a listing by either is refused (501) on a driver without the family.
            parent_id=q.get("parent") or None,
            batch_id=q.get("batch") or None,
            acts_for=q.get("acts_for") or None,  # acts-for: the org, apart from `tenant`
        )
        page = await self.operator.jobs(
            f, limit=PAGE_ROWS, cursor=q.get("cursor") or None, max_calls=PAGE_CALLS
        )
        filters = {
            "state": state,
            "queue": f.queue,
            "name": f.name,
            "tenant": f.tenant_id,
            "parent": f.parent_id,
            "batch": f.batch_id,
            "acts_for": f.acts_for,
        }
        kept = {k: v for k, v in filters.items() if v}
        return "jobs.html", {
            "nav": "jobs",
            "page": page,
            "filters": filters,
            "states": [s.value for s in JobState],
            "next_query": urlencode({**kept, "cursor": page.next_cursor})
            if page.next_cursor
            else None,
            "first_query": urlencode(kept),
            "paged": bool(q.get("cursor")),
            "here": self._here(request),
        }

    async def job_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        view = await self.operator.job(_job_id(request))
        state = view.record.state
        # Without the operator family every action would be refused: none is offered.
        steers = self.driver.capabilities().operator
        actions = [a for a, states in JOB_ACTIONS.items() if steers and state in states]
        caps = self.driver.capabilities()
        family = await self.operator.family(view.record) if caps.flows and steers else None
        return "job.html", {
            "nav": "jobs",
            "view": view,
            "family": family,
            "actions": actions,
            "live": state in LIVE_STATES,
            "has_steps": self.driver.capabilities().steps,
        }

    async def batch_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        batch_id = str(request.path_params.get("batch_id") or request.query_params.get("id", ""))
        view = await self.operator.batch(batch_id)
        return "batch.html", {"nav": "jobs", "batch": view}

    async def workers_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        return "workers.html", {"nav": "workers", "workers": await self.operator.workers()}

    async def schedule_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        views = await self.operator.tasks(self.tasks) if self.tasks else []
        return "schedule.html", {
            "nav": "schedule",
            "tasks": views,
            "has_tasks": self.driver.capabilities().tasks,
        }

    async def backfills_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        if not self.driver.capabilities().sweeps:
            return "backfills.html", {"nav": "backfills", "has_sweeps": False}
        view = await inspect_backfills(self.driver, self.backfills)
        rows: list[tuple[SweepView, EntryView | None, int]] = []
        for sweep in view.sweeps:
            newest = sweep.newest_per_scope()
            # Each sweep shows where it stands per scope, its first LIST_SCOPES; the rest are
            # counted and left to its own page.
            hidden = max(0, len(newest) - LIST_SCOPES)
            if not newest:
                rows.append((sweep, None, 0))
            for at, entry in enumerate(newest[:LIST_SCOPES]):
                last = at == min(len(newest), LIST_SCOPES) - 1
                rows.append((sweep, entry, hidden if last else 0))
        return "backfills.html", {
            "nav": "backfills",
            "has_sweeps": True,
            "view": view,
            "rows": rows,
            "declared": bool(self.backfills),
            "running": any(e is not None and _moving(e) for _, e, _ in rows),
            "cursor_chars": CURSOR_CHARS,
        }

    async def backfill_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        name = str(request.path_params.get("name") or request.query_params.get("name", ""))
        if not self.driver.capabilities().sweeps:
            raise CapabilityMissingError(
                f"{self.driver.describe()} keeps no sweep ledger", detail="sweeps"
            )
        view = await inspect_backfills(self.driver, self.backfills, name=name)
        sweep = view.sweep(name)
        if sweep is None:
            raise JobNotRegisteredError(
                "no sweep by this name: none declared here (--app) and none in the ledger",
                detail=name,
            )
        imports = [e for e in sweep.entries if e.record.kind == "import"]
        wanted = request.query_params.get("run")
        shown = imports[0] if imports else None
        if wanted is not None:
            shown = next((e for e in imports if e.record.run_id == wanted), None)
            if shown is None:
                raise PageInvalidError("not a run of this import", detail="run")
        report = None
        has_steps = self.driver.capabilities().steps
        if shown is not None and has_steps:
            report = await import_report(self.driver, shown.record.run_id, REPORT_ROWS)
        pending: dict[str, list[Pending]] = {}
        for p in sweep.pending:
            pending.setdefault(p.environment, []).append(p)
        return "backfill.html", {
            "nav": "backfills",
            "view": view,
            "sweep": sweep,
            "pending": pending,
            "here_path": sweep_path(name, wanted),
            "report_of": shown,
            "report": report,
            "has_steps": has_steps,
            "report_rows": REPORT_ROWS,
            "running": any(_moving(e) for e in sweep.entries),
            "cursor_chars": CURSOR_CHARS_LONG,
        }

    # -- webhooks --

    def _senders(self, tenant: str | None) -> list[Sender]:
        """The declared senders that may send to an endpoint of `tenant` (an org sender to an
        org's, a `tenant="none"` one to the endpoints of no tenant)."""
        kind = "none" if tenant is None else "org"
        return [s for s in self.senders if s.tenant == kind]

    def _require_webhooks(self) -> None:
        if not self.driver.capabilities().webhooks:
            raise CapabilityMissingError(
                f"{self.driver.describe()} keeps no webhook endpoint ledger", detail="webhooks"
            )

    async def webhooks_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        if not self.driver.capabilities().webhooks:
            return "webhooks.html", {"nav": "webhooks", "has_webhooks": False}
        endpoints = await self.driver.webhook_endpoint_list(WEBHOOK_ROWS)
        rows: list[tuple[WebhookEndpoint, list[WebhookAttempt] | None, list[Sender]]] = []
        for at, ep in enumerate(endpoints):
            tried = None
            if at < ATTEMPT_ROWS:
                tried = await self.driver.webhook_attempt_list(
                    WebhookAttemptListParams(ep.tenant_id, ep.endpoint, LIST_ATTEMPTS)
                )
            rows.append((ep, tried, self._senders(ep.tenant_id)))
        return "webhooks.html", {
            "nav": "webhooks",
            "has_webhooks": True,
            "rows": rows,
            "full": len(endpoints) >= WEBHOOK_ROWS,
            "declared": bool(self.senders),
            "can_act": self.access.can_act,
            "excerpt_chars": EXCERPT_CHARS,
            "list_attempts": LIST_ATTEMPTS,
            "attempt_rows": ATTEMPT_ROWS,
        }

    async def _endpoint(self, request: Request) -> WebhookEndpoint:
        self._require_webhooks()
        tenant = request.query_params.get("tenant") or None
        endpoint = str(request.path_params["endpoint"])
        ep = await self.driver.webhook_endpoint_get(tenant, endpoint)
        if ep is None:
            raise WebhookEndpointUnknownError(detail=endpoint)
        return ep

    async def webhook_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        ep = await self._endpoint(request)
        tried = await self.driver.webhook_attempt_list(
            WebhookAttemptListParams(ep.tenant_id, ep.endpoint, ENDPOINT_ATTEMPTS)
        )
        return "webhook.html", {
            "nav": "webhooks",
            "ep": ep,
            "attempts": tried,
            "senders": self._senders(ep.tenant_id),
            "declared": bool(self.senders),
            "can_act": self.access.can_act,
            "shown": ENDPOINT_ATTEMPTS,
        }

    async def consumers_page(self, request: Request) -> tuple[str, dict[str, Any]]:
        if not self.driver.capabilities().consumers:
            return "consumers.html", {"nav": "consumers", "has_consumers": False}
        now = self.operator.clock.now_ms()
        views = await inspect_consumers(self.driver, limit=CONSUMER_ROWS, now_ms=now)
        return "consumers.html", {
            "nav": "consumers",
            "has_consumers": True,
            "consumers": views,
            "full": len(views) >= CONSUMER_ROWS,
            "cursor_chars": CURSOR_CHARS,
        }

    # -- actions -------------------------------------------------------------------------------

    def recount(self) -> None:
        """The next view of the queues waits for a count that starts after this call."""
        self._queues.expire()

    def _acted(self, request: Request, to: str, text: str) -> Response:
        """Back to page `to` with `text`, the queues' counts to be read afresh (they changed)."""
        self.recount()
        return self._back(request, to, "ok", text)

    def _pausing(
        self, kind: Literal["queue", "task"], pause: bool
    ) -> Callable[[Request, dict[str, str]], Awaitable[Response]]:
        """The action that pauses (or resumes) the queue or task its form names."""
        back = "/" if kind == "queue" else "/schedule"

        async def act(request: Request, form: dict[str, str]) -> Response:
            which = Pause(kind, form.get(kind, ""))
            if pause:
                await self.operator.pause(which)
            else:
                await self.operator.resume(which)
            done = "paused" if pause else "resumed"
            return self._acted(request, back, f"{done} {kind} {which.value}")

        return act

    async def job_action(self, request: Request, form: dict[str, str]) -> Response:
        job_id = _job_id(request)
        try:
            action = Action(request.path_params["verb"])
        except ValueError:
            raise PageInvalidError("no such action", detail=request.path_params["verb"]) from None
        if action is Action.CANCEL:
            # The checkbox is sent only when ticked; unticked, the cascade runs (the CLI's
            # default too), bounded per press as the bulk buttons are.
            keep = form.get("keep_children") == "on"
            report = await self.operator.cancel([job_id], keep_children=keep, max_rows=BULK_ROWS)
            refusal = refusal_for(action, job_id, report.answers[0])
            if refusal is not None:
                raise refusal
            text = f"cancelled: {job_id}"
            if report.examined:
                text += f" and {report.cascaded} live descendants"
            return self._acted(request, job_path(job_id), text)
        answer = await self.operator.act_one(action, job_id)
        if action is Action.REMOVE:
            return self._acted(request, "/jobs", f"removed job {job_id}")
        return self._acted(request, job_path(job_id), f"{answer.value}: {job_id}")

    async def requeue_dead(self, request: Request, form: dict[str, str]) -> Response:
        f = JobFilter(
            states=frozenset({JobState.DEAD}),
            queue=form.get("queue") or None,
            name=form.get("name") or None,
            tenant_id=form.get("tenant") or None,
            acts_for=form.get("acts_for") or None,  # acts-for
        )
        report = await self.operator.act_all(Action.REQUEUE, f, max_rows=BULK_ROWS)
        parts = ", ".join(f"{n} {a}" for a, n in sorted(report.answers.items())) or "none found"
        if report.examined >= BULK_ROWS:
            parts += f" (stopped at {BULK_ROWS:,} rows: press it again for the rest)"
        if report.advice is not None:
            parts += f". {report.advice}"
        return self._acted(
            request, form.get("back") or "/jobs?state=dead", f"requeue dead jobs: {parts}"
        )

    # -- webhooks --

    async def webhook_enable(self, request: Request, form: dict[str, str]) -> Response:
        """Re-enable an endpoint its failures disabled, its streak cleared (`ujobs webhooks
        enable`); the endpoint's tenant is the form's `tenant` (none: the endpoint of none)."""
        self._require_webhooks()
        tenant = form.get("tenant") or None
        endpoint = str(request.path_params["endpoint"])
        now = self.operator.clock.now_ms()
        got = await self.driver.webhook_endpoint_enable(
            WebhookEndpointEnable(tenant, endpoint, now)
        )
        if got is None:
            raise WebhookEndpointUnknownError(detail=endpoint)
        where = endpoint if tenant is None else f"{tenant}/{endpoint}"
        return self._acted(request, endpoint_path(tenant, endpoint), f"enabled {where}")

    # -- signing in ----------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        return self._render(
            request, "login.html", nav="", next=_safe_next(request.query_params.get("next"))
        )

    async def login(self, request: Request) -> Response:
        if self.access.token is None or self._cross_site(request):
            return self._error(request, DashboardCsrfError("no sign-in from here"))
        form = await request.form(max_files=0, max_fields=8)
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        if not self.access.csrf_ok(request.cookies.get(CSRF_COOKIE), fields.get(CSRF_FIELD)):
            return self._error(request, DashboardCsrfError())
        target = _safe_next(fields.get("next"))
        if not self.access.token_ok(fields.get("token", "")):
            log.warning("dashboard: a sign-in with a wrong token")
            return self._render(request, "login.html", status=401, nav="", next=target, wrong=True)
        response = RedirectResponse(f"{self._base(request)}{target}", status_code=303)
        response.set_cookie(
            SESSION_COOKIE,
            self.access.new_session(),
            max_age=SESSION_TTL_S,
            path=self._cookie_path(request),
            httponly=True,
            samesite="lax",
            secure=request.url.scheme == "https",
        )
        return response

    async def logout(self, request: Request) -> Response:
        try:
            await self._checked_form(request, acting=False)
        except _Refused as refused:
            return self._error(request, refused.error)
        response = RedirectResponse(f"{self._base(request)}/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path=self._cookie_path(request))
        return response


def dashboard_app(
    driver: JobDriver,
    *,
    access: Access | None = None,
    handles: Sequence[JobHandle] = (),
    tasks: Sequence[TaskHandle] = (),
    clock: Clock | None = None,
) -> Starlette:
    """The dashboard over `driver` as an ASGI app. `access` defaults to the environment's
    (`Access.from_env()`: with no credentials it is read-only); `handles` are job declarations
    that redact inputs beside the live workers' (the backfills among them are what the
    backfills page says exists and is pending); `tasks` fill the schedule page. The caller
    owns the driver: the app never opens nor closes it."""
    return Dashboard(
        driver, access=access or Access.from_env(), handles=handles, tasks=tasks, clock=clock
    ).app
