"""The in-process driver and outbox: the reference semantics, for tests and the embedded default."""

from jobs_memory.driver import MemoryDriver
from jobs_memory.outbox import MemoryOutbox, MemoryTx

__all__ = ["MemoryDriver", "MemoryOutbox", "MemoryTx"]
