"""docs/factories.md's import_rows(), export_rows(), consumer(), webhook_receiver() and webhook()
examples, each run as written on the page (read at test time, its line numbers the page's) and
checked for what its prose says it does.

What a block takes from the reader's own code is stood in for here, as
tests/test_readme_examples.py does: `myapp.db` (a module of stubs in `sys.modules`), a `driver`
and a `vault` (names given to the block), environment variables (a URL, a secret), a working
directory (the import's relative `root`) and an object store (the export's `s3://` sink is an
in-memory fsspec filesystem registered for `s3`: the sink speaks fsspec, not S3). Declarations
go to registries of the test's own, so a second run of a test declares the same names again.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import importlib
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa
from fsspec.implementations.memory import MemoryFileSystem
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import create_async_engine
from standardwebhooks import Webhook

from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.factories.rows import import_report
from jobs_core.job import JobRegistry
from jobs_core.jsonform import loads
from jobs_core.records import ClaimParams, WebhookAttemptListParams
from jobs_core.scheduler.task import TaskRegistry
from jobs_core.states import Outcome
from jobs_core.tenant import acting_for
from jobs_core.testing import ujobs_for
from tests.pg.conftest import PG_URL, drop_schema, fresh_driver, fresh_schema
from tests.test_readme_examples import FENCE, Block, run_block
from tests.webhooks.support import recording_endpoint

ROOT = Path(__file__).resolve().parent.parent
PAGE = "docs/factories.md"


def example(section: str) -> Block:
    """The one python block of the page's `## <section>` (up to the next `## `)."""
    text = (ROOT / PAGE).read_text(encoding="utf-8")
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    found = [
        Block(m.group(1), m.group(2), text.count("\n", 0, m.start(2)) + 1, PAGE)
        for m in FENCE.finditer(text, start, end if end > 0 else len(text))
        if m.group(1) == "python"
    ]
    assert len(found) == 1, f"{section}: {len(found)} python blocks"
    return found[0]


#: The sections whose block a test below runs: tests/test_docs_site.py counts them as run.
SECTIONS = ("import_rows()", "export_rows()", "consumer()", "webhook_receiver()", "webhook()")


def test_each_section_named_run_is_run_by_one_test_here() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    for section in SECTIONS:
        assert source.count(f'example("{section}")') == 1, section


@pytest.fixture(autouse=True)
def own_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocks declare in the default registries: this test's own, gone after it."""
    jobs = JobRegistry()
    for module in ("jobs_core.job", "jobs_core.factories.webhooks.receiver"):
        monkeypatch.setattr(importlib.import_module(module), "default_registry", jobs)
    tasks = importlib.import_module("jobs_core.scheduler.task")
    monkeypatch.setattr(tasks, "default_task_registry", TaskRegistry())


def myapp_db(monkeypatch: pytest.MonkeyPatch, **names: Any) -> None:
    """`from myapp.db import …` answers `names` while the test runs."""
    package, db = ModuleType("myapp"), ModuleType("myapp.db")
    package.__path__ = []
    package.db = db  # type: ignore[attr-defined]
    db.__dict__.update(names)
    monkeypatch.setitem(sys.modules, "myapp", package)
    monkeypatch.setitem(sys.modules, "myapp.db", db)


@pytest.fixture
def app_schema() -> Iterator[str]:
    """A Postgres schema of the test's own for the reader's tables, dropped after it."""
    schema = fresh_schema()
    try:
        yield schema
    finally:
        drop_schema(schema)


def app_url(schema: str) -> str:
    """PG_URL with unqualified tables landing in `schema`."""
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}options=-csearch_path%3D{schema}"


# -- import_rows() --------------------------------------------------------------------------------


async def test_the_import_example_upserts_its_tenants_rows_and_reports_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_schema: str
) -> None:
    """Its relative `root` under the test's directory; `myapp.db` a Postgres AsyncEngine and an
    ON CONFLICT upsert: the tenant's rows land (once, though imported again as another input),
    the row naming another org is reported by line and field, never handed."""
    monkeypatch.chdir(tmp_path)
    day = tmp_path / "uploads" / "acme" / "2027-01-02"
    day.mkdir(parents=True)
    data = b"id,org,total\r\n1,acme,12.50\r\n2,acme,3\r\n3,globex,9\r\n4,acme,7.25\r\n"
    (day / "orders.csv").write_bytes(data)
    engine = create_async_engine(app_url(app_schema))
    orders = sa.Table(
        "orders",
        sa.MetaData(),
        sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("org", sa.Text, nullable=False),
        sa.Column("total", sa.Numeric, nullable=False),
    )
    upsert = postgresql.insert(orders)
    upsert = upsert.on_conflict_do_update(
        index_elements=[orders.c.id], set_={"total": upsert.excluded.total}
    )
    async with engine.begin() as conn:
        await conn.execute(sa.text(f"CREATE SCHEMA {app_schema}"))
        await conn.run_sync(orders.metadata.create_all)
    myapp_db(monkeypatch, engine=engine, orders_upsert=upsert)
    try:
        with ujobs_for("memory") as ujobs:
            names = await run_block(example("import_rows()"), {})
            (out,) = await ujobs.drain([names["import_orders"]])
            assert out.outcome is Outcome.COMPLETED, out.error
            assert out.result == {"pages": 1, "rows": 3, "errors": 1, "bytes": len(data)}
            run_id = (await ujobs.driver.job_get_many([out.job_id]))[out.job_id].run_id
            assert await import_report(ujobs.driver, run_id, 10) == [
                {"line": 4, "field": "org", "code": "tenant"}
            ]
            # The same file as another input (a `version`) imports again: the upsert keeps one
            # row per order.
            again = {"org": "acme", "source": "2027-01-02/orders.csv", "version": 2}
            await names["import_orders"].enqueue(again)
            (out,) = await ujobs.drain([names["import_orders"]])
            assert out.outcome is Outcome.COMPLETED and out.result["rows"] == 3
        async with engine.connect() as conn:
            got = (await conn.execute(sa.select(orders).order_by(orders.c.id))).all()
        assert [(r.id, r.org, str(r.total)) for r in got] == [
            (1, "acme", "12.50"),
            (2, "acme", "3"),
            (4, "acme", "7.25"),
        ]
    finally:
        await engine.dispose()


