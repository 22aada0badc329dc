"""`ujobs backfills list|pending|show NAME`: the sweep ledger beside the declared backfills.

Every verb reads `inspect_backfills` (the one projection) on the driver of `--driver` or
`UJOBS_DRIVER`; the declarations are those `--app MODULE` (env `UJOBS_APP`) exports. `list` and
`show` work without one (the ledger alone: what ran); `pending` needs it (what exists is the
registry's to say). `--json` prints one JSON document. An `import` entry's `show` prints its
error report (line, field, code: never the refused value).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.text import Text

from jobs_core.cli.base import (
    APP_ENV,
    WHOLE,
    _fail,
    _import_module,
    _required_driver,
    console,
    driver_option,
    emit_json,
    json_option,
    literal,
    main,
)
from jobs_core.cli.show import Cell, Col, print_table
from jobs_core.clock import SystemClock
from jobs_core.errors import (
    CliNoJobsError,
    CliUsageInvalidError,
    JobNotRegisteredError,
    JobsError,
    OptionInvalidError,
)

if TYPE_CHECKING:
    from jobs_core.driver import JobDriver
    from jobs_core.factories.backfill import (
        Backfill,
        BackfillsView,
        EntryView,
        Pending,
        SweepView,
    )

T = TypeVar("T")

#: The most lines of an import's error report `show` prints by default, and at most.
REPORT_LINES = 20
MAX_REPORT_LINES = 1_000

_app_option = click.option(
    "--app",
    "app",
    envvar=APP_ENV,
    show_envvar=True,
    default=None,
    help="The module declaring the backfills (what exists; without it, the ledger alone).",
)


def _declared(app: str | None, *, required: bool) -> list[Backfill]:
    if app is None:
        if required:
            raise CliUsageInvalidError(
                "pending is what --app declares minus what completed: name the module"
                " (--app or env UJOBS_APP)"
            )
        return []
    from jobs_core.factories.backfill import backfills_of

    found = backfills_of(_import_module(app))
    if required and not found:
        raise CliNoJobsError(f"{app!r} exports no backfills (declare them with backfill())")
    return found


def _run(url: str | None, work: Callable[[JobDriver], Awaitable[T]]) -> T:
    """Open the driver of `url`, run `work` on it, close it; a refusal is one line, exit 2."""
    try:
        driver = _open(url)

        async def go() -> T:
            async with driver:
                return await work(driver)

        return asyncio.run(go())
    except JobsError as exc:
        _fail(exc)


def _open(url: str | None) -> JobDriver:
    from jobs_core.urls import driver_from_url

    return driver_from_url(_required_driver(url, "backfills"))


@main.group()
def backfills() -> None:
    """The sweeps backfill() declares and the ledger of what they swept."""


@backfills.command("list")
@driver_option
@_app_option
@json_option
def backfills_list(url: str | None, app: str | None, as_json: bool) -> None:
    """Each sweep: its newest run per scope and environment — status, progress (rows of
    expected), rate, last cursor — and what is pending in this environment."""
    from jobs_core.factories.backfill import inspect_backfills

    try:
        declared = _declared(app, required=False)
    except JobsError as exc:
        _fail(exc)
    view = _run(url, lambda d: inspect_backfills(d, declared))
    if as_json:
        emit_json(view.to_json())
        return
    print_sweeps(view, SystemClock().now_ms())


@backfills.command("pending")
@driver_option
@_app_option
@click.option(
    "--environment",
    "environments",
    multiple=True,
    help="Where to look (repeat; default: here, each one declared and each one in the ledger).",
)
@click.option(
    "--tenant",
    "tenants",
    multiple=True,
    help="A tenant each per-tenant sweep must have completed for (repeat).",
)
@click.option("--check", is_flag=True, help="Exit 1 when anything is pending.")
@json_option
def backfills_pending(
    url: str | None,
    app: str | None,
    environments: tuple[str, ...],
    tenants: tuple[str, ...],
    check: bool,
    as_json: bool,
) -> None:
    """Declared minus completed, per environment. A per-tenant sweep's tenants are not known in
    advance: without --tenant, it shows the tenants that started it and did not finish, or the
    sweep itself while no tenant has started it."""
    from jobs_core.factories.backfill import inspect_backfills

    try:
        declared = _declared(app, required=True)
    except JobsError as exc:
        _fail(exc)
    view = _run(
        url,
        lambda d: inspect_backfills(
            d, declared, environments=environments or None, tenants=tenants or None
        ),
    )
    if as_json:
        emit_json({env: [p.to_json() for p in ps] for env, ps in view.pending.items()})
    else:
        print_pending(view.pending)
    if check and any(view.pending.values()):
        raise SystemExit(1)


@backfills.command("show")
@click.argument("name")
@driver_option
@_app_option
@click.option(
    "--limit",
    default=REPORT_LINES,
    show_default=True,
    type=WHOLE,
    help=f"Lines of an import's error report (at most {MAX_REPORT_LINES}).",
)
@json_option
def backfills_show(name: str, url: str | None, app: str | None, limit: int, as_json: bool) -> None:
    """One sweep: its declaration, every run in the ledger (newest first), where it is pending;
    for an import, its error report."""
    from jobs_core.factories.backfill import inspect_backfills

    try:
        if not 1 <= limit <= MAX_REPORT_LINES:
            raise OptionInvalidError(f"--limit must be 1 to {MAX_REPORT_LINES}", detail="--limit")
        declared = _declared(app, required=False)
    except JobsError as exc:
        _fail(exc)

    async def read(driver: JobDriver) -> tuple[SweepView, list[dict[str, Any]] | None]:
        view = await inspect_backfills(driver, declared, name=name)
        sweep = view.sweep(name)
        if sweep is None:
            raise JobNotRegisteredError(
                "no sweep by this name: none declared (--app) and none in the ledger", detail=name
            )
        latest = sweep.latest
        report = None
        if latest is not None and latest.record.kind == "import":
            report = await _report(driver, latest.record.run_id, limit)
        return sweep, report

    sweep, report = _run(url, read)
    if as_json:
        doc = sweep.to_json()
        if report is not None:
            doc["report"] = report
        emit_json(doc)
        return
    print_sweep(sweep, SystemClock().now_ms())
    if report is not None:
        print_report(report)


async def _report(driver: JobDriver, run_id: str, limit: int) -> list[dict[str, Any]]:
    """The import's error report (line, field, code; never a value)."""
    return await import_report(driver, run_id, limit)


