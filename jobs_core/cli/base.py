"""What every `ujobs` command shares: the group, the console, logging, refusals, the driver URL
and the jobs module a command names."""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, NoReturn, TypeVar

import click
from rich.console import Console
from rich.text import Text

from jobs_core.errors import (
    CliDriverRequiredError,
    CliModuleInvalidError,
    CliNoJobsError,
    CliUsageInvalidError,
    JobsError,
)
from jobs_core.options import ascii_decimal, ascii_whole
from jobs_core.urls import mask_text
from jobs_core.visible import BLOCK_UNSAFE, spelled

if TYPE_CHECKING:
    from jobs_core.job import JobHandle

    _IntParam = click.ParamType[int]
    _FloatParam = click.ParamType[float]
else:
    # click's ParamType takes a type argument from 8.4 on; below that (pyproject allows 8.1)
    # subscripting it raises TypeError and no command imports. The checker sees the typed form.
    _IntParam = _FloatParam = click.ParamType

# A command imports what it runs when it runs (here: the zone, the jobs module, the version), so
# a verb pays for its own imports only (docs/operations.md, "Start-up").

#: Every word the CLI prints goes through here. Markup, emoji codes and highlighting are off:
#: a name like `emails[eu]`, `report[/x]` or `:smile:` prints as it is, never as a style, an
#: emoji or a markup error; our own styles are `Text` spans (`literal`, `Text.assemble`).
console = Console(stderr=False, markup=False, emoji=False, highlight=False)

_NOT_TEXT = re.compile("[\x00\ud800-\udfff]")


def literal(value: object, style: str = "", *, line: bool = True) -> Text:
    """`value` as text the terminal shows exactly: never read as markup, and each control
    character, lone surrogate or bidi override spelled as its escape (`\\x1b`, `\\udcff`);
    with `line` (an id, a name, a message) newlines and tabs too, so it stays one line
    (`jobs_core.visible`: the dashboard spells the same)."""
    return Text(spelled(value, line=line), style=style)


def emit_json(doc: Any) -> None:
    """`doc` as one JSON document on stdout. What `literal` escapes and `json.dumps` leaves raw
    (C1 controls, DEL, a lone surrogate, bidi overrides) is written as its `\\u` escape: the
    same JSON, never a terminal escape nor a crash."""
    click.echo(_json_safe(json.dumps(doc, ensure_ascii=False, indent=2)))


def _json_safe(text: str) -> str:
    """JSON text with what `json.dumps` leaves raw but a terminal would act on `\\u`-escaped
    (it stands only inside strings, where the escape is the same JSON)."""
    return BLOCK_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


#: Where the CLI reads the driver URL when `--driver` is not given (kept off `ps`).
DRIVER_ENV = "UJOBS_DRIVER"
#: Where the operator's verbs read the app module (its job and backfill declarations).
APP_ENV = "UJOBS_APP"

#: `--driver`, for every verb that reads or steers a store.
FC = TypeVar("FC", bound=Callable[..., Any] | click.Command)

driver_option = click.option(
    "--driver",
    "url",
    envvar=DRIVER_ENV,
    show_envvar=True,
    help="Driver URL (else env UJOBS_DRIVER).",
)
#: `--json`, for every read.
json_option = click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")
_DRIVER_HELP = f"Driver URL (else env {DRIVER_ENV}, which keeps a password off the command line)."


def tz_option(default: str) -> Callable[[FC], FC]:
    """`--tz`, for every read that shows times: the IANA zone they are shown in (`use_tz`);
    `default` says whose zone they are shown in without it."""
    return click.option(
        "--tz",
        "tz",
        default=None,
        help=f"Show times in this IANA zone (e.g. Europe/Paris, UTC); default: {default}.",
    )


def use_tz(tz: str | None) -> tzinfo | None:
    """Show this command's times in `tz` (answered; None: not given); a zone zoneinfo does not
    know exits 2, typed (`X_OPTION_INVALID` naming `--tz`)."""
    from jobs_core.operator.times import use_zone

    try:
        return use_zone(tz)
    except JobsError as exc:
        _fail(exc)


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
        at, why = _where_import_failed(exc)
        raise CliModuleInvalidError(
            f"importing {name!r} failed{at}: {type(exc).__name__}: {why} (-vv shows the traceback)",
            detail=target,
        ) from exc


