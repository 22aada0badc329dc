"""The dashboard's pages and guards over HTTP, in process, on the memory driver (the browser
tests run the same app on Postgres and Redis): who may read and act, the CSRF token, the
notices, redaction and escaping, keyset paging, every action, and mounting under a prefix.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2 as httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from jobs_core.clock import FakeClock
from jobs_core.dashboard import Access, dashboard_app
from jobs_core.dashboard.app import job_path
from jobs_core.dashboard.security import CSRF_COOKIE, SESSION_COOKIE
from jobs_core.errors import CliUsageInvalidError
from jobs_core.facade import Jobs
from jobs_core.records import (
    ClaimParams,
    EventWait,
    JobFilter,
    JobListParams,
    Nack,
    NackKind,
    Pause,
    StepPut,
)
from jobs_core.scheduler import task
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.states import JobState
from jobs_core.steps.api import SAGA
from jobs_memory import MemoryDriver
from tests.core.support import ujobs
from tests.core.test_operator import CARD, charge_job, run_all

TOKEN = "s3cret-token-for-tests"
BEARER = {"authorization": f"Bearer {TOKEN}"}


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def csrf_of(html: str) -> str:
    found = re.search(r'<meta name="csrf-token" content="([^"]+)">', html)
    assert found, "the page carries no CSRF token"
    return found.group(1)


class Shop:
    """A memory store holding two finished charges (one dead), and one delayed charge."""

    def __init__(self) -> None:
        self.driver = MemoryDriver()
        self.clock = FakeClock()
        self.handle = charge_job()
        self.jobs = Jobs(self.driver, clock=self.clock)

    async def fill(self) -> None:
        ok = await self.jobs.enqueue(self.handle, {"n": 1, "card": CARD, "who": "ann"})
        bad = await self.jobs.enqueue(
            self.handle, {"n": 2, "card": CARD, "who": "<script>x</script>", "fail": True}
        )
        self.ok, self.dead = ok.id, bad.id
        await run_all(self.driver, self.clock, self.handle, [ok.id, bad.id])
        later = await self.jobs.enqueue(
            self.handle, {"n": 3, "card": CARD, "who": "cy"}, delay_ms=60_000
        )
        self.later = later.id

    def app(self, access: Access, **options: Any) -> Starlette:
        return dashboard_app(
            self.driver, access=access, handles=[self.handle], clock=self.clock, **options
        )

    async def state(self, job_id: str) -> JobState | None:
        row = (await self.driver.job_get_many([job_id])).get(job_id)
        return row.state if row else None


@pytest.fixture
async def shop() -> AsyncIterator[Shop]:
    s = Shop()
    await s.fill()
    yield s


@asynccontextmanager
async def signed_in(app: Any, prefix: str = "") -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A browser that signed in with the token, and its CSRF token."""
    async with client(app) as c:
        page = await c.get(f"{prefix}/login")
        done = await c.post(
            f"{prefix}/login", data={"token": TOKEN, "csrf": csrf_of(page.text), "next": "/jobs"}
        )
        assert done.status_code == 303 and done.headers["location"] == f"{prefix}/jobs"
        page = await c.get(f"{prefix}/jobs")
        assert page.status_code == 200
        yield c, csrf_of(page.text)


async def test_with_no_credentials_every_page_shows_and_every_action_is_refused(
    shop: Shop,
) -> None:
    async with client(shop.app(Access())) as c:
        for path in ("/", "/jobs", f"/jobs/{shop.dead}", "/workers", "/schedule"):
            page = await c.get(path)
            assert page.status_code == 200, path
            assert "read-only: no credentials set" in page.text
            assert '<form method="post"' not in page.text  # no action offered
        nonce = c.cookies[CSRF_COOKIE]
        token = Access().csrf_token(nonce)  # another process's key: refused before it anyway
        for path in (f"/jobs/{shop.dead}/requeue", "/queues/pause", "/jobs/requeue-dead"):
            refused = await c.post(path, data={"csrf": token, "queue": "default"})
            assert refused.status_code == 403
            assert "X_DASHBOARD_READ_ONLY" in refused.text
    assert await shop.state(shop.dead) is JobState.DEAD
    assert await shop.driver.pause_list() == []


