"""Hostile input to the dashboard and the CLI is refused as a 4xx or exit 2 with one
`X_CODE: message` line: never a 500, never a traceback, nothing stored changed.

Hypothesis draws strings built of what breaks parsers and printers — lone surrogates, NUL,
values past the byte limits, Rich and HTML markup, emoji codes, terminal escapes, JSON nested
past any recursion limit, `/`, `%`, `.`/`..`, newlines, digit strings past Python's 4,300 — and
feeds each to every route of the dashboard (each path segment, query parameter, form field,
cookie and header it reads; GET and POST, through Starlette's TestClient, signed in with a
valid CSRF token so every action reaches its handler) and to every `ujobs` verb (each argument
and option, through click's CliRunner), on the memory driver and on real Postgres and Redis.

A page answers < 500, and a 4xx page names its refusal (`<code>X_…</code>`); a CLI verb exits 0
or 2, and on 2 prints exactly one `X_CODE: message` line; nothing printed holds a terminal
control character; what it echoes back is the value as given (never markup); and the jobs
stored are the same after the hostile calls as before.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_from_bytes, urlencode, urlsplit

import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from jobs_core.cli import main
from jobs_core.cli.base import literal
from jobs_core.dashboard import Access, dashboard_app
from jobs_core.dashboard.security import CSRF_COOKIE
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.records import JobFilter, JobListParams
from jobs_core.states import JobState
from tests.core.support import fresh_store
from tests.dashboard import shopapp

TOKEN = "hostile-input-token-for-tests"
NONCE = "n0nce-of-this-browser"
APP = "tests.dashboard.shopapp"

#: What breaks parsers and printers; every drawn value holds at least one.
PIECES = (
    "\x00",
    "\udcff",
    "\ud800x",
    "[bold]x[/bold]",
    "report[/x]",
    "[link=http://e.vil]",
    ":smile:",
    "<script>alert(1)</script>",
    "&amp;\"'",
    "/",
    "a/b",
    "%",
    "%2F%00%ff",
    ".",
    "..",
    "\n",
    "\r\n",
    "\t",
    "\x1b[2J\x1b]0;pwned\x07",
    "\x9b31m",
    "\u202egnp.exe",
    "²",
    "9" * 4_301,
    "x" * 300,
    "é" * 101,
    "[" * 3_000,
    '{"a":' * 1_200,
    "c1." + "W1tb" * 1_000,
    "c1.!!!",
    "?#&=;,",
    " ",
    "\\",
)
hostile = st.builds(
    lambda piece, around: around[0] + piece + around[1],
    st.sampled_from(PIECES),
    st.tuples(st.text(max_size=3), st.text(max_size=3)),
)

#: Characters a terminal acts on: none may reach the output raw.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
REFUSAL = re.compile(r"^X_[A-Z_]+: ", re.M)
PAGE_REFUSAL = re.compile(r"<code>X_[A-Z_]+</code>: ")


#: The pieces a real store meets past the checks every driver shares (the rest are refused or
#: rendered the same whatever the driver).
STORE_PIECES = ("\x00", "\udcff", "x" * 300, "é" * 101, "a/b", "%2F%00%ff", "..", "[bold]x[/bold]")


def hostile_examples(kind: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Every piece as an explicit example on memory (so each reported case runs every time),
    the store's pieces on a real store, then a quarter of the profile's drawn examples."""

    def decorate(test: Callable[..., None]) -> Callable[..., None]:
        for piece in PIECES if kind == "memory" else STORE_PIECES:
            test = example(h=piece)(test)
        drawn = max(5, settings.default.max_examples // 4)  # the loaded profile's
        return settings(max_examples=drawn)(given(h=hostile)(test))

    return decorate


@dataclass
class Shop:
    kind: str
    driver: JobDriver
    url: str
    ids: dict[str, str]


@contextmanager
def shop_on(kind: str) -> Iterator[Shop]:
    """A store of `kind` holding a completed charge and a delayed one, and its URL."""

    async def fill(driver: JobDriver) -> dict[str, str]:
        jobs = Jobs(driver)
        done = await jobs.enqueue(shopapp.charge, {"n": 1, "card": "4242"})
        later = await jobs.enqueue(shopapp.charge, {"n": 2, "card": "4242"}, delay_ms=3_600_000)
        return {"done": done.id, "later": later.id}

    loop = asyncio.new_event_loop()
    store = fresh_store(kind)
    try:
        driver = loop.run_until_complete(store.__aenter__())
        ids = loop.run_until_complete(fill(driver))
        yield Shop(kind, driver, _url_of(driver), ids)
    finally:
        loop.run_until_complete(store.__aexit__(None, None, None))
        loop.close()


def _url_of(driver: JobDriver) -> str:
    from jobs_pg import PgDriver
    from jobs_redis import RedisDriver
    from tests.pg.conftest import PG_URL
    from tests.redis.conftest import REDIS_URL

    if isinstance(driver, PgDriver):
        return f"{PG_URL}?schema={driver.schema}&wake=0"
    if isinstance(driver, RedisDriver):
        return f"{REDIS_URL}?prefix={driver.keys.prefix}"
    return "memory"


def stored(shop: Shop) -> list[tuple[str, JobState]]:
    async def read() -> list[tuple[str, JobState]]:
        page = await shop.driver.job_list(JobListParams(JobFilter(), 100))
        return sorted((j.id, j.state) for j in page.jobs)

    return asyncio.run(read())


@pytest.fixture(scope="module", params=["memory", "pg", "redis"])
def shop(request: pytest.FixtureRequest) -> Iterator[Shop]:
    with shop_on(request.param) as s:
        yield s


# -- the dashboard -----------------------------------------------------------------------------


def _raw(value: str) -> bytes:
    """`value` as the bytes a client may send (a lone surrogate as its would-be UTF-8)."""
    return value.encode("utf-8", "surrogatepass")


def _pct(value: str) -> str:
    return quote_from_bytes(_raw(value), safe="")


def _header(value: str) -> bytes:
    # HTTP itself cannot carry these in a header; everything else goes as raw bytes.
    return _raw(value).translate(None, b"\r\n\x00")


@dataclass(frozen=True)
class Call:
    """One request with the hostile value in one slot."""

    method: str
    path: str
    form: dict[str, str] | None = None
    cookie: tuple[str, str] | None = None
    header: tuple[str, str] | None = None


def calls(h: str, ids: dict[str, str]) -> list[Call]:
    """Every slot of every route the dashboard reads, holding `h`."""
    p, done = _pct(h), ids["done"]
    gets = ["/", "/jobs", f"/jobs/{done}"]
    out = [
        Call("GET", f"/jobs/{p}"),
        Call("GET", "/workers"),
        Call("GET", "/schedule"),
        Call("GET", "/backfills"),
        Call("GET", f"/backfills/{p}"),
        Call("GET", f"/backfills/?name={p}"),
        Call("GET", f"/backfills/reindex-orders?run={p}"),
        Call("GET", "/webhooks"),
        Call("GET", f"/webhooks/{p}"),
        Call("GET", f"/webhooks/orders?tenant={p}"),
        Call("POST", f"/webhooks/{p}/enable", {"tenant": h}),
        Call("POST", "/webhooks/orders/enable", {"tenant": h, "back": h}),
        Call("GET", "/consumers"),
        Call("GET", "/login"),
        Call("GET", f"/jobs/{p}/x"),
        Call("GET", f"/{p}"),
        Call("GET", f"/static/{p}"),
        Call("GET", f"/jobs?state={p}"),
        Call("GET", f"/jobs?queue={p}&name={p}&tenant={p}"),
        Call("GET", f"/jobs?cursor={p}"),
        Call("GET", f"/jobs?parent={p}&batch={p}"),
        Call("GET", f"/jobs?state=ready&parent={p}"),
        Call("GET", f"/batches/{p}"),
        Call("GET", f"/batches/?id={p}"),
        Call("POST", f"/jobs/{p}/cancel", {"keep_children": h}),
        Call("GET", f"/jobs/?id={p}"),
        Call("GET", f"/login?next={p}"),
        Call("POST", f"/jobs/{p}/cancel", {}),
        Call("POST", f"/jobs/{p}/requeue", {}),
        Call("POST", f"/jobs/{done}/{p}", {}),
        Call("POST", "/jobs//remove?id=" + p, {}),
        Call("POST", "/queues/pause", {"queue": h}),
        Call("POST", "/queues/resume", {"queue": h}),
        Call("POST", "/schedule/pause", {"task": h}),
        Call("POST", "/schedule/resume", {"task": h}),
        Call("POST", "/jobs/requeue-dead", {"queue": h, "name": h, "tenant": h, "back": h}),
        Call("POST", f"/jobs/{done}/promote", {"back": h}),
        Call("POST", "/login", {"token": h, "next": h}),
        Call("POST", "/logout", {"csrf": h}),
        Call("POST", "/queues/pause", {"queue": "q", "csrf": h}),
    ]
    for path in gets:
        out += [
            Call("GET", path, cookie=("ujobs_notice", h)),
            Call("GET", path, cookie=("ujobs_session", h + ".mac")),
            Call("GET", path, cookie=("ujobs_session", h)),
            Call("GET", path, cookie=(CSRF_COOKIE, h)),
            Call("GET", path, header=("authorization", "Bearer " + h)),
            Call("GET", path, header=("authorization", "Basic " + h)),
            Call("GET", path, header=("hx-request", h)),
        ]
    out += [
        Call("POST", "/queues/pause", {"queue": "q"}, header=("origin", h)),
        Call("POST", "/queues/pause", {"queue": "q"}, header=("sec-fetch-site", h)),
        Call("POST", "/queues/pause", {"queue": "q"}, header=("content-type", h)),
    ]
    return out


def send(client: TestClient, access: Access, call: Call) -> Any:
    cookies = {CSRF_COOKIE: NONCE}
    headers: dict[str, str | bytes] = {"authorization": f"Bearer {TOKEN}"}
    if call.cookie is not None:
        cookies[call.cookie[0]] = call.cookie[1]
    headers["cookie"] = b"; ".join(_header(f"{k}={v}") for k, v in cookies.items())
    if call.header is not None:
        headers[call.header[0]] = _header(call.header[1])
    content = None
    if call.form is not None:
        fields = {"csrf": access.csrf_token(NONCE), **call.form}
        content = urlencode({k: _raw(v) for k, v in fields.items()}).encode()
        headers.setdefault("content-type", "application/x-www-form-urlencoded")
    return client.request(
        call.method, call.path, content=content, headers=headers, follow_redirects=False
    )


def check_page(call: Call, response: Any) -> None:
    status = response.status_code
    assert status < 500, (call, status, response.text[:2000])
    if 400 <= status < 500:
        assert len(PAGE_REFUSAL.findall(response.text)) == 1, (call, status, response.text)
    if 300 <= status < 400:
        # Never another site: a path of ours, or this very host (a static directory's slash).
        assert urlsplit(response.headers["location"]).netloc in ("", "testserver"), call


def test_every_dashboard_route_refuses_hostile_input_with_a_4xx(shop: Shop) -> None:
    access = Access(token=TOKEN)
    handles = [shopapp.charge, shopapp.ship, shopapp.reindex]
    app = dashboard_app(shop.driver, access=access, handles=handles)
    before = stored(shop)
    with TestClient(app, raise_server_exceptions=True) as client:

        @hostile_examples(shop.kind)
        def each(h: str) -> None:
            for call in calls(h, shop.ids):
                check_page(call, send(client, access, call))

        each()
    assert stored(shop) == before


# -- the CLI -----------------------------------------------------------------------------------


def verbs(h: str, url: str) -> list[list[str]]:
    """Every `ujobs` verb with `h` in one argument or option (long-running verbs only where they
    refuse before they run)."""
    d = ["--driver", url]
    return [
        ["jobs", "list", "--queue", h, *d],
        ["jobs", "list", "--name", h, "--tenant", h, *d],
        ["jobs", "list", "--cursor", h, *d],
        ["jobs", "list", "--limit", h, *d],
        ["jobs", "list", "--state", h, *d],
        ["jobs", "show", h, *d],
        ["jobs", "show", h, "--json", *d],
        ["jobs", "show", "x", "--app", h, *d],
        ["jobs", "cancel", h, *d],
        ["jobs", "cancel", h, "--keep-children", *d],
        ["jobs", "list", "--parent", h, *d],
        ["jobs", "list", "--batch", h, "--json", *d],
        ["jobs", "cancel", "--all", "--parent", h, *d],
        ["batches", "show", h, *d],
        ["batches", "show", h, "--json", *d],
        ["jobs", "requeue", h, h, *d],
        ["jobs", "promote", h, "--json", *d],
        ["jobs", "cancel", "--all", "--queue", h, *d],
        ["queues", "--driver", h],
        ["workers", "--driver", h],
        ["stats", "--window", h, *d],
        ["pause", h, *d],
        ["resume", "--name", h, *d],
        ["pause", "--task", h, *d],
        ["enqueue", APP, h, "{}", *d],
        ["enqueue", APP, "charge", h, *d],
        ["enqueue", APP, "charge", '{"n": 1, "card": "x"}', "--key", h, "--delay", "60", *d],
        ["enqueue", h, "charge", "{}", *d],
        ["db", "upgrade", "--driver", h],
        ["tasks", h, *d],
        ["tasks", APP, "--driver", h],
        ["outbox", "--outbox", h],
        ["relay", "--outbox", h, *d],
        ["worker", h, *d],
        ["worker", APP, "--keep", h, *d],
        ["worker", APP, "--rate-limit", h, *d],
        ["scheduler", h, *d],
        ["dashboard", "--app", h, *d],
        ["demo", "--jobs", h],
        [h],
    ]


def check_run(args: list[str], h: str, result: Any) -> None:
    out: str = result.output
    assert result.exit_code in (0, 2), (args, result.exit_code, out, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), (args, result.exception)
    assert "Traceback" not in out, (args, out)
    assert not CONTROL.search(out), (args, out)
    if result.exit_code == 2:
        assert len(REFUSAL.findall(out)) == 1, (args, out)
        assert REFUSAL.search(out.splitlines()[-1]), (args, out)
    elif args[0] in ("pause", "resume"):
        kind = "queue" if args[1] == h else args[1].lstrip("-")
        assert out.startswith(f"{kind} '{literal(h).plain}' "), (args, out)


def test_every_cli_verb_refuses_hostile_input_in_one_line(shop: Shop) -> None:
    runner = CliRunner()
    before = stored(shop)

    @hostile_examples(shop.kind)
    def each(h: str) -> None:
        for args in verbs(h, shop.url):
            check_run(args, h, runner.invoke(main, args, catch_exceptions=True))

    each()
    after = stored(shop)
    # A hostile --key may be a fine key: that enqueue stores a job; nothing else changed.
    assert [row for row in after if row[0] in dict(before)] == before