async def import_report(driver: JobDriver, run_id: str, limit: int) -> list[dict[str, Any]]:
    """`jobs_core.factories.rows.report.import_report`, imported when a report is read."""
    from jobs_core.factories.rows.report import import_report as read

    return await read(driver, run_id, limit)


# -- printing -------------------------------------------------------------------------------------


def _progress(e: EntryView) -> str:
    r = e.record
    refused = f", {r.errors} refused" if r.errors else ""
    if r.expected is None:
        return f"{r.rows} rows{refused}"
    return f"{r.rows} of {r.expected} ({e.progress or 0.0:.0%}){refused}"


def _rate(e: EntryView) -> str:
    return "-" if e.rate is None else f"{e.rate:,.1f} rows/s"


def _status(e: EntryView) -> Text:
    r = e.record
    style = {"completed": "green", "failed": "red", "running": "yellow"}[r.status]
    text = Text(r.status, style=style)
    if r.error is not None:
        text.append(" ")
        text.append_text(literal(r.error, "red"))
    if e.orphaned:
        text.append(f" (job {e.job_state})", style="bold red")
    if e.current is False:
        text.append(" (older declaration)", style="dim")
    return text


def _checkpoint(window_ms: int) -> str:
    """How often a run records its progress: the ledger moves a window of batches at a time."""
    from jobs_core.operator.times import age

    return "every batch" if window_ms == 0 else f"every {age(window_ms)} of batches"


def _cursor(e: EntryView) -> str:
    return "-" if e.record.cursor_json is None else e.record.cursor_json


