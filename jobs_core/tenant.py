"""The tenant a run acts under: a context variable the worker sets around each body.

`'none'` strips any org (fail closed): a body declared `tenant='none'` sees `current_tenant()`
as None even when enqueued from inside another tenant's run.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("ujobs_tenant", default=None)


def current_tenant() -> str | None:
    """The org the current code acts for, or None."""
    return _TENANT.get()


@contextmanager
def acting_for(tenant: str | None) -> Iterator[None]:
    """Run the block as `tenant` (None: no org), restoring the previous one after."""
    token = _TENANT.set(tenant)
    try:
        yield
    finally:
        _TENANT.reset(token)
