"""Where a backfill's rows come from: a SQLAlchemy select paged by its key (`Keyset`), or a
function from a cursor to a page and the next cursor (`Pages`); and the checks every page and
cursor pass before `handle` sees them (`X_BACKFILL_PAGE_INVALID`).

`jobs_core` imports no SQLAlchemy: a `Keyset` only calls the select's and the engine's own
methods (`where`, `order_by`, `limit`, `connect`, `execute`), so the select, its columns and the
engine are whatever the application built them with.

A cursor is stored in its JSON form, and every batch — the first run's and a replay's alike —
starts from the stored form: a key whose JSON form the database does not compare as the key
itself (a `bytea`, a float it rounds) is not a key to page by. Integers, text, UUIDs and
timestamps (compared as ISO text) are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from jobs_core.driver import MAX_SWEEP_CURSOR_BYTES
from jobs_core.errors import (
    BackfillDeclarationInvalidError,
    BackfillPageInvalidError,
    JobsError,
)
from jobs_core.factories.sweep import call
from jobs_core.jsonform import JsonValue, dumps, loads, utf8_length

#: `pages=`: `(cursor, scope, limit) -> (rows, next cursor)`; a next cursor of None ends the
#: sweep. Sync (run on a thread) or async.
PagesFn = Callable[[JsonValue, str, int], Any]


@dataclass(frozen=True, slots=True)
class Page:
    """One batch as the source answered it: its rows (never stored), the cursor the next batch
    starts at (its JSON form), and whether this was the last batch."""

    rows: list[Any]
    cursor: JsonValue
    done: bool


class Source(Protocol):
    """A backfill's source."""

    def identity(self) -> JsonValue:
        """What of the source goes into the declaration's checksum."""
        ...

    async def page(self, cursor: JsonValue, scope: str | None, limit: int) -> Page:
        """The batch after `cursor` (None: the first) for tenant `scope` (None: every
        tenant), at most `limit` rows."""
        ...


def cursor_form(value: Any, what: str) -> JsonValue:
    """`value` as the cursor the step stores: its JSON form, at most `MAX_SWEEP_CURSOR_BYTES`
    bytes; else `X_BACKFILL_PAGE_INVALID` (nothing of the batch handled yet)."""
    try:
        text = dumps(value)
    except JobsError as exc:
        raise BackfillPageInvalidError(f"{what} has no JSON form: {exc.message}") from exc
    if utf8_length(text) > MAX_SWEEP_CURSOR_BYTES:
        raise BackfillPageInvalidError(
            f"{what} is longer than {MAX_SWEEP_CURSOR_BYTES} bytes of JSON"
        )
    return loads(text)


class Pages:
    """`pages=`: the application's own pagination, handed the tenant it must stay within."""

    def __init__(self, fn: PagesFn) -> None:
        if not callable(fn):
            raise BackfillDeclarationInvalidError("pages must be a function", detail="pages")
        self._fn = fn

    def identity(self) -> JsonValue:
        # The function's code is not part of the declaration's identity: `version=` is.
        return {"pages": True}

    async def page(self, cursor: JsonValue, scope: str | None, limit: int) -> Page:
        from jobs_core.factories.sweep import scope_of

        answer = await call(self._fn, cursor, scope_of(scope), limit)
        if not isinstance(answer, tuple | list) or len(answer) != 2:
            raise BackfillPageInvalidError(
                f"pages must answer (rows, next cursor), not {type(answer).__name__}"
            )
        rows, after = answer
        if not isinstance(rows, list | tuple):
            raise BackfillPageInvalidError(
                f"a page is a list of rows, not {type(rows).__name__}", detail="rows"
            )
        if after is None:
            return Page(list(rows), cursor, True)
        nxt = cursor_form(after, "the next cursor")
        if nxt == cursor:
            raise BackfillPageInvalidError(
                "the next cursor is the one this page started from: the sweep would not advance"
            )
        return Page(list(rows), nxt, False)


