"""The parity suite catches the driver bugs a mutation pass found it let through.

Each broken driver below is the memory driver with ONE plausible third-party bug that the
suite as it stood passed (every walk, every scenario): most of them a store comparing
identifiers as its collation or key pattern does rather than as exact text (case- or
accent-insensitive, pad-space, a prefix or `LIKE` match), the others an edge a family walk
reached from some seeds only. The scenarios that now catch each (`twins.py`, `edges.py` and a
few sharper asserts in the family scenarios) are named with it; scenarios are fixed, so each
is caught on every run, whatever a driver's CI seed. The walks are not asked to catch them.
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from jobs_core.records import (
    BalanceRow,
    ClaimParams,
    ClaimResult,
    ConsumerCursor,
    ConsumerPut,
    CounterReadParams,
    CounterRow,
    EnqueueResult,
    EventRecord,
    EventWait,
    Fence,
    Heartbeat,
    JobFilter,
    JobRecord,
    JobSlice,
    Lease,
    LeaseRef,
    LeaseRenew,
    LeaseTake,
    ListKey,
    Nack,
    NackKind,
    NewJob,
    Pause,
    PostingPut,
    PostingPutAnswer,
    PostingRecord,
    Progress,
    QueueStats,
    RequeueAnswer,
    RequeueParams,
    StepPut,
    StepRecord,
    SweepRecord,
    SweepStart,
    SweepStartAnswer,
    TaskFire,
    TaskFireAnswer,
    TaskMark,
    WebhookAttemptAnswer,
    WebhookAttemptPut,
    WebhookEndpoint,
    WorkerBeat,
)
from jobs_core.semantics import namespace_of
from jobs_core.states import LIVE_STATES, JobState
from jobs_core.testing import run_scenario
from jobs_core.testing.scenarios import SCENARIOS
from jobs_memory import MemoryDriver
from jobs_memory import driver as memory_module
from tests.teeth import assert_each_listed_once


def folded(text: str) -> str:
    """`text` as a case- and accent-insensitive collation compares it."""
    plain = unicodedata.normalize("NFD", text)
    return "".join(c for c in plain if not unicodedata.combining(c)).casefold()


# -- identifiers compared as a collation or a pattern does, not as exact text -------------------


class KeyPadSpace(MemoryDriver):
    """Dedupes on a key compared pad-space: `'k'` and `'k '` are one key."""

    def _enqueue_locked(self, job: NewJob) -> EnqueueResult:
        if job.id not in self._rows:
            mine = namespace_of(job.name, job.tenant_id, job.idempotency_key.rstrip(" "))
            for row in self._rows.values():
                r = row.rec
                theirs = namespace_of(r.name, r.tenant_id, r.idempotency_key.rstrip(" "))
                if r.state in LIVE_STATES and theirs == mine:
                    return EnqueueResult(r.id, deduped=True)
        return super()._enqueue_locked(job)


class KeyAccentInsensitive(MemoryDriver):
    """Dedupes on a key compared as an accent- and case-insensitive collation does."""

    def _enqueue_locked(self, job: NewJob) -> EnqueueResult:
        if job.id not in self._rows:
            mine = namespace_of(job.name, job.tenant_id, folded(job.idempotency_key))
            for row in self._rows.values():
                r = row.rec
                theirs = namespace_of(r.name, r.tenant_id, folded(r.idempotency_key))
                if r.state in LIVE_STATES and theirs == mine:
                    return EnqueueResult(r.id, deduped=True)
        return super()._enqueue_locked(job)


class ClaimQueueCaseInsensitive(MemoryDriver):
    """A claim of queue `q` takes the rows of `Q` too."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        asked = {q.casefold() for q in params.queues}
        with self._lock:
            known = {row.rec.queue for row in self._rows.values()}
        twins = sorted(q for q in known if q.casefold() in asked and q not in params.queues)
        return await super()._job_claim(replace(params, queues=(*params.queues, *twins)))


class _CaseInsensitivePauses(set[Pause]):
    def __contains__(self, pause: object) -> bool:
        return isinstance(pause, Pause) and any(
            (p.kind, p.value.casefold()) == (pause.kind, pause.value.casefold())
            for p in set.__iter__(self)
        )


class PauseCaseInsensitive(MemoryDriver):
    """A pause of `Sync` pauses `sync` too."""

    def __init__(self) -> None:
        super().__init__()
        self._pauses = _CaseInsensitivePauses()


class FenceWorkerCaseInsensitive(MemoryDriver):
    """A fence of worker `W1` holds a row `w1` claimed."""

    def _held(self, fence: Fence) -> Any:
        row = self._rows.get(fence.job_id)
        by = None if row is None else row.rec.claimed_by
        if by is not None and by.casefold() == fence.worker_id.casefold():
            fence = replace(fence, worker_id=by)
        return super()._held(fence)


class WorkerIdCaseInsensitive(MemoryDriver):
    """A beat of worker `W1` replaces the registry row of `w1`."""

    def _beat_locked(self, beat: WorkerBeat) -> None:
        for worker_id in list(self._workers):
            if worker_id.casefold() == beat.worker_id.casefold():
                del self._workers[worker_id]
        super()._beat_locked(beat)


