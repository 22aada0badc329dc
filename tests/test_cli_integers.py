"""Every integer option of `ujobs` reads ASCII digits alone (click's own `int` reads "2_0" as 20,
"+2" and other scripts' digits, and raises past 4300 digits), every seconds option an ASCII
decimal in range (click's own `float` reads "1_0", other scripts' digits, "nan" and "inf"), and
a refusal names the option as the user wrote it."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest
from click.testing import CliRunner

from jobs_core.cli import main
from jobs_core.cli.base import WHOLE, Seconds, Whole
from jobs_core.cli.run import rate_limit_from, retention_from
from jobs_core.errors import CliUsageInvalidError, OptionInvalidError

_MEMORY = ["--driver", "memory://"]
#: A module no one has: a value read where it should be refused ends in its refusal, never in
#: a worker that runs until a signal.
_NOWHERE = ["worker", "tests.no_such_module", *_MEMORY]
#: Each integer option, with the words before it that reach it.
_OPTIONS = [
    (_NOWHERE, "--concurrency"),
    (_NOWHERE, "--max-in-flight"),
    (_NOWHERE, "--metrics-port"),
    (_NOWHERE, "--process-pool"),
    (_NOWHERE, "--max-jobs-per-process"),
    (_NOWHERE, "--processes"),
    (["enqueue", "jobs_core.demo", "noop", *_MEMORY], "--priority"),
    (["demo", "--driver", "nowhere://"], "--jobs"),
    (["demo", "--driver", "nowhere://"], "--concurrency"),
    (["jobs", "list", *_MEMORY], "--limit"),
    (["consumers", "list", *_MEMORY], "--limit"),
    (["outbox"], "--limit"),
    (["dashboard", "tests.no_such_module", *_MEMORY], "--port"),
    (["webhooks", "list", *_MEMORY], "--limit"),
    (["webhooks", "show", "e", *_MEMORY], "--limit"),
    (["backfills", "show", "s", *_MEMORY], "--limit"),
    (["relay", *_MEMORY], "--batch"),
]


@pytest.mark.parametrize("value", ["2_0", "+2", "\u0663", " 1_000 ", "9" * 5000, "", "0x10"])
@pytest.mark.parametrize(("before", "flag"), _OPTIONS)
def test_an_integer_option_reads_ascii_digits_alone(
    before: list[str], flag: str, value: str
) -> None:
    code = "X_JOB_OPTION_INVALID" if flag == "--processes" else "X_CLI_USAGE_INVALID"
    _assert_refused([*before, flag, value], flag, code)


def _assert_refused(args: list[str], flag: str, code: str) -> None:
    """`ujobs args` exits 2, raising nothing but its exit, with `code` naming `flag`."""
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.output.startswith(code) and flag in result.output, result.output


def _options(cmd: click.Command) -> Iterator[click.Parameter]:
    """Every option of `cmd` and of its subcommands, at any depth."""
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            yield from _options(sub)
    yield from cmd.params


def test_every_integer_option_of_ujobs_reads_ascii_digits_alone() -> None:
    """No integer option is left to click's own `int` (a new one must use `WHOLE`)."""

    left = [p.opts for p in _options(main) if isinstance(p.type, click.types.IntParamType)]
    assert left == [["-v", "--verbose"]]  # a count: click reads `-vv`, never a value


def test_the_type_reads_digits_and_its_defaults_and_bounds() -> None:
    assert WHOLE.convert(" 20 ", None, None) == 20
    assert WHOLE.convert(50, None, None) == 50  # a default, given as an int
    assert Whole(1, 5).convert("5", None, None) == 5
    for bad in ("0", "6"):
        with pytest.raises(Exception, match="is not from 1 to 5"):
            Whole(1, 5).convert(bad, None, None)


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--process-pool", "0"], "--process-pool"),
        (["--process-pool", "5000"], "--process-pool"),
        (["--concurrency", "0"], "--concurrency"),
        (["--concurrency", "4", "--max-in-flight", "2"], "--max-in-flight"),
        (["--max-jobs-per-process", "3"], "--max-jobs-per-process"),
        (["--processes", "2"], "--processes"),
    ],
)
def test_a_worker_refusal_names_the_option_as_written(args: list[str], flag: str) -> None:
    """Not the `Worker` argument behind it (`process_pool_size`), nor another option."""
    result = CliRunner().invoke(main, ["worker", "jobs_core.demo", *_MEMORY, *args])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output.rstrip().endswith(f"({flag})"), result.output
    others = {f for _, f in _OPTIONS} - {flag}
    assert not any(f"({o})" in result.output for o in others), result.output
    assert "_" not in result.output.rsplit("(", 1)[1], result.output


