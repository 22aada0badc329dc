"""`ujobs worker`, `ujobs enqueue`, `ujobs db upgrade` and `ujobs demo`: running the jobs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, Final, cast

import click
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from jobs_core.cli.banner import (
    BANNER_WIDTH,
    announce,
    announce_plan,
    announce_stats,
    body_kind,
    fitted,
    json_logs,
    listed,
    role_head,
)
from jobs_core.cli.base import (
    _DRIVER_HELP,
    DRIVER_ENV,
    WHOLE,
    Seconds,
    Whole,
    _configure_logging,
    _fail,
    _jobs_in,
    _required_driver,
    console,
    drain_option,
    emit_json,
    lease_option,
    literal,
    main,
)
from jobs_core.cli.relay import OUTBOX_ENV, OUTBOX_HELP, outbox_for_worker, print_relay
from jobs_core.cli.schedule import drained, loop_option, started
from jobs_core.cli.show import Cell, Col, print_table
from jobs_core.driver import PRIORITY_MAX, PRIORITY_MIN, JobDriver
from jobs_core.errors import (
    CliUsageInvalidError,
    InputInvalidError,
    JobNotRegisteredError,
    JobsError,
    KeyRequiredError,
    OptionInvalidError,
)
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle
from jobs_core.leases import RateLimit
from jobs_core.leases.limits import RateScope
from jobs_core.lifecycle import StopBudget, close_quietly, loop_factory, loop_name, run_role
from jobs_core.options import ascii_decimal, ascii_whole
from jobs_core.outbox import Relay
from jobs_core.retention import DEFAULT_RETENTION, Retention
from jobs_core.scheduler import Scheduler
from jobs_core.urls import driver_from_url, scheme_of
from jobs_core.visible import spelled
from jobs_core.worker import Worker, WorkerStats
from jobs_core.worker.supervisor import (
    ChildHooks,
    max_jobs_from,
    processes_from,
    shared_store,
    watch_parent,
)


@main.command()
@click.argument("module")
@click.option("--driver", "url", envvar=DRIVER_ENV, show_envvar=True, help=_DRIVER_HELP)
@click.option(
    "--queue", "queues", multiple=True, help="Queue to work (repeat); default: the jobs' own."
)
@click.option("--concurrency", default=50, show_default=True, type=WHOLE, help="Bodies at once.")
@click.option(
    "--max-in-flight", type=WHOLE, default=None, help="Jobs held at once (>= concurrency)."
)
@lease_option("Lease, in seconds.")
@drain_option(0.001)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Log lines as text, or one JSON object per line (with the records' extra fields).",
)
@click.option(
    "--keep",
    "keeps",
    multiple=True,
    metavar="STATE=SECONDS",
    help="Retention of one final state (completed, cancelled, failed, dead) or of webhook "
    "attempts (webhook_attempts): seconds, or 'forever' (repeat). Defaults: completed and "
    "cancelled 86400, failed, dead and webhook_attempts 604800.",
)
@click.option(
    "--rate-limit",
    "rates",
    multiple=True,
    metavar="N/SECONDS[:BY]",
    help="At most N starts per SECONDS across the fleet, over every job this worker runs; BY is "
    "global (the default), queue or tenant (repeat, one per BY). E.g. 100/60:tenant.",
)
@click.option(
    "--metrics-port",
    type=WHOLE,
    default=None,
    help="Serve Prometheus /metrics and /healthz on this port (0: any free port).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="The address /metrics and /healthz listen on (0.0.0.0 for every interface).",
)
@click.option(
    "--with-scheduler",
    is_flag=True,
    help="Also run the scheduler role for the tasks MODULE exports (one leads fleet-wide).",
)
@click.option(
    "--with-relay",
    is_flag=True,
    help="Also relay the outbox (--outbox, else the driver's own Postgres) to this driver.",
)
@click.option("--outbox", "outbox_url", envvar=OUTBOX_ENV, show_envvar=True, help=OUTBOX_HELP)
@click.option("--quiet", is_flag=True, help="No live counts.")
@click.option(
    "--process-pool",
    type=WHOLE,
    default=None,
    help='Processes for executor="process" bodies (default: the CPU count, at most concurrency).',
)
@click.option(
    "--processes",
    default="1",
    show_default=True,
    help="Whole worker processes (not --process-pool's) under one supervisor, which restarts "
    "any that dies and forwards SIGTERM/Ctrl-C to drain them all; 'auto': one per CPU.",
)
@click.option(
    "--max-jobs-per-process",
    type=WHOLE,
    default=None,
    help="Recycle a worker process after this many jobs: drained, then replaced.",
)
@loop_option
@click.option("--supervised-by", type=WHOLE, default=None, hidden=True)
@click.pass_context
def worker(
    ctx: click.Context,
    module: str,
    url: str | None,
    queues: tuple[str, ...],
    concurrency: int,
    max_in_flight: int | None,
    lease: float,
    drain_timeout: float,
    log_format: str,
    keeps: tuple[str, ...],
    rates: tuple[str, ...],
    metrics_port: int | None,
    metrics_host: str,
    with_scheduler: bool,
    with_relay: bool,
    outbox_url: str | None,
    quiet: bool,
    processes: str,
    max_jobs_per_process: int | None,
    supervised_by: int | None,
    process_pool: int | None,
    loop: str,
) -> None:
    """Run a worker for the jobs MODULE exports, until SIGTERM or Ctrl-C (then drain).

    With --processes N (or --max-jobs-per-process), this process supervises N such workers: it
    restarts one that dies and drains them all on SIGTERM or Ctrl-C; /metrics then serves the
    whole group on one port.
    """
    _configure_logging(ctx.obj or 0, log_format, [u for u in (url, outbox_url) if u])
    child = None
    if supervised_by is not None:
        watch_parent(supervised_by)
        child = ChildHooks(supervised_by, max_jobs_per_process)
    try:
        group = processes_from(processes), max_jobs_from(max_jobs_per_process)
        url = _required_driver(url, "worker")
        if metrics_port is not None and not 0 <= metrics_port <= 65_535:
            raise OptionInvalidError("must be a port, 0 to 65535", detail="--metrics-port")
        loop_factory(loop)  # `--loop uvloop` without uvloop: refused before anything starts
        retention = retention_from(keeps)
        driver = driver_from_url(url)
        if supervised_by is None and group != (1, None):
            shared_store(driver, "--processes" if group[0] != 1 else "--max-jobs-per-process")
        handles = _jobs_in(module)
        with _flags_named():
            w = Worker(
                driver,
                handles,
                queues=queues or None,
                concurrency=concurrency,
                max_in_flight=max_in_flight,
                lease=lease,
                drain_timeout=drain_timeout,
                retention=retention,
                rate_limits=[rate_limit_from(r) for r in rates],
                process_pool_size=process_pool,
            )
        sched = None
        if with_scheduler:
            from jobs_core.cli.schedule import tasks_in
            from jobs_core.scheduler import Scheduler

            sched = Scheduler(driver, tasks_in(module))
        given = ctx.get_parameter_source("outbox_url") == click.core.ParameterSource.COMMANDLINE
        if given and not with_relay:
            raise CliUsageInvalidError("--outbox names the outbox --with-relay relays from")
        relay = (
            Relay(outbox_for_worker(outbox_url, url), driver, clock=w.clock) if with_relay else None
        )
    except JobsError as exc:
        _fail(exc)
    if child is None and group != (1, None):
        from jobs_core.cli.group import run_group

        raise SystemExit(run_group(ctx, w, group[0], metrics_host, metrics_port))
    # --log-format json: the banner and the final counts are log lines too (jobs_core.cli.banner)
    as_json = log_format == "json"

    def banner() -> None:
        # Printed once the store first answered (or was found down, and is waited for): a
        # store that refuses the worker (its schema missing) prints its error alone.
        if as_json:
            announce_plan(w, handles, driver, sched, relay, loop=loop_name(loop))
            return
        _print_plan(w, handles, driver, loop=loop_name(loop))
        if sched is not None:
            from jobs_core.cli.schedule import print_tasks, unread

            now = w.clock.now_ms()
            print_tasks(unread(sched.tasks, now), now)
        if relay is not None:
            print_relay(relay)

    started()
    try:
        run_role(
            _run_worker(
                w, quiet or as_json, metrics_host, metrics_port, sched, relay, child, banner
            ),
            loop,
        )
    except JobsError as exc:
        _fail(exc)
    except OSError as exc:  # the metrics port is taken, or the address is not ours
        _fail(OptionInvalidError(f"cannot serve metrics: {exc}", detail="--metrics-port"))
    if as_json:
        announce_stats(w.stats, w.worker_id)
    else:
        _print_stats(w.stats, "worker stopped")
    drained()


#: The `Worker` arguments the worker's and the demo's options set, by the option's name.
_WORKER_FLAGS: Final = {
    "concurrency": "--concurrency",
    "max_in_flight": "--max-in-flight",
    "process_pool_size": "--process-pool",
}


@contextlib.contextmanager
def _flags_named() -> Iterator[None]:
    """A `Worker` refusal of an argument an option set names that option, as the user wrote it
    (`--process-pool`, not `process_pool_size`)."""
    try:
        yield
    except OptionInvalidError as exc:
        flag = _WORKER_FLAGS.get(exc.detail or "")
        if flag is None:
            raise
        text = exc.message.removesuffix(f" ({exc.detail})")
        raise OptionInvalidError(text, detail=flag) from None


def retention_from(keeps: Sequence[str]) -> Retention:
    """The retention `--keep STATE=SECONDS|forever` options ask for, over the defaults; with
    none, `DEFAULT_RETENTION` itself (which a driver without the retention family may go
    without, where any `--keep` is refused).

    A malformed option or an unknown state is `X_CLI_USAGE_INVALID`; a bad number of seconds
    is `X_JOB_OPTION_INVALID` naming the state, as `Retention` refuses it.
    """
    if not keeps:
        return DEFAULT_RETENTION
    given: dict[str, float | None] = {}
    for keep in keeps:
        state, sep, value = keep.partition("=")
        state = state.strip()
        if not sep or state not in _KEEP_STATES:
            raise CliUsageInvalidError(
                f"--keep takes STATE=SECONDS or STATE=forever, STATE one of "
                f"{', '.join(_KEEP_STATES)}",
                detail=keep,
            )
        value = value.strip()
        if value == "forever":
            given[state] = None
            continue
        given[state] = ascii_decimal(value)
        if given[state] is None:
            raise OptionInvalidError(
                "must be seconds in ASCII digits (like 1.5) or 'forever'",
                detail=f"retention.{state}",
            )
    return replace(Retention(), **given)


_KEEP_STATES: Final = ("completed", "cancelled", "failed", "dead", "webhook_attempts")


def rate_limit_from(text: str) -> RateLimit:
    """The `RateLimit` of one `--rate-limit N/SECONDS[:BY]`; a malformed one is
    `X_CLI_USAGE_INVALID`, a bad number as `RateLimit` refuses it."""
    spec, _, by = text.partition(":")
    n, sep, per = spec.partition("/")
    limit, seconds = ascii_whole(n), ascii_decimal(per)
    if limit is None or seconds is None or not sep or by not in ("", "global", "queue", "tenant"):
        raise CliUsageInvalidError(
            "--rate-limit takes N/SECONDS[:BY], BY one of global, queue, tenant", detail=text
        )
    return RateLimit(limit, per=seconds, by=cast(RateScope, by or "global"))


def _retention_parts(r: Retention | None) -> list[str]:
    """Each final state's retention for people (`completed 86400 s`, `dead forever`); none
    when every finished job is kept."""
    if r is None or r.keeps_everything:
        return []
    parts = []
    for state in _KEEP_STATES:
        value = getattr(r, state)
        seconds = value.total_seconds() if isinstance(value, timedelta) else value
        parts.append(f"{state} {'forever' if seconds is None else f'{seconds:g} s'}")
    return parts


def _retention_text(r: Retention | None) -> str:
    parts = _retention_parts(r)
    return "keeps " + ", ".join(parts) if parts else "keeps every finished job"


def _print_plan(w: Worker, handles: list[JobHandle], driver: JobDriver, *, loop: str) -> None:
    """The text banner: who works where, its queues, its settings, its retention, its jobs.
    Each line holds `BANNER_WIDTH` columns (an 80-column terminal wraps none): a value that
    cannot is elided in its middle (the store, passwords masked as `describe` masks them) or
    by count (`queues: a, b, … (+12 more)`), a list that cannot goes on lines of its own."""
    head = role_head("worker", spelled(w.worker_id), spelled(driver.describe()))
    queues = [spelled(q) for q in w.queues]
    keeps = _retention_parts(w.retention)
    lines: list[Text | str] = [
        *head,
        f"queues: {listed(queues, BANNER_WIDTH - len('queues: '))}",
        *fitted(
            "",
            [
                f"concurrency {w.concurrency}",
                f"max in flight {w.max_in_flight}",
                f"lease {w.lease_ms / 1000:g} s",
                f"loop {loop}",
            ],
            " · ",
        ),
        *(fitted("keeps ", keeps) if keeps else ["keeps every finished job"]),
    ]
    if w.rate_limits:
        lines += fitted("rate limits: ", [_rate_text(r) for r in w.rate_limits])
    for line in lines:
        console.print(line, soft_wrap=True)
    rows: list[list[Cell]] = [
        [
            h.name,
            h.queue,
            str(h.retry.attempts),
            f"{h.timeout_ms / 1000:g} s" if h.timeout_ms else "-",
            body_kind(h),
            _limits_text(h),
        ]
        for h in sorted(handles, key=lambda h: h.name)
    ]
    heads = ("attempts", "timeout", "body", "limits")
    print_table([Col("job", True), Col("queue", True), *(Col(h) for h in heads)], rows)


def _rate_text(r: RateLimit) -> str:
    return f"{r.limit}/{r.per:g} s" + ("" if r.by == "global" else f" per {r.by}")


def _limits_text(h: JobHandle) -> str:
    """A job's fleet-wide limits for people: `2 at once`, `1 per key (fail)`, `25/1 s`."""
    parts = []
    c = h.concurrency
    if c is not None:
        if c.key is None:
            parts.append(f"{c.limit} at once")
        else:
            parts.append(f"{c.limit} per key" + (" (fail)" if c.when_busy == "fail" else ""))
    parts += [_rate_text(r) for r in h.rate_limits]
    return ", ".join(parts) or "-"


