"""`import_rows()` on the memory driver, through the real worker (the `ujobs` harness): pages
checkpointed at byte offsets, a crash mid-import resumed at the last checkpoint with no page
counted twice and none skipped, the ledger, the error report that never holds a refused value,
the tenant's root, hostile bytes; and the byte-level page split against a whole-file read."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs_core.errors import (
    DriverUnavailableError,
    ImportDeclarationInvalidError,
    ImportRecordTooLargeError,
    ImportScopeInvalidError,
    ImportSourceInvalidError,
    JobsError,
)
from jobs_core.facade import Jobs
from jobs_core.factories.rows import import_report, import_rows
from jobs_core.factories.rows.formats import Layout, Page, Refusal, read_page, split_fields
from jobs_core.job import JobRegistry
from jobs_core.records import SweepCheckpoint, SweepFinish, SweepRecord
from jobs_core.retry import Retry
from jobs_core.states import JobState, Outcome
from jobs_core.tenant import acting_for, current_tenant
from jobs_core.testing import UJobs
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver
from tests.core.support import until

FAST = Retry(attempts=3, base_ms=1, cap_ms=1)
#: A value every hostile record carries: it must never reach the report, the ledger or a log.
SECRET = "s3cr3t-<b>mark</b>"


def pages_of(data: bytes, layout: Layout, page_bytes: int, tenant: str | None = None) -> list[Page]:
    """Every page of `data` read as the import reads it, each from the last one's offset."""
    read = lambda offset, n: data[offset : offset + n]  # noqa: E731
    out: list[Page] = []
    offset, line = 0, 1
    while True:
        page = read_page(read, layout, offset, line, page_bytes, tenant)
        out.append(page)
        if page.done:
            return out
        assert page.next_offset > offset, "a page must move forward"
        offset, line = page.next_offset, page.next_line


def flat(pages: list[Page]) -> tuple[list[Any], list[Refusal], int]:
    return (
        [r for p in pages for r in p.rows],
        [r for p in pages for r in p.refusals],
        pages[-1].next_offset,
    )


def whole_or_error(data: bytes, layout: Layout, page_bytes: int) -> Any:
    try:
        return flat(pages_of(data, layout, page_bytes))
    except JobsError as exc:  # too large, or a CSV header no record can be read under
        return exc.code, exc.detail


# -- the byte-level split: any page size reads exactly the whole file's records ------------------

#: Bytes that make record boundaries hard: quotes, delimiters, CR/LF, braces, a BOM's bytes,
#: invalid UTF-8, a NUL, a surrogate escape, non-ASCII text.
PIECES = [b"a", b",", b'"', b'""', b"\n", b"\r\n", b"\r", b"{", b"}", b'{"k":"v"}', b"\x00"]
PIECES += [b"\xff", b"\xc3\xa9", b"\\ud800", b"1", b":", b" ", b"\xef\xbb\xbf", b"[1]", b"<i>"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=60),
    fmt=st.sampled_from(["jsonl", "csv"]),
    max_record=st.integers(4, 40),
    extra=st.integers(0, 60),
)
def test_any_page_size_reads_the_records_of_a_whole_file_read(
    pieces: list[bytes], fmt: Any, max_record: int, extra: int
) -> None:
    data = b"".join(pieces)
    layout = Layout(fmt, max_record)
    whole = whole_or_error(data, layout, 1 << 20)
    assert whole_or_error(data, layout, max_record + extra) == whole