class _Select(Protocol):
    """What a `Keyset` uses of a SQLAlchemy `Select`."""

    @property
    def selected_columns(self) -> Any: ...

    def where(self, *clauses: Any) -> Any: ...

    def order_by(self, *clauses: Any) -> Any: ...

    def limit(self, limit: Any) -> Any: ...

    def compile(self, *args: Any, **kwargs: Any) -> Any: ...


#: An engine (sync or async), or a function answering one (called at each batch).
EngineSpec = Any


class Keyset:
    """`source=`: a select paged by its key — `WHERE key > :cursor ORDER BY key LIMIT batch` —
    ANDed with `tenant_column = :scope` for a tenant's sweep, so no row of another tenant is
    ever read, whatever the select itself filters on.

    The key must be unique and never NULL: consecutive rows with one key, a NULL key or a page
    ending where it began are `X_BACKFILL_PAGE_INVALID` (a keyset over them skips rows). The
    select's own ORDER BY and LIMIT are replaced; give it no OFFSET.

    Each batch reads on a connection of its own, opened and closed around the query: no
    transaction spans a batch's `handle`, and no connection is shared between threads. A sync
    engine's query runs on a thread; an async engine's is awaited. A connection is refused
    (its transaction would be the caller's, held across batches and threads).
    """

    def __init__(
        self,
        select: Any,
        *,
        engine: EngineSpec,
        key: Any,
        tenant_column: Any,
    ) -> None:
        for method in ("where", "order_by", "limit", "compile"):
            if not callable(getattr(select, method, None)):
                raise BackfillDeclarationInvalidError(
                    "source must be a SQLAlchemy select (select(...))", detail="source"
                )
        if getattr(select, "selected_columns", None) is None:
            raise BackfillDeclarationInvalidError(
                "source must be a SQLAlchemy select (select(...))", detail="source"
            )
        self._select: _Select = select
        self._key = _column(select, key, "key", selected=True)
        # Each page's keys are read by the key's position in its rows: `row._mapping[key]`
        # builds a mapping a row and costs more than the no-op batch's own read (1.7 ms a
        # batch of 1,000, bench/factories.py).
        self._key_at = _position(select, self._key)
        self._tenant = (
            None if tenant_column is None else _column(select, tenant_column, "tenant_column")
        )
        self._engine = _engine(engine)
        # Ordered once: a batch only adds its WHEREs and LIMIT (each generative call copies the
        # select; the two ORDER BY calls a batch cost about 13 µs, bench/factories.py).
        self._ordered = select.order_by(None).order_by(self._key)

    @property
    def key_position(self) -> int:
        """Where the key sits in every row the select returns."""
        return self._key_at

    def identity(self) -> JsonValue:
        try:
            # The dialect-free rendering: the same in every process whatever engine it reads on.
            compiled = self._select.compile()
        except Exception as exc:
            raise BackfillDeclarationInvalidError(
                f"the select cannot be rendered for the declaration's checksum: {exc}",
                detail="source",
            ) from exc
        params = {str(k): _plain(v) for k, v in sorted(compiled.params.items())}
        return {
            "sql": str(compiled),
            "params": params,
            "key": str(self._key),
            "tenant_column": None if self._tenant is None else str(self._tenant),
        }

    def statement(self, cursor: JsonValue, scope: str | None) -> Any:
        """The select of the batch after `cursor` for `scope` (limit not yet applied)."""
        stmt = self._ordered
        if self._tenant is not None:
            if scope is None:
                raise BackfillDeclarationInvalidError(
                    "a tenant's sweep needs the tenant it acts for", detail="tenant_column"
                )
            stmt = stmt.where(self._tenant == scope)
        if cursor is not None:
            stmt = stmt.where(self._key > cursor)
        return stmt

    async def page(self, cursor: JsonValue, scope: str | None, limit: int) -> Page:
        stmt = self.statement(cursor, scope).limit(limit)
        rows = await self._fetch(stmt)
        if not rows:
            return Page([], cursor, True)
        at = self._key_at
        keys = [row[at] for row in rows]
        if not _distinct(keys):
            for before, key in zip([None, *keys], keys, strict=False):
                if key is None:
                    raise BackfillPageInvalidError(
                        "a row's key is NULL: keyset pagination skips it"
                    )
                if before is not None and before == key:
                    raise BackfillPageInvalidError(
                        "two rows share a key: the key column is not unique, so keyset"
                        " pagination would skip rows",
                        detail=str(self._key),
                    )
        nxt = cursor_form(keys[-1], "the last row's key")
        if nxt == cursor:
            raise BackfillPageInvalidError(
                "the page ends at the key it started after: the key does not advance",
                detail=str(self._key),
            )
        return Page(rows, nxt, len(rows) < limit)

    async def _fetch(self, stmt: Any) -> list[Any]:
        engine = self._engine() if self._engine_is_factory else self._engine
        if hasattr(engine, "sync_engine"):
            async with engine.connect() as conn:
                result = await conn.execute(stmt)
                rows: list[Any] = result.all()  # a list of its own
                return rows
        return await asyncio.to_thread(_read, engine, stmt)

    @property
    def _engine_is_factory(self) -> bool:
        return not hasattr(self._engine, "connect")


