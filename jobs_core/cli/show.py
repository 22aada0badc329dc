"""How the CLI prints for people: tables that never cut an id, a state or a name, times in
local time with their age, and stored text shown as it is (`literal`: never markup, never a
terminal escape).

Every table goes through `print_table`. Its `keep` columns (what an operator copies or reads
whole) are never wrapped nor cut; the other columns fold. When the terminal (or `COLUMNS`) is
too narrow for the kept columns at full width, each row prints as `header: value` lines
instead (psql's expanded display), so nothing is ever cut. Written to a pipe or a file, a table
is as wide as its content: one line per row.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import JustifyMethod
from rich.table import Column, Table
from rich.text import Text

from jobs_core.cli.base import console, literal
from jobs_core.states import JobState

if TYPE_CHECKING:
    from jobs_core.jsonform import JsonValue
    from jobs_core.operator import (
        Action,
        BatchView,
        BulkReport,
        Census,
        FamilyView,
        JobsPage,
        JobView,
        QueueView,
        StatsView,
        WorkerView,
    )
    from jobs_core.operator.service import Answer
    from jobs_core.operator.waits import Said

_STATE_STYLE = {
    JobState.READY: "cyan",
    JobState.RUNNING: "yellow",
    JobState.PARKED: "blue",
    JobState.COMPLETED: "green",
    JobState.FAILED: "red",
    JobState.DEAD: "bold red",
    JobState.CANCELLED: "dim",
}

#: The width a folding column is counted at when deciding whether a table fits: narrower than
#: this, its words would fold a few characters a line.
_FOLD_MIN = 6


@dataclass(frozen=True, slots=True)
class Col:
    """A printed column. `keep`: an id, a state or a name, shown whole on one line."""

    header: str
    keep: bool = False
    justify: JustifyMethod = "left"


Cell = str | Text


def _fit_width() -> int | None:
    """The width a table must fit: the terminal's, or `COLUMNS`; None for a pipe or a file
    with no `COLUMNS` (each row is then one line, however long: what `grep` wants)."""
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console.width
    return None


def _width(cells: Sequence[Text]) -> int:
    return max((cell_len(line) for c in cells for line in c.plain.split("\n")), default=0)


def print_table(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    *,
    title: str | None = None,
    header: bool = True,
) -> None:
    """Print `rows` under `cols`: a table when the terminal holds every `keep` column whole,
    else each row as `header: value` lines. A `str` cell is stored text, shown by `literal`."""
    cells = [[c if isinstance(c, Text) else literal(c) for c in row] for row in rows]
    heads = [Text(c.header) for c in cols] if header else []
    naturals = [_width([*heads[i : i + 1], *(row[i] for row in cells)]) for i in range(len(cols))]
    frame = 3 * len(cols) + 1  # a border and a space each side of every cell
    needed = frame + sum(
        w if c.keep else min(w, _FOLD_MIN) for c, w in zip(cols, naturals, strict=True)
    )
    limit = _fit_width()
    if limit is None or needed <= limit:
        table = Table(
            *(
                Column(
                    c.header,
                    justify=c.justify,
                    no_wrap=c.keep,
                    min_width=w if c.keep else None,
                    overflow="ellipsis" if c.keep else "fold",
                )
                for c, w in zip(cols, naturals, strict=True)
            ),
            title=title,
            show_header=header,
            width=None if limit is not None else frame + sum(naturals),
        )
        for row in cells:
            table.add_row(*row)
        console.print(table, crop=limit is not None)
        return
    if title:
        console.print(literal(title, "italic"), soft_wrap=True)
    pad = max((len(c.header) for c in cols), default=0) + 2
    for n, row in enumerate(cells):
        if n:
            console.print()
        if not header:
            key = Text(f"{row[0].plain}:", style="bold")
            console.print(Text(" ").join([key, *row[1:]]), soft_wrap=True)
            continue
        for col, cell in zip(cols, row, strict=True):
            console.print(Text(f"{col.header}:".ljust(pad), style="bold") + cell, soft_wrap=True)


def _state(s: JobState) -> Text:
    return Text(s.value, style=_STATE_STYLE[s])


def print_jobs(page: JobsPage, now_ms: int) -> None:
    from jobs_core.operator.times import relative, when
    from jobs_core.redact import REDACTED, UNDECLARED_HINT

    rows: list[list[Cell]] = []
    for j in page.jobs:
        at = j.finished_at_ms if j.finished_at_ms is not None else j.run_at_ms
        rows.append(
            [
                j.id,
                j.name,
                j.queue,
                j.acts_for or "-",
                _state(j.state),
                f"{j.attempt}/{j.max_attempts}",
                when(j.created_at_ms, now_ms),
                relative(at, now_ms) if at is not None else "-",
            ]
        )
    cols = [Col("id", True), Col("name", True), Col("queue", True), Col("acts for", True)]
    cols.append(Col("state", True))
    print_table([*cols, Col("attempt"), Col("created"), Col("runs / ended")], rows)
    if not page.jobs:
        console.print("no jobs on this page")
    if any(j.acts_for == REDACTED for j in page.jobs):
        console.print(
            f"acts for {UNDECLARED_HINT.replace('this job', 'some of these jobs')}",
            soft_wrap=True,
        )
    if page.next_cursor is not None:
        console.print(Text("next page: --cursor ") + literal(page.next_cursor), soft_wrap=True)


def _json_block(value: JsonValue) -> Text:
    return literal(json.dumps(value, ensure_ascii=False, indent=2), line=False)


def _heading(text: str, note: str = "") -> None:
    console.print(Text.assemble((text, "bold"), note))


def _said(said: Said, now_ms: int) -> str:
    """A sentence of `jobs_core.operator.waits`, its instants in local time with their age."""
    from jobs_core.operator.times import when
    from jobs_core.operator.waits import At

    return "".join(when(s.ms, now_ms) if isinstance(s, At) else s for s in said)


def _value_block(value: JsonValue, declared: bool) -> Text:
    """A shown value: an undeclared job's says why it is hidden and how to see it."""
    from jobs_core.redact import REDACTED, UNDECLARED_HINT

    if not declared and value == REDACTED:
        return literal(UNDECLARED_HINT)
    return _json_block(value)


