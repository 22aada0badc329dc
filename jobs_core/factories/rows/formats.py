"""Record boundaries found on bytes, what one record of an import becomes (a row, or a refusal
for the report that never carries the refused value), and how an export writes a page.

JSON Lines: a record ends at each newline. CSV (RFC 4180): a record ends at a newline outside
quotes — an even count of quotes since the record began — so a quoted field may hold newlines,
delimiters and `""` (one quote). A page starts at a byte offset where a record starts and at no
other kind of place: no parse state crosses a page boundary (a CSV header is read again, from
offset 0, by every page), so a page read from a stored offset yields exactly the records a read
of the whole file yields from there. A CRLF ends a record as a newline does; a UTF-8 byte order
mark opens the file harmlessly; the last record may end the file without a newline; a blank
line is no record. Text is UTF-8.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from jobs_core.driver import MAX_NAME_BYTES
from jobs_core.errors import (
    ExportPageInvalidError,
    ImportHeaderInvalidError,
    ImportRecordTooLargeError,
    JobsError,
)
from jobs_core.jsonform import (
    MAX_JSON_DEPTH,
    JsonValue,
    dumps,
    holds_nul,
    holds_surrogate,
    json_depth_exceeds,
    to_json_value,
    utf8_length,
)

Format: TypeAlias = Literal["jsonl", "csv"]
FORMATS: Final[tuple[Format, ...]] = ("jsonl", "csv")
#: What each format's objects are named with (`part-000000.jsonl`).
EXTENSIONS: Final[dict[Format, str]] = {"jsonl": "jsonl", "csv": "csv"}

#: What a page reads first for its CSV header (more only when the header is longer).
_HEADER_READ: Final = 4_096
#: The UTF-8 byte order mark some tools open a file with.
BOM: Final = b"\xef\xbb\xbf"
QUOTE: Final = b'"'

#: `read(offset, length)`: up to `length` bytes of the source from `offset`; fewer only at its end.
Reader: TypeAlias = Callable[[int, int], bytes]
Row: TypeAlias = dict[str, JsonValue]

#: Why a record was refused, as the report names it (`Refusal.code`).
REFUSALS: Final[dict[str, str]] = {
    "depth": f"the JSON value nests deeper than {MAX_JSON_DEPTH} levels",
    "field_count": "the CSV record has more or fewer fields than the header",
    "json": "the record is not JSON text",
    "not_object": "the JSON record is not an object",
    "nul": "the record holds a NUL character",
    "number": "a JSON number has no finite value (NaN, Infinity, 1e999)",
    "quote": "the CSV quoting is broken (a stray or an unterminated quote)",
    "surrogate": "a JSON string holds a lone surrogate (half of a UTF-16 pair)",
    "tenant": "the row names another tenant than the one the run acts for",
    "utf8": "the record is not valid UTF-8",
}


@dataclass(frozen=True, slots=True)
class Layout:
    """How an import reads its records."""

    format: Format
    #: The longest record, in bytes, its line ending excluded.
    max_record_bytes: int
    #: The CSV field delimiter (one ASCII byte).
    delimiter: bytes = b","
    #: A field every row must hold with the run's tenant as its value (else refused, `tenant`).
    tenant_field: str | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """A record the import refused: where it starts (1-based physical line), the field at
    fault when one is (a header name or a top-level key, never a value), and why (`REFUSALS`)."""

    line: int
    field: str | None
    code: str

    def as_json(self) -> dict[str, JsonValue]:
        return {"line": self.line, "field": self.field, "code": self.code}


@dataclass(frozen=True, slots=True)
class Page:
    """One page of an import: its rows, its refused records, and where the next page starts."""

    rows: list[Row]
    refusals: list[Refusal]
    #: The byte offset of the first record after this page.
    next_offset: int
    #: The physical line that record starts on.
    next_line: int
    #: True when this page read to the end of the source.
    done: bool


@dataclass(frozen=True, slots=True)
class Header:
    """A CSV file's header: its column names, and where its first data record starts."""

    names: tuple[str, ...]
    end: int
    next_line: int


