"""What a chaos run found: every figure computed from the producer's answers, the rows read back,
the ledger the bodies wrote, and the life of every worker process. Pure functions of plain
records, so `bench/chaos/selfcheck.py` can prove each figure can be non-zero."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

LIVE: Final = frozenset({"ready", "running", "parked"})
#: A drain may take this long past `--drain-timeout` before it counts as late.
DRAIN_MARGIN_S: Final = 2.0
#: Store-up time a worker has to land a settle after its body returned; killed sooner, the
#: settle's loss is the kill's (allowed), not the worker's.
SETTLE_GRACE_MS: Final = 1_000.0
#: A worker renews its leases every third of the lease, so a lease has at least two thirds of
#: it left when an outage starts; an outage at least that long may take it from any worker.
LONG_OUTAGE_SHARE: Final = 2 / 3


@dataclass(frozen=True)
class Answer:
    """One intent (one input the producer meant to enqueue once) and what it was answered."""

    i: str
    k: str
    job: str
    how: str
    id: str | None
    deduped: bool | None
    tries: int
    errors: tuple[str, ...]
    refused: str | None
    t: float
    #: The producer's call that answered it (one `enqueue_many` answers many intents).
    call: int = 0


@dataclass(frozen=True)
class Row:
    """A job row as the driver read it back at the end."""

    id: str
    name: str
    state: str
    attempt: int
    last_error: str | None
    intent: str | None
    key: str
    input_json: str = "null"
    result_json: str | None = None
    created_t: float = 0.0
    finished_t: float | None = None
    claims: int = 0
    #: flows: the row's parent and batch, as enqueued.
    parent_id: str | None = None
    batch_id: str | None = None
    #: the row's attempt history as read (`JobRecord.attempts`), each entry's claim number,
    #: attempt, outcome and error code: `history_faults` checks it.
    attempts: tuple[tuple[int, int, str, str | None], ...] = ()


@dataclass
class Run:
    """One body run from the ledger: its start line and, when it wrote one, its end line."""

    r: str
    job: str
    name: str
    i: str
    k: str
    attempt: int
    pid: int
    start_t: float
    end_how: str | None = None
    end_t: float | None = None


@dataclass
class Life:
    """One worker process; times are wall-clock ms."""

    n: int
    pid: int
    started_t: float
    killed_t: float | None = None
    term_t: float | None = None
    exit_t: float | None = None
    rc: int | None = None
    store_down_at_term: bool = False
    #: Still alive past the drain deadline + margin + grace: the run killed it.
    hung: bool = False
    #: SIGTERMed by the run's own end, not by the timeline.
    final: bool = False
    last_lines: str = ""


@dataclass(frozen=True)
class Config:
    backend: str
    durable: bool
    lease_s: float
    drain_timeout_s: float
    outage_s: float
    #: When the store was down, as (from, to) wall-clock ms.
    outages: tuple[tuple[float, float], ...] = ()
    #: The workload (`bench/chaos/families`): `jobs` is the plain one.
    family: str = "jobs"
    #: When the timeline began, when it ended, and when the run began stopping its processes
    #: (wall-clock ms).
    started_t: float = 0.0
    ended_t: float = 0.0
    timeline_t: float = 0.0

    def up_ms(self, start: float, end: float) -> float:
        """How long the store was up between `start` and `end`."""
        down = sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.outages)
        return max(0.0, end - start - down)


@dataclass(frozen=True)
class Ends:
    """How the run's processes ended, by pid (wall-clock ms)."""

    killed: dict[int, float]
    termed: dict[int, float]
    #: Exited with no signal from the run.
    on_own: set[int]
    exited: dict[int, float]

    @staticmethod
    def of(lives: Iterable[Life]) -> Ends:
        lives = list(lives)
        return Ends(
            {lf.pid: lf.killed_t for lf in lives if lf.killed_t is not None},
            {lf.pid: lf.term_t for lf in lives if lf.term_t is not None},
            {
                lf.pid
                for lf in lives
                if lf.exit_t is not None and lf.killed_t is None and not lf.term_t
            },
            {lf.pid: lf.exit_t for lf in lives if lf.exit_t is not None},
        )

    def stopped(self, run: Run, default: float) -> float:
        """When the run's body stopped: its end line, else its process's kill or exit."""
        if run.end_t is not None:
            return run.end_t
        return self.killed.get(run.pid, self.exited.get(run.pid, default))


