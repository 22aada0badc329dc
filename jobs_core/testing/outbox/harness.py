"""What the outbox suite drives: a store, and the way rows get into it (the store's own stage).

Staging is not part of `OutboxStore` (each store stages in its own kind of transaction), so a
store's test hands the suite both: the store for the relay's calls, and a `stage` callable that
writes records through that store's transaction kind.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import TypeAlias

from jobs_core.outbox.store import OutboxStore
from jobs_core.records import NewJob

#: `stage(records, commit)`: one transaction of the store's own kind that stages `records` (one
#: `stage_records` call), then commits when `commit` is true and rolls back otherwise. A refused
#: stage (its `JobsError`) still ends the transaction the same way, then is raised again: an app
#: that catches a refusal and commits must find nothing of the refused call staged.
StageCall: TypeAlias = Callable[[Sequence[NewJob], bool], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class OutboxHarness:
    """An outbox store under test, and the stage that writes into it."""

    store: OutboxStore
    stage: StageCall


#: Makes a fresh, empty harness; entering it opens the store, leaving it drops everything.
OutboxFactory: TypeAlias = Callable[[], AbstractAsyncContextManager[OutboxHarness]]
