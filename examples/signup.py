"""What the examples' sign-up views accept: an object of an e-mail and a name, each a non-empty
string its table can hold. Shared so every framework refuses the same bodies with a 400."""

from __future__ import annotations

from typing import Any

#: The longest value each field takes (the tables' own bounds).
FIELDS = {"email": 254, "name": 200}


def sign_up_fields(body: Any) -> dict[str, str]:
    """The sign-up's fields, each a non-empty string of at most its bound that Postgres can
    store (UTF-8: no lone surrogate, no NUL), or ValueError naming what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("the body is not a JSON object")
    out: dict[str, str] = {}
    for field, limit in FIELDS.items():
        value = body.get(field)
        if not isinstance(value, str) or not value or len(value) > limit:
            raise ValueError(f"{field} must be a string of 1 to {limit} characters")
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ValueError(f"{field} is not valid text") from None
        if "\x00" in value:
            raise ValueError(f"{field} is not valid text")
        out[field] = value
    return out