async def _run_worker(
    w: Worker,
    quiet: bool,
    metrics_host: str = "127.0.0.1",
    metrics_port: int | None = None,
    sched: Scheduler | None = None,
    relay: Relay | None = None,
    child: ChildHooks | None = None,
    banner: Callable[[], None] | None = None,
) -> None:
    # Before start: a worker waiting for its store to come up still drains on SIGTERM.
    w.install_signal_handlers()
    if child is not None:
        child.attach(w)
    url = None
    if metrics_port is not None:
        from jobs_core.operator.metrics import serve

        # Served from now on (/healthz says 503 while the store is waited for); said with the
        # banner, once the store was heard from.
        server = serve(w, metrics_host, metrics_port, relay, scheduler=sched)
        url = f"http://{metrics_host}:{server.port}/metrics"

    def heard() -> None:
        if banner is not None:
            banner()
        if url is None:
            return
        if json_logs():
            announce("jobs.worker.metrics", f"metrics on {url}", metrics_url=url)
        else:
            console.print(
                Text.assemble("metrics on ", literal(url), ", health on /healthz"), soft_wrap=True
            )

    roles: list[Scheduler | Relay] = [r for r in (sched, relay) if r is not None]
    # Watching before anything starts: a signal while a start waits for its store ends it.
    w_stopping = asyncio.ensure_future(_stop_with(w, roles)) if roles else None
    await w.start(heard)
    for role in roles:
        if w.draining:  # the roles were stopped with it: none starts now
            break
        await role.start()
    if child is not None and not w.draining:
        child.say_started()
    try:
        await _show_worker(w, quiet)
    finally:
        budget = await w_stopping if w_stopping is not None else None
        if relay is not None:  # the driver is the worker's
            await close_quietly([relay.outbox], (budget or StopBudget.after(0)).slack_ms())


