"""A write whose answer may be lost, sent once more at once.

`X_DRIVER_UNAVAILABLE` after a write was sent does not say it did not land: the connection may
have dropped after the store committed and before its answer was read. Where sending the SAME
write again is exactly-once by the store's own rule — a holder's own lease holding is replaced
by its next take; the first step record of a name stays; a posting's key, a sweep batch's
number and a webhook attempt's claim are written once — the caller resends it at once rather
than fail with a write that is stored (and spend an attempt on it, or leave a holding nobody
knows of until its TTL). A second failure raises: the store is really away.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from jobs_core.errors import DriverUnavailableError

T = TypeVar("T")


async def again_if_lost(write: Callable[[], Awaitable[T]]) -> T:
    """`await write()`, and once more at once when it fails `X_DRIVER_UNAVAILABLE`. Only for a
    write whose repeat the store answers without writing twice."""
    try:
        return await write()
    except DriverUnavailableError:
        return await write()
