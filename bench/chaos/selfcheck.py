"""Proof that every figure of the chaos report can be non-zero and every hard one can fail the
run: each case is a made-up run with one defect, fed to the family's figures. The plain jobs'
cases are below; every other family brings its own (`Family.clean`, `Family.cases`).

    python -m bench.chaos.run --self-check [--family steps]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from bench.chaos.families import Family
from bench.chaos.figures import Answer, Config, Findings, Life, Row, Run, analyse, life_figures

PG = Config("pg", True, lease_s=5.0, drain_timeout_s=3.0, outage_s=3.0)
T = 1_000_000.0


@dataclass
class Case:
    answers: list[Answer]
    rows: dict[str, Row]
    runs: list[Run]
    lives: list[Life]
    cfg: Config = PG

    def findings(self) -> Findings:
        found = analyse(self.cfg, self.answers, self.rows, self.runs, self.lives)
        return Findings(found.figures + life_figures(self.cfg, self.lives), found.breakdowns)


def clean() -> Case:
    """Two intents, each answered, run once and completed; one worker drained in 1 s."""
    answers = [
        Answer(f"i{n}", f"k{n}", "chaos", "one", f"j{n}", False, 1, (), None, T, n) for n in (1, 2)
    ]
    rows = {f"j{n}": Row(f"j{n}", "chaos", "completed", 1, None, f"i{n}", f"k{n}") for n in (1, 2)}
    runs = [
        Run(f"r{n}", f"j{n}", "chaos", f"i{n}", f"k{n}", 1, 100, T + 10, "ok", T + 20)
        for n in (1, 2)
    ]
    lives = [Life(0, 100, T, term_t=T + 100, exit_t=T + 1_100, rc=0, final=True)]
    return Case(answers, rows, runs, lives)


def _dead(c: Case, job: str) -> None:
    c.rows[job] = replace(
        c.rows[job], state="dead", last_error='{"code":"X_JOB_LEASE_LOST","message":"x"}'
    )


def _second_row(c: Case, state: str = "completed", ok_run: bool = True) -> None:
    c.rows["j3"] = Row("j3", "chaos", state, 1, None, "i1", "k1")
    if ok_run:
        c.runs.append(Run("r3", "j3", "chaos", "i1", "k1", 1, 100, T + 50, "ok", T + 60))


def _killed_after_ok(c: Case) -> None:
    _dead(c, "j1")
    c.lives.append(Life(1, 200, T, killed_t=T + 30, exit_t=T + 31, rc=-9))
    c.runs[0].pid = 200


def _dead_in_long_outage(c: Case) -> None:
    _dead(c, "j1")
    c.cfg = replace(PG, outages=((T, T + 10_000),))


def _rerun(c: Case) -> None:
    c.runs.insert(0, Run("r0", "j1", "chaos", "i1", "k1", 1, 200, T + 1, None, None))
    c.lives.append(Life(1, 200, T, killed_t=T + 5, exit_t=T + 6, rc=-9))


def _given_up(c: Case) -> None:
    c.answers[1] = replace(c.answers[1], id=None, tries=3, errors=("X_DRIVER_UNAVAILABLE",) * 3)


def _late(c: Case) -> None:
    c.lives[0].exit_t = T + 100 + 6_000


def _bad_rc(c: Case) -> None:
    c.lives[0].rc = 2


def _hung(c: Case) -> None:
    c.lives[0].hung = True


def _exited(c: Case) -> None:
    c.lives.append(Life(1, 300, T, exit_t=T + 5, rc=2))


#: figure name -> the defect that must make it non-zero.
CASES: dict[str, Callable[[Case], None]] = {
    "jobs lost: answered, missing": lambda c: c.rows.__delitem__("j1"),
    "jobs lost: answered, never finished": lambda c: c.rows.update(
        j1=replace(c.rows["j1"], state="running")
    ),
    "keys completed twice": _second_row,
    "intents inserted twice": lambda c: _second_row(c, "ready", ok_run=False),
    "enqueues given up": _given_up,
    "enqueue calls that met an error": lambda c: c.answers.__setitem__(
        0, replace(c.answers[0], tries=2, errors=("X_DRIVER_UNAVAILABLE",))
    ),
    "enqueues that answered an error but had written": _given_up,
    "rows no answer names": lambda c: _second_row(c, "ready", ok_run=False),
    "successes recorded as failures": lambda c: _dead(c, "j1"),
    "successes recorded as failures after a kill -9": _killed_after_ok,
    "successes recorded as failures in a long outage": _dead_in_long_outage,
    "bodies run more than once": _rerun,
    "drains past their deadline": _late,
    "drains that exited non-zero": _bad_rc,
    "hung drains": _hung,
    "processes that exited on their own": _exited,
}

#: Figures that are counts of what happened, not defects: non-zero on a clean run too.
TALLIES = {"intents enqueued", "answered ids", "answered ids found", "drains"}


def check_plain() -> list[str]:
    """The plain jobs' figures, the processes' figures, and the exceptions they allow."""
    base = clean().findings()
    problems: list[str] = []
    if base.failed:
        problems.append(f"the clean run fails: {[f.name for f in base.failed]}")
    for f in base.figures:
        if f.name not in TALLIES and f.value:
            problems.append(f"the clean run has {f.name} = {f.value}")
    names = {f.name for f in base.figures}
    for f in base.figures:
        if f.name not in CASES and f.name not in TALLIES:
            problems.append(f"no case proves {f.name!r} can be non-zero")
    for name, defect in CASES.items():
        if name not in names:
            problems.append(f"case for an unknown figure {name!r}")
            continue
        case = clean()
        defect(case)
        found = case.findings()
        fig = found.figure(name)
        if fig.value == 0:
            problems.append(f"{name!r} stayed 0 with its defect")
        if fig.hard and fig not in found.failed:
            problems.append(f"{name!r} is hard but did not fail the run")
    # A second completed run stays a double when its row is gone since (no persistence).
    lost_twin = clean()
    lost_twin.cfg = replace(PG, backend="redis-nopersist", durable=False)
    _second_row(lost_twin)
    del lost_twin.rows["j3"]
    if lost_twin.findings().figure("keys completed twice").value != 1:
        problems.append("a double run whose second row was lost since went uncounted")
    # The hard/soft split follows the store and the outage.
    lossy = clean()
    lossy.cfg = replace(PG, backend="redis-nopersist", durable=False)
    del lossy.rows["j1"]
    if lossy.findings().failed:
        problems.append("a loss on a store without persistence failed the run")
    long_outage = clean()
    _dead(long_outage, "j1")
    long_outage.cfg = replace(PG, outages=((T + 15, T + 15 + 3_000),))  # < 2/3 of 5 s
    if long_outage.findings().figure("successes recorded as failures").value != 1:
        problems.append("a 3 s outage (lease 5 s) excused a success recorded as a failure")
    long_outage.cfg = replace(PG, outages=((T + 15, T + 15 + 4_000),))
    found = long_outage.findings()
    if found.failed or found.figure("successes recorded as failures in a long outage").value != 1:
        problems.append("a 4 s outage (lease 5 s) did not excuse a success recorded as failure")
    # A kill long after the body returned, with the store up, does not excuse the lost settle;
    # one while the store was down does.
    late_kill = clean()
    _killed_after_ok(late_kill)
    late_kill.lives[-1].killed_t = T + 20 + 5_000
    if late_kill.findings().figure("successes recorded as failures").value != 1:
        problems.append("a kill 5 s after the body returned (store up) excused its lost settle")
    late_kill.cfg = replace(PG, outages=((T + 15, T + 20 + 4_500),))
    if late_kill.findings().figure("successes recorded as failures").value != 0:
        problems.append("a kill while the store was down did not excuse the lost settle")
    return problems


def check_family(family: Family) -> list[str]:
    """A family's clean made-up run is all zeros; each of its defects moves its figure, and a
    hard figure that moves fails the run; no figure of the family is left unproven."""
    assert family.clean is not None
    problems: list[str] = []
    base = family.analyse(family.clean())
    if base.failed:
        problems.append(f"the clean run fails: {[f.name for f in base.failed]}")
    names = {f.name for f in base.figures}
    for f in base.figures:
        if f.name not in family.tallies and f.value:
            problems.append(f"the clean run has {f.name} = {f.value}")
        if f.name not in family.cases and f.name not in family.tallies:
            problems.append(f"no case proves {f.name!r} can be non-zero")
    for name, defect in family.cases.items():
        if name not in names:
            problems.append(f"case for an unknown figure {name!r}")
            continue
        evidence = family.clean()
        defect(evidence)
        found = family.analyse(evidence)
        fig = found.figure(name)
        if fig.value == 0:
            problems.append(f"{name!r} stayed 0 with its defect")
        if fig.hard and fig not in found.failed:
            problems.append(f"{name!r} is hard but did not fail the run")
    return problems


def main(families: list[Family]) -> int:
    """Check each family; print what failed; 1 when anything did."""
    failed = 0
    for family in families:
        if family.clean is not None:
            problems, proven = check_family(family), len(family.cases)
        else:
            problems, proven = check_plain(), len(CASES)
        for p in problems:
            print(f"self-check {family.name}: {p}")
        print(
            f"self-check {family.name}: {proven} figures proven to move"
            if not problems
            else f"self-check {family.name}: FAILED ({len(problems)} problems)"
        )
        failed += bool(problems)
    return 1 if failed else 0
