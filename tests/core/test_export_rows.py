"""`export_rows()` on the memory driver, through the real worker: one object per page named by
its index, a page re-run after a crash overwriting its object (never a second one, never half
of one), keyset pages of a SQLAlchemy query (SQLite here; Postgres in tests/pg), the ledger, the
tenant's rows and place only, hostile values written so that the importer reads them back."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from jobs_core.errors import ExportDeclarationInvalidError, ExportScopeInvalidError
from jobs_core.facade import Jobs
from jobs_core.factories.rows import export_rows
from jobs_core.factories.rows.formats import Layout, read_page
from jobs_core.job import JobRegistry
from jobs_core.jsonform import JsonValue
from jobs_core.records import SweepCheckpoint, SweepRecord
from jobs_core.retry import Retry
from jobs_core.states import JobState, Outcome
from jobs_core.tenant import acting_for, current_tenant
from jobs_core.testing import UJobs
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import until

FAST = Retry(attempts=3, base_ms=1, cap_ms=1)
PART = re.compile(r"part-\d{6}\.(jsonl|csv)")
#: Values a sink must write and an importer read back unchanged.
HOSTILE = [
    'quote " and "" two',
    "comma, and\nnewline\r\nand CRLF",
    "<script>alert(1)</script>",
    "=SUM(A1:A9)",
    "😀 é \u2028",
    "",
    " lead and trail ",
]


def rows_for(org: str, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "org": org, "note": HOSTILE[i % len(HOSTILE)]} for i in range(n)]


def paged(rows: list[dict[str, Any]], size: int) -> Any:
    """A page function over `rows`: the cursor is the next index."""
    calls: list[JsonValue] = []

    def pages(input: Any, cursor: JsonValue) -> tuple[list[dict[str, Any]], JsonValue]:
        calls.append(cursor)
        at = 0 if cursor is None else int(str(cursor))
        nxt = at + size
        return rows[at:nxt], (nxt if nxt < len(rows) else None)

    pages.calls = calls  # type: ignore[attr-defined]
    return pages


def declare(tmp_path: Path, **options: Any) -> Any:
    options.setdefault("name", "exp")
    options.setdefault("tenant", lambda i: i["org"])
    options.setdefault("sink", str(tmp_path))
    options.setdefault("retry", FAST)
    return export_rows(registry=JobRegistry(), **options)


def read_back(path: Path, fmt: Any) -> list[dict[str, Any]]:
    data = path.read_bytes()
    page = read_page(lambda o, n: data[o : o + n], Layout(fmt, 1 << 16), 0, 1, 1 << 20)
    assert page.done and page.refusals == []
    return page.rows


async def entry(driver: MemoryDriver, job_id: str) -> SweepRecord:
    run_id = (await driver.job_get_many([job_id]))[job_id].run_id
    (found,) = [e for e in await driver.sweep_list(None, 100) if e.run_id == run_id]
    return found


@pytest.mark.parametrize(
    ("options", "detail"),
    [
        ({}, "query"),
        ({"pages": lambda i, c: ([], None), "query": sa.select(sa.literal(1))}, "query"),
        ({"pages": lambda i, c: ([], None), "page_rows": 0}, "page_rows"),
        ({"pages": lambda i, c: ([], None), "format": "xml"}, "format"),
        ({"pages": lambda i, c: ([], None), "columns": ["a", "a"]}, "columns"),
        ({"pages": lambda i, c: ([], None), "spreadsheet_safe": True}, "spreadsheet_safe"),
        (
            {"pages": lambda i, c: ([], None), "format": "csv", "spreadsheet_safe": 1},
            "spreadsheet_safe",
        ),
        ({"pages": lambda i, c: ([], None), "sink": 7}, "sink"),
        ({"pages": lambda i, c: ([], None), "key": "id"}, "key"),
        (
            {"pages": lambda i, c: ([], None), "tenant": "none", "tenant_column": "org"},
            "tenant_column",
        ),
        ({"query": sa.select(sa.column("id")), "engine": sa.create_engine("sqlite://")}, "key"),
        ({"query": sa.select(sa.column("id")), "key": sa.column("id")}, "engine"),
        (
            {
                "query": sa.select(sa.column("id")),
                "key": sa.column("id"),
                "engine": sa.create_engine("sqlite://"),
            },
            "tenant_column",
        ),
    ],
)
def test_a_bad_declaration_is_refused_naming_its_option(
    tmp_path: Path, options: dict[str, Any], detail: str
) -> None:
    with pytest.raises(ExportDeclarationInvalidError) as caught:
        declare(tmp_path, **options)
    assert caught.value.detail == detail


async def test_a_spreadsheet_safe_csv_shows_formulas_as_text(ujobs: UJobs, tmp_path: Path) -> None:
    cells = ['=HYPERLINK("http://x")', "+1", "-2", "@SUM(A1)", "\tx", "\rx", "a=b", "", "ok"]
    rows = [{"id": i, "org": "acme", "note": c, "n": -i} for i, c in enumerate(cells)]
    plain = declare(tmp_path, name="plain", pages=paged(rows, 100), format="csv")
    safe = declare(
        tmp_path, name="safe", pages=paged(rows, 100), format="csv", spreadsheet_safe=True
    )
    await ujobs.client.enqueue(plain, {"org": "acme", "prefix": "plain"})
    await ujobs.client.enqueue(safe, {"org": "acme", "prefix": "safe"})
    outs = await ujobs.drain([plain, safe])
    assert [o.outcome for o in outs] == [Outcome.COMPLETED] * 2, [o.error for o in outs]
    got = read_back(tmp_path / "acme" / "plain" / "part-000000.csv", "csv")
    assert [r["note"] for r in got] == cells  # by default, what is written reads back as is
    got = read_back(tmp_path / "acme" / "safe" / "part-000000.csv", "csv")
    assert [r["note"] for r in got] == ["'" + c for c in cells[:6]] + cells[6:]
    # Numbers stay numbers, a negative one included: only text can be a formula.
    assert [r["n"] for r in got] == [str(-i) for i in range(len(cells))]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
async def test_one_object_per_page_named_by_its_index(
    ujobs: UJobs, tmp_path: Path, fmt: str
) -> None:
    rows = rows_for("acme", 10)
    tenants: list[str | None] = []
    pages = paged(rows, 4)

    def scoped(input: Any, cursor: JsonValue) -> Any:
        tenants.append(current_tenant())
        return pages(input, cursor)

    h = declare(tmp_path, pages=scoped, format=fmt, tenant_column="org")
    done = await ujobs.client.enqueue(h, {"org": "acme", "prefix": "daily/2027-01-02"})
    (out,) = await ujobs.drain([h])
    assert out.outcome is Outcome.COMPLETED, out.error
    folder = tmp_path / "acme" / "daily" / "2027-01-02"
    assert out.result == {"pages": 3, "rows": 10, "location": str(folder)}
    names = sorted(os.listdir(folder))
    assert names == [f"part-{i:06d}.{fmt}" for i in range(3)]  # nothing else: no temporary
    got = [r for name in names for r in read_back(folder / name, fmt)]
    if fmt == "csv":
        rows = [{k: str(v) for k, v in r.items()} for r in rows]
    assert got == rows
    assert set(tenants) == {"acme"}
    ledger = await entry(ujobs.driver, done.id)
    assert (ledger.kind, ledger.status, ledger.scope) == ("export", "completed", "acme")
    assert (ledger.batches, ledger.rows, ledger.cursor_json) == (3, 10, None)
    # The same input again is blocked; another prefix is another export.
    again = await ujobs.client.enqueue(h, {"org": "acme", "prefix": "daily/2027-01-02"})
    other = await ujobs.client.enqueue(h, {"org": "acme", "prefix": "daily/2027-01-03"})
    outs = {o.job_id: o for o in await ujobs.drain([h])}
    blocked = outs[again.id].error
    assert blocked is not None and blocked.code == "X_EXPORT_COMPLETED"
    assert outs[other.id].outcome is Outcome.COMPLETED


class LosesOneRecord(MemoryDriver):
    """The record of step `name` does not land the first time (the claim looked lost): the run
    fails after the page's object was written, as a crash right after the write would."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.lost = 0

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        if not self.lost and checkpoint.step.name == self.name:
            self.lost += 1
            return False
        return await super()._sweep_checkpoint(checkpoint)


