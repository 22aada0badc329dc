"""`import_rows()`: JSON Lines or CSV read page by page into `handle`, each page one durable
step checkpointed at the byte offset of the next record.

A run of the job reads the source its input names (`{"source": "orders.csv"}`, inside the
tenant's root: `jobs_core.factories.rows.seams`). Page N is step `page:N`: it reads from the
offset page N-1 recorded (0 for the first), at most `page_bytes` and always at least one whole
record, hands the page's good rows to `handle` (at least once: a crash before the step's record
lands reads and hands the same page again), and records where the next page starts, its counts
and its refused records (line, field, code; never the value). Nothing else crosses from one
page to the next: a resumed run starts exactly at the last recorded offset, so no page is
skipped and none is counted twice. The run's ledger entry (kind `import`) moves once per page.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Unpack

from jobs_core.context import JobContext
from jobs_core.driver import name_refusal
from jobs_core.errors import (
    ImportCompletedError,
    ImportDeclarationInvalidError,
    ImportScopeInvalidError,
    ImportSourceInvalidError,
)
from jobs_core.factories.rows.common import (
    JobOptions,
    call_for,
    close_failed,
    input_key,
    open_ledger,
    page_step,
    recorded,
    recorded_int,
    refuse_other_enqueuer,
    whole,
)
from jobs_core.factories.rows.formats import FORMATS, Format, Layout, Page, Row, read_page
from jobs_core.factories.rows.seams import RootSpec, check_root, open_source, tenant_root
from jobs_core.job import JobHandle, TenantSpec, job
from jobs_core.jsonform import JsonValue, loads

#: `page_bytes` when the declaration names none: 1 MiB.
DEFAULT_PAGE_BYTES: Final = 1_048_576
#: `max_record_bytes` when the declaration names none: 64 KiB.
DEFAULT_MAX_RECORD_BYTES: Final = 65_536
#: The most bytes a page may read (and so the longest record).
MAX_PAGE_BYTES: Final = 256 * 1_048_576
#: Refused records a page's step keeps for the report (all are counted).
DEFAULT_REPORT_PER_PAGE: Final = 100
MAX_REPORT_PER_PAGE: Final = 1_000

RowsHandler = Callable[[list[Row]], Awaitable[Any]] | Callable[[list[Row]], Any]


@dataclass(frozen=True, slots=True)
class _Import:
    name: str
    handle: RowsHandler
    layout: Layout
    page_bytes: int
    root: RootSpec
    report_per_page: int

    def declaration(self) -> JsonValue:
        """What makes two runs import the same thing (page_bytes only paces the reading)."""
        return {
            "kind": "import",
            "format": self.layout.format,
            "max_record_bytes": self.layout.max_record_bytes,
            "delimiter": self.layout.delimiter.decode(),
            "tenant_field": self.layout.tenant_field,
        }


def import_rows(
    *,
    name: str,
    tenant: TenantSpec,
    format: Format,
    handle: RowsHandler,
    root: RootSpec,
    page_bytes: int = DEFAULT_PAGE_BYTES,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    delimiter: str = ",",
    tenant_field: str | None = None,
    report_per_page: int = DEFAULT_REPORT_PER_PAGE,
    **options: Unpack[JobOptions],
) -> JobHandle:
    """Declare an import: a job whose input names its source (`{"source": <path or URL>}`),
    read page by page into `handle(rows)` (sync or async, called acting for the run's tenant,
    at least once per page, never with an empty list).

    `format`: `"jsonl"` (each row a JSON object) or `"csv"` (a header row, then rows of strings
    by column name). `root`: where sources may be — a directory or URL (a tenant's run reads
    under `<root>/<tenant>`), or a function of the tenant answering one; a source outside it is
    `X_IMPORT_SCOPE_INVALID`. `page_bytes`: what one page reads at most (one whole record at
    least); smaller than `max_record_bytes`, the longest record allowed, it is refused here.
    A longer record fails the run for good (`X_IMPORT_RECORD_TOO_LARGE`, naming its line). Any
    other bad record is left out of the rows and reported (`import_report`). `tenant_field`: a
    field each row must hold with the run's tenant as its value (others are refused, `tenant`).
    `options` are `job()`'s; the idempotency key defaults to one live run per input.

    The run answers `{"pages", "rows", "errors", "bytes"}`. A completed run of the same
    declaration and input (in this environment, for this tenant) blocks another:
    `X_IMPORT_COMPLETED`. Needs a driver with the `steps` and `sweeps` families.
    """
    if format not in FORMATS:
        raise ImportDeclarationInvalidError(f"must be one of {', '.join(FORMATS)}", detail="format")
    if not callable(handle):
        raise ImportDeclarationInvalidError(
            "handle is a function of a list of rows", detail="handle"
        )
    check_root(root, "root", ImportDeclarationInvalidError)
    record_max = whole(
        max_record_bytes, "max_record_bytes", 1, MAX_PAGE_BYTES, ImportDeclarationInvalidError
    )
    page_max = whole(page_bytes, "page_bytes", 1, MAX_PAGE_BYTES, ImportDeclarationInvalidError)
    if page_max < record_max:
        raise ImportDeclarationInvalidError(
            f"page_bytes ({page_max}) is smaller than max_record_bytes ({record_max}): a page "
            "must hold the longest record",
            detail="page_bytes",
        )
    if (
        not isinstance(delimiter, str)
        or len(delimiter) != 1
        or not delimiter.isascii()
        or delimiter in '"\r\n'
    ):
        raise ImportDeclarationInvalidError(
            "one ASCII character, not a quote or a line ending", detail="delimiter"
        )
    if tenant_field is not None:
        if tenant == "none":
            raise ImportDeclarationInvalidError(
                "a tenant_field needs a tenant to compare with (tenant is 'none')",
                detail="tenant_field",
            )
        why = name_refusal(tenant_field)
        if why is not None:
            raise ImportDeclarationInvalidError(f"a field name {why}", detail="tenant_field")
    spec = _Import(
        name=name,
        handle=handle,
        layout=Layout(format, record_max, delimiter.encode(), tenant_field),
        page_bytes=page_max,
        root=root,
        report_per_page=whole(
            report_per_page,
            "report_per_page",
            0,
            MAX_REPORT_PER_PAGE,
            ImportDeclarationInvalidError,
        ),
    )

    async def body(input: Any, ctx: JobContext) -> Any:
        return await _run(spec, input, ctx)

    options.setdefault(
        "idempotency_key", input_key("import", tenant, source_of, ImportScopeInvalidError)
    )
    return job(body, name=name, tenant=tenant, **options)


def source_of(input: object) -> str:
    """The source an import's input names; `X_IMPORT_SOURCE_INVALID` for any other input."""
    source = input.get("source") if isinstance(input, dict) else None
    if not isinstance(source, str) or not source:
        raise ImportSourceInvalidError(
            'the input is {"source": <path or URL>, ...}', detail="source"
        )
    return source