class _Matching:
    """A listing filter whose test is `keep` (the memory listing asks only `matches`)."""

    def __init__(self, keep: Callable[[JobRecord], bool]) -> None:
        self.matches = keep


class ListNameCaseInsensitive(MemoryDriver):
    """A listing filtered by name `a` keeps the rows of `A` too (limit, scan and cursor kept)."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        if f.name is None:
            return await super()._job_list(f, after, limit, scan)
        rest, name = replace(f, name=None), f.name.casefold()
        keep = _Matching(lambda r: rest.matches(r) and r.name.casefold() == name)
        return await super()._job_list(keep, after, limit, scan)  # type: ignore[arg-type]


class ListTenantCaseInsensitive(MemoryDriver):
    """A listing filtered by tenant `t` keeps the rows of `T` too (limit, scan and cursor
    kept)."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        if f.tenant_id is None:
            return await super()._job_list(f, after, limit, scan)
        rest, tenant = replace(f, tenant_id=None), f.tenant_id.casefold()
        keep = _Matching(lambda r: rest.matches(r) and (r.tenant_id or "").casefold() == tenant)
        return await super()._job_list(keep, after, limit, scan)  # type: ignore[arg-type]


class CounterReadByPrefix(MemoryDriver):
    """Reads the counters of every name that starts with an asked one (`LIKE 'name%'`)."""

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        rows = await super()._counter_read(replace(params, names=None))
        if params.names is None:
            return rows
        return [r for r in rows if any(r.name.startswith(n) for n in params.names)]


class StepNameCaseInsensitive(MemoryDriver):
    """A step `Charge` counts as recorded once `charge` is."""

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        named = []
        for p in puts:
            r = self._held(p.fence)
            for name in {} if r is None else self._steps.get(r.run_id, {}):
                if name.casefold() == p.name.casefold():
                    p = replace(p, name=name)
            named.append(p)
        return await super()._step_put(named)


class StepListByPrefix(MemoryDriver):
    """Lists the steps of every run whose id starts with the asked one (a `SCAN MATCH run*`)."""

    async def _step_list(self, run_id: str) -> list[StepRecord]:
        with self._lock:
            return [
                s
                for run, steps in self._steps.items()
                if run.startswith(run_id)
                for s in steps.values()
            ]


class _EventNameMatch(MemoryDriver):
    """Finds an event of the wait's name or, failing that, of any name `same` pairs with it."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        raise NotImplementedError

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        found = super()._find_locked(wait, now_ms)
        for name in list(self._events_by_name):
            if found is None and name != wait.event and self.same(wait.event, name):
                found = super()._find_locked(replace(wait, event=name), now_ms)
        return found


class EventNameCaseInsensitive(_EventNameMatch):
    """A wait on `paid` is met by an event `Paid`."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        return asked.casefold() == stored.casefold()


class EventNameByPrefix(_EventNameMatch):
    """A wait on `paid` is met by an event `paid-eu`."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        return stored.startswith(asked)


class TaskNameCaseInsensitive(MemoryDriver):
    """Arming task `Nightly` answers (and keeps) the mark of `nightly`."""

    async def _task_arm(self, names: Sequence[str], now_ms: int) -> list[TaskMark]:
        out = []
        for n in names:
            twin = next((m for k, m in self._marks.items() if k.casefold() == n.casefold()), None)
            out += [twin] if twin is not None else await super()._task_arm([n], now_ms)
        return out


class TaskMarksByPrefix(MemoryDriver):
    """Reads the mark of the first task whose name starts with an asked one."""

    async def _task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        with self._lock:
            out = {}
            for n in names:
                hit = self._marks.get(n) or next(
                    (m for k, m in sorted(self._marks.items()) if k.startswith(n)), None
                )
                if hit is not None:
                    out[n] = hit
            return out


class SweepListNameCaseInsensitive(MemoryDriver):
    """Lists the entries of sweep `Users` as those of `users`."""

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        with self._lock:
            entries = list(self._sweeps.values())
        return [e for e in entries if name is None or e.name.casefold() == name.casefold()]


class SweepListNameByPrefix(MemoryDriver):
    """Lists the entries of every sweep whose name starts with the asked one."""

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        with self._lock:
            entries = list(self._sweeps.values())
        return [e for e in entries if name is None or e.name.startswith(name)]


class SweepBlockCaseInsensitive(MemoryDriver):
    """A completed run of sweep `Users` blocks a new run of `users` (the blocker still the one
    finished last)."""

    async def _sweep_start(self, start: SweepStart) -> SweepStartAnswer:
        identity = (start.name.casefold(), start.scope, start.environment, start.checksum)
        with self._lock:
            held = self._holds_run(start.fence, start.run_id)
            done = [
                e
                for e in self._sweeps.values()
                if e.run_id != start.run_id
                and e.status == "completed"
                and (e.name.casefold(), e.scope, e.environment, e.checksum) == identity
            ]
        if not held or not done:
            return await super()._sweep_start(start)
        last = max(done, key=lambda e: (e.finished_at_ms or 0, e.run_id))
        return SweepStartAnswer(None, blocked_by=last)


class PostingKeyCaseInsensitive(MemoryDriver):
    """A posting under key `Order-1` finds the one under `order-1` already applied."""

    async def _posting_put(self, put: PostingPut) -> PostingPutAnswer:
        with self._lock:
            r = self._held(put.fence)
            for (tenant, key), stored in self._postings.items():
                twin = key != put.key and key.casefold() == put.key.casefold()
                if (
                    r is not None
                    and r.idempotency_key == put.key
                    and tenant == put.tenant_id
                    and twin
                ):
                    same = stored.lines == put.lines
                    return PostingPutAnswer("already_applied" if same else "conflict", stored)
        return await super()._posting_put(put)


def _balances(
    driver: MemoryDriver, tenant_id: str | None, keep: Callable[[str], bool]
) -> list[BalanceRow]:
    """The tenant's balance rows of every account `keep` keeps."""
    with driver._lock:
        return [
            BalanceRow(account, currency, sums[0], sums[1])
            for (tenant, account, currency), sums in driver._balances.items()
            if tenant == tenant_id and keep(account)
        ]


