"""One query parameter lifted off a driver URL (a pg schema, a Redis key prefix)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit


def pop_param(url: str, name: str, default: str) -> tuple[str, str]:
    """`url` without the `name` query parameter, and that parameter's value (or `default`)."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    value = default
    kept: list[tuple[str, str]] = []
    for key, val in pairs:
        if key == name:
            value = val
        else:
            kept.append((key, val))
    return urlunsplit(parts._replace(query=urlencode(kept))), value
