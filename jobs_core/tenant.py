"""The tenant a run acts under: a context variable the worker sets around each body.

`'none'` strips any org (fail closed): a body declared `tenant='none'` sees `current_tenant()`
as None even when enqueued from inside another tenant's run.
"""

from __future__ import annotations

import contextvars

_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("ujobs_tenant", default=None)


def current_tenant() -> str | None:
    """The org the current code acts for, or None."""
    return _TENANT.get()


class acting_for:  # lower case: it was a function, and is called as one
    """Run the block as `tenant` (None: no org), restoring the previous one after.

    A class, not a generator: every run of every job enters one, and a generator's context
    manager costs several times as much."""

    __slots__ = ("_tenant", "_token")

    def __init__(self, tenant: str | None) -> None:
        self._tenant = tenant

    def __enter__(self) -> None:
        self._token = _TENANT.set(self._tenant)

    def __exit__(self, *exc: object) -> None:
        _TENANT.reset(self._token)
