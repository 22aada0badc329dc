"""Scheduled tasks: `task()` declares one, `Scheduler` fires them while it leads.

- `cron` — when an expression fires, as instants, across DST (the rules are written there);
- `task` — the declaration, its registry, the `Occurrence` an input function sees;
- `role` — the scheduler role: the leader lease, dispatch rounds, catch-up, the drain.
"""

from jobs_core.scheduler.cron import CronSchedule
from jobs_core.scheduler.role import LEADER_KEY, Fired, Scheduler
from jobs_core.scheduler.task import Occurrence, TaskHandle, TaskRegistry, task, tasks_of

__all__ = [
    "LEADER_KEY",
    "CronSchedule",
    "Fired",
    "Occurrence",
    "Scheduler",
    "TaskHandle",
    "TaskRegistry",
    "task",
    "tasks_of",
]
