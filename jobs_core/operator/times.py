"""Times for people: an epoch-ms instant in local time with its age ("3 min ago", "in 5 s")."""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobs_core.errors import OptionInvalidError


def age(ms: int) -> str:
    """A duration in ms as a short age: `850 ms`, `12 s`, `3 min`, `2 h 5 min`, `4 d 3 h`."""
    ms = abs(ms)
    if ms < 1_000:
        return f"{ms} ms"
    s = ms // 1_000
    if s < 60:
        return f"{s} s"
    m = s // 60
    if m < 60:
        return f"{m} min"
    h = m // 60
    if h < 24:
        return f"{h} h {m % 60} min" if m % 60 else f"{h} h"
    d = h // 24
    return f"{d} d {h % 24} h" if h % 24 else f"{d} d"


def relative(ms: int, now_ms: int) -> str:
    """`ms` seen from `now_ms`: `3 min ago`, `in 5 s`, `now`."""
    delta = ms - now_ms
    if abs(delta) < 1_000:
        return "now"
    return f"in {age(delta)}" if delta > 0 else f"{age(delta)} ago"


def local(ms: int) -> str:
    """`ms` in the zone of `use_zone` (else this machine's), to the second, with its offset."""
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return at.astimezone(_ZONE[0]).strftime("%Y-%m-%d %H:%M:%S %z")


def iso_utc(ms: int) -> str:
    """`ms` as an ISO 8601 instant in UTC (`2026-12-06T10:07:09.123Z`): what a `<time>` holds."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


# The zone `local` shows times in (None: this machine's): set once per CLI command by `--tz`.
_ZONE: list[tzinfo | None] = [None]


def use_zone(name: str | None) -> tzinfo | None:
    """Show times in IANA zone `name` from now on (None: this machine's local time), answered;
    `X_OPTION_INVALID` naming `--tz` for a zone zoneinfo does not know."""
    if name is None:
        _ZONE[0] = None
        return None
    try:
        _ZONE[0] = zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise OptionInvalidError(
            f"{name!r} is not a time zone this machine knows (IANA names: Europe/Paris, UTC)",
            detail="--tz",
        ) from None
    return zone


def when(ms: int | None, now_ms: int) -> str:
    """`local(ms) (relative)`, or `-` for no time."""
    if ms is None:
        return "-"
    return f"{local(ms)} ({relative(ms, now_ms)})"
