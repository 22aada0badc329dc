"""What `webhook()` tells the rest of its process, without the `webhooks` extra: the attempts it
recorded (`ujobs_webhook_attempts_total`) and each declared sender's settings (the dashboard's
`/webhooks` page). The metrics and the dashboard read these; neither loads httpx for them."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from jobs_core.job import JobHandle

#: The outcomes an attempt is counted under (`WebhookAttempt.outcome`).
OUTCOMES: Final = ("delivered", "failed")


class AttemptTally:
    """Attempts this process recorded, by outcome: moved only once the ledger holds the attempt
    (a write whose fence did not hold counts nothing). Thread-safe; never falls."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(OUTCOMES, 0)

    def add(self, outcome: Literal["delivered", "failed"]) -> None:
        with self._lock:
            self._counts[outcome] += 1

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


#: The process's tally: every `webhook()` sender of the process moves it.
ATTEMPTS: Final = AttemptTally()


@dataclass(frozen=True, slots=True)
class Sender:
    """A declared `webhook()` sender as an operator reads it."""

    name: str
    tenant: Literal["org", "none"]
    disable_after: int


# The body function of each declared sender: a handle's `fn` is that function, and a weak key
# lets a dropped declaration go.
_SENDERS: weakref.WeakKeyDictionary[Callable[..., Any], Sender] = weakref.WeakKeyDictionary()


def note_sender(body: Callable[..., Any], sender: Sender) -> None:
    """Remember that `body` is the run of `sender` (`webhook()` calls this as it declares)."""
    _SENDERS[body] = sender


def senders_of(handles: Sequence[JobHandle]) -> list[Sender]:
    """The `webhook()` senders among `handles`, by name."""
    found = (_SENDERS.get(h.fn) for h in handles)
    return sorted((s for s in found if s is not None), key=lambda s: s.name)
