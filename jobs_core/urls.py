"""Driver URLs: `memory`, `postgresql+psycopg://…`, `redis://…` → a driver, found by entry point.

Backends register a factory under the `ujobs.drivers` entry-point group, one name per URL
scheme, so `jobs_core` names no backend and a third-party driver plugs in the same way; outbox
stores (the relay's `--outbox URL`) likewise under `ujobs.outboxes`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, cast
from urllib.parse import quote, unquote, unquote_plus

from jobs_core.errors import DriverNotInstalledError, DriverUrlInvalidError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from jobs_core.driver import JobDriver

    # Only for the annotation: the outbox package imports this module (`mask_text`).
    from jobs_core.outbox.store import OutboxStore

_SCHEME = re.compile(r"^([a-z][a-z0-9+.-]*)(?::|$)")


#: Query parameters and libpq keywords whose value is a secret.
_SECRET_KEYS: Final = frozenset({"password", "passwd", "pass", "pwd", "sslpassword", "token"})
_KEYWORD_SECRET = re.compile(
    r"(?i)\b(" + "|".join(sorted(_SECRET_KEYS)) + r")(\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)"
)
_MASK: Final = "***"


def userinfo_end(rest: str) -> int:
    """Where the userinfo of `rest` (a URL after `scheme://`) ends: its `@`, or -1 for none.

    Userinfo runs to the LAST `@` before the query, so a password holding an unencoded `@`
    or `/` is still all userinfo; a password holding `?` or `#` is caught by the fallback.
    """
    cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    at = rest.rfind("@", 0, cut)
    if at >= 0:
        return at
    first = rest.find("@")
    if first >= 0 and ":" in rest[:first] and not any(c in rest[:first] for c in "/=&"):
        return first
    return -1


def _mask_query(query: str) -> str:
    pairs = []
    for pair in query.split("&"):
        key, eq, value = pair.partition("=")
        name = unquote_plus(key).strip().lower()
        if eq and name in _SECRET_KEYS:
            value = _MASK
        elif eq and "://" in unquote_plus(value):
            # A URL inside the URL (pg `listen_url=`) carries its own password.
            value = quote(mask_url(unquote_plus(value)), safe=":/@*[],;+$!~'()")
        pairs.append(f"{key}{eq}{value}")
    return "&".join(pairs)


def mask_url(url: str) -> str:
    """`url` with every password in it replaced by `***`, whatever the driver and URL form.

    Masks the userinfo password (up to the last `@` before the host, so an unencoded `@` in a
    password is masked whole), `?password=` and its kin in the query, URLs nested in the query
    (`listen_url=`), and `password=` in a libpq keyword string. Everything else is kept as
    written, so the result still names the host, port, database and options (SPEC §16).
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return _KEYWORD_SECRET.sub(lambda m: f"{m.group(1)}{m.group(2)}{_MASK}", url)
    at = userinfo_end(rest)
    if at >= 0:
        userinfo, rest = rest[:at], rest[at:]
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":" + _MASK
        rest = userinfo + rest
    head, q, query = rest.partition("?")
    if q:
        query, h, fragment = query.partition("#")
        rest = f"{head}?{_mask_query(query)}{h}{fragment}"
    return f"{scheme}://{rest}"


def encode_userinfo(url: str) -> str:
    """`url` with its user and password percent-encoded, split where `mask_url` splits them
    (at the last `@` before the host), so a client library reads the same password and host."""
    scheme, sep, rest = url.partition("://")
    at = userinfo_end(rest) if sep else -1
    if at < 0:
        return url
    user, colon, password = rest[:at].partition(":")
    userinfo = quote(unquote(user), safe="") + colon + quote(unquote(password), safe="")
    return f"{scheme}://{userinfo}{rest[at:]}"