def read_page(
    read: Reader,
    layout: Layout,
    offset: int,
    line: int,
    page_bytes: int,
    tenant: str | None = None,
) -> Page:
    """The records that start at `offset` (on physical line `line`) within `page_bytes` bytes —
    at least one whole record, however long, up to `max_record_bytes`.

    A record past `max_record_bytes` is `X_IMPORT_RECORD_TOO_LARGE` when it opens the page;
    later in the page, the page ends before it (so the next page, checkpointed at its offset,
    refuses it). Every other bad record is a `Refusal`, its value never kept.
    """
    header: Header | None = None
    if layout.format == "csv":
        header = read_header(read, layout)
        if header is None:
            return Page([], [], offset, line, True)
        if offset < header.end:
            offset, line = header.end, header.next_line
    elif offset == 0 and read(0, len(BOM)) == BOM:
        offset = len(BOM)
    want = page_bytes + 1  # one byte more than the page says whether the source ends in it
    buf = read(offset, want)
    eof = len(buf) < want
    if not eof:
        buf = buf[:page_bytes]
    records, open_end = _split(layout, buf, eof)
    while not records and not eof:
        # The first record is longer than the window: read on until it ends, or is too long.
        if _least_content(buf) > layout.max_record_bytes:
            raise _too_large(line, layout)
        want = layout.max_record_bytes + 3 - len(buf)  # the record, a CRLF, and a byte past it
        more = read(offset + len(buf), want)
        eof = len(more) < want
        buf += more
        records, open_end = _split(layout, buf, eof)

    rows: list[Row] = []
    refusals: list[Refusal] = []
    pos = offset
    last = len(records) - 1
    for i, record in enumerate(records):
        terminated = not (open_end and i == last)
        content = record[:-1] if record.endswith(b"\r") else record
        if len(content) > layout.max_record_bytes:
            if i == 0:
                raise _too_large(line, layout)
            break
        if header is not None:
            got = _csv_row(content, line, layout, header, tenant)
        else:
            got = _jsonl_row(content, line, layout, tenant)
        if isinstance(got, Refusal):
            refusals.append(got)
        elif got is not None:
            rows.append(got)
        pos += len(record) + int(terminated)
        line += record.count(b"\n") + int(terminated)
    return Page(rows, refusals, pos, line, eof and pos == offset + len(buf))


def read_header(read: Reader, layout: Layout) -> Header | None:
    """The CSV header: the file's first record (None for an empty file). One that cannot name
    the columns is `X_IMPORT_HEADER_INVALID`; one past `max_record_bytes` is too large."""
    limit = len(BOM) + layout.max_record_bytes + 3  # a BOM, the record, a CRLF, a byte past
    want = min(limit, _HEADER_READ)
    while True:
        # Every page reads the header: a short read first, a longer one only for a long header.
        head = read(0, want)
        start = len(BOM) if head.startswith(BOM) else 0
        buf = head[start:]
        if not buf:
            return None
        records, open_end = _split(layout, buf, len(head) < want)
        if records or len(head) < want or want == limit:
            break
        want = min(limit, want * 4)
    if not records:
        raise _too_large(1, layout)
    record = records[0]
    content = record[:-1] if record.endswith(b"\r") else record
    if len(content) > layout.max_record_bytes:
        raise _too_large(1, layout)
    terminated = not (open_end and len(records) == 1)
    fields = split_fields(content, layout.delimiter)
    if fields is None:
        raise ImportHeaderInvalidError("the header's quoting is broken", detail="line 1")
    names: list[str] = []
    for i, raw in enumerate(fields, 1):
        try:
            name = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportHeaderInvalidError(
                f"column {i}'s name is not UTF-8", detail=f"column {i}"
            ) from None
        if not name or "\x00" in name:
            raise ImportHeaderInvalidError(
                f"column {i}'s name is empty or holds a NUL", detail=f"column {i}"
            )
        if name in names:
            raise ImportHeaderInvalidError(
                f"column {i} repeats the name of column {names.index(name) + 1}",
                detail=f"column {i}",
            )
        names.append(name)
    if layout.tenant_field is not None and layout.tenant_field not in names:
        raise ImportHeaderInvalidError(
            "the header has no column for the tenant field", detail=layout.tenant_field
        )
    return Header(
        tuple(names),
        start + len(record) + terminated,
        1 + record.count(b"\n") + terminated,
    )