class AccountCaseInsensitive(MemoryDriver):
    """A balance of account `cash` sums `Cash` in too."""

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        wanted = {a.casefold() for a in accounts}
        return _balances(self, tenant_id, lambda account: account.casefold() in wanted)


class BalancesIgnoreAccounts(MemoryDriver):
    """Answers every account of the tenant's ledger, whichever were asked."""

    async def _posting_balances(
        self, tenant_id: str | None, accounts: Sequence[str]
    ) -> list[BalanceRow]:
        return _balances(self, tenant_id, lambda _: True)


_V = TypeVar("_V")


def _first(
    driver: MemoryDriver, entries: dict[tuple[str, str], _V], keep: Callable[[str, str], bool]
) -> _V | None:
    """The first of `entries` (keyed by pairs) whose key `keep` keeps, as a scan finds it."""
    with driver._lock:
        return next((v for (a, b), v in entries.items() if keep(a, b)), None)


class ConsumerNameCaseInsensitive(MemoryDriver):
    """Reads consumer `Orders`'s cursor as `orders`'s."""

    async def _consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        asked = (name.casefold(), tenant_id or "")
        return _first(self, self._consumers, lambda n, tenant: (n.casefold(), tenant) == asked)


class EndpointCaseInsensitive(MemoryDriver):
    """Reads endpoint `Orders` as `orders`."""

    async def _webhook_endpoint_get(
        self, tenant_id: str | None, endpoint: str
    ) -> WebhookEndpoint | None:
        asked = (tenant_id or "", endpoint.casefold())
        return _first(self, self._endpoints, lambda tenant, e: (tenant, e.casefold()) == asked)


def like(pattern: str, text: str) -> bool:
    """`text LIKE pattern` with the pattern left unescaped: `_` is any one character, `%` any
    run of them."""
    rx = "".join("." if c == "_" else ".*" if c == "%" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, text, re.DOTALL) is not None


class StepListLike(MemoryDriver):
    """Lists a run's steps by `run_id LIKE ?`, the id unescaped."""

    async def _step_list(self, run_id: str) -> list[StepRecord]:
        with self._lock:
            return [
                s for run, steps in self._steps.items() if like(run_id, run) for s in steps.values()
            ]


class SweepListLike(MemoryDriver):
    """Lists a sweep's entries by `name LIKE ?`, the name unescaped."""

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        with self._lock:
            entries = list(self._sweeps.values())
        return [e for e in entries if name is None or like(name, e.name)]


class ConsumerListLike(MemoryDriver):
    """Lists a consumer's entries by `name LIKE ?`, the name unescaped."""

    async def _consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        with self._lock:
            entries = list(self._consumers.values())
        return [e for e in entries if name is None or like(name, e.name)]


class ConsumerTenantCaseInsensitive(MemoryDriver):
    """Reads tenant `T1`'s cursor as `t1`'s (the entry written last wins)."""

    async def _consumer_cursor_get(self, name: str, tenant_id: str | None) -> ConsumerCursor | None:
        asked = (name, (tenant_id or "").casefold())
        latest = dict(reversed(self._consumers.items()))
        return _first(self, latest, lambda n, tenant: (n, tenant.casefold()) == asked)


class EndpointTenantCaseInsensitive(MemoryDriver):
    """Reads tenant `T1`'s endpoint as `t1`'s."""

    async def _webhook_endpoint_get(
        self, tenant_id: str | None, endpoint: str
    ) -> WebhookEndpoint | None:
        asked = ((tenant_id or "").casefold(), endpoint)
        return _first(self, self._endpoints, lambda tenant, e: (tenant.casefold(), e) == asked)


class PostingTenantCaseInsensitive(MemoryDriver):
    """Reads tenant `T1`'s posting of a key as `t1`'s."""

    async def _posting_get(self, tenant_id: str | None, key: str) -> PostingRecord | None:
        with self._lock:
            for (tenant, k), posting in self._postings.items():
                if k == key and (tenant or "").casefold() == (tenant_id or "").casefold():
                    return posting
        return None


class EventTenantCaseInsensitive(MemoryDriver):
    """Finds an event for tenant `T1` for a wait of `t1`."""

    def _find_locked(self, wait: EventWait, now_ms: int) -> EventRecord | None:
        found = super()._find_locked(wait, now_ms)
        with_twin = {e.tenant_id for e in self._events.values()}
        for tenant in sorted(t for t in with_twin if t is not None):
            folded_twin = tenant.casefold() == (wait.tenant_id or "").casefold()
            if found is None and tenant != wait.tenant_id and folded_twin:
                found = super()._find_locked(replace(wait, tenant_id=tenant), now_ms)
        return found


