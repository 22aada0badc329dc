"""The `memory` URL scheme, and its scratch store for the `ujobs` test fixture."""

from __future__ import annotations

from jobs_memory.driver import MemoryDriver
from jobs_memory.scratch import scratch_store

__all__ = ["from_url", "scratch_store"]


def from_url(url: str) -> MemoryDriver:
    """A fresh, empty in-process driver (`memory` or `memory://`)."""
    return MemoryDriver()
