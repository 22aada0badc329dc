"""The backfills pages over HTTP, in process, on the memory driver (the browser test opens them on
Postgres and Redis): `/backfills` lists each sweep the app declares and the ledger holds (its
newest run per scope: status, progress bar, rate, last cursor, an orphaned run flagged) and what
is pending per environment; `/backfills/{name}` shows every run and an import's error report
(line, field, code, never a value). Without the app's declarations it shows the ledger alone.
Hostile names, scopes, cursors and errors in the ledger are escaped and bounded; a hostile path
is a 4xx."""

from __future__ import annotations

import asyncio
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from markupsafe import escape

from jobs_core.dashboard import Access, dashboard_app
from jobs_core.dashboard.app import CURSOR_CHARS, literal, sweep_path
from jobs_core.facade import Jobs
from jobs_core.factories.rows import import_rows
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import ClaimParams, SweepAdvance, SweepFinish, SweepStart
from jobs_core.states import FINISHED_STATES
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core import backfill_app as app
from tests.core.support import until

TOKEN = "s3cret-token-for-tests"
BEARER = {"authorization": f"Bearer {TOKEN}"}
#: A value a refused record carries: it must never reach a page.
SECRET = "s3cr3t-<b>mark</b>"
#: Ledger names no declaration would take, as an import's or export's job name may hold them:
#: markup, quotes, a bidi override, a name at the store's 200-byte bound, `/`, `%`, dot segments.
HOSTILE = [
    '<script>alert("x")</script>',
    "\"'><img src=x onerror=alert(1)>",
    "\u202egnp.exe",
    "\u00e9" * 100,
    "a/b",
    "50%25",
    "..",
    "{{ 7 * 7 }}",
]
#: A cursor near the store's 8 KiB bound, holding markup.
LONG_CURSOR = json.dumps("<i>" + "x" * 8_000)


def client(application: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application), base_url="http://testserver"
    )


async def _run(driver: MemoryDriver, handles: list[JobHandle], job_id: str) -> None:
    worker = Worker(driver, handles, poll_floor=0.001, poll_ceiling=0.01)
    await worker.start()

    async def finished() -> bool:
        return (await driver.job_get_many([job_id]))[job_id].state in FINISHED_STATES

    try:
        await until(finished, within=15)
    finally:
        await worker.stop()


async def _fill(driver: MemoryDriver, root: Path) -> dict[str, Any]:
    """A completed sweep (nums), a tenant's (acme), a tenant's whose job was cancelled after its
    first batch (globex: orphaned), a real import refusing two records of four, and an entry
    of each hostile name (its scope, cursor and error hostile too)."""
    jobs = Jobs(driver)
    await _run(driver, [app.nums], (await app.nums.enqueue({}, client=jobs)).id)
    acme = await app.per_org.enqueue({"org": "acme"}, client=jobs)
    await _run(driver, [app.per_org], acme.id)

    loader = job(lambda i, c: None, name="load", tenant="none", queue="raw", registry=JobRegistry())

    async def held(handle: JobHandle, queue: str, key: str) -> Any:
        await jobs.enqueue(handle, {}, key=key)
        now = jobs.clock.now_ms()
        (h,) = (await driver.job_claim(ClaimParams((queue,), "w", 1, 60_000, now))).jobs
        return h

    globex = await jobs.enqueue(app.per_org, {"org": "globex"})
    now = jobs.clock.now_ms()
    (g,) = (await driver.job_claim(ClaimParams(("default",), "w", 1, 60_000, now))).jobs
    checksum = app.per_org.spec.checksum
    await driver.sweep_start(
        SweepStart(
            g.fence, g.run_id, "per-org", "globex", "default", "backfill", checksum, 30, now - 2_000
        )
    )
    # Two seconds after it started: 7 rows, 3.5 rows/s.
    await driver.sweep_advance(SweepAdvance(g.fence, g.run_id, 1, 7, 0, "7", now))
    await driver.job_cancel(globex.id, now)

    data = b'{"email": "a@x"}\n{bad ' + SECRET.encode() + b'\n{"email": "b@x"}\n[1]\n'
    (root / "contacts.jsonl").write_bytes(data)
    contacts = import_rows(
        name="contacts",
        tenant="none",
        format="jsonl",
        handle=lambda rows: None,
        root=str(root),
        registry=JobRegistry(),
    )
    imported = await jobs.enqueue(contacts, {"source": "contacts.jsonl"})
    await _run(driver, [contacts], imported.id)

    for n, name in enumerate(HOSTILE):
        h = await held(loader, "raw", f"h{n}")
        when = jobs.clock.now_ms()
        scope = f"<b>org</b>\u202e{n}"
        await driver.sweep_start(
            SweepStart(h.fence, h.run_id, name, scope, "default", "export", "c", None, when)
        )
        await driver.sweep_advance(SweepAdvance(h.fence, h.run_id, 1, 5, 0, LONG_CURSOR, when))
        error = "X_<img src=x onerror=alert(2)>"
        await driver.sweep_finish(SweepFinish(h.fence, h.run_id, "failed", error, when))
    import_run = (await driver.sweep_list("contacts", 1))[0].run_id
    return {"import_run": import_run, "globex_job": globex.id}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MemoryDriver, Any]]:
    driver = MemoryDriver()
    filled = asyncio.run(_fill(driver, tmp_path_factory.mktemp("imports")))
    yield driver, filled


