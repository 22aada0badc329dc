"""The worker: claims jobs, runs their bodies, settles them, and drains on a deploy.

One claim loop (one claim per pass over every queue, for all free slots), one heartbeat loop
(every held lease renewed in one call), and one task per held job. Settles go through the
batching `Settler`. Every time is read from the injected clock, so a fake clock drives it all.

One module per phase, each a collaborator with its own state (not a mixin on one `self`, so
each is built and driven alone with a fake clock), handed what it shares (the `held` table, the
counters) by the `Worker` that wires them (`core`):

- `claim` — the claim loop: passes, kicks, the idle backoff, the wake; admits each claimed job
  (`ClaimLoop._admit`, where admission control — leases, limits — goes).
- `run` — one held job's run: its slot, its body (task, thread or process), its deadline and
  signal.
- `outcome` — how a run's end is written: the settle, its tally, the `on_settled` hooks.
- `heartbeat` — lease renewal, progress flush, the registry beat no claim carried.
- `drain` — stop, hand back, abort at the deadline, the bounded teardown.
- `held`, `registry`, `stats`, `outage`, `failure` — the records and helpers they share.

The settle of a run's end sits apart from the run (`outcome`, not `run`): the drain's hand-back,
the claim's buried rows and the settler's fallbacks write endings too, and never run a body.
"""

from jobs_core.lifecycle import STOP_CALL_FLOOR_MS, STOP_SLACK_MS
from jobs_core.worker.core import Worker
from jobs_core.worker.drain import CANCEL_GRACE_MS
from jobs_core.worker.failure import MESSAGE_CHARS, TRACEBACK_BYTES
from jobs_core.worker.heartbeat import HEARTBEAT_RETRY_MS
from jobs_core.worker.outage import (
    OUTAGE_BACKOFF_MAX_MS,
    OUTAGE_BACKOFF_MIN_MS,
    OUTAGE_LOG_EVERY,
    RECLAIM_GRACE_MS,
)
from jobs_core.worker.outcome import ON_SETTLED_TRIES, SETTLE_MARGIN_MS, Observer, WorkerHook
from jobs_core.worker.run import UNKNOWN_NAME_DELAY_MS, UNKNOWN_NAME_WARN_EVERY_MS
from jobs_core.worker.stats import WorkerStats

__all__ = [
    "CANCEL_GRACE_MS",
    "HEARTBEAT_RETRY_MS",
    "MESSAGE_CHARS",
    "ON_SETTLED_TRIES",
    "OUTAGE_BACKOFF_MAX_MS",
    "OUTAGE_BACKOFF_MIN_MS",
    "OUTAGE_LOG_EVERY",
    "RECLAIM_GRACE_MS",
    "SETTLE_MARGIN_MS",
    "STOP_CALL_FLOOR_MS",
    "STOP_SLACK_MS",
    "TRACEBACK_BYTES",
    "UNKNOWN_NAME_DELAY_MS",
    "UNKNOWN_NAME_WARN_EVERY_MS",
    "Observer",
    "Worker",
    "WorkerHook",
    "WorkerStats",
]
