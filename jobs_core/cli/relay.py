"""`ujobs relay`: publish an outbox's committed rows to a driver until SIGTERM or Ctrl-C; and
what `ujobs worker --with-relay` needs to run one beside the worker."""

from __future__ import annotations

import asyncio
import logging
import signal

import click
from rich.markup import escape

from jobs_core.cli.base import (
    _DRIVER_HELP,
    DRIVER_ENV,
    _configure_logging,
    _fail,
    _required_driver,
    _seconds,
    console,
    main,
)
from jobs_core.cli.schedule import log_format_option
from jobs_core.driver import JobDriver
from jobs_core.errors import CliDriverRequiredError, DriverUrlInvalidError, JobsError
from jobs_core.outbox import OutboxStore, Relay
from jobs_core.outbox.relay import RELAY_BATCH
from jobs_core.urls import driver_from_url, outbox_from_url, scheme_of

log = logging.getLogger("jobs")

#: Where the CLI reads the outbox URL when `--outbox` is not given (kept off `ps`).
OUTBOX_ENV = "UJOBS_OUTBOX"
OUTBOX_HELP = (
    f"The app's database holding the outbox table (else env {OUTBOX_ENV}), e.g."
    " postgresql+psycopg://app@db/app?schema=ujobs."
)
#: Seconds `ujobs relay` waits for each store to close on the way out.
CLOSE_S = 5.0


@main.command()
@click.option("--outbox", "outbox_url", envvar=OUTBOX_ENV, show_envvar=True, help=OUTBOX_HELP)
@click.option("--driver", "url", envvar=DRIVER_ENV, show_envvar=True, help=_DRIVER_HELP)
@click.option("--batch", default=RELAY_BATCH, show_default=True, help="Rows per claim (1 to 1000).")
@click.option("--lease", default=30.0, show_default=True, help="A claim's lease, in seconds.")
@click.option("--drain-timeout", default=30.0, show_default=True, help="Seconds a drain may take.")
@log_format_option
@click.pass_context
def relay(
    ctx: click.Context,
    outbox_url: str | None,
    url: str | None,
    batch: int,
    lease: float,
    drain_timeout: float,
    log_format: str,
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
        _seconds(lease, "--lease", positive=True)
        _seconds(drain_timeout, "--drain-timeout")
        r = Relay(outbox_from_url(outbox_url), driver_from_url(url), batch=batch, lease=lease)
    except JobsError as exc:
        _fail(exc)
    console.print(f"[bold]ujobs relay[/bold] {escape(r.relay_id)}", soft_wrap=True)
    print_relay(r)
    try:
        asyncio.run(run_relay(r, drain_timeout))
    except JobsError as exc:
        _fail(exc)
    console.print(f"relay stopped: {r.published} rows published")


def print_relay(r: Relay) -> None:
    """The banner line: where the relay reads and writes, passwords masked, and its batch."""
    console.print(
        f"relay from [cyan]{escape(r.outbox.describe())}[/cyan] to "
        f"[cyan]{escape(r.driver.describe())}[/cyan] · batch {r.batch} · "
        f"lease {r.lease_ms / 1000:g} s",
        soft_wrap=True,
    )


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
    signal cuts the drain short. Both stores are closed on the way out."""
    loop = asyncio.get_running_loop()
    draining: list[asyncio.Future[bool]] = []

    def on_signal(sig: signal.Signals) -> None:
        if not draining:
            log.warning(
                "jobs.relay.draining %s on %s (again to cut it short)", r.relay_id, sig.name
            )
            draining.append(asyncio.ensure_future(r.stop(drain_timeout)))
        else:
            r.force_stop()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        await r.run()
    finally:
        await close_quietly(r.outbox, r.driver)


async def close_quietly(*stores: OutboxStore | JobDriver) -> None:
    """Close each store, bounded, logging (never raising) a close that fails."""
    for store in stores:
        try:
            await asyncio.wait_for(store.close(), CLOSE_S)
        except Exception as exc:
            log.warning("jobs.relay.close_failed: %r", exc)
