"""`webhook()` under SIGKILL, with real `ujobs worker` processes on real Postgres and Redis: the
worker is killed (`kill -9`) while its POST is out — after the side effect, before its record.
Nothing of that attempt is recorded; once the killed claim's lease lapsed, another worker takes
the run over and sends the event again under the SAME `webhook-id` (what lets the receiver
dedupe it), signed alike; that delivery is recorded once, and the endpoint's streak stays 0.
"""

from __future__ import annotations

import asyncio
import base64
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from standardwebhooks import Webhook

from jobs_core.facade import Jobs
from jobs_core.factories import register_endpoint, webhook, webhook_event
from jobs_core.job import JobRegistry
from jobs_core.records import WebhookAttemptListParams
from jobs_core.states import JobState
from jobs_core.tenant import acting_for
from jobs_core.urls import driver_from_url
from tests.core.support import ledger_worker, reaping, until
from tests.webhooks.support import recording_endpoint

SECRET = "whsec_" + base64.b64encode(b"process-secret-0123456789").decode()
APP = f"""
from jobs_core.factories import webhook
from jobs_core.retry import Retry

send = webhook(
    "send",
    secrets=[{SECRET!r}],
    allow_networks=["127.0.0.1/32"],
    retry=Retry(attempts=5, base_ms=10),
)
"""


@pytest.fixture
def started() -> Iterator[list[Any]]:
    yield from reaping()


def test_a_worker_killed_mid_request_resends_the_same_event(
    store_url: str, tmp_path: Path, started: list[Any]
) -> None:
    (tmp_path / "webhookapp.py").write_text(APP, encoding="utf-8")
    release = threading.Event()  # the first request is held until its worker is killed
    with recording_endpoint(hold_first=release) as (url, got):
        asyncio.run(_run(store_url, tmp_path, url, got, started))
    # Two requests, or more where a loaded machine let the standby's 1 s lease lapse too: every
    # one the same event, byte for byte.
    assert len(got) >= 2
    assert {headers["webhook-id"] for headers, _ in got} == {"msg_1"}
    assert len({body for _, body in got}) == 1
    for headers, body in got:
        assert Webhook(SECRET).verify(body, headers)["data"] == {"n": 1}


async def _run(store_url: str, app: Path, url: str, got: list[Any], started: list[Any]) -> None:
    driver: Any = driver_from_url(store_url)
    async with driver:
        await register_endpoint(
            driver, "orders", url, tenant_id="acme", allow_networks=["127.0.0.1/32"]
        )
        handle = webhook("send", secrets=[SECRET], registry=JobRegistry())
        with acting_for("acme"):
            job_id = (
                await Jobs(driver).enqueue(
                    handle,
                    webhook_event("orders", "order.paid", {"n": 1}, id="msg_1", org_id="acme"),
                )
            ).id
        first = ledger_worker(app, "webhookapp", store_url, "--lease", "1")
        started.append(first)
        await until(lambda: len(got) == 1, within=30)
        first.kill()
        first.communicate()
        params = WebhookAttemptListParams("acme", "orders", 10)
        assert await driver.webhook_attempt_list(params) == []
        standby = ledger_worker(app, "webhookapp", store_url, "--lease", "1")
        started.append(standby)

        async def done() -> bool:
            row = (await driver.job_get_many([job_id]))[job_id]
            return row.state is JobState.COMPLETED

        began = time.monotonic()
        await until(done, within=40)
        assert time.monotonic() - began < 40
        (attempt,) = await driver.webhook_attempt_list(params)
        assert (attempt.outcome, attempt.status_code, attempt.event_id) == (
            "delivered",
            200,
            "msg_1",
        )
        assert attempt.claims >= 2, attempt  # the killed worker's claim, then the standby's
        ep = await driver.webhook_endpoint_get("acme", "orders")
        assert ep is not None and (ep.enabled, ep.failures) == (True, 0)
        standby.terminate()
        standby.communicate(timeout=30)
