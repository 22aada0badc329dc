"""The JSON form: how inputs, results and progress are stored on every backend.

A value is converted once, at the edge, to compact JSON text; every driver stores and returns
that text (or a JSON type that reads back equal), so a `datetime` in is an ISO string out
everywhere. Text no store can hold is refused, raw or escaped, in every string and key: a NUL
(Postgres text cannot hold one) and a lone surrogate (half of a UTF-16 pair, as
`json.loads('"\\ud83d"')` yields: UTF-8 cannot encode it, so neither Postgres nor Redis can
store it). Every value read back from a store is therefore storable again.

Bounds, the same on every driver: a JSON text is at most `MAX_JSON_BYTES` UTF-8 bytes and nests
arrays and objects at most `MAX_JSON_DEPTH` deep. A value past either is refused with a typed
error (never a bare `RecursionError`), before anything is written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import json.scanner
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias, cast

from jobs_core.errors import InputInvalidError, RecordInvalidError

#: The most UTF-8 bytes one stored JSON text (an input, a result, a progress value) may hold.
MAX_JSON_BYTES: Final = 1_048_576
#: The deepest nesting of arrays and objects a stored JSON value may have.
MAX_JSON_DEPTH: Final = 100

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None


def _plain(value: Any, path: str) -> JsonValue:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputInvalidError("a number is not finite", detail=path or "$")
        return value
    if isinstance(value, str):
        why = unstorable(value)
        if why is not None:
            raise InputInvalidError(f"a string holds {why}", detail=path or "$")
        return value
    if isinstance(value, enum.Enum):
        return _plain(value.value, path)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise InputInvalidError("a number is not finite", detail=path or "$")
        return str(value)
    if isinstance(value, Mapping):
        out: dict[str, JsonValue] = {}
        for k, v in value.items():
            key = _key(k, path)
            out[key] = _plain(v, f"{path}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value), path)
    raise InputInvalidError(f"a {type(value).__name__} has no JSON form", detail=path or "$")


def _key(k: object, path: str) -> str:
    # Object keys become strings exactly as `json.dumps` makes them (1 -> "1", None -> "null").
    if isinstance(k, str):
        key = k
    elif k is None or isinstance(k, bool | int | float):
        key = json.dumps(k, allow_nan=False) if isinstance(k, bool | float) or k is None else str(k)
    else:
        raise InputInvalidError("an object key is not a string or a number", detail=f"{path}.{k!r}")
    why = unstorable(key)
    if why is not None:
        raise InputInvalidError(f"an object key holds {why}", detail=path or "$")
    return key


def _default(value: Any) -> Any:
    """What the fast encoder asks for a value JSON has no type for (see `_plain`)."""
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, decimal.Decimal) and value.is_finite():
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    raise TypeError(type(value).__name__)


_ENCODER = json.JSONEncoder(
    separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_default
)
#: `_ENCODER`'s C encoder made once: `JSONEncoder.encode` builds a new one on every call, which
#: costs twice the encoding of a small input. It keeps no circular-reference markers (a dict
#: reused across calls would keep stale ones after a failure): a cycle then ends in the
#: RecursionError that `dumps` refuses as too deep, the answer it gave a cycle before.
_C_ENCODE: Final = (
    json.encoder.c_make_encoder(  # type: ignore[attr-defined]
        None, _default, json.encoder.encode_basestring, None, ":", ",", False, False, False
    )
    if json.encoder.c_make_encoder is not None  # type: ignore[attr-defined]
    else None
)


def _encode(value: Any) -> str:
    """`_ENCODER.encode(value)`, through the C encoder made once when there is one."""
    if _C_ENCODE is None:
        return _ENCODER.encode(value)
    return "".join(_C_ENCODE(value, 0))


#: A `\u0000` escape the encoder wrote for a NUL: preceded by an even run of backslashes (an odd
#: run means the backslash itself was escaped and the text only spells the six characters).
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def holds_nul(text: str) -> bool:
    """True when JSON text encodes a NUL character (raw, or as a `\u0000` escape)."""
    return "\x00" in text or ("\\u0000" in text and _NUL_ESCAPE.search(text) is not None)


#: A surrogate code point: in a Python string it is always unpaired (a pair is one character).
_SURROGATE = re.compile("[\ud800-\udfff]")
#: One escape of JSON text, whole: `\\` is consumed as a pair, so a match never starts at an
#: escaped backslash.
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|.)", re.DOTALL)
#: A `\uD800`..`\uDFFF` escape, possibly preceded by an escaped backslash: worth a closer look.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def holds_surrogate(text: str) -> bool:
    """True when `text` holds a surrogate code point, which UTF-8 (so no store) can encode."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def unstorable(text: str) -> str | None:
    """Why no store can hold `text` as it is (a NUL, a lone surrogate), or None when every one
    can. For names, keys, ids and every other plain text crossing the driver boundary."""
    if "\x00" in text:
        return "a NUL character"
    if holds_surrogate(text):
        return "a lone surrogate (half of a UTF-16 pair)"
    return None