async def test_with_a_token_nothing_shows_or_acts_without_it(shop: Shop) -> None:
    async with client(shop.app(Access(token=TOKEN))) as c:
        page = await c.get(f"/jobs/{shop.dead}")
        assert page.status_code == 303
        assert page.headers["location"] == f"/login?next=%2Fjobs%2F{shop.dead}"
        refused = await c.post(f"/jobs/{shop.dead}/requeue", data={"csrf": "x"})
        assert refused.status_code == 401 and "X_DASHBOARD_AUTH_REQUIRED" in refused.text
        live = await c.get("/", headers={"hx-request": "true"})
        assert live.status_code == 204 and live.headers["hx-redirect"] == "/login?next=%2F"
        wrong = await c.get("/", headers={"authorization": "Bearer not-the-token-at-all"})
        assert wrong.status_code == 303
        assert (await c.get("/", headers=BEARER)).status_code == 200
        # A session cookie signed by another key, or tampered with, signs nobody in.
        c.cookies.set(SESSION_COOKIE, Access(token=TOKEN).new_session())
        assert (await c.get("/")).status_code == 303
        # Bytes past ASCII (a header is Latin-1 on the wire) sign nobody in, and raise nothing.
        c.cookies.clear()
        odd = "99999999999.\u00fc\u00ef".encode("latin-1")
        assert (await c.get("/", headers={"cookie": b"ujobs_session=" + odd})).status_code == 303
        assert (await c.get("/", headers={"authorization": b"Bearer " + odd})).status_code == 303
    assert await shop.state(shop.dead) is JobState.DEAD


async def test_basic_auth_challenges_the_browser(shop: Shop) -> None:
    access = Access(user="ops", password="hunter2-hunter2")
    good = "Basic " + base64.b64encode(b"ops:hunter2-hunter2").decode()
    bad = "Basic " + base64.b64encode(b"ops:hunter3").decode()
    async with client(shop.app(access)) as c:
        first = await c.get("/")
        assert first.status_code == 401
        assert first.headers["www-authenticate"].startswith('Basic realm="ujobs dashboard"')
        assert (await c.get("/", headers={"authorization": bad})).status_code == 401
        page = await c.get("/jobs", headers={"authorization": good})
        assert page.status_code == 200
        done = await c.post(
            f"/jobs/{shop.dead}/requeue",
            data={"csrf": csrf_of(page.text)},
            headers={"authorization": good},
        )
        assert done.status_code == 303
    assert await shop.state(shop.dead) is JobState.READY


async def test_an_action_needs_this_browsers_csrf_token_and_a_same_site_origin(
    shop: Shop,
) -> None:
    async with signed_in(shop.app(Access(token=TOKEN))) as (c, csrf):
        path = f"/jobs/{shop.dead}/requeue"
        for data, headers in (
            ({}, {}),
            ({"csrf": "forged"}, {}),
            ({"csrf": csrf}, {"origin": "https://evil.example"}),
            ({"csrf": csrf}, {"sec-fetch-site": "cross-site"}),
        ):
            refused = await c.post(path, data=data, headers=headers)
            assert refused.status_code == 403, (data, headers)
            assert "X_DASHBOARD_CSRF_INVALID" in refused.text
        # Any characters at all are refused, never an error.
        odd = await c.post(path, data={"csrf": "\u00fcn\u00efcode-\u2603"})
        assert odd.status_code == 403
        # Another browser's token does not fit this browser's cookie.
        async with signed_in(shop.app(Access(token=TOKEN))) as (_, other_csrf):
            pass
        assert (await c.post(path, data={"csrf": other_csrf})).status_code == 403
        assert await shop.state(shop.dead) is JobState.DEAD

        done = await c.post(path, data={"csrf": csrf}, headers={"origin": "http://testserver"})
        assert done.status_code == 303 and done.headers["location"] == f"/jobs/{shop.dead}"
        page = await c.get(done.headers["location"])
        assert f"requeued: {shop.dead}" in page.text  # the notice, shown once
        assert "requeued:" not in (await c.get(done.headers["location"])).text
    assert await shop.state(shop.dead) is JobState.READY


async def test_read_only_refuses_actions_whatever_the_credentials(shop: Shop) -> None:
    async with signed_in(shop.app(Access(token=TOKEN, read_only=True))) as (c, csrf):
        page = await c.get(f"/jobs/{shop.dead}")
        assert ">requeue</button>" not in page.text
        refused = await c.post(f"/jobs/{shop.dead}/requeue", data={"csrf": csrf})
        assert refused.status_code == 403 and "X_DASHBOARD_READ_ONLY" in refused.text
    assert await shop.state(shop.dead) is JobState.DEAD