@dataclass
class Figure:
    name: str
    value: int
    hard: bool
    note: str = ""
    examples: list[str] = field(default_factory=list)


@dataclass
class Findings:
    figures: list[Figure]
    breakdowns: dict[str, dict[str, int]]

    @property
    def failed(self) -> list[Figure]:
        return [f for f in self.figures if f.hard and f.value]

    def figure(self, name: str) -> Figure:
        return next(f for f in self.figures if f.name == name)


def answer_of(d: dict[str, Any]) -> Answer:
    """An `Answer` from one line of the plain producer's answers file."""
    return Answer(
        d["i"],
        d["k"],
        d["job"],
        d["how"],
        d["id"],
        d["deduped"],
        d["tries"],
        tuple(d["errors"]),
        d["refused"],
        d["t"],
        d.get("call", 0),
    )


def runs_of(lines: Iterable[dict[str, Any]]) -> list[Run]:
    """The body runs of ledger lines: each `start` line with its `end` line, if any."""
    runs: dict[str, Run] = {}
    for d in lines:
        if d["ev"] == "start":
            runs[d["r"]] = Run(
                d["r"], d["job"], d["name"], d["i"], d["k"], d["attempt"], d["pid"], d["t"]
            )
        elif d["ev"] == "end" and d["r"] in runs:
            runs[d["r"]].end_how = d["how"]
            runs[d["r"]].end_t = d["t"]
    return list(runs.values())


def row_from_record(rec: Any) -> Row:
    """A `Row` from a `jobs_core.records.JobRecord`."""
    try:
        inp = json.loads(rec.input_json)
        intent = inp.get("i") if isinstance(inp, dict) else None
    except ValueError:
        intent = None
    return Row(
        rec.id,
        rec.name,
        rec.state.value,
        rec.attempt,
        rec.last_error,
        intent,
        rec.idempotency_key,
        rec.input_json,
        rec.result_json,
        float(rec.created_at_ms),
        None if rec.finished_at_ms is None else float(rec.finished_at_ms),
        rec.claims,
        rec.parent_id,
        rec.batch_id,
        tuple((a.claims, a.attempt, a.outcome.value, a.error_code) for a in rec.attempts),
    )


def _code(last_error: str | None) -> str:
    if not last_error:
        return "-"
    try:
        doc = json.loads(last_error)
    except ValueError:
        return last_error[:40]
    return str(doc.get("code") or doc.get("type") or "?")


