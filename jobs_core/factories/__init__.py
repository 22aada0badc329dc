"""Factories over `job()`: the sweeps teams otherwise write by hand, each a job underneath.

Each factory answers a `JobHandle` (enqueued, claimed, retried, paused, limited and listed like
any job); its durability is the steps' (`ctx.step`), and what it swept is recorded in the
driver's sweep ledger (the `sweeps` family) by `jobs_core.factories.sweep`. `ledger()` posts
balanced postings, once per key, into the driver's posting ledger (the `postings` family).
"""

from jobs_core.factories.backfill import backfill
from jobs_core.factories.consumers import consumer
from jobs_core.factories.ledger import ledger
from jobs_core.factories.purge import purge
from jobs_core.factories.rows import export_rows, import_rows

__all__ = ["backfill", "consumer", "export_rows", "import_rows", "ledger", "purge"]