def board(driver: MemoryDriver, declared: bool = True) -> Any:
    handles = [app.nums, app.per_org] if declared else []
    return dashboard_app(driver, access=Access(token=TOKEN), handles=handles)


def rows_of(page: str, sweep: str) -> list[str]:
    """The list's rows of `sweep` (its name as the page escapes it in `data-sweep`)."""
    mark = f'<tr data-sweep="{html.escape(sweep)}">'
    return [chunk.split("</tr>", 1)[0] for chunk in page.split(mark)[1:]]


async def test_the_list_shows_each_sweep_where_it_stands_and_what_is_pending(
    store: tuple[MemoryDriver, Any],
) -> None:
    driver, _ = store
    async with client(board(driver)) as c:
        page = await c.get("/backfills", headers=BEARER)
    assert page.status_code == 200
    text = page.text
    assert '<a href="/backfills" aria-current="page">Backfills</a>' in text
    (nums,) = rows_of(text, "nums")
    assert 'class="state completed"' in nums and "30 of 30 (100%)" in nums
    assert '<progress max="1" value="1.0"' in nums and "<code><bdi>20</bdi></code>" in nums
    acme, globex = sorted(rows_of(text, "per-org"), key=lambda r: "globex" in r)
    assert "acme" in acme and 'class="state completed"' in acme and "30 rows" in acme
    # Cancelled after its first batch: its entry says running, its job will never move it.
    assert "globex" in globex and "orphaned: job cancelled" in globex
    assert "3.5 rows/s" in globex and "7 of 30 (23%)" in globex
    (contacts,) = rows_of(text, "contacts")
    assert "import" in contacts and "2 rows" in contacts and "2 refused" in contacts
    pending = text.split("<h2>Pending</h2>", 1)[1]
    found = re.findall(
        r"<tr>\s*<td><bdi>([^<]*)</bdi></td>\s*<td><a href=\"/backfills/([^\"]+)\"><bdi>[^<]*"
        r"</bdi></a></td>\s*<td>(.*?)</td>\s*<td>([^<]*)</td>",
        pending,
    )
    assert [(env, name, "globex" in scope, why) for env, name, scope, why in found] == [
        ("default", "per-org", True, "running"),
        ("production", "nums", False, "never ran at this declaration"),
        ("production", "per-org", False, "never ran at this declaration"),
    ]
    assert "no tenant has started it" in pending  # per-org in production
    assert "hx-trigger" not in text  # nothing runs: the page does not refresh itself


