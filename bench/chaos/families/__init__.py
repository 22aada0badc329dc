"""The chaos run's workloads, one per family of the library: plain jobs, durable steps, sleeps and
event waits, fleet-wide limits, the scheduler, the outbox's relay and
workflows, and the factories over `job()` (docs/chaos.md).

Each family names the processes the run starts, kills and drains (workers, schedulers or
relays), the feed that gives them work, and its figures: pure functions of the evidence (the
feed's answers, the rows read back, the ledger its code wrote outside the store, the processes'
lives), each proven able to move by a made-up defect (`--self-check`).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.chaos.figures import Config, Findings, Life, Row, Run, runs_of
from bench.chaos.servers import Store


@dataclass(frozen=True)
class Urls:
    """Where the run's processes reach their stores."""

    #: The jobs' store, direct.
    jobs: str
    #: The jobs' store through the proxy that can lose its answers.
    proxied: str
    #: The app's Postgres holding the outbox (the relay family only).
    outbox: str | None = None
    #: The run's evidence directory (answers, ledger), for a family's `gather`.
    rundir: str | None = None


@dataclass
class Evidence:
    """Everything a family's figures are computed from."""

    cfg: Config
    #: The feed's lines (what it enqueued, sent or staged, and what it was answered).
    answers: list[dict[str, Any]]
    #: Every row read back through the driver at the end, by id.
    rows: dict[str, Row]
    #: Every ledger line, in no particular order.
    lines: list[dict[str, Any]]
    lives: list[Life]
    #: What the family read at the end besides the rows (task marks, the app's table).
    extra: dict[str, Any] = field(default_factory=dict)

    def runs(self) -> list[Run]:
        return runs_of(self.lines)

    def of(self, ev: str) -> list[dict[str, Any]]:
        """The ledger lines of one kind, in time order."""
        return sorted((d for d in self.lines if d["ev"] == ev), key=lambda d: float(d["t"]))


#: A process the timeline signals: `kill9` or `sigterm`, the processes running, the run's dir.
Pick = Callable[[str, list[Life], Path, random.Random], Life | None]


def pick_any(kind: str, active: list[Life], rundir: Path, rng: random.Random) -> Life | None:
    return rng.choice(active) if active else None


def workers(module: str) -> Callable[[Urls, argparse.Namespace], tuple[list[str], dict[str, str]]]:
    """The fleet of a family whose processes are `ujobs worker <module>` on the jobs' store."""

    def fleet(urls: Urls, args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
        return [
            "worker",
            module,
            "--driver",
            urls.jobs,
            "--lease",
            str(args.lease),
            "--drain-timeout",
            str(args.drain_timeout),
            "--concurrency",
            str(args.concurrency),
            "--quiet",
        ], {}

    return fleet


@dataclass(frozen=True)
class Family:
    name: str
    #: One line: what the workload does and what its figures check.
    title: str
    #: The fleet's command after `ujobs` (worker, scheduler or relay) on these URLs, and what
    #: its environment needs besides the run's.
    fleet: Callable[[Urls, argparse.Namespace], tuple[list[str], dict[str, str]]]
    #: `python -m` arguments of the feed process (it gets --url, --jobs, --seconds, --seed,
    #: --out), or () when the fleet feeds itself (the scheduler).
    feed: tuple[str, ...]
    #: Default jobs (or stages) fed, and timeline seconds.
    jobs: int
    seconds: float
    #: The family's own figures (the run adds the processes' drains and exits).
    analyse: Callable[[Evidence], Findings]
    #: The feed reaches the store through the answer-losing proxy (else the fleet does).
    feed_proxied: bool = True
    #: How many processes the fleet keeps (None: `--workers`).
    fleet_size: int | None = None
    backends: tuple[str, ...] = ("pg", "redis-aof")
    #: Stage into an outbox on a Postgres of its own (the relay).
    outbox: bool = False
    #: Which process a `kill9`/`sigterm` event signals.
    pick: Pick = pick_any
    #: True once nothing is left to do (checked after the feed ended, bounded by --drain-wait),
    #: on the stores by role and the wall-clock ms the timeline ended; None: no job may be live.
    drained: Callable[[Mapping[str, Store], float], bool] | None = None
    #: What else to read at the end (`Evidence.extra`), on the stores by role.
    gather: Callable[[Urls, Mapping[str, Store]], dict[str, Any]] | None = None
    #: A `kill9` lands between a publish and its mark: the run sets a trap (`TRAP_ENV`) the
    #: first relay to publish falls into, then kills it there.
    trap: bool = False
    #: A driver scheme declared to the fleet's processes: (scheme, `module:function`).
    driver_hook: tuple[str, str] | None = None
    #: A made-up clean run and one defect per figure, for `--self-check`.
    clean: Callable[[], Evidence] | None = None
    cases: dict[str, Callable[[Evidence], None]] = field(default_factory=dict)
    #: Figures that count what happened, not defects: non-zero on a clean run too.
    tallies: frozenset[str] = frozenset()
    #: `python -m` arguments of a process the run keeps up, never faulted, for the whole run
    #: (an endpoint the fleet calls): it gets `--port`, and the fleet and the feed its URL in
    #: `SIDECAR_ENV`.
    sidecar: tuple[str, ...] = ()


#: The URL of the family's sidecar (`Family.sidecar`), for the fleet and the feed.
SIDECAR_ENV = "CHAOS_SIDECAR"


#: The file a relay's hook falls into (renames to `<trap>.<pid>`, then hangs) when it exists.
TRAP_ENV = "CHAOS_TRAP"


def families() -> dict[str, Family]:
    """Every family, in the order `make chaos` runs them."""
    from bench.chaos.families import factories, flows, limits, plain, relay, sched, steps, waits

    return {
        f.name: f
        for f in (
            plain.FAMILY,
            steps.FAMILY,
            waits.FAMILY,
            limits.FAMILY,
            sched.FAMILY,
            relay.FAMILY,
            flows.FAMILY,
            factories.FAMILY,
        )
    }