async def test_sign_in_never_sends_you_off_site_and_sign_out_ends_the_session(
    shop: Shop,
) -> None:
    async with client(shop.app(Access(token=TOKEN))) as c:
        form = await c.get("/login?next=//evil.example/x")
        assert 'name="next" value="/"' in form.text
        csrf = csrf_of(form.text)
        wrong = await c.post("/login", data={"token": "nope-nope-nope-nope", "csrf": csrf})
        assert wrong.status_code == 401 and SESSION_COOKIE not in c.cookies
        done = await c.post(
            "/login", data={"token": TOKEN, "csrf": csrf, "next": "https://evil.example"}
        )
        assert done.headers["location"] == "/"
        cookie = done.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie
        assert (await c.get("/")).status_code == 200
        out = await c.post("/logout", data={"csrf": csrf})
        assert out.status_code == 303
        assert (await c.get("/")).status_code == 303


async def test_a_jobs_page_redacts_its_card_and_escapes_what_it_shows(shop: Shop) -> None:
    async with client(shop.app(Access(token=TOKEN))) as c:
        page = await c.get(f"/jobs/{shop.dead}", headers=BEARER)
        assert page.status_code == 200
        assert CARD not in page.text
        assert "[redacted]" in page.text
        assert "<script>x</script>" not in page.text
        assert "&lt;script&gt;x&lt;/script&gt;" in page.text
        assert "ValueError" in page.text and "Traceback" in page.text
        assert page.headers["x-frame-options"] == "DENY"
        assert "script-src 'self'" in page.headers["content-security-policy"]
        # A name no live worker nor the app declares is shown redacted whole.
        bare = dashboard_app(shop.driver, access=Access(token=TOKEN), clock=shop.clock)
        async with client(bare) as c2:
            page = await c2.get(f"/jobs/{shop.ok}", headers=BEARER)
            # It says why, and how to see it.
            assert "no live worker declares this job; pass --app MODULE" in page.text
            assert CARD not in page.text


async def test_a_parked_jobs_page_shows_what_it_waits_for_with_its_secret_masked(
    shop: Shop,
) -> None:
    parked = await shop.jobs.enqueue(shop.handle, {"n": 9, "card": CARD, "who": "dee"})
    now = shop.clock.now_ms()
    claimed = await shop.driver.job_claim(ClaimParams(("default",), "w1", 10, 30_000, now))
    fence = next(j.fence for j in claimed.jobs if j.id == parked.id)
    wait = EventWait("card.verified", json.dumps({"card": CARD}), now)
    assert await shop.driver.job_nack([Nack(fence, NackKind.PARK, now, wait=wait)]) == [True]
    async with client(shop.app(Access(token=TOKEN))) as c:
        page = await c.get(f"/jobs/{parked.id}", headers=BEARER)
    assert "waits for" in page.text and "card.verified" in page.text
    assert CARD not in page.text


async def test_the_jobs_list_pages_by_keyset_and_keeps_its_filters(shop: Shop) -> None:
    for n in range(10, 130):
        await shop.jobs.enqueue(shop.handle, {"n": n, "card": CARD, "who": "x"}, delay_ms=1000)
    async with client(shop.app(Access(token=TOKEN))) as c:
        seen: list[str] = []
        url: str | None = "/jobs?state=ready&name=charge"
        pages = 0
        while url is not None:
            page = await c.get(url, headers=BEARER)
            ids = re.findall(r'<td class="id"><a href="/jobs/([^"]+)"', page.text)
            seen += ids
            pages += 1
            more = re.search(r'rel="next" href="([^"]+)"', page.text)
            url = more.group(1).replace("&amp;", "&") if more else None
            if url:
                assert "state=ready" in url and "name=charge" in url
        assert pages == 3
        ready = await shop.driver.job_list(
            JobListParams(JobFilter(frozenset({JobState.READY})), 500, None)
        )
        assert seen == [j.id for j in ready.jobs]  # newest first, each once
        assert len(seen) == 121
        bad = await c.get("/jobs?state=zombie", headers=BEARER)
        assert bad.status_code == 400 and "X_JOB_PAGE_INVALID" in bad.text
        missing = await c.get("/jobs/no-such-job", headers=BEARER)
        assert missing.status_code == 404 and "X_JOB_NOT_FOUND" in missing.text


