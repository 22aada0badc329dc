"""The operator's verbs: `ujobs jobs list|show|cancel|requeue|promote|remove`, `ujobs batches
show`, `ujobs queues`, `ujobs pause|resume`, `ujobs workers`, `ujobs stats`.

Each reads the driver URL from `--driver` or `UJOBS_DRIVER`, prints a table for people or one
JSON document with `--json`, and exits 2 with its typed refusal (`X_CODE: message`) when the
store refuses. Inputs are redacted by the live workers' declarations, plus the jobs of
`--app MODULE` (env `UJOBS_APP`) when given.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import click
from rich.text import Text

from jobs_core.cli.base import (
    APP_ENV,
    WHOLE,
    Seconds,
    _fail,
    _jobs_in,
    _required_driver,
    console,
    driver_option,
    emit_json,
    json_option,
    literal,
    main,
    tz_option,
    use_tz,
)
from jobs_core.cli.show import (
    print_batch,
    print_bulk,
    print_family,
    print_job,
    print_jobs,
    print_queues,
    print_stats,
    print_steered,
    print_workers,
)
from jobs_core.clock import SystemClock
from jobs_core.driver import MAX_BULK_IDS, MAX_LIST_LIMIT
from jobs_core.errors import CliUsageInvalidError, JobsError, OptionInvalidError
from jobs_core.operator import Action, CancelReport, FamilyView, JobView, Operator, refusal_for
from jobs_core.operator.service import Answer
from jobs_core.records import JobFilter, Pause
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url

T = TypeVar("T")


_app_option = click.option(
    "--app",
    "app",
    envvar=APP_ENV,
    show_envvar=True,
    default=None,
    help="A jobs module whose declarations redact inputs too (beside the live workers').",
)


def _filter_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    states = [s.value for s in JobState]
    fn = click.option(
        "--batch", default=None, help="Only the members of this batch (needs flows)."
    )(fn)
    fn = click.option(
        "--parent", default=None, help="Only the children of this job (needs flows)."
    )(fn)
    # acts-for: apart from --tenant, which is the ENQUEUER's tenant (the rate limiter's
    # bucket): "match either" would widen a bulk `--all` to rows another org enqueued.
    fn = click.option(
        "--acts-for",
        "acts_for",
        default=None,
        help="Only jobs acting for this org (their declaration's tenant of the input).",
    )(fn)
    fn = click.option(
        "--tenant",
        default=None,
        help="Only jobs ENQUEUED under this tenant (the rate limiter's bucket; see --acts-for).",
    )(fn)
    fn = click.option("--name", default=None, help="Only this job name.")(fn)
    fn = click.option("--queue", default=None, help="Only this queue.")(fn)
    fn = click.option(
        "--state",
        "states",
        multiple=True,
        type=click.Choice(states),
        help="Only rows in this state (repeat for several).",
    )(fn)
    return fn


def _filter(
    states: Sequence[str],
    queue: str | None,
    name: str | None,
    tenant: str | None,
    parent: str | None = None,
    batch: str | None = None,
    acts_for: str | None = None,
) -> JobFilter:
    return JobFilter(
        frozenset(JobState(s) for s in states),
        queue,
        name,
        tenant,
        parent,
        batch,
        acts_for=acts_for,
    )


#: `--tz`: the zone the CLI's times are shown in (jobs_core.operator.times.use_zone).
_tz_option = tz_option("this machine's")


def _typed_command() -> str:
    """The operator command being run, as typed after `ujobs` (`jobs list`, `queues`)."""
    names: list[str] = []
    ctx = click.get_current_context(silent=True)
    while ctx is not None and ctx.parent is not None:  # the root is the program itself
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(reversed(names)) or "operator commands"


def _run(url: str | None, app: str | None, work: Callable[[Operator], Awaitable[T]]) -> T:
    """Open the driver of `url`, run `work` with an `Operator` over it, close it; a refusal
    prints its one line and exits 2."""
    try:
        url = _required_driver(url, _typed_command())
        driver = driver_from_url(url)
        handles = _jobs_in(app) if app else []

        async def go() -> T:
            async with driver:
                return await work(Operator(driver, clock=SystemClock(), handles=handles))

        return asyncio.run(go())
    except JobsError as exc:
        _fail(exc)


@main.group()
def jobs() -> None:
    """List, show and steer jobs."""


@jobs.command("list")
@driver_option
@_filter_options
@click.option(
    "--limit", default=50, show_default=True, type=WHOLE, help=f"Rows (at most {MAX_LIST_LIMIT})."
)
@click.option("--cursor", default=None, help="The next_cursor of the previous page.")
@_app_option
@_tz_option
@json_option
def jobs_list(
    url: str | None,
    states: tuple[str, ...],
    queue: str | None,
    name: str | None,
    tenant: str | None,
    acts_for: str | None,
    parent: str | None,
    batch: str | None,
    limit: int,
    cursor: str | None,
    app: str | None,
    tz: str | None,
    as_json: bool,
) -> None:
    """Jobs newest first; prints the cursor of the next page when there is one. `--parent` and
    `--batch` need a driver with flows (else X_DRIVER_CAPABILITY_MISSING)."""
    if not 1 <= limit <= MAX_LIST_LIMIT:
        _fail(OptionInvalidError(f"--limit must be 1 to {MAX_LIST_LIMIT}", detail="--limit"))
    f = _filter(states, queue, name, tenant, parent, batch, acts_for)
    use_tz(tz)
    now = SystemClock().now_ms()
    page = _run(url, app, lambda op: op.jobs(f, limit=limit, cursor=cursor))
    if as_json:
        emit_json(page.to_json())
    else:
        print_jobs(page, now)


@jobs.command("show")
@click.argument("job_id")
@driver_option
@_app_option
@_tz_option
@json_option
def jobs_show(job_id: str, url: str | None, app: str | None, tz: str | None, as_json: bool) -> None:
    """One job: every field, its input (sensitive fields redacted), result and last error, what
    it waits for (in words, times in local time or --tz); with flows, its parent, its children
    by state, the join it waits on and its batch."""
    use_tz(tz)
    now = SystemClock().now_ms()

    async def read(op: Operator) -> tuple[JobView, bool, FamilyView | None]:
        view = await op.job(job_id)
        caps = op.driver.capabilities()
        family = await op.family(view.record) if caps.flows and caps.operator else None
        return view, caps.steps, family

    view, has_steps, family = _run(url, app, read)
    if as_json:
        doc = view.to_json()
        doc["family"] = None if family is None else family.to_json()
        emit_json(doc)
    else:
        print_job(view, now, has_steps=has_steps)
        if family is not None:
            print_family(view, family)


#: The state the `--all` refusal's example names for each verb: one it acts on (a dead job is
#: never promoted nor cancelled), so the example copied does what the verb is for.
_EXAMPLE_STATE: dict[Action, str] = {
    Action.CANCEL: "ready",
    Action.REQUEUE: "dead",
    Action.REQUEUE_FRESH: "dead",
    Action.PROMOTE: "ready",
    Action.REMOVE: "dead",
}


def _steer(verb: Action, verb_help: str) -> None:
    """The command `ujobs jobs <verb>`; `requeue` takes `--fresh` (the `REQUEUE_FRESH` action)."""

    def steer(
        job_ids: tuple[str, ...],
        url: str | None,
        states: tuple[str, ...],
        queue: str | None,
        name: str | None,
        tenant: str | None,
        acts_for: str | None,
        parent: str | None,
        batch: str | None,
        everything: bool,
        as_json: bool,
        fresh: bool = False,
        keep_children: bool = False,
    ) -> None:
        action = Action.REQUEUE_FRESH if fresh else verb
        f = _filter(states, queue, name, tenant, parent, batch, acts_for)
        if everything:
            if job_ids or f == JobFilter():
                _fail(
                    CliUsageInvalidError(
                        f"--all takes no ids and at least one filter (--state, --queue, --name,"
                        f" --tenant, --acts-for, --parent, --batch): `ujobs jobs {verb.value}"
                        f" --all --state {_EXAMPLE_STATE[verb]}`"
                    )
                )
            report = _run(url, None, lambda op: op.act_all(action, f))
            if as_json:
                emit_json(report.to_json())
            else:
                print_bulk(report)
            return
        if not job_ids:
            _fail(CliUsageInvalidError(f"name job ids, or --all with filters ({verb.value})"))
        if len(job_ids) > MAX_BULK_IDS:
            _fail(CliUsageInvalidError(f"at most {MAX_BULK_IDS} ids at once; use --all"))
        cascade: CancelReport | None = None
        answers: Sequence[Answer]
        if action is Action.CANCEL:
            cascade = _run(url, None, lambda op: op.cancel(job_ids, keep_children=keep_children))
            answers = cascade.answers
        else:
            answers = _run(url, None, lambda op: op.act(action, job_ids))
        pairs = list(zip(job_ids, answers, strict=True))
        if as_json:
            emit_json([{"id": i, "answer": a.value} for i, a in pairs])
        else:
            print_steered(action, pairs)
            if cascade is not None and cascade.examined:
                console.print(
                    f"children: {cascade.cascaded} live descendants cancelled"
                    f" ({cascade.examined} looked at)"
                )
        refusals = [r for i, a in pairs if (r := refusal_for(action, i, a)) is not None]
        if refusals:
            _fail(refusals[0])

    command: Callable[..., Any] = steer
    if verb is Action.CANCEL:
        command = click.option(
            "--keep-children",
            is_flag=True,
            help="Cancel only the named jobs, not their live children (by default each job"
            " cancelled takes its live descendants with it, in writes after its own).",
        )(command)
    if verb is Action.REQUEUE:
        command = click.option(
            "--fresh",
            is_flag=True,
            help="Start each job as a FRESH run (a new run id, no recorded step replayed): the"
            " way to run again a saga that failed for good, whose steps are undone.",
        )(command)
    for option in (
        json_option,
        click.option(
            "--all", "everything", is_flag=True, help="Every row the filters keep (at least one)."
        ),
        _filter_options,
        driver_option,
        click.argument("job_ids", nargs=-1),
    ):
        command = option(command)
    jobs.command(verb.value, help=verb_help)(command)


_steer(
    Action.CANCEL,
    "Cancel live jobs (a running one's worker aborts its body), and, unless --keep-children,"
    " the live children each one enqueued, recursively. The cascade follows the parent's"
    " cancel (not atomic with it): a child enqueued meanwhile is swept by `--all --parent ID`.",
)
_steer(
    Action.REQUEUE,
    "Run finished jobs again, with fresh attempts, in the same run (recorded steps replay). A"
    " saga run that failed for good is refused (X_JOB_REQUEUE_UNWOUND): use --fresh.",
)
_steer(Action.PROMOTE, "Make delayed jobs due now.")
_steer(Action.REMOVE, "Delete jobs that are not running, with everything stored for them.")


@main.group()
def batches() -> None:
    """See batches (`client.batch()`): their members' progress and their callbacks."""


