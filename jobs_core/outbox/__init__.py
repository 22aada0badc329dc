"""The transactional outbox: stage a job in the app's own transaction, a relay publishes it.

`store.py` is the contract of the table the rows wait in, `stage.py` builds a staged row as
`enqueue` would, `relay.py` moves committed rows to the job driver. The stores live with
their backends: `jobs_memory.MemoryOutbox`, `jobs_pg.PgOutbox`.
"""

from jobs_core.outbox.records import OutboxClaim, OutboxRelease, OutboxRow, Staged
from jobs_core.outbox.relay import Relay
from jobs_core.outbox.stage import staged, staged_record
from jobs_core.outbox.store import MAX_OUTBOX_BATCH, OutboxStore, check_staged

__all__ = [
    "MAX_OUTBOX_BATCH",
    "OutboxClaim",
    "OutboxRelease",
    "OutboxRow",
    "OutboxStore",
    "Relay",
    "Staged",
    "check_staged",
    "staged",
    "staged_record",
]
