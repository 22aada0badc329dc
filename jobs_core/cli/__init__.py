"""`ujobs`: run workers, enqueue, and see and steer every job, on any driver URL.

`base` holds the group and what every command shares; `run` the commands that run jobs (worker,
enqueue, db, demo); `operate` the operator's verbs (jobs, queues, pause, resume, workers,
stats); `backfills` the sweep ledger beside the declared backfills; `consumers` each
consumer's cursor, lag and last turn; `webhooks` the endpoint ledger `webhook()` sends through;
`schedule` the scheduler role and the task listing; `relay` the outbox relay and its backlog;
`dashboard` the web dashboard; `show` how their answers are printed, for people and as JSON.
"""

from typing import TYPE_CHECKING, Any

from jobs_core.cli.base import DRIVER_ENV, console, main

if TYPE_CHECKING:
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
    from jobs_core.cli.run import _print_plan, _retention_text, retention_from

#: Names this package gives from `run` (imported on first use, as the command modules are:
#: `main` imports a command's module when the command is looked up).
_FROM_RUN = frozenset({"_print_plan", "_retention_text", "retention_from"})


if not TYPE_CHECKING:  # as in `jobs_core`: unseen by type checkers, which see the imports above

    def __getattr__(name: str) -> Any:
        import importlib

        if name in _FROM_RUN:
            return getattr(importlib.import_module("jobs_core.cli.run"), name)
        from jobs_core import submodule

        return submodule(__name__, name)


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