CELL = st.text(st.sampled_from([*'ab,"\n\r é<>&;\t\\', "\u2028", "😀"]), max_size=8)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.fixed_dictionaries({"id": CELL, "note": CELL}), max_size=12),
    page_bytes=st.integers(48, 300),
    crlf=st.booleans(),
    bom=st.booleans(),
)
def test_rows_written_by_the_standard_writers_are_read_back_exactly(
    rows: list[dict[str, str]], page_bytes: int, crlf: bool, bom: bool
) -> None:
    out = io.StringIO()
    # With LF endings the writer leaves a cell's trailing CR unquoted, which no reader can
    # tell from a CRLF: those files quote every cell.
    quoting = csv.QUOTE_MINIMAL if crlf else csv.QUOTE_ALL
    ending = "\r\n" if crlf else "\n"
    writer = csv.DictWriter(out, ["id", "note"], lineterminator=ending, quoting=quoting)
    writer.writeheader()
    writer.writerows(rows)
    head = b"\xef\xbb\xbf" if bom else b""
    data = head + out.getvalue().encode()
    got, refused, end = flat(pages_of(data, Layout("csv", 48), page_bytes))
    # A row of two empty cells is written as a bare "," line; a blank line is no record.
    assert got == rows and refused == [] and end == len(data)
    lines = "".join(json.dumps(r) + ("\r\n" if crlf else "\n") for r in rows)
    data = head + lines.encode()
    got, refused, end = flat(pages_of(data, Layout("jsonl", 120), max(page_bytes, 120)))
    assert got == rows and refused == [] and end == len(data)


def strict_fields(record: bytes) -> list[bytes] | None:
    """RFC 4180's fields of one record, byte by byte: the reference `split_fields` must match."""
    fields: list[bytes] = []
    field = b""
    state = "start"  # start | plain | quoted | closed (a quote inside a quoted field)
    for b in record:
        c = bytes([b])
        if state == "quoted":
            state, field = ("closed", field) if c == b'"' else ("quoted", field + c)
        elif state == "closed":
            if c == b'"':
                state, field = "quoted", field + c
            elif c == b",":
                fields.append(field)
                state, field = "start", b""
            else:
                return None
        elif c == b",":
            fields.append(field)
            state, field = "start", b""
        elif c == b'"':
            if state != "start":
                return None
            state = "quoted"
        else:
            state, field = "plain", field + c
    if state == "quoted":
        return None
    return [*fields, field]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b'"', b",", b"a", b'""', b"\n"]), max_size=14))
def test_fields_are_split_as_rfc_4180_says(pieces: list[bytes]) -> None:
    record = b"".join(pieces)
    assert split_fields(record) == strict_fields(record)


def test_a_page_boundary_inside_a_quoted_field_moves_to_the_record_start() -> None:
    data = b'id,text\n1,"one\ntwo, ""three""\nfour"\n2,five'
    for page_bytes in range(30, len(data) + 2):
        got, refused, _ = flat(pages_of(data, Layout("csv", 30), page_bytes))
        assert got == [{"id": "1", "text": 'one\ntwo, "three"\nfour'}, {"id": "2", "text": "five"}]
        assert refused == []


def test_hostile_records_are_refused_by_line_field_and_code_never_by_value() -> None:
    s = SECRET
    lines = [
        json.dumps({"id": 1, "ok": s}),
        "{" * 120 + "}" * 120,  # deeper than any store holds
        '{"id": 3, "v": "\\u0000' + s + '"}',
        '{"id": 4, "v": "\\ud83d' + s + '"}',  # a lone surrogate once decoded
        '{"id": 5, "v": 1e999}',
        '{"id": 6, "v": NaN}',
        "[1, 2]",
        '{"id": 8, "v": "' + s + '"',  # not JSON
        "",  # blank: no record
        '{"id": 10, "v": "😀 <script>x</script>"}',
    ]
    data = ("\r\n".join(lines)).encode() + b"\n" + b'{"id": 11, "v": "\xff' + s.encode() + b'"}'
    got, refused, _ = flat(pages_of(data, Layout("jsonl", 400), 400))
    assert got == [{"id": 1, "ok": s}, {"id": 10, "v": "😀 <script>x</script>"}]
    assert refused == [
        Refusal(2, None, "depth"),
        Refusal(3, "v", "nul"),
        Refusal(4, "v", "surrogate"),
        Refusal(5, None, "number"),
        Refusal(6, None, "number"),
        Refusal(7, None, "not_object"),
        Refusal(8, None, "json"),
        Refusal(11, None, "utf8"),
    ]
    raw = b'k,v\n1,"a\x00b"\n2,"x""y"z\n3,a,b\n4,\xff\n5,"never closed\n'
    got, refused, _ = flat(pages_of(raw, Layout("csv", 64), 64))
    assert got == []
    assert refused == [
        Refusal(2, "v", "nul"),
        Refusal(3, None, "quote"),
        Refusal(4, None, "field_count"),
        Refusal(5, "v", "utf8"),
        Refusal(6, None, "quote"),
    ]