# -- export_rows() --------------------------------------------------------------------------------


class FakeS3(MemoryFileSystem):
    """`s3://` for the test: an in-memory store of its own (fsspec's, under the s3 protocol)."""

    protocol = ("s3",)
    store: ClassVar[dict[str, Any]] = {}
    pseudo_dirs: ClassVar[list[str]] = [""]

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, str) and path.startswith("s3://"):
            path = path[len("s3://") :]
        return super()._strip_protocol(path)


async def test_the_export_example_writes_its_tenants_rows_since_the_date_as_objects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`myapp.db` a SQLite Engine and its `orders`; the `s3://exports` sink an in-memory
    filesystem: the tenant's rows since the input's date, one object per page at the prefix."""
    monkeypatch.setitem(importlib.import_module("fsspec.registry")._registry, "s3", FakeS3)
    monkeypatch.setattr(FakeS3, "store", {})
    monkeypatch.setattr(FakeS3, "pseudo_dirs", [""])
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'shop.db'}")
    orders = sa.Table(
        "orders",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("org_id", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),  # ISO dates: compared as text
        sa.Column("total", sa.Integer, nullable=False),
    )
    orders.metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            orders.insert(),
            [
                {"id": 1, "org_id": "acme", "created_at": "2026-12-31", "total": 5},
                {"id": 2, "org_id": "acme", "created_at": "2027-01-01", "total": 7},
                {"id": 3, "org_id": "globex", "created_at": "2027-01-02", "total": 9},
                {"id": 4, "org_id": "acme", "created_at": "2027-01-02", "total": 11},
            ],
        )
    myapp_db(monkeypatch, engine=engine, orders=orders)
    try:
        with ujobs_for("memory") as ujobs:
            names = await run_block(example("export_rows()"), {})
            (out,) = await ujobs.drain([names["export_orders"]])
        assert out.outcome is Outcome.COMPLETED, out.error
        prefix = "s3://exports/acme/orders/2027-01-02"
        assert out.result == {"pages": 1, "rows": 2, "location": prefix}
        s3 = FakeS3()
        assert s3.ls(prefix, detail=False) == ["/exports/acme/orders/2027-01-02/part-000000.jsonl"]
        lines = s3.cat_file(f"{prefix}/part-000000.jsonl").decode().splitlines()
        assert [json.loads(line) for line in lines] == [
            {"id": 2, "org_id": "acme", "created_at": "2027-01-01", "total": 7},
            {"id": 4, "org_id": "acme", "created_at": "2027-01-02", "total": 11},
        ]
    finally:
        engine.dispose()


# -- consumer() -----------------------------------------------------------------------------------


class JumpClock:
    """Wall time at the start, then moved by each sleep at once: a 50 s run in a blink."""

    def __init__(self) -> None:
        from jobs_core.clock import SystemClock

        self._now = SystemClock().now_ms()

    def now_ms(self) -> int:
        return self._now

    async def sleep_ms(self, ms: int) -> None:
        self._now += max(ms, 0)
        await asyncio.sleep(0)


async def test_the_consumer_example_ships_its_tenants_orders_with_the_cursor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`DATABASE_URL` the jobs' own Postgres database (the schema of the test's driver):
    one run of `orders_feed.job` hands acme's orders to `ship` once, its inserts committed
    with the cursor; the supervisor fires the job every minute."""
    async with fresh_driver() as driver:
        monkeypatch.setenv("DATABASE_URL", app_url(driver.schema))
        names = await run_block(example("consumer()"), {})
        feed, engine = names["orders_feed"], names["engine"]
        try:
            async with engine.begin() as conn:
                await conn.run_sync(names["orders"].metadata.create_all)
                await conn.run_sync(names["shipped"].metadata.create_all)
                await conn.execute(
                    names["orders"].insert(),
                    [
                        {"id": i, "org": "acme" if i % 3 else "globex", "total": i}
                        for i in range(1, 8)
                    ],
                )
            assert (feed.supervisor.cron, feed.supervisor.tz) == ("* * * * *", "UTC")
            assert feed.supervisor.job is feed.job
            await Jobs(driver).enqueue(feed.job, None, key=uuid.uuid4().hex)
            clock = JumpClock()
            params = ClaimParams((feed.job.queue,), "w1", 1, 120_000, clock.now_ms())
            (job,) = (await driver.job_claim(params)).jobs
            tenant = feed.job.tenant_for(loads(job.input_json))
            ctx = JobContext.for_test(job, driver, tenant=tenant, clock=clock)
            with acting_for(tenant):
                done = await feed.job.fn(None, ctx)
            acme = [i for i in range(1, 8) if i % 3]
            assert done == {"turns": 1, "records": len(acme), "cursor": acme[-1]}
            async with engine.connect() as conn:
                shipped = (await conn.execute(sa.select(names["shipped"].c.order_id))).all()
            assert sorted(r[0] for r in shipped) == acme
            entry = await driver.consumer_cursor_get("orders", "acme")
            assert entry is not None and loads(entry.cursor_json) == acme[-1] and entry.lag == 0
        finally:
            await engine.dispose()


