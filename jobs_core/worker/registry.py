"""One worker's registry row: the beat that announces it (and keeps it listed), and when the next
one is due. On a driver without the registry (`Capabilities.workers`) no beat is ever due: the
worker runs unannounced, and operator views redact by the caller's declarations alone."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Final

from jobs_core.ids import host_name
from jobs_core.job import JobHandle
from jobs_core.records import WorkerBeat

#: A due time no clock reaches.
NEVER: Final = 2**63


class Registry:
    """The beat rides a claim when one is due (a claim is proof of life); the heartbeat sends it
    alone only when no claim carried it. `sent` moves the due time on.

    The row says what the worker runs: its queues, its concurrency, and each job it declares
    with its queue and its sensitive fields — what operator views redact inputs by (a name no
    live worker declares is shown redacted whole).
    """

    def __init__(
        self,
        worker_id: str,
        queues: tuple[str, ...],
        concurrency: int,
        ttl_ms: int,
        handles: Sequence[JobHandle] = (),
        *,
        enabled: bool = True,
    ) -> None:
        self._worker_id = worker_id
        self._ttl_ms = ttl_ms
        self._every_ms = max(1, ttl_ms // 3)
        #: Whether the driver keeps a registry (else nothing here is ever sent).
        self.enabled = enabled
        #: When the next beat is due (the worker's clock); 0 until the worker announced itself,
        #: never when there is no registry.
        self.next_at = 0 if enabled else NEVER
        self._info = json.dumps(
            {
                "host": host_name(),
                "pid": os.getpid(),
                "queues": list(queues),
                "concurrency": concurrency,
                "jobs": {
                    h.name: {"queue": h.queue, "sensitive": sorted(h.sensitive)}
                    for h in sorted(handles, key=lambda h: h.name)
                },
            },
            ensure_ascii=False,
        )

    def beat(self, now: int) -> WorkerBeat:
        return WorkerBeat(self._worker_id, self._info, self._ttl_ms, now)

    def sent(self, now: int) -> None:
        """A beat landed at `now`: the next is due one interval later."""
        if self.enabled:
            self.next_at = now + self._every_ms
