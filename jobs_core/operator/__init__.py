"""The operator surface: see and steer every job on any driver, from the CLI, the dashboard or
code (`Operator`), with inputs redacted (`jobs_core.redact`), metrics and a health check
(`metrics`), and times shown for people (`times`)."""

from jobs_core.operator.service import (
    Action,
    BatchView,
    BulkReport,
    CancelReport,
    Census,
    FamilyView,
    JobsPage,
    JobView,
    Operator,
    QueueView,
    StatsView,
    TaskView,
    Throughput,
    WorkerView,
    batch_callback_ids,
    refusal_for,
)

__all__ = [
    "Action",
    "BatchView",
    "BulkReport",
    "CancelReport",
    "Census",
    "FamilyView",
    "JobView",
    "JobsPage",
    "Operator",
    "QueueView",
    "StatsView",
    "TaskView",
    "Throughput",
    "WorkerView",
    "batch_callback_ids",
    "refusal_for",
]