class TaskMarksCaseInsensitive(MemoryDriver):
    """Reads the mark of the task armed last among those whose name folds to the asked one."""

    async def _task_marks(self, names: Sequence[str]) -> dict[str, TaskMark]:
        with self._lock:
            out = {}
            for n in names:
                for k, mark in reversed(self._marks.items()):
                    if k.casefold() == n.casefold():
                        out[n] = mark
                        break
            return out


class CounterReadQueuesCaseInsensitive(MemoryDriver):
    """Reads the counters of queue `Q` with those of `q`."""

    async def _counter_read(self, params: CounterReadParams) -> list[CounterRow]:
        rows = await super()._counter_read(replace(params, queues=None))
        if params.queues is None:
            return rows
        asked = {q.casefold() for q in params.queues}
        return [r for r in rows if r.queue.casefold() in asked]


class WorkerForgetCaseInsensitive(MemoryDriver):
    """Forgetting worker `W1` forgets `w1` too."""

    async def _worker_forget(self, worker_id: str) -> bool:
        with self._lock:
            gone = [w for w in self._workers if w.casefold() == worker_id.casefold()]
            for w in gone:
                del self._workers[w]
            return bool(gone)


# -- lease keys and holders -------------------------------------------------------------------


def _pad_space(asked: str, stored: str) -> bool:
    """`asked = stored` under a pad-space collation: trailing spaces do not count."""
    return asked.rstrip(" ") == stored.rstrip(" ")


def _case_insensitive(asked: str, stored: str) -> bool:
    return asked.casefold() == stored.casefold()


def _accent_insensitive(asked: str, stored: str) -> bool:
    return folded(asked) == folded(stored)


class LeaseTakeKeyCaseInsensitive(MemoryDriver):
    """A take counts the live holdings of every key that folds to its key against its limit
    (`SELECT count(*) … WHERE key = ?` under a case-insensitive collation)."""

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        out: list[Lease | None] = []
        for t in takes:
            with self._lock:
                at = max(now_ms, self._lease_clocks.get(t.key, now_ms))
                others = [
                    h
                    for k, held in self._holdings.items()
                    if k != t.key and _case_insensitive(t.key, k)
                    for h in held.values()
                    if h.expires_at_ms > at
                ]
            # The twins' holdings take room first (the private call takes a limit down to 0).
            out += await super()._lease_take([replace(t, limit=t.limit - len(others))], now_ms)
        return out


_Ref = TypeVar("_Ref", LeaseRef, LeaseRenew)


class _LeaseRefKeyMatch(MemoryDriver):
    """Finds a renewal's, release's or abandon's token under any key `same` pairs with the
    named one (`WHERE key = ? AND token = ?` under a loose collation)."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        raise NotImplementedError

    def _keyed(self, key: str, token: int) -> str:
        """The key holding `token` that `same` pairs with `key` (`key` itself first)."""
        with self._lock:
            if token in self._holdings.get(key, {}):
                return key
            hits = (k for k, held in self._holdings.items() if token in held and self.same(key, k))
            return next(hits, key)

    def _rekeyed(self, refs: Sequence[_Ref]) -> list[_Ref]:
        """`refs`, each under the key `_keyed` finds for it."""
        return [replace(r, key=self._keyed(r.key, r.token)) for r in refs]


class LeaseRenewKeyAccentInsensitive(_LeaseRefKeyMatch):
    """Renews a holding of `sync` named under `sýnc` or `Sync`."""

    same = staticmethod(_accent_insensitive)

    async def _lease_renew(self, renews: Sequence[LeaseRenew], now_ms: int) -> list[bool]:
        return await super()._lease_renew(self._rekeyed(renews), now_ms)


class LeaseReleaseKeyCaseInsensitive(_LeaseRefKeyMatch):
    """Releases a holding of `sync` named under `Sync`."""

    same = staticmethod(_case_insensitive)

    async def _lease_release(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return await super()._lease_release(self._rekeyed(refs), now_ms)


class LeaseAbandonKeyPadSpace(_LeaseRefKeyMatch):
    """Abandons a holding of `sync ` named under `sync`."""

    same = staticmethod(_pad_space)

    async def _lease_abandon(self, refs: Sequence[LeaseRef], now_ms: int) -> list[bool]:
        return await super()._lease_abandon(self._rekeyed(refs), now_ms)


class _LeaseHoldersMatch(MemoryDriver):
    """Answers the live holdings of every key `same` pairs with the asked one."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        raise NotImplementedError

    async def _lease_holders(self, key: str, now_ms: int) -> list[Lease]:
        with self._lock:
            at = max(now_ms, self._lease_clocks.get(key, now_ms))
            return [
                h
                for k, held in self._holdings.items()
                if self.same(key, k)
                for h in held.values()
                if h.expires_at_ms > at
            ]


class LeaseHoldersByPrefix(_LeaseHoldersMatch):
    """Reads the holders of every key that starts with the asked one (a `SCAN MATCH key*`)."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        return stored.startswith(asked)


class LeaseHoldersLike(_LeaseHoldersMatch):
    """Reads the holders of a key by `key LIKE ?`, the key unescaped."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        return like(asked, stored)


