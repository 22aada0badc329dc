"""Factories over `job()`: the sweeps teams otherwise write by hand, each a job underneath.

Each factory answers a `JobHandle` (enqueued, claimed, retried, paused, limited and listed like
any job); its durability is the steps' (`ctx.step`), and what it swept is recorded in the
driver's sweep ledger (the `sweeps` family) by `jobs_core.factories.sweep`. `ledger()` posts
balanced postings, once per key, into the driver's posting ledger (the `postings` family).
`consumer()` reads a source in turns, its cursor in the `consumers` family. `webhook()` sends
one signed event to one endpoint, through the endpoint ledger (the `webhooks` family); it and
its helpers load on first use, since they need the `webhooks` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobs_core.factories.backfill import backfill
from jobs_core.factories.consumers import consumer
from jobs_core.factories.ledger import ledger
from jobs_core.factories.purge import purge
from jobs_core.factories.rows import export_rows, import_rows

if TYPE_CHECKING:
    from jobs_core.factories.webhooks import (
        enable_endpoint,
        register_endpoint,
        webhook,
        webhook_event,
    )

# -- webhooks --
#: Names `jobs_core.factories.webhooks` answers on first use (httpx and standardwebhooks are the
#: `webhooks` extra: importing the other factories never needs them).
_WEBHOOK_NAMES = frozenset({"enable_endpoint", "register_endpoint", "webhook", "webhook_event"})


def __getattr__(name: str) -> Any:
    if name in _WEBHOOK_NAMES:
        from jobs_core.factories import webhooks

        return getattr(webhooks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "backfill",
    "consumer",
    "enable_endpoint",
    "export_rows",
    "import_rows",
    "ledger",
    "purge",
    "register_endpoint",
    "webhook",
    "webhook_event",
]