def test_empty_files_ends_without_newlines_and_boms() -> None:
    for fmt in ("jsonl", "csv"):
        (page,) = pages_of(b"", Layout(fmt, 16), 16)
        assert (page.rows, page.refusals, page.done) == ([], [], True)
        (page,) = pages_of(b"\xef\xbb\xbf", Layout(fmt, 16), 16)
        assert (page.rows, page.refusals, page.done) == ([], [], True)
    assert flat(pages_of(b"\xef\xbb\xbfa\r\n1", Layout("csv", 16), 16))[0] == [{"a": "1"}]
    assert flat(pages_of(b'\xef\xbb\xbf{"a":1}', Layout("jsonl", 16), 16))[0] == [{"a": 1}]


def test_a_record_past_the_limit_fails_when_it_opens_a_page() -> None:
    data = b'{"a":1}\n{"a":"' + b"x" * 30 + b'"}\n{"a":3}\n'
    pages: list[Page] = []
    read = lambda offset, n: data[offset : offset + n]  # noqa: E731
    first = read_page(read, Layout("jsonl", 16), 0, 1, 64)
    pages.append(first)
    # The page ends before the long record; the next page, checkpointed at it, refuses it.
    assert first.rows == [{"a": 1}] and first.next_offset == 8 and not first.done
    with pytest.raises(ImportRecordTooLargeError) as caught:
        read_page(read, Layout("jsonl", 16), first.next_offset, first.next_line, 64)
    assert caught.value.detail == "line 2"


# -- declarations ---------------------------------------------------------------------------------


def declare(tmp_path: Path, **options: Any) -> Any:
    options.setdefault("name", "imp")
    options.setdefault("tenant", lambda i: i["org"])
    options.setdefault("format", "jsonl")
    options.setdefault("handle", lambda rows: None)
    options.setdefault("root", str(tmp_path))
    options.setdefault("retry", FAST)
    return import_rows(registry=JobRegistry(), **options)


@pytest.mark.parametrize(
    ("options", "detail"),
    [
        ({"page_bytes": 100, "max_record_bytes": 101}, "page_bytes"),
        ({"page_bytes": 0}, "page_bytes"),
        ({"max_record_bytes": True}, "max_record_bytes"),
        ({"format": "xml"}, "format"),
        ({"handle": "nope"}, "handle"),
        ({"root": 3}, "root"),
        ({"delimiter": '"'}, "delimiter"),
        ({"tenant": "none", "tenant_field": "org"}, "tenant_field"),
        ({"report_per_page": 5_000}, "report_per_page"),
    ],
)
def test_a_bad_declaration_is_refused_naming_its_option(
    tmp_path: Path, options: dict[str, Any], detail: str
) -> None:
    with pytest.raises(ImportDeclarationInvalidError) as caught:
        declare(tmp_path, **options)
    assert caught.value.code == "X_IMPORT_DECLARATION_INVALID" and caught.value.detail == detail


# -- runs through the worker ----------------------------------------------------------------------


async def entry(driver: MemoryDriver, run_id: str) -> SweepRecord:
    (found,) = [e for e in await driver.sweep_list(None, 100) if e.run_id == run_id]
    return found


async def run_id_of(driver: MemoryDriver, job_id: str) -> str:
    return (await driver.job_get_many([job_id]))[job_id].run_id


