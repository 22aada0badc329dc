"""Compile the named SQLAlchemy Core statements once, to SQL text and a parameter order.

The driver runs these texts on raw psycopg connections: SQLAlchemy builds and names every
statement (and is the one place their shape lives), but a hot call pays neither SQLAlchemy's
per-execution compile-cache lookup nor its result wrapping — only psycopg's. Each statement is
compiled once, on first use, with the schema left as a token and every parameter bound in
binary (a text or integer array through a dumper of ours, `TextArray` / `BigintArray`, which skips
psycopg's per-call probing of a list's element type); `Sql.render(schema)` puts the quoted
schema in (once per driver), so one compiled form serves any number of schemas.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg
import psycopg.errors
import sqlalchemy as sa
from psycopg import postgres
from psycopg.adapt import Dumper
from psycopg.pq import Format
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg
from sqlalchemy.sql.base import Executable

_DIALECT: Final = pg_psycopg.dialect(paramstyle="format")  # type: ignore[no-untyped-call]
_SCHEMA_TOKEN: Final = "__[SCHEMA__none]"


class TextArray(list[str | None]):
    """A `text[]` parameter that psycopg dumps in binary without probing its items' types."""

    __slots__ = ()


class BigintArray(list[int | None]):
    """A `bigint[]` parameter (its SQL cast narrows it where the column is narrower), dumped in
    binary without probing its items' types."""

    __slots__ = ()


_TEXT_OID: Final = postgres.types["text"].oid
_INT8_OID: Final = postgres.types["int8"].oid
# A one-dimensional binary array: (ndim, has nulls, element oid, length, lower bound); an empty
# one is only its first three.
_ARRAY_HEAD: Final = struct.Struct(">iIIii").pack
_EMPTY_HEAD: Final = struct.Struct(">iII").pack
_LEN: Final = struct.Struct(">i").pack
_INT8_ITEM: Final = struct.Struct(">iq").pack
_NULL_ITEM: Final = b"\xff\xff\xff\xff"


class _TextArrayDumper(Dumper):
    """`TextArray` in binary: psycopg's own list dumper finds each list's element type twice a
    call (and builds a dumper for it) before dumping, which cost a settle of 10 items more than
    the statement's whole round trip of Python work besides."""

    format = Format.BINARY
    oid = postgres.types["text"].array_oid

    def __init__(self, cls: type, context: Any = None) -> None:
        super().__init__(cls, context)
        conn = self.connection
        self._encoding = conn.info.encoding if conn is not None else "utf-8"

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return _EMPTY_HEAD(0, 0, _TEXT_OID)
        count = len(obj)
        first = obj[0]
        if obj.count(first) == count:
            # One value throughout (a batch's worker id, its results when the bodies return
            # nothing): encoded once.
            if first is None:
                return _ARRAY_HEAD(1, 1, _TEXT_OID, count, 1) + _NULL_ITEM * count
            if type(first) is str:
                try:
                    b = first.encode(self._encoding)
                except UnicodeEncodeError as exc:
                    raise psycopg.DataError(f"a text[] parameter holds {first!r}") from exc
                return _ARRAY_HEAD(1, 0, _TEXT_OID, count, 1) + (_LEN(len(b)) + b) * count
        out: list[bytes] = []
        nulls = 0
        enc = self._encoding
        try:
            for item in obj:
                if item is None:
                    out.append(_NULL_ITEM)
                    nulls = 1
                else:
                    b = item.encode(enc)
                    out.append(_LEN(len(b)))
                    out.append(b)
        except (AttributeError, UnicodeEncodeError) as exc:
            raise psycopg.DataError(f"a text[] parameter holds {item!r}") from exc
        return _ARRAY_HEAD(1, nulls, _TEXT_OID, len(obj), 1) + b"".join(out)