class _LeaseHolderMatch(MemoryDriver):
    """A take finds the holder's own holding of the key as `same` finds it (`… WHERE key = ?
    AND holder = ?` under a loose collation): with none of its own, a twin holder's holding is
    taken for it and replaced."""

    @staticmethod
    def same(asked: str, stored: str) -> bool:
        raise NotImplementedError

    async def _lease_take(self, takes: Sequence[LeaseTake], now_ms: int) -> list[Lease | None]:
        out: list[Lease | None] = []
        for t in takes:
            with self._lock:
                held = self._holdings.get(t.key, {})
                if all(h.holder != t.holder for h in held.values()):
                    twins = (k for k, h in held.items() if self.same(t.holder, h.holder))
                    token = next(twins, None)
                    if token is not None:
                        held[token] = replace(held[token], holder=t.holder)
            out += await super()._lease_take([t], now_ms)
        return out


class LeaseHolderCaseInsensitive(_LeaseHolderMatch):
    """A take by holder `Sync` replaces the holding of `sync`."""

    same = staticmethod(_case_insensitive)


class LeaseHolderPadSpace(_LeaseHolderMatch):
    """A take by holder `sync` replaces the holding of `sync `."""

    same = staticmethod(_pad_space)


# -- edges the walks reached from some seeds only ---------------------------------------------


@contextmanager
def _picked_by(key: Callable[[tuple[Any, ...]], Any]) -> Iterator[None]:
    """The memory claim and purge pick their rows with `heapq.nsmallest`; inside, they pick
    them by `key`."""

    class Picker:
        @staticmethod
        def nsmallest(n: int, keys: Sequence[tuple[Any, ...]]) -> list[Any]:
            return sorted(keys, key=key)[:n]

    setattr(memory_module, "heapq", Picker)  # noqa: B010 - a module global, swapped back below
    try:
        yield
    finally:
        setattr(memory_module, "heapq", heapq)  # noqa: B010


class ClaimTiesByUtf16(MemoryDriver):
    """Breaks claim ties by UTF-16 code units (a JVM's or JavaScript's string order): an id
    above U+FFFF sorts before one in U+E000..U+FFFF."""

    async def _job_claim(self, params: ClaimParams) -> ClaimResult:
        with _picked_by(lambda k: (k[0], k[1], k[2].encode("utf-16-be"))):
            return await super()._job_claim(params)


class PurgeTiesByCasefold(MemoryDriver):
    """Purges rows finished in one millisecond by id under a case-folding collation."""

    async def _job_purge(self, params: Any) -> int:
        with self._lock:
            due: list[tuple[int, str]] = []
            for state, index in self._finished.items():
                keep = params.keep_ms(state)
                if keep is not None:
                    due += [e for e in index if e[0] <= params.now_ms - keep]
            gone = sorted(due, key=lambda e: (e[0], e[1].casefold(), e[1]))[: params.limit]
            for _, job_id in gone:
                self._drop(job_id)
            return len(gone)


class FreshRunIdsTakenByLanded(MemoryDriver):
    """Hands the fresh run ids out to the requeues that land, in turn, not by position: after a
    refused id every later row takes its neighbour's run."""

    async def _job_requeue_many(self, params: RequeueParams) -> list[RequeueAnswer]:
        if params.fresh_run_ids is None:
            return await super()._job_requeue_many(params)
        fresh = params.fresh_run_ids
        out: list[RequeueAnswer] = []
        with self._lock:
            for job_id in params.job_ids:
                landed = out.count(RequeueAnswer.REQUEUED)
                out.append(self._requeue_locked(job_id, params.now_ms, fresh[landed]))
        return out


class StatsOldestSkipsNamePaused(MemoryDriver):
    """Leaves the rows of a paused name out of a queue's oldest due row (as its claim does)."""

    async def _queue_stats(self, now_ms: int) -> list[QueueStats]:
        stats = await super()._queue_stats(now_ms)
        with self._lock:
            due = [
                r.rec
                for r in self._rows.values()
                if r.rec.state is JobState.READY
                and r.rec.run_at_ms is not None
                and r.rec.run_at_ms <= now_ms
                and Pause("name", r.rec.name) not in self._pauses
            ]
        oldest = {
            s.queue: min((r.run_at_ms or 0 for r in due if r.queue == s.queue), default=None)
            for s in stats
        }
        return [replace(s, oldest_ready_at_ms=oldest[s.queue]) for s in stats]


class DemandSkipsNamePaused(MemoryDriver):
    """Leaves the rows of a paused name out of a queue's demand."""

    async def _queue_demand(self, queues: Sequence[str], now_ms: int) -> dict[str, int]:
        demand = await super()._queue_demand(queues, now_ms)
        with self._lock:
            held = [
                r.rec.queue
                for r in self._rows.values()
                if r.rec.state is JobState.READY
                and (r.rec.run_at_ms or 0) <= now_ms
                and Pause("name", r.rec.name) in self._pauses
            ]
        return {q: n - held.count(q) if n else n for q, n in demand.items()}


class ConsumerListCutBeforeOrder(MemoryDriver):
    """Cuts the listing at its limit in the order the entries were written, then sorts it."""

    async def _consumer_list(self, name: str | None, limit: int) -> list[ConsumerCursor]:
        with self._lock:
            entries = [e for e in self._consumers.values() if name is None or e.name == name]
        return entries[:limit]