def analyse(
    cfg: Config,
    answers: list[Answer],
    rows: dict[str, Row],
    runs: list[Run],
    lives: list[Life],
) -> Findings:
    """Every figure of the report; `hard` ones fail the run when not 0."""
    breakdowns: dict[str, dict[str, int]] = {}
    ends = Ends.of(lives)
    by_job = runs_by_job(runs)

    answered = [a for a in answers if a.id is not None]
    answered_ids = {a.id for a in answered if a.id is not None}
    missing = answered_ids - rows.keys()

    # Keys completed twice: one intent (one input enqueued once, its retries included) whose
    # body completed under two job ids. Only an enqueue that inserted again can make a second
    # id, so a row lost since (no persistence) does not excuse it: the ledger saw both runs.
    completed_ids: dict[str, set[str]] = defaultdict(set)
    for row in rows.values():
        if row.state == "completed" and row.intent:
            completed_ids[row.intent].add(row.id)
    for run in runs:
        # A body that returned completed its side effects, whatever its row says now.
        if run.end_how == "ok":
            completed_ids[run.i].add(run.job)
    twice = sorted(i for i, ids in completed_ids.items() if len(ids) > 1)

    rows_by_intent: dict[str, set[str]] = defaultdict(set)
    for row in rows.values():
        if row.intent:
            rows_by_intent[row.intent].add(row.id)
    inserted_twice = sorted(i for i, ids in rows_by_intent.items() if len(ids) > 1)
    answer_of = {a.i: a for a in answers}
    calls_failed = sum(1 for a in {a.call: a for a in answers}.values() if a.errors)
    orphans = sorted(rows.keys() - answered_ids)
    wrote_but_failed = sorted(
        r
        for r in orphans
        if rows[r].intent in answer_of and answer_of[rows[r].intent or ""].id is None
    )

    # Successes recorded as failures: the body returned, the row ended dead or failed.
    bad_ends: list[str] = []
    kill_ends: list[str] = []
    long_ends: list[str] = []
    dead_reasons: Counter[str] = Counter()
    for row in rows.values():
        if row.state not in ("dead", "failed"):
            continue
        oks = [r for r in by_job.get(row.id, []) if r.end_how == "ok"]
        if not oks:
            last = by_job.get(row.id, [])
            dead_reasons[
                f"{_code(row.last_error)}: {fate(cfg, last[-1], ends)}"
                if last
                else f"{_code(row.last_error)}: body never ran"
            ] += 1
            continue
        if all(killed_before_settle(cfg, r, ends) for r in oks):
            kill_ends.append(row.id)
        elif all(killed_before_settle(cfg, r, ends) or in_long_outage(cfg, r) for r in oks):
            long_ends.append(row.id)
        else:
            bad_ends.append(f"{row.id} {row.name} {row.state} {_code(row.last_error)}")
    breakdowns["dead or failed rows whose body never returned"] = dict(dead_reasons)

    # Bodies run more than once beyond their planned retries, by what became of the run before.
    extra: Counter[str] = Counter()
    rerun_jobs: set[str] = set()
    for job_id, rs in by_job.items():
        for prev in rs[:-1]:
            if prev.end_how == "fail":
                continue
            extra[fate(cfg, prev, ends)] += 1
            rerun_jobs.add(job_id)
    breakdowns["runs beyond the planned retries, by the fate of the run before"] = dict(extra)

    met = Counter(e for a in {a.call: a for a in answers}.values() for e in a.errors)
    figures = [
        Figure("intents enqueued", len(answers), False, "inputs the producer enqueued once each"),
        Figure(
            "answered ids",
            len(answered_ids),
            False,
            f"{sum(1 for a in answered if a.deduped)} answers deduped",
        ),
        Figure("answered ids found", len(answered_ids) - len(missing), False),
        Figure(
            "enqueues given up",
            len(answers) - len(answered),
            False,
            "intents whose every try failed (the producer retries for 30 s)",
            [f"{a.i} {a.errors[-3:]}" for a in answers if a.id is None][:3],
        ),
        Figure(
            "enqueue calls that met an error",
            calls_failed,
            False,
            f"of {len({a.call for a in answers})} calls; errors met, retries included: "
            + (", ".join(f"{e} x{n}" for e, n in met.items()) or "none"),
        ),
        *lost_figures(cfg, answered_ids, rows),
        Figure(
            "keys completed twice",
            len(twice),
            True,
            "one intent's body completed under two job ids (an enqueue retried with new ids)",
            [f"{i} {sorted(completed_ids[i])}" for i in twice[:3]],
        ),
        Figure(
            "intents inserted twice",
            len(inserted_twice),
            False,
            "two rows for one intent in the store (completed or not)",
            inserted_twice[:3],
        ),
        Figure(
            "enqueues that answered an error but had written",
            len(wrote_but_failed),
            False,
            "rows of an intent the producer gave up on",
            wrote_but_failed[:3],
        ),
        Figure(
            "rows no answer names",
            len(orphans),
            False,
            "rows whose enqueue's answer was lost (a retry answered another id, or none)",
            orphans[:3],
        ),
        Figure(
            "successes recorded as failures",
            len(bad_ends),
            True,
            "the body returned, the row ended dead/failed, and no outage as long as"
            f" {LONG_OUTAGE_SHARE:.2g} of the lease ({cfg.lease_s * LONG_OUTAGE_SHARE:.1f} s)"
            " can explain it",
            bad_ends[:3],
        ),
        Figure(
            "successes recorded as failures in a long outage",
            len(long_ends),
            False,
            f"as above, the body returned in (or a lease before) an outage of"
            f" >= {cfg.lease_s * LONG_OUTAGE_SHARE:.1f} s: the lease could lapse (allowed)",
            long_ends[:3],
        ),
        Figure(
            "successes recorded as failures after a kill -9",
            len(kill_ends),
            False,
            "the run killed the worker between the body's return and its settle (allowed)",
            kill_ends[:3],
        ),
        Figure(
            "bodies run more than once",
            len(rerun_jobs),
            False,
            f"{sum(extra.values())} runs beyond the planned retries (at least once); why: below",
        ),
    ]
    return Findings(figures, breakdowns)


