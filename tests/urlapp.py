"""The one job `tests/test_url_forms.py` enqueues through every URL form: `ujobs enqueue` in
the test's process imports it, and so does the `ujobs worker` process it starts."""

from __future__ import annotations

from typing import Any

from jobs_core import job
from jobs_core.job import JobRegistry


@job(tenant="none", idempotency_key=lambda i: str(i["n"]), registry=JobRegistry())
async def ping(input: Any, ctx: Any) -> int:
    return int(input["n"])
