"""`ujobs scheduler` (the role) and `ujobs tasks` (each task's next and last fire)."""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import Callable
from datetime import tzinfo
from typing import TYPE_CHECKING

import click
from rich.text import Text

from jobs_core.cli.base import (
    _DRIVER_HELP,
    DRIVER_ENV,
    _configure_logging,
    _fail,
    _import_module,
    _required_driver,
    console,
    drain_option,
    emit_json,
    lease_option,
    main,
    tz_option,
    use_tz,
)
from jobs_core.cli.show import Cell, Col, print_table
from jobs_core.clock import SystemClock
from jobs_core.errors import CliNoJobsError, JobsError
from jobs_core.lifecycle import LOOP_CHOICES, loop_factory
from jobs_core.urls import driver_from_url
from jobs_core.visible import spelled

if TYPE_CHECKING:
    from jobs_core.lifecycle import StopBudget
    from jobs_core.operator import TaskView
    from jobs_core.scheduler import Scheduler, TaskHandle

log_format_option = click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log lines as text, or one JSON object per line.",
)

#: Where a role's `--loop` is read when it is not given.
LOOP_ENV = "UJOBS_LOOP"
#: `--loop`, for every long-running role (worker, scheduler, relay): the event loop its process
#: runs on (`jobs_core.lifecycle.loop_factory`).
loop_option = click.option(
    "--loop",
    "loop",
    type=click.Choice(LOOP_CHOICES),
    default="auto",
    envvar=LOOP_ENV,
    show_envvar=True,
    show_default=True,
    help="The event loop: uvloop (less CPU a job), asyncio, or auto: uvloop where installed.",
)


def started() -> None:
    """Called once a role's process has imported and built what it runs, before it runs: those
    objects (about 115,000 in a Postgres drain: the drivers, SQLAlchemy, the app's module) live as
    long as the process, yet every full collection walked them all — about 15 µs of a no-op
    job's ~80 µs of worker CPU on a Postgres drain (docs/pg.md, issue 29). Frozen, collections
    walk what the run itself made. Objects of them that later become garbage in a cycle are
    never freed: a fixed amount, made once."""
    gc.freeze()


def drained() -> None:
    """Called once a role's process has drained: what is left is the interpreter's teardown,
    whose final collections walk every object the imports made (the drivers' bring ~80,000)
    and took about a second on a loaded 2-core host, past the drain's deadline. Frozen, they
    are skipped: the process is ending, and nothing it still holds needs a collection."""
    gc.freeze()


def tasks_in(module: str) -> list[TaskHandle]:
    """The tasks `module` exports; `X_CLI_NO_JOBS` when it exports none."""
    from jobs_core.scheduler import tasks_of

    handles = tasks_of(_import_module(module))
    if not handles:
        raise CliNoJobsError(
            f"{module!r} exports no tasks (declare them with task() at module level)",
            detail=module,
        )
    return handles


@main.command()
@click.argument("module")
@click.option("--driver", "url", envvar=DRIVER_ENV, show_envvar=True, help=_DRIVER_HELP)
@lease_option("The leader's lease, in seconds.")
@drain_option()
@log_format_option
@loop_option
@click.pass_context
def scheduler(
    ctx: click.Context,
    module: str,
    url: str | None,
    lease: float,
    drain_timeout: float,
    log_format: str,
    loop: str,
) -> None:
    """Fire the tasks MODULE exports while this process leads, until SIGTERM or Ctrl-C.

    Run as many as you like: one leads (a lease), the others stand by and take over within
    --lease when it goes. Each occurrence fires once whatever they believe.
    """
    from jobs_core.lifecycle import run_role
    from jobs_core.scheduler import Scheduler

    _configure_logging(ctx.obj or 0, log_format, [url] if url else [])
    try:
        url = _required_driver(url, "scheduler")
        loop_factory(loop)
        handles = tasks_in(module)
        s = Scheduler(driver_from_url(url), handles, lease_ttl=lease)
    except JobsError as exc:
        _fail(exc)

    def banner() -> None:
        # Printed once the store first answered (or was found down, and is waited for): a
        # store that refuses the scheduler (its schema missing) prints its error alone.
        if log_format == "json":  # the banner is a log line too (jobs_core.cli.banner)
            from jobs_core.cli.banner import announce_scheduler

            announce_scheduler(s)
            return
        from jobs_core.cli.banner import role_head

        # Each line within 80 columns, as the worker's (`role_head`).
        for line in role_head("scheduler", spelled(s.scheduler_id), spelled(s.driver.describe())):
            console.print(line, soft_wrap=True)
        console.print(f"lease {s.ttl_ms / 1000:g} s", soft_wrap=True)
        now = SystemClock().now_ms()
        print_tasks(unread(handles, now), now)

    try:
        run_role(run_scheduler(s, drain_timeout, banner), loop)
    except JobsError as exc:
        _fail(exc)
    drained()