async def work(driver: MemoryDriver, h: Any, input: Any) -> str:
    done = await Jobs(driver).enqueue(h, input)
    worker = Worker(driver, [h], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()
    try:

        async def finished() -> bool:
            row = (await driver.job_get_many([done.id]))[done.id]
            return row.state in (JobState.COMPLETED, JobState.DEAD)

        await until(finished, within=15)
    finally:
        await worker.stop()
    return done.id


async def test_a_page_re_run_after_a_crash_overwrites_its_object(tmp_path: Path) -> None:
    versions: dict[JsonValue, int] = {}

    def pages(input: Any, cursor: JsonValue) -> tuple[list[dict[str, Any]], JsonValue]:
        # Each try of a page reads what the table holds then: page 1 changed in between.
        versions[cursor] = versions.get(cursor, 0) + 1
        at = 0 if cursor is None else int(str(cursor))
        rows = [{"id": i, "try": versions[cursor]} for i in range(at, at + 2)]
        return rows, (at + 2 if at < 4 else None)

    driver = LosesOneRecord("page:1")
    h = declare(tmp_path, pages=pages, tenant="none")
    job_id = await work(driver, h, {"prefix": "x"})
    row = (await driver.job_get_many([job_id]))[job_id]
    assert (row.state, row.attempt, driver.lost) == (JobState.COMPLETED, 2, 1)
    assert versions == {None: 1, 2: 2, 4: 1}  # page 0 replayed; page 1 ran twice
    names = sorted(os.listdir(tmp_path / "x"))
    assert names == ["part-000000.jsonl", "part-000001.jsonl", "part-000002.jsonl"]
    assert read_back(tmp_path / "x" / "part-000001.jsonl", "jsonl") == [
        {"id": 2, "try": 2},
        {"id": 3, "try": 2},
    ]
    (ledger,) = await driver.sweep_list("exp", 5)
    assert (ledger.rows, ledger.batches, ledger.status) == (6, 3, "completed")


async def test_a_page_found_empty_on_its_re_run_removes_the_object_it_wrote(
    tmp_path: Path,
) -> None:
    tries: list[JsonValue] = []

    def pages(input: Any, cursor: JsonValue) -> tuple[list[dict[str, Any]], JsonValue]:
        tries.append(cursor)
        if cursor is None:
            return [{"id": 1}], 1
        return ([{"id": 2}] if tries.count(1) == 1 else []), None

    driver = LosesOneRecord("page:1")
    h = declare(tmp_path, pages=pages, tenant="none")
    await work(driver, h, {"prefix": "x"})
    assert os.listdir(tmp_path / "x") == ["part-000000.jsonl"]
    (ledger,) = await driver.sweep_list("exp", 5)
    assert (ledger.rows, ledger.batches) == (1, 2)


def orders_table(engine: sa.Engine) -> sa.Table:
    md = sa.MetaData()
    t = sa.Table(
        "orders",
        md,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("org", sa.String(40), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
    )
    md.create_all(engine)
    rows = [{"id": i, "org": ("acme", "globex")[i % 2], "note": HOSTILE[i % 7]} for i in range(20)]
    with engine.begin() as conn:
        conn.execute(t.insert(), rows)
    return t


async def test_a_query_is_paged_by_its_key_and_scoped_to_the_tenant(
    ujobs: UJobs, tmp_path: Path
) -> None:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    t = orders_table(engine)
    h = declare(
        tmp_path,
        sink=str(tmp_path / "out"),
        # The query's own order and a filter from the input: the keyset replaces the order.
        query=lambda i: sa.select(t).where(t.c.id >= i["from"]).order_by(t.c.note.desc()),
        key=t.c.id,
        tenant_column=t.c.org,
        engine=engine,
        page_rows=3,
    )
    done = await ujobs.client.enqueue(h, {"org": "acme", "prefix": "p", "from": 4})
    (out,) = await ujobs.drain([h])
    assert out.outcome is Outcome.COMPLETED, out.error
    folder = tmp_path / "out" / "acme" / "p"
    got = [r for n in sorted(os.listdir(folder)) for r in read_back(folder / n, "jsonl")]
    assert [r["id"] for r in got] == [4, 6, 8, 10, 12, 14, 16, 18]
    assert {r["org"] for r in got} == {"acme"}
    assert out.result == {"pages": 3, "rows": 8, "location": str(folder)}
    ledger = await entry(ujobs.driver, done.id)
    assert (ledger.batches, ledger.rows, json.loads(ledger.cursor_json or "0")) == (3, 8, 18)
    # A select that leaves the tenant column out is scoped all the same.
    narrow = declare(
        tmp_path,
        name="narrow",
        sink=str(tmp_path / "out"),
        query=sa.select(t.c.id, t.c.note),
        key=t.c.id,
        tenant_column=t.c.org,
        engine=engine,
        page_rows=100,
        format="csv",
    )
    await ujobs.client.enqueue(narrow, {"org": "globex", "prefix": "q"})
    (out,) = await ujobs.drain([narrow])
    assert out.outcome is Outcome.COMPLETED, out.error
    got = read_back(tmp_path / "out" / "globex" / "q" / "part-000000.csv", "csv")
    assert [r["id"] for r in got] == [str(i) for i in range(20) if i % 2]
    assert set(got[0]) == {"id", "note"}
    engine.dispose()


async def test_a_run_writes_and_reads_only_its_tenants(ujobs: UJobs, tmp_path: Path) -> None:
    (tmp_path / "globex").mkdir()
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "link").symlink_to(tmp_path / "globex")
    leaky = declare(
        tmp_path,
        name="leaky",
        pages=lambda i, c: ([{"id": 1, "org": "acme"}, {"id": 2, "org": "globex"}], None),
        tenant_column="org",
    )
    fine = declare(tmp_path, name="fine", pages=lambda i, c: ([{"id": 1}], None))
    for bad in ("../globex", "/etc", "a//b", "a/./b", "a\\b", "memory://x"):
        with pytest.raises(ExportScopeInvalidError):
            await ujobs.client.enqueue(fine, {"org": "acme", "prefix": bad})
    leak = await ujobs.client.enqueue(leaky, {"org": "acme", "prefix": "p"})
    link = await ujobs.client.enqueue(fine, {"org": "acme", "prefix": "link/p"})
    dots = await ujobs.client.enqueue(fine, {"org": "..", "prefix": "globex"})
    with acting_for("acme"), pytest.raises(ExportScopeInvalidError):
        await ujobs.client.enqueue(fine, {"org": "globex", "prefix": "p"})
    forged = await ujobs.client.enqueue(fine, {"org": "globex", "prefix": "p"}, tenant_id="acme")
    outs = {o.job_id: o for o in await ujobs.drain([leaky, fine])}
    for job_id in (leak.id, link.id, dots.id, forged.id):
        error = outs[job_id].error
        assert outs[job_id].outcome is Outcome.DEAD_LETTERED and error is not None
        assert error.code == "X_EXPORT_SCOPE_INVALID", error
    assert os.listdir(tmp_path / "globex") == []
    assert not (tmp_path / "acme" / "p").exists()  # the leaking page wrote nothing
    ledger = await entry(ujobs.driver, leak.id)
    assert (ledger.status, ledger.error) == ("failed", "X_EXPORT_SCOPE_INVALID")


async def test_a_value_no_file_should_hold_fails_the_page_naming_no_value(
    ujobs: UJobs, tmp_path: Path
) -> None:
    for i, value in enumerate(["nul \x00 here", "lone \ud83d here", b"bytes"]):
        h = declare(tmp_path, name=f"bad{i}", pages=lambda i, c, v=value: ([{"v": v}], None))
        await ujobs.client.enqueue(h, {"org": "acme", "prefix": "p"})
        (out,) = await ujobs.drain([h])
        assert out.outcome is Outcome.DEAD_LETTERED and out.error is not None
        assert out.error.code == "X_EXPORT_PAGE_INVALID" and "here" not in out.error.message
    assert not (tmp_path / "acme" / "p").exists()


async def test_an_fsspec_sink(ujobs: UJobs, tmp_path: Path) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://exports-{tmp_path.name}"
    try:
        h = declare(tmp_path, sink=root, pages=paged(rows_for("acme", 3), 2), format="csv")
        await ujobs.client.enqueue(h, {"org": "acme", "prefix": "p"})
        (out,) = await ujobs.drain([h])
        assert out.outcome is Outcome.COMPLETED and out.result["location"] == f"{root}/acme/p"
        names = sorted(p.rsplit("/", 1)[1] for p in fs.ls(f"{root}/acme/p", detail=False))
        assert names == ["part-000000.csv", "part-000001.csv"]
        data = fs.cat_file(f"{root}/acme/p/part-000000.csv")
        assert data.startswith(b"id,org,note\r\n0,acme,")
    finally:
        fs.rm(root, recursive=True)
