"""The factories' worker module (`ujobs worker bench.chaos.families.factories.work`): the
workload declared for the store in `URL_ENV`, and the driver every worker runs on — the real
one, each webhook attempt's record written to the ledger before and after it is put, so a
repeated delivery can be laid at the door of the worker that got the first 2xx."""

from __future__ import annotations

import os

from bench.chaos.families.factories.decl import SCHEME, URL_ENV, declare, import_root
from bench.chaos.ledger import note
from jobs_core.driver import JobDriver
from jobs_core.records import WebhookAttemptAnswer, WebhookAttemptPut

__all__ = ["DECLS", "SCHEME", "hooked_driver"]  # and the handles, below


def hooked_driver(url: str) -> JobDriver:
    """The driver at `URL_ENV`, its `webhook_attempt_put` written to the ledger."""
    from jobs_core.urls import driver_from_url

    driver = driver_from_url(os.environ[URL_ENV])
    put = driver.webhook_attempt_put

    async def attempt_put(params: WebhookAttemptPut) -> WebhookAttemptAnswer:
        fence = params.fence
        fields = {"event": params.event_id, "job": fence.job_id, "claims": fence.claims}
        note("put", **fields, outcome=params.outcome)
        try:
            answer = await put(params)
        except Exception as exc:
            note("put_error", **fields, error=getattr(exc, "code", type(exc).__name__))
            raise
        note("put_done", **fields, recorded=answer.recorded)
        return answer

    driver.webhook_attempt_put = attempt_put  # type: ignore[method-assign,assignment]
    return driver


import_root().mkdir(parents=True, exist_ok=True)
DECLS = declare(os.environ[URL_ENV])
# The worker runs the handles the module exports.
postings = DECLS.postings
consumer = DECLS.consumer.job
hook = DECLS.hook
backfill0, backfill1, backfill2 = DECLS.backfills
import0, import1, import2 = DECLS.imports
