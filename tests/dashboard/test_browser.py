"""The dashboard in a real browser (Playwright driving Debian's Chromium, headless) against
`ujobs dashboard` and `ujobs worker` processes on real Postgres and on real Redis.

A person's morning: signed out, the dashboard sends them to sign in, and an action without the
token is refused (the job untouched); signed in, they open the queues page, filter the jobs
list, open the dead job, read its error and traceback, requeue it, and watch it complete. A
job's card never reaches the page. Each page is saved as a screenshot: into this test's tmp
dir, or into `$UJOBS_SCREENSHOTS/<backend>/` (`make screenshots` writes the README's).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from jobs_core.facade import Jobs
from jobs_core.records import JobFilter, JobListParams
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from tests.core.support import ROOT, code_path, free_port, reaping
from tests.dashboard import shopapp

TOKEN = "correct-horse-battery-staple"
CARD = "4242424242424242"
APP = "tests.dashboard.shopapp"


def chromium_path() -> str:
    found = shutil.which("chromium")
    assert found, "the browser tests need Debian's chromium (scripts/need_chromium.sh installs it)"
    return found


@pytest.fixture
def browser() -> Iterator[Browser]:
    # Per test, and set up after `store_url`: Playwright's sync API keeps an event loop
    # running on this thread while it lives, and the store's teardown (asyncio.run) needs
    # the thread free again.
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


def _env(url: str, gates: Path) -> dict[str, str]:
    return {
        **os.environ,
        "SHOP_GATES": str(gates),
        "UJOBS_DRIVER": url,
        "UJOBS_DASHBOARD_TOKEN": TOKEN,
        "PYTHONPATH": code_path(),
    }


def _start(args: list[str], url: str, gates: Path, procs: list[subprocess.Popen[str]]) -> None:
    procs.append(
        subprocess.Popen(
            [sys.executable, "-m", "jobs_core.cli", *args],
            cwd=ROOT,
            env=_env(url, gates),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )


def _serving(base: str, proc: subprocess.Popen[str], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"ujobs dashboard exited {proc.returncode}: {out}")
        try:
            with urllib.request.urlopen(f"{base}/login", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    raise AssertionError("ujobs dashboard did not answer in time")


def _store(url: str, work: Any) -> Any:
    """`work(driver)` on a driver of its own, on a thread of its own: Playwright's sync API
    keeps an event loop running on this one."""

    async def go() -> Any:
        driver = driver_from_url(url)
        async with driver:
            return await work(driver)

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result()


def _rows(url: str, state: JobState | None = None) -> list[Any]:
    async def read(driver: Any) -> list[Any]:
        f = JobFilter(frozenset({state}) if state else frozenset())
        return list((await driver.job_list(JobListParams(f, 500, None))).jobs)

    return list(_store(url, read))


def _swept(url: str) -> bool:
    async def read(driver: Any) -> bool:
        return [e.status for e in await driver.sweep_list("reindex-orders", 10)] == ["completed"]

    return bool(_store(url, read))


def _until(check: Any, within: float, what: str) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        answer = check()
        if answer:
            return answer
        time.sleep(0.2)
    raise AssertionError(f"{what}: not reached in {within} s")


def _shot(page: Page, shots: Path, name: str) -> None:
    shots.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)


def _no_machine_paths(page: Page, tmp_path: Path) -> None:
    """The job page names no path of this machine: its tracebacks' frames read from the import
    path (`jobs_core/worker/run.py`), never the checkout, the virtualenv, a home or a tmp dir."""
    tracebacks = page.locator("pre.traceback")
    assert tracebacks.count() >= 1
    frames = [tracebacks.nth(i).text_content() or "" for i in range(tracebacks.count())]
    assert any('File "tests/dashboard/shopapp.py", line ' in f for f in frames), frames
    assert not any('File "/' in f for f in frames), frames
    html = page.content()
    home = os.path.expanduser("~")
    places = {str(ROOT), str(ROOT.resolve()), str(tmp_path), sys.prefix, sys.base_prefix}
    for place in places | ({home} if len(home) > 1 else set()):
        assert place not in html, place


def test_sign_in_filter_open_a_dead_job_requeue_it_and_see_it_complete(
    store_url: str, browser: Browser, procs: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    backend = "pg" if store_url.startswith("postgres") else "redis"
    shots = Path(os.environ.get("UJOBS_SCREENSHOTS") or tmp_path) / backend
    gate = tmp_path / "open-1001"

    async def fill(driver: Any) -> None:
        jobs = Jobs(driver)
        for n in range(1, 7):
            org = "globex" if n % 3 == 0 else "acme"
            # The row's tenant is the enqueuer's (here given; else the caller's context).
            await jobs.enqueue(shopapp.charge, {"n": n, "card": CARD, "org": org}, tenant_id=org)
        await jobs.enqueue(shopapp.ship, {"order": 1001})
        await jobs.enqueue(shopapp.await_payment, {"order": 1001})

    _store(store_url, fill)
    _start(["worker", APP, "--quiet", "--concurrency", "4"], store_url, tmp_path, procs)
    dead = _until(lambda: _rows(store_url, JobState.DEAD), 60, "the ship job dead")[0]
    _until(lambda: len(_rows(store_url, JobState.COMPLETED)) == 6, 60, "six charges completed")
    _until(lambda: _rows(store_url, JobState.PARKED), 60, "the payment wait parked")

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    _start(["dashboard", "--port", str(port), "--app", APP], store_url, tmp_path, procs)
    _serving(base, procs[-1])

    # A viewer far from the server: the pages' times must show in THIS zone (dashboard.js).
    context = browser.new_context(
        viewport={"width": 1360, "height": 800}, timezone_id="Asia/Kathmandu"
    )
    page = context.new_page()
    page.on("dialog", lambda d: d.accept())
    # A script or style the Content-Security-Policy blocks, or a script error, shows here.
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(str(e)))

    # Signed out: every page sends you to sign in; an action without the token is refused and
    # changes nothing.
    page.goto(f"{base}/jobs/{dead.id}")
    expect(page).to_have_url(re.compile(r"/login\?next="))
    refused = context.request.post(
        f"{base}/jobs/{dead.id}/requeue", form={"csrf": "anything"}, max_redirects=0
    )
    assert refused.status == 401
    assert "X_DASHBOARD_AUTH_REQUIRED" in refused.text()
    page.fill("input[name=token]", "not-the-token-at-all")
    page.click("button:text('Sign in')")
    expect(page.locator(".notice.error")).to_contain_text("not this dashboard's")
    assert [j.id for j in _rows(store_url, JobState.DEAD)] == [dead.id]

    # Signed in: back where they were going.
    page.fill("input[name=token]", TOKEN)
    page.click("button:text('Sign in')")
    expect(page).to_have_url(f"{base}/jobs/{dead.id}")

    # Signed in but without the page's CSRF token: refused too.
    forged = context.request.post(
        f"{base}/jobs/{dead.id}/requeue", form={"csrf": "forged"}, max_redirects=0
    )
    assert forged.status == 403
    assert "X_DASHBOARD_CSRF_INVALID" in forged.text()
    assert [j.id for j in _rows(store_url, JobState.DEAD)] == [dead.id]

    # The queues page: both queues, their counts, the dead one flagged.
    page.goto(f"{base}/")
    payments = page.locator("tr[data-queue=payments]")
    shipping = page.locator("tr[data-queue=shipping]")
    expect(payments).to_be_visible()
    expect(shipping.locator("a.dead")).to_have_text("1")
    expect(payments.locator("svg.spark")).to_be_visible()
    _shot(page, shots, "queues")

    # The jobs list, filtered in place (htmx) by name, then by tenant and state.
    page.goto(f"{base}/jobs")
    expect(page.locator("table.jobs tbody tr")).to_have_count(8)
    page.fill("input[name=name]", "charge")
    page.click("button:text('Filter')")
    expect(page.locator("table.jobs tbody tr")).to_have_count(6)
    expect(page).to_have_url(re.compile(r"name=charge"))
    page.fill("input[name=tenant]", "globex")
    page.click("button:text('Filter')")
    expect(page.locator("table.jobs tbody tr")).to_have_count(2)
    page.click("a:text('clear')")
    page.select_option("select[name=state]", "dead")
    page.click("button:text('Filter')")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("ship")
    _shot(page, shots, "jobs")

    # A charge's page: its card is masked, in the input and in the result.
    charge_id = next(j.id for j in _rows(store_url) if j.name == "charge")
    page.goto(f"{base}/jobs/{charge_id}")
    expect(page.locator("h1 .state")).to_have_text("completed")
    assert CARD not in page.content()

    # The dead job: its error, traceback and recorded step; requeued, it completes.
    page.goto(f"{base}/jobs")
    page.select_option("select[name=state]", "dead")
    page.click("button:text('Filter')")
    page.click(f"a:text('{dead.id}')")
    expect(page.locator("h1 .state")).to_have_text("dead")
    expect(page.locator("p.error")).to_contain_text("the warehouse is closed for order 1001")
    expect(page.locator("pre.traceback").first).to_contain_text("Traceback")
    # The attempt timeline: the claim that died, its error beside it.
    timeline = page.locator("ol.attempts li.attempt").last
    expect(timeline).to_contain_text("the warehouse is closed for order 1001")
    expect(timeline.locator("time").first).to_contain_text("+0545")  # the viewer's zone
    expect(page.locator("table.steps")).to_contain_text("label-1001")
    _no_machine_paths(page, tmp_path)
    _shot(page, shots, "job")
    gate.touch()
    page.click("button:text('requeue')")
    expect(page.locator(".notice")).to_contain_text("requeued")
    expect(page.locator("h1 .state")).to_have_text("completed", timeout=30_000)
    expect(page.locator("h2:text('Result')")).to_be_visible()
    _shot(page, shots, "job-completed")

    page.goto(f"{base}/workers")
    expect(page.locator("table.workers tbody tr")).to_have_count(1)
    expect(page.locator("table.workers")).to_contain_text("payments")
    _shot(page, shots, "workers")

    page.goto(f"{base}/schedule")
    expect(page.locator("table.tasks")).to_contain_text("nightly-report")
    expect(page.locator("table.tasks")).to_contain_text("Europe/Paris")
    _shot(page, shots, "schedule")

    # The parked payment shows the event it waits for.
    parked = _rows(store_url, JobState.PARKED)[0]
    page.goto(f"{base}/jobs/{parked.id}")
    expect(page.locator("table.fields").first).to_contain_text("payment.settled")
    # In words, each instant in the viewer's zone (+0545), whatever the server's.
    waits = page.locator("td.waits")
    expect(waits).to_contain_text("event 'payment.settled' matching")
    expect(waits.locator("time").first).to_contain_text("+0545")

    # A backfill the worker sweeps: the list shows it completed, its bar full, nothing pending;
    # its page, the declaration (from --app) and its run.
    _store(store_url, lambda d: shopapp.reindex.enqueue({}, client=Jobs(d)))
    _until(lambda: _swept(store_url), 60, "the backfill completed")
    page.click("nav a:text('Backfills')")
    swept = page.locator("tr[data-sweep=reindex-orders]")
    expect(swept.locator(".state")).to_have_text("completed")
    expect(swept).to_contain_text("12 of 12 (100%)")
    expect(swept.locator("progress")).to_have_attribute("value", "1.0")
    expect(page.locator("main")).to_contain_text("Nothing pending in")
    _shot(page, shots, "backfills")
    swept.locator("a").first.click()
    expect(page.locator("h1")).to_contain_text("reindex-orders")
    expect(page.locator("table.fields")).to_contain_text(shopapp.reindex.spec.checksum)
    expect(page.locator("table.runs tbody tr")).to_have_count(1)
    context.close()
    # The refused sign-in and the refused actions answered 401/403 on purpose; nothing else.
    unexpected = [e for e in console_errors if "401" not in e and "403" not in e]
    assert unexpected == []
