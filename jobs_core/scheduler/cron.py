"""When a cron expression fires, as instants, in a time zone, across its DST transitions.

The expression is read by croniter over NAIVE wall-clock times; this module alone maps a wall
time to an instant, so the daylight-saving rules are ours and written down once:

- a wall time that does not exist (the hour skipped in spring) fires once, at the first valid
  instant after the gap — the transition itself (02:30 Europe/Paris on the last Sunday of
  March fires at 03:00 CEST). Several skipped wall times collapse into that one instant;
- a wall time that occurs twice (the hour repeated in autumn) fires once, at its FIRST
  occurrence (02:30 CEST, not 02:30 CET).

The mapping is monotonic (a later wall time never maps to an earlier instant), so occurrences
are a sorted set of instants: `next_after` and `latest_until` walk it in either direction.

An expression names the same instants at every read, on every scheduler: croniter's random
fields (`R`) are refused, its hashed ones (`H`) are hashed from a fixed id (a task's name), and
a year field (a schedule that stops) is refused. Every other croniter form is a pure function
of the wall time: names, `?`, `L`, `#`, `W`, steps and the `@` aliases.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from typing import TYPE_CHECKING, Final

from jobs_core.errors import TaskCronInvalidError, TaskTzInvalidError, shown

if TYPE_CHECKING:
    # Imported where a cron is read: croniter and dateutil cost every process ~15 ms at
    # import (each `ujobs` verb, worker and relay), and most declare no cron task.
    from croniter import croniter

_UTC: Final = dt.UTC
#: Cron has whole-second resolution: occurrences are whole seconds, in milliseconds.
_SECOND_MS: Final = 1000
#: Past any repeated wall-clock span (the longest DST shift anywhere is 2 h, Troll).
_FOLD_MARGIN: Final = dt.timedelta(hours=3)
#: croniter's own aliases, which stand for 5-field expressions.
_ALIASES: Final = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
_FIELDS: Final = {
    5: ("minute", "hour", "day-of-month", "month", "day-of-week"),
    6: ("second", "minute", "hour", "day-of-month", "month", "day-of-week"),
    7: ("second", "minute", "hour", "day-of-month", "month", "day-of-week", "year"),
}
#: A field croniter draws a value for: `R` at random at every read, `H` from a hash of an id
#: (its `hash_expression_re`, which matches a whole field only).
_DRAWN: Final = re.compile(r"^(?P<kind>[hr])(\(\d+-\d+\))?(/\d+)?$", re.ASCII | re.IGNORECASE)


def zone(tz: object) -> zoneinfo.ZoneInfo:
    """The IANA zone named `tz`; `X_TASK_TZ_INVALID` when missing or unknown."""
    if not isinstance(tz, str) or not tz.strip():
        raise TaskTzInvalidError("tz is required: an IANA zone name such as 'Europe/Paris'")
    try:
        return zoneinfo.ZoneInfo(tz)
    # OSError: zoneinfo opens the name as a path (a directory of the database, a name past a
    # file name's length).
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise TaskTzInvalidError(f"no time zone named {tz[:200]!r}", detail=tz[:200]) from exc


class CronSchedule:
    """The instants a cron expression names in one zone, the same at every read.

    `expr` has 5 fields (minute hour day-of-month month day-of-week), or 6 with SECONDS FIRST
    (as Quartz, Spring and node-cron read six), or one of croniter's aliases (`@daily`, ...).
    An `H` field takes a value hashed from `hash_id` (a task passes its name). Refused
    (`X_TASK_CRON_INVALID`, naming the field) when croniter cannot read it, it never fires, a
    field is random (`R`), hashed with no `hash_id`, or a year (a seventh field).
    """

    def __init__(self, expr: object, tz: object, *, hash_id: str | None = None) -> None:
        self.tz = zone(tz)
        if not isinstance(expr, str) or not expr.strip():
            raise TaskCronInvalidError("cron must be a non-empty string", detail=shown(expr))
        self.expr = " ".join(expr.split())
        fields = self.expr.split(" ")
        if len(fields) == 1 and self.expr.lower() in _ALIASES:
            self._seconds = False
        elif len(fields) in (5, 6):
            self._seconds = len(fields) == 6
        elif len(fields) == 7:
            # croniter would read a year: a schedule that stops firing has no next occurrence.
            raise TaskCronInvalidError(
                f"the year field {fields[6]!r} is not taken: give 5 fields (minute first) or 6"
                " (seconds first); a one-off is an enqueue with run_at",
                detail=self.expr,
            )
        else:
            raise TaskCronInvalidError(
                f"{len(fields)} fields: give 5 (minute first) or 6 (seconds first)",
                detail=self.expr,
            )
        #: Passed to croniter only when a field is hashed: with an id, croniter reads its
        #: aliases as hashed times too (`@daily` would no longer be midnight).
        self._hash_id: bytes | None = None
        for name, value in zip(_FIELDS.get(len(fields), ()), fields, strict=False):
            drawn = _DRAWN.match(value)
            if drawn is None:
                continue
            if drawn["kind"].lower() == "r":
                raise TaskCronInvalidError(
                    f"the {name} field {value!r} is random: croniter draws it anew at every"
                    " read, so each read (and each scheduler) would fire at other times;"
                    " write the value, or `H` for one hashed from the task's name",
                    detail=self.expr,
                )
            if hash_id is None:
                raise TaskCronInvalidError(
                    f"the {name} field {value!r} is hashed: it needs an id to hash (task()"
                    " gives its name)",
                    detail=self.expr,
                )
            self._hash_id = hash_id.encode("utf-8")
        from croniter import croniter

        try:
            ok = croniter.is_valid(
                self.expr, hash_id=self._hash_id, second_at_beginning=self._seconds
            )
        except Exception:  # croniter raises on some inputs it cannot classify
            ok = False
        if not ok:
            raise TaskCronInvalidError("croniter cannot read it", detail=self.expr)
        try:
            self._walk(dt.datetime(2000, 1, 1)).get_next(dt.datetime)
        except Exception as exc:  # a date that never comes (`0 0 30 2 *`)
            raise TaskCronInvalidError("it never fires", detail=self.expr) from exc

    @property
    def has_seconds(self) -> bool:
        """Whether the expression names seconds (six fields): its fires are shown to the second."""
        return self._seconds

    def __repr__(self) -> str:
        return f"CronSchedule({self.expr!r}, {self.tz.key!r})"

    def next_after(self, after_ms: int) -> int:
        """The first occurrence strictly after `after_ms`."""
        walk = self._walk(self._wall(after_ms))
        while True:
            at = self.instant(walk.get_next(dt.datetime))
            if at > after_ms:
                return at

    def latest_until(self, until_ms: int) -> int:
        """The last occurrence at or before `until_ms`."""
        start = self._wall(until_ms) + dt.timedelta(seconds=1)
        if self._ambiguous_near(until_ms):
            # Wall times of a repeated span map to its first pass, before `until_ms` even
            # when they read later than it: start the walk past the span.
            start += _FOLD_MARGIN
        walk = self._walk(start)
        while True:
            at = self.instant(walk.get_prev(dt.datetime))
            if at <= until_ms:
                return at

    def local(self, at_ms: int) -> dt.datetime:
        """`at_ms` as an aware datetime in this schedule's zone."""
        return dt.datetime.fromtimestamp(at_ms / 1000, self.tz)

    def instant(self, wall: dt.datetime) -> int:
        """Epoch ms of a naive wall time of this zone, by the module's DST rules."""
        first = wall.replace(tzinfo=self.tz, fold=0)
        second = wall.replace(tzinfo=self.tz, fold=1)
        if first.utcoffset() == second.utcoffset():
            return _ms(first)
        if first.astimezone(_UTC).astimezone(self.tz).replace(tzinfo=None) == wall:
            return _ms(first)  # repeated: the first pass (fold 0)
        # Skipped: fold 1 reads it with the later offset, fold 0 with the earlier; the
        # transition lies between the two readings. Offsets change on whole seconds.
        lo, hi = _ms(second) // _SECOND_MS, _ms(first) // _SECOND_MS
        after = second.utcoffset()
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if dt.datetime.fromtimestamp(mid, self.tz).utcoffset() == after:
                hi = mid
            else:
                lo = mid
        return hi * _SECOND_MS

    def _walk(self, start: dt.datetime) -> croniter:
        from croniter import croniter

        return croniter(self.expr, start, hash_id=self._hash_id, second_at_beginning=self._seconds)

    def _wall(self, at_ms: int) -> dt.datetime:
        """The naive wall time of `at_ms`, to the second below."""
        return dt.datetime.fromtimestamp(at_ms // _SECOND_MS, self.tz).replace(tzinfo=None)

    def _ambiguous_near(self, at_ms: int) -> bool:
        """Whether the offset changes within the margin around `at_ms` (a transition near)."""
        margin = int(_FOLD_MARGIN.total_seconds())
        s = at_ms // _SECOND_MS
        offsets = {
            dt.datetime.fromtimestamp(s + d, self.tz).utcoffset() for d in (-margin, 0, margin)
        }
        return len(offsets) > 1


def _ms(at: dt.datetime) -> int:
    return int(at.timestamp()) * _SECOND_MS


__all__ = ["CronSchedule", "zone"]