async def _run(spec: _Import, input: Any, ctx: JobContext) -> JsonValue:
    source_name = source_of(input)
    refuse_other_enqueuer(ctx, ImportScopeInvalidError)
    ctx.step.driver.require("steps", "sweeps", what="import_rows")
    ledger, done = await open_ledger(
        ctx,
        name=spec.name,
        kind="import",
        declaration=spec.declaration(),
        input=input,
        blocked=ImportCompletedError,
    )
    if done is not None:
        last = loads(done.cursor_json) if done.cursor_json is not None else None
        offset = recorded_int(last, "offset") if last is not None else 0
        return {"pages": done.batches, "rows": done.rows, "errors": done.errors, "bytes": offset}
    try:
        source = open_source(
            tenant_root(spec.root, ctx.tenant, ImportScopeInvalidError), source_name
        )
        offset, line = 0, 1
        pages = rows = errors = 0
        while True:
            out = await page_step(
                ctx,
                ledger,
                pages,
                _page_step(spec, source.read, offset, line, ctx.tenant),
                _page_counts,
            )
            page = _PageRecord.of(out)
            pages += 1
            rows += page.rows
            errors += page.errors
            offset, line = page.next_offset, page.next_line
            if page.done:
                break
        await ledger.finish()
    except Exception as exc:
        await close_failed(ledger, ctx, exc)
        raise
    return {"pages": pages, "rows": rows, "errors": errors, "bytes": offset}


def _page_step(
    spec: _Import,
    read: Callable[[int, int], bytes],
    offset: int,
    line: int,
    tenant: str | None,
) -> Callable[[], Awaitable[JsonValue]]:
    async def step() -> JsonValue:
        page: Page = await asyncio.to_thread(
            read_page, read, spec.layout, offset, line, spec.page_bytes, tenant
        )
        if page.rows:
            await call_for(tenant, spec.handle, page.rows)
        return {
            "next_offset": page.next_offset,
            "next_line": page.next_line,
            "rows": len(page.rows),
            "errors": len(page.refusals),
            "done": page.done,
            "report": [r.as_json() for r in page.refusals[: spec.report_per_page]],
        }

    return step


def _page_counts(output: JsonValue) -> tuple[int, int, JsonValue]:
    """A page's advance, read off its step's output: rows, refused rows, where the next starts."""
    page = _PageRecord.of(output)
    return page.rows, page.errors, {"offset": page.next_offset, "line": page.next_line}


@dataclass(frozen=True, slots=True)
class _PageRecord:
    """A page step's recorded output, read back."""

    next_offset: int
    next_line: int
    rows: int
    errors: int
    done: bool

    @staticmethod
    def of(value: JsonValue) -> _PageRecord:
        return _PageRecord(
            recorded_int(value, "next_offset"),
            recorded_int(value, "next_line"),
            recorded_int(value, "rows"),
            recorded_int(value, "errors"),
            recorded(value, "done") is True,
        )
