"""The wait an idle polling loop takes: a floor, doubling on each empty pass, to a ceiling."""

from __future__ import annotations


class IdleBackoff:
    """Floor → doubling → ceiling. `reset()` on work or a wake; `next_ms()` after an empty pass."""

    def __init__(self, floor_ms: int, ceiling_ms: int) -> None:
        self.floor_ms = floor_ms
        self.ceiling_ms = ceiling_ms
        self._current = floor_ms

    def reset(self) -> None:
        self._current = self.floor_ms

    def next_ms(self, ceiling_ms: int | None = None) -> int:
        """The wait before the next pass; the one after it doubles, up to the ceiling."""
        cap = ceiling_ms if ceiling_ms is not None else self.ceiling_ms
        wait = min(self._current, cap)
        self._current = min(self._current * 2, cap)
        return wait