class SweepListByUpdate(MemoryDriver):
    """Lists the entries written to last first (by `updated_at`), not the newest start."""

    async def _sweep_list(self, name: str | None, limit: int) -> list[SweepRecord]:
        with self._lock:
            entries = [e for e in self._sweeps.values() if name is None or e.name == name]
        entries.sort(key=lambda e: (e.updated_at_ms, e.run_id), reverse=True)
        return entries[:limit]


class ListOneStateOnly(MemoryDriver):
    """Filters a listing by the first of the states it names only."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        if len(f.states) > 1:
            f = replace(f, states=frozenset([min(f.states)]))
        return await super()._job_list(f, after, limit, scan)


class ListTiesByCasefold(MemoryDriver):
    """Lists rows created in one millisecond by id under a case-folding collation."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        page = await super()._job_list(f, after, limit, scan)
        jobs = sorted(
            page.jobs, key=lambda j: (j.created_at_ms, j.id.casefold(), j.id), reverse=True
        )
        return replace(page, jobs=tuple(jobs))


_Fenced = TypeVar("_Fenced", Progress, Nack)


def _until_miss(driver: MemoryDriver, items: Sequence[_Fenced]) -> tuple[list[bool], list[_Fenced]]:
    """What a batch that stops at its first stale item answers (False from there on), and the
    items it writes."""
    with driver._lock:
        held = [driver._held(i.fence) is not None for i in items]
    miss = held.index(False) if False in held else len(held)
    return held[:miss] + [False] * (len(held) - miss), list(items[:miss])


class ProgressBatchStopsAtMiss(MemoryDriver):
    """A progress batch stops at its first stale item (a transaction that ends there)."""

    async def _job_progress(self, items: Sequence[Progress]) -> list[bool]:
        answer, kept = _until_miss(self, items)
        await super()._job_progress(kept)
        return answer


class NackBatchStopsAtMiss(MemoryDriver):
    """A nack batch stops at its first stale item (a transaction that ends there)."""

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        answer, kept = _until_miss(self, nacks)
        await super()._job_nack(kept)
        return answer


class HeartbeatDuplicateFirstWins(MemoryDriver):
    """Of one fence beaten twice in a batch, keeps the first beat's lease."""

    async def _job_heartbeat(self, beats: Sequence[Heartbeat]) -> list[bool]:
        first: dict[Fence, Heartbeat] = {}
        for b in beats:
            first.setdefault(b.fence, b)
        return await super()._job_heartbeat([first[b.fence] for b in beats])


class RetryClearsProgress(MemoryDriver):
    """A retry without progress clears the progress stored."""

    async def _job_nack(self, nacks: Sequence[Nack]) -> list[bool]:
        landed = await super()._job_nack(nacks)
        with self._lock:
            for n, ok in zip(nacks, landed, strict=True):
                if ok and n.kind is NackKind.RETRY and n.progress_json is None:
                    r = self._rows[n.fence.job_id].rec
                    self._put(r, replace(r, progress_json=None))
        return landed


class ProgressOnAnyLiveRow(MemoryDriver):
    """Takes progress under a fence whose row is live but no longer running (retried)."""

    async def _job_progress(self, items: Sequence[Progress]) -> list[bool]:
        out = []
        with self._lock:
            for p in items:
                row = self._rows.get(p.fence.job_id)
                r = None if row is None else row.rec
                ok = (
                    r is not None
                    and r.state in LIVE_STATES
                    and (r.claims, r.claimed_by) == (p.fence.claims, p.fence.worker_id)
                )
                if r is not None and ok:
                    self._put(r, replace(r, progress_json=p.progress_json))
                out.append(ok)
        return out


class _FreshRunRewritesTheRow(MemoryDriver):
    """A requeue into a fresh run rewrites the row as `fresh_row` says (a driver whose fresh
    requeue inserts the row anew, as if enqueued, and forgets one of its fields)."""

    @staticmethod
    def fresh_row(r: JobRecord) -> JobRecord:
        raise NotImplementedError

    def _requeue_locked(self, job_id: str, now_ms: int, fresh_run_id: str | None) -> RequeueAnswer:
        answer = super()._requeue_locked(job_id, now_ms, fresh_run_id)
        if answer is RequeueAnswer.REQUEUED and fresh_run_id is not None:
            r = self._rows[job_id].rec
            self._put(r, self.fresh_row(r))
        return answer


class FreshRunResetsPriority(_FreshRunRewritesTheRow):
    @staticmethod
    def fresh_row(r: JobRecord) -> JobRecord:
        return replace(r, priority=0)


class FreshRunDropsTraceparent(_FreshRunRewritesTheRow):
    @staticmethod
    def fresh_row(r: JobRecord) -> JobRecord:
        return replace(r, traceparent=None, enqueued_by=None)


class FreshRunDropsLinks(_FreshRunRewritesTheRow):
    @staticmethod
    def fresh_row(r: JobRecord) -> JobRecord:
        return replace(r, parent_id=None, batch_id=None)


class FreshRunClearsHistory(_FreshRunRewritesTheRow):
    @staticmethod
    def fresh_row(r: JobRecord) -> JobRecord:
        return replace(r, attempts=())