class _BigintArrayDumper(Dumper):
    """`BigintArray` in binary (see `_TextArrayDumper`)."""

    format = Format.BINARY
    oid = postgres.types["int8"].array_oid

    def dump(self, obj: Any) -> bytes:
        if not obj:
            return _EMPTY_HEAD(0, 0, _INT8_OID)
        try:
            if None in obj:
                body = b"".join(_NULL_ITEM if v is None else _INT8_ITEM(8, v) for v in obj)
                return _ARRAY_HEAD(1, 1, _INT8_OID, len(obj), 1) + body
            return _ARRAY_HEAD(1, 0, _INT8_OID, len(obj), 1) + b"".join(
                [_INT8_ITEM(8, v) for v in obj]
            )
        except struct.error as exc:
            if any(type(v) is not int for v in obj if v is not None):
                raise psycopg.DataError("a bigint[] parameter holds a non-integer") from exc
            # What the server answers a value past int8 with (SQLSTATE 22003), before any write.
            raise psycopg.errors.NumericValueOutOfRange("bigint out of range") from exc


# Registered process-wide: a connection made from then on dumps them in binary; one made before
# dumps them as the lists they are.
psycopg.adapters.register_dumper(TextArray, _TextArrayDumper)
psycopg.adapters.register_dumper(BigintArray, _BigintArrayDumper)


def _array_kind(type_: Any) -> type[list[Any]] | None:
    """The list class a parameter of SQL type `type_` is bound as (None: as it comes)."""
    if not isinstance(type_, sa.ARRAY):
        return None
    item = type_.item_type
    if isinstance(item, sa.String):  # Text is a String
        return TextArray
    if isinstance(item, sa.Integer):  # BigInteger, SmallInteger too
        return BigintArray
    return None


