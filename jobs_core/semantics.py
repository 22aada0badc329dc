"""Small pieces of the contract every driver must spell the same way."""

from __future__ import annotations

from typing import Final

#: The `last_error` a claim writes on a row it buries (lease lapsed on the final attempt).
LEASE_LAPSED_ERROR: Final = (
    '{"code":"X_JOB_LEASE_LOST","message":"lease lapsed on the final attempt"}'
)


def namespace_of(name: str, tenant_id: str | None, key: str) -> tuple[str, str, str]:
    """The idempotency namespace `(name, tenant or '', key)`, over live rows (SPEC §5)."""
    return (name, tenant_id or "", key)