class FreshRunClearsOutput(_FreshRunRewritesTheRow):
    @staticmethod
    def fresh_row(r: JobRecord) -> JobRecord:
        return replace(r, result_json=None, progress_json=None)


class StepBatchLastWins(MemoryDriver):
    """Of one step named twice in a batch, keeps the last (an upsert where an insert-if-absent
    was due)."""

    async def _step_put(self, puts: Sequence[StepPut]) -> list[bool]:
        out: list[bool] = []
        with self._lock:
            written: set[tuple[str, str]] = set()
            for p in puts:
                r = self._held(p.fence)
                if r is not None:
                    steps = self._steps.setdefault(r.run_id, {})
                    if p.name not in steps or (r.run_id, p.name) in written:
                        steps[p.name] = StepRecord(r.run_id, p.name, p.output_json, p.now_ms)
                        written.add((r.run_id, p.name))
                out.append(r is not None)
        return out


class EventTtlInt32(MemoryDriver):
    """Keeps an event at most 2**31 - 1 ms (a 32-bit TTL column)."""

    async def _event_publish(self, event: EventRecord) -> int:
        cap = event.published_at_ms + 2**31 - 1
        return await super()._event_publish(
            replace(event, expires_at_ms=min(event.expires_at_ms, cap))
        )


class WebhookLatencySmallint(MemoryDriver):
    """Keeps an attempt's latency in a 16-bit column (clamped)."""

    async def _webhook_attempt_put(self, put: WebhookAttemptPut) -> WebhookAttemptAnswer:
        return await super()._webhook_attempt_put(
            replace(put, latency_ms=min(put.latency_ms, 32_767))
        )


class TaskFireDedupeIgnoresTenant(MemoryDriver):
    """A task's fire dedupes its job on (name, key) alone: another tenant's live row swallows
    it (a fire path that builds the namespace itself)."""

    async def _task_fire(self, fire: TaskFire) -> TaskFireAnswer:
        job = fire.job
        with self._lock:
            holder = next(
                (
                    r.rec.id
                    for r in self._rows.values()
                    if r.rec.state in LIVE_STATES
                    and (r.rec.name, r.rec.idempotency_key) == (job.name, job.idempotency_key)
                    and r.rec.tenant_id != job.tenant_id
                ),
                None,
            )
        if holder is None or job.id in self._rows:
            return await super()._task_fire(fire)
        # Fire the holder's own record: the mark moves and names it, no row is written.
        held = self._rows[holder].rec
        return await super()._task_fire(
            replace(fire, job=replace(job, id=holder, tenant_id=held.tenant_id))
        )


class ListCursorAtLastKept(MemoryDriver):
    """Hands out the position of the last row a page kept, not the last it examined: the next
    page scans again the rows this one passed over."""

    async def _job_list(
        self, f: JobFilter, after: ListKey | None, limit: int, scan: int
    ) -> JobSlice:
        page = await super()._job_list(f, after, limit, scan)
        if page.jobs and page.last_examined is not None:
            last = page.jobs[-1]
            return replace(page, last_examined=ListKey(last.created_at_ms, last.id))
        return page


class EventPurgeOneShort(MemoryDriver):
    """Purges one event fewer than its limit (a `LIMIT n - 1` from a 1-based loop)."""

    async def _event_purge(self, now_ms: int, limit: int) -> int:
        return await super()._event_purge(now_ms, max(1, limit - 1))


class PurgeAcrossStatesByCasefold(MemoryDriver):
    """Breaks a tie between final states by id under a case-folding collation (each state's own
    rows still by code point)."""

    async def _job_purge(self, params: Any) -> int:
        with _picked_by(lambda k: (k[0], str(k[1]).casefold(), k[1])):
            return await super()._job_purge(params)


class ConsumerFenceIgnoresWorker(MemoryDriver):
    """Fences a cursor put on the row's claims count alone, whoever presents it."""

    async def _consumer_cursor_put(self, put: ConsumerPut) -> bool:
        row = self._rows.get(put.fence.job_id)
        by = None if row is None else row.rec.claimed_by
        if by is not None:
            put = replace(put, fence=replace(put.fence, worker_id=by))
        return await super()._consumer_cursor_put(put)