@batches.command("show")
@click.argument("batch_id")
@driver_option
@json_option
def batches_show(batch_id: str, url: str | None, as_json: bool) -> None:
    """A batch's members by state and its callback jobs (needs a driver with flows)."""
    view = _run(url, None, lambda op: op.batch(batch_id))
    if as_json:
        emit_json(view.to_json())
    else:
        print_batch(view, SystemClock().now_ms())


@main.command()
@driver_option
@json_option
def queues(url: str | None, as_json: bool) -> None:
    """Every queue: depth, running, dead, oldest ready age, demand, pause and throughput."""
    now = SystemClock().now_ms()
    views = _run(url, None, lambda op: op.queues())
    if as_json:
        emit_json([v.to_json() for v in views])
    else:
        print_queues(views, now)


def _pause_target(queue: str | None, name: str | None, task: str | None) -> Pause:
    given = [p for p in (("queue", queue), ("name", name), ("task", task)) if p[1] is not None]
    if len(given) != 1:
        _fail(CliUsageInvalidError("name one QUEUE, or a job with --name, or a task with --task"))
    kind, value = given[0]
    return Pause(kind, value or "")  # type: ignore[arg-type]


@main.command()
@click.argument("queue", required=False)
@click.option("--name", default=None, help="Pause one job name in every queue instead.")
@click.option("--task", default=None, help="Pause a scheduled task instead (its watermark stays).")
@driver_option
def pause(queue: str | None, name: str | None, task: str | None, url: str | None) -> None:
    """Stop claiming a queue's jobs (or one job name's), or firing a task; running jobs finish."""
    target = _pause_target(queue, name, task)
    new = _run(url, None, lambda op: op.pause(target))
    done = "paused" if new else "was already paused"
    console.print(Text.assemble(f"{target.kind} '", literal(target.value), f"' {done}"))


