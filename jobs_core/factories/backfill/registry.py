"""What EXISTS: every declared backfill, by name (the ledger says what ran; `pending` is the
difference)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING

from jobs_core.errors import JobDuplicateError

if TYPE_CHECKING:
    from jobs_core.factories.backfill.declare import Backfill


class BackfillRegistry:
    """Names → declared backfills; one name holds one declaration."""

    def __init__(self) -> None:
        self._by_name: dict[str, Backfill] = {}
        self._lock = threading.Lock()

    def add(self, handle: Backfill) -> None:
        """Register `handle`; a different one already under its name is `X_JOB_DUPLICATE`."""
        with self._lock:
            held = self._by_name.get(handle.name)
            if held is not None and held is not handle:
                raise JobDuplicateError(detail=handle.name)
            self._by_name[handle.name] = handle

    def get(self, name: str) -> Backfill | None:
        return self._by_name.get(name)

    def all(self) -> list[Backfill]:
        """Every declared backfill, by name."""
        with self._lock:
            return [self._by_name[n] for n in sorted(self._by_name)]


#: Where `backfill()` registers unless told otherwise.
default_backfills = BackfillRegistry()


def backfills_of(source: ModuleType | Iterable[object] | Mapping[str, object]) -> list[Backfill]:
    """The backfills a module exports (or a collection holds), by name; a name held by two
    different declarations is `X_JOB_DUPLICATE`."""
    from jobs_core.factories.backfill.declare import Backfill

    if isinstance(source, ModuleType):
        values: Iterable[object] = vars(source).values()
    elif isinstance(source, Mapping):
        values = source.values()
    else:
        values = source
    found = BackfillRegistry()
    for value in values:
        if isinstance(value, Backfill):
            found.add(value)
    return found.all()
