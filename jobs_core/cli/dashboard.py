"""`ujobs dashboard`: serve the web dashboard (`jobs_core.dashboard`) until Ctrl-C."""

from __future__ import annotations

import ipaddress
import signal
from types import FrameType

import click
from rich.text import Text

from jobs_core.cli.base import (
    _DRIVER_HELP,
    APP_ENV,
    DRIVER_ENV,
    Whole,
    _fail,
    _import_module,
    console,
    literal,
    main,
)
from jobs_core.errors import CliExtraMissingError, CliUsageInvalidError, JobsError
from jobs_core.urls import driver_from_url


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@main.command()
@click.option("--driver", "url", envvar=DRIVER_ENV, show_envvar=True, help=_DRIVER_HELP)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. Beyond this machine only with credentials set.",
)
@click.option("--port", default=8080, show_default=True, type=Whole(1, 65535))
@click.option(
    "--app",
    "app",
    envvar=APP_ENV,
    show_envvar=True,
    default=None,
    help="A module whose jobs redact inputs (beside the live workers'), whose tasks fill "
    "the schedule page and whose backfills the backfills page declares (else: the ledger alone).",
)
@click.option(
    "--read-only",
    is_flag=True,
    help="Refuse every action whatever the credentials (also env UJOBS_DASHBOARD_READ_ONLY=1).",
)
def dashboard(url: str | None, host: str, port: int, app: str | None, read_only: bool) -> None:
    """Serve the dashboard: queues, jobs, workers, the schedule and the backfills, and the
    operator's actions.

    Credentials come from the environment only (never the command line): UJOBS_DASHBOARD_TOKEN
    (a sign-in form and `Authorization: Bearer`), or UJOBS_DASHBOARD_USER and
    UJOBS_DASHBOARD_PASSWORD (basic auth). With none set, the dashboard is read-only.
    """
    from jobs_core.job import jobs_of
    from jobs_core.scheduler import tasks_of

    try:
        import uvicorn

        from jobs_core.dashboard import Access, Dashboard
    except ModuleNotFoundError as exc:
        _fail(
            CliExtraMissingError(
                f"the dashboard needs {exc.name}: pip install 'ultimat3-jobs[dashboard]'",
                detail="dashboard",
            )
        )

    try:
        if not url:
            raise CliUsageInvalidError(
                f"ujobs dashboard needs --driver URL or env {DRIVER_ENV}", detail="dashboard"
            )
        access = Access.from_env(read_only=read_only)
        if not access.guarded and not _loopback(host):
            raise CliUsageInvalidError(
                f"--host {host} opens the dashboard beyond this machine: set"
                " UJOBS_DASHBOARD_TOKEN (or UJOBS_DASHBOARD_USER and UJOBS_DASHBOARD_PASSWORD)"
                " first",
                detail="--host",
            )
        module = _import_module(app) if app else None
        driver = driver_from_url(url)
        board = Dashboard(
            driver,
            access=access,
            handles=jobs_of(module) if module else (),
            tasks=tasks_of(module) if module else (),
            close_driver=True,
        )
    except JobsError as exc:
        _fail(exc)
    mode = "read-only" if not access.can_act else "actions on"
    shown = f"[{host}]" if ":" in host else host
    console.print(
        Text.assemble(
            ("ujobs dashboard", "bold"),
            " on ",
            literal(f"http://{shown}:{port}/"),
            " · ",
            literal(driver.describe(), "cyan"),
            f" · sign-in: {access.kind} · {mode}",
        ),
        soft_wrap=True,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            # SIGTERM or Ctrl-C stops serving and the command exits 0, as a drained worker
            # does (uvicorn's own handler re-raises the signal once shut down, dying of it).
            if self.should_exit and sig == signal.SIGINT:
                self.force_exit = True
            self.should_exit = True

    server = Server(
        uvicorn.Config(
            board.app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="on",
            server_header=False,
        )
    )
    server.run()
