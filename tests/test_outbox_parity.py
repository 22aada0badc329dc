"""The memory outbox against the outbox parity suite: the reference store pins itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import pytest

from jobs_core.errors import JobsError
from jobs_core.records import NewJob
from jobs_core.testing import OutboxFactory, OutboxHarness, OutboxSuite
from jobs_memory import MemoryOutbox


class _RolledBack(Exception):
    """Leaves a `MemoryOutbox.transaction` block so that it stages nothing."""


@asynccontextmanager
async def memory_harness(outbox: MemoryOutbox | None = None) -> AsyncIterator[OutboxHarness]:
    """`outbox` (a fresh `MemoryOutbox` by default) and a stage through its own transactions."""
    outbox = outbox or MemoryOutbox()

    async def stage(records: Sequence[NewJob], commit: bool) -> None:
        refusal: JobsError | None = None
        try:
            with outbox.transaction() as tx:
                try:
                    outbox.stage_records(tx, records)
                except JobsError as exc:
                    refusal = exc  # the app caught it; the transaction goes on to its end
                if not commit:
                    raise _RolledBack
        except _RolledBack:
            pass
        if refusal is not None:
            raise refusal

    yield OutboxHarness(outbox, stage)


class TestMemoryOutboxParity(OutboxSuite):
    @pytest.fixture
    def outbox_factory(self) -> OutboxFactory:
        return memory_harness