async def test_every_action_does_what_it_says_or_says_why_not(shop: Shop) -> None:
    async with signed_in(shop.app(Access(token=TOKEN))) as (c, csrf):

        async def post(path: str, **data: str) -> str:
            done = await c.post(path, data={"csrf": csrf, **data})
            assert done.status_code == 303, done.text
            return (await c.get(done.headers["location"])).text

        assert "promoted" in await post(f"/jobs/{shop.later}/promote")
        assert "cancelled" in await post(f"/jobs/{shop.later}/cancel")
        assert await shop.state(shop.later) is JobState.CANCELLED
        refused = await post(f"/jobs/{shop.ok}/cancel")
        assert "X_JOB_NOT_CANCELLABLE" in refused
        assert "removed job" in await post(f"/jobs/{shop.ok}/remove")
        assert await shop.state(shop.ok) is None

        paused_badge = '<span class="badge warn">paused</span>'
        assert paused_badge not in (await c.get("/")).text  # the queues' counts, read
        text = await post("/queues/pause", queue="default")
        assert "paused queue default" in text
        assert paused_badge in text  # read afresh after the action, not the count before it
        assert Pause("queue", "default") in await shop.driver.pause_list()
        text = await post("/queues/resume", queue="default")
        assert "resumed queue default" in text and paused_badge not in text
        assert await shop.driver.pause_list() == []

        text = await post("/jobs/requeue-dead", queue="", name="charge", back="/jobs?state=dead")
        assert "requeue dead jobs: 1 requeued" in text
        assert await shop.state(shop.dead) is JobState.READY


async def test_a_job_whatever_its_id_is_linked_shown_and_acted_on(shop: Shop) -> None:
    """Ids holding `/`, `%`, `?`, `#`, markup, or being `.` or `..`: the list links each to its
    own page (the `/` encoded, the dot ids in the query, as clients resolve dot segments), the
    page shows it, and its action form cancels that very job."""
    odd = ["a/b", "x/cancel", "50%25", "%41", "q?x=1#f", "<b>[x]</b>", ".", "..", " lead"]
    for n, job_id in enumerate(odd, start=10):
        await shop.jobs.enqueue(shop.handle, {"n": n, "card": CARD, "who": "z"}, id=job_id)
    async with signed_in(shop.app(Access(token=TOKEN))) as (c, csrf):
        listing = (await c.get("/jobs")).text
        for job_id in odd:
            link = f'href="{job_path(job_id)}"'.replace("&", "&amp;")
            assert link in listing, (job_id, link)
            page = await c.get(job_path(job_id))
            assert page.status_code == 200, (job_id, page.text)
            assert html.escape(job_id, quote=False) in page.text
            form = f'action="{job_path(job_id, "cancel")}"'.replace("&", "&amp;")
            assert form in page.text, (job_id, form)
            done = await c.post(job_path(job_id, "cancel"), data={"csrf": csrf})
            assert done.status_code == 303, (job_id, done.text)
            assert await shop.state(job_id) is JobState.CANCELLED, job_id
        # A missing id is a 404 naming its code; an id no store can hold, a 400.
        assert (await c.get(job_path("nobody/here"))).status_code == 404
        refused = await c.get("/jobs/a%00b")
        assert refused.status_code == 400 and "X_JOB_RECORD_INVALID" in refused.text


