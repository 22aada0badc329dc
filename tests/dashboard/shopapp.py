"""The app the dashboard's tests run: a worker process imports it (its declarations redact the
card), and the dashboard process reads its task for the schedule page.

`ship` fails for good until its order's gate file exists in `$SHOP_GATES` (one attempt): dead
first, then, once the gate is there, requeued from the dashboard and completed.
`await_payment` parks on an event so a job page shows what a run waits for. `reindex` is a
backfill over twelve orders, four a batch, for the backfills pages.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from jobs_core import JobContext, Retry, job, task
from jobs_core.factories.backfill import BackfillRegistry, backfill
from jobs_core.job import JobRegistry
from jobs_core.scheduler.task import TaskRegistry

jobs = JobRegistry()


@job(
    tenant=lambda i: i.get("org", "acme"),
    idempotency_key=lambda i: str(i["n"]),
    sensitive=("card",),
    queue="payments",
    registry=jobs,
)
async def charge(input: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    return {"charged": input["n"], "card": input["card"]}


@job(
    tenant="none",
    idempotency_key=lambda i: str(i["order"]),
    queue="shipping",
    retry=Retry(attempts=1),
    registry=jobs,
)
async def ship(input: dict[str, Any], ctx: JobContext) -> str:
    label = await ctx.step.run("label", lambda: f"label-{input['order']}")
    if not (Path(os.environ["SHOP_GATES"]) / f"open-{input['order']}").exists():
        raise RuntimeError(f"the warehouse is closed for order {input['order']}")
    return str(label)


@job(
    tenant="none",
    idempotency_key=lambda i: str(i["order"]),
    queue="shipping",
    registry=jobs,
)
async def await_payment(input: dict[str, Any], ctx: JobContext) -> Any:
    return await ctx.step.wait_for_event(
        "paid", "payment.settled", match={"order": input["order"]}, timeout=3600
    )


nightly = task(
    "nightly-report",
    cron="0 3 * * *",
    tz="Europe/Paris",
    job=charge,
    input={"n": 0, "card": "none"},
    registry=TaskRegistry(),
)


def _orders(cursor: Any, scope: str, limit: int) -> tuple[list[int], Any]:
    start = 0 if cursor is None else int(cursor)
    end = min(start + limit, 12)
    return list(range(start, end)), (end if end < 12 else None)


reindex = backfill(
    name="reindex-orders",
    tenant="none",
    handle=lambda rows: None,
    pages=_orders,
    batch=4,
    count=12,
    queue="shipping",
    registry=jobs,
    backfills=BackfillRegistry(),
)
