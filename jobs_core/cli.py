"""`ujobs`: run a worker, enqueue a job, or watch the demo, on any driver URL."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jobs_core.driver import JobDriver
from jobs_core.errors import JobsError
from jobs_core.facade import Jobs
from jobs_core.job import JobHandle, jobs_of
from jobs_core.urls import driver_from_url
from jobs_core.worker import Worker, WorkerStats

console = Console(stderr=False)


def _import_module(target: str) -> ModuleType:
    """Import `pkg.module` or `path/to/file.py`, with the current directory importable."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    if target.endswith(".py"):
        path = Path(target).resolve()
        sys.path.insert(0, str(path.parent))
        target = path.stem
    return importlib.import_module(target)


def _fail(exc: JobsError) -> None:
    console.print(f"[red]{exc.code}[/red]: {exc.message}")
    raise SystemExit(2)


@click.group()
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Durable background jobs: workers, enqueueing, and the demo."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s")


@main.command()
@click.argument("module")
@click.option("--driver", "url", default="memory", show_default=True, help="Driver URL.")
@click.option(
    "--queue", "queues", multiple=True, help="Queue to work (repeat); default: the jobs' own."
)
@click.option("--concurrency", default=50, show_default=True, help="Bodies at once.")
@click.option("--max-in-flight", type=int, default=None, help="Jobs held at once (>= concurrency).")
@click.option("--lease", default=30.0, show_default=True, help="Lease seconds.")
@click.option("--drain-timeout", default=30.0, show_default=True, help="Seconds a drain may take.")
@click.option("--quiet", is_flag=True, help="No live counts.")
def worker(
    module: str,
    url: str,
    queues: tuple[str, ...],
    concurrency: int,
    max_in_flight: int | None,
    lease: float,
    drain_timeout: float,
    quiet: bool,
) -> None:
    """Run a worker for the jobs MODULE exports, until SIGTERM or Ctrl-C (then drain)."""
    try:
        handles = jobs_of(_import_module(module))
        driver = driver_from_url(url)
        w = Worker(
            driver,
            handles,
            queues=queues or None,
            concurrency=concurrency,
            max_in_flight=max_in_flight,
            lease=lease,
            drain_timeout=drain_timeout,
        )
    except JobsError as exc:
        _fail(exc)
        return
    _print_plan(w, handles, driver)
    try:
        asyncio.run(_run_worker(w, quiet))
    except JobsError as exc:
        _fail(exc)
    console.print(_stats_table(w.stats, title="worker stopped"))


def _print_plan(w: Worker, handles: list[JobHandle], driver: JobDriver) -> None:
    console.print(f"[bold]ujobs worker[/bold] {w.worker_id} on [cyan]{driver.describe()}[/cyan]")
    console.print(
        f"queues: {', '.join(w.queues)} · concurrency {w.concurrency} · "
        f"max in flight {w.max_in_flight} · lease {w.lease_ms} ms"
    )
    table = Table("job", "queue", "attempts", "timeout", "body")
    for h in sorted(handles, key=lambda h: h.name):
        table.add_row(
            h.name,
            h.queue,
            str(h.retry.attempts),
            f"{h.timeout_ms} ms" if h.timeout_ms else "-",
            "async" if h.is_async else "thread",
        )
    console.print(table)


async def _run_worker(w: Worker, quiet: bool) -> None:
    # Before start: a worker waiting for its store to come up still drains on SIGTERM.
    w.install_signal_handlers()
    await w.start()
    if quiet or not console.is_terminal:
        await w.run()
        return
    with Live(_stats_table(w.stats), console=console, refresh_per_second=4) as live:
        while not w._stopped.is_set():
            live.update(_stats_table(w.stats, title="draining…" if w.draining else "running"))
            await asyncio.sleep(0.25)


def _stats_table(s: WorkerStats, title: str = "") -> Table:
    table = Table(title=title or None)
    for col in ("claimed", "running", "completed", "retried", "dead", "dropped", "interrupted"):
        table.add_column(col, justify="right")
    table.add_row(
        str(s.claimed),
        str(s.running),
        str(s.completed),
        str(s.retried),
        str(s.dead_lettered),
        str(s.dropped),
        str(s.interrupted),
    )
    return table


@main.group()
def db() -> None:
    """The store's schema."""