def lost_figures(cfg: Config, ids: Iterable[str], rows: dict[str, Row]) -> list[Figure]:
    """Jobs the store answered (or published) that are gone, or not finished after the wait.
    They fail the run on a durable store only: a restart empties one without persistence."""
    ids = set(ids)
    missing = sorted(ids - rows.keys())
    unfinished = sorted(i for i in ids & rows.keys() if rows[i].state in LIVE)
    note = (
        "answered ids missing from the store"
        if cfg.durable
        else "expected on a store without persistence: a restart empties it (not a failure)"
    )
    return [
        Figure("jobs lost: answered, missing", len(missing), cfg.durable, note, missing[:3]),
        Figure(
            "jobs lost: answered, never finished",
            len(unfinished),
            cfg.durable,
            "still ready/running/parked after the wait",
            [f"{i} {rows[i].state}" for i in unfinished[:3]],
        ),
    ]


def life_figures(cfg: Config, lives: list[Life]) -> list[Figure]:
    """The drains and exits of the run's processes (workers, schedulers or relays)."""
    drains = [lf for lf in lives if lf.term_t is not None and lf.killed_t is None]
    drain_s = {
        lf.n: ((lf.exit_t or 0) - (lf.term_t or 0)) / 1000
        for lf in drains
        if lf.exit_t is not None and lf.term_t is not None
    }
    late = [
        lf
        for lf in drains
        if lf.hung or drain_s.get(lf.n, 0) > cfg.drain_timeout_s + DRAIN_MARGIN_S
    ]
    hung = [lf for lf in drains if lf.hung]
    exited = [lf for lf in lives if lf.exit_t is not None and lf.killed_t is None and not lf.term_t]
    bad_rc = [lf for lf in drains if not lf.hung and lf.rc not in (0, None)]
    return [
        Figure(
            "drains",
            len(drains),
            False,
            "SIGTERMs sent; exit seconds: "
            + ", ".join(
                f"{drain_s[lf.n]:.1f}{' (store down)' if lf.store_down_at_term else ''}"
                for lf in drains
                if lf.n in drain_s
            ),
        ),
        Figure(
            "drains past their deadline",
            len(late),
            True,
            f"exit later than --drain-timeout {cfg.drain_timeout_s:g} s + {DRAIN_MARGIN_S:g} s",
            [f"process {lf.n} pid {lf.pid}: {drain_s.get(lf.n, -1):.1f} s" for lf in late][:3],
        ),
        Figure(
            "drains that exited non-zero",
            len(bad_rc),
            True,
            "",
            [f"process {lf.n} rc={lf.rc}: {lf.last_lines}" for lf in bad_rc][:3],
        ),
        Figure(
            "hung drains",
            len(hung),
            True,
            "alive past the deadline + margin + grace after SIGTERM (then killed)",
            [f"process {lf.n} pid {lf.pid}: {lf.last_lines}" for lf in hung][:3],
        ),
        Figure(
            "processes that exited on their own",
            len(exited),
            True,
            "exited with no signal from the run (replaced after 1 s)",
            [f"process {lf.n} rc={lf.rc}: {lf.last_lines}" for lf in exited][:3],
        ),
    ]