async def test_an_unwound_saga_is_refused_a_plain_requeue_and_offered_a_fresh_one(
    shop: Shop,
) -> None:
    """A dead saga run (its run holds the saga mark): its page offers `requeue-fresh`; a plain
    requeue, alone or by the bulk button, is refused and says to use it; it starts a new run."""
    saga = await shop.jobs.enqueue(shop.handle, {"n": 9, "card": CARD, "who": "di"})
    now = shop.clock.now_ms()
    (held,) = (await shop.driver.job_claim(ClaimParams(("default",), "w", 1, 60_000, now))).jobs
    assert await shop.driver.step_put([StepPut(held.fence, SAGA, "{}", now)]) == [True]
    assert await shop.driver.job_nack([Nack(held.fence, NackKind.FAIL, now, error="no")]) == [True]
    async with signed_in(shop.app(Access(token=TOKEN))) as (c, csrf):

        async def post(path: str, **data: str) -> str:
            done = await c.post(path, data={"csrf": csrf, **data})
            assert done.status_code == 303, done.text
            return (await c.get(done.headers["location"])).text

        assert ">requeue-fresh</button>" in (await c.get(f"/jobs/{saga.id}")).text
        refused = await post(f"/jobs/{saga.id}/requeue")
        assert "X_JOB_REQUEUE_UNWOUND" in refused and "--fresh" in refused
        text = await post("/jobs/requeue-dead", queue="", name="charge", back="/jobs?state=dead")
        assert "1 unwound" in text and "requeue-fresh" in text
        assert await shop.state(saga.id) is JobState.DEAD
        assert f"requeued: {saga.id}" in await post(f"/jobs/{saga.id}/requeue-fresh")
        row = (await shop.driver.job_get_many([saga.id]))[saga.id]
        assert row.state is JobState.READY and row.run_id != held.run_id


async def test_the_schedule_shows_each_task_and_pauses_and_resumes_it(shop: Shop) -> None:
    nightly = task(
        "nightly",
        cron="0 3 * * *",
        tz="Europe/Paris",
        job=shop.handle,
        input={"n": 0, "card": CARD, "who": "report"},
        registry=TaskRegistry(),
    )
    async with signed_in(shop.app(Access(token=TOKEN), tasks=[nightly])) as (c, csrf):
        page = (await c.get("/schedule")).text
        assert "nightly" in page and "0 3 * * *" in page and " 03:00 " in page  # Paris time
        assert "never" in page  # not fired yet
        done = await c.post("/schedule/pause", data={"csrf": csrf, "task": "nightly"})
        page = (await c.get(done.headers["location"])).text
        assert "paused task nightly" in page and '<span class="badge warn">paused</span>' in page
        assert await shop.driver.pause_list() == [Pause("task", "nightly")]
        await c.post("/schedule/resume", data={"csrf": csrf, "task": "nightly"})
        assert await shop.driver.pause_list() == []


async def test_the_schedule_says_what_resuming_a_paused_task_brings(shop: Shop) -> None:
    """A paused task's next fire was shown as a past time `(… ago)`, as if it fired late: past
    due, it says it fires once on resume and since when; still ahead, when it would fire if
    resumed by then. A task that runs shows its next fire as before."""
    registry = TaskRegistry()
    declared = [
        task(name, cron="0 3 * * *", tz="Europe/Paris", job=shop.handle,
             input={"n": 0, "card": CARD, "who": "report"}, registry=registry)
        for name in ("nightly", "overdue", "running")
    ]  # fmt: skip
    day = 86_400_000
    await shop.driver.task_arm(["overdue"], shop.clock.now_ms() - 3 * day)
    for name in ("nightly", "overdue"):
        assert await shop.driver.pause_add(Pause("task", name))
    async with signed_in(shop.app(Access(token=TOKEN), tasks=declared)) as (c, _):
        page = html.unescape((await c.get("/schedule")).text)
    rows = {r.split("</td>", 1)[0].split()[0]: r for r in page.split("<tr>\n      <td>")[1:]}
    assert "paused: would fire " in rows["nightly"] and " if resumed by then" in rows["nightly"]
    assert "paused: fires once on resume (due since " in rows["overdue"], rows["overdue"]
    assert " ago))" in rows["overdue"] and "paused" not in rows["running"].split("</td>")[5]
    assert "ago" not in rows["nightly"].split("</td>")[5]