@db.command()
@click.option(
    "--driver", "--url", "url", required=True, help="Driver URL (Postgres: ?schema=name)."
)
def upgrade(url: str) -> None:
    """Install or upgrade the schema the driver at URL needs (no-op where there is none)."""
    try:
        driver = driver_from_url(url)
        asyncio.run(driver.migrate())
    except JobsError as exc:
        _fail(exc)
        return
    console.print(f"schema up to date on [cyan]{driver.describe()}[/cyan]")


@main.command()
@click.argument("module")
@click.argument("job_name")
@click.argument("input_json")
@click.option("--driver", "url", default="memory", show_default=True, help="Driver URL.")
@click.option("--key", default=None, help="Idempotency key (else the job's own function).")
@click.option("--delay", type=float, default=None, help="Seconds before it may run.")
@click.option("--priority", type=int, default=None, help="0-100, lower runs first.")
def enqueue(
    module: str,
    job_name: str,
    input_json: str,
    url: str,
    key: str | None,
    delay: float | None,
    priority: int | None,
) -> None:
    """Enqueue one JOB_NAME from MODULE with INPUT_JSON; prints the id and whether it deduped."""
    try:
        handles = {h.name: h for h in jobs_of(_import_module(module))}
        handle = handles.get(job_name)
        if handle is None:
            raise click.BadParameter(f"{job_name!r} is not one of {sorted(handles)}")
        try:
            value = json.loads(input_json)
        except ValueError as exc:
            raise click.BadParameter(f"INPUT_JSON is not JSON: {exc}") from exc
        driver = driver_from_url(url)
        options: dict[str, Any] = {"key": key, "priority": priority}
        if delay is not None:
            options["delay_ms"] = round(delay * 1000)

        async def go() -> None:
            async with driver:
                result = await Jobs(driver).enqueue(handle, value, **options)
            console.print_json(json.dumps({"id": result.id, "deduped": result.deduped}))

        asyncio.run(go())
    except JobsError as exc:
        _fail(exc)


@main.command()
@click.option("--driver", "url", default="memory", show_default=True, help="Driver URL.")
@click.option("--jobs", "total", default=10_000, show_default=True, help="Jobs to enqueue.")
@click.option("--concurrency", default=200, show_default=True, help="Bodies at once.")
@click.option("--only-noop", is_flag=True, help="Every job a no-op: measures raw throughput.")
def demo(url: str, total: int, concurrency: int, only_noop: bool) -> None:
    """Declare the example app, enqueue its jobs, work them, and check every promised outcome."""
    try:
        ok = asyncio.run(_demo(url, total, concurrency, only_noop))
    except JobsError as exc:
        _fail(exc)
        return
    raise SystemExit(0 if ok else 1)


async def _demo(url: str, total: int, concurrency: int, only_noop: bool) -> bool:
    from jobs_core import demo as app

    driver = driver_from_url(url)
    await driver.open()
    jobs = Jobs(driver)
    plan = app.plan(total, only_noop=only_noop)
    console.print(f"[bold]ujobs demo[/bold] on [cyan]{driver.describe()}[/cyan]: {total} jobs")
    ids: dict[str, list[str]] = {}
    started = time.perf_counter()
    for kind, inputs in plan:
        ids[kind.handle.name] = []
        for i in range(0, len(inputs), 1_000):
            results = await jobs.enqueue_many(kind.handle, inputs[i : i + 1_000])
            ids[kind.handle.name].extend(r.id for r in results)
    enqueue_s = time.perf_counter() - started
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
    table = Table("job", "jobs", "promised", "ended so", "attempts", "ok", title="outcomes")
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
        table.add_row(
            kind.handle.name,
            str(len(job_ids)),
            f"{kind.final_state} after {kind.attempts}",
            str(matched),
            str(attempts),
            "[green]yes[/green]" if good else "[red]NO[/red]",
        )
    console.print(table)
    console.print(_stats_table(stats, title="worker counts"))
    console.print(
        f"enqueued {total} in {enqueue_s:.2f} s ({total / enqueue_s:,.0f} jobs/s) · "
        f"worked {total} in {work_s:.2f} s ([bold]{total / work_s:,.0f} jobs/s[/bold])"
    )
    if not ok:
        console.print("[red]some jobs did not end as promised[/red]")
    return ok


if __name__ == "__main__":
    main()
