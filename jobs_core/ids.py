"""Job and run ids: UUIDv7 strings, time-ordered, so `ORDER BY id` follows creation; and this
machine's name as the worker and relay ids carry it."""

from __future__ import annotations

import socket

import uuid_utils

from jobs_core.jsonform import storable


def new_id() -> str:
    """A fresh UUIDv7 in its canonical 36-character text form."""
    return str(uuid_utils.uuid7())


def host_name() -> str:
    """This machine's name, storable by every store (a name that is not UTF-8 decodes with lone
    surrogates, which are replaced)."""
    return storable(socket.gethostname())
