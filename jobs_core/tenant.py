"""The tenant a run acts under: a context variable the worker sets around each body.

`'none'` strips any org (fail closed): a body declared `tenant='none'` sees `current_tenant()`
as None even when enqueued from inside another tenant's run.
"""

from __future__ import annotations

import contextvars
from typing import NoReturn

_TENANT: contextvars.ContextVar[str | None] = contextvars.ContextVar("ujobs_tenant", default=None)


def current_tenant() -> str | None:
    """The org the current code acts for, or None."""
    return _TENANT.get()


class acting_for:  # lower case: it was a function, and is called as one
    """Run the block as `tenant` (None: no org), restoring the previous one after; a `tenant`
    that is neither a str nor None is `X_JOB_OPTION_INVALID` at once.

    A class, not a generator: every run of every job enters one, and a generator's context
    manager costs several times as much."""

    __slots__ = ("_tenant", "_token")

    def __init__(self, tenant: str | None) -> None:
        # One isinstance for a str (every run enters one): only what is neither pays for more.
        if not isinstance(tenant, str) and tenant is not None:
            _refuse(tenant)
        self._tenant = tenant

    def __enter__(self) -> None:
        self._token = _TENANT.set(self._tenant)

    def __exit__(self, *exc: object) -> None:
        _TENANT.reset(self._token)


def _refuse(tenant: object) -> NoReturn:
    """`X_JOB_OPTION_INVALID` for an `acting_for` argument no enqueue could store: refused
    here, where it was written, not at the first enqueue inside the block."""
    from jobs_core.errors import OptionInvalidError

    raise OptionInvalidError(
        f"acting_for takes an org id (a str) or None, not {type(tenant).__name__}",
        detail="tenant",
    )