async def _stop_with(w: Worker, roles: Sequence[Scheduler | Relay]) -> StopBudget:
    """Drain the roles beside `w` as soon as `w` begins its drain (same signal, same budget);
    answers that budget."""
    await w.drain_begun()
    budget = StopBudget.after(w.drain_timeout_ms / 1000)
    await asyncio.gather(*(role.stop(w.drain_timeout_ms / 1000) for role in roles))
    return budget


async def _show_worker(w: Worker, quiet: bool) -> None:
    if quiet or not console.is_terminal:
        await w.run()
        return
    with Live(_stats_table(w.stats), console=console, refresh_per_second=4) as live:
        while not w._stopped.is_set():
            live.update(_stats_table(w.stats, title="draining…" if w.draining else "running"))
            await asyncio.sleep(0.25)


_STATS_COLUMNS: Final = ("claimed", "running", "completed", "retried", "dead", "dropped")


def _stats_cells(s: WorkerStats) -> list[str]:
    counts = (s.claimed, s.running, s.completed, s.retried, s.dead_lettered, s.dropped)
    return [str(n) for n in (*counts, s.interrupted)]


def _stats_table(s: WorkerStats, title: str = "") -> Table:
    """The live counts, redrawn in place while the worker runs (a terminal only)."""
    table = Table(title=title or None)
    for col in (*_STATS_COLUMNS, "interrupted"):
        table.add_column(col, justify="right")
    table.add_row(*_stats_cells(s))
    return table