def print_job(view: JobView, now_ms: int, *, has_steps: bool = False) -> None:
    """Every field of one job, its input, result, progress, last error (with its traceback),
    what it waits for, and its run's recorded steps (when the driver keeps steps)."""
    from jobs_core.operator.times import relative, when
    from jobs_core.operator.waits import step_said, waits_for
    from jobs_core.redact import REDACTED, SENSITIVE_HINT, UNDECLARED_HINT

    r = view.record
    rows: list[list[Cell]] = [
        ["id", r.id],
        ["name", r.name],
        ["queue", r.queue],
        ["state", _state(r.state)],
        ["attempt", f"{r.attempt} of {r.max_attempts} (claims {r.claims})"],
        ["priority", str(r.priority)],
        ["tenant", r.tenant_id or "-"],
        ["acts for", view.acts_for or "-"],
        ["idempotency key", r.idempotency_key],
        ["run id", r.run_id],
        ["created", when(r.created_at_ms, now_ms)],
        # A parked row's run_at is when it looks again, not when it runs: its `waits for` says.
        ["runs at", "-" if r.state is JobState.PARKED else when(r.run_at_ms, now_ms)],
        ["lease until", when(r.lease_until_ms, now_ms)],
        ["finished", when(r.finished_at_ms, now_ms)],
        ["claimed by", r.claimed_by or "-"],
        ["enqueued by", r.enqueued_by or "-"],
    ]
    if r.traceparent:
        rows.append(["traceparent", r.traceparent])
    print_table([Col("field", True), Col("value", True)], rows, header=False)
    waits = waits_for(view, now_ms)
    if waits is not None:
        console.print(literal(f"waits for: {_said(waits, now_ms)}"), soft_wrap=True)
    _heading("input")
    console.print(_value_block(view.input, view.declared), soft_wrap=True)
    for label, value in (("result", view.result), ("progress", view.progress)):
        if value is not None:
            _heading(label)
            console.print(_value_block(value, view.declared), soft_wrap=True)
    if view.declared and REDACTED in json.dumps([view.input, view.result, view.progress]):
        console.print(literal(SENSITIVE_HINT), soft_wrap=True)
    if view.error is not None:
        _heading("last error")
        error = view.error
        if isinstance(error, dict):
            code = error.get("code")
            head = f"{error.get('type', '')}: {error.get('message', '')}"
            console.print(literal(f"{code} — {head}" if code else head), soft_wrap=True)
            tb = error.get("traceback")
            if isinstance(tb, str):
                console.print(literal(tb.rstrip(), line=False), soft_wrap=True)
        else:
            console.print(literal(error, line=False), soft_wrap=True)
    if has_steps:
        _heading("steps")
        if not view.steps:
            console.print("no step recorded for this run")
        steps = [
            [
                st.name,
                relative(st.recorded_at_ms, now_ms),
                _said(said, now_ms)
                if (said := step_said(st, view.steps)) is not None
                else UNDECLARED_HINT
                if not view.declared and st.output == REDACTED
                else json.dumps(st.output, ensure_ascii=False),
            ]
            for st in view.steps
        ]
        if steps:
            print_table([Col("step", True), Col("recorded"), Col("output")], steps)
    print_attempts(view, now_ms)  # -- attempts --


