"""The operator surface: see and steer every job on any driver, from the CLI, the dashboard or
code (`Operator`), with inputs redacted (`jobs_core.redact`), metrics and a health check
(`metrics`), and times shown for people (`times`)."""

from jobs_core.operator.service import (
    Action,
    BulkReport,
    JobsPage,
    JobView,
    Operator,
    QueueView,
    StatsView,
    TaskView,
    Throughput,
    WorkerView,
    refusal_for,
)

__all__ = [
    "Action",
    "BulkReport",
    "JobView",
    "JobsPage",
    "Operator",
    "QueueView",
    "StatsView",
    "TaskView",
    "Throughput",
    "WorkerView",
    "refusal_for",
]