async def test_a_bulk_press_is_bounded_and_the_next_press_takes_the_rest(
    shop: Shop, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobs_core.dashboard import app as dashboard

    more = [
        (await shop.jobs.enqueue(shop.handle, {"n": n, "card": CARD, "who": "z", "fail": True})).id
        for n in (20, 21)
    ]
    await run_all(shop.driver, shop.clock, shop.handle, more)
    monkeypatch.setattr(dashboard, "BULK_ROWS", 2)
    async with signed_in(shop.app(Access(token=TOKEN))) as (c, csrf):
        for expected in ("2 requeued (stopped at 2 rows", "1 requeued"):
            done = await c.post("/jobs/requeue-dead", data={"csrf": csrf})
            assert expected in (await c.get(done.headers["location"])).text
    states = {await shop.state(i) for i in [shop.dead, *more]}
    assert states == {JobState.READY}


async def test_mounted_under_a_prefix_every_link_form_and_cookie_stays_under_it(
    shop: Shop,
) -> None:
    outer = Starlette(routes=[Mount("/ops", app=shop.app(Access(token=TOKEN)))])
    async with signed_in(outer, "/ops") as (c, csrf):
        page = await c.get(f"/ops/jobs/{shop.dead}")
        assert f'action="/ops/jobs/{shop.dead}/requeue"' in page.text
        assert 'href="/ops/static/dashboard.css"' in page.text
        assert (await c.get("/ops/static/htmx-2.0.11.min.js")).status_code == 200
        done = await c.post(f"/ops/jobs/{shop.dead}/requeue", data={"csrf": csrf})
        assert done.headers["location"] == f"/ops/jobs/{shop.dead}"
    assert await shop.state(shop.dead) is JobState.READY


def test_access_refuses_half_or_weak_credentials() -> None:
    with pytest.raises(CliUsageInvalidError):
        Access(user="ops")
    with pytest.raises(CliUsageInvalidError):
        Access(token="short")
    env = {"UJOBS_DASHBOARD_TOKEN": TOKEN, "UJOBS_DASHBOARD_READ_ONLY": "yes"}
    a = Access.from_env(env)
    assert a.guarded and a.read_only and not a.can_act and a.kind == "token"
    # Replicas sharing UJOBS_DASHBOARD_SECRET accept each other's sessions.
    shared = {"UJOBS_DASHBOARD_TOKEN": TOKEN, "UJOBS_DASHBOARD_SECRET": "one key for all"}
    assert Access.from_env(shared).session_ok(Access.from_env(shared).new_session())
    assert not Access.from_env({"UJOBS_DASHBOARD_TOKEN": TOKEN}).session_ok(
        Access.from_env(shared).new_session()
    )


def test_the_cli_keeps_a_dashboard_without_credentials_on_this_machine() -> None:
    done = ujobs("dashboard", "--driver", "memory", "--host", "0.0.0.0")
    assert done.returncode == 2
    assert "X_CLI_USAGE_INVALID" in done.stdout and "UJOBS_DASHBOARD_TOKEN" in done.stdout
    nothing = ujobs("dashboard")
    assert nothing.returncode == 2 and "--driver" in nothing.stdout


# -- attempts --


async def test_a_jobs_page_shows_each_attempt_as_a_timeline_escaping_what_it_shows(
    shop: Shop,
) -> None:
    """Three failures, three entries, each with its own error; a stored error's markup and a
    worker id's are shown as text, never as markup."""
    job = await shop.jobs.enqueue(shop.handle, {"n": 8, "card": CARD, "who": "eve"})
    errors = [
        json.dumps({"type": "ValueError", "message": "<script>alert(1)</script>"}),
        json.dumps({"code": "X_JOB_TIMEOUT", "message": "past its deadline"}),
        json.dumps({"type": "KeyError", "message": "third", "traceback": "<b>frame</b>\n"}),
    ]
    for i, error in enumerate(errors):
        now = shop.clock.now_ms()
        worker = "<i>w</i>" if i == 0 else f"w{i}"
        claimed = await shop.driver.job_claim(ClaimParams(("default",), worker, 10, 30_000, now))
        fence = next(j.fence for j in claimed.jobs if j.id == job.id)
        kind = NackKind.RETRY if i < 2 else NackKind.FAIL
        nack = Nack(fence, kind, now + 5, run_at_ms=now if i < 2 else None, error=error)
        assert await shop.driver.job_nack([nack]) == [True]
    async with client(shop.app(Access(token=TOKEN))) as c:
        page = (await c.get(f"/jobs/{job.id}", headers=BEARER)).text
    section = page.split("<h2>Attempts", 1)[1]
    assert section.count('<li class="attempt">') == 3, section
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in section
    assert "<i>w</i>" not in page and "&lt;i&gt;w&lt;/i&gt;" in section
    assert "<b>frame</b>" not in page and "&lt;b&gt;frame&lt;/b&gt;" in section
    assert section.index("ValueError") < section.index("X_JOB_TIMEOUT") < section.index("KeyError")
    assert "outcome-retried" in section and "outcome-dead" in section, section