async def test_the_list_shows_a_sweeps_first_scopes_and_links_to_the_rest(
    store: tuple[MemoryDriver, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs_core.dashboard import app as dashboard

    monkeypatch.setattr(dashboard, "LIST_SCOPES", 1)
    async with client(board(store[0])) as c:
        text = (await c.get("/backfills", headers=BEARER)).text
    assert len(rows_of(text, "per-org")) == 1  # its newest scope, globex
    assert 'and 1 more scope: <a href="/backfills/per-org">see every run</a>' in text


async def test_without_the_apps_declarations_it_shows_the_ledger_alone(
    store: tuple[MemoryDriver, Any],
) -> None:
    driver, _ = store
    async with client(board(driver, declared=False)) as c:
        text = (await c.get("/backfills", headers=BEARER)).text
        shown = await c.get("/backfills/per-org", headers=BEARER)
    assert rows_of(text, "nums") and rows_of(text, "contacts") and "(not declared)" not in text
    assert "start the dashboard with <code>--app MODULE</code>" in text
    assert "production" not in text  # pending is the declarations' to say
    assert shown.status_code == 200 and "the ledger holds it" in shown.text


async def test_a_sweeps_page_shows_every_run_and_an_imports_report_without_values(
    store: tuple[MemoryDriver, Any],
) -> None:
    driver, filled = store
    async with client(board(driver)) as c:
        per_org = await c.get(sweep_path("per-org"), headers=BEARER)
        assert per_org.status_code == 200
        assert "per tenant" in per_org.text and app.per_org.spec.checksum in per_org.text
        assert "every 1 s of batches (the ledger moves a window at a time)" in per_org.text
        assert '<a href="/backfills/nums">nums</a>' in per_org.text  # what it requires
        assert len(re.findall(r"<tr data-run=", per_org.text)) == 2
        assert f'href="/jobs/{filled["globex_job"]}"' in per_org.text
        assert "orphaned: job cancelled" in per_org.text
        assert "Error report" not in per_org.text

        contacts = await c.get(sweep_path("contacts"), headers=BEARER)
        again = await c.get(sweep_path("contacts", filled["import_run"]), headers=BEARER)
        other = await c.get(sweep_path("contacts", "not-a-run-of-it"), headers=BEARER)
    assert contacts.status_code == 200 and again.text == contacts.text
    report = contacts.text.split("Error report", 1)[1]
    lines = re.findall(
        r'<tr><td class="num">(\d+)</td><td>(.*?)</td><td><code>([^<]+)</code></td></tr>', report
    )
    assert lines == [("2", "-", "json"), ("4", "-", "not_object")]
    assert "the ledger counts 2 refused in all" in report
    assert "s3cr3t" not in contacts.text
    assert other.status_code == 400 and "X_JOB_PAGE_INVALID" in other.text


async def test_hostile_names_scopes_cursors_and_errors_are_escaped_and_bounded(
    store: tuple[MemoryDriver, Any],
) -> None:
    driver, _ = store
    async with client(board(driver)) as c:
        listing = (await c.get("/backfills", headers=BEARER)).text
        pages = [await c.get(sweep_path(name), headers=BEARER) for name in HOSTILE]
    for text in [listing, *(p.text for p in pages)]:
        assert "<script>alert" not in text and "<img src=x" not in text and "<b>org" not in text
        assert "&lt;img src=x onerror=alert(2)&gt;" in text  # the stored error, escaped
        assert "x" * 1_000 not in text  # a cursor is cut, in the list and on a sweep's page
    assert "x" * (CURSOR_CHARS - 5) + "\u2026" in listing
    for name, page in zip(HOSTILE, pages, strict=True):
        assert page.status_code == 200, (name, page.text)
        shown = escape(literal(name))
        assert f"<h1><bdi>{shown}</bdi>" in page.text, name
        assert f'href="{html.escape(sweep_path(name))}"' in listing, name
        assert "49" not in page.text.split("<h1>", 1)[1].split("</h1>", 1)[0]
    # A bidi override is spelled, never applied (`\u202egnp.exe` would read `exe.png`), and
    # stored text sits in its own bidi isolate.
    assert "\u202e" not in listing and "<bdi>\\u202egnp.exe</bdi>" in listing
    assert "<bdi>&lt;b&gt;org&lt;/b&gt;\\u202e0</bdi>" in listing


@pytest.mark.parametrize(
    ("path", "status", "code"),
    [
        ("/backfills/a%00b", 400, "X_JOB_RECORD_INVALID"),
        ("/backfills/" + "x" * 300, 400, "X_JOB_RECORD_INVALID"),
        # Bytes that are not UTF-8 (a lone surrogate's would-be bytes too) reach the page as
        # U+FFFD, a name nothing holds.
        ("/backfills/%ED%A0%80", 404, "X_JOB_NOT_REGISTERED"),
        ("/backfills/%FF%FE", 404, "X_JOB_NOT_REGISTERED"),
        ("/backfills/", 400, "X_JOB_RECORD_INVALID"),
        ("/backfills/no-such-sweep", 404, "X_JOB_NOT_REGISTERED"),
        ("/backfills/nums?run=%00", 400, "X_JOB_PAGE_INVALID"),
        ("/backfills/?name=%00", 400, "X_JOB_RECORD_INVALID"),
    ],
)
async def test_a_hostile_path_is_a_4xx_naming_its_refusal(
    store: tuple[MemoryDriver, Any], path: str, status: int, code: str
) -> None:
    async with client(board(store[0])) as c:
        page = await c.get(path, headers=BEARER)
    assert (page.status_code, re.findall(r"<code>(X_[A-Z_]+)</code>", page.text)) == (
        status,
        [code],
    ), page.text


async def test_a_running_sweep_refreshes_its_pages_and_a_mounted_board_links_under_its_prefix() -> (
    None
):
    from starlette.applications import Starlette
    from starlette.routing import Mount

    driver = MemoryDriver()
    jobs = Jobs(driver)
    loader = job(lambda i, c: None, name="run", tenant="none", queue="live", registry=JobRegistry())
    await jobs.enqueue(loader, {}, key="r")
    now = jobs.clock.now_ms()
    (held,) = (await driver.job_claim(ClaimParams(("live",), "w", 1, 60_000, now))).jobs
    await driver.sweep_start(
        SweepStart(held.fence, held.run_id, "live-one", "none", "default", "backfill", "c", 10, now)
    )
    outer = Starlette(routes=[Mount("/ops", app=board(driver))])
    async with client(outer) as c:
        listing = (await c.get("/ops/backfills", headers=BEARER)).text
        page = (await c.get("/ops/backfills/live-one", headers=BEARER)).text
    assert 'hx-get="/ops/backfills" ' in listing and 'href="/ops/backfills/live-one"' in listing
    assert 'hx-get="/ops/backfills/live-one"' in page and "0 of 10 (0%)" in page
    assert "orphaned" not in listing  # its job runs
