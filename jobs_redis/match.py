"""The event match on Redis: JSON values turned, in Python, into lines a script compares as text.

Redis's Lua decodes JSON with cjson, which reads `1.0` as `1` and rounds integers past 2**53,
so no script can decide `jobs_core.semantics.json_equal` from decoded values. Instead the driver
hands every script the *match lines* of a JSON object, computed here at publish, wait and find
time: one line per top-level key, `json(key) TAB canonical(value)`, sorted, joined by newlines.
`canonical` maps two values to the same text exactly when `json_equal` holds, and neither part
of a line can hold a raw TAB or newline (ASCII-escaped JSON never does). Therefore

    event_matches(match, data)  ==  every line of lines(match) is a line of lines(data)

which is all `lua/includes/match.lua` checks (a value that is not an object has no lines: an
empty match takes it, a non-empty one never does). `tests/redis/test_event_match_property.py`
proves the equality against `event_matches` on generated JSON.
"""

from __future__ import annotations

import json

from jobs_core.jsonform import loads


def canonical(value: object) -> str:
    """The text of `value`'s `json_equal` class: equal texts exactly for `json_equal` values.

    Booleans are `true`/`false` (never numbers). A number equal to an integer is that integer's
    digits — so `1`, `1.0` and `1e0` meet, and `2**53 + 1` stays apart from `2.0**53` as
    Python's exact `int == float` keeps them — any other float its shortest round-trip `repr`
    (`inf` for an overflowed literal). Strings are ASCII-escaped JSON; arrays keep their order;
    objects sort their keys.
    """
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ",".join(json.dumps(k) + ":" + canonical(value[k]) for k in sorted(value))
        return "{" + inner + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def match_lines(value: object) -> str:
    """The match lines of a decoded JSON value: one `json(key) TAB canonical(value)` per key of
    an object, sorted, newline-joined; "" for an empty object and for any non-object."""
    if not isinstance(value, dict):
        return ""
    return "\n".join(sorted(json.dumps(k) + "\t" + canonical(v) for k, v in value.items()))


def lines_of_text(json_text: str) -> str:
    """`match_lines` of JSON text (already checked by the `JobDriver` public method)."""
    return match_lines(loads(json_text))
