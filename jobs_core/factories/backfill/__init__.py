"""`backfill()`: a declared, batched sweep over a source, durable batch by batch (see
`declare`), its pass (`pass_`), its source (`source`), its throttle (`rate`), the gate
(`gate`), what exists (`registry`), what is pending (`pending`) and the one projection of the
ledger (`inspect`)."""

from jobs_core.factories.backfill.declare import Backfill, BackfillSpec, backfill
from jobs_core.factories.backfill.gate import GateAnswer, gate
from jobs_core.factories.backfill.inspect import (
    BackfillsView,
    EntryView,
    SweepView,
    inspect_backfills,
)
from jobs_core.factories.backfill.pending import Pending, pending
from jobs_core.factories.backfill.registry import (
    BackfillRegistry,
    backfills_of,
    default_backfills,
)

__all__ = [
    "Backfill",
    "BackfillRegistry",
    "BackfillSpec",
    "BackfillsView",
    "EntryView",
    "GateAnswer",
    "Pending",
    "SweepView",
    "backfill",
    "backfills_of",
    "default_backfills",
    "gate",
    "inspect_backfills",
    "pending",
]