@dataclass(frozen=True, slots=True)
class Sql:
    """One statement: its name, SQL text (schema as a token) and positional parameter order."""

    name: str
    text: str
    order: tuple[str, ...]
    #: Values of the statement's own anonymous parameters (constants SQLAlchemy bound).
    defaults: Mapping[str, Any]
    #: Run on the server's generic plan (see `compile_all`).
    generic_plan: bool = False
    #: The text has `$n` placeholders, for psycopg's raw cursor (see `compile_all`).
    raw: bool = False
    #: Commits without waiting for its WAL flush (see `compile_all`).
    lazy_commit: bool = False
    #: Per parameter of `order`: the list class its array is bound as, or None.
    arrays: tuple[type[list[Any]] | None, ...] = field(default=())

    def render(self, schema: str) -> str:
        """The text with `schema` quoted in, ready for psycopg."""
        quoted = _DIALECT.identifier_preparer.quote_schema(schema)
        if self.raw:
            # The dialect doubles a `%` for psycopg's placeholder syntax; a raw text has none.
            quoted = quoted.replace("%%", "%")
        return self.text.replace(_SCHEMA_TOKEN, quoted)

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for `values` (by name), constants filled in; a list bound to
        a `text[]` or integer array parameter goes as a `TextArray` / `BigintArray`."""
        d = self.defaults
        out = []
        for n, kind in zip(self.order, self.arrays or (None,) * len(self.order), strict=True):
            v = values[n] if n in values else d[n]
            if kind is not None and type(v) is list:
                v = kind(v)
            out.append(v)
        return tuple(out)


def compile_sql(
    name: str,
    stmt: Executable,
    *,
    generic_plan: bool = False,
    raw: bool = False,
    lazy_commit: bool = False,
) -> Sql:
    """Compile `stmt` for psycopg with positional parameters and the schema left as a token
    (`raw`: numbered `$n` placeholders, each parameter in the format psycopg picks)."""
    compiled = stmt.compile(dialect=_DIALECT, schema_translate_map={None: "__schema__"})  # type: ignore[attr-defined]
    text = compiled.string
    if "__[POSTCOMPILE" in text:
        raise RuntimeError(f"{name}: an expanding parameter cannot run on raw psycopg")
    if "%%" in text:
        raise RuntimeError(f"{name}: a literal % would be misread as a placeholder")
    # Every parameter travels in binary: psycopg dumps a Python list as a binary array several
    # times faster than as a quoted text literal, and a batch is one array per column.
    order = tuple(compiled.positiontup or ())
    if raw:
        # One `%s` per bound occurrence, in the order of `positiontup`; a name bound again with
        # the same cast reuses its `$n`, so its value is dumped and sent once.
        pieces = text.split("%s")
        numbers: dict[tuple[str, str], int] = {}
        unique: list[str] = []
        out = [pieces[0]]
        for param, piece in zip(order, pieces[1:], strict=True):
            cast = _CAST.match(piece)
            key = (param, cast.group(0) if cast else "")
            if key not in numbers:
                unique.append(param)
                numbers[key] = len(unique)
            out.append(f"${numbers[key]}{piece}")
        text, order = "".join(out), tuple(unique)
    else:
        text = text.replace("%s", "%b")
    defaults = {k: v for k, v in compiled.params.items() if k in order and v is not None}
    arrays = tuple(_array_kind(compiled.binds[n].type) for n in order)
    return Sql(
        name=name,
        text=text,
        order=order,
        defaults=defaults,
        generic_plan=generic_plan,
        raw=raw,
        lazy_commit=lazy_commit,
        arrays=arrays,
    )


#: The cast the dialect renders right after a placeholder (`::BIGINT[]`).
_CAST: Final = re.compile(
    r"::[A-Z][A-Z0-9_]*(?: (?:PRECISION|VARYING|WITH(?:OUT)? TIME ZONE))?(?:\[\])?"
)


def compile_all(*modules_globals: Mapping[str, object]) -> Statements:
    """Every upper-case SQLAlchemy statement of the statements modules, by name, each compiled
    on first use (a later module's name wins, as in a dict merge).

    A module's `GENERIC_PLANS` names the statements the driver runs on the server's generic
    plan: Postgres re-plans a prepared statement on every call while its generic plan's
    ESTIMATED cost is well above the custom plans' (a `LIMIT $n` is guessed at a tenth of the
    rows), even where both plans are the same.

    Its `RAW_TEXT` names statements psycopg gets with `$n` placeholders through a raw cursor:
    psycopg converts `%b` placeholders on every call of a text over 4 KiB (its conversion cache
    skips longer ones), and a name bound twice (same cast) is one `$n`, dumped and sent once.
    Their scalars travel in the format psycopg picks; their text and integer arrays in binary
    (`TextArray`, `BigintArray`), as every statement's do.

    Its `LAZY_COMMIT` names statements whose transaction commits without waiting for its WAL
    flush (`synchronous_commit = off` for that transaction alone): only statements whose loss
    in a crash the module's comment shows harmless.
    """
    found: dict[str, tuple[Executable, bool, bool, bool]] = {}
    for module in modules_globals:
        generic = module.get("GENERIC_PLANS", frozenset())
        raw = module.get("RAW_TEXT", frozenset())
        lazy = module.get("LAZY_COMMIT", frozenset())
        assert isinstance(generic, frozenset) and isinstance(raw, frozenset)
        assert isinstance(lazy, frozenset)
        names: set[str] = set()
        for key, value in module.items():
            if (
                key.isupper()
                and isinstance(value, sa.sql.ClauseElement)
                and isinstance(value, Executable)
            ):
                found[key] = (value, key in generic, key in raw, key in lazy)
                names.add(key)
        if not (generic | raw | lazy) <= names:
            unknown = sorted((generic | raw | lazy) - names)
            raise RuntimeError(
                f"GENERIC_PLANS, RAW_TEXT or LAZY_COMMIT names no statement: {unknown}"
            )
    return Statements(found)


class Statements(Mapping[str, Sql]):
    """Named statements, each compiled the first time it is looked up, then kept.

    Compiling every statement costs a process about 0.1 s of CPU at import (each `ujobs` verb
    and worker process paid it), while one CLI verb runs two or three of them. Iterating
    compiles them all; compiling twice from two threads at once yields equal values.
    """

    __slots__ = ("_compiled", "_source")

    def __init__(self, source: Mapping[str, tuple[Executable, bool, bool, bool]]) -> None:
        self._source = dict(source)
        self._compiled: dict[str, Sql] = {}

    def __getitem__(self, name: str) -> Sql:
        try:
            return self._compiled[name]
        except KeyError:
            stmt, generic, raw, lazy = self._source[name]
            sql = self._compiled[name] = compile_sql(
                name, stmt, generic_plan=generic, raw=raw, lazy_commit=lazy
            )
            return sql

    def __contains__(self, name: object) -> bool:
        return name in self._source

    def __iter__(self) -> Iterator[str]:
        return iter(self._source)

    def __len__(self) -> int:
        return len(self._source)