def _too_large(line: int, layout: Layout) -> ImportRecordTooLargeError:
    return ImportRecordTooLargeError(
        f"the record at line {line} is longer than {layout.max_record_bytes} bytes",
        detail=f"line {line}",
    )


def _least_content(buf: bytes) -> int:
    """The fewest bytes the record `buf` opens can hold (a CR at its end may start a CRLF)."""
    return len(buf) - 1 if buf.endswith(b"\r") else len(buf)


def _split(layout: Layout, buf: bytes, eof: bool) -> tuple[list[bytes], bool]:
    """The whole records `buf` holds, each without its newline, and whether the last one ends
    the source without a newline (only at `eof`, which also makes the tail a record)."""
    parts = buf.split(b"\n")
    tail = parts.pop()
    if layout.format == "jsonl":
        if eof and tail:
            parts.append(tail)
            return parts, True
        return parts, False
    records: list[bytes] = []
    pending: list[bytes] = []
    quotes = 0
    for part in parts:
        pending.append(part)
        quotes += part.count(QUOTE)
        if not quotes & 1:
            records.append(pending[0] if len(pending) == 1 else b"\n".join(pending))
            pending = []
            quotes = 0
    if eof:
        pending.append(tail)
        rest = b"\n".join(pending)
        if rest:
            # Unterminated quoting runs to the end of the source: one record, refused `quote`.
            records.append(rest)
            return records, True
    return records, False


def split_fields(record: bytes, delimiter: bytes = b",") -> list[bytes] | None:
    """A CSV record's fields, unquoted (RFC 4180: a quoted field may hold the delimiter, a
    newline and `""` for one quote); None when its quoting is broken (a quote inside an
    unquoted field, text after a closing quote, a quote never closed)."""
    parts = record.split(delimiter)
    if QUOTE not in record:
        return parts
    fields: list[bytes] = []
    i, n = 0, len(parts)
    while i < n:
        part = parts[i]
        i += 1
        if not part.startswith(QUOTE):
            if QUOTE in part:
                return None
            fields.append(part)
            continue
        # A quoted field spans pieces while its quotes are odd (the delimiters were inside).
        while part.count(QUOTE) & 1 and i < n:
            part += delimiter + parts[i]
            i += 1
        if part.count(QUOTE) & 1 or len(part) < 2 or not part.endswith(QUOTE):
            return None
        inner = part[1:-1]
        if QUOTE in inner:
            unescaped = inner.replace(b'""', b"")
            if QUOTE in unescaped:
                return None  # an odd run of quotes: a closing quote with text after it
            inner = inner.replace(b'""', QUOTE)
        fields.append(inner)
    return fields


def label(name: str) -> str | None:
    """A field's name as the report may show it: None when it is past a name's bound or holds
    text no store can hold (such a key is itself what was refused)."""
    if utf8_length(name) > MAX_NAME_BYTES or "\x00" in name or holds_surrogate(name):
        return None
    return name


def _csv_row(
    content: bytes, line: int, layout: Layout, header: Header, tenant: str | None
) -> Row | Refusal | None:
    if not content:
        return None
    fields = split_fields(content, layout.delimiter)
    if fields is None:
        return Refusal(line, None, "quote")
    if len(fields) != len(header.names):
        return Refusal(line, None, "field_count")
    try:
        if b"\x00" in content:
            raise ValueError
        row: Row = dict(zip(header.names, [f.decode("utf-8") for f in fields], strict=True))
    except ValueError:  # UnicodeDecodeError among them: find the field at fault
        for name, raw in zip(header.names, fields, strict=True):
            if b"\x00" in raw:
                return Refusal(line, label(name), "nul")
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return Refusal(line, label(name), "utf8")
        raise
    return _scoped(row, line, layout, tenant)


class _NotFinite(ValueError):
    """A JSON number with no finite float value."""


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotFinite
    return value


def _no_constant(name: str) -> float:
    raise _NotFinite


