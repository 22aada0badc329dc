"""Driver URLs: which schemes we accept, the libpq form psycopg wants, and the masked form."""

from __future__ import annotations

from typing import Final
from urllib.parse import urlsplit, urlunsplit

from jobs_core.errors import DriverUrlInvalidError

SCHEMES: Final = ("postgresql+psycopg", "postgresql", "postgres")


def _split(url: str) -> tuple[str, str]:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise DriverUrlInvalidError(
            "expected postgresql+psycopg://… or postgresql://…", detail=mask(url)
        )
    return scheme, rest


def libpq_url(url: str) -> str:
    """`url` as libpq reads it (`postgresql://…`), refusing any other scheme."""
    _, rest = _split(url)
    return "postgresql://" + rest


def sqlalchemy_url(url: str) -> str:
    """`url` for a SQLAlchemy engine on psycopg 3 (`postgresql+psycopg://…`)."""
    _, rest = _split(url)
    return "postgresql+psycopg://" + rest


def mask(url: str) -> str:
    """`url` with any password replaced by `***` (for logs, errors and `describe()`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = (
        "&".join(
            ("password=***" if q.lower().startswith("password=") else q)
            for q in parts.query.split("&")
        )
        if parts.query
        else ""
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))
