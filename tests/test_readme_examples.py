"""The README's and the documentation site's examples, run as written: every ```python block,
every `await …` span of the prose and every shell command of the pages in `PAGES` (the site
pages the README's sections moved to; tests/test_docs_site.py checks that the README's own
blocks are copies of theirs and that every other code block on the site is run elsewhere).

They are read from those pages at test time, so an edited example is what gets tested. Each is
found by a stable marker (how it starts) and run by one case below, with a small harness that
gives it what the surrounding prose assumes (the `myapp/jobs.py` module, a `driver`, an
`inp`); each case then checks what the prose says happens. An example that no case handles
(and no named excuse in `NOT_RUN` covers) fails one of the `test_every_*`. Workers started
from the CLI are stopped once `/proc` shows their SIGTERM handler (Linux).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import dataclasses
import datetime as dt
import importlib
import inspect
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import sessionmaker

import jobs_core
from jobs_core import facade
from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.driver import JobDriver
from jobs_core.outbox import Relay
from jobs_core.records import (
    ClaimParams,
    EnqueueResult,
    JobListParams,
    JobRecord,
    Nack,
    NackKind,
    Pause,
)
from jobs_core.retention import DAY, Retention
from jobs_core.scheduler import LEADER_KEY, Scheduler
from jobs_core.states import JobState
from jobs_core.testing import DriverSuite
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from jobs_pg import PgDriver, PgOutbox, stage
from jobs_pg.urls import libpq_url
from jobs_redis import RedisDriver
from tests.cli_forks import forked
from tests.core.retention_support import finish
from tests.core.support import advance_quietly, free_port, until
from tests.examples.django_site import site_on
from tests.examples.support import ANN, jobs_url, migrated_schema, on_schema, pending, signed_up
from tests.pg.conftest import PG_URL, drop_schema, fresh_driver, fresh_schema, migrate
from tests.plugin_support import plugin_args
from tests.redis.conftest import REDIS_URL, _real, fresh_prefix

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The pages whose examples this file runs: the site pages the README's sections became.
PAGES = [
    *(
        ROOT / "docs" / name
        for name in (
            "getting-started.md",
            "guides/jobs.md",
            "guides/steps.md",
            "guides/limits.md",
            "guides/scheduling.md",
            "guides/outbox.md",
            "guides/workflows.md",
            "guides/factories.md",
            "guides/celery.md",
            "guides/backends.md",
            "guides/testing.md",
            "operations.md",
            "reference/errors.md",
            "benchmarks.md",
            "guarantees.md",
            "reference/layout.md",
        )
    ),
]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


class Block:
    """One fenced block of a page: its language, text, page and first line there."""

    def __init__(self, lang: str, text: str, line: int, page: str = "README.md") -> None:
        self.lang = lang
        self.text = text
        self.line = line
        self.page = page

    @property
    def marker(self) -> str:
        return self.text.splitlines()[0].strip()


def pages() -> list[tuple[str, str]]:
    """Each page of `PAGES`: its path from the repository's root, and its text."""
    return [(p.relative_to(ROOT).as_posix(), p.read_text(encoding="utf-8")) for p in PAGES]


def readme_blocks(lang: str) -> list[Block]:
    return [
        Block(m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1, page)
        for page, text in pages()
        for m in FENCE.finditer(text)
        if m.group(1) == lang
    ]


def python_block(marker: str) -> Block:
    """The one README python block whose first line starts with `marker`."""
    found = [b for b in readme_blocks("python") if b.marker.startswith(marker)]
    assert len(found) == 1, f"README has {len(found)} python blocks starting {marker!r}"
    return found[0]