def record(i: int, org: str = "acme") -> bytes:
    """One JSON Lines record of `REC` bytes (the padding keeps every record the same length)."""
    return json.dumps({"n": i, "org": org, "pad": "x" * (20 - len(str(i)))}).encode() + b"\n"


REC = len(record(0))


def jsonl(n: int, org: str = "acme") -> bytes:
    return b"".join(record(i, org) for i in range(n))


async def test_an_import_reads_every_page_once_and_ledgers_it(ujobs: UJobs, tmp_path: Path) -> None:
    seen: list[tuple[str | None, list[int]]] = []
    (tmp_path / "acme").mkdir()
    data = jsonl(20) + b"{bad " + SECRET.encode() + b"\n"
    (tmp_path / "acme" / "a.jsonl").write_bytes(data)
    h = declare(
        tmp_path,
        handle=lambda rows: seen.append((current_tenant(), [r["n"] for r in rows])),
        page_bytes=3 * REC + 10,
        max_record_bytes=100,
    )
    done = await ujobs.client.enqueue(h, {"org": "acme", "source": "a.jsonl"})
    (out,) = await ujobs.drain([h])
    assert out.outcome is Outcome.COMPLETED, out.error
    assert [rows for _, rows in seen] == [[*range(i, min(i + 3, 20))] for i in range(0, 20, 3)]
    assert {t for t, _ in seen} == {"acme"}  # the handle acts for the run's tenant
    assert out.result == {"pages": 7, "rows": 20, "errors": 1, "bytes": len(data)}
    run_id = await run_id_of(ujobs.driver, done.id)
    ledger = await entry(ujobs.driver, run_id)
    assert (ledger.kind, ledger.status, ledger.scope) == ("import", "completed", "acme")
    assert (ledger.batches, ledger.rows, ledger.errors) == (7, 20, 1)
    assert json.loads(ledger.cursor_json or "null") == {"offset": len(data), "line": 22}
    assert await import_report(ujobs.driver, run_id, 10) == [
        {"line": 21, "field": None, "code": "json"}
    ]
    steps = await ujobs.driver.step_list(run_id)
    assert [s.name for s in steps] == [f"page:{i}" for i in range(7)]
    assert [s.output_json for s in steps if "s3cr3t" in s.output_json] == []
    # The same input again: the completed run blocks it; another input is another import.
    again = await ujobs.client.enqueue(h, {"org": "acme", "source": "a.jsonl"})
    other = await ujobs.client.enqueue(h, {"org": "acme", "source": "./a.jsonl"})
    outs = {o.job_id: o for o in await ujobs.drain([h])}
    blocked = outs[again.id].error
    assert outs[again.id].outcome is Outcome.DEAD_LETTERED and blocked is not None
    assert blocked.code == "X_IMPORT_COMPLETED" and run_id in blocked.message
    assert outs[other.id].outcome is Outcome.COMPLETED


async def test_a_crash_mid_import_resumes_at_the_last_checkpoint(
    ujobs: UJobs, tmp_path: Path
) -> None:
    handled: list[int] = []

    def handle(rows: list[dict[str, Any]]) -> None:
        handled.extend(r["n"] for r in rows)
        if rows[-1]["n"] == 9 and handled.count(9) == 1:
            raise RuntimeError("the process died after handling this page, before its record")

    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "a.jsonl").write_bytes(jsonl(30))
    h = declare(tmp_path, handle=handle, page_bytes=2 * REC + 10, max_record_bytes=100)
    done = await ujobs.client.enqueue(h, {"org": "acme", "source": "a.jsonl"})
    outs = await ujobs.drain([h], advance=5)
    assert [o.outcome for o in outs] == [Outcome.RETRIED, Outcome.COMPLETED]
    # At least once: the page in flight ([8, 9]) is handed again; none before it is, none skipped.
    assert handled == [*range(10), 8, 9, *range(10, 30)]
    run_id = await run_id_of(ujobs.driver, done.id)
    ledger = await entry(ujobs.driver, run_id)
    assert (ledger.rows, ledger.batches, ledger.status) == (30, 15, "completed")
    assert outs[-1].result == {"pages": 15, "rows": 30, "errors": 0, "bytes": 30 * REC}