def _print_stats(s: WorkerStats, title: str) -> None:
    """The final counts, printed once: no column cut at any width."""
    cols = [Col(c, True, "right") for c in (*_STATS_COLUMNS, "interrupted")]
    print_table(cols, [_stats_cells(s)], title=title)


@main.group()
def db() -> None:
    """The store's schema."""


@db.command()
@click.option(
    "--driver",
    "--url",
    "url",
    required=True,
    envvar=DRIVER_ENV,
    show_envvar=True,
    help="Driver URL (Postgres: ?schema=name); else env UJOBS_DRIVER.",
)
def upgrade(url: str) -> None:
    """Install or upgrade the schema the driver at URL needs (no-op where there is none);
    says whether it created the schema, upgraded it (from → to) or found it current."""
    try:
        driver = driver_from_url(url)
        done = asyncio.run(driver.migrate())
    except JobsError as exc:
        _fail(exc)
    what = literal(done) if done else Text("this driver keeps no schema; nothing to do")
    console.print(Text.assemble(what, " on ", literal(driver.describe(), "cyan")), soft_wrap=True)


#: The longest `--delay`: ten years (`facade.MAX_TIME_MS`, the latest time a store holds, is
#: further off than that until the 2100s).
_MAX_DELAY_S: Final = 3650 * 86_400.0


