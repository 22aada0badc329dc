"""The ONE projection of the sweep ledger and the backfill registry: what the CLI prints, what a
dashboard page and the metrics read.

Per sweep name (every declared backfill, and every name the ledger holds): its entries, newest
first, each with its status, progress (rows of expected), rate (rows/s over its run), last
cursor, whether it is at the current declaration, and — for a `running` entry — its job's
state, so an entry whose job already ended (killed on its final attempt, cancelled, removed)
shows as such; and pending per environment (`pending`). Reads the newest `MAX_SWEEP_LIST`
entries per name; `complete` says whether that was all of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from jobs_core.driver import MAX_BULK_IDS, MAX_SWEEP_LIST, JobDriver
from jobs_core.factories.backfill.pending import Pending, pending
from jobs_core.factories.sweep import current_environment
from jobs_core.jsonform import JsonValue, loads
from jobs_core.records import SweepRecord
from jobs_core.states import JobState

if TYPE_CHECKING:
    from jobs_core.factories.backfill.declare import Backfill

#: What `job_state` says of a running entry whose job row no longer exists (purged, removed).
MISSING = "missing"


@dataclass(frozen=True, slots=True)
class EntryView:
    """One ledger entry, read."""

    record: SweepRecord
    #: Whether the entry is at the declared checksum (None: no declaration known for it).
    current: bool | None
    #: For a `running` entry: its job's state (`missing` when its row is gone); else None.
    job_state: str | None

    @property
    def cursor(self) -> JsonValue:
        text = self.record.cursor_json
        return None if text is None else loads(text)

    @property
    def progress(self) -> float | None:
        """Rows of expected, 0 to 1 (None without an expectation)."""
        e = self.record.expected
        if e is None:
            return None
        return 1.0 if e == 0 else min(self.record.rows / e, 1.0)

    @property
    def rate(self) -> float | None:
        """Rows per second from its start to its last update (None before a second of it)."""
        r = self.record
        end = r.finished_at_ms if r.finished_at_ms is not None else r.updated_at_ms
        elapsed = end - r.started_at_ms
        return None if elapsed < 1_000 else r.rows * 1000 / elapsed

    @property
    def orphaned(self) -> bool:
        """A `running` entry whose job is no longer live: nothing will move it again."""
        live = {JobState.READY.value, JobState.RUNNING.value, JobState.PARKED.value}
        return self.record.status == "running" and self.job_state not in (None, *live)

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "run_id": r.run_id,
            "job_id": r.job_id,
            "name": r.name,
            "kind": r.kind,
            "scope": r.scope,
            "environment": r.environment,
            "checksum": r.checksum,
            "current": self.current,
            "status": r.status,
            "batches": r.batches,
            "rows": r.rows,
            "errors": r.errors,
            "expected": r.expected,
            "progress": self.progress,
            "rate": self.rate,
            "cursor": self.cursor,
            "error": r.error,
            "job_state": self.job_state,
            "orphaned": self.orphaned,
            "started_at_ms": r.started_at_ms,
            "updated_at_ms": r.updated_at_ms,
            "finished_at_ms": r.finished_at_ms,
        }


@dataclass(frozen=True, slots=True)
class SweepView:
    """One sweep name: its declaration (None: the ledger knows it, this code declares no
    backfill by that name), its entries newest first, and where it is pending."""

    name: str
    declared: Backfill | None
    entries: list[EntryView]
    pending: list[Pending] = field(default_factory=list)

    @property
    def kind(self) -> str:
        if self.declared is not None:
            return "backfill"
        return self.entries[0].record.kind if self.entries else "backfill"

    @property
    def latest(self) -> EntryView | None:
        return self.entries[0] if self.entries else None

    def newest_per_scope(self) -> list[EntryView]:
        """Its newest entry per scope and environment, newest first: where each stands now."""
        seen: set[tuple[str, str]] = set()
        out: list[EntryView] = []
        for e in self.entries:
            where = (e.record.scope, e.record.environment)
            if where not in seen:
                seen.add(where)
                out.append(e)
        return out

    def to_json(self) -> dict[str, Any]:
        spec = self.declared.spec if self.declared is not None else None
        return {
            "name": self.name,
            "kind": self.kind,
            "declared": spec is not None,
            "checksum": spec.checksum if spec else None,
            "tenant": None if spec is None else ("none" if spec.cross_tenant else "per-tenant"),
            "environments": None
            if spec is None or spec.environments is None
            else sorted(spec.environments),
            "requires": [] if spec is None else [r.name for r in spec.requires],
            "batch": spec.batch if spec else None,
            "checkpoint_ms": spec.window_ms if spec else None,
            "entries": [e.to_json() for e in self.entries],
            "pending": [p.to_json() for p in self.pending],
        }


@dataclass(frozen=True, slots=True)
class BackfillsView:
    """The ledger and the registry, projected."""

    #: This process's environment (`$UJOBS_ENVIRONMENT`).
    environment: str
    sweeps: list[SweepView]
    #: Per environment looked at, the sweeps pending there.
    pending: dict[str, list[Pending]]
    #: False when some name holds more entries than were read (`MAX_SWEEP_LIST`).
    complete: bool

    def sweep(self, name: str) -> SweepView | None:
        return next((s for s in self.sweeps if s.name == name), None)

    def rows(self) -> dict[tuple[str, str], int]:
        """Rows processed per sweep name and kind, over the entries read (a metric's value);
        a declared sweep that never ran counts 0."""
        out: dict[tuple[str, str], int] = {}
        for s in self.sweeps:
            if s.declared is not None:
                out.setdefault((s.name, "backfill"), 0)
            for e in s.entries:
                key = (s.name, e.record.kind)
                out[key] = out.get(key, 0) + e.record.rows
        return out

    def pending_count(self, environment: str | None = None) -> int:
        """Sweeps (by scope) pending in `environment` (this one by default)."""
        return len(self.pending.get(environment or self.environment, []))

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "complete": self.complete,
            "sweeps": [s.to_json() for s in self.sweeps],
            "pending": {env: [p.to_json() for p in ps] for env, ps in self.pending.items()},
        }


async def inspect_backfills(
    driver: JobDriver,
    declared: Iterable[Backfill] = (),
    *,
    name: str | None = None,
    environments: Iterable[str] | None = None,
    tenants: Sequence[str] | None = None,
) -> BackfillsView:
    """Read the ledger (the `sweeps` family) and project it beside `declared` (the registry).

    `name`: that sweep alone. `environments`: where pending is computed (default: this one,
    each one a declaration names, and each one the ledger holds). `tenants`: the tenants a
    per-tenant sweep must have completed for (see `pending`)."""
    driver.require("sweeps", what="inspect_backfills")
    by_name = {h.name: h for h in declared}
    names = [name] if name is not None else sorted(by_name)
    complete = True
    entries: dict[str, SweepRecord] = {}
    for n in names:
        listed = await driver.sweep_list(n, MAX_SWEEP_LIST)
        complete = complete and len(listed) < MAX_SWEEP_LIST
        entries.update((e.run_id, e) for e in listed)
    if name is None:
        # The names the ledger holds that no declaration here names (removed from the code,
        # or another app's), from the newest entries.
        listed = await driver.sweep_list(None, MAX_SWEEP_LIST)
        complete = complete and len(listed) < MAX_SWEEP_LIST
        entries.update((e.run_id, e) for e in listed if e.name not in by_name)
    records = sorted(entries.values(), key=lambda e: (e.started_at_ms, e.run_id), reverse=True)
    states = await _job_states(driver, [e.job_id for e in records if e.status == "running"])
    here = current_environment()
    if environments is not None:
        looked = set(environments)
    else:
        looked = {here, *(e.environment for e in records)}
        for h in by_name.values():
            looked |= h.spec.environments or set()
    scoped = [h for h in by_name.values() if name is None or h.name == name]
    pend = pending(scoped, records, looked, tenants)
    sweeps: list[SweepView] = []
    for n in sorted({*(h.name for h in scoped), *(e.name for e in records)}):
        known = by_name.get(n)
        views = [
            EntryView(
                e,
                None if known is None else _current(e, known),
                states.get(e.job_id, MISSING) if e.status == "running" else None,
            )
            for e in records
            if e.name == n
        ]
        mine = [p for ps in pend.values() for p in ps if p.name == n]
        sweeps.append(SweepView(n, known, views, mine))
    return BackfillsView(here, sweeps, pend, complete)


async def _job_states(driver: JobDriver, job_ids: Sequence[str]) -> dict[str, str]:
    ids = sorted(set(job_ids))
    out: dict[str, str] = {}
    for at in range(0, len(ids), MAX_BULK_IDS):
        rows = await driver.job_get_many(ids[at : at + MAX_BULK_IDS])
        out.update((i, r.state.value) for i, r in rows.items())
    return out


def _current(entry: SweepRecord, handle: Backfill) -> bool:
    return entry.kind == "backfill" and entry.checksum == handle.spec.checksum
