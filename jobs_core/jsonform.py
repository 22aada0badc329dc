"""The JSON form: how inputs, results and progress are stored on every backend.

A value is converted once, at the edge, to compact JSON text; every driver stores and returns
that text (or a JSON type that reads back equal), so a `datetime` in is an ISO string out
everywhere. NUL characters are refused because Postgres text and jsonb cannot hold them.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any, TypeAlias

from jobs_core.errors import InputInvalidError

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
        if "\x00" in value:
            raise InputInvalidError("a string holds a NUL character", detail=path or "$")
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
            if not isinstance(k, str):
                raise InputInvalidError("an object key is not a string", detail=f"{path}.{k!r}")
            if "\x00" in k:
                raise InputInvalidError("an object key holds a NUL character", detail=path)
            out[k] = _plain(v, f"{path}.{k}")
        return out
    if isinstance(value, list | tuple):
        return [_plain(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _plain(dataclasses.asdict(value), path)
    raise InputInvalidError(f"a {type(value).__name__} has no JSON form", detail=path or "$")


def to_json_value(value: Any) -> JsonValue:
    """The plain JSON value `value` stands for; `InputInvalidError` names the first bad path."""
    return _plain(value, "")


def dumps(value: Any) -> str:
    """`value` as compact JSON text, refused with `X_JOB_INPUT_INVALID` when it has no JSON form."""
    return json.dumps(_plain(value, ""), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def loads(text: str) -> JsonValue:
    """Parse JSON text this library wrote."""
    result: JsonValue = json.loads(text)
    return result


def check_text(text: str, what: str) -> None:
    """Refuse `text` unless it is JSON text with no NUL character (`X_JOB_RECORD_INVALID`)."""
    from jobs_core.errors import RecordInvalidError

    if "\x00" in text or "\\u0000" in text:
        raise RecordInvalidError("JSON text holds a NUL character", detail=what)
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise RecordInvalidError("not JSON text", detail=what) from exc


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")
