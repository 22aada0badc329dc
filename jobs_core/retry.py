"""The retry policy: attempts, an exponential backoff with a cap, a jitter mode, dead letter."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal, get_args

from jobs_core.errors import OptionInvalidError
from jobs_core.options import count, finite_number

JitterMode = Literal["none", "full", "equal"]


@dataclass(frozen=True, slots=True)
class Retry:
    """How a failed attempt is retried.

    The delay before attempt n+1 is `min(cap_ms, base_ms * factor**(n-1))`, then jittered:
    `none` keeps it, `full` draws uniformly in [0, d], `equal` draws in [d/2, d]. After
    `attempts` attempts the job fails for good: `dead` when `dead_letter`, else `failed`
    (outcome `dropped`).
    """

    attempts: int = 3
    base_ms: int = 1_000
    factor: float = 2.0
    cap_ms: int = 3_600_000
    jitter: JitterMode = "full"
    dead_letter: bool = True

    def __post_init__(self) -> None:
        count(self.attempts, "retry.attempts", minimum=1, maximum=1_000)
        count(self.base_ms, "retry.base_ms", minimum=1, maximum=7 * 24 * 3_600_000)
        finite_number(self.factor, "retry.factor", minimum=1.0, maximum=100.0)
        count(self.cap_ms, "retry.cap_ms", minimum=self.base_ms, maximum=30 * 24 * 3_600_000)
        if self.jitter not in get_args(JitterMode):
            raise OptionInvalidError("must be 'none', 'full' or 'equal'", detail="retry.jitter")
        if not isinstance(self.dead_letter, bool):
            raise OptionInvalidError("must be a bool", detail="retry.dead_letter")

    def delay_ms(self, attempt: int, rng: random.Random) -> int:
        """The wait after failed attempt number `attempt` (1-based), jitter applied."""
        try:
            grown = self.base_ms * self.factor ** max(attempt - 1, 0)
        except OverflowError:  # past a float's range (100.0 ** 155): past any cap too
            grown = math.inf
        raw = min(float(self.cap_ms), grown)
        match self.jitter:
            case "none":
                d = raw
            case "full":
                d = rng.uniform(0, raw)
            case "equal":
                d = raw / 2 + rng.uniform(0, raw / 2)
        return int(d)
