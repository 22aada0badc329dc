"""Numeric option checks shared by every declaration: finite, in range, or refused by name;
and `each_enqueue`, the idempotency key of a job that dedupes nothing by key."""

from __future__ import annotations

import math
import re

from jobs_core.errors import OptionInvalidError
from jobs_core.ids import new_id


def each_enqueue(input: object) -> str:
    """An `idempotency_key` function answering a fresh key at every call: every enqueue of the
    job is a job of its own, as every `.delay()` is in Celery (`@job(idempotency_key=
    each_enqueue)`). Said out loud, since a job without a key function must be given `key=` at
    each enqueue (`X_JOB_KEY_REQUIRED`) rather than silently dedupe nothing.

    What it gives up is the dedupe by key only: the client's own retries of one enqueue call
    still insert once (they resend the same id), and a scheduled task still fires an
    occurrence once (its fire is fenced by the task's watermark)."""
    return f"each:{new_id()}"


def check_clock(clock: object) -> None:
    """Refuse a `clock=` that is no `Clock` (None: the system's): it failed only where it was
    first read — a worker's start, a client's first enqueue — as an AttributeError."""
    from jobs_core.clock import Clock

    if clock is not None and not isinstance(clock, Clock):
        raise OptionInvalidError("must be a Clock (now_ms and sleep_ms), or None", detail="clock")


def ascii_whole(text: str) -> int | None:
    """`text` (spaces around it aside) as a whole number when it is ASCII digits alone, at most
    18 of them; else None. `int` also reads "2_0" as 20, "+2", "-0" and other scripts' digits,
    and raises past 4300 digits."""
    text = text.strip()
    if not (0 < len(text) <= 18 and text.isascii() and text.isdigit()):
        return None
    return int(text)


#: A decimal in ASCII: digits with an optional fraction (`1`, `1.5`, `.5`, `3.`).
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def ascii_decimal(text: str) -> float | None:
    """`text` (spaces around it aside) as a non-negative float when it is ASCII digits with an
    optional fraction, at most 32 characters; else None. `float` also reads "1_0", other
    scripts' digits, signs, exponents, "nan" and "inf"."""
    text = text.strip()
    if len(text) > 32 or not _DECIMAL.fullmatch(text):
        return None
    return float(text)


def finite_number(
    value: object,
    option: str,
    *,
    minimum: float,
    maximum: float = math.inf,
    exclusive_minimum: bool = False,
) -> float:
    """`value` as a float when it is a real, finite number in range; else `X_JOB_OPTION_INVALID`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionInvalidError("must be a number", detail=option)
    try:
        v = float(value)
    except OverflowError:  # an int past a float's range: past any bound too
        v = math.inf if value > 0 else -math.inf
    if not math.isfinite(v):
        raise OptionInvalidError("must be finite", detail=option)
    low_ok = v > minimum if exclusive_minimum else v >= minimum
    if not low_ok or v > maximum:
        bound = f"> {minimum}" if exclusive_minimum else f">= {minimum}"
        raise OptionInvalidError(f"must be {bound} and <= {maximum}", detail=option)
    return v


def count(value: object, option: str, *, minimum: int, maximum: int = 2**31 - 1) -> int:
    """`value` when it is an integer in `[minimum, maximum]`; else `X_JOB_OPTION_INVALID`."""
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and not math.isfinite(value):
            raise OptionInvalidError("must be finite", detail=option)
        raise OptionInvalidError("must be an integer", detail=option)
    if not minimum <= value <= maximum:
        raise OptionInvalidError(f"must be in [{minimum}, {maximum}]", detail=option)
    return value


def seconds_to_ms(value: object, option: str, *, minimum_ms: int = 1) -> int:
    """A positive finite duration in seconds, as whole milliseconds (at least `minimum_ms`)."""
    v = finite_number(value, option, minimum=0.0, exclusive_minimum=True, maximum=7 * 24 * 3600)
    return max(minimum_ms, round(v * 1000))
