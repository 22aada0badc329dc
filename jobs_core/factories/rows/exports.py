"""`export_rows()`: a query (keyset pages over a key column) or a page function, written as one
object per page, each page one durable step.

A run writes under the tenant's place in the sink (`jobs_core.factories.rows.seams`) at the
prefix its input names (`{"prefix": "daily/2027-01-02"}`): page N is step `page:N` and object
`<prefix>/part-<N, 6 digits>.<format>`. A page reads the rows after the cursor page N-1
recorded, writes its object whole (a temporary name, then a rename: a crash never leaves half
an object under the final name) and records the next cursor. A page replayed after a crash
before its record landed writes the same object again, over the first: re-running a page
overwrites, it never adds. A page with no rows writes no object (and removes one an earlier
try of it wrote). The run's ledger entry (kind `export`) moves once per page.

The query is a SQLAlchemy `select` used as it is: no SQLAlchemy import here (the core stays
free of backend libraries); the factory only calls the statement's own methods (`where`,
`order_by`, `limit`) and the engine's `connect`, sync or async. (`backfill()` pages a select the
same way in `jobs_core.factories.backfill.source.Keyset`; the two are to become one.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Unpack

from jobs_core.context import JobContext
from jobs_core.driver import MAX_SWEEP_CURSOR_BYTES
from jobs_core.errors import (
    ExportCompletedError,
    ExportDeclarationInvalidError,
    ExportPageInvalidError,
    ExportScopeInvalidError,
    ExportSinkInvalidError,
    JobsError,
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
from jobs_core.factories.rows.formats import EXTENSIONS, FORMATS, Format, encode_page, label
from jobs_core.factories.rows.seams import (
    RootSpec,
    Sink,
    check_prefix,
    check_root,
    open_sink,
    tenant_root,
)
from jobs_core.job import JobHandle, TenantSpec, job
from jobs_core.jsonform import JsonValue, dumps, utf8_length

#: Rows per page when the declaration names no `page_rows`.
DEFAULT_PAGE_ROWS: Final = 1_000
MAX_PAGE_ROWS: Final = 100_000

#: `pages(input, cursor) -> (rows, next cursor)`; the next cursor None ends the export.
PagesFn = (
    Callable[[Any, JsonValue], Awaitable[tuple[Iterable[Any], JsonValue]]]
    | Callable[[Any, JsonValue], tuple[Iterable[Any], JsonValue]]
)


@dataclass(frozen=True, slots=True)
class _Query:
    """Keyset pages of a SQLAlchemy select: `WHERE key > cursor ORDER BY key LIMIT n`, scoped
    by `tenant_column = <the run's tenant>` unless the export is cross-tenant."""

    query: Any
    key: Any
    key_name: str
    tenant_column: Any | None
    engine: Any
    page_rows: int

    def statement(self, input: Any, tenant: str | None, cursor: JsonValue) -> Any:
        base = self.query if _is_select(self.query) else self.query(input)
        if not _is_select(base):
            raise ExportPageInvalidError("the query function answered no select", detail="query")
        stmt = base
        if self.tenant_column is not None:
            stmt = stmt.where(self.tenant_column == tenant)
        if cursor is not None:
            stmt = stmt.where(self.key > cursor)
        return stmt.order_by(None).order_by(self.key).limit(self.page_rows)

    async def page(
        self, input: Any, tenant: str | None, cursor: JsonValue
    ) -> tuple[list[Any], JsonValue, bool]:
        rows = await _execute(self.engine, self.statement(input, tenant, cursor))
        if not rows:
            return rows, cursor, True
        if self.key_name not in rows[-1]:
            raise ExportPageInvalidError(
                "the query does not select its key column", detail=self.key_name
            )
        keys = [row.get(self.key_name) for row in rows]
        for before, key in zip([cursor, *keys], keys, strict=False):
            if isinstance(key, bool) or not isinstance(key, int | str):
                raise ExportPageInvalidError(
                    "the key column's values must be integers or strings, never NULL",
                    detail=self.key_name,
                )
            if key == before:
                # Keyset pages over a key two rows share would skip the second one.
                raise ExportPageInvalidError(
                    "two rows share a key: the key column is not unique", detail=self.key_name
                )
        return rows, keys[-1], len(rows) < self.page_rows


def _is_select(value: object) -> bool:
    return all(callable(getattr(value, m, None)) for m in ("where", "order_by", "limit"))


async def _execute(engine: Any, stmt: Any) -> list[Any]:
    """The statement's rows as dicts: on an async engine on this loop, on a sync one on a
    thread (its driver blocks)."""
    if hasattr(engine, "sync_engine"):
        async with engine.connect() as conn:
            result = await conn.execute(stmt)
            return [dict(m) for m in result.mappings()]

    def fetch() -> list[Any]:
        with engine.connect() as conn:
            return [dict(m) for m in conn.execute(stmt).mappings()]

    return await asyncio.to_thread(fetch)


@dataclass(frozen=True, slots=True)
class _Pages:
    """Pages from a function of (input, cursor)."""

    fn: PagesFn

    async def page(
        self, input: Any, tenant: str | None, cursor: JsonValue
    ) -> tuple[list[Any], JsonValue, bool]:
        answer = await call_for(tenant, self.fn, input, cursor)
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            raise ExportPageInvalidError("pages answers (rows, next cursor)", detail="pages")
        rows, after = answer
        if isinstance(rows, str | bytes | Mapping) or not isinstance(rows, Iterable):
            raise ExportPageInvalidError("a page's rows are a list of mappings", detail="pages")
        rows = list(rows)
        if after is not None and not rows and after == cursor:
            raise ExportPageInvalidError(
                "an empty page answered the cursor it was given: the export would not move",
                detail="pages",
            )
        return rows, after, after is None


@dataclass(frozen=True, slots=True)
class _Export:
    name: str
    format: Format
    sink: RootSpec
    source: _Query | _Pages
    #: A column every row's tenant is checked on (the column's name), or None.
    tenant_name: str | None
    columns: tuple[str, ...] | None
    spreadsheet_safe: bool
    declared: JsonValue


def export_rows(
    *,
    name: str,
    tenant: TenantSpec,
    sink: RootSpec,
    format: Format = "jsonl",
    query: Any = None,
    key: Any = None,
    tenant_column: Any = None,
    engine: Any = None,
    pages: PagesFn | None = None,
    page_rows: int = DEFAULT_PAGE_ROWS,
    columns: Sequence[str] | None = None,
    spreadsheet_safe: bool = False,
    **options: Unpack[JobOptions],
) -> JobHandle:
    """Declare an export: a job whose input names a prefix (`{"prefix": "daily/2027-01-02"}`)
    and writes the rows of `query` or `pages` there, one object per page.

    `query`: a SQLAlchemy select (or a function of the input answering one) paged by `key`, a
    column it selects whose values are unique integers or strings, `page_rows` at a time, on
    `engine` (an `Engine` or an `AsyncEngine`). A tenant's run reads only the rows whose
    `tenant_column` equals its tenant (required unless `tenant="none"`). `pages(input,
    cursor)`: sync or async, called acting for the run's tenant, answers (rows, next cursor)
    — JSON, None to end; with `tenant_column` (a field name) every row is checked to hold the
    run's tenant. A row of another tenant fails the run for good (`X_EXPORT_SCOPE_INVALID`).

    `sink`: a directory or URL (a tenant's run writes under `<sink>/<tenant>`), or a function
    of the tenant answering one. `format`: `"jsonl"` or `"csv"` (a header row of `columns`,
    else of the first row's keys; CRLF endings). `spreadsheet_safe=True` (CSV only) writes a text
    cell starting with `=`, `+`, `-`, `@`, a tab or a CR with a leading `'`, so a spreadsheet
    shows it rather than runs it (CSV injection); off by default, since such a file no longer
    reads back as written. `options` are `job()`'s; the idempotency key
    defaults to one live run per input. The run answers `{"pages", "rows", "location"}`. A
    completed run of the same declaration and input blocks another (`X_EXPORT_COMPLETED`).
    Needs a driver with the `steps` and `sweeps` families.
    """
    bad = ExportDeclarationInvalidError
    if format not in FORMATS:
        raise bad(f"must be one of {', '.join(FORMATS)}", detail="format")
    if not isinstance(spreadsheet_safe, bool) or (spreadsheet_safe and format != "csv"):
        raise bad("True or False, and True only for format='csv'", detail="spreadsheet_safe")
    check_root(sink, "sink", bad)
    per_page = whole(page_rows, "page_rows", 1, MAX_PAGE_ROWS, bad)
    if columns is not None:
        given: object = columns
        if isinstance(given, str | bytes) or not isinstance(given, Iterable):
            raise bad("a list of column names", detail="columns")  # a number: TypeError
        columns = tuple(columns)  # once: a generator read by the check would be left empty
        if not all(isinstance(c, str) and c for c in columns):
            raise bad("a list of column names", detail="columns")
        if len(set(columns)) != len(columns):
            raise bad("a column is named twice", detail="columns")
    if (query is None) == (pages is None):
        raise bad("exactly one of query= and pages=", detail="query")
    if tenant == "none" and tenant_column is not None:
        raise bad(
            "a cross-tenant export (tenant='none') has no tenant to scope by",
            detail="tenant_column",
        )
    source: _Query | _Pages
    tenant_name: str | None
    declared: dict[str, JsonValue]
    if query is not None:
        if not (_is_select(query) or callable(query)):
            raise bad("a select, or a function of the input answering one", detail="query")
        key_name = _column_name(key)
        if key_name is None:
            raise bad("the select's key column (unique integers or strings)", detail="key")
        if engine is None or not callable(getattr(engine, "connect", None)):
            raise bad("a SQLAlchemy Engine or AsyncEngine", detail="engine")
        if tenant != "none":
            tenant_name = _column_name(tenant_column)
            if tenant_name is None:
                raise bad(
                    "a tenant's export reads its own rows only: name their tenant column",
                    detail="tenant_column",
                )
        else:
            tenant_name = None
        source = _Query(query, key, key_name, tenant_column, engine, per_page)
        text = "<function>" if not _is_select(query) else str(query)
        declared = {"query": text, "key": key_name, "page_rows": per_page}
    else:
        if not callable(pages):
            raise bad("a function of (input, cursor)", detail="pages")
        for extra, what in ((key, "key"), (engine, "engine")):
            if extra is not None:
                raise bad("only with query=", detail=what)
        if tenant_column is not None and (not isinstance(tenant_column, str) or not tenant_column):
            raise bad("with pages=, the name of the rows' tenant field", detail="tenant_column")
        tenant_name = tenant_column
        source = _Pages(pages)
        declared = {"pages": getattr(pages, "__qualname__", "<function>")}
    spec = _Export(
        name=name,
        format=format,
        sink=sink,
        source=source,
        tenant_name=tenant_name,
        columns=columns,
        spreadsheet_safe=spreadsheet_safe,
        declared={
            "kind": "export",
            "format": format,
            # Named only when set: a declaration of the version before it keeps its checksum.
            **({"spreadsheet_safe": True} if spreadsheet_safe else {}),
            "columns": list(columns) if columns is not None else None,
            "tenant_column": tenant_name,
            **declared,
        },
    )

    async def body(input: Any, ctx: JobContext) -> Any:
        return await _run(spec, input, ctx)

    options.setdefault(
        "idempotency_key", input_key("export", tenant, prefix_of, ExportScopeInvalidError)
    )
    return job(body, name=name, tenant=tenant, **options)


def _column_name(column: object) -> str | None:
    """The name a column is selected under (`Column.key`, else `.name`), or None."""
    for attr in ("key", "name"):
        value = getattr(column, attr, None)
        if isinstance(value, str) and value:
            return value
    return None


def prefix_of(input: object) -> str:
    """The prefix an export's input names (`X_EXPORT_SINK_INVALID` when none,
    `X_EXPORT_SCOPE_INVALID` when it would leave the run's place)."""
    prefix = input.get("prefix") if isinstance(input, dict) else None
    if prefix is None:
        raise ExportSinkInvalidError(
            'the input is {"prefix": <relative path>, ...}', detail="prefix"
        )
    return check_prefix(prefix)


async def _run(spec: _Export, input: Any, ctx: JobContext) -> JsonValue:
    prefix = prefix_of(input)
    refuse_other_enqueuer(ctx, ExportScopeInvalidError)
    ctx.step.driver.require("steps", "sweeps", what="export_rows")
    ledger, done = await open_ledger(
        ctx,
        name=spec.name,
        kind="export",
        declaration=spec.declared,
        input=input,
        blocked=ExportCompletedError,
    )
    try:
        sink = open_sink(tenant_root(spec.sink, ctx.tenant, ExportScopeInvalidError))
        if done is not None:
            return {"pages": done.batches, "rows": done.rows, "location": sink.where(prefix)}
        cursor: JsonValue = None
        pages = rows = 0
        while True:
            name = f"{prefix}/part-{pages:06d}.{EXTENSIONS[spec.format]}"
            out = await page_step(
                ctx,
                ledger,
                pages,
                _page_step(spec, sink, name, input, ctx.tenant, cursor),
                _page_counts,
            )
            pages += 1
            rows += recorded_int(out, "rows")
            cursor = recorded(out, "cursor")
            if recorded(out, "done") is True:
                break
        await ledger.finish()
    except Exception as exc:
        if done is None:
            await close_failed(ledger, ctx, exc)
        raise
    return {"pages": pages, "rows": rows, "location": sink.where(prefix)}


def _page_counts(output: JsonValue) -> tuple[int, int, JsonValue]:
    """A page's advance, read off its step's output: its rows and the cursor after it."""
    return recorded_int(output, "rows"), 0, recorded(output, "cursor")


def _page_step(
    spec: _Export,
    sink: Sink,
    name: str,
    input: Any,
    tenant: str | None,
    cursor: JsonValue,
) -> Callable[[], Awaitable[JsonValue]]:
    async def step() -> JsonValue:
        rows, after, last = await spec.source.page(input, tenant, cursor)
        if tenant is not None and spec.tenant_name is not None:
            # A query's WHERE scopes it already: its rows are checked when they carry the
            # column. A page function's rows must each carry the field.
            _check_tenant(rows, spec.tenant_name, tenant, isinstance(spec.source, _Pages))
        try:
            cursor_text = dumps(after)
        except JobsError as exc:
            raise ExportPageInvalidError(
                f"the next cursor cannot be stored: {exc.message}"
            ) from None
        if utf8_length(cursor_text) > MAX_SWEEP_CURSOR_BYTES:
            raise ExportPageInvalidError(
                f"the next cursor is longer than {MAX_SWEEP_CURSOR_BYTES} bytes of JSON"
            )
        if rows:
            await asyncio.to_thread(_write, sink, name, rows, spec)
        else:
            await asyncio.to_thread(sink.remove, name)
        return {"cursor": after, "rows": len(rows), "done": last, "object": name if rows else None}

    return step


def _check_tenant(rows: Sequence[Any], column: str, tenant: str, required: bool) -> None:
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or (not required and column not in row):
            continue
        value = row.get(column)
        if value is None or str(value) != tenant:
            raise ExportScopeInvalidError(
                f"row {i} of the page does not belong to the run's tenant", detail=label(column)
            )


def _write(sink: Sink, name: str, rows: Sequence[Any], spec: _Export) -> None:
    sink.put(name, encode_page(rows, spec.format, spec.columns, spec.spreadsheet_safe))