def storable(text: str) -> str:
    """`text` made storable by every store: each NUL becomes `\\0` and each lone surrogate
    U+FFFD. For text this library writes from what it did not choose (an exception's message,
    a traceback), which must never make its settle unstorable."""
    if "\x00" in text:
        text = text.replace("\x00", "\\0")
    return _SURROGATE.sub("\ufffd", text) if holds_surrogate(text) else text


def _escapes_lone_surrogate(text: str) -> bool:
    """True when JSON text spells a lone surrogate as an escape (`"\\ud83d"`); a high escape
    followed at once by a low one is a pair, one character, and fine."""
    if "\\u" not in text or _SURROGATE_ESCAPE.search(text) is None:
        return False
    high_ends = -1  # where the last unpaired high surrogate escape ended
    for m in _ESCAPE.finditer(text):
        hex4 = m.group(1)
        code = int(hex4, 16) if hex4 is not None else -1
        if high_ends >= 0:
            if m.start() == high_ends and 0xDC00 <= code <= 0xDFFF:
                high_ends = -1
                continue
            return True
        if 0xD800 <= code <= 0xDBFF:
            high_ends = m.end()
        elif 0xDC00 <= code <= 0xDFFF:
            return True
    return high_ends >= 0


def utf8_length(text: str) -> int:
    """The length of `text` in UTF-8 bytes (a lone surrogate counts as 3)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


#: Strings (which may hold brackets) go first, then everything but the brackets.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_depth_exceeds(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when JSON text nests arrays and objects deeper than `limit`.

    Counting first keeps the common case to one C-speed pass; only a text with more brackets
    than the limit is reduced, innermost pairs first, at most `limit` times.
    """
    if text.count("[") + text.count("{") <= limit:
        return False
    shape = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not shape:
            return False
        reduced = shape.replace("[]", "").replace("{}", "")
        if reduced == shape:  # not balanced JSON: the decoder will refuse it
            return False
        shape = reduced
    return bool(shape)


def _check_bounds(
    text: str, what: str, error: type[InputInvalidError | RecordInvalidError]
) -> None:
    if len(text) * 4 > MAX_JSON_BYTES and utf8_length(text) > MAX_JSON_BYTES:
        raise error(f"the JSON text is longer than {MAX_JSON_BYTES} bytes", detail=what)
    if json_depth_exceeds(text):
        raise error(f"the JSON value nests deeper than {MAX_JSON_DEPTH} levels", detail=what)


def to_json_value(value: Any) -> JsonValue:
    """The plain JSON value `value` stands for; `InputInvalidError` names the first bad path."""
    return _plain(value, "")


def dumps(value: Any) -> str:
    """`value` as compact JSON text, refused with `X_JOB_INPUT_INVALID` when it has no JSON form
    or holds text no store can hold (a NUL, a lone surrogate) in a string or a key.

    The encoder runs first; only a value it refuses, or one holding such text, is walked again
    to name the offending path, so a good value is converted once. (The encoder writes a NUL
    as an escape and a lone surrogate raw, so one look at the text finds either.)
    """
    try:
        text = _encode(value)
    except RecursionError:
        raise InputInvalidError(
            f"the JSON value nests deeper than {MAX_JSON_DEPTH} levels", detail="$"
        ) from None
    except (TypeError, ValueError):
        text = None
    if text is None or holds_nul(text) or holds_surrogate(text):
        try:
            _plain(value, "")  # raises, naming the path
        except RecursionError:
            raise InputInvalidError(
                f"the JSON value nests deeper than {MAX_JSON_DEPTH} levels", detail="$"
            ) from None
        raise InputInvalidError("the value has no JSON form", detail="$")
    _check_bounds(text, "$", InputInvalidError)
    global _last_made
    _last_made = text
    return text


