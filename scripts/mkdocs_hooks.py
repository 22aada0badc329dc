"""MkDocs hooks (mkdocs.yml `hooks:`): the site's pages generated from the code when it builds.

A page holds a marker comment where a generated part goes:
- `<!-- ujobs:errors -->`: every `X_*` code of `jobs_core.errors.CODES`, its meaning and what
  to do (`jobs_core.error_help`): a new code appears without anyone editing the page;
- `<!-- ujobs:states -->`: a Mermaid diagram of a job's states (`jobs_core.states.JobState`)
  and their transitions; the build fails if a state is added that the transitions miss;
- `<!-- ujobs:metrics -->`: every metric family a fully equipped worker's registry serves,
  its type and help, read from a real `WorkerMetrics` (as tests/test_ops_kit.py does).
A link to a repository file outside docs/ (`../jobs_core/x.py`, `../bench/`) becomes the path
in code style: the site is read without the checkout beside it.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from jobs_core.error_help import what_to_do
from jobs_core.errors import CODES
from jobs_core.states import JobState

#: (from, to, why): a job's transitions, as the driver contract moves rows.
TRANSITIONS: list[tuple[str, str, str]] = [
    ("[*]", "ready", "enqueue (due now, or later with a delay)"),
    ("[*]", "parked", "enqueue after dependencies"),
    ("ready", "running", "claim once due (a lease and a fence)"),
    ("parked", "running", "claim once due (the time came, the event or the children arrived)"),
    ("running", "running", "lease lapsed: reclaimed under a new fence"),
    ("running", "completed", "complete"),
    ("running", "ready", "retry after back-off; shed; drain hand-back"),
    ("running", "parked", "sleep, event wait, join (suspended)"),
    ("running", "dead", "attempts exhausted, terminal error, lapsed on the last attempt"),
    ("running", "failed", "the same with dead_letter=False; a busy key with when_busy=fail"),
    ("running", "cancelled", "cancel (the body learns it at its next heartbeat)"),
    ("ready", "cancelled", "cancel"),
    ("parked", "cancelled", "cancel"),
    ("dead", "ready", "requeue"),
    ("failed", "ready", "requeue"),
    ("cancelled", "ready", "requeue"),
    ("completed", "ready", "requeue"),
    ("completed", "[*]", "purged by retention"),
    ("dead", "[*]", "purged by retention"),
    ("failed", "[*]", "purged by retention"),
    ("cancelled", "[*]", "purged by retention"),
]


def states_diagram() -> str:
    states = {s.value for s in JobState}
    used = {x for a, b, _ in TRANSITIONS for x in (a, b)} - {"[*]"}
    if used != states:
        raise ValueError(f"the diagram's states {sorted(used)} are not JobState's {sorted(states)}")
    lines = ["```mermaid", "stateDiagram-v2"]
    lines += [f"    {a} --> {b}: {why}" for a, b, why in TRANSITIONS]
    lines.append("```")
    return "\n".join(lines)


def errors_table() -> str:
    rows = ["| Code | Meaning | What to do |", "| --- | --- | --- |"]
    for code in sorted(CODES):
        advice = what_to_do(code)
        if advice is None:
            raise ValueError(f"{code} has no advice in jobs_core/error_help.py")
        meaning = CODES[code][0].upper() + CODES[code][1:]
        rows.append(f"| `{code}` {{#{code.lower()}}} | {meaning}. | {advice} |".replace("\n", " "))
    return "\n".join(rows)


def _sample_backfill() -> Any:
    """A backfill of its own registries: a worker running one serves the sweep gauges."""
    from jobs_core.factories.backfill import BackfillRegistry, backfill
    from jobs_core.job import JobRegistry

    return backfill(
        name="docs-sample",
        tenant="none",
        handle=lambda rows: None,
        pages=lambda cursor, scope, limit: ([], None),
        registry=JobRegistry(),
        backfills=BackfillRegistry(),
    )


async def _families() -> tuple[list[Any], dict[str, tuple[str, ...]]]:
    from jobs_core.operator.metrics import WorkerMetrics
    from jobs_core.outbox import Relay
    from jobs_core.scheduler import Scheduler
    from jobs_core.worker import Worker
    from jobs_memory import MemoryDriver, MemoryOutbox

    driver = MemoryDriver()
    worker = Worker(driver, [_sample_backfill()])
    relay = Relay(MemoryOutbox(), driver, clock=worker.clock)
    metrics = WorkerMetrics(
        worker, asyncio.get_running_loop(), relay, scheduler=Scheduler(driver, [])
    )
    families = await asyncio.to_thread(lambda: list(metrics.registry.collect()))
    # The label names of the worker's own counters, which hold no sample before a settle.
    declared: dict[str, tuple[str, ...]] = {}
    for collector, names in metrics.registry._collector_to_names.items():
        for name in names:
            declared[name] = tuple(getattr(collector, "_labelnames", ()))
    await driver.close()
    return families, declared


#: Label names of the store-read families, which hold no sample on an empty store.
_LABELS: dict[str, tuple[str, ...]] = {
    "ujobs_queue_oldest_ready_seconds": ("queue",),
    "ujobs_queue_dead_jobs": ("queue",),
    "ujobs_queue_demand": ("queue",),
    "ujobs_queue_jobs": ("queue", "state"),
    "ujobs_sweep_rows": ("name", "kind"),
    "ujobs_sweeps_pending": ("environment", "name"),
    "ujobs_consumer_lag": ("consumer", "tenant"),
    "ujobs_webhook_attempts": ("outcome",),
}


def metrics_table() -> str:
    rows = ["| Metric | Type | Labels | What it says |", "| --- | --- | --- | --- |"]
    families, declared = asyncio.run(_families())
    for f in sorted(families, key=lambda f: f.name):
        name = f.name + ("_total" if f.type == "counter" else "")
        labels = {k for s in f.samples for k in s.labels} - {"le"}
        labels |= set(declared.get(f.name, ())) | set(_LABELS.get(f.name, ()))
        shown = ", ".join(f"`{x}`" for x in sorted(labels)) or "-"
        rows.append(f"| `{name}` | {f.type} | {shown} | {f.documentation} |")
    return "\n".join(rows)


_OUTSIDE = re.compile(
    r"\[([^\]]+)\]\((?:\.\./)+((?:jobs_\w+|bench|tests|examples|scripts|alembic|deploy)/[^)\s]*)\)"
)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    markdown = markdown.replace("<!-- ujobs:errors -->", errors_table())
    markdown = markdown.replace("<!-- ujobs:states -->", states_diagram())
    if "<!-- ujobs:metrics -->" in markdown:
        markdown = markdown.replace("<!-- ujobs:metrics -->", metrics_table())
    return _OUTSIDE.sub(lambda m: f"{m.group(1)} (`{m.group(2)}`)", markdown)
