"""How the operator's answers are printed for people: rich tables, times in local time with
their age, and redacted JSON values pretty-printed (never rich markup from stored text)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from rich.markup import escape
from rich.table import Column, Table

from jobs_core.cli.base import console
from jobs_core.jsonform import JsonValue
from jobs_core.operator import (
    Action,
    BulkReport,
    JobsPage,
    JobView,
    QueueView,
    StatsView,
    WorkerView,
)
from jobs_core.operator.service import Answer
from jobs_core.operator.times import age, relative, when
from jobs_core.records import COUNTED_OUTCOMES
from jobs_core.states import JobState

_STATE_STYLE = {
    JobState.READY: "cyan",
    JobState.RUNNING: "yellow",
    JobState.PARKED: "blue",
    JobState.COMPLETED: "green",
    JobState.FAILED: "red",
    JobState.DEAD: "bold red",
    JobState.CANCELLED: "dim",
}


def _state(s: JobState) -> str:
    return f"[{_STATE_STYLE[s]}]{s.value}[/]"


def _text(value: object) -> str:
    return escape(str(value))


def _id_column(header: str, ids: Sequence[str]) -> Column:
    # An id is what an operator copies into the next command: the narrower columns give way
    # on a small terminal, the id is never cut.
    return Column(header, no_wrap=True, min_width=max((len(i) for i in ids), default=0))


def print_jobs(page: JobsPage, now_ms: int) -> None:
    table = Table(
        _id_column("id", [j.id for j in page.jobs]),
        "name",
        "queue",
        "state",
        "attempt",
        "created",
        "runs / ended",
    )
    for j in page.jobs:
        at = j.finished_at_ms if j.finished_at_ms is not None else j.run_at_ms
        table.add_row(
            _text(j.id),
            _text(j.name),
            _text(j.queue),
            _state(j.state),
            f"{j.attempt}/{j.max_attempts}",
            _text(when(j.created_at_ms, now_ms)),
            _text(relative(at, now_ms) if at is not None else "-"),
        )
    console.print(table)
    if not page.jobs:
        console.print("no jobs on this page")
    if page.next_cursor is not None:
        console.print(f"next page: --cursor {page.next_cursor}", soft_wrap=True)


def _json_block(value: JsonValue) -> str:
    return escape(json.dumps(value, ensure_ascii=False, indent=2))


def print_job(view: JobView, now_ms: int) -> None:
    r = view.record
    table = Table("field", "value", show_header=False)
    rows: list[tuple[str, str]] = [
        ("id", _text(r.id)),
        ("name", _text(r.name)),
        ("queue", _text(r.queue)),
        ("state", _state(r.state)),
        ("attempt", f"{r.attempt} of {r.max_attempts} (claims {r.claims})"),
        ("priority", str(r.priority)),
        ("tenant", _text(r.tenant_id or "-")),
        ("idempotency key", _text(r.idempotency_key)),
        ("run id", _text(r.run_id)),
        ("created", _text(when(r.created_at_ms, now_ms))),
        ("runs at", _text(when(r.run_at_ms, now_ms))),
        ("lease until", _text(when(r.lease_until_ms, now_ms))),
        ("finished", _text(when(r.finished_at_ms, now_ms))),
        ("claimed by", _text(r.claimed_by or "-")),
        ("enqueued by", _text(r.enqueued_by or "-")),
    ]
    if r.traceparent:
        rows.append(("traceparent", _text(r.traceparent)))
    for k, v in rows:
        table.add_row(k, v)
    console.print(table)
    if r.wait is not None:
        match = json.dumps(view.wait_match, ensure_ascii=False, separators=(",", ":"))
        since = when(r.wait.since_ms, now_ms)
        console.print(
            _text(f"waits for: {r.wait.event} matching {match} since {since}"), soft_wrap=True
        )
    hidden = "" if view.declared else " (no live worker declares this job: redacted whole)"
    console.print(f"[bold]input[/bold]{hidden}")
    console.print(_json_block(view.input), soft_wrap=True)
    for label, value in (("result", view.result), ("progress", view.progress)):
        if value is not None:
            console.print(f"[bold]{label}[/bold]")
            console.print(_json_block(value), soft_wrap=True)
    if view.error is not None:
        console.print("[bold]last error[/bold]")
        error = view.error
        if isinstance(error, dict):
            code = error.get("code")
            head = f"{error.get('type', '')}: {error.get('message', '')}"
            console.print(_text(f"{code} — {head}" if code else head), soft_wrap=True)
            tb = error.get("traceback")
            if isinstance(tb, str):
                console.print(_text(tb.rstrip()), soft_wrap=True)
        else:
            console.print(_text(error), soft_wrap=True)


def print_steered(action: Action, pairs: Sequence[tuple[str, Answer]]) -> None:
    table = Table(_id_column("id", [job_id for job_id, _ in pairs]), action.value)
    for job_id, answer in pairs:
        table.add_row(_text(job_id), answer.value)
    console.print(table)


def print_bulk(report: BulkReport) -> None:
    parts = ", ".join(f"{n} {a}" for a, n in sorted(report.answers.items())) or "nothing"
    console.print(f"{report.action.value}: {report.examined} jobs looked at — {parts}")
    if report.advice is not None:
        console.print(_text(report.advice))


def print_queues(views: Sequence[QueueView], now_ms: int) -> None:
    table = Table(
        "queue",
        "ready",
        "running",
        "parked",
        "dead",
        "failed",
        "oldest ready",
        "demand",
        "done/min (5 min)",
        "paused",
    )
    for v in views:
        table.add_row(
            _text(v.queue),
            str(v.counts["ready"]),
            str(v.counts["running"]),
            str(v.counts["parked"]),
            str(v.counts["dead"]),
            str(v.counts["failed"]),
            age(v.oldest_ready_age_ms) if v.oldest_ready_age_ms is not None else "-",
            str(v.demand),
            f"{v.completed_per_minute:.1f}",
            "[yellow]paused[/yellow]" if v.paused else "",
        )
    console.print(table)
    if not views:
        console.print("no queues hold jobs")


def print_workers(views: Sequence[WorkerView], now_ms: int) -> None:
    table = Table(
        _id_column("worker", [w.worker_id for w in views]),
        "host",
        "pid",
        "queues",
        "concurrency",
        "jobs",
        "last beat",
    )
    for w in views:
        table.add_row(
            _text(w.worker_id),
            _text(w.host or "-"),
            str(w.pid) if w.pid is not None else "-",
            _text(", ".join(w.queues)),
            str(w.concurrency) if w.concurrency is not None else "-",
            _text(", ".join(w.jobs)),
            _text(relative(w.last_beat_ms, now_ms)),
        )
    console.print(table)
    if not views:
        console.print("no live workers")


def print_stats(view: StatsView) -> None:
    states = Table(*(s.value for s in JobState), title="jobs by state")
    states.add_row(*(str(view.states[s.value]) for s in JobState))
    console.print(states)
    columns = [o.name.lower() for o in COUNTED_OUTCOMES]
    table = Table("job", *columns, title=f"settled in the last {age(view.window_ms)}")
    for n in view.names:
        table.add_row(_text(n.name), *(str(n.settled[c]) for c in columns))
    if view.names:
        table.add_row("[bold]all[/bold]", *(str(view.totals[c]) for c in columns))
    console.print(table)
