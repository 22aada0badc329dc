"""Job and run ids: UUIDv7 strings, time-ordered, so `ORDER BY id` follows creation."""

from __future__ import annotations

import uuid_utils


def new_id() -> str:
    """A fresh UUIDv7 in its canonical 36-character text form."""
    return str(uuid_utils.uuid7())
