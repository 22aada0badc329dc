"""The `rate=` throttle: batches per second as an interval between batch starts, and the wait
for a batch's turn.

The wait is spent INSIDE the batch's step and measured from the previous batch's start as
that batch's step STORED it, so a run that restarts (a crash, a deploy, a retry) waits out what
is left of the interval instead of bursting: the stored time survives the process.
"""

from __future__ import annotations

import math
from typing import Final

from jobs_core.clock import Clock
from jobs_core.context import CancelSignal
from jobs_core.errors import BackfillDeclarationInvalidError

#: The fastest throttle: one batch per millisecond.
MAX_RATE: Final = 1_000.0
#: The slowest: one batch a day.
MIN_RATE: Final = 1 / 86_400


def interval_ms(rate: object) -> int | None:
    """The least time between two batch starts for `rate` batches per second (None: no
    throttle); a rate that is not a finite number in [`MIN_RATE`, `MAX_RATE`] is refused."""
    if rate is None:
        return None
    if (
        isinstance(rate, bool)
        or not isinstance(rate, int | float)
        # The bounds alone: they refuse NaN and infinities, and an int past a float's range
        # (which `math.isfinite` cannot convert) with them.
        or not MIN_RATE <= rate <= MAX_RATE
    ):
        raise BackfillDeclarationInvalidError(
            f"batches per second: a finite number from {MIN_RATE:.3g} (one a day) to {MAX_RATE:g}",
            detail="rate",
        )
    return math.ceil(1000 / rate)


async def wait_turn(
    clock: Clock, signal: CancelSignal, previous_ms: int | None, interval: int | None
) -> None:
    """Return once `interval` ms have passed since `previous_ms` (the last batch's stored
    start) on `clock`; at once without either. A run whose signal fired waits no more: the
    worker cancels its body's task, which ends the sleep, and a fired signal is raised here."""
    signal.raise_if_cancelled()
    if interval is None or previous_ms is None:
        return
    left = previous_ms + interval - clock.now_ms()
    if left > 0:
        await clock.sleep_ms(left)
        signal.raise_if_cancelled()
