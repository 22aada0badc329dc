"""The `memory` URL scheme."""

from __future__ import annotations

from jobs_memory.driver import MemoryDriver


def from_url(url: str) -> MemoryDriver:
    """A fresh, empty in-process driver (`memory` or `memory://`)."""
    return MemoryDriver()
