"""Stored text holding ESC and other control characters, on every kind of page that shows it,
over HTTP in process on memory, Postgres and Redis. The dashboard wrote them raw into the HTML
(no XSS — they were escaped for HTML — but garbage and invisible characters in the page), while
the CLI spells them: every page spells them as the CLI does (`\\x1b`, `\\x9b`), newlines kept
only in a block (a traceback, a JSON document); a form posts the stored value back exactly.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx2 as httpx
import pytest

from jobs_core.clock import SystemClock
from jobs_core.dashboard import Access, dashboard_app
from jobs_core.dashboard.app import job_path
from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.records import ClaimParams, Nack, NackKind, Pause, WorkerBeat
from jobs_core.scheduler import task
from jobs_core.scheduler.task import TaskHandle, TaskRegistry
from tests.core.support import fresh_store

TOKEN = "s3cret-token-for-tests"
BEARER = {"authorization": f"Bearer {TOKEN}"}
ESC = "\x1b[31m"  # a terminal colour
BEL = "\x07"
CSI = "\x9b"  # the C1 control sequence introducer: `json.dumps` leaves it raw
NAME = f"charge{ESC}x"
QUEUE = f"pay{BEL}q"
ORG = f"acme{CSI}corp"
TENANT = f"ops{ESC}team"
WORKER = f"host{ESC}:1"
TASK = f"night{ESC}ly"
ERROR = {
    "type": "ValueError",
    "message": f"bad {ESC}card",
    "traceback": f"Traceback (most recent call last):\n  line {BEL}1\nValueError: bad",
}
#: What no page may hold: every C0 control but newline and tab, DEL, and the C1 controls.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def spelled(text: str) -> str:
    """`text` as a page shows it (the CLI's spelling, `jobs_core.visible`)."""
    return text.replace("\x1b", "\\x1b").replace("\x07", "\\x07").replace("\x9b", "\\x9b")


def shows(page: str, *stored: str) -> str:
    """`page` holds no raw control character (but a C1 one in a form field's value, `field`)
    and shows each of `stored` spelled; answers the page's text, unescaped."""
    seen = re.sub(r'value="[^"]*"', 'value=""', page)
    raw = RAW.search(seen)
    assert raw is None, (raw, seen[max(0, raw.start() - 200) : raw.end() + 200])
    text = html.unescape(page)
    for s in stored:
        assert spelled(s) in text, (s, text)
    return text


def posted(page: str, name: str) -> str:
    """What the page's form field `name` posts back, as a browser reads its value: the HTML
    standard reads a C0 control's character reference as that control (Python's
    `html.unescape` drops it, so those are read here first)."""
    found = re.search(f'name="{name}" value="([^"]*)"', page)
    assert found is not None, page
    c0 = re.sub("&#x([0-9a-f]{1,2});", lambda m: chr(int(m[1], 16)), found[1])
    return html.unescape(c0)


async def body(input: Any, ctx: Any) -> None:
    return None


def declared() -> tuple[JobHandle, TaskHandle]:
    handle = job(
        body,
        name=NAME,
        queue=QUEUE,
        tenant=lambda i: i["org"],
        idempotency_key=lambda i: str(i["n"]),
        registry=JobRegistry(),
    )
    nightly = task(
        TASK, cron="0 3 * * *", tz="UTC", job=handle, input={"n": 0, "org": ORG},
        registry=TaskRegistry(),
    )  # fmt: skip
    return handle, nightly


@pytest.fixture(params=["memory", "pg", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[JobDriver]:
    async with fresh_store(request.param) as driver:
        yield driver


async def filled(driver: JobDriver, handle: JobHandle) -> tuple[str, str]:
    """A dead job (its error and traceback hostile) and a running one, both under `WORKER`,
    and `WORKER` in the registry: the ids of the dead one and the running one."""
    jobs = Jobs(driver)
    note = f"x{CSI}y{ESC}z"
    dead = await jobs.enqueue(handle, {"n": 1, "org": ORG, "note": note}, tenant_id=TENANT)
    now = SystemClock().now_ms()
    claimed = await driver.job_claim(ClaimParams((QUEUE,), WORKER, 10, 30_000, now))
    (fence,) = [j.fence for j in claimed.jobs]
    error = json.dumps(ERROR)
    assert await driver.job_nack([Nack(fence, NackKind.FAIL, now, error=error)]) == [True]
    running = await jobs.enqueue(handle, {"n": 2, "org": ORG}, tenant_id=TENANT)
    now = SystemClock().now_ms()
    assert (await driver.job_claim(ClaimParams((QUEUE,), WORKER, 10, 30_000, now))).jobs
    info = {"host": f"box{ESC}", "pid": 7, "queues": [QUEUE], "concurrency": 2}
    await driver.worker_beat(WorkerBeat(WORKER, json.dumps(info), 60_000, now))
    return dead.id, running.id


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


async def test_the_jobs_list_spells_names_queues_tenants_and_workers(store: JobDriver) -> None:
    handle, nightly = declared()
    await filled(store, handle)
    app = dashboard_app(store, access=Access(token=TOKEN), handles=[handle], tasks=[nightly])
    async with client(app) as c:
        page = await c.get("/jobs", headers=BEARER)
        filtered = await c.get("/jobs", params={"queue": QUEUE, "tenant": TENANT}, headers=BEARER)
    assert page.status_code == 200 and filtered.status_code == 200
    shows(page.text, NAME, QUEUE, ORG, TENANT, WORKER)
    # A filter's field keeps what was asked, exactly: filtering again asks the same.
    shows(filtered.text, NAME)
    assert (posted(filtered.text, "queue"), posted(filtered.text, "tenant")) == (QUEUE, TENANT)


async def test_a_jobs_page_spells_its_fields_input_error_and_attempts(store: JobDriver) -> None:
    handle, nightly = declared()
    dead, _ = await filled(store, handle)
    app = dashboard_app(store, access=Access(token=TOKEN), handles=[handle], tasks=[nightly])
    async with client(app) as c:
        page = await c.get(job_path(dead), headers=BEARER)
    assert page.status_code == 200
    text = shows(page.text, NAME, QUEUE, ORG, TENANT, WORKER, ERROR["message"])
    assert "x\\x9by" in text  # the input's C1 control, which `json.dumps` leaves raw
    # The traceback keeps its lines, each control in them spelled.
    assert "Traceback (most recent call last):\n  line \\x071\nValueError: bad" in text, text


async def test_the_queues_workers_and_schedule_pages_spell_what_they_list(
    store: JobDriver,
) -> None:
    handle, nightly = declared()
    await filled(store, handle)
    assert await store.pause_add(Pause("task", TASK))
    app = dashboard_app(store, access=Access(token=TOKEN), handles=[handle], tasks=[nightly])
    async with client(app) as c:
        queues = await c.get("/", headers=BEARER)
        workers = await c.get("/workers", headers=BEARER)
        schedule = await c.get("/schedule", headers=BEARER)
    assert queues.status_code == workers.status_code == schedule.status_code == 200
    shows(queues.text, QUEUE)
    shows(workers.text, WORKER, f"box{ESC}", QUEUE)
    shows(schedule.text, TASK, NAME)
    # The resume button posts the task's stored name back, not its spelling.
    assert posted(schedule.text, "task") == TASK


async def test_an_error_page_and_a_notice_spell_what_they_quote(store: JobDriver) -> None:
    handle, nightly = declared()
    await filled(store, handle)
    app = dashboard_app(store, access=Access(token=TOKEN), handles=[handle], tasks=[nightly])
    async with client(app) as c:
        missing = await c.get(job_path(f"gone{ESC}"), headers=BEARER)
        login = await c.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', login.text)
        assert csrf is not None
        signed = await c.post("/login", data={"token": TOKEN, "csrf": csrf[1], "next": "/"})
        assert signed.status_code == 303
        home = await c.get("/")
        token = re.search(r'<meta name="csrf-token" content="([^"]+)">', home.text)
        assert token is not None
        done = await c.post("/queues/pause", data={"csrf": token[1], "queue": QUEUE})
        assert done.status_code == 303, done.text
        noticed = await c.get(done.headers["location"])
    assert missing.status_code == 404
    shows(missing.text, f"gone{ESC}")
    text = shows(noticed.text, QUEUE)
    assert "paused" in text
    assert await store.pause_list() == [Pause("queue", QUEUE)]  # the stored name, exactly
