"""Compile the named SQLAlchemy Core statements once, to SQL text and a parameter order.

The driver runs these texts on raw psycopg connections: SQLAlchemy builds and names every
statement (and is the one place their shape lives), but a hot call pays neither SQLAlchemy's
per-execution compile-cache lookup nor its result wrapping — only psycopg's. Each statement is
compiled once at import with the schema left as a token and every parameter bound in
binary; `Sql.render(schema)` puts the quoted
schema in (once per driver), so one compiled form serves any number of schemas.
"""

from __future__ import annotations

from collections.abc import Mapping
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

    def render(self, schema: str) -> str:
        """The text with `schema` quoted in, ready for psycopg."""
        quoted = _DIALECT.identifier_preparer.quote_schema(schema)
        return self.text.replace(_SCHEMA_TOKEN, quoted)

    def args(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The positional parameters for `values` (by name), constants filled in."""
        d = self.defaults
        return tuple(values[n] if n in values else d[n] for n in self.order)


def compile_sql(name: str, stmt: Executable, *, generic_plan: bool = False) -> Sql:
    """Compile `stmt` for psycopg with positional parameters and the schema left as a token."""
    compiled = stmt.compile(dialect=_DIALECT, schema_translate_map={None: "__schema__"})  # type: ignore[attr-defined]
    text = compiled.string
    if "__[POSTCOMPILE" in text:
        raise RuntimeError(f"{name}: an expanding parameter cannot run on raw psycopg")
    if "%%" in text:
        raise RuntimeError(f"{name}: a literal % would be misread as a placeholder")
    # Every parameter travels in binary: psycopg dumps a Python list as a binary array several
    # times faster than as a quoted text literal, and a batch is one array per column.
    text = text.replace("%s", "%b")
    order = tuple(compiled.positiontup or ())
    defaults = {k: v for k, v in compiled.params.items() if k in order and v is not None}
    return Sql(name=name, text=text, order=order, defaults=defaults, generic_plan=generic_plan)


def compile_all(module_globals: Mapping[str, object]) -> dict[str, Sql]:
    """Every upper-case SQLAlchemy statement of a statements module, compiled, by name.

    A module's `GENERIC_PLANS` names the statements the driver runs on the server's generic
    plan: Postgres re-plans a prepared statement on every call while its generic plan's
    ESTIMATED cost is well above the custom plans' (a `LIMIT $n` is guessed at a tenth of the
    rows), even where both plans are the same.
    """
    generic = module_globals.get("GENERIC_PLANS", frozenset())
    assert isinstance(generic, frozenset)
    out: dict[str, Sql] = {}
    for key, value in module_globals.items():
        if (
            key.isupper()
            and isinstance(value, sa.sql.ClauseElement)
            and isinstance(value, Executable)
        ):
            out[key] = compile_sql(key, value, generic_plan=key in generic)
    if not generic <= out.keys():
        raise RuntimeError(f"GENERIC_PLANS names no statement: {sorted(generic - out.keys())}")
    return out
