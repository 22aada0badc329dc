"""Job and run ids: UUIDv7 strings, time-ordered, so `ORDER BY id` follows creation; and this
machine's name as the worker and relay ids carry it."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Final

import uuid_utils

from jobs_core.jsonform import storable


def new_id() -> str:
    """A fresh UUIDv7 in its canonical 36-character text form."""
    return str(uuid_utils.uuid7())


def host_name() -> str:
    """This machine's name, storable by every store (a name that is not UTF-8 decodes with lone
    surrogates, which are replaced)."""
    return storable(socket.gethostname())


#: The namespace of `derived_id` (a fixed UUID: the same parts name the same id in every
#: process and every release).
DERIVED_NAMESPACE: Final = uuid.UUID("5f0c9a52-6c1e-4d1b-9a57-2f4be8d3c1a7")


def derived_id(*parts: str | int) -> str:
    """A UUIDv5 named by `parts` (their JSON list, so no two lists of parts share a name): the
    same parts always answer the same id — a child of a run's step, a batch's callback — so a
    retry that writes again dedupes on the id instead of writing twice."""
    return str(uuid.uuid5(DERIVED_NAMESPACE, json.dumps(list(parts), ensure_ascii=False)))
