"""`MemoryOutbox`: the outbox contract in one process, for tests and the embedded default.

Its transactions are `MemoryTx` objects: what a transaction stages becomes visible to the relay
all at once when the `with` block exits normally, and vanishes when it raises, which is what a
database transaction gives the Postgres store. A published row is deleted, as on Postgres.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from sortedcontainers import SortedDict

from jobs_core.clock import Clock, SystemClock
from jobs_core.errors import DeclarationInvalidError
from jobs_core.job import JobHandle
from jobs_core.outbox import (
    OutboxClaim,
    OutboxRelease,
    OutboxRow,
    OutboxStore,
    Staged,
    check_staged,
    staged,
    staged_record,
)
from jobs_core.records import NewJob

_Key = tuple[int, str]


class MemoryTx:
    """One open transaction of a `MemoryOutbox`; only `MemoryOutbox.transaction` makes one."""

    def __init__(self, owner: MemoryOutbox) -> None:
        self.owner = owner
        self.staged: list[NewJob] = []
        self.open = True


class _Wake:
    def __init__(self, owner: MemoryOutbox, on_wake: Callable[[], None]) -> None:
        self._owner = owner
        self._loop = asyncio.get_running_loop()
        self._on_wake = on_wake
        self._closed = False

    def is_live(self) -> bool:
        return not self._closed

    def ring(self) -> None:
        if not self._closed:
            self._loop.call_soon_threadsafe(self._on_wake)

    async def close(self) -> None:
        self._closed = True
        self._owner._forget(self)


class MemoryOutbox(OutboxStore):
    """Staged rows in a dict behind one thread lock (sync stages and the relay's loop share it)."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        """`clock` stamps each stage (its `created_at_ms` and first `available_at_ms`)."""
        self.clock = clock or SystemClock()
        self._lock = threading.Lock()
        self._rows: SortedDict[_Key, OutboxRow] = SortedDict()
        self._keys: dict[str, _Key] = {}
        self._wakes: list[_Wake] = []

    def describe(self) -> str:
        return "memory outbox"

    @contextmanager
    def transaction(self) -> Iterator[MemoryTx]:
        """A transaction: its stages commit together when the block exits, none if it raises."""
        tx = MemoryTx(self)
        try:
            yield tx
        except BaseException:
            tx.open = False
            raise
        tx.open = False
        self._commit(tx.staged)

    def stage(self, tx: MemoryTx, handle: JobHandle, input: Any, **options: Any) -> Staged:
        """Stage one job in `tx` (`Jobs.enqueue`'s options but `id`/`run_id`); refused before
        anything is staged when the record is."""
        record = staged_record(handle, input, clock=self.clock, **options)
        self.stage_records(tx, [record])
        return staged(record)

    def stage_records(self, tx: MemoryTx, jobs: Sequence[NewJob]) -> None:
        """Stage ready-made records in `tx`; all refused before any is staged."""
        if tx.owner is not self or not tx.open:
            raise DeclarationInvalidError(
                "stage inside an open transaction of this outbox", detail="tx"
            )
        check_staged(jobs)
        tx.staged.extend(jobs)

    def _commit(self, jobs: Sequence[NewJob]) -> None:
        with self._lock:
            for job in jobs:
                if job.id in self._keys:
                    continue  # an id staged before keeps its first row, as Postgres's
                key = (job.created_at_ms, job.id)
                self._keys[job.id] = key
                self._rows[key] = OutboxRow(
                    job=job,
                    attempts=0,
                    available_at_ms=job.created_at_ms,
                    claimed_by=None,
                    lease_until_ms=None,
                    last_error=None,
                )
            wakes = list(self._wakes) if jobs else []
        for w in wakes:
            w.ring()

    def _forget(self, wake: _Wake) -> None:
        with self._lock:
            if wake in self._wakes:
                self._wakes.remove(wake)

    async def outbox_wake(self, on_wake: Callable[[], None]) -> _Wake:
        wake = _Wake(self, on_wake)
        with self._lock:
            self._wakes.append(wake)
        return wake

    async def _outbox_claim(self, claim: OutboxClaim) -> list[OutboxRow]:
        now = claim.now_ms
        taken: list[OutboxRow] = []
        with self._lock:
            for key, row in self._rows.items():
                if len(taken) == claim.limit:
                    break
                if row.available_at_ms > now:
                    continue
                if row.claimed_by is not None and (row.lease_until_ms or 0) > now:
                    continue
                row = replace(row, claimed_by=claim.token, lease_until_ms=now + claim.lease_ms)
                self._rows[key] = row
                taken.append(row)
        return taken

    async def _outbox_pending(self, limit: int) -> list[OutboxRow]:
        with self._lock:
            return list(self._rows.values()[:limit])

    def _held(self, token: str, ids: Sequence[str]) -> list[tuple[str, _Key]]:
        held: list[tuple[str, _Key]] = []
        seen: set[str] = set()
        for i in ids:
            key = self._keys.get(i)
            if key is None or i in seen or self._rows[key].claimed_by != token:
                continue
            seen.add(i)
            held.append((i, key))
        return held

    async def _outbox_publish(self, token: str, ids: Sequence[str]) -> list[str]:
        with self._lock:
            held = self._held(token, ids)
            for i, key in held:
                del self._rows[key]
                del self._keys[i]
        return [i for i, _ in held]

    async def _outbox_release(self, release: OutboxRelease) -> list[str]:
        with self._lock:
            held = self._held(release.token, release.ids)
            for _, key in held:
                row = self._rows[key]
                failed = release.error is not None
                self._rows[key] = replace(
                    row,
                    claimed_by=None,
                    lease_until_ms=None,
                    available_at_ms=release.retry_at_ms,
                    attempts=row.attempts + 1 if failed else row.attempts,
                    last_error=release.error if failed else row.last_error,
                )
        return [i for i, _ in held]
