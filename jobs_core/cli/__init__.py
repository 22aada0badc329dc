"""`ujobs`: run workers, enqueue, and see and steer every job, on any driver URL.

`base` holds the group and what every command shares; `run` the commands that run jobs (worker,
enqueue, db, demo); `operate` the operator's verbs (jobs, queues, pause, resume, workers,
stats); `backfills` the sweep ledger beside the declared backfills; `consumers` each
consumer's cursor, lag and last turn; `webhooks` the endpoint ledger `webhook()` sends through;
`schedule` the scheduler role and the task listing; `relay` the outbox relay and its backlog;
`dashboard` the web dashboard; `show` how their answers are printed, for people and as JSON.
"""

# Importing the command modules registers their commands on `main`.
from jobs_core.cli import (
    backfills,
    consumers,
    dashboard,
    operate,
    relay,
    run,
    schedule,
    webhooks,
)
from jobs_core.cli.base import DRIVER_ENV, console, main
from jobs_core.cli.run import _print_plan, _retention_text, retention_from

__all__ = [
    "DRIVER_ENV",
    "_print_plan",
    "_retention_text",
    "backfills",
    "console",
    "consumers",
    "dashboard",
    "main",
    "operate",
    "relay",
    "retention_from",
    "run",
    "schedule",
    "webhooks",
]
