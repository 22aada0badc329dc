"""`ujobs consumers list`: each consumer's cursor per tenant — source, cursor, lag, last turn,
holder — read through `inspect_consumers` (the one projection) on the driver of `--driver` or
`UJOBS_DRIVER`. `--json` prints one JSON document."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import click

from jobs_core.cli.base import (
    WHOLE,
    _fail,
    _required_driver,
    driver_option,
    emit_json,
    json_option,
    main,
)
from jobs_core.cli.show import Col, print_table
from jobs_core.clock import SystemClock
from jobs_core.driver import MAX_CONSUMER_LIST
from jobs_core.errors import JobsError, OptionInvalidError
from jobs_core.jsonform import dumps

if TYPE_CHECKING:
    from jobs_core.factories.consumers.inspect import ConsumerView


@main.group()
def consumers() -> None:
    """The consumers consumer() declares: where each stands in its source."""


@consumers.command("list")
@driver_option
@click.option("--name", default=None, help="One consumer's entries (each tenant's).")
@click.option(
    "--limit",
    default=100,
    show_default=True,
    type=WHOLE,
    help=f"At most this many (1 to {MAX_CONSUMER_LIST}).",
)
@json_option
def consumers_list(url: str | None, name: str | None, limit: int, as_json: bool) -> None:
    """Each consumer and tenant: source, cursor, lag, last turn, the worker of that turn and
    the run holding its lease now (none between runs)."""
    from jobs_core.factories.consumers.inspect import inspect_consumers
    from jobs_core.operator.times import relative

    now = SystemClock().now_ms()
    try:
        if not 1 <= limit <= MAX_CONSUMER_LIST:
            raise OptionInvalidError(f"--limit must be 1 to {MAX_CONSUMER_LIST}", detail="--limit")
        from jobs_core.urls import driver_from_url

        driver = driver_from_url(_required_driver(url, "consumers"))

        async def read() -> list[ConsumerView]:
            async with driver:
                return await inspect_consumers(driver, name=name, limit=limit, now_ms=now)

        views = asyncio.run(read())
    except JobsError as exc:
        _fail(exc)
    if as_json:
        emit_json([v.to_json() for v in views])
        return
    cols = [
        Col("consumer", keep=True),
        Col("tenant", keep=True),
        Col("source"),
        Col("cursor"),
        Col("lag", justify="right"),
        Col("last turn"),
        Col("holder"),
        Col("running"),
    ]
    rows = [
        [
            v.name,
            v.tenant or "-",
            v.source,
            dumps(v.cursor),
            "?" if v.lag is None else str(v.lag),
            relative(v.last_turn_ms, now),
            v.holder,
            v.running or "-",
        ]
        for v in views
    ]
    if not rows:
        click.echo("no consumer has stored a cursor")
        return
    print_table(cols, rows, title="consumers")
