"""Attempts recorded in bulk for the webhook purge's store tests: one endpoint, one row per
attempt, each claimed and its attempt put under that claim."""

from __future__ import annotations

from jobs_core.driver import JobDriver
from jobs_core.records import ClaimParams, WebhookAttemptPut, WebhookEndpointPut
from tests.core.support import T0, new_job


async def record_attempts(driver: JobDriver, n: int, at_ms: int, prefix: str = "a") -> None:
    """`n` failed attempts of endpoint (t1, orders), made at `at_ms` under fresh claims."""
    await driver.webhook_endpoint_put(WebhookEndpointPut("t1", "orders", "https://h/x", T0))
    queue = f"wh-{prefix}"
    await driver.job_enqueue_many(
        [new_job(f"{prefix}{i:05d}", f"{prefix}{i}", queue=queue) for i in range(n)]
    )
    claimed = await driver.job_claim(ClaimParams((queue,), "w1", n, 60_000, T0))
    assert len(claimed.jobs) == n
    for job in claimed.jobs:
        put = WebhookAttemptPut(
            job.fence, "t1", "orders", f"msg-{job.id}", "failed", 500, 3, "", "boom", 10_000, at_ms
        )
        assert (await driver.webhook_attempt_put(put)).recorded
