"""`ujobs relay`: publish an outbox's committed rows to a driver until SIGTERM or Ctrl-C; and
what `ujobs worker --with-relay` needs to run one beside the worker."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

import click
from rich.text import Text

from jobs_core.cli.banner import announce_relay, announce_relay_stopped, fitted, rows_said
from jobs_core.cli.base import (
    _DRIVER_HELP,
    DRIVER_ENV,
    WHOLE,
    Whole,
    _configure_logging,
    _fail,
    _required_driver,
    console,
    drain_option,
    emit_json,
    lease_option,
    literal,
    main,
)
from jobs_core.cli.schedule import drained, log_format_option, loop_option
from jobs_core.cli.show import Cell, Col, print_table
from jobs_core.clock import SystemClock
from jobs_core.errors import CliDriverRequiredError, DriverUrlInvalidError, JobsError
from jobs_core.lifecycle import StopBudget, close_quietly, loop_factory, run_role
from jobs_core.operator.times import age, relative
from jobs_core.outbox import OutboxRow, OutboxStore, Relay
from jobs_core.outbox.relay import RELAY_BATCH
from jobs_core.outbox.store import MAX_OUTBOX_PENDING
from jobs_core.urls import driver_from_url, outbox_from_url, scheme_of
from jobs_core.visible import spelled

log = logging.getLogger("jobs")

#: Where the CLI reads the outbox URL when `--outbox` is not given (kept off `ps`).
OUTBOX_ENV = "UJOBS_OUTBOX"
OUTBOX_HELP = (
    f"The app's database holding the outbox table (else env {OUTBOX_ENV}), e.g."
    " postgresql+psycopg://app@db/app?schema=ujobs."
)


@main.command()
@click.option("--outbox", "outbox_url", envvar=OUTBOX_ENV, show_envvar=True, help=OUTBOX_HELP)
@click.option("--driver", "url", envvar=DRIVER_ENV, show_envvar=True, help=_DRIVER_HELP)
@click.option(
    "--batch",
    default=RELAY_BATCH,
    show_default=True,
    type=WHOLE,
    help="Rows per claim (1 to 1000).",
)
@lease_option("A claim's lease, in seconds.")
@drain_option()
@log_format_option
@loop_option
@click.pass_context
def relay(
    ctx: click.Context,
    outbox_url: str | None,
    url: str | None,
    batch: int,
    lease: float,
    drain_timeout: float,
    log_format: str,
    loop: str,
) -> None:
    """Publish the jobs staged in the outbox at --outbox to the driver at --driver, until
    SIGTERM or Ctrl-C (then drain; a second signal cuts the pass in flight).

    Run as many as you like: each claims its own rows under a lease, and a row published twice
    (a relay killed between publish and mark) dedupes onto the one job.
    """
    _configure_logging(ctx.obj or 0, log_format, [u for u in (url, outbox_url) if u])
    try:
        url = _required_driver(url, "relay")
        if not outbox_url:
            raise CliDriverRequiredError(
                f"ujobs relay needs --outbox URL or env {OUTBOX_ENV}: the database the app"
                " stages its jobs in"
            )
        loop_factory(loop)
        r = Relay(outbox_from_url(outbox_url), driver_from_url(url), batch=batch, lease=lease)
    except JobsError as exc:
        _fail(exc)
    as_json = log_format == "json"  # the banner and the count are log lines too
    if as_json:
        announce_relay(r)
    else:
        console.print(
            Text.assemble(("ujobs relay", "bold"), " ", literal(r.relay_id)), soft_wrap=True
        )
        print_relay(r)
    try:
        run_role(run_relay(r, drain_timeout), loop)
    except JobsError as exc:
        _fail(exc)
    if as_json:
        announce_relay_stopped(r)
    else:
        console.print(f"relay stopped: {rows_said(r.published)} published")
    drained()


@main.command()
@click.option("--outbox", "outbox_url", envvar=OUTBOX_ENV, show_envvar=True, help=OUTBOX_HELP)
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=Whole(1, MAX_OUTBOX_PENDING),
    help="Rows to read, oldest first.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
def outbox(outbox_url: str | None, limit: int, as_json: bool) -> None:
    """The outbox's backlog, oldest first: rows committed and not yet published, which relay
    holds each, and the rows whose publish failed (attempts and last error). Inputs are not
    shown. An empty backlog means every committed stage has become a job."""
    try:
        if not outbox_url:
            raise CliDriverRequiredError(f"ujobs outbox needs --outbox URL or env {OUTBOX_ENV}")
        store = outbox_from_url(outbox_url)

        async def read() -> list[OutboxRow]:
            async with store:
                return await store.outbox_pending(limit)

        rows = asyncio.run(read())
    except JobsError as exc:
        _fail(exc)
    now = SystemClock().now_ms()
    if as_json:
        doc = {"rows": [backlog_json(r, now) for r in rows], "more": len(rows) == limit}
        emit_json(doc)
        return
    if not rows:
        console.print("the outbox is empty: every committed stage has been published")
        return
    table: list[list[Cell]] = [
        [
            r.job.id,
            r.job.name,
            r.job.queue,
            relative(r.job.created_at_ms, now),
            _state(r, now),
            str(r.attempts),
            (r.last_error or "-")[:120],
        ]
        for r in rows
    ]
    heads = ("staged", "state", "attempts", "last error")
    cols = [Col("job id", True), Col("job", True), Col("queue", True)]
    print_table([*cols, *(Col(h) for h in heads)], table)
    failing = sum(1 for r in rows if r.attempts)
    more = " (or more: raise --limit)" if len(rows) == limit else ""
    console.print(
        f"{rows_said(len(rows))} waiting{more}, the oldest staged"
        f" {age(now - rows[0].job.created_at_ms)} ago; {failing} with a failed publish",
        soft_wrap=True,
    )


def _state(r: OutboxRow, now_ms: int) -> str:
    if r.claimed_by is not None and (r.lease_until_ms or 0) > now_ms:
        return f"claimed (lease {relative(r.lease_until_ms or 0, now_ms)})"
    if r.available_at_ms > now_ms:
        return f"retry {relative(r.available_at_ms, now_ms)}"
    return "waiting"


def backlog_json(r: OutboxRow, now_ms: int) -> dict[str, Any]:
    """One backlog row for `ujobs outbox --json` (no input: it may hold what a job masks)."""
    held = r.claimed_by is not None and (r.lease_until_ms or 0) > now_ms
    return {
        "id": r.job.id,
        "run_id": r.job.run_id,
        "name": r.job.name,
        "queue": r.job.queue,
        "staged_at_ms": r.job.created_at_ms,
        "available_at_ms": r.available_at_ms,
        "claimed": held,
        "lease_until_ms": r.lease_until_ms if held else None,
        "attempts": r.attempts,
        "last_error": r.last_error,
    }


def print_relay(r: Relay) -> None:
    """The banner: where the relay reads and writes, passwords masked, and its batch, in lines
    of at most `BANNER_WIDTH` columns (a store too long for one elided in its middle)."""
    parts = [
        f"from {spelled(r.outbox.describe())}",
        f"to {spelled(r.driver.describe())}",
        f"batch {r.batch}",
        f"lease {r.lease_ms / 1000:g} s",
    ]
    for line in fitted("relay ", parts, " · "):
        console.print(line, soft_wrap=True)


def outbox_for_worker(outbox_url: str | None, driver_url: str) -> OutboxStore:
    """The outbox store `ujobs worker --with-relay` relays from: `--outbox`, else the driver's
    own database when its scheme has an outbox store (Postgres); refused otherwise."""
    if outbox_url:
        return outbox_from_url(outbox_url)
    try:
        return outbox_from_url(driver_url)
    except DriverUrlInvalidError:
        raise CliDriverRequiredError(
            f"--with-relay needs --outbox URL or env {OUTBOX_ENV}: the driver's"
            f" {scheme_of(driver_url)!r} store keeps no outbox (stage in the app's Postgres)"
        ) from None


async def run_relay(r: Relay, drain_timeout: float) -> None:
    """Run `r` until SIGTERM or SIGINT, then drain it (bounded by `drain_timeout`); a second
    signal cuts the drain short. Both stores are closed on the way out, within the drain's
    slack (a relay that ended without a signal: within the slack alone)."""
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Future[bool]] = []
    budget: StopBudget | None = None

    def on_signal(sig: signal.Signals) -> None:
        nonlocal budget
        if not draining:
            log.warning(
                "jobs.relay.draining %s on %s (again to cut it short)", r.relay_id, sig.name
            )
            budget = StopBudget.after(drain_timeout)
            draining.append(asyncio.ensure_future(r.stop(drain_timeout)))
        else:
            r.force_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await r.run()
    finally:
        await close_quietly([r.outbox, r.driver], (budget or StopBudget.after(0)).slack_ms())