def _where_import_failed(exc: Exception) -> tuple[str, str]:
    """` at file.py:LINE` of the user's code that failed to import (empty when unknown) and the
    error's text. A module that does not parse ran no frame of its own: its place is the
    syntax error's (the traceback's last frame is importlib's, `<frozen …>`)."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f" at {Path(exc.filename).name}:{exc.lineno}", str(exc.msg)
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")
    ]
    if not frames:
        return "", str(exc)
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}", str(exc)


def _jobs_in(module: str) -> list[JobHandle]:
    """The jobs `module` exports; `X_CLI_NO_JOBS` when it exports none."""
    from jobs_core.job import jobs_of

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


class Whole(_IntParam):
    """An integer option: ASCII digits alone (`ascii_whole`: click's own reads "2_0" as 20, "+2"
    and other scripts' digits), within `[minimum, maximum]`; else a usage error naming the
    option (`X_CLI_USAGE_INVALID`)."""

    name = "integer"

    def __init__(self, minimum: int = 0, maximum: int | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        n = value if type(value) is int else ascii_whole(str(value))  # an int: a default
        if n is None:
            self.fail(f"{value!r} is not a whole number in ASCII digits", param, ctx)
        if n < self.minimum or (self.maximum is not None and n > self.maximum):
            top = "" if self.maximum is None else f" to {self.maximum}"
            self.fail(f"{n} is not from {self.minimum}{top}", param, ctx)
        return n


#: The integer options' type, unbounded.
WHOLE: Final = Whole()

#: The longest lease or drain the worker, the scheduler and the relay take (`seconds_to_ms`).
WEEK_S: Final = 7 * 24 * 3600.0


class Seconds(_FloatParam):
    """A duration option: ASCII digits with an optional fraction alone (`ascii_decimal`:
    click's own `float` reads "1_0", other scripts' digits, "nan" and "inf"), within
    `[minimum, maximum]`; else a usage error naming the option (`X_CLI_USAGE_INVALID`)."""

    name = "seconds"

    def __init__(self, minimum: float = 0.0, maximum: float = WEEK_S) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        # an int or a float: a default, checked like a value typed
        v = float(value) if type(value) in (int, float) else ascii_decimal(str(value))
        if v is None:
            self.fail(
                f"{value!r} is not a number of seconds in ASCII digits (like 1.5)", param, ctx
            )
        if not self.minimum <= v <= self.maximum:  # NaN too
            self.fail(
                f"{v:.15g} is not from {self.minimum:.15g} to {self.maximum:.15g}", param, ctx
            )
        return v


#: The shortest `--lease`: shorter leaves a worker no room to heartbeat within it.
MIN_LEASE_S: Final = 0.01


def lease_option(help: str) -> Callable[[FC], FC]:
    """`--lease`, for the worker, the scheduler and the relay: seconds, 30 by default."""
    return click.option(
        "--lease", default=30.0, show_default=True, type=Seconds(MIN_LEASE_S), help=help
    )


def drain_option(minimum: float = 0.0) -> Callable[[FC], FC]:
    """`--drain-timeout`, for the worker, the scheduler and the relay: seconds, 30 by default."""
    return click.option(
        "--drain-timeout",
        default=30.0,
        show_default=True,
        type=Seconds(minimum),
        help="Seconds a drain may take.",
    )


def _fail(exc: JobsError) -> NoReturn:
    """Print the refusal as one `X_CODE: message` line (whatever its text holds) and exit 2."""
    console.print(Text.assemble((exc.code, "red"), ": ", literal(exc.message)), soft_wrap=True)
    raise SystemExit(2)


#: Attributes every LogRecord has; any other attribute came from `extra=`.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


#: Our log messages start with the event's dotted name: `jobs.run.shed j1 …`, `jobs.pg.x: …`.
_EVENT = re.compile(r"(?:jobs|dashboard)\.[\w.-]*\w")


def _event(record: logging.LogRecord) -> str:
    """The line's `event`: an `extra={"event": …}`, else the dotted name its message starts
    with, else `log` (a line from your code or a library, whose message is free text)."""
    given = getattr(record, "event", None)
    if isinstance(given, str) and given:
        return given
    found = _EVENT.match(record.getMessage())
    return found.group(0) if found else "log"


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
                "event": _event(record),
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
            text = _json_safe(json.dumps(line, default=str, ensure_ascii=False))
        else:
            text = super().format(record)
            extras = _extras(record)
            if extras:
                fields = " ".join(f"{k}={v}" for k, v in extras.items())
                head, nl, tail = text.partition("\n")
                text = f"{head} {fields}{nl}{tail}"
            # A job's name or error may hold a terminal escape: the log shows it, never runs it.
            text = spelled(text, line=False)
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
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ultimat3-jobs")
    except PackageNotFoundError:
        return "unknown"


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """`--version`: read from the installed metadata only when asked."""
    if value and not ctx.resilient_parsing:
        click.echo(f"ujobs {_version()}", color=ctx.color)
        ctx.exit()


#: Click ≥ 8.2 raises this for a group called with no command; older ones print help themselves.
_NO_ARGS: tuple[type[Exception], ...] = tuple(
    c for c in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if isinstance(c, type)
)


#: Each `ujobs` command and the module declaring it: a command line imports only its command's
#: module (`ujobs worker` never loads the factories, the operator or the dashboard); the
#: listing (`ujobs --help`, `main.commands`) imports them all. A test keeps this true.
COMMAND_MODULES: Final = {
    "backfills": "jobs_core.cli.backfills",
    "batches": "jobs_core.cli.operate",
    "consumers": "jobs_core.cli.consumers",
    "dashboard": "jobs_core.cli.dashboard",
    "db": "jobs_core.cli.run",
    "demo": "jobs_core.cli.run",
    "enqueue": "jobs_core.cli.run",
    "jobs": "jobs_core.cli.operate",
    "outbox": "jobs_core.cli.relay",
    "pause": "jobs_core.cli.operate",
    "queues": "jobs_core.cli.operate",
    "relay": "jobs_core.cli.relay",
    "resume": "jobs_core.cli.operate",
    "scheduler": "jobs_core.cli.schedule",
    "stats": "jobs_core.cli.operate",
    "tasks": "jobs_core.cli.schedule",
    "webhooks": "jobs_core.cli.webhooks",
    "worker": "jobs_core.cli.run",
    "workers": "jobs_core.cli.operate",
}


class _Group(click.Group):
    """The `ujobs` group: a usage error is one `X_CLI_USAGE_INVALID` line and exit 2, too; a
    command's module is imported when the command is looked up (`COMMAND_MODULES`)."""

    _adding = False

    @property  # type: ignore[override]
    def commands(self) -> dict[str, click.Command]:
        """Every command, each module imported (what a listing and the docs read)."""
        if not self._adding:
            for module in dict.fromkeys(COMMAND_MODULES.values()):
                importlib.import_module(module)
        return self._registered

    @commands.setter
    def commands(self, value: dict[str, click.Command]) -> None:
        self._registered = value

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        self._adding = True  # registering one command loads no other module
        try:
            super().add_command(cmd, name)
        finally:
            self._adding = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMAND_MODULES.get(cmd_name)
        if module is not None and cmd_name not in self._registered:
            importlib.import_module(module)
        return self._registered.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(self.commands)

    def main(self, args: Sequence[str] | None = None, *rest: Any, **kwargs: Any) -> Any:
        kwargs["standalone_mode"] = False
        for arg in sys.argv[1:] if args is None else args:
            if _NOT_TEXT.search(arg):
                # Bytes that are not UTF-8 reach Python as lone surrogates, and no store holds
                # a NUL: refused here, once, for every verb and option.
                _fail(
                    CliUsageInvalidError(
                        "an argument holds a NUL or bytes that are not UTF-8", detail=arg
                    )
                )
        try:
            return super().main(args, *rest, **kwargs)
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
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_print_version,
    help="Show the version and exit.",
)
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
