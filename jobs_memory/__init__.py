"""The in-process driver: the embedded default, and the store tests run against."""

from jobs_memory.driver import MemoryDriver

__all__ = ["MemoryDriver"]