#: Each broken driver and the scenarios that must catch it.
BROKEN: list[tuple[type[MemoryDriver], list[str]]] = [
    (KeyPadSpace, ["twins_jobs_apart"]),
    (KeyAccentInsensitive, ["twins_jobs_apart"]),
    (ClaimQueueCaseInsensitive, ["twins_jobs_apart"]),
    (PauseCaseInsensitive, ["twins_jobs_apart"]),
    (FenceWorkerCaseInsensitive, ["twins_jobs_apart"]),
    (WorkerIdCaseInsensitive, ["twins_workers_apart"]),
    (ListNameCaseInsensitive, ["twins_listed_apart"]),
    (ListTenantCaseInsensitive, ["twins_listed_apart"]),
    (CounterReadByPrefix, ["twins_counted_apart"]),
    (StepNameCaseInsensitive, ["twins_steps_and_events_apart"]),
    (StepListByPrefix, ["twins_steps_and_events_apart"]),
    (EventNameCaseInsensitive, ["twins_steps_and_events_apart"]),
    (EventNameByPrefix, ["twins_steps_and_events_apart"]),
    (TaskNameCaseInsensitive, ["twins_tasks_apart"]),
    (TaskMarksByPrefix, ["twins_tasks_apart"]),
    (SweepListNameCaseInsensitive, ["twins_sweeps_apart"]),
    (SweepListNameByPrefix, ["twins_sweeps_apart"]),
    (SweepBlockCaseInsensitive, ["twins_sweeps_apart"]),
    (PostingKeyCaseInsensitive, ["twins_postings_apart"]),
    (AccountCaseInsensitive, ["twins_postings_apart"]),
    (BalancesIgnoreAccounts, ["twins_postings_apart"]),
    (ConsumerNameCaseInsensitive, ["twins_consumers_apart"]),
    (EndpointCaseInsensitive, ["twins_webhooks_apart"]),
    (StepListLike, ["twins_steps_and_events_apart"]),
    (SweepListLike, ["twins_sweeps_apart"]),
    (ConsumerListLike, ["twins_consumers_apart"]),
    (ConsumerTenantCaseInsensitive, ["twins_consumers_apart"]),
    (EndpointTenantCaseInsensitive, ["twins_webhooks_apart"]),
    (PostingTenantCaseInsensitive, ["twins_postings_apart"]),
    (EventTenantCaseInsensitive, ["twins_steps_and_events_apart"]),
    (TaskMarksCaseInsensitive, ["twins_tasks_apart"]),
    (CounterReadQueuesCaseInsensitive, ["twins_counted_apart"]),
    (WorkerForgetCaseInsensitive, ["twins_workers_apart"]),
    (LeaseTakeKeyCaseInsensitive, ["twins_leases_apart"]),
    (LeaseRenewKeyAccentInsensitive, ["twins_leases_apart"]),
    (LeaseReleaseKeyCaseInsensitive, ["twins_leases_apart"]),
    (LeaseAbandonKeyPadSpace, ["twins_leases_apart"]),
    (LeaseHoldersByPrefix, ["twins_leases_apart"]),
    (LeaseHoldersLike, ["twins_leases_apart"]),
    (LeaseHolderCaseInsensitive, ["twins_leases_apart"]),
    (LeaseHolderPadSpace, ["twins_leases_apart"]),
    (ClaimTiesByUtf16, ["claim_order"]),
    (PurgeTiesByCasefold, ["purge_retention"]),
    (PurgeAcrossStatesByCasefold, ["purge_ties_across_states_by_code_point"]),
    (FreshRunIdsTakenByLanded, ["requeue_of_an_unwound_saga"]),
    (StatsOldestSkipsNamePaused, ["queue_stats"]),
    (DemandSkipsNamePaused, ["demand_counts_name_paused_rows"]),
    (ConsumerListCutBeforeOrder, ["consumers_tenants_and_names_apart"]),
    (SweepListByUpdate, ["sweeps_listed_by_start"]),
    (ListOneStateOnly, ["list_states_and_code_point_ties"]),
    (ListTiesByCasefold, ["list_states_and_code_point_ties"]),
    (ProgressBatchStopsAtMiss, ["batch_items_settle_each_alone"]),
    (NackBatchStopsAtMiss, ["batch_items_settle_each_alone"]),
    (HeartbeatDuplicateFirstWins, ["batch_items_settle_each_alone"]),
    (RetryClearsProgress, ["batch_items_settle_each_alone"]),
    (ProgressOnAnyLiveRow, ["batch_items_settle_each_alone"]),
    (FreshRunResetsPriority, ["fresh_requeue_keeps_the_row"]),
    (FreshRunDropsTraceparent, ["fresh_requeue_keeps_the_row"]),
    (FreshRunDropsLinks, ["fresh_requeue_keeps_the_row"]),
    (FreshRunClearsHistory, ["fresh_requeue_keeps_the_row"]),
    (FreshRunClearsOutput, ["fresh_requeue_keeps_the_row"]),
    (StepBatchLastWins, ["steps_first_of_a_batch_kept"]),
    (EventTtlInt32, ["events_live_past_int32_ms"]),
    (EventPurgeOneShort, ["events_live_past_int32_ms"]),
    (WebhookLatencySmallint, ["webhook_latency_of_a_day"]),
    (TaskFireDedupeIgnoresTenant, ["task_fire_dedupes_in_its_tenant"]),
    (ListCursorAtLastKept, ["list_resumes_after_the_last_row_examined"]),
    (ConsumerFenceIgnoresWorker, ["consumer_put_fenced_on_the_worker"]),
]


@pytest.mark.parametrize(
    ("broken", "scenario"),
    [(b, s) for b, names in BROKEN for s in names],
    ids=lambda v: v if isinstance(v, str) else v.__name__,
)
def test_scenario_catches(broken: type[MemoryDriver], scenario: str) -> None:
    with pytest.raises(AssertionError):
        run_scenario(broken, SCENARIOS[scenario])


def test_every_broken_driver_is_listed_once() -> None:
    assert_each_listed_once(
        globals(),
        __name__,
        [b for b, _ in BROKEN],
        {
            _EventNameMatch,
            _FreshRunRewritesTheRow,
            _LeaseRefKeyMatch,
            _LeaseHoldersMatch,
            _LeaseHolderMatch,
        },
    )