def in_long_outage(cfg: Config, run: Run) -> bool:
    """The body returned during (or a lease before) an outage that could outlast its lease."""
    end = run.end_t or 0
    return any(
        b - a >= cfg.lease_s * 1000 * LONG_OUTAGE_SHARE and a - cfg.lease_s * 1000 <= end <= b
        for a, b in cfg.outages
    )


def killed_before_settle(cfg: Config, run: Run, ends: Ends) -> bool:
    """The run killed this body's worker after it returned, before its settle could land."""
    kill = ends.killed.get(run.pid)
    if kill is None or run.end_t is None or kill < run.end_t:
        return False
    return cfg.up_ms(run.end_t, kill) < SETTLE_GRACE_MS


def fate(cfg: Config, run: Run, ends: Ends) -> str:
    """What became of one run, in words, for the breakdowns."""
    if run.end_how is None:
        if run.pid in ends.killed:
            return "kill -9 of its worker"
        if run.pid in ends.on_own:
            return "its worker exited on its own"
        return "no end line, its worker not killed (abandoned)"
    if run.end_how == "cancelled":
        term = ends.termed.get(run.pid)
        if term is not None and term <= (run.end_t or 0):
            return "cancelled in a drain (given back)"
        return "cancelled (lease lost)"
    if run.end_how == "ok":
        if killed_before_settle(cfg, run, ends):
            return "returned, then its worker was killed -9 before the settle could land"
        if in_long_outage(cfg, run):
            return "returned in (or a lease before) a long outage; its settle did not land"
        return "returned, its settle did not land"
    return f"ended {run.end_how}"


def runs_by_job(runs: Iterable[Run]) -> dict[str, list[Run]]:
    """Each job's body runs, in the order they started."""
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_job[run.job].append(run)
    for rs in by_job.values():
        rs.sort(key=lambda r: r.start_t)
    return dict(by_job)


def render(cfg: Config, found: Findings, extra: Iterable[str] = ()) -> str:
    """The report as a Markdown table, breakdowns and the verdict."""
    lines = [
        f"### {cfg.family} on {cfg.backend}",
        "",
        "| figure | value | fails the run | note |",
        "|---|---:|:---:|---|",
    ]
    for f in found.figures:
        mark = ("**FAIL**" if f.value else "ok") if f.hard else ""
        lines.append(f"| {f.name} | {f.value:,} | {mark} | {f.note} |")
    for title, counts in found.breakdowns.items():
        if counts:
            lines += ["", f"{title}:"]
            lines += [f"- {why}: {n}" for why, n in sorted(counts.items(), key=lambda x: -x[1])]
    examples = [(f.name, e) for f in found.figures if f.value for e in f.examples]
    if examples:
        lines += ["", "examples:"]
        lines += [f"- {name}: {e}" for name, e in examples]
    lines += ["", *extra]
    verdict = (
        "FAILED: " + ", ".join(f"{f.name} = {f.value}" for f in found.failed)
        if found.failed
        else "passed: every hard figure is 0"
    )
    lines += ["", f"**{cfg.family} on {cfg.backend}: {verdict}**", ""]
    return "\n".join(lines)
