"""Job and run ids: UUIDv7 strings, time-ordered, so `ORDER BY id` follows creation; and this
machine's name as the worker and relay ids carry it."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator, Sequence
from typing import Final, overload

import uuid_utils

from jobs_core.jsonform import storable


def new_id() -> str:
    """A fresh UUIDv7 in its canonical 36-character text form."""
    return str(uuid_utils.uuid7())


class FreshIds(Sequence[str]):
    """`n` ids of `new_id()`, each made when first read and always in position order (reading
    one makes every id before it first), so they sort as their positions, as a list made at
    once would; a later read answers the same id. A batch's ids are so made as its store
    reaches them: a driver that writes in chunks makes a chunk's while the one before it is
    written, not all of them before the first write."""

    __slots__ = ("_made", "_n")

    def __init__(self, n: int) -> None:
        self._n = n
        self._made: list[str] = []

    def _upto(self, end: int) -> list[str]:
        made = self._made
        if end > len(made):
            made += [new_id() for _ in range(end - len(made))]
        return made

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, at: int) -> str: ...
    @overload
    def __getitem__(self, at: slice) -> list[str]: ...
    def __getitem__(self, at: int | slice) -> str | list[str]:
        if isinstance(at, slice):
            span = range(*at.indices(self._n))
            if not span:
                return []
            made = self._upto(max(span[0], span[-1]) + 1)
            if span.step > 0:
                return made[span.start : span.stop : span.step]
            return [made[i] for i in span]
        if not -self._n <= at < self._n:
            raise IndexError("FreshIds index out of range")
        at %= self._n
        return self._upto(at + 1)[at]

    def __iter__(self) -> Iterator[str]:
        return iter(self._upto(self._n))


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