def compiled(block: Block) -> Any:
    """The block as code, its line numbers the README's, top-level `await` allowed; a last
    statement that is an expression keeps its value in the global `_`, for the case to check."""
    tree = ast.parse(block.text, filename=block.page)
    last = tree.body[-1]
    if isinstance(last, ast.Expr):
        keep = ast.Assign(targets=[ast.Name("_", ast.Store())], value=last.value)
        tree.body[-1] = ast.copy_location(keep, last)
    ast.fix_missing_locations(tree)
    ast.increment_lineno(tree, block.line - 1)
    return compile(tree, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


async def run_block(block: Block, names: dict[str, Any]) -> dict[str, Any]:
    """Run `block` with `names` as its globals (a top-level `await` is awaited); answers them."""
    result = eval(compiled(block), names)
    if inspect.iscoroutine(result):
        await result
    return names


def call_keywords(block: Block, callee: str) -> dict[str, Any]:
    """The literal keyword arguments of the block's one call of `callee` (a name, or a
    method: `enqueue` for `handle.enqueue(…)`)."""

    def name(func: ast.expr) -> str | None:
        if isinstance(func, ast.Name):
            return func.id
        return func.attr if isinstance(func, ast.Attribute) else None

    calls = [
        node
        for node in ast.walk(ast.parse(block.text))
        if isinstance(node, ast.Call) and name(node.func) == callee
    ]
    assert len(calls) == 1, f"{len(calls)} calls of {callee} in {block.marker!r}"
    found: dict[str, Any] = {}
    for kw in calls[0].keywords:
        with contextlib.suppress(ValueError):
            assert kw.arg is not None, "no **kwargs in an example"
            found[kw.arg] = ast.literal_eval(kw.value)
    return found


# --- the python blocks -------------------------------------------------------------------------

#: Each README python block's case, by how its first line starts.
DECLARE = "# myapp/jobs.py"
ASYNC_ENQUEUE = "import jobs_core"
SYNC_ENQUEUE = "send_welcome.enqueue_sync("
WORKER_IN_CODE = "worker = Worker(driver, myapp.jobs"
IDEMPOTENCY = "first = await send_welcome.enqueue(inp)"
RETENTION = "from datetime import timedelta"
PARITY = "# tests/test_my_driver_parity.py"
TESTING = "# tests/test_receipts.py"
SHOP = "# shop/jobs.py"
SEND_EVENT = "from jobs_core import send_event"
OPERATOR = "from jobs_core.operator import"
BILLING = "# billing/jobs.py"
REPORTS = "# reports/jobs.py"
SIGNUP = "# myapp/signup.py"
WEB_FASTAPI = "# examples/fastapi_app/app.py"
WEB_FLASK = "# examples/flask_app/app.py"
WEB_DJANGO = "# examples/django_app/views.py"
DASHBOARD_MOUNT = "# myapp/web.py"
WEBHOOKS = "# myapp/webhooks.py"
#: "Moving from Celery". RESULT, CHAIN, GROUP and the album (in CELERY_JOBS, run by
#: `test_celery_group_and_chord_inside_a_job`) use the flows runtime (`client.result`, `after=`,
#: `client.batch`, `ctx.step.enqueue_many`/`gather`): their cases pass once it is merged.
CELERY_JOBS = "# photos/jobs.py"
CELERY_DELAY = "# .delay(), apply_async("
CELERY_RESULT = "# AsyncResult(sent.id)"
CELERY_CHAIN = "# chain(resize.s(12)"
CELERY_GROUP = "# group([...]) with"
CELERY_BEAT = "# photos/schedule.py"
PYTHON_CASES = {
    WEBHOOKS,
    CELERY_JOBS,
    CELERY_DELAY,
    CELERY_RESULT,
    CELERY_CHAIN,
    CELERY_GROUP,
    CELERY_BEAT,
    DASHBOARD_MOUNT,
    SIGNUP,
    WEB_FASTAPI,
    WEB_FLASK,
    WEB_DJANGO,
    REPORTS,
    OPERATOR,
    BILLING,
    SHOP,
    SEND_EVENT,
    DECLARE,
    ASYNC_ENQUEUE,
    SYNC_ENQUEUE,
    WORKER_IN_CODE,
    IDEMPOTENCY,
    RETENTION,
    PARITY,
    TESTING,
}

INP = {"org_id": "org_1", "user_id": 42}


def test_every_python_block_has_a_case() -> None:
    # The guides' worked examples are run there; imported here, as it imports this module.
    from tests.test_docs_guides import GUIDE_CASES

    for block in readme_blocks("python"):
        cases = [m for m in (*PYTHON_CASES, *GUIDE_CASES) if block.marker.startswith(m)]
        assert len(cases) == 1, (
            f"{block.page} python block at line {block.line} ({block.marker!r}) has cases {cases}: "
            "each needs exactly one case here"
        )
    for marker in PYTHON_CASES:
        python_block(marker)  # each case runs exactly one block


@pytest.fixture(scope="session")
def app_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the package `myapp`, its `jobs.py` the README's declaring block."""
    root = tmp_path_factory.mktemp("app")
    (root / "myapp").mkdir()
    (root / "myapp" / "__init__.py").write_text("", encoding="utf-8")
    (root / "myapp" / "jobs.py").write_text(python_block(DECLARE).text, encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def myapp(app_dir: Path) -> Iterator[ModuleType]:
    """`myapp` with `myapp.jobs` imported, once: its `@job` registers in the default registry."""
    sys.path.insert(0, str(app_dir))
    try:
        importlib.import_module("myapp.jobs")
        yield sys.modules["myapp"]
    finally:
        sys.path.remove(str(app_dir))
        for name in ("myapp.jobs", "myapp"):
            sys.modules.pop(name, None)


@pytest.fixture
def no_client() -> Iterator[None]:
    """The configured client is the test's own and is gone after it."""
    before = facade._default
    facade._default = None
    try:
        yield
    finally:
        facade._default = before


SHOP_STUBS = {
    "__init__.py": "",
    "payments.py": (
        "charges = []\nrefunds = []\n\n\n"
        "def charge(card, amount, key):\n"
        "    charges.append((card, amount, key))\n"
        "    return {'charge_id': f'ch_{len(charges)}', 'amount': amount}\n\n\n"
        "def refund(charge_id):\n"
        "    refunds.append(charge_id)\n"
    ),
    "mailer.py": "sent = []\n\n\ndef send(to, text):\n    sent.append((to, text))\n",
}


@contextlib.contextmanager
def app_package(
    tmp_path: Path, name: str, stubs: dict[str, str], block: Block
) -> Iterator[ModuleType]:
    """A package `name` in `tmp_path`: its `jobs.py` the README's `block`, the modules it imports
    stubbed by `stubs`; importable while the block runs, forgotten after."""
    (tmp_path / name).mkdir()
    for file, text in stubs.items():
        (tmp_path / name / file).write_text(text, encoding="utf-8")
    (tmp_path / name / "jobs.py").write_text(block.text, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        importlib.import_module(f"{name}.jobs")
        yield sys.modules[name]
    finally:
        sys.path.remove(str(tmp_path))
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            sys.modules.pop(module, None)


@pytest.fixture
def shop(tmp_path: Path) -> Iterator[ModuleType]:
    """The README's `shop` package: its `jobs.py` the steps block, payments and mail stubbed."""
    with app_package(tmp_path, "shop", SHOP_STUBS, python_block(SHOP)) as package:
        yield package


async def test_the_order_saga_waits_for_its_event_and_refunds_when_it_fails(
    shop: ModuleType, no_client: None
) -> None:
    """The steps example as its prose tells it: the order charges once, parks until the
    warehouse's event (sent by the README's own block), emails and completes; an order whose
    event never comes fails for good after 3 days and its charge is refunded."""
    clock = FakeClock(start_ms=1_800_000_000_000)
    driver = MemoryDriver()
    jobs_core.configure(driver, clock=clock)
    fulfil = shop.jobs.fulfil_order
    order = {
        "org_id": "org_1",
        "order_id": 1042,
        "amount": 25,
        "card": "4111111111111111",
        "email": "ann@example.com",
    }
    lost = {**order, "order_id": 7}
    worker = Worker(driver, [fulfil], clock=clock, poll_floor=0.01, poll_ceiling=0.05)

    async def state(job_id: str) -> JobState:
        return (await driver.job_get_many([job_id]))[job_id].state

    async def settle(job_id: str, *want: JobState) -> JobState:
        for _ in range(200):
            if (now := await state(job_id)) in want:
                return now
            await advance_quietly(clock, 100, sleepers=3)
        raise AssertionError(f"{job_id} never reached {want}: {await state(job_id)}")

    await worker.start()
    try:
        first = await fulfil.enqueue(order)
        second = await fulfil.enqueue(lost)
        await settle(first.id, JobState.PARKED)
        await settle(second.id, JobState.PARKED)
        assert shop.payments.charges == [
            ("4111111111111111", 25, "order-1042"),
            ("4111111111111111", 25, "order-7"),
        ]
        await run_block(python_block(SEND_EVENT), {})
        await settle(first.id, JobState.COMPLETED)
        done = (await driver.job_get_many([first.id]))[first.id]
        assert json.loads(done.result_json or "null") == {"charge": "ch_1", "carrier": "ups"}
        assert shop.mailer.sent == [("ann@example.com", "shipped by ups")]
        assert len(shop.payments.charges) == 2  # the replay after the wait charged nothing
    finally:
        await worker.stop()
    # Three days pass with no event for order 7 (no worker runs meanwhile: the fake clock
    # would wake its 50 ms poll five million times); the next worker fails it for good, and
    # the saga refunds its charge.
    await clock.advance(3 * 24 * 3_600_000 + 60_000)
    worker = Worker(driver, [fulfil], clock=clock, poll_floor=0.01, poll_ceiling=0.05)
    await worker.start()
    try:
        assert await settle(second.id, JobState.DEAD, JobState.FAILED) is JobState.DEAD
        for _ in range(200):
            if shop.payments.refunds:
                break
            await advance_quietly(clock, 100, sleepers=3)
        assert shop.payments.refunds == ["ch_2"]
        assert shop.mailer.sent == [("ann@example.com", "shipped by ups")]
    finally:
        await worker.stop()


BILLING_STUBS = {
    "__init__.py": "",
    "ledger.py": (
        "import asyncio\n"
        "running, most, synced, closed = {}, {}, [], []\n\n\n"
        "async def sync(customer_id, since):\n"
        "    running[customer_id] = running.get(customer_id, 0) + 1\n"
        "    most[customer_id] = max(most.get(customer_id, 0), running[customer_id])\n"
        "    await asyncio.sleep(0.02)\n"
        "    running[customer_id] -= 1\n"
        "    synced.append((customer_id, since))\n\n\n"
        "async def close(day, fence):\n"
        "    closed.append((day, fence))\n"
    ),
    "payments.py": (
        "import time\n"
        "sent = []\n\n\n"
        "async def send_invoice(invoice_id):\n"
        "    sent.append((time.monotonic(), invoice_id))\n"
    ),
}


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[ModuleType]:
    """The README's `billing` package: its `jobs.py` the limits block, ledger and API stubbed."""
    with app_package(tmp_path, "billing", BILLING_STUBS, python_block(BILLING)) as package:
        yield package


async def test_the_limits_block_holds_its_limits(billing: ModuleType, no_client: None) -> None:
    """One sync per customer at a time, at most 25 invoice calls in any second, and the books
    closed under the lock's fencing token, as the block's comments say."""
    driver = MemoryDriver()
    jobs_core.configure(driver)
    jobs = billing.jobs
    for n in range(8):
        await jobs.sync_customer.enqueue({"org_id": "o1", "customer_id": f"c{n % 2}", "since": n})
    for n in range(30):
        await jobs.send_invoice.enqueue({"invoice_id": n})
    await jobs.close_books.enqueue({"day": "2026-12-01"})
    worker = Worker(driver, jobs, concurrency=20, poll_floor=0.01)
    await worker.start()
    try:
        await until(
            lambda: (
                len(billing.ledger.synced) == 8
                and len(billing.payments.sent) == 30
                and len(billing.ledger.closed) == 1
            ),
            within=20,
        )
    finally:
        await worker.stop()
    assert billing.ledger.most == {"c0": 1, "c1": 1}
    starts = sorted(t for t, _ in billing.payments.sent)
    # The limit holds the stamps, taken at admission; a body starts a little after its stamp,
    # and on a loaded machine that lag (seen up to 0.45 s) shortens a measured window. Without
    # the limit all 30 would start within milliseconds: half a window still tells them apart.
    assert min(starts[i + 25] - starts[i] for i in range(len(starts) - 25)) >= 0.5
    ((day, fence),) = billing.ledger.closed
    assert day == "2026-12-01" and isinstance(fence, int) and fence > 0
    page = await driver.job_list(JobListParams(limit=100))
    assert len(page.jobs) == 39
    assert {r.attempt for r in page.jobs} == {1}, "waiting for a limit spent an attempt"


REPORTS_STUBS = {
    "__init__.py": "",
    "warehouse.py": (
        "built = []\n\n\nasync def build(report, day):\n    built.append((report, day))\n"
    ),
}


@pytest.fixture(scope="session")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The README's `reports` package: its `jobs.py` the scheduled task block, imported once
    (its `@job` and `task()` register in the default registries)."""
    root = tmp_path_factory.mktemp("reports")
    with app_package(root, "reports", REPORTS_STUBS, python_block(REPORTS)) as package:
        yield package


async def test_the_nightly_task_fires_at_two_paris_time_and_catches_up_once(
    reports: ModuleType,
) -> None:
    """Two nights at 02:00 Paris, each building that day's report once; then three nights with
    no scheduler: `run-once` builds ONE report, for the first missed day."""
    driver = MemoryDriver()
    hour = 3600 * 1000
    clock = FakeClock(int(dt.datetime(2026, 6, 1, 22, tzinfo=dt.UTC).timestamp() * 1000))

    async def nights(n: int) -> None:
        sched = Scheduler(driver, reports.jobs, clock=clock, lease_ttl=3 * 3600)
        await sched.start()
        await advance_quietly(clock, n * 24 * hour, sleepers=1, step_ms=hour)
        assert await sched.stop(timeout=10)

    await nights(2)  # from 00:00 Paris on June 2
    clock.set(clock.now_ms() + 3 * 24 * hour)  # no scheduler from June 4 00:00 to June 7 00:00
    await nights(1)
    worker = Worker(driver, reports.jobs, poll_floor=0.01)
    await worker.start()
    try:
        await until(lambda: len(reports.warehouse.built) == 4)
    finally:
        await worker.stop()
    days = ["2026-06-02", "2026-06-03", "2026-06-04", "2026-06-07"]
    assert sorted(reports.warehouse.built) == [("sales", d) for d in days]
    reports.warehouse.built.clear()


async def dead_welcomes(driver: JobDriver, myapp: ModuleType, n: int) -> list[str]:
    """`n` jobs of the README's `send_welcome` (queue `emails`) dead-lettered, through the
    driver's own calls; answers their ids."""
    handle = myapp.jobs.send_welcome
    client = jobs_core.Jobs(driver)
    ids = [(await client.enqueue(handle, {**INP, "user_id": u})).id for u in range(n)]
    now_ms = int(time.time() * 1000) + 1_000  # due by then, whatever the enqueue's clock read
    got = await driver.job_claim(ClaimParams((handle.queue,), "readme", n, 60_000, now_ms))
    assert sorted(j.id for j in got.jobs) == sorted(ids)
    nacks = [Nack(j.fence, NackKind.FAIL, now_ms, error="smtp down") for j in got.jobs]
    assert all(await driver.job_nack(nacks))
    return ids


async def test_the_dashboard_mounts_in_a_fastapi_app_and_needs_its_token(
    myapp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import httpx2

    token = "a-token-of-twenty-chars"
    monkeypatch.setenv("UJOBS_DASHBOARD_TOKEN", token)
    driver = MemoryDriver()
    ids = await dead_welcomes(driver, myapp, 2)
    names = await run_block(python_block(DASHBOARD_MOUNT), {"driver": driver})
    transport = httpx2.ASGITransport(app=names["app"])
    async with httpx2.AsyncClient(transport=transport, base_url="http://app") as c:
        signed_out = await c.get("/jobs/jobs?state=dead")
        assert signed_out.status_code == 303
        assert signed_out.headers["location"].startswith("/jobs/login?next=")
        page = await c.get("/jobs/jobs?state=dead", headers={"authorization": f"Bearer {token}"})
        assert page.status_code == 200 and all(f'href="/jobs/jobs/{i}"' in page.text for i in ids)


def test_the_webhook_receiver_block_stores_a_verified_event_before_its_200(
    no_client: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from jobs_core.factories.webhooks import receiver as receiver_module
    from jobs_core.job import JobRegistry
    from tests.webhooks.support import SECRET, event_body, sign

    monkeypatch.setenv("ACME_WEBHOOK_SECRET", SECRET)
    monkeypatch.setattr(receiver_module, "default_registry", JobRegistry())
    jobs_core.configure(MemoryDriver())
    names = asyncio.run(run_block(python_block(WEBHOOKS), {}))
    orders, body = names["orders"], event_body()
    with TestClient(names["app"]) as client:
        first = client.post("/webhooks/acme", content=body, headers=sign(body, "msg_1"))
        again = client.post("/webhooks/acme", content=body, headers=sign(body, "msg_1"))
        forged = client.post(
            "/webhooks/acme",
            content=body,
            headers={"webhook-id": "msg_2", "content-type": "application/json"},
        )
    assert first.status_code == 200 and first.json()["deduped"] is False, first.text
    assert again.json() == {"job_id": first.json()["job_id"], "deduped": True}
    assert forged.status_code == 401
    assert first.json()["job_id"] == orders.job_id_for("msg_1", "org_acme")


async def test_the_operator_in_code_lists_and_requeues_the_dead(myapp: ModuleType) -> None:
    driver = MemoryDriver()
    ids = await dead_welcomes(driver, myapp, 3)
    names = await run_block(python_block(OPERATOR), {"driver": driver})
    assert sorted(j.id for j in names["page"].jobs) == sorted(ids)
    assert names["report"].done == 3 and names["report"].answers == {"requeued": 3}
    rows = await driver.job_get_many(ids)
    assert {r.state for r in rows.values()} == {JobState.READY}


def assert_sent(result_json: str | None) -> None:
    """The declaring block's body result, stored as JSON: `{"sent": true}` (a bool, not 1)."""
    result = json.loads(result_json or "null")
    assert result == {"sent": True} and result["sent"] is True, result_json


PHOTOS_STUBS = {
    "__init__.py": "",
    "storage.py": (
        "busy_now = [False]\n\n\n"
        "def busy():\n    return busy_now[0]\n\n\n"
        "def thumbnail(image_id):\n    return f'{image_id}-small.png'\n"
    ),
}


@pytest.fixture(scope="session")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The README's `photos` package (Moving from Celery): its `jobs.py` the block, storage
    stubbed; imported once (its `@job`s register in the default registry)."""
    root = tmp_path_factory.mktemp("photos")
    with app_package(root, "photos", PHOTOS_STUBS, python_block(CELERY_JOBS)) as package:
        yield package


@contextlib.asynccontextmanager
async def photo_worker(photos: ModuleType) -> AsyncIterator[tuple[MemoryDriver, Worker]]:
    """A memory store configured as the client, and a worker running the photos jobs."""
    driver = MemoryDriver()
    jobs_core.configure(driver)
    worker = Worker(driver, photos.jobs, poll_floor=0.01, poll_ceiling=0.05)
    await worker.start()
    try:
        yield driver, worker
    finally:
        await worker.stop()


async def row_of(driver: JobDriver, job_id: str) -> JobRecord:
    return (await driver.job_get_many([job_id]))[job_id]


async def test_celery_jobs_declare_retry_rate_limit_and_keys_as_commented(
    photos: ModuleType, no_client: None
) -> None:
    resize, notify = photos.jobs.resize, photos.jobs.notify
    assert resize.retry.attempts == 5 and resize.retry.base_ms == 2_000
    assert [(r.limit, r.per_ms) for r in resize.rate_limits] == [(10, 1_000)]
    # A key per input for resize (deduped while live); a fresh one at every enqueue of notify.
    assert resize.key_for({"image_id": 1}) == resize.key_for({"image_id": 1})
    assert notify.key_for({}) != notify.key_for({})
    async with photo_worker(photos) as (driver, _):
        photos.storage.busy_now[0] = True
        try:
            busy = await resize.enqueue({"image_id": 1})
            again = await resize.enqueue({"image_id": 1})
            assert again.deduped and again.id == busy.id

            async def deferred() -> bool:
                row = await row_of(driver, busy.id)
                later = int(time.time() * 1000) + 20_000
                return row.claims == 1 and row.run_at_ms is not None and row.run_at_ms > later

            await until(deferred)
            row = await row_of(driver, busy.id)
            # Deferred 30 s with no attempt spent (self.retry(countdown=30), uncounted).
            assert row.state is JobState.READY and row.attempt == 0
        finally:
            photos.storage.busy_now[0] = False
        done = await resize.enqueue({"image_id": 2})
        one = await notify.enqueue({"user": "ann"})
        two = await notify.enqueue({"user": "ann"})
        assert not two.deduped and two.id != one.id  # every enqueue its own job

        async def finished() -> bool:
            rows = await driver.job_get_many([done.id, one.id, two.id])
            return all(r.state is JobState.COMPLETED for r in rows.values())

        await until(finished)
        assert json.loads((await row_of(driver, done.id)).result_json or "") == {
            "thumb": "2-small.png"
        }


async def test_celery_delay_and_apply_async_options(photos: ModuleType, no_client: None) -> None:
    driver = MemoryDriver()
    jobs_core.configure(driver)
    before = int(time.time() * 1000)
    await run_block(python_block(CELERY_DELAY), {"resize": photos.jobs.resize})
    page = await driver.job_list(JobListParams())
    records = await driver.job_get_many([j.id for j in page.jobs])
    rows = {json.loads(r.input_json)["image_id"]: r for r in records.values()}
    assert sorted(rows) == [7, 8, 9, 10]
    assert rows[7].run_at_ms is not None and rows[7].run_at_ms - before < 5_000
    assert rows[8].run_at_ms is not None and 30_000 <= rows[8].run_at_ms - before < 35_000
    assert rows[9].run_at_ms == int(dt.datetime(2030, 1, 1, tzinfo=dt.UTC).timestamp() * 1000)
    assert rows[10].queue == "urgent" and rows[10].priority == 0


async def test_celery_async_result_get_is_client_result(
    photos: ModuleType, no_client: None
) -> None:
    async with photo_worker(photos) as (driver, _):
        names = await run_block(
            python_block(CELERY_RESULT),
            {**vars(photos.jobs), "jobs_core": jobs_core, "driver": driver},
        )
    assert names["thumb"] == {"thumb": "11-small.png"}


async def test_celery_chain_is_after(photos: ModuleType, no_client: None) -> None:
    async with photo_worker(photos) as (driver, _):
        names = await run_block(python_block(CELERY_CHAIN), {**vars(photos.jobs)})

        async def finished() -> bool:
            ids = [names[n].id for n in ("first", "then", "anyway")]
            rows = await driver.job_get_many(ids)
            return all(r.state is JobState.COMPLETED for r in rows.values())

        await until(finished)
        first, then = (
            await row_of(driver, names["first"].id),
            await row_of(driver, names["then"].id),
        )
        # `then` waited for `first`: its join counted one dependency, completed.
        assert then.join is not None and then.join.total == 1 and then.join.failed == 0
        assert first.finished_at_ms is not None and then.finished_at_ms is not None
        assert then.finished_at_ms >= first.finished_at_ms


async def test_celery_group_with_a_chord_callback_is_a_batch(
    photos: ModuleType, no_client: None
) -> None:
    async with photo_worker(photos) as (driver, _):
        client = jobs_core.Jobs(driver)
        await run_block(python_block(CELERY_GROUP), {**vars(photos.jobs), "client": client})

        async def called_back() -> bool:
            page = await driver.job_list(JobListParams())
            named = [j for j in page.jobs if j.name == "notify"]
            return bool(named) and all(j.state is JobState.COMPLETED for j in named)

        await until(called_back)
        page = await driver.job_list(JobListParams())
        resized = [j for j in page.jobs if j.name == "resize"]
        assert len(resized) == 3 and all(j.state is JobState.COMPLETED for j in resized)
        [callback] = [j for j in page.jobs if j.name == "notify"]
        assert callback.finished_at_ms is not None
        assert all(callback.finished_at_ms >= (j.finished_at_ms or 0) for j in resized)


async def test_celery_group_and_chord_inside_a_job(photos: ModuleType, no_client: None) -> None:
    async with photo_worker(photos) as (driver, _):
        client = jobs_core.Jobs(driver)
        album = await client.enqueue(photos.jobs.publish_album, {"album_id": 1, "images": [4, 5]})
        assert await client.result(album.id, timeout=30) == {
            "thumbs": ["4-small.png", "5-small.png"]
        }
        page = await driver.job_list(JobListParams())
        children = [j for j in page.jobs if j.parent_id == album.id]
        assert len(children) == 2 and all(j.state is JobState.COMPLETED for j in children)


def test_celery_beat_is_a_task(photos: ModuleType) -> None:
    names: dict[str, Any] = {}
    asyncio.run(run_block(python_block(CELERY_BEAT), names))
    nightly = names["nightly"]
    assert nightly.job is photos.jobs.resize
    at = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)
    fire = nightly.schedule.next_after(int(at.timestamp() * 1000))
    assert dt.datetime.fromtimestamp(fire / 1000, dt.UTC) == dt.datetime(
        2030, 1, 2, 3, 0, tzinfo=dt.UTC
    )


def test_the_declaring_block_declares_what_its_comments_say(myapp: ModuleType) -> None:
    handle = myapp.jobs.send_welcome
    declared = call_keywords(python_block(DECLARE), "job")
    retry = call_keywords(python_block(DECLARE), "Retry")
    assert handle.name == "send_welcome" and handle.queue == declared["queue"]
    assert {k: getattr(handle.retry, k) for k in retry} == retry
    assert handle.timeout_ms == declared["timeout"] * 1000  # "seconds"
    assert handle.key_for(INP) == f"welcome:{INP['user_id']}"
    # The body's comment names what a body can read off its context.
    fields = {f.name for f in dataclasses.fields(JobContext)}
    assert {"attempt", "tenant", "signal"} <= fields and callable(JobContext.progress)


async def test_enqueue_from_async_code(myapp: ModuleType, no_client: None) -> None:
    names = await run_block(python_block(ASYNC_ENQUEUE), {"send_welcome": myapp.jobs.send_welcome})
    client = facade.default_client()
    assert isinstance(client.driver, MemoryDriver)
    enqueued = names["_"]
    assert isinstance(enqueued, EnqueueResult) and not enqueued.deduped
    row = (await client.driver.job_get_many([enqueued.id]))[enqueued.id]
    assert row.state is JobState.READY and row.queue == myapp.jobs.send_welcome.queue
    # The same input again finds it live.
    again = await names["send_welcome"].enqueue(row.input)
    assert again.deduped and again.id == enqueued.id


def test_enqueue_from_sync_code_without_an_event_loop(myapp: ModuleType, no_client: None) -> None:
    client = jobs_core.configure("memory")  # what the async block above did
    try:
        names = {"send_welcome": myapp.jobs.send_welcome}
        eval(compiled(python_block(SYNC_ENQUEUE)), names)
        enqueued = names["_"]
        assert isinstance(enqueued, EnqueueResult) and not enqueued.deduped
        row = asyncio.run(client.driver.job_get_many([enqueued.id]))[enqueued.id]
        assert row.state is JobState.READY
        again = myapp.jobs.send_welcome.enqueue_sync(row.input)
        assert again.deduped and again.id == enqueued.id
    finally:
        client.close_sync()


async def test_a_worker_in_code_runs_the_job_until_stopped(myapp: ModuleType) -> None:
    driver = MemoryDriver()
    queued = await jobs_core.Jobs(driver).enqueue(myapp.jobs.send_welcome, INP)
    names: dict[str, Any] = {"Worker": Worker, "driver": driver, "myapp": myapp}
    running = asyncio.create_task(run_block(python_block(WORKER_IN_CODE), names))

    async def done() -> bool:
        row = (await driver.job_get_many([queued.id]))[queued.id]
        return row.state is JobState.COMPLETED

    try:
        await until(done)
    finally:
        if "worker" in names:
            await names["worker"].stop()
        await asyncio.wait_for(running, 10)
    worker = names["worker"]
    given = call_keywords(python_block(WORKER_IN_CODE), "Worker")
    assert given and {k: getattr(worker, k) for k in given} == given
    row = (await driver.job_get_many([queued.id]))[queued.id]
    assert_sent(row.result_json)
    assert running.done() and running.exception() is None  # `run()` returned after `stop()`


Backend = Callable[[], AbstractAsyncContextManager[JobDriver]]


@contextlib.asynccontextmanager
async def _memory() -> AsyncIterator[JobDriver]:
    async with MemoryDriver() as driver:
        yield driver


@contextlib.asynccontextmanager
async def _pg() -> AsyncIterator[JobDriver]:
    async with fresh_driver() as driver:
        yield driver


@contextlib.asynccontextmanager
async def _redis() -> AsyncIterator[JobDriver]:
    async with _real(REDIS_URL) as driver:
        yield driver


BACKENDS: dict[str, Backend] = {"memory": _memory, "pg": _pg, "redis": _redis}


def url_of(driver: JobDriver) -> str:
    """The URL `jobs_core.configure` takes for `driver`'s store (the async block's comment)."""
    if isinstance(driver, PgDriver):
        return f"{PG_URL}?schema={driver.schema}"
    if isinstance(driver, RedisDriver):
        return f"{REDIS_URL}?prefix={driver.keys.prefix}"
    return "memory"


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_idempotency_dedupes_while_live_and_frees_the_key_after(
    myapp: ModuleType, no_client: None, backend: str
) -> None:
    async with BACKENDS[backend]() as driver:
        # A memory URL would make a store of its own: the test must see the rows.
        client = jobs_core.configure(driver if backend == "memory" else url_of(driver))
        try:
            names = await run_block(
                python_block(IDEMPOTENCY), {"send_welcome": myapp.jobs.send_welcome, "inp": INP}
            )
            first = names["first"]
            assert not first.deduped
            assert first.id in await driver.job_get_many([first.id])
            # "Once it finished, the key is free again."
            await driver.job_cancel(first.id, int(time.time() * 1000))
            later = await myapp.jobs.send_welcome.enqueue(INP)
            assert not later.deduped and later.id != first.id
        finally:
            await client.driver.close()


def recording(made: list[tuple[Worker, Any]]) -> type[Worker]:
    """`Worker` as the retention block calls it, each one kept in `made` with its retention, on
    a fake clock (the first purge round comes up to a minute after a start: fake time makes
    that test time)."""

    class RecordedWorker(Worker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("clock", FakeClock(start_ms=time.time_ns() // 1_000_000))
            super().__init__(*args, **kwargs)
            made.append((self, kwargs.get("retention", "default")))

    return RecordedWorker


FINAL = (JobState.COMPLETED, JobState.CANCELLED, JobState.FAILED, JobState.DEAD)


@pytest.mark.parametrize("backend", sorted(BACKENDS))
async def test_retention_workers_purge_what_outlived_its_keep_and_none_never(
    myapp: ModuleType, backend: str
) -> None:
    made: list[tuple[Worker, Any]] = []
    async with BACKENDS[backend]() as driver:
        names = await run_block(
            python_block(RETENTION), {"Worker": recording(made), "driver": driver, "myapp": myapp}
        )
        keep = names["keep"]
        assert isinstance(keep, Retention) and keep.failed is None  # "failed: forever"
        [keeping] = [w for w, r in made if r is keep]
        [never] = [w for w, r in made if r is None]
        assert isinstance(keeping.clock, FakeClock) and isinstance(never.clock, FakeClock)
        now = keeping.clock.now_ms()
        ids, left = [], []
        params = keep.params(now, 1)
        for state in FINAL:
            keep_ms = getattr(params, f"{state.value}_ms")
            if keep_ms is None:  # kept forever: a year old stays
                ages = {f"{state.value}-year": (365 * DAY * 1000, True)}
            else:  # older than its keep goes; at half its keep stays (the test moves 190 s)
                ages = {f"{state.value}-old": (keep_ms + 60_000, False)}
                ages[f"{state.value}-young"] = (keep_ms // 2, True)
            for job_id, (age_ms, stays) in ages.items():
                await finish(driver, [job_id], state, now - age_ms)
                ids.append(job_id)
                left += [job_id] if stays else []
        assert len(left) < len(ids)
        for worker, expected in ((never, ids), (keeping, left)):  # "never purges" first
            assert isinstance(worker.clock, FakeClock)
            worker.clock.set(now)
            await worker.start()
            try:
                # Claim and heartbeat loops (and a purger) wait on the clock when idle.
                sleepers = 2 if worker is never else 3
                await advance_quietly(worker.clock, 190_000, sleepers=sleepers, step_ms=1_000)
                assert sorted(await driver.job_get_many(ids)) == sorted(expected)
            finally:
                await worker.stop()


def test_the_parity_block_is_a_suite_pytest_collects_and_runs(tmp_path: Path) -> None:
    (tmp_path / "my_driver.py").write_text(
        "from jobs_memory import MemoryDriver\n\n\n"
        "class MyDriver(MemoryDriver):\n"
        '    """The README\'s stand-in driver: the memory one, built from a URL."""\n\n'
        "    def __init__(self, url: str) -> None:\n"
        "        super().__init__()\n"
        "        self.url = url\n",
        encoding="utf-8",
    )
    block = python_block(PARITY)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_my_driver_parity.py").write_text(block.text, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        names: dict[str, Any] = {"__name__": "readme_parity"}
        eval(compiled(block), names)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_driver", None)
    suite = names["TestMyDriverParity"]
    assert issubclass(suite, DriverSuite) and suite.__name__.startswith("Test")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HYPOTHESIS_PROFILE": "ci"}
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir"]
    listed = subprocess.run(
        [*pytest_cmd, str(tmp_path), "--collect-only", "tests/test_my_driver_parity.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "test_state_machine" in listed.stdout and "test_scenario[" in listed.stdout
    # One scenario for real: the factory hands the suite a working, fresh driver.
    first = next(ln for ln in listed.stdout.splitlines() if "test_scenario[" in ln)
    ran = subprocess.run(
        [*pytest_cmd, str(tmp_path), first.strip()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr


def test_the_testing_block_passes_as_a_users_test_file(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    block = python_block(TESTING)
    (tmp_path / "tests" / "test_receipts.py").write_text(block.text, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n", encoding="utf-8"
    )
    # The prose's default: memory, whatever this run's environment names.
    env = {k: v for k, v in os.environ.items() if k != "UJOBS_TEST_DRIVER"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *filter(None, [env.get("PYTHONPATH")])])
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args()]
    ran = subprocess.run(
        [*pytest_cmd, "--rootdir", str(tmp_path), "tests/test_receipts.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0 and "2 passed" in ran.stdout, ran.stdout + ran.stderr


# --- inline examples in the prose (`await …` spans a reader copies) --------------------------

INLINE = re.compile(r"`(await [^`]+)`")
DELAY = "await handle.enqueue(inp, delay_ms="
CANCEL = "await driver.job_cancel("
PAUSE = "await driver.pause_add("
DEMAND = "await worker.demand()"
TASK_NOW = "await nightly_sales.enqueue()"
INLINE_CASES = (DELAY, CANCEL, PAUSE, DEMAND, TASK_NOW)


def inline_example(start: str) -> Block:
    """The one backticked `await …` span of the README prose that starts with `start`."""
    found = [
        (page, text, m)
        for page, text in pages()
        for m in INLINE.finditer(text)
        if m.group(1).startswith(start)
    ]
    assert len(found) == 1, f"the pages have {len(found)} inline examples starting {start!r}"
    page, text, m = found[0]
    return Block("python", m.group(1), text.count("\n", 0, m.start()) + 1, page)


async def test_the_delay_and_priority_example(myapp: ModuleType, no_client: None) -> None:
    example = inline_example(DELAY)
    driver = MemoryDriver()
    jobs_core.configure(driver)
    names = await run_block(example, {"handle": myapp.jobs.send_welcome, "inp": INP})
    given = call_keywords(example, "enqueue")
    row = (await driver.job_get_many([names["_"].id]))[names["_"].id]
    assert row.run_at_ms is not None and row.run_at_ms - row.created_at_ms == given["delay_ms"]
    assert row.priority == given["priority"]


async def test_the_cancel_example_cancels_a_live_job(myapp: ModuleType) -> None:
    driver = MemoryDriver()
    queued = await jobs_core.Jobs(driver).enqueue(myapp.jobs.send_welcome, INP)
    names = {"driver": driver, "job_id": queued.id, "now_ms": int(time.time() * 1000)}
    await run_block(inline_example(CANCEL), names)
    row = (await driver.job_get_many([queued.id]))[queued.id]
    assert row.state is JobState.CANCELLED


async def test_the_pause_example_stops_claims_until_removed(myapp: ModuleType) -> None:
    driver = MemoryDriver()
    queued = await jobs_core.Jobs(driver).enqueue(myapp.jobs.send_welcome, INP)
    names = {"driver": driver, "Pause": Pause}
    await run_block(inline_example(PAUSE), names)
    claim = ClaimParams(("emails",), "w1", 10, 30_000, int(time.time() * 1000) + 1)
    assert not (await driver.job_claim(claim)).jobs
    [pause] = await driver.pause_list()
    assert await driver.pause_remove(pause)
    assert [j.id for j in (await driver.job_claim(claim)).jobs] == [queued.id]


async def test_a_task_enqueued_by_hand_runs_its_job_now_under_the_plain_key(
    reports: ModuleType, no_client: None
) -> None:
    driver = MemoryDriver()
    jobs_core.configure(driver)
    names = await run_block(inline_example(TASK_NOW), {**vars(reports.jobs)})
    row = (await driver.job_get_many([names["_"].id]))[names["_"].id]
    today = json.loads(row.input_json)["day"]
    assert row.name == "build_report" and row.idempotency_key == f"sales:{today}"
    assert dt.date.fromisoformat(today) in {
        dt.datetime.now(ZoneInfo("Europe/Paris")).date() + dt.timedelta(days=d) for d in (-1, 0)
    }


async def test_the_demand_example_counts_ready_jobs_per_queue(myapp: ModuleType) -> None:
    driver = MemoryDriver()
    await jobs_core.Jobs(driver).enqueue(myapp.jobs.send_welcome, INP)
    # A name pause keeps the job ready while the worker runs; demand ignores name pauses.
    await driver.pause_add(Pause("name", myapp.jobs.send_welcome.name))
    worker = Worker(driver, myapp.jobs)
    names: dict[str, Any] = {"worker": worker}
    example = inline_example(DEMAND)
    await run_block(example, names)
    assert names["_"] == {myapp.jobs.send_welcome.queue: 0}  # not started: not accepting
    await worker.start()
    try:
        await run_block(example, names)
        assert names["_"] == {myapp.jobs.send_welcome.queue: 1}
    finally:
        await worker.stop()
    await run_block(example, names)
    assert names["_"] == {myapp.jobs.send_welcome.queue: 0}  # stopped


def test_every_inline_await_has_a_case() -> None:
    spans = [m.group(1) for _, text in pages() for m in INLINE.finditer(text)]
    for span in spans:
        cases = [start for start in INLINE_CASES if span.startswith(start)]
        assert len(cases) == 1, f"README inline example {span!r} has cases {cases}"
    for start in INLINE_CASES:
        inline_example(start)


# --- the shell commands ------------------------------------------------------------------------

#: Commands of the README's ```sh blocks that this file does not run, and why.
NOT_RUN = {
    "make demo": "rebuilds .venv; the `ujobs demo` it runs is tests/core/test_cli.py's",
    "make test": "runs this very suite",
    "pip install ultimat3-jobs": "installs from PyPI",
    "pip install 'ultimat3-jobs[pg]'": "installs from PyPI",
    "pip install 'ultimat3-jobs[redis]'": "installs from PyPI",
    "pip install 'ultimat3-jobs[all]'": "installs from PyPI",
    "pip install 'ultimat3-jobs[dashboard]'": "installs from PyPI",
    "ujobs worker myapp.jobs --driver 'redis+cluster://node1:7000?prefix=myapp'": (
        "needs a Redis Cluster; tests/redis runs the driver on a one-node cluster"
    ),
}

#: Commands run below, each found by a stable start (the README's text is what runs).
EXPORT = "export UJOBS_DRIVER="
DB_UPGRADE_ENV = "ujobs db upgrade"  # bare: the URL from the exported env
#: Cases that are a whole command, not a start (`ujobs db upgrade --url …` is another case).
WHOLE = {DB_UPGRADE_ENV}
WORKER_ENV = "ujobs worker myapp.jobs --concurrency"
WORKER_MEMORY = "ujobs worker myapp.jobs --driver memory"
ENQUEUE_DELAY = "ujobs enqueue myapp.jobs send_welcome"
ALEMBIC = "alembic -x url="
DB_UPGRADE = "ujobs db upgrade --url"
WORKER_PG = "ujobs worker myapp.jobs --driver 'postgresql+psycopg://"
WORKER_REDIS = "ujobs worker myapp.jobs --driver 'redis://"
OPS_LIST = "ujobs jobs list --state dead"
OPS_REQUEUE = "ujobs jobs requeue --state dead"
OPS_QUEUES = "ujobs queues"
OPS_STATS = "ujobs stats"
OPS_PAUSE = "ujobs pause emails"
OPS_RESUME = "ujobs resume"
OPS_WORKERS = "ujobs workers"
WORKER_METRICS = "ujobs worker myapp.jobs --metrics-port"
DASHBOARD = "ujobs dashboard --app myapp.jobs"
WITH_SCHEDULER = "ujobs worker reports.jobs"
SCHEDULER = "ujobs scheduler reports.jobs"
TASKS = "ujobs tasks reports.jobs"
PAUSE_TASK = "ujobs pause --task"
RELAY = "ujobs relay --outbox"
WITH_RELAY = "ujobs worker myapp.jobs --with-relay"
#: Each web app's worker with the relay, by the example it works.
WEB_WORKERS = {
    app: f"ujobs worker examples.{app}.jobs --with-relay"
    for app in ("fastapi_app", "flask_app", "django_app")
}
SHELL_CASES = (
    DASHBOARD,
    RELAY,
    WITH_RELAY,
    *WEB_WORKERS.values(),
    WITH_SCHEDULER,
    SCHEDULER,
    TASKS,
    PAUSE_TASK,
    OPS_LIST,
    OPS_REQUEUE,
    OPS_QUEUES,
    OPS_STATS,
    OPS_PAUSE,
    OPS_RESUME,
    OPS_WORKERS,
    WORKER_METRICS,
    EXPORT,
    DB_UPGRADE_ENV,
    WORKER_ENV,
    WORKER_MEMORY,
    ENQUEUE_DELAY,
    ALEMBIC,
    DB_UPGRADE,
    WORKER_PG,
    WORKER_REDIS,
)


def shell_commands() -> list[str]:
    """Every command line of the README's ```sh blocks, its trailing comment dropped, in one
    quoting (`shlex.join`), duplicates once."""
    commands: dict[str, None] = {}
    for block in readme_blocks("sh"):
        for line in block.text.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                commands[shlex.join(words)] = None
    return list(commands)


def cases_of(command: str, starts: Sequence[str]) -> list[str]:
    """The cases `command` is: each start it begins with, each of `WHOLE` it equals."""
    return [s for s in starts if command == s or (s not in WHOLE and command.startswith(s))]


def shell_command(start: str) -> str:
    found = [c for c in shell_commands() if start in cases_of(c, SHELL_CASES)]
    assert len(found) == 1, f"README has {len(found)} commands starting {start!r}: {found}"
    return found[0]


def test_every_shell_command_is_run_or_excused() -> None:
    commands = shell_commands()
    excused = {shlex.join(shlex.split(c)) for c in NOT_RUN}
    assert excused <= set(commands), f"excuses for no command: {excused - set(commands)}"
    for command in commands:
        cases = cases_of(command, SHELL_CASES)
        assert len(cases) + (command in excused) == 1, (
            f"README command {command!r}: cases {cases}, excused {command in excused}; "
            "each command needs exactly one case here (or one named excuse in NOT_RUN)"
        )
    for start in SHELL_CASES:
        shell_command(start)  # each case runs exactly one command


def localize(command: str, schema: str = "", prefix: str = "") -> list[str]:
    """`command` as argv against this machine's servers: the README's `db` host is the test
    Postgres (schema `schema`), its Redis prefix is `prefix`, `ujobs` is this checkout's."""
    pg = PG_URL.split("?")[0]
    argv = []
    for word in shlex.split(command, comments=True):
        word = re.sub(r"postgresql\+psycopg://[^?\s]*@db/app", pg, word)
        word = word.replace("schema=ujobs", f"schema={schema}")
        word = word.replace("prefix=myapp", f"prefix={prefix}")
        argv.append(word)
    if argv[0] == "ujobs":
        return [sys.executable, "-m", "jobs_core.cli", *argv[1:]]
    if argv[0] == "alembic":
        return [sys.executable, "-m", "alembic", *argv[1:]]
    return argv


def run(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done


def run_in_turn(
    argvs: list[list[str]], cwd: Path, tmp: Path, env: dict[str, str] | None = None
) -> list[str]:
    """The `ujobs` command lines `argvs` (as `localize` makes them), one after the other, each a
    fork of one interpreter that imported the CLI (tests/cli_forks.py) rather than an
    interpreter of its own (about a second of imports each): each one's stdout; each must exit
    0. For commands that need no check of the store between them."""
    runs = []
    for argv in argvs:
        assert argv[:3] == [sys.executable, "-m", "jobs_core.cli"], argv
        runs.append((argv[3:], {**os.environ, **(env or {})}, cwd))
    done = forked(runs, tmp, at_once=1)
    for one in done:
        assert one.returncode == 0, f"{one.args}: {one.stdout}{one.stderr}"
    return [one.stdout for one in done]


def catches_sigterm(pid: int) -> bool:
    """Whether process `pid` has a SIGTERM handler: the worker installs its drain handler after
    printing its plan, and a SIGTERM before that would kill it rather than drain it."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.MULTILINE)[1], 16)  # type: ignore[index]
    return bool(caught & (1 << (signal.SIGTERM - 1)))


def worker_briefly(
    argv: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    ready: Callable[[], bool] = lambda: True,
    banner_start: str = "ujobs worker",
    banner_on_stderr: bool = False,
) -> tuple[str, str]:
    """Start `ujobs worker`, wait for its plan (and `ready()`), SIGTERM it: it drains and
    exits 0. Answers its stdout and its stderr. The plan is read from stdout, or from stderr
    where `--log-format json` makes it a log line (`banner_on_stderr`)."""
    # Unbuffered bytes: `readline` then takes exactly the banner, and `communicate` (which reads
    # the pipe's descriptor itself) gets every later line; a buffered reader could have read
    # ahead past the banner into a buffer `communicate` never sees.
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first, other = (
            (proc.stderr, proc.stdout) if banner_on_stderr else (proc.stdout, proc.stderr)
        )
        banner = first.readline().decode()
        assert banner.startswith(banner_start), banner + other.read().decode()
        deadline = time.monotonic() + 20
        while not (catches_sigterm(proc.pid) and ready()):
            assert proc.poll() is None, "the worker exited early"
            assert time.monotonic() < deadline, "the worker never got there"
            time.sleep(0.05)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        out_bytes, err_bytes = proc.communicate(timeout=30)
        out, err = out_bytes.decode(), err_bytes.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, banner + out + err
    return (out, banner + err) if banner_on_stderr else (banner + out, err)


def test_the_memory_worker_logs_json(app_dir: Path) -> None:
    out, err = worker_briefly(
        localize(shell_command(WORKER_MEMORY)),
        app_dir,
        {"UJOBS_DRIVER": ""},
        banner_start='{"time"',
        banner_on_stderr=True,
    )
    assert out == ""  # the banner and the final counts are log lines too
    # "one JSON object per line", and the drain on SIGTERM logs at least once.
    records = [json.loads(line) for line in err.splitlines() if line.strip()]
    plan = records[0]
    assert plan["event"] == "jobs.worker.plan" and plan["driver"] == "memory", plan
    assert any(r["event"] == "jobs.worker.draining" for r in records), err
    assert records[-1]["event"] == "jobs.worker.counts", err
    for record in records:  # the fields the prose names
        assert {"time", "level", "logger", "event", "message"} <= record.keys(), record


async def _row(schema: str, job_id: str) -> Any:
    async with PgDriver(PG_URL, schema=schema, pool_size=1) as driver:
        return (await driver.job_get_many([job_id]))[job_id]


def test_enqueue_with_a_delay_then_a_worker_from_the_env_runs_it(
    app_dir: Path, tmp_path: Path
) -> None:
    schema = fresh_schema()
    try:
        # The README exports a URL for its own host `db`; `localize` makes it the test server's.
        export, assignment = localize(shell_command(EXPORT))
        variable, url = assignment.split("=", 1)
        assert (export, variable) == ("export", "UJOBS_DRIVER")
        env = {variable: f"{url}?schema={schema}"}
        # The page's own next step installs the tables: a new user runs no test helper.
        enqueue = localize(shell_command(ENQUEUE_DELAY))
        created, enqueued = run_in_turn(
            [localize(shell_command(DB_UPGRADE_ENV)), enqueue], app_dir, tmp_path, env
        )
        assert f"created the jobs tables in schema '{schema}'" in created, created
        delay_ms = round(float(enqueue[enqueue.index("--delay") + 1]) * 1000)
        queued = json.loads(enqueued)
        assert queued["deduped"] is False
        row = asyncio.run(_row(schema, queued["id"]))
        assert row.state is JobState.READY and row.run_at_ms - row.created_at_ms == delay_ms
        assert row.input == json.loads(enqueue[enqueue.index("send_welcome") + 1])

        def completed() -> bool:
            return bool(asyncio.run(_row(schema, queued["id"])).state is JobState.COMPLETED)

        worker = localize(shell_command(WORKER_ENV))
        out, _ = worker_briefly(worker, app_dir, env, ready=completed)
        assert f"concurrency {worker[worker.index('--concurrency') + 1]} " in out, out
        assert_sent(asyncio.run(_row(schema, queued["id"])).result_json)
    finally:
        drop_schema(schema)


def test_db_upgrade_alembic_and_a_pg_worker(app_dir: Path, tmp_path: Path) -> None:
    made, by_alembic = fresh_schema(), fresh_schema()
    try:
        run(localize(shell_command(ALEMBIC), schema=by_alembic), ROOT)
        upgrade = shell_command(DB_UPGRADE)
        created, again, agreed = run_in_turn(
            [localize(upgrade, schema=made)] * 2 + [localize(upgrade, schema=by_alembic)],
            app_dir,
            tmp_path,
        )
        assert "created" in created, created
        assert "current" in again, again
        # alembic and `ujobs db upgrade` agree on what is installed.
        assert "current" in agreed, agreed
        out, _ = worker_briefly(localize(shell_command(WORKER_PG), schema=made), app_dir)
        # The banner's head: the store on the first line, or on lines of its own (80 columns).
        assert f"schema={made}" in out.split("\nqueues: ")[0], out
    finally:
        drop_schema(made)
        drop_schema(by_alembic)


async def _scheduler_state(schema: str) -> tuple[list[str], list[Pause], bool]:
    async with PgDriver(PG_URL, schema=schema, pool_size=1) as driver:
        marks = await driver.task_marks(["nightly-sales"])
        leads = await driver.lease_holders(LEADER_KEY, int(time.time() * 1000))
        return sorted(marks), await driver.pause_list(), bool(leads)


def test_the_scheduler_commands_on_postgres(tmp_path: Path) -> None:
    """The worker with the scheduler, the scheduler alone (each arms the task and gives its lead
    back on SIGTERM), the listing, and a task's pause, on a Postgres schema of their own."""
    (tmp_path / "reports").mkdir()
    for file, text in {**REPORTS_STUBS, "jobs.py": python_block(REPORTS).text}.items():
        (tmp_path / "reports" / file).write_text(text, encoding="utf-8")
    schema = fresh_schema()
    try:
        migrate(schema)

        def leading() -> bool:
            marks, _, leads = asyncio.run(_scheduler_state(schema))
            return marks == ["nightly-sales"] and leads

        out, _ = worker_briefly(
            localize(shell_command(WITH_SCHEDULER), schema=schema), tmp_path, ready=leading
        )
        assert "nightly-sales" in out, out
        assert not asyncio.run(_scheduler_state(schema))[2], "the drain kept the lead"
        out, _ = worker_briefly(
            localize(shell_command(SCHEDULER), schema=schema),
            tmp_path,
            ready=leading,
            banner_start="ujobs scheduler",
        )
        assert not asyncio.run(_scheduler_state(schema))[2], "the drain kept the lead"
        tasks = localize(shell_command(TASKS), schema=schema)
        listed, as_json, _ = run_in_turn(
            [tasks, [*tasks, "--json"], localize(shell_command(PAUSE_TASK), schema=schema)],
            tmp_path,
            tmp_path / "runs",
            {"COLUMNS": "200"},
        )
        assert "nightly-sales" in listed and "Europe/Paris" in listed, listed
        (doc,) = json.loads(as_json)
        assert doc["name"] == "nightly-sales" and doc["last_fire"] is None
        assert doc["next_fire"].endswith(("T02:00:00+01:00", "T02:00:00+02:00")), doc
        assert Pause("task", "nightly-sales") in asyncio.run(_scheduler_state(schema))[1]
    finally:
        drop_schema(schema)


async def _drop_prefix(prefix: str) -> None:
    async with _real(REDIS_URL, prefix=prefix):
        pass  # leaving it deletes every key of the prefix


def test_a_redis_worker(app_dir: Path) -> None:
    prefix = fresh_prefix()
    try:
        out, _ = worker_briefly(localize(shell_command(WORKER_REDIS), prefix=prefix), app_dir)
        assert f"prefix={prefix}" in out.split("\nqueues: ")[0], out
    finally:
        asyncio.run(_drop_prefix(prefix))


def test_the_outbox_block_stages_in_the_callers_transaction(
    app_dir: Path, myapp: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sign_up` as written: a committed sign-up leaves one staged job under the answered id,
    which a relay pass publishes; a sign-up its transaction refuses leaves neither row nor job."""
    import sqlalchemy as sa

    schema = fresh_schema()
    migrate(schema)
    monkeypatch.setenv("JOBS_PG_SCHEMA", schema)  # the block's `PgOutbox()` reads it
    (app_dir / "myapp" / "signup.py").write_text(python_block(SIGNUP).text, encoding="utf-8")
    engine = sa.create_engine(PG_URL, connect_args={"options": f"-c search_path={schema}"})
    try:
        signup = importlib.import_module("myapp.signup")
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE users (id serial PRIMARY KEY, email text UNIQUE)"))
        job_id = signup.sign_up(engine, "org_1", "ada@example.com")
        with pytest.raises(sa.exc.IntegrityError):
            signup.sign_up(engine, "org_1", "ada@example.com")  # the stage came first: undone

        async def publish() -> JobRecord:
            driver = MemoryDriver()
            async with PgOutbox(PG_URL, schema=schema) as outbox:
                assert [r.job.id for r in await outbox.outbox_pending(10)] == [job_id]
                assert await Relay(outbox, driver).tick() == 1
                assert await outbox.outbox_pending(10) == []
            return (await driver.job_get_many([job_id]))[job_id]

        row = asyncio.run(publish())
        assert row.name == "send_welcome" and row.state is JobState.READY
        assert json.loads(row.input_json) == {"org_id": "org_1", "user_id": 1}
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM users")).scalar_one() == 1
    finally:
        sys.modules.pop("myapp.signup", None)
        engine.dispose()
        drop_schema(schema)


def _stage_welcome(schema: str, myapp: ModuleType, user_id: int) -> str:
    """Stage the README's `send_welcome` in a committed transaction of the schema's outbox."""
    import psycopg

    from jobs_pg.urls import libpq_url

    with psycopg.connect(libpq_url(PG_URL)) as conn:  # the `with` commits
        staged = PgOutbox(schema=schema).stage(
            conn, myapp.jobs.send_welcome, {"org_id": "org_1", "user_id": user_id}
        )
    return staged.id


async def _outbox_empty(schema: str) -> bool:
    async with PgOutbox(PG_URL, schema=schema, pool_size=1) as outbox:
        return await outbox.outbox_pending(1) == []


def test_the_relay_commands_publish_what_was_staged(app_dir: Path, myapp: ModuleType) -> None:
    """`ujobs relay` moves a committed stage from the Postgres outbox into Redis; `ujobs worker
    --with-relay` publishes into its own Postgres and runs the job."""
    schema, prefix = fresh_schema(), fresh_prefix()
    try:
        migrate(schema)
        job_id = _stage_welcome(schema, myapp, 7)

        async def in_redis() -> bool:
            async with RedisDriver(REDIS_URL, prefix=prefix) as driver:
                return job_id in await driver.job_get_many([job_id])

        out, _ = worker_briefly(
            localize(shell_command(RELAY), schema=schema, prefix=prefix),
            app_dir,
            ready=lambda: asyncio.run(in_redis()),
            banner_start="ujobs relay",
        )
        assert asyncio.run(_outbox_empty(schema)), out

        second = _stage_welcome(schema, myapp, 8)
        env = {"UJOBS_DRIVER": f"{PG_URL}?schema={schema}"}

        def completed() -> bool:
            rows = asyncio.run(_rows(schema, [second]))
            return second in rows and rows[second].state is JobState.COMPLETED

        worker_briefly(localize(shell_command(WITH_RELAY)), app_dir, env, ready=completed)
        assert asyncio.run(_outbox_empty(schema))
    finally:
        drop_schema(schema)
        asyncio.run(_drop_prefix(prefix))


def test_the_operator_verbs_and_a_worker_with_metrics(
    app_dir: Path, myapp: ModuleType, tmp_path: Path
) -> None:
    """The operator block as a user runs it, in order, on Postgres: the dead jobs are listed,
    requeued, the queue shown, paused and resumed; a worker serving metrics runs them."""
    import urllib.request

    schema = fresh_schema()
    try:
        migrate(schema)
        env = {"UJOBS_DRIVER": f"{PG_URL.split('?')[0]}?schema={schema}", "COLUMNS": "160"}

        async def seed() -> list[str]:
            async with PgDriver(PG_URL, schema=schema, pool_size=1) as driver:
                return await dead_welcomes(driver, myapp, 2)

        ids = asyncio.run(seed())
        # In the block's order; what each printed is read after (nothing runs the jobs before
        # the worker below, and the pause is seen in the listing taken while it held).
        listed, requeued, queues, stats, _, paused_json, _, _ = run_in_turn(
            [
                localize(shell_command(OPS_LIST)),
                localize(shell_command(OPS_REQUEUE)),
                localize(shell_command(OPS_QUEUES)),
                localize(shell_command(OPS_STATS)),
                localize(shell_command(OPS_PAUSE)),
                [*localize(shell_command(OPS_QUEUES)), "--json"],
                localize(shell_command(OPS_RESUME)),
                localize(shell_command(OPS_WORKERS)),
            ],
            app_dir,
            tmp_path,
            env,
        )
        assert all(i in listed for i in ids) and "dead" in listed, listed
        assert "requeued" in requeued and "2" in requeued, requeued
        assert {r.state for r in (asyncio.run(_rows(schema, ids))).values()} == {JobState.READY}
        assert "emails" in queues, queues
        assert "send_welcome" in stats, stats  # its two dead-letterings, from the counters
        paused = json.loads(paused_json)
        assert any(q["queue"] == "emails" and q["paused"] for q in paused), paused
        assert not asyncio.run(_queue_paused(schema, "emails")), "the resume left it paused"

        port = free_port()
        worker = [w.replace("9464", str(port)) for w in localize(shell_command(WORKER_METRICS))]
        scraped: list[str] = []

        def served() -> bool:
            rows = asyncio.run(_rows(schema, ids))
            if any(r.state is not JobState.COMPLETED for r in rows.values()):
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
                    healthy = r.status == 200
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    scraped.append(r.read().decode())
            except OSError:
                return False
            return healthy and 'name="send_welcome",queue="emails"} 2.0' in scraped[-1]

        worker_briefly(worker, app_dir, env, ready=served)
        assert 'ujobs_jobs_processed_total{name="send_welcome",queue="emails"} 2.0' in scraped[-1]
        assert "ujobs_store_up 1.0" in scraped[-1]
    finally:
        drop_schema(schema)


def test_ujobs_dashboard_serves_the_queues_to_its_token_and_stops_on_sigterm(
    app_dir: Path, myapp: ModuleType
) -> None:
    import urllib.error
    import urllib.request

    schema = fresh_schema()
    try:
        migrate(schema)
        token = "a-token-of-twenty-chars"
        env = {
            **os.environ,
            "UJOBS_DRIVER": f"{PG_URL.split('?')[0]}?schema={schema}",
            "UJOBS_DASHBOARD_TOKEN": token,
        }

        async def seed() -> list[str]:
            async with PgDriver(PG_URL, schema=schema, pool_size=1) as driver:
                return await dead_welcomes(driver, myapp, 1)

        asyncio.run(seed())
        port = free_port()
        argv = [w.replace("8080", str(port)) for w in localize(shell_command(DASHBOARD))]
        proc = subprocess.Popen(argv, cwd=app_dir, env=env, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            banner = proc.stdout.readline()
            assert banner.startswith(f"ujobs dashboard on http://127.0.0.1:{port}/"), banner
            assert "sign-in: token" in banner and token not in banner
            ask = urllib.request.Request(
                f"http://127.0.0.1:{port}/", headers={"Authorization": f"Bearer {token}"}
            )
            deadline = time.monotonic() + 20
            while True:
                try:
                    with urllib.request.urlopen(ask, timeout=5) as r:
                        page = r.read().decode()
                    break
                except urllib.error.URLError:
                    assert time.monotonic() < deadline and proc.poll() is None
                    time.sleep(0.1)
            assert 'data-queue="emails"' in page
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    finally:
        drop_schema(schema)


async def _rows(schema: str, ids: list[str]) -> dict[str, Any]:
    async with PgDriver(PG_URL, schema=schema, pool_size=1) as driver:
        return await driver.job_get_many(ids)


async def _queue_paused(schema: str, queue: str) -> bool:
    async with PgDriver(PG_URL, schema=schema, pool_size=1) as driver:
        return Pause("queue", queue) in await driver.pause_list()


# --- Use it from your web app: each block is the example app's code, run here on its own -------


def assert_taken_from(block: Block) -> None:
    """The block is a run of lines of the example file its first line names (indentation
    aside), so the README shows the very code the example's tests drive."""
    path = ROOT / block.marker.removeprefix("# ")
    want = [line.strip() for line in block.text.splitlines()[1:]]
    have = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    found = any(have[i : i + len(want)] == want for i in range(len(have)))
    assert found, f"README block at line {block.line} is not in {path.relative_to(ROOT)}"


def test_the_fastapi_block_stages_in_the_session_transaction() -> None:
    from examples.fastapi_app import app as site

    block = python_block(WEB_FASTAPI)
    assert_taken_from(block)

    async def sign_up(schema: str) -> dict[str, Any]:
        engine = create_async_engine(on_schema(PG_URL, schema))
        try:
            async with engine.begin() as conn:
                await conn.run_sync(site.Base.metadata.create_all)
            async with AsyncSession(engine, expire_on_commit=False) as session:
                names = {
                    **vars(site),
                    "session": session,
                    "body": site.SignUp(**ANN),
                    "outbox": PgOutbox(schema=schema),
                }
                return await run_block(block, names)
        finally:
            await engine.dispose()

    with migrated_schema() as schema:
        names = asyncio.run(sign_up(schema))
        signed_up(schema, "users", site.send_welcome, names["staged"].id, names["user"].id)


def test_the_flask_block_stages_in_the_session_transaction() -> None:
    from examples.flask_app import app as site

    block = python_block(WEB_FLASK)
    assert_taken_from(block)
    with migrated_schema() as schema:
        engine = create_engine(on_schema(PG_URL, schema))
        try:
            site.Base.metadata.create_all(engine)
            names = {
                **vars(site),
                "sessions": sessionmaker(engine, expire_on_commit=False),
                "body": dict(ANN),
                "outbox": PgOutbox(schema=schema),
            }
            eval(compiled(block), names)
        finally:
            engine.dispose()
        signed_up(schema, "users", site.send_welcome, names["staged"].id, names["user"].id)


def test_the_django_block_stages_on_djangos_connection() -> None:
    block = python_block(WEB_DJANGO)
    assert_taken_from(block)
    with migrated_schema() as schema, site_on(schema):
        from examples.django_app import views

        names = {**vars(views), "body": dict(ANN)}
        eval(compiled(block), names)
        welcome = views.send_welcome
        signed_up(schema, "members", welcome, names["staged"].id, names["member"].id)


@pytest.mark.parametrize("app", sorted(WEB_WORKERS))
def test_a_web_apps_worker_with_the_relay_runs_what_it_staged(app: str) -> None:
    """The README's command for `app`, with the driver from the env as the prose says: its
    relay publishes a welcome staged in a committed transaction, and its worker runs it."""
    handle = importlib.import_module(f"examples.{app}.jobs").send_welcome
    with migrated_schema() as schema:
        with psycopg.connect(libpq_url(PG_URL)) as conn:  # commits when the block ends
            staged = stage(conn, handle, {"user_id": 7, "email": ANN["email"]}, schema=schema)

        def ran() -> bool:
            row = asyncio.run(_rows(schema, [staged.id])).get(staged.id)
            return row is not None and row.state is JobState.COMPLETED

        command = localize(shell_command(WEB_WORKERS[app]))
        worker_briefly(command, ROOT, {"UJOBS_DRIVER": jobs_url(schema)}, ready=ran)
        row = asyncio.run(_rows(schema, [staged.id]))[staged.id]
        assert json.loads(row.result_json or "null") == {"sent_to": ANN["email"]}
        assert asyncio.run(pending(schema)) == []