def secrets_of(url: str) -> list[str]:
    """Every password `url` carries (raw and percent-decoded), longest first, for `mask_text`."""
    found: list[str] = []
    _, sep, rest = url.partition("://")
    if not sep:
        for m in _KEYWORD_SECRET.finditer(url):
            found.append(m.group(3).strip("'"))
    else:
        at = userinfo_end(rest)
        if at >= 0 and ":" in rest[:at]:
            found.append(rest[:at].split(":", 1)[1])
        _, q, query = rest.partition("?")
        for pair in query.split("#", 1)[0].split("&") if q else ():
            key, eq, value = pair.partition("=")
            if eq and unquote_plus(key).strip().lower() in _SECRET_KEYS:
                found.append(value)
            elif eq and "://" in unquote_plus(value):
                found.extend(secrets_of(unquote_plus(value)))
    out = {s for s in found if s} | {unquote(s) for s in found if s}
    return sorted((s for s in out if s), key=len, reverse=True)


def mask_text(text: str, *urls: str) -> str:
    """`text` (an error's message, a log line) with every password of `urls` replaced by `***`,
    and any URL in it masked too."""
    for url in urls:
        for secret in secrets_of(url):
            text = text.replace(secret, _MASK)
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text)


_URL_IN_TEXT = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)


def scheme_of(url: str) -> str:
    m = _SCHEME.match(url.strip().lower())
    if m is None:
        raise DriverUrlInvalidError(detail=mask_url(url))
    return m.group(1)


#: The extra that brings each known scheme's driver (named here so the hint survives its absence).
_EXTRA_OF: Final = {
    "postgresql": "pg",
    "postgresql+psycopg": "pg",
    "postgres": "pg",
    "redis": "redis",
    "rediss": "redis",
    "redis+cluster": "redis",
    "rediss+cluster": "redis",
    "unix": "redis",
}


def _install_hint(scheme: str) -> str:
    extra = _EXTRA_OF.get(scheme)
    if extra is None:
        return "install the package that provides it"
    return f"pip install 'ultimat3-jobs[{extra}]'"


def driver_from_url(url: str) -> JobDriver:
    """A new, unopened driver for `url`; `X_DRIVER_URL_INVALID` names an unknown scheme, and
    `X_DRIVER_NOT_INSTALLED` names the extra to install when the driver's libraries are absent."""
    return cast("JobDriver", _load("ujobs.drivers", "driver", url))


def outbox_from_url(url: str) -> OutboxStore:
    """A new, unopened outbox store for `url` (the relay's side), from the `ujobs.outboxes`
    entry points; refused as `driver_from_url` refuses (same codes, same hint)."""
    return cast("OutboxStore", _load("ujobs.outboxes", "outbox store", url))


def entry_points(group: str) -> Iterable[EntryPoint]:
    """The installed entry points of `group` (`importlib.metadata`, imported when first asked:
    a command that opens no store does not pay for it)."""
    from importlib.metadata import entry_points as installed

    return installed(group=group)


#: group -> scheme -> entry point, as last read: reading them walks every installed
#: distribution's metadata, so it is done once a process and again only for a scheme not
#: found (a plugin put on the path since is still found).
_FOUND: dict[str, dict[str, EntryPoint]] = {}


def entry_point_for(group: str, what: str, url: str) -> EntryPoint:
    """The entry point of `group` named after `url`'s scheme; `X_DRIVER_URL_INVALID` (naming
    the schemes there are) when none is installed."""
    scheme = scheme_of(url)
    found = _FOUND.get(group)
    if found is None or scheme not in found:
        found = _FOUND[group] = {ep.name: ep for ep in entry_points(group=group)}
    ep = found.get(scheme)
    if ep is None:
        raise DriverUrlInvalidError(
            f"no installed {what} for scheme {scheme!r} (known: {', '.join(sorted(found))})",
            detail=mask_url(url),
        )
    return ep


def _load(group: str, what: str, url: str) -> object:
    """Call the factory entry point of `group` named after `url`'s scheme."""
    scheme = scheme_of(url)
    ep = entry_point_for(group, what, url)
    try:
        factory = cast(Callable[[str], object], ep.load())
        return factory(url)
    except ValueError as exc:
        # A client library's own URL parser refusing it (a port that is not a number, …).
        raise DriverUrlInvalidError(mask_text(str(exc), url), detail=mask_url(url)) from None
    except ModuleNotFoundError as exc:
        raise DriverNotInstalledError(
            f"the {scheme} {what} needs {exc.name or 'a library'} that is not installed:"
            f" {_install_hint(scheme)}",
            detail=mask_url(url),
        ) from exc