class RecordsLikeTheLastVersion(MemoryDriver):
    """Page `batch`'s checkpoint lands once as the previous version wrote a page — its step
    record alone, the count a write of its own after it — and the store goes away before the
    count, and stays away for the write's resend (what a crash between that version's two
    writes left behind; one failure alone is a lost answer, resent in the same attempt)."""

    def __init__(self, batch: int) -> None:
        super().__init__()
        self.batch = batch
        self.lost = False
        self.resent = False

    async def _sweep_checkpoint(self, checkpoint: SweepCheckpoint) -> bool:
        if checkpoint.advance.batch == self.batch and not self.lost:
            self.lost = True
            await self._step_put([checkpoint.step])
            raise DriverUnavailableError("the store went away")
        if checkpoint.advance.batch == self.batch and not self.resent:
            self.resent = True
            raise DriverUnavailableError("the store is still away")
        return await super()._sweep_checkpoint(checkpoint)


async def test_a_page_an_earlier_version_recorded_but_never_counted_is_counted_once_on_replay(
    tmp_path: Path,
) -> None:
    calls: list[int] = []
    (tmp_path / "a.jsonl").write_bytes(jsonl(12))
    h = declare(
        tmp_path,
        tenant="none",
        handle=lambda rows: calls.extend(r["n"] for r in rows),
        page_bytes=REC * 2,
        max_record_bytes=100,
    )
    driver = RecordsLikeTheLastVersion(batch=3)
    done = await Jobs(driver).enqueue(h, {"source": "a.jsonl"})
    worker = Worker(driver, [h], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()
    try:

        async def finished() -> bool:
            row = (await driver.job_get_many([done.id]))[done.id]
            return row.state is JobState.COMPLETED

        await until(finished, within=15)
    finally:
        await worker.stop()
    assert driver.lost and calls == list(range(12))  # the recorded page replays, unhanded
    row = (await driver.job_get_many([done.id]))[done.id]
    assert row.attempt == 2
    ledger = await entry(driver, row.run_id)
    assert (ledger.rows, ledger.batches, ledger.status) == (12, 6, "completed")


class LosesTheEndsAnswer(MemoryDriver):
    """The ledger's end lands, but its answer is lost, and the store is away for its resend too
    (the run crashed right after it; one lost answer alone is resent in the same attempt)."""

    lost = False
    resent = False

    async def _sweep_finish(self, finish: SweepFinish) -> bool:
        if self.lost and not self.resent:
            self.resent = True
            raise DriverUnavailableError("the store is still away")
        landed = await super()._sweep_finish(finish)
        if not self.lost:
            self.lost = True
            raise DriverUnavailableError("the answer was lost")
        return landed


async def test_a_run_that_completed_its_sweep_answers_from_the_ledger_on_replay(
    tmp_path: Path,
) -> None:
    calls: list[int] = []
    (tmp_path / "a.jsonl").write_bytes(jsonl(5))
    h = declare(tmp_path, tenant="none", handle=lambda rows: calls.extend(r["n"] for r in rows))
    driver = LosesTheEndsAnswer()
    done = await Jobs(driver).enqueue(h, {"source": "a.jsonl"})
    worker = Worker(driver, [h], poll_floor=0.001, poll_ceiling=0.01, lease=5.0)
    await worker.start()
    try:

        async def finished() -> bool:
            row = (await driver.job_get_many([done.id]))[done.id]
            return row.state is JobState.COMPLETED

        await until(finished, within=15)
    finally:
        await worker.stop()
    row = (await driver.job_get_many([done.id]))[done.id]
    assert driver.lost and row.attempt == 2 and calls == list(range(5))
    assert json.loads(row.result_json or "null") == {
        "pages": 1,
        "rows": 5,
        "errors": 0,
        "bytes": 5 * REC,
    }


async def test_a_record_too_large_fails_the_import_for_good_at_its_checkpoint(
    ujobs: UJobs, tmp_path: Path
) -> None:
    handled: list[int] = []
    (tmp_path / "acme").mkdir()
    data = jsonl(3) + b'{"n": 99, "v": "' + b"x" * 200 + b'"}\n' + jsonl(2)
    (tmp_path / "acme" / "a.jsonl").write_bytes(data)
    h = declare(
        tmp_path,
        handle=lambda rows: handled.extend(r["n"] for r in rows),
        page_bytes=100,
        max_record_bytes=100,
    )
    done = await ujobs.client.enqueue(h, {"org": "acme", "source": "a.jsonl"})
    (out,) = await ujobs.drain([h])
    assert out.outcome is Outcome.DEAD_LETTERED and out.error is not None
    assert out.error.code == "X_IMPORT_RECORD_TOO_LARGE" and "line 4" in out.error.message
    assert handled == [0, 1, 2]
    ledger = await entry(ujobs.driver, await run_id_of(ujobs.driver, done.id))
    assert (ledger.status, ledger.error, ledger.rows) == ("failed", "X_IMPORT_RECORD_TOO_LARGE", 3)
    assert json.loads(ledger.cursor_json or "null") == {"offset": 3 * REC, "line": 4}


async def test_a_run_reads_only_under_its_tenants_root(ujobs: UJobs, tmp_path: Path) -> None:
    handled: list[Any] = []
    for org in ("acme", "globex"):
        (tmp_path / org).mkdir()
        (tmp_path / org / "a.jsonl").write_bytes(jsonl(2, org))
    (tmp_path / "acme" / "link.jsonl").symlink_to(tmp_path / "globex" / "a.jsonl")
    (tmp_path / "acme" / "mixed.jsonl").write_bytes(jsonl(1, "acme") + jsonl(1, "globex"))
    h = declare(tmp_path, handle=handled.extend, tenant_field="org")
    escapes = [
        "../globex/a.jsonl",
        str(tmp_path / "globex" / "a.jsonl"),
        "link.jsonl",
        "memory://globex/a.jsonl",
        "sub/../../globex/a.jsonl",
    ]
    ids = [(await ujobs.client.enqueue(h, {"org": "acme", "source": s})).id for s in escapes]
    # fsspec's local filesystem resolves as a directory does: its symlinks are followed too.
    as_url = declare(tmp_path, name="as_url", root=f"file://{tmp_path}")
    ids.append((await ujobs.client.enqueue(as_url, {"org": "acme", "source": "link.jsonl"})).id)
    mixed = await ujobs.client.enqueue(h, {"org": "acme", "source": "mixed.jsonl"})
    # A tenant that is not one path segment cannot name a directory under the root.
    dots = await ujobs.client.enqueue(h, {"org": "..", "source": "globex/a.jsonl"})
    # One tenant's code cannot start another tenant's import, nor a cross-tenant one.
    with acting_for("acme"), pytest.raises(ImportScopeInvalidError):
        await ujobs.client.enqueue(h, {"org": "globex", "source": "a.jsonl"})
    every = declare(tmp_path, name="every", tenant="none")
    with acting_for("acme"), pytest.raises(ImportScopeInvalidError):
        await ujobs.client.enqueue(every, {"source": "globex/a.jsonl"})
    # A row whose enqueuer's tenant was given by hand is refused by the run itself.
    forged = await ujobs.client.enqueue(h, {"org": "globex", "source": "a.jsonl"}, tenant_id="acme")
    outs = {o.job_id: o for o in await ujobs.drain([h, as_url])}
    for job_id in [*ids, dots.id, forged.id]:
        error = outs[job_id].error
        assert outs[job_id].outcome is Outcome.DEAD_LETTERED and error is not None
        assert error.code == "X_IMPORT_SCOPE_INVALID", error
    assert outs[mixed.id].outcome is Outcome.COMPLETED
    assert handled == [json.loads(record(0))]
    run_id = await run_id_of(ujobs.driver, mixed.id)
    assert await import_report(ujobs.driver, run_id, 5) == [
        {"line": 2, "field": "org", "code": "tenant"}
    ]


async def test_an_fsspec_url_is_read_when_installed_and_refused_without(
    ujobs: UJobs, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    root = f"memory://imports-{tmp_path.name}"
    fs.pipe_file(f"{root}/acme/a.csv", b'id,v\r\n1,"x\r\ny"\r\n2,z')
    try:
        rows: list[Any] = []
        h = declare(tmp_path, root=root, format="csv", handle=rows.extend)
        await ujobs.client.enqueue(h, {"org": "acme", "source": "a.csv"})
        (out,) = await ujobs.drain([h])
        assert out.outcome is Outcome.COMPLETED
        assert rows == [{"id": "1", "v": "x\r\ny"}, {"id": "2", "v": "z"}]
        monkeypatch.setitem(sys.modules, "fsspec", None)
        monkeypatch.setitem(sys.modules, "fsspec.core", None)
        h2 = declare(tmp_path, name="imp2", root=root, retry=Retry(attempts=1))
        await ujobs.client.enqueue(h2, {"org": "acme", "source": "a.csv"})
        (out,) = await ujobs.drain([h2])
        assert out.error is not None and out.error.code == "X_IMPORT_SOURCE_INVALID"
        assert "ultimat3-jobs[fsspec]" in out.error.message
    finally:
        fs.rm(root, recursive=True)


async def test_an_input_naming_no_source_is_refused_at_enqueue(
    ujobs: UJobs, tmp_path: Path
) -> None:
    h = declare(tmp_path)
    for bad in ({"org": "acme"}, {"org": "acme", "source": ""}, {"org": "acme", "source": 3}):
        with pytest.raises(ImportSourceInvalidError):
            await ujobs.client.enqueue(h, bad)
    assert await ujobs.jobs() == []


async def test_the_report_is_bounded_per_page_and_by_its_limit(
    ujobs: UJobs, tmp_path: Path
) -> None:
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "bad.jsonl").write_bytes(b"[1]\n" * 40)
    h = declare(tmp_path, page_bytes=40, max_record_bytes=40, report_per_page=2)
    done = await ujobs.client.enqueue(h, {"org": "acme", "source": "bad.jsonl"})
    (out,) = await ujobs.drain([h])
    assert out.result == {"pages": 4, "rows": 0, "errors": 40, "bytes": 160}
    run_id = await run_id_of(ujobs.driver, done.id)
    report = await import_report(ujobs.driver, run_id, 100)
    assert [e["line"] for e in report] == [1, 2, 11, 12, 21, 22, 31, 32]
    assert len(await import_report(ujobs.driver, run_id, 3)) == 3
    with pytest.raises(JobsError):
        await import_report(ujobs.driver, run_id, 0)
    assert (await entry(ujobs.driver, run_id)).errors == 40


async def test_an_empty_file_completes_without_calling_the_handle(
    ujobs: UJobs, tmp_path: Path
) -> None:
    calls: list[Any] = []
    (tmp_path / "acme").mkdir()
    (tmp_path / "acme" / "empty.csv").write_bytes(b"")
    (tmp_path / "acme" / "head.csv").write_bytes(b"a,b\r\n")
    h = declare(tmp_path, format="csv", handle=calls.append)
    for name in ("empty.csv", "head.csv"):
        await ujobs.client.enqueue(h, {"org": "acme", "source": name})
    outs = await ujobs.drain([h])
    assert [o.result for o in outs] == [
        {"pages": 1, "rows": 0, "errors": 0, "bytes": 0},
        {"pages": 1, "rows": 0, "errors": 0, "bytes": 5},
    ]
    assert calls == []