#: Refuses NaN, Infinity and numbers past a float's range instead of making them inf/nan (a
#: call per float costs less than any look at the text for one).
_DECODER: Final = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant)
#: A `\uD800`..`\uDFFF` escape: a lone surrogate may follow (a pair decodes to one character).
_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def _jsonl_row(
    content: bytes, line: int, layout: Layout, tenant: str | None
) -> Row | Refusal | None:
    if not content.strip():
        return None
    if b"\x00" in content:
        return Refusal(line, None, "nul")
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal(line, None, "utf8")
    if json_depth_exceeds(text):
        return Refusal(line, None, "depth")
    try:
        value = _DECODER.decode(text)
    except _NotFinite:
        return Refusal(line, None, "number")
    except RecursionError:
        return Refusal(line, None, "depth")
    except ValueError:
        return Refusal(line, None, "json")
    if not isinstance(value, dict):
        return Refusal(line, None, "not_object")
    if holds_nul(text):
        found, field = _holding(value, lambda s: "\x00" in s)
        if found:
            return Refusal(line, field, "nul")
    if _SURROGATE_ESCAPE.search(text) is not None:
        found, field = _holding(value, holds_surrogate)
        if found:
            return Refusal(line, field, "surrogate")
    return _scoped(value, line, layout, tenant)


def _holding(row: dict[str, Any], bad: Callable[[str], bool]) -> tuple[bool, str | None]:
    """Whether a key or a string anywhere in `row` is `bad`, and the top-level key it sits
    under (None when a key itself is bad: the report never names what it refused)."""
    for key, value in row.items():
        if bad(key):
            return True, None
        stack: list[Any] = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, str):
                if bad(item):
                    return True, label(key)
            elif isinstance(item, dict):
                for k, v in item.items():
                    if bad(k):
                        return True, label(key)
                    stack.append(v)
            elif isinstance(item, list):
                stack.extend(item)
    return False, None


def _scoped(row: Row, line: int, layout: Layout, tenant: str | None) -> Row | Refusal:
    field = layout.tenant_field
    if field is not None and row.get(field) != tenant:
        return Refusal(line, label(field), "tenant")
    return row


# -- writing (export) -----------------------------------------------------------------------------


#: What a spreadsheet reads a text cell starting with as a formula (OWASP's CSV injection list).
FORMULA_STARTS: Final = ("=", "+", "-", "@", "\t", "\r")


def encode_page(
    rows: Sequence[Mapping[str, Any]],
    format: Format,
    columns: Sequence[str] | None,
    spreadsheet_safe: bool = False,
) -> bytes:
    """A page of rows as one object's bytes: JSON Lines, or CSV with a header row (CRLF line
    endings, RFC 4180 quoting). A row holding a value with no JSON form, a NUL or a lone
    surrogate is `X_EXPORT_PAGE_INVALID` naming its index and column, never the value: what
    an export writes, an import reads back. `spreadsheet_safe` (CSV only): a text cell (header
    included) a spreadsheet would run as a formula gets a leading `'`, so it shows as text —
    and no longer reads back byte for byte."""
    plain = [_plain_row(i, row) for i, row in enumerate(rows)]
    if format == "jsonl":
        return "".join(dumps(row) + "\n" for row in plain).encode("utf-8")
    names = list(columns) if columns is not None else list(plain[0]) if plain else []
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    cell = _safe_cell if spreadsheet_safe else _cell
    writer.writerow([cell(name) for name in names])
    known = set(names)
    for i, row in enumerate(plain):
        extra = [k for k in row if k not in known]
        if extra:
            raise ExportPageInvalidError(
                f"row {i} holds a column the header does not name", detail=label(extra[0])
            )
        writer.writerow([cell(row.get(name)) for name in names])
    return out.getvalue().encode("utf-8")


def _plain_row(index: int, row: object) -> Row:
    if not isinstance(row, Mapping):
        raise ExportPageInvalidError(f"row {index} is not a mapping of columns to values")
    try:
        value = to_json_value(row)
    except JobsError as exc:
        raise ExportPageInvalidError(
            f"row {index} cannot be written: {exc.message}", detail=f"row {index}"
        ) from None
    assert isinstance(value, dict)
    return value


def _safe_cell(value: JsonValue) -> str:
    text = _cell(value)
    # Only text is at risk: a number is written as digits (a negative one is data, not a formula).
    return "'" + text if isinstance(value, str) and text.startswith(FORMULA_STARTS) else text


def _cell(value: JsonValue) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return dumps(value)