def test_the_demo_names_its_concurrency_as_written() -> None:
    result = CliRunner().invoke(main, ["demo", "--jobs", "1", "--concurrency", "0"])
    assert result.exit_code == 2 and result.output.rstrip().endswith("(--concurrency)"), (
        result.output
    )


#: Each option that takes seconds, with the words before it that reach it.
_SECONDS_OPTIONS = [
    (_NOWHERE, "--lease"),
    (_NOWHERE, "--drain-timeout"),
    (["scheduler", "tests.no_such_module", *_MEMORY], "--lease"),
    (["scheduler", "tests.no_such_module", *_MEMORY], "--drain-timeout"),
    (["relay", "--outbox", "nowhere://", *_MEMORY], "--lease"),
    (["relay", "--outbox", "nowhere://", *_MEMORY], "--drain-timeout"),
    (["enqueue", "tests.no_such_module", "noop", "{}", *_MEMORY], "--delay"),
    (["stats", "--driver", "nowhere://"], "--window"),
]


@pytest.mark.parametrize(
    "value",
    [
        "1_0",
        "\u0663",
        "\uff11",
        "nan",
        "inf",
        "-inf",
        "-1",
        "+1",
        "1e3",
        "0x10",
        "",
        ".",
        "1.5.2",
        " 1_000 ",
        "9" * 5000,
        "1e999",
        "999999999999",
    ],
)
@pytest.mark.parametrize(("before", "flag"), _SECONDS_OPTIONS)
def test_a_seconds_option_reads_an_ascii_decimal_in_range(
    before: list[str], flag: str, value: str
) -> None:
    _assert_refused([*before, flag, value], flag, "X_CLI_USAGE_INVALID")


def test_every_number_option_of_ujobs_reads_ascii_alone() -> None:
    """No option is left to click's own `float` (a new one must use `Seconds`)."""

    left = [p.opts for p in _options(main) if isinstance(p.type, click.types.FloatParamType)]
    assert left == []


def test_the_seconds_type_reads_decimals_defaults_and_bounds() -> None:
    s = Seconds(0.0, 10.0)
    assert [s.convert(v, None, None) for v in (" 1.5 ", "2", ".5", "3.", "0", 10, 2.5)] == [
        1.5,
        2.0,
        0.5,
        3.0,
        0.0,
        10.0,
        2.5,
    ]
    with pytest.raises(click.BadParameter, match=r"0 is not from 0\.01 to 604800"):
        Seconds(0.01).convert("0", None, None)
    with pytest.raises(click.BadParameter, match="is not from 0 to 10"):
        s.convert("10.001", None, None)
    with pytest.raises(click.BadParameter, match="is not from 0 to 10"):
        s.convert(float("nan"), None, None)  # a default is checked too


@pytest.mark.parametrize(
    "text", ["1_0/1", "\u0663/1", "+1/1", "10/1_0", "10/inf", "10/nan", "10/1e3"]
)
def test_the_numbers_of_a_rate_limit_read_ascii_alone(text: str) -> None:
    """`--rate-limit N/SECONDS` reads its numbers as the options do."""
    with pytest.raises(CliUsageInvalidError, match="--rate-limit takes N/SECONDS"):
        rate_limit_from(text)


@pytest.mark.parametrize("value", ["1_0", "\u0663", "nan", "inf", "1e3", "-1"])
def test_the_seconds_of_a_keep_read_ascii_alone(value: str) -> None:
    """`--keep STATE=SECONDS` reads its seconds as the options do."""
    with pytest.raises(OptionInvalidError, match=r"retention\.completed"):
        retention_from([f"completed={value}"])


def test_a_priority_out_of_range_is_refused_by_its_flag() -> None:
    """Not `X_JOB_OPTION_INVALID … (priority)`: the user wrote `--priority`."""
    args = ["enqueue", "jobs_core.demo", "noop", "{}", *_MEMORY, "--priority", "101"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output.startswith("X_CLI_USAGE_INVALID") and "--priority" in result.output, (
        result.output
    )


def test_a_worker_lease_too_short_to_heartbeat_is_refused_by_its_flag() -> None:
    """Not `X_DRIVER_ERROR … (heartbeat_every)`: the user never named a heartbeat."""
    result = CliRunner().invoke(main, [*_NOWHERE, "--lease", "0.001"])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.output.startswith("X_CLI_USAGE_INVALID") and "--lease" in result.output, (
        result.output
    )
