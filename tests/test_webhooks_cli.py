"""`ujobs webhooks list|show|enable` as an operator runs them (click's runner, in process) on a
real Postgres schema and Redis prefix: an endpoint a failure disabled is listed disabled with
its streak, shown with its attempts (stored markup and escapes printed as themselves, never
read), re-enabled with its streak cleared; an unknown endpoint is one `X_*` line, exit 2."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from click.testing import CliRunner, Result

from jobs_core.cli import main
from jobs_core.cli.base import console
from jobs_core.records import (
    ClaimParams,
    WebhookAttemptPut,
    WebhookEndpointPut,
)
from jobs_core.testing.scenarios.support import T0, new_job
from jobs_core.urls import driver_from_url

HOSTILE_URL = "https://h.example/x?a=[red]b[/red]&c=<i>"
HOSTILE_EXCERPT = "[bold]no[/bold] \x1b[31mred\x1b[0m <script>"


async def _fill(url: str) -> None:
    driver: Any = driver_from_url(url)
    async with driver:
        await driver.webhook_endpoint_put(WebhookEndpointPut("acme", "orders", HOSTILE_URL, T0))
        await driver.webhook_endpoint_put(WebhookEndpointPut(None, "ops", "https://o.example", T0))
        await driver.job_enqueue(new_job("j1"))
        (held,) = (await driver.job_claim(ClaimParams(("q",), "w1", 1, 60_000, T0))).jobs
        await driver.webhook_attempt_put(
            WebhookAttemptPut(
                held.fence,
                "acme",
                "orders",
                "msg_1",
                "failed",
                503,
                42,
                HOSTILE_EXCERPT,
                "X_WEBHOOK_DELIVERY_FAILED",
                1,
                T0 + 1,
            )
        )


def _ujobs(url: str, *args: str, code: int = 0) -> Result:
    done = CliRunner().invoke(main, ["webhooks", *args, "--driver", url], catch_exceptions=False)
    assert done.exit_code == code, done.output
    return done


def test_list_show_and_enable(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A wide console, whatever the terminal (or an earlier test) set: each URL on one line.
    monkeypatch.setattr(console, "_width", 200)
    monkeypatch.setenv("COLUMNS", "200")
    asyncio.run(_fill(store_url))
    doc = json.loads(_ujobs(store_url, "list", "--json").stdout)
    assert [(e["tenant_id"], e["endpoint"], e["enabled"], e["failures"]) for e in doc] == [
        (None, "ops", True, 0),
        ("acme", "orders", False, 1),
    ]
    text = _ujobs(store_url, "list").stdout
    assert "disabled" in text and HOSTILE_URL in text
    shown = _ujobs(store_url, "show", "orders", "--tenant", "acme").stdout
    # Stored text printed as itself: the markup shown, the escape spelled out.
    assert "[bold]no[/bold]" in shown and "\\x1b[31mred" in shown and "\x1b" not in shown
    assert "503" in shown and "X_WEBHOOK_DELIVERY_FAILED" in shown
    detail = json.loads(_ujobs(store_url, "show", "orders", "--tenant", "acme", "--json").stdout)
    (attempt,) = detail["attempts"]
    assert (attempt["excerpt"], attempt["status_code"]) == (HOSTILE_EXCERPT, 503)
    enabled = json.loads(_ujobs(store_url, "enable", "orders", "--tenant", "acme", "--json").stdout)
    assert (enabled["enabled"], enabled["failures"], enabled["disabled_at_ms"]) == (True, 0, None)
    # The endpoint of no tenant is not acme's: naming the wrong tenant finds nothing.
    missing = _ujobs(store_url, "enable", "orders", code=2).stdout
    assert missing.startswith("X_WEBHOOK_ENDPOINT_UNKNOWN: ")
    assert _ujobs(store_url, "show", "nope", "--tenant", "acme", code=2).stdout.startswith(
        "X_WEBHOOK_ENDPOINT_UNKNOWN: "
    )
    assert _ujobs(store_url, "list", "--limit", "0", code=2).stdout.startswith(
        "X_JOB_OPTION_INVALID: "
    )