async def run_scheduler(
    s: Scheduler, drain_timeout: float, banner: Callable[[], None] | None = None
) -> None:
    """Run `s` until SIGTERM or SIGINT, then drain it (bounded by `drain_timeout`) and close its
    driver within the drain's slack. A store that is down at start is waited for (a signal
    meanwhile ends the wait); one that refuses the scheduler otherwise raises. `banner()` runs
    once the store was heard from (`Scheduler.start`), never before a refusal."""
    from jobs_core.lifecycle import StopBudget, close_quietly

    signalled = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, signalled.set)
    budget: StopBudget | None = None
    starting = asyncio.ensure_future(s.start(banner))
    waiting = asyncio.ensure_future(signalled.wait())
    try:
        await asyncio.wait([starting, waiting], return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # a refusal ends the process here (X_* and exit 2)
        await waiting
        budget = StopBudget.after(drain_timeout)
        await s.stop(drain_timeout)  # a start still waiting for the store ends with it
        await starting
    finally:
        waiting.cancel()
        # A start that raised: the close gets the slack alone.
        await close_quietly([s.driver], (budget or StopBudget.after(0)).slack_ms())


@main.command()
@click.argument("module")
@click.option("--driver", "url", envvar=DRIVER_ENV, show_envvar=True, help=_DRIVER_HELP)
@tz_option("each task's own (its tz column)")
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def tasks(module: str, url: str | None, tz: str | None, as_json: bool) -> None:
    """The tasks MODULE exports: cron, zone, job, the next fire and the last one that ran
    (in each task's zone, or --tz; to the second when its cron names seconds)."""
    from jobs_core.operator import Operator

    zone = use_tz(tz)
    try:
        url = _required_driver(url, "tasks")
        handles = tasks_in(module)
        driver = driver_from_url(url)

        async def read() -> list[TaskView]:
            async with driver:
                return await Operator(driver).tasks(handles)

        views = asyncio.run(read())
    except JobsError as exc:
        _fail(exc)
    if as_json:
        emit_json([v.to_json() for v in views])
    else:
        print_tasks(views, SystemClock().now_ms(), zone)


def unread(handles: list[TaskHandle], now_ms: int) -> list[TaskView]:
    """The tasks as a scheduler about to start sees them: no mark read yet."""
    from jobs_core.operator import TaskView

    return [TaskView.of(h, None, False, now_ms) for h in handles]


def print_tasks(views: list[TaskView], now_ms: int, zone: tzinfo | None = None) -> None:
    """The tasks as a table; fires in `zone`, else each task's own. A paused task's next fire
    says what a resume brings (`TaskView.fire_said`)."""
    from jobs_core.operator.times import relative

    rows: list[list[Cell]] = []
    for v in views:
        h, last = v.handle, v.last_fire_ms
        rows.append(
            [
                h.name,
                h.cron,
                h.tz,
                h.job.name,
                h.catch_up,
                Text(v.fire_said(now_ms, zone), style="yellow" if v.paused else ""),
                "-" if last is None else f"{v.shown(last, zone)} ({relative(last, now_ms)})",
            ]
        )
    cols = [Col("task", True), Col("cron", True), Col("tz"), Col("job", True), Col("catch-up")]
    print_table([*cols, Col("next fire"), Col("last fire")], rows)