@main.command()
@click.argument("module")
@click.argument("job_name")
@click.argument("input_json")
@click.option("--driver", "url", envvar=DRIVER_ENV, show_envvar=True, help=_DRIVER_HELP)
@click.option("--key", default=None, help="Idempotency key (else the job's own function).")
@click.option(
    "--delay",
    type=Seconds(0, _MAX_DELAY_S),
    default=None,
    help="Seconds before it may run (e.g. 1.5).",
)
@click.option(
    "--priority",
    type=Whole(PRIORITY_MIN, PRIORITY_MAX),
    default=None,
    help="0-100, lower runs first.",
)
def enqueue(
    module: str,
    job_name: str,
    input_json: str,
    url: str | None,
    key: str | None,
    delay: float | None,
    priority: int | None,
) -> None:
    """Enqueue one JOB_NAME from MODULE with INPUT_JSON; prints the id and whether it deduped."""
    try:
        url = _required_driver(url, "enqueue")
        driver = driver_from_url(url)
        handles = {h.name: h for h in _jobs_in(module)}
        handle = handles.get(job_name)
        if handle is None:
            raise JobNotRegisteredError(
                f"{module!r} exports no job {job_name!r} (it has: {', '.join(sorted(handles))})",
                detail=job_name,
            )
        try:
            value = json.loads(input_json)
        except ValueError as exc:
            raise InputInvalidError(f"INPUT_JSON is not JSON: {exc}", detail=job_name) from None
        except RecursionError:
            raise InputInvalidError("INPUT_JSON nests too deep", detail=job_name) from None
        if key is None and handle.key is None:
            # Refused here as the library would, but naming the option this command takes.
            raise KeyRequiredError(
                f"{job_name!r} declares no idempotency_key: pass --key KEY (one job per key),"
                " or declare idempotency_key= (each_enqueue for a fresh key every time)",
                detail=job_name,
            )
        options: dict[str, Any] = {"key": key, "priority": priority}
        if delay is not None:
            options["delay_ms"] = round(delay * 1000)

        async def go() -> None:
            async with driver:
                result = await Jobs(driver).enqueue(handle, value, **options)
            emit_json({"id": result.id, "deduped": result.deduped})

        asyncio.run(go())
        if scheme_of(url) == "memory":
            # Asked for, so done; but no worker can ever see it, which a newcomer trying the
            # CLI without a server would otherwise find out by waiting.
            click.echo(
                "note: the memory store lives in this process alone: the job ended with it; "
                "enqueue on a Postgres or Redis URL for a worker to run it",
                err=True,
            )
    except JobsError as exc:
        _fail(exc)


