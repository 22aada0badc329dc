"""The app the backfill CLI's tests name with `--app`: two backfills over 30 numbers, one across
tenants (it must run first) and one per tenant, on registries of their own."""

from __future__ import annotations

from typing import Any

from jobs_core.factories.backfill import BackfillRegistry, backfill
from jobs_core.job import JobRegistry

jobs = JobRegistry()
sweeps = BackfillRegistry()
TOTAL = 30


def thirty(cursor: Any, scope: str, limit: int) -> tuple[list[int], Any]:
    """0..29, `limit` at a time; the cursor is the next number."""
    start = 0 if cursor is None else int(cursor)
    end = min(start + limit, TOTAL)
    return list(range(start, end)), (end if end < TOTAL else None)


def nothing(rows: list[int]) -> None:
    return None


nums = backfill(
    name="nums",
    tenant="none",
    handle=nothing,
    pages=thirty,
    batch=10,
    count=TOTAL,
    environments=["default", "production"],
    registry=jobs,
    backfills=sweeps,
)
per_org = backfill(
    name="per-org",
    tenant=lambda i: i["org"],
    handle=nothing,
    pages=thirty,
    batch=7,
    requires=[nums],
    registry=jobs,
    backfills=sweeps,
)