@main.command()
@click.argument("queue", required=False)
@click.option("--name", default=None, help="Resume one job name instead.")
@click.option("--task", default=None, help="Resume a scheduled task (it catches up as declared).")
@driver_option
def resume(queue: str | None, name: str | None, task: str | None, url: str | None) -> None:
    """Claim a paused queue's (or job name's) jobs again, or fire a paused task again."""
    target = _pause_target(queue, name, task)
    existed = _run(url, None, lambda op: op.resume(target))
    done = "resumed" if existed else "was not paused"
    console.print(Text.assemble(f"{target.kind} '", literal(target.value), f"' {done}"))


@main.command()
@driver_option
@json_option
def workers(url: str | None, as_json: bool) -> None:
    """The live workers: host, pid, queues, concurrency, jobs, last beat."""
    now = SystemClock().now_ms()
    views = _run(url, None, lambda op: op.workers())
    if as_json:
        emit_json([v.to_json() for v in views])
    else:
        print_workers(views, now)


@main.command()
@driver_option
@click.option(
    "--window",
    default=3600.0,
    show_default=True,
    type=Seconds(60, 30 * 24 * 3600),
    help="Seconds of settles to count back (60 to 30 days' worth).",
)
@json_option
def stats(url: str | None, window: float, as_json: bool) -> None:
    """Jobs by state, and per job name what settled over the window (from the counters; a
    window starting inside an hour already folded counts that hour whole).

    \b
    Columns: completed, retried (an attempt failed, another follows), dead-lettered and
    dropped (failed for good: to `dead`, or to `failed` without a dead letter), refused (keyed
    concurrency said no: failed, no attempt spent), interrupted (a drain gave the run back),
    shed (given back WITHOUT spending an attempt because it could not start or go on now: a
    rate limit, a concurrency slot, a job name this worker does not run; due again later),
    suspended (the run parked itself: a durable sleep, an event wait, a wait on child jobs;
    counted at each park), cancelled."""
    view = _run(url, None, lambda op: op.stats(round(window * 1000)))
    if as_json:
        emit_json(view.to_json())
    else:
        print_stats(view)