@main.command()
@click.option(
    "--driver",
    "url",
    default="memory",
    show_default=True,
    help="Driver URL (the demo alone runs on memory by default; it ignores UJOBS_DRIVER).",
)
@click.option(
    "--jobs", "total", default=10_000, show_default=True, type=WHOLE, help="Jobs to enqueue."
)
@click.option("--concurrency", default=200, show_default=True, type=WHOLE, help="Bodies at once.")
@click.option("--only-noop", is_flag=True, help="Every job a no-op: measures raw throughput.")
@click.pass_context
def demo(ctx: click.Context, url: str, total: int, concurrency: int, only_noop: bool) -> None:
    """Declare the example app, enqueue its jobs, work them, and check every promised outcome.

    The app fails hundreds of attempts on purpose; their warnings are shown with `-v` only (a
    worker logs every failed attempt, and that many tracebacks would be the demo's whole output
    and most of its time).
    """
    if not ctx.obj:
        logging.getLogger("jobs").setLevel(logging.CRITICAL)
    try:
        ok = asyncio.run(_demo(url, total, concurrency, only_noop))
    except JobsError as exc:
        _fail(exc)
    raise SystemExit(0 if ok else 1)


async def _demo(url: str, total: int, concurrency: int, only_noop: bool) -> bool:
    from jobs_core import demo as app

    driver = driver_from_url(url)
    await driver.open()
    jobs = Jobs(driver)
    plan = app.plan(total, only_noop=only_noop)
    console.print(
        Text.assemble(
            ("ujobs demo", "bold"), " on ", literal(driver.describe(), "cyan"), f": {total} jobs"
        )
    )
    ids: dict[str, list[str]] = {}
    started = time.perf_counter()
    for kind, inputs in plan:
        ids[kind.handle.name] = []
        for i in range(0, len(inputs), 1_000):
            results = await jobs.enqueue_many(kind.handle, inputs[i : i + 1_000])
            ids[kind.handle.name].extend(r.id for r in results)
    enqueue_s = time.perf_counter() - started
    with _flags_named():
        worker = Worker(
            driver,
            [k.handle for k, _ in plan],
            concurrency=concurrency,
            max_in_flight=concurrency * 2,
            poll_floor=0.005,
        )
    started = time.perf_counter()
    await worker.start()
    with Progress(
        TextColumn("working"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        task = bar.add_task("jobs", total=total)
        while True:
            s = worker.stats
            done = s.completed + s.dead_lettered + s.dropped
            bar.update(task, completed=done)
            if done >= total:
                break
            await asyncio.sleep(0.05)
    work_s = time.perf_counter() - started
    await worker.stop()
    ok = await _report(driver, plan, ids, worker.stats, enqueue_s, work_s, total)
    await driver.close()
    return ok


async def _report(
    driver: JobDriver,
    plan: list[tuple[Any, list[dict[str, Any]]]],
    ids: dict[str, list[str]],
    stats: WorkerStats,
    enqueue_s: float,
    work_s: float,
    total: int,
) -> bool:
    outcomes: list[list[Cell]] = []
    ok = True
    for kind, _ in plan:
        job_ids = ids[kind.handle.name]
        rows = await driver.job_get_many(job_ids)
        matched = sum(
            1
            for r in rows.values()
            if r.state.value == kind.final_state and r.attempt == kind.attempts
        )
        attempts = sum(r.attempt for r in rows.values())
        good = matched == len(job_ids)
        ok = ok and good
        outcomes.append(
            [
                kind.handle.name,
                str(len(job_ids)),
                f"{kind.final_state} after {kind.attempts}",
                str(matched),
                str(attempts),
                Text("yes", style="green") if good else Text("NO", style="red"),
            ]
        )
    heads = ("jobs", "promised", "ended so", "attempts", "ok")
    print_table([Col("job", True), *(Col(h) for h in heads)], outcomes, title="outcomes")
    _print_stats(stats, "worker counts")
    console.print(
        f"enqueued {total} in {enqueue_s:.2f} s ({total / enqueue_s:,.0f} jobs/s) · "
        f"worked {total} in {work_s:.2f} s (",
        Text(f"{total / work_s:,.0f} jobs/s", style="bold"),
        ")",
        sep="",
    )
    if not ok:
        console.print("some jobs did not end as promised", style="red")
    return ok
