"""Query parameters lifted off (or added to) a driver URL: a pg schema, a Redis key prefix.

The rest of the URL stays exactly as written. A parse-and-rebuild (`urlsplit` / `urlunsplit`)
would not: it drops the empty authority of `unix:///run/redis.sock` and `postgresql:///db?host=
/run/postgresql` (giving `unix:/run/…`, which redis-py 8 refuses) and re-encodes every value.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from urllib.parse import quote, unquote_plus

from jobs_core.urls import userinfo_end


def _query_span(url: str) -> tuple[int, int]:
    """Where `url`'s query runs, `[start, end)` after its `?` (start -1: it has none); a `?` in
    an unencoded password is not taken for it (the userinfo ends where `mask_url` says)."""
    _, sep, rest = url.partition("://")
    head = len(url) - len(rest) if sep else 0
    if sep:
        head += max(0, userinfo_end(rest))
    q = url.find("?", head)
    if q < 0:
        return -1, -1
    end = url.find("#", q)
    return q + 1, len(url) if end < 0 else end


def split_params(url: str, names: Collection[str]) -> tuple[str, dict[str, str]]:
    """`url` without its query parameters called `names` (everything else kept as written),
    and their decoded values (a repeated one: the last)."""
    start, end = _query_span(url)
    if start < 0:
        return url, {}
    taken: dict[str, str] = {}
    kept: list[str] = []
    for pair in url[start:end].split("&"):
        key, _, value = pair.partition("=")
        name = unquote_plus(key)
        if name in names:
            taken[name] = unquote_plus(value)
        elif pair:
            kept.append(pair)
    query = "&".join(kept)
    return url[: start - (0 if query else 1)] + query + url[end:], taken


def pop_param(url: str, name: str, default: str) -> tuple[str, str]:
    """`url` without the `name` query parameter, and that parameter's value (or `default`)."""
    plain, taken = split_params(url, (name,))
    return plain, taken.get(name, default)


def add_params(url: str, params: Mapping[str, str]) -> str:
    """`url` with `params` appended to its query (percent-encoded), the rest as written."""
    if not params:
        return url
    added = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params.items())
    start, end = _query_span(url)
    if start < 0:
        cut = url.find("#")
        cut = len(url) if cut < 0 else cut
        return f"{url[:cut]}?{added}{url[cut:]}"
    sep = "&" if end > start else ""
    return f"{url[:end]}{sep}{added}{url[end:]}"
