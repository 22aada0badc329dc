"""Compile the named SQLAlchemy Core statements once, to SQL text and a parameter order.

The driver runs these texts on raw psycopg connections: SQLAlchemy builds and names every
statement (and is the one place their shape lives), but a hot call pays neither SQLAlchemy's
per-execution compile-cache lookup nor its result wrapping — only psycopg's. Each statement is
compiled once, on first use, with the schema left as a token and every parameter bound in
binary; `Sql.render(schema)` puts the quoted
schema in (once per driver), so one compiled form serves any number of schemas.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg
from sqlalchemy.sql.base import Executable

_DIALECT: Final = pg_psycopg.dialect(paramstyle="format")  # type: ignore[no-untyped-call]
_SCHEMA_TOKEN: Final = "__[SCHEMA__none]"


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

    def render(self, schema: str) -> str:
        """The text with `schema` quoted in, ready for psycopg."""
        quoted = _DIALECT.identifier_preparer.quote_schema(schema)
        if self.raw:
            # The dialect doubles a `%` for psycopg's placeholder syntax; a raw text has none.
            quoted = quoted.replace("%%", "%")
        return self.text.replace(_SCHEMA_TOKEN, quoted)

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for `values` (by name), constants filled in."""
        d = self.defaults
        return tuple(values[n] if n in values else d[n] for n in self.order)


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
        # One `%s` per bound occurrence, in the order of `positiontup`: the n-th is `$n`.
        pieces = text.split("%s")
        text = pieces[0] + "".join(f"${i}{piece}" for i, piece in enumerate(pieces[1:], 1))
    else:
        text = text.replace("%s", "%b")
    defaults = {k: v for k, v in compiled.params.items() if k in order and v is not None}
    return Sql(
        name=name,
        text=text,
        order=order,
        defaults=defaults,
        generic_plan=generic_plan,
        raw=raw,
        lazy_commit=lazy_commit,
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
    skips longer ones). Their parameters travel in the format psycopg picks (text for a list):
    only for statements without batch arrays.

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