def print_steered(action: Action, pairs: Sequence[tuple[str, Answer]]) -> None:
    rows: list[list[Cell]] = [[job_id, Text(answer.value)] for job_id, answer in pairs]
    print_table([Col("id", True), Col(action.value, True)], rows)


def print_bulk(report: BulkReport) -> None:
    parts = ", ".join(f"{n} {a}" for a, n in sorted(report.answers.items())) or "nothing"
    console.print(f"{report.action.value}: {report.examined} jobs looked at — {parts}")
    if report.advice is not None:
        console.print(literal(report.advice))


def print_queues(views: Sequence[QueueView], now_ms: int) -> None:
    from jobs_core.operator.times import age

    rows: list[list[Cell]] = [
        [
            v.queue,
            str(v.counts["ready"]),
            str(v.counts["running"]),
            str(v.counts["parked"]),
            str(v.counts["dead"]),
            str(v.counts["failed"]),
            age(v.oldest_ready_age_ms) if v.oldest_ready_age_ms is not None else "-",
            str(v.demand),
            f"{v.completed_per_minute:.1f}",
            Text("paused", style="yellow") if v.paused else "-",
        ]
        for v in views
    ]
    heads = ("ready", "running", "parked", "dead", "failed", "oldest ready", "demand")
    cols = [Col("queue", True), *(Col(h) for h in heads)]
    print_table([*cols, Col("done/min (5 min)"), Col("paused")], rows)
    if not views:
        console.print("no queues hold jobs")


def print_workers(views: Sequence[WorkerView], now_ms: int) -> None:
    from jobs_core.operator.times import relative

    rows: list[list[Cell]] = [
        [
            w.worker_id,
            w.host or "-",
            str(w.pid) if w.pid is not None else "-",
            ", ".join(w.queues),
            str(w.concurrency) if w.concurrency is not None else "-",
            ", ".join(w.jobs),
            relative(w.last_beat_ms, now_ms),
        ]
        for w in views
    ]
    # Queue and job names are names: never folded mid-word (too narrow: `header: value` lines).
    cols = [Col("worker", True), Col("host"), Col("pid"), Col("queues", True)]
    cols += [Col("concurrency"), Col("jobs", True), Col("last beat")]
    print_table(cols, rows)
    if not views:
        console.print("no live workers")


def print_stats(view: StatsView) -> None:
    from jobs_core.operator.times import age, local
    from jobs_core.records import COUNTED_OUTCOMES

    print_table(
        [Col(s.value, True) for s in JobState],
        [[str(view.states[s.value]) for s in JobState]],
        title="jobs by state",
    )
    since = local(view.since_ms)
    title = f"settled in the last {age(view.window_ms)} (since {since})"
    if view.widened:
        title = f"settled since {since}: the last {age(view.window_ms)}, its first hour whole"
    columns = [o.name.lower() for o in COUNTED_OUTCOMES]
    rows: list[list[Cell]] = [[n.name, *(str(n.settled[c]) for c in columns)] for n in view.names]
    if view.names:
        rows.append([Text("all", style="bold"), *(str(view.totals[c]) for c in columns)])
    print_table([Col("job", True), *(Col(c) for c in columns)], rows, title=title)
    console.print(STATS_LEGEND, soft_wrap=True)


#: What the settle columns of `ujobs stats` that need saying count (`ujobs stats --help`).
STATS_LEGEND = (
    "shed: given back without spending an attempt, as it could not start or go on now (a rate"
    " limit, a concurrency slot, a job name this worker does not run); due again later."
    " suspended: the run parked itself (a durable sleep, an event wait, a wait on child jobs),"
    " counted at each park."
)


