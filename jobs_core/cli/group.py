"""`ujobs worker --processes N`: the supervisor's side of the command (the children are plain
`ujobs worker` processes; see jobs_core/worker/supervisor.py for the rules it keeps)."""

from __future__ import annotations

import os
import sys
from typing import Final

import click
from click.core import ParameterSource
from rich.text import Text

from jobs_core.cli.banner import announce, json_logs
from jobs_core.cli.base import DRIVER_ENV, _fail, console, literal
from jobs_core.cli.relay import OUTBOX_ENV
from jobs_core.errors import JobsError, OptionInvalidError
from jobs_core.lifecycle import run_role
from jobs_core.worker import Worker
from jobs_core.worker.supervisor import (
    MULTIPROC_ENV,
    RestartPolicy,
    Supervisor,
    available_cpus,
    metrics_dir,
    remove_metrics_dir,
    supervise_group,
)

#: Options the supervisor keeps for itself or hands down another way (a URL by environment:
#: a password stays off every child's command line).
_NOT_PASSED: Final = frozenset(
    {"processes", "metrics_port", "metrics_host", "supervised_by", "url", "outbox_url", "quiet"}
)


def child_argv(ctx: click.Context, processes: int) -> list[str]:
    """The command line of one child: this `ujobs worker` as given, minus the supervisor's own
    options, quiet (no live table per child), and marked as supervised by this process. Unless
    `--process-pool` is given, each child's pool for `executor="process"` bodies gets its share
    of the CPUs, so the group does not start `processes` times the CPU count."""
    args = [sys.executable, "-m", "jobs_core.cli", *["-v"] * int(ctx.obj or 0), "worker"]
    options: list[str] = []
    for p in ctx.command.params:
        name = p.name or ""
        value = ctx.params.get(name)
        if isinstance(p, click.Argument):
            args.append(str(value))
            continue
        if name in _NOT_PASSED or ctx.get_parameter_source(name) is ParameterSource.DEFAULT:
            continue
        opt = max(p.opts, key=len)
        if isinstance(p, click.Option) and p.is_flag:
            options += [opt] if value else []
        elif isinstance(value, tuple | list):
            for v in value:
                options += [opt, str(v)]
        elif value is not None:
            options += [opt, str(value)]
    if ctx.get_parameter_source("process_pool") is ParameterSource.DEFAULT:
        options += ["--process-pool", str(max(1, available_cpus() // processes))]
    return [*args, *options, "--quiet", "--supervised-by", str(os.getpid())]


def run_group(
    ctx: click.Context, w: Worker, processes: int, metrics_host: str, metrics_port: int | None
) -> int:
    """Supervise `processes` workers as `ctx` asks (`w`, never started, reads the store for the
    group's gauges); answers the exit status. The children run on the loop `--loop` names (passed
    down as given, or by UJOBS_LOOP); the supervisor, which runs no job, on asyncio's: uvloop's
    `subprocess_exec` refuses `process_group` (up to 0.23 at least), which keeps each child
    out of the terminal's Ctrl-C."""
    try:
        policy = RestartPolicy.from_env(os.environ)
    except JobsError as exc:
        _fail(exc)
    env = dict(os.environ)
    url, outbox_url = ctx.params.get("url"), ctx.params.get("outbox_url")
    if url:
        env[DRIVER_ENV] = str(url)
    if outbox_url:
        env[OUTBOX_ENV] = str(outbox_url)
    path = metrics_dir() if metrics_port is not None else None
    if path is not None:
        env[MULTIPROC_ENV] = path
    sup = Supervisor(
        child_argv(ctx, processes),
        env,
        processes,
        w.drain_timeout_ms / 1000,
        policy=policy,
        metrics_dir=path,
    )
    recycle = ctx.params.get("max_jobs_per_process")
    _say(
        "jobs.supervisor.plan",
        Text.assemble(
            ("ujobs worker", "bold"),
            f" supervisor pid {os.getpid()}: {processes} processes",
            f", each recycled after {recycle} jobs" if recycle else "",
            " on ",
            literal(w.driver.describe(), "cyan"),
        ),
        pid=os.getpid(),
        processes=processes,
        max_jobs_per_process=recycle,
        driver=w.driver.describe(),
    )

    def metrics_at(port: int) -> None:
        url = f"http://{metrics_host}:{port}/metrics"
        _say(
            "jobs.supervisor.metrics",
            Text.assemble("metrics of the group on ", literal(url), ", health on /healthz"),
            metrics_url=url,
        )

    try:
        status = run_role(
            supervise_group(sup, w, metrics_host, metrics_port, metrics_at), "asyncio"
        )
    except OSError as exc:  # the metrics port is taken, or the address is not ours
        _fail(OptionInvalidError(f"cannot serve metrics: {exc}", detail="--metrics-port"))
    finally:
        remove_metrics_dir(path)
    _say(
        "jobs.supervisor.counts",
        Text(
            f"supervisor stopped: {sup.started} processes started, {sup.restarts} restarted after"
            f" a crash, {sup.recycled} recycled" + (" — gave up" if sup.gave_up else "")
        ),
        started=sup.started,
        restarted=sup.restarts,
        recycled=sup.recycled,
        gave_up=sup.gave_up,
    )
    return status


def _say(event: str, text: Text, **fields: object) -> None:
    """`text` on the console, or under `--log-format json` a JSON log line `event` with
    `fields` (stdout stays empty, as for one worker: jobs_core.cli.banner)."""
    if json_logs():
        announce(event, text.plain, **fields)
    else:
        console.print(text, soft_wrap=True)