#: The text `dumps` answered last: JSON every store can hold, by construction (`dumps_many`'s
#: batch says so with `NewJobs.dumped`). `check_text` of that very object — a record made from
#: it a moment ago, reaching the driver — answers at once; any other text, equal or not, is
#: looked at. (An identity, so a race of threads can only make a text be looked at again.)
_last_made: str | None = None


def dumps_many(values: Sequence[Any]) -> list[str] | None:
    """`dumps` of each value, or None when any of them needs `dumps`' own look (a value it
    would refuse, or whose text holds a NUL, a surrogate or more brackets or bytes than a
    glance clears): the caller then calls `dumps` on each in turn, so the refusal raised is
    the one of the first value refused, as with one call per value.

    For a batch: the texts are written by the C encoder and searched for a NUL and a surrogate
    once, all together, instead of once each.
    """
    if _C_ENCODE is None:
        return None
    encode, join = _C_ENCODE, "".join
    try:
        texts = [join(encode(value, 0)) for value in values]
    except (TypeError, ValueError, RecursionError):
        return None
    whole = join(texts)
    if holds_nul(whole) or holds_surrogate(whole):
        return None
    quarter = MAX_JSON_BYTES // 4
    for text in texts:
        # `_check_bounds`' quick tests: only a text failing one is looked at closer.
        if (len(text) > quarter or text.count("[") + text.count("{") > MAX_JSON_DEPTH) and (
            utf8_length(text) > MAX_JSON_BYTES or json_depth_exceeds(text)
        ):
            return None
    return texts


def loads(text: str) -> JsonValue:
    """Parse JSON text this library wrote (any JSON text `json.loads` takes, the same way)."""
    if type(text) is str:
        # `json.loads`'s own scanner, without the wrapper's calls around it (most of the cost
        # of a small input, parsed on every run); text it does not take whole as it is (blank
        # around it, or not JSON) goes the usual way, which parses or raises as ever.
        try:
            value, end = _READ(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return cast(JsonValue, value)
    result: JsonValue = json.loads(text)
    return result


def check_text(text: str, what: str) -> None:
    """Refuse `text` unless it is JSON text every store can hold (`X_JOB_RECORD_INVALID`): no
    NUL and no lone surrogate, raw or escaped, within the size and depth bounds."""
    if text is _last_made:
        return
    if holds_nul(text):
        raise RecordInvalidError("JSON text holds a NUL character", detail=what)
    if holds_surrogate(text) or _escapes_lone_surrogate(text):
        raise RecordInvalidError(
            "JSON text holds a lone surrogate (half of a UTF-16 pair)", detail=what
        )
    _check_bounds(text, what, RecordInvalidError)
    try:
        # The scanner alone answers for text with no surrounding whitespace (what `dumps`
        # writes): a whole value that ends where the text ends. Anything else, `decode` judges.
        if _scan_end(text) != len(text):
            _STRICT.decode(text)
    except RecursionError:
        raise RecordInvalidError("the JSON value nests too deep", detail=what) from None
    except ValueError as exc:
        raise RecordInvalidError("not JSON text", detail=what) from exc


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


#: A decoder that refuses NaN and Infinity (made once: building one per call costs more than
#: decoding a small payload).
_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)
#: `_STRICT`'s scanner (the C one when there is one): one value at an index, no whitespace.
_SCAN: Final = json.scanner.make_scanner(_STRICT)  # type: ignore[arg-type]  # typeshed: any decoder


#: `json.loads`'s own decoder's scanner (NaN and Infinity read as floats, as it reads them).
_READ: Final = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _scan_end(text: str) -> int:
    """Where the JSON value at the start of `text` ends (-1: no value starts there)."""
    try:
        end: int = _SCAN(text, 0)[1]
    except StopIteration:
        return -1
    return end
