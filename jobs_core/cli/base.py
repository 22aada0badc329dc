"""What every `ujobs` command shares: the group, the console, logging, refusals, the driver URL
and the jobs module a command names."""

from __future__ import annotations

import importlib
import json
import logging
import math
import sys
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from jobs_core.errors import (
    CliDriverRequiredError,
    CliModuleInvalidError,
    CliNoJobsError,
    CliUsageInvalidError,
    JobsError,
    OptionInvalidError,
)
from jobs_core.job import JobHandle, jobs_of
from jobs_core.urls import mask_text

console = Console(stderr=False)


#: Where the CLI reads the driver URL when `--driver` is not given (kept off `ps`).
DRIVER_ENV = "UJOBS_DRIVER"
_DRIVER_HELP = f"Driver URL (else env {DRIVER_ENV}, which keeps a password off the command line)."


def _import_module(target: str) -> ModuleType:
    """Import `pkg.module` or `path/to/file.py`, with the current directory importable;
    `X_CLI_MODULE_INVALID` in one line when it is not there or fails to import."""
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    name = target
    if target.endswith(".py"):
        path = Path(target).resolve()
        if not path.is_file():
            raise CliModuleInvalidError(f"no file {target}", detail=target)
        sys.path.insert(0, str(path.parent))
        name = path.stem
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise CliModuleInvalidError(f"no module named {name!r}", detail=target) from None
        raise CliModuleInvalidError(
            f"importing {name!r} failed: {type(exc).__name__}: {exc}", detail=target
        ) from exc
    except Exception as exc:
        logging.getLogger("jobs.cli").debug("importing %s failed", name, exc_info=True)
        where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
        at = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
        raise CliModuleInvalidError(
            f"importing {name!r} failed{at}: {type(exc).__name__}: {exc} (-vv shows the traceback)",
            detail=target,
        ) from exc


def _jobs_in(module: str) -> list[JobHandle]:
    """The jobs `module` exports; `X_CLI_NO_JOBS` when it exports none."""
    handles = jobs_of(_import_module(module))
    if not handles:
        raise CliNoJobsError(
            f"{module!r} exports no jobs (declare them with @job at module level)", detail=module
        )
    return handles


def _required_driver(url: str | None, command: str) -> str:
    """The driver URL a command that must not lose its jobs runs on: named, never implied."""
    if url:
        return url
    raise CliDriverRequiredError(
        f"ujobs {command} needs --driver URL or env {DRIVER_ENV}; the memory store dies with this"
        " process, so pass --driver memory to mean it"
    )


def _seconds(value: float | None, option: str, *, positive: bool = False) -> None:
    """Refuse a seconds option that is not finite, or negative (or zero where `positive`)."""
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "a positive" if positive else "a non-negative"
        raise OptionInvalidError(f"{option} must be {need} number of seconds", detail=option)


def _fail(exc: JobsError) -> NoReturn:
    # One line, its brackets intact: an error's text is never rich markup, and never wrapped.
    console.print(f"[red]{exc.code}[/red]: {escape(exc.message)}", soft_wrap=True)
    raise SystemExit(2)


#: Attributes every LogRecord has; any other attribute came from `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class _Formatter(logging.Formatter):
    """`text` or `json` (one object per line) log lines, with every password of `urls` masked."""

    def __init__(self, kind: str, urls: Sequence[str]) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")
        self.kind = kind
        self.urls = tuple(urls)

    def format(self, record: logging.LogRecord) -> str:
        if self.kind == "json":
            line: dict[str, Any] = {
                "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                    timespec="milliseconds"
                ),
                "level": record.levelname,
                "logger": record.name,
                "message": record.getMessage(),
            }
            for key, value in _extras(record).items():
                line.setdefault(key, value)
            if record.exc_text:  # already formatted (and scrubbed of secrets, `ScrubFilter`)
                line["exc_info"] = record.exc_text
            elif record.exc_info:
                line["exc_info"] = self.formatException(record.exc_info)
            if record.stack_info:
                line["stack_info"] = record.stack_info
            text = json.dumps(line, default=str, ensure_ascii=False)
        else:
            text = super().format(record)
            extras = _extras(record)
            if extras:
                fields = " ".join(f"{k}={v}" for k, v in extras.items())
                head, nl, tail = text.partition("\n")
                text = f"{head} {fields}{nl}{tail}"
        return mask_text(text, *self.urls)


def _configure_logging(verbose: int, kind: str = "text", urls: Sequence[str] = ()) -> None:
    level = logging.WARNING - 10 * min(verbose, 2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(kind, urls))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def _version() -> str:
    try:
        return version("ultimat3-jobs")
    except PackageNotFoundError:
        return "unknown"


#: Click ≥ 8.2 raises this for a group called with no command; older ones print help themselves.
_NO_ARGS: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if isinstance(c, type)
)


class _Group(click.Group):
    """The `ujobs` group: a usage error is one `X_CLI_USAGE_INVALID` line and exit 2, too."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        try:
            return super().main(*args, **kwargs)
        except click.exceptions.Exit as exc:
            raise SystemExit(exc.exit_code) from None
        except click.Abort:
            raise SystemExit(130) from None
        except click.UsageError as exc:
            if isinstance(exc, _NO_ARGS) and exc.ctx is not None:
                click.echo(exc.ctx.get_help())  # a bare `ujobs` (or `ujobs db`) asks for help
                raise SystemExit(0) from None
            hint = f" (see {exc.ctx.command_path} --help)" if exc.ctx else ""
            _fail(CliUsageInvalidError(exc.format_message() + hint))
        except click.ClickException as exc:
            _fail(CliUsageInvalidError(exc.format_message()))
        raise SystemExit(0)


@click.group(cls=_Group)
@click.version_option(_version(), "--version", prog_name="ujobs", message="%(prog)s %(version)s")
@click.option("-v", "--verbose", count=True, help="Log more (-v info, -vv debug).")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Durable background jobs: workers, enqueueing, and the demo.

    Every duration is in seconds (fractions allowed). The driver URL comes from --driver, else
    env UJOBS_DRIVER; `ujobs worker` and `ujobs enqueue` never fall back to the memory store.
    A refusal prints one line, `X_CODE: message`, and exits 2.
    """
    ctx.obj = verbose
    _configure_logging(verbose)