# -- webhook_receiver() ---------------------------------------------------------------------------


def test_the_receiver_example_stores_a_verified_event_once_and_runs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The FastAPI app the block builds, on a memory store: a signed delivery is stored as one
    job of the route's org, its redelivery answers that job, a forged one is refused, and a
    worker runs `on_order` with the verified event."""
    from fastapi.testclient import TestClient

    from tests.webhooks.support import SECRET as ACME_SECRET
    from tests.webhooks.support import event_body, sign

    monkeypatch.setenv("ACME_WEBHOOK_SECRET", ACME_SECRET)
    with ujobs_for("memory") as ujobs:
        names = asyncio.run(run_block(example("webhook_receiver()"), {}))
        body = event_body()
        with TestClient(names["app"]) as client:
            first = client.post("/webhooks/acme", content=body, headers=sign(body, "msg_1"))
            again = client.post("/webhooks/acme", content=body, headers=sign(body, "msg_1"))
            forged = client.post(
                "/webhooks/acme",
                content=body,
                headers={**sign(body, "msg_2"), "webhook-signature": "v1,AAAA"},
            )
        assert first.status_code == 200 and first.json()["deduped"] is False, first.text
        assert again.json() == {"job_id": first.json()["job_id"], "deduped": True}
        assert forged.status_code == 401
        stored = ujobs.jobs_sync()
        assert [(j.name, j.tenant_id) for j in stored] == [("acme.orders", "org_acme")]
        (out,) = ujobs.drain_sync([names["orders"]])
        assert out.outcome is Outcome.COMPLETED and out.job_id == first.json()["job_id"]


# -- webhook() ------------------------------------------------------------------------------------

SECRET = "whsec_" + base64.b64encode(b"docs-factories-secret-32-bytes!!").decode()


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A real HTTP server on a spare loopback port, answering 200 and keeping each POST."""
    with recording_endpoint() as endpoint:
        yield endpoint


async def test_the_sender_example_delivers_one_signed_event_to_the_orgs_endpoint(
    monkeypatch: pytest.MonkeyPatch, receiver: tuple[str, list[tuple[dict[str, str], bytes]]]
) -> None:
    """`ACME_HOOK_URL` a receiver this test serves on loopback, `vault` answering acme's
    secret: a worker's run POSTs the event once, signed as Standard Webhooks says, and the
    endpoint ledger records the delivery."""
    url, got = receiver
    monkeypatch.setenv("ACME_HOOK_URL", url)
    asked: list[tuple[str, str]] = []

    def webhook_secrets(org: str, endpoint: str) -> list[str]:
        asked.append((org, endpoint))
        return [SECRET]

    vault = SimpleNamespace(webhook_secrets=webhook_secrets)
    with ujobs_for("memory") as ujobs:
        names = await run_block(example("webhook()"), {"driver": ujobs.driver, "vault": vault})
        (out,) = await ujobs.drain([names["send"]])
        assert out.outcome is Outcome.COMPLETED, out.error
        assert asked == [("acme", "orders")]
        ((headers, body),) = got
        # The signature a receiver holding the secret computes (the attempt's timestamp is the
        # harness's fake clock's, so `verify`'s five minutes of tolerance are left out).
        at = dt.datetime.fromtimestamp(int(headers["webhook-timestamp"]), dt.UTC)
        assert headers["webhook-signature"] == Webhook(SECRET).sign(headers["webhook-id"], at, body)
        sent = json.loads(body)
        assert (sent["type"], sent["data"]) == ("order.paid", {"id": 42})
        assert out.result["status"] == 200 and out.result["endpoint"] == "orders"
        (attempt,) = await ujobs.driver.webhook_attempt_list(
            WebhookAttemptListParams("acme", "orders", 10)
        )
        assert (attempt.status_code, attempt.outcome, attempt.job_id) == (
            200,
            "delivered",
            out.job_id,
        )
        assert attempt.event_id == headers["webhook-id"]