def print_sweeps(view: BackfillsView, now_ms: int) -> None:
    """One row per sweep and scope and environment (its newest run), then this environment's
    pending sweeps."""
    from jobs_core.operator.times import relative

    rows: list[list[Cell]] = []
    for s in view.sweeps:
        newest = s.newest_per_scope()
        if not newest:
            rows.append([s.name, s.kind, "-", "-", Text("never ran", style="dim"), "-", "-", "-"])
        for e in newest:
            r = e.record
            rows.append(
                [
                    s.name,
                    r.kind,
                    r.scope,
                    r.environment,
                    _status(e),
                    _progress(e),
                    _rate(e),
                    relative(r.updated_at_ms, now_ms),
                ]
            )
    cols = [Col("sweep", True), Col("kind"), Col("scope", True), Col("env", True)]
    print_table([*cols, Col("status", True), Col("progress"), Col("rate"), Col("updated")], rows)
    if not view.sweeps:
        console.print("no sweeps declared and none in the ledger")
    here = view.pending.get(view.environment, [])
    label = Text.assemble("pending in ", literal(view.environment, "bold"), ": ")
    if here:
        console.print(label + Text(", ").join(_pending_item(p) for p in here), soft_wrap=True)
    elif any(s.declared is not None for s in view.sweeps):
        console.print(label + Text("nothing"), soft_wrap=True)
    if not view.complete:
        console.print("note: some sweeps hold more runs than were read; the newest are shown")


def _pending_item(p: Pending) -> Text:
    scope = "tenants unknown" if p.scope is None else p.scope
    return Text.assemble(literal(p.name), " (", literal(scope), f", {p.status})")


def print_pending(pending: dict[str, list[Pending]]) -> None:
    rows: list[list[Cell]] = [
        [
            env,
            p.name,
            Text("(no tenant yet)", style="dim") if p.scope is None else p.scope,
            p.status,
            p.run_id or "-",
        ]
        for env, ps in pending.items()
        for p in ps
    ]
    cols = [Col("env", True), Col("sweep", True), Col("scope", True), Col("status", True)]
    print_table([*cols, Col("newest run", True)], rows)
    if not rows:
        looked = ", ".join(pending) or "no environment"
        console.print(literal(f"nothing pending ({looked})"))


def print_sweep(sweep: SweepView, now_ms: int) -> None:
    """A sweep's declaration, each of its runs, and where it is pending."""
    from jobs_core.operator.times import age, relative

    d = sweep.declared
    fields: list[list[Cell]] = [["sweep", sweep.name], ["kind", sweep.kind]]
    if d is None:
        fields.append(["declared", Text("no (not in --app, or no --app given)", style="dim")])
    else:
        spec = d.spec
        envs = "any" if spec.environments is None else ", ".join(sorted(spec.environments))
        fields += [
            ["tenant", "none (crosses tenants)" if spec.cross_tenant else "per tenant"],
            ["checksum", spec.checksum],
            ["batch", f"{spec.batch} rows"],
            ["rate", "-" if spec.interval_ms is None else f"a batch per {age(spec.interval_ms)}"],
            ["checkpoint", _checkpoint(spec.window_ms)],
            ["environments", envs],
            ["requires", ", ".join(r.name for r in spec.requires) or "-"],
            ["job queue", d.queue],
        ]
    print_table([Col("field", True), Col("value", True)], fields, header=False)
    rows: list[list[Cell]] = []
    for e in sweep.entries:
        r = e.record
        ended = r.finished_at_ms if r.finished_at_ms is not None else r.updated_at_ms
        rows.append(
            [
                r.run_id,
                r.job_id,
                r.scope,
                r.environment,
                _status(e),
                f"{r.batches}",
                _progress(e),
                _rate(e),
                _cursor(e),
                relative(r.started_at_ms, now_ms),
                relative(ended, now_ms),
            ]
        )
    console.print(Text("runs", style="bold"))
    keep = [Col("run", True), Col("job", True), Col("scope", True), Col("env", True)]
    rest = [Col("batches"), Col("progress"), Col("rate"), Col("cursor")]
    if rows:
        print_table([*keep, Col("status", True), *rest, Col("started"), Col("updated")], rows)
    else:
        console.print("no run in the ledger")
    if sweep.pending:
        console.print(Text("pending", style="bold"))
        print_pending(_by_env(sweep.pending))


def _by_env(items: Sequence[Pending]) -> dict[str, list[Pending]]:
    out: dict[str, list[Pending]] = {}
    for p in items:
        out.setdefault(p.environment, []).append(p)
    return out


def print_report(report: list[dict[str, Any]]) -> None:
    """An import's error report: the line, the field and the code of each refused record."""
    console.print(Text("error report", style="bold"))
    if not report:
        console.print("no record refused")
        return
    rows: list[list[Cell]] = [
        [str(r.get("line", "?")), str(r.get("field") or "-"), str(r.get("code", "?"))]
        for r in report
    ]
    print_table([Col("line", True), Col("field", True), Col("code", True)], rows)
