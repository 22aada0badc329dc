"""Helpers the core tests share."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable


async def until(check: Callable[[], bool | Awaitable[bool]], within: float = 10.0) -> None:
    """Poll `check` (sync or async) until it answers True; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        answer = check()
        if inspect.isawaitable(answer):
            answer = await answer
        if answer:
            return
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)