def _distinct(keys: list[Any]) -> bool:
    """True when no key is NULL and no two keys are equal: then the page passes the row-by-row
    checks (equal neighbours are equal keys, which a set holds once). A set is built in C: for
    1,000 keys about half of that Python loop's 45-85 µs (bench/factories.py). False, and the
    loop decides, for anything else, unhashable keys included."""
    try:
        seen = set(keys)
    except TypeError:
        return False
    return len(seen) == len(keys) and None not in seen


def _read(engine: Any, stmt: Any) -> list[Any]:
    with engine.connect() as conn:
        rows: list[Any] = conn.execute(stmt).all()  # a list of its own
        return rows


def _engine(engine: object) -> EngineSpec:
    if engine is None:
        raise BackfillDeclarationInvalidError(
            "source= reads on an engine: give engine= (a SQLAlchemy Engine or AsyncEngine)",
            detail="engine",
        )
    if hasattr(engine, "sync_connection") or (
        hasattr(engine, "execute") and not hasattr(engine, "sync_engine")
    ):
        raise BackfillDeclarationInvalidError(
            "give an engine, not a connection: each batch reads on a connection of its own",
            detail="engine",
        )
    if not hasattr(engine, "connect") and not callable(engine):
        raise BackfillDeclarationInvalidError(
            "must be a SQLAlchemy Engine or AsyncEngine, or a function answering one",
            detail="engine",
        )
    return engine


def _column(select: Any, spec: object, option: str, *, selected: bool = False) -> Any:
    """The column `spec` names: a name among the select's columns (or its one FROM's, for a
    column the select filters on but does not return), or a column object."""
    if isinstance(spec, str):
        columns = select.selected_columns
        if spec in columns:
            return columns[spec]
        if not selected:
            froms = select.get_final_froms() if hasattr(select, "get_final_froms") else []
            if len(froms) == 1 and spec in froms[0].c:
                return froms[0].c[spec]
        where = "the select's columns" if selected else "the select's columns or its table"
        raise BackfillDeclarationInvalidError(f"{spec!r} is not among {where}", detail=option)
    if spec is None or not hasattr(spec, "__gt__") or not hasattr(spec, "key"):
        raise BackfillDeclarationInvalidError(
            "must be a column of the select, or its name", detail=option
        )
    if selected and not select.selected_columns.contains_column(spec):
        raise BackfillDeclarationInvalidError(
            "the key must be among the select's columns (each page's last key is the cursor)",
            detail=option,
        )
    return spec


def _position(select: Any, key: Any) -> int:
    """Where `key`, one of the select's columns (itself, as `_column` answers it), sits in
    every row the select returns."""
    for at, column in enumerate(select.selected_columns):
        if column is key:
            return at
    raise BackfillDeclarationInvalidError(
        "the key must be among the select's columns (each page's last key is the cursor)",
        detail="key",
    )


def _plain(value: object) -> JsonValue:
    """A bound value as the checksum sees it: its JSON form, else its repr."""
    try:
        return loads(dumps(value))
    except JobsError:
        return repr(value)