def _census(c: Census) -> str:
    parts = [f"{n} {s}" for s, n in c.counts.items() if n]
    text = ", ".join(parts) or "none"
    return text if c.complete else f"{text} (at least: counting stopped at its bound)"


def print_family(view: JobView, family: FamilyView) -> None:
    """A job's flow: its parent, its children by state (and the command listing them), the
    join it waits on, and its batch's members by state."""
    r = view.record
    rows: list[list[Cell]] = [["parent", r.parent_id or "-"]]
    rows.append(["children", _census(family.children)])
    if family.children.total:
        rows.append(["list them", literal(f"ujobs jobs list --parent {shlex.quote(r.id)}")])
    j = r.join
    if j is not None:
        waiting = f"waiting on {j.pending} of {j.total}" if j.pending else f"all {j.total} done"
        rows.append(["join", f"{waiting}, failed {j.failed}, policy {j.policy.value}"])
    if family.batch_id is not None and family.batch is not None:
        rows.append(["batch", family.batch_id])
        rows.append(["batch members", _census(family.batch)])
        rows.append(["see it", literal(f"ujobs batches show {shlex.quote(family.batch_id)}")])
    _heading("flow")
    print_table([Col("field", True), Col("value", True)], rows, header=False)


def print_batch(view: BatchView, now_ms: int) -> None:
    """A batch's members by state, whether all finished, and its callbacks."""
    done = "all finished" if view.finished else "in progress"
    rows: list[list[Cell]] = [
        ["batch", view.batch_id],
        ["members", f"{view.members.total} ({done})"],
    ]
    rows += [[s, str(n)] for s, n in view.members.counts.items() if n]
    if not view.members.complete:
        rows.append(["note", "counting stopped at its bound: the counts are a lower bound"])
    for role, j in view.callbacks.items():
        rows.append([role, Text.assemble(literal(j.id), " ", _state(j.state))])
    if not view.callbacks:
        rows.append(["callbacks", "none enqueued (yet)"])
    rows.append(["list them", literal(f"ujobs jobs list --batch {shlex.quote(view.batch_id)}")])
    print_table([Col("field", True), Col("value", True)], rows, header=False)


# -- attempts --
#: The traceback lines of one attempt the timeline prints (its end: where it raised).
TIMELINE_TRACEBACK_LINES = 3


def print_attempts(view: JobView, now_ms: int) -> None:
    """Each attempt as a timeline — claimed (started) → its steps → settled, with its error —
    oldest first, then the claim still running. Every stored text is printed literally."""
    from jobs_core.attempts import ATTEMPT_HISTORY
    from jobs_core.operator.times import age, local, when

    if not view.attempts:
        return
    _heading("attempts", f" (the last {ATTEMPT_HISTORY} kept, oldest first)")
    for a in view.attempts:
        head = Text.assemble(
            (f"#{a.attempt}", "bold"),
            f" claim {a.claims} by ",
            literal(a.worker_id),
            f" — claimed (started) {when(a.claimed_at_ms, now_ms)}",
        )
        console.print(head, soft_wrap=True)
        for st in a.steps:
            console.print(
                Text.assemble(
                    "    step ",
                    literal(json.dumps(st.name, ensure_ascii=False)),
                    f" recorded +{age(st.recorded_at_ms - a.claimed_at_ms)}",
                ),
                soft_wrap=True,
            )
        if a.outcome is None or a.settled_at_ms is None:
            lease = when(view.record.lease_until_ms, now_ms)
            console.print(f"    running (lease until {lease})", soft_wrap=True)
            continue
        took = age(a.settled_at_ms - a.claimed_at_ms)
        end = Text.assemble(
            "    settled ",
            (a.outcome.value, _OUTCOME_STYLE.get(a.outcome.value, "")),
            f" +{took} ({local(a.settled_at_ms)})",
        )
        if a.error_code or a.error_message:
            end.append(" — ")
            end.append(literal(": ".join(t for t in (a.error_code, a.error_message) if t)))
        console.print(end, soft_wrap=True)
        if a.traceback:
            for line in a.traceback.rstrip().splitlines()[-TIMELINE_TRACEBACK_LINES:]:
                console.print(Text.assemble("      ", literal(line)), soft_wrap=True)


_OUTCOME_STYLE = {
    "completed": "green",
    "retried": "yellow",
    "dead": "red",
    "failed": "red",
    "abandoned": "red",
    "cancelled": "magenta",
}
