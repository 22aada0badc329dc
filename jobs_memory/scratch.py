"""A scratch store in memory: every `memory` driver is a new, empty store of its own
(`jobs_core.testing.stores`; found through the `memory` entry point)."""

from __future__ import annotations


class MemoryScratch:
    """A new in-process store; it lives in its driver and goes with it."""

    url = "memory"

    async def drop(self) -> None:
        """Nothing to delete: the store is gone with its driver."""


def scratch_store(url: str) -> MemoryScratch:
    """A new in-process scratch store (`memory` holds no server to share)."""
    return MemoryScratch()
