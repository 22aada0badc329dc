"""Mutation sampler: which single-bug copies of the memory driver does the parity suite miss?

Parses `jobs_memory/driver.py` with `ast`, lists every place one of these driver bugs fits, and
samples a spread of them over every family's methods:

- `cmp`: a comparison flipped (`<` and `<=`, `>` and `>=`, `==` and `!=`, `in`, `is`);
- `const`: an integer constant one off (up and down);
- `limit`: a limit (`limit`, `left`, `scan`, `.limit`) one off;
- `drop_write`: a statement that writes dropped (an assignment or `del` of a record attribute
  or dict entry, a `.add`/`.discard`/`.pop`/`.append`/`.setdefault`/`.remove` on an index);
- `drop_kw`: one field left out of a `replace(record, field=...)` (a column not written);
- `boolop`: `and` swapped with `or`;
- `early`: an early exit moved (`continue` as `break`, a guard `if ...: return/continue`
  dropped, a guard's test negated);
- `filter`: a filter dropped (one operand of an `and`/`or` naming a tenant, queue, state, name
  or time; a comprehension's `if`);
- `state`: one `JobState` name replaced by another.

Each mutant runs in a subprocess of its own (at most one at a time, so one core): the mutated
source is loaded as `jobs_memory.driver` before anything imports it, then the suite runs on
`MemoryDriver` as the `ci` profile does: every scenario, then the walk of the mutated method's
family, the job family's walk, and every other family's, from `SEEDS[0]` of tests/teeth.py
(`--seeds N` walks from the first N), stopping at the first failure (a kill). A mutant that
outruns `--timeout` counts as killed (a hang fails a CI too) but is reported apart.

Run it from the repository root (no database needed; 260 mutants took 17 minutes on a quiet
2-core box, a surviving one the whole suite's ~10 s)::

    nice -n 10 .venv/bin/python scripts/mutate_memory.py --sample 250 --out mutants.jsonl
    .venv/bin/python scripts/mutate_memory.py --report mutants.jsonl
    .venv/bin/python scripts/mutate_memory.py --show 'cmp:1234:0'   # one mutant's diff

`--module outbox` mutates `jobs_memory/outbox.py` and runs the outbox suite instead. A larger
`--sample` of the same `--seed` resumes past what `--out` holds; `--rerun mutants.jsonl` runs
again only the survivors of an earlier run (after the suite grew), `--keys` the mutants named;
`--without-holes` leaves `scenarios/holes.py` out (the suite as it was before this pass). On a
busy box raise `--timeout`: a survivor there outran 60 s, and a timeout counts as a kill.
"""

from __future__ import annotations

import argparse
import ast
import copy
import difflib
import json
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The modules a mutant may come from (`--module`): the driver, or the outbox store.
MODULES = {
    "driver": ROOT / "jobs_memory" / "driver.py",
    "outbox": ROOT / "jobs_memory" / "outbox.py",
}
SOURCE = MODULES["driver"]

_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_WRITES = {"add", "discard", "pop", "append", "setdefault", "remove", "extend", "update"}
_LIMITS = {"limit", "left", "scan"}
_FILTER_WORDS = ("tenant", "queue", "state", "name", "_ms", "now", "status", "claims", "worker")
_STATES = ("READY", "RUNNING", "PARKED", "COMPLETED", "FAILED", "DEAD", "CANCELLED")

#: The family whose walk a method's mutant runs first (the rest run after it).
_FAMILY_PREFIXES: tuple[tuple[str, str], ...] = (
    ("_job_purge", "retention"),
    ("_counter", "counters"),
    ("_count", "counters"),
    ("_job_cancel", "operator"),
    ("_cancel", "operator"),
    ("_job_requeue", "operator"),
    ("_requeue", "operator"),
    ("_job_promote", "operator"),
    ("_job_remove", "operator"),
    ("_drop", "operator"),
    ("_job_list", "operator"),
    ("_queue", "operator"),
    ("_pause", "operator"),
    ("_worker", "operator"),
    ("_beat", "operator"),
    ("_job_watch", "flows"),
    ("_join", "flows"),
    ("_finish_locked", "flows"),
    ("_unlink", "flows"),
    ("_step", "durable"),
    ("_event", "durable"),
    ("_find_locked", "durable"),
    ("_lease", "leases"),
    ("_live_holding", "leases"),
    ("_end_holdings", "leases"),
    ("_task", "tasks"),
    ("_sweep", "sweeps"),
    ("_advance", "sweeps"),
    ("_holds_run", "sweeps"),
    ("_posting", "postings"),
    ("_consumer", "consumers"),
    ("_webhook", "webhooks"),
)
#: Not driver behaviour the suite can see (construction, description, listener plumbing).
_SKIP = {
    "__init__",
    "describe",
    "capabilities",
    "_announce",
    "finish_subscribe",
    "_unsubscribe",
    "is_live",
    "close",
}


def family_of(func: str, module: str = "driver") -> str:
    """The family whose walk a mutant of `func` runs first (`outbox` for the outbox store)."""
    if module == "outbox":
        return "outbox"
    for prefix, family in _FAMILY_PREFIXES:
        if func.startswith(prefix):
            return family
    return "jobs"


@dataclass(frozen=True)
class Mutant:
    """One single-node change: `kind`, the node's ordinal in `ast.walk` order, a variant."""

    kind: str
    ordinal: int
    variant: int
    func: str
    line: int
    what: str
    module: str = "driver"

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.ordinal}:{self.variant}"

    @property
    def family(self) -> str:
        return family_of(self.func, self.module)


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield item


def _mentions_filter(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        word = sub.attr if isinstance(sub, ast.Attribute) else getattr(sub, "id", None)
        if isinstance(word, str) and any(w in word for w in _FILTER_WORDS):
            return True
    return False


def _is_guard(node: ast.If) -> bool:
    return len(node.body) == 1 and isinstance(node.body[0], (ast.Return, ast.Continue))


def _writes(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Assign, ast.AugAssign, ast.Delete)):
        targets = stmt.targets if isinstance(stmt, (ast.Assign, ast.Delete)) else [stmt.target]
        return any(isinstance(t, (ast.Attribute, ast.Subscript)) for t in targets)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        f = stmt.value.func
        return isinstance(f, ast.Attribute) and f.attr in _WRITES
    return False


def _sites(node: ast.AST, parents: dict[int, ast.AST]) -> Iterator[tuple[str, int, str]]:
    """(kind, variant, description) of every mutation `node` admits."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _FLIP:
                yield "cmp", i, f"{type(op).__name__} -> {_FLIP[type(op)].__name__}"
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield "const", 0, f"{node.value} -> {node.value + 1}"
        yield "const", 1, f"{node.value} -> {node.value - 1}"
    elif (isinstance(node, ast.Name) and node.id in _LIMITS and isinstance(node.ctx, ast.Load)) or (
        isinstance(node, ast.Attribute) and node.attr == "limit"
    ):
        yield "limit", 0, f"{ast.unparse(node)} + 1"
        yield "limit", 1, f"{ast.unparse(node)} - 1"
    elif isinstance(node, ast.BoolOp):
        other = "or" if isinstance(node.op, ast.And) else "and"
        yield "boolop", 0, f"-> {other}"
        for i, operand in enumerate(node.values):
            if _mentions_filter(operand):
                yield "filter", i, f"drop `{ast.unparse(operand)}`"
    elif isinstance(node, ast.comprehension):
        for i, cond in enumerate(node.ifs):
            yield "filter", 100 + i, f"drop `if {ast.unparse(cond)}`"
    elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "replace":
        for i, kw in enumerate(node.keywords):
            yield "drop_kw", i, f"drop {kw.arg}="
    elif isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "JobState":
        for i, s in enumerate(_STATES):
            if s != node.attr:
                yield "state", i, f"{node.attr} -> {s}"
    elif isinstance(node, ast.Continue):
        yield "early", 0, "continue -> break"
    if isinstance(node, ast.If):
        if _is_guard(node):
            yield "early", 1, f"drop guard `if {ast.unparse(node.test)}`"
        yield "early", 2, f"negate `if {ast.unparse(node.test)}`"
    if isinstance(node, ast.stmt) and _writes(node):
        yield "drop_write", 0, f"drop `{ast.unparse(node).splitlines()[0]}`"


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}


def enumerate_mutants(source: str, module: str = "driver") -> list[Mutant]:
    """Every mutant of `source`'s functions (bar `_SKIP`)."""
    tree = ast.parse(source)
    parents = _parents(tree)
    owner: dict[int, str] = {}
    for func in _functions(tree):
        if func.name in _SKIP:
            continue
        for sub in ast.walk(func):
            owner[id(sub)] = func.name
    out = []
    for ordinal, node in enumerate(ast.walk(tree)):
        name = owner.get(id(node))
        if name is None:
            continue
        # A docstring's or an annotation's node changes nothing observable.
        if isinstance(node, ast.Constant) and isinstance(parents.get(id(node)), ast.Expr):
            continue
        for kind, variant, what in _sites(node, parents):
            # A comprehension has no line of its own: its expression's.
            line = int(getattr(node, "lineno", 0) or getattr(parents.get(id(node)), "lineno", 0))
            out.append(Mutant(kind, ordinal, variant, name, line, what, module))
    return out


def _replace_stmt(parents: dict[int, ast.AST], node: ast.stmt, new: ast.stmt) -> None:
    parent = parents[id(node)]
    for field in ("body", "orelse", "finalbody"):
        seq = getattr(parent, field, None)
        if isinstance(seq, list) and any(s is node for s in seq):
            seq[next(i for i, s in enumerate(seq) if s is node)] = new
            return
    raise ValueError("statement has no list to sit in")


def apply(source: str, kind: str, ordinal: int, variant: int) -> str:
    """`source` with mutant (`kind`, `ordinal`, `variant`) applied, unparsed."""
    tree = ast.parse(source)
    parents = _parents(tree)
    node = list(ast.walk(tree))[ordinal]
    if kind == "cmp":
        assert isinstance(node, ast.Compare)
        node.ops[variant] = _FLIP[type(node.ops[variant])]()
    elif kind == "const":
        assert isinstance(node, ast.Constant) and isinstance(node.value, int)
        node.value += 1 if variant == 0 else -1
    elif kind == "limit":
        assert isinstance(node, ast.expr)
        bumped = ast.BinOp(
            copy.deepcopy(node), ast.Add() if variant == 0 else ast.Sub(), ast.Constant(1)
        )
        parent = parents[id(node)]
        for field, value in ast.iter_fields(parent):
            if value is node:
                setattr(parent, field, bumped)
            elif isinstance(value, list):
                for i, v in enumerate(value):
                    if v is node:
                        value[i] = bumped
    elif kind == "boolop":
        assert isinstance(node, ast.BoolOp)
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind == "filter" and isinstance(node, ast.BoolOp):
        del node.values[variant]
        if len(node.values) == 1:  # `a and b` less `b` is `a`: keep a BoolOp shape valid
            node.values.append(ast.Constant(isinstance(node.op, ast.And)))
    elif kind == "filter":
        assert isinstance(node, ast.comprehension)
        del node.ifs[variant - 100]
    elif kind == "drop_kw":
        assert isinstance(node, ast.Call)
        del node.keywords[variant]
    elif kind == "state":
        assert isinstance(node, ast.Attribute)
        node.attr = _STATES[variant]
    elif kind == "early" and variant == 0:
        _replace_stmt(parents, node, ast.Break())  # type: ignore[arg-type]
    elif kind == "early" and variant == 1:
        _replace_stmt(parents, node, ast.Pass())  # type: ignore[arg-type]
    elif kind == "early":
        assert isinstance(node, ast.If)
        node.test = ast.UnaryOp(ast.Not(), node.test)
    elif kind == "drop_write":
        _replace_stmt(parents, node, ast.Pass())  # type: ignore[arg-type]
    else:
        raise ValueError(kind)
    return ast.unparse(ast.fix_missing_locations(tree))


def sample(
    mutants: list[Mutant],
    n: int,
    seed: int,
    by: Callable[[Mutant], str] = attrgetter("func"),
    then: Callable[[Mutant], str] | None = None,
) -> list[Mutant]:
    """Up to `n` mutants spread over the groups `by` makes (the functions): round-robin over the
    groups (shuffled), each group's own mutants shuffled (or, with `then`, spread over its
    subgroups the same way), so every group gets its share before any gets more."""
    rng = random.Random(seed)
    groups: dict[str, list[Mutant]] = defaultdict(list)
    for m in mutants:
        groups[by(m)].append(m)
    queues = []
    for name in sorted(groups):
        ms = groups[name][:]
        if then is None:
            rng.shuffle(ms)
        else:
            # Taken from the end: the subgroups' spread, last first.
            ms = sample(ms, len(ms), seed, then)[::-1]
        queues.append(ms)
    rng.shuffle(queues)
    out: list[Mutant] = []
    while len(out) < n and any(queues):
        for q in queues:
            if q and len(out) < n:
                out.append(q.pop())
    return out


# -- one mutant, in a subprocess of its own ---------------------------------------------------


def run_one(spec: dict[str, object]) -> dict[str, object]:
    """Load the mutant as `jobs_memory.driver`, run the suite on it, answer what killed it."""
    import types

    which = str(spec.get("module", "driver"))
    path = MODULES[which]
    source = path.read_text()
    if spec["kind"] != "none":
        source = apply(source, str(spec["kind"]), int(spec["ordinal"]), int(spec["variant"]))  # type: ignore[call-overload]
    module = types.ModuleType(f"jobs_memory.{which}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module
    exec(compile(source, "<mutant>", "exec"), module.__dict__)
    if which == "outbox":
        return _run_outbox(module)

    from jobs_memory import MemoryDriver

    assert MemoryDriver.__module__ == "jobs_memory.driver" and module.MemoryDriver is MemoryDriver
    return run_suite(
        MemoryDriver,
        str(spec["family"]),
        int(spec.get("seeds", 1)),  # type: ignore[call-overload]
        bool(spec.get("without_holes")),
    )


def run_suite(factory: Any, first: str, seeds: int, without_holes: bool) -> dict[str, object]:
    """The parity suite on `factory`'s drivers as the `ci` profile runs it, stopping at the first
    failure: every scenario (`first` family's module's first), then the walk of family `first`,
    the job family's and every other family's, from each of the first `seeds` of `SEEDS`.
    Answers what failed (`killed_by`, None when nothing did) and its error."""
    import contextlib
    import io

    from jobs_core.testing.machine import FAMILIES, make_machine
    from jobs_core.testing.profiles import profile_settings, scaled
    from jobs_core.testing.scenarios import SCENARIOS
    from jobs_core.testing.suite import run_scenario
    from tests.teeth import SEEDS, ci_walk

    def fail(by: str, exc: BaseException) -> dict[str, object]:
        return {"killed_by": by, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}

    if without_holes:
        from jobs_core.testing.scenarios.holes import HOLE_SCENARIOS

        scenarios = {k: v for k, v in SCENARIOS.items() if k not in HOLE_SCENARIOS}
    else:
        scenarios = SCENARIOS

    def own_first(name: str) -> tuple[bool, str]:
        # A mutant of a family is mostly killed by that family's scenarios: on a real store,
        # where a scenario costs a driver's connections, they run first.
        module = getattr(scenarios[name], "__module__", "")
        return (module.rpartition(".")[2] != first, name)

    for name in sorted(scenarios, key=own_first):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run_scenario(factory, scenarios[name])
        except Exception as exc:
            return fail(f"scenario:{name}", exc)
    order = [first, *(["jobs"] if first != "jobs" else []), *sorted(FAMILIES - {first, "jobs"})]
    ci = profile_settings("ci")
    for seed in SEEDS[:seeds]:
        for family in order:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    ci_walk(make_machine(factory, frozenset({family})), scaled(ci, family), seed)
            except Exception as exc:
                return fail(f"walk:{family}@{seed}", exc)
    return {"killed_by": None, "error": None}


def _run_outbox(module: object) -> dict[str, object]:
    """The outbox suite (its scenarios, then its `ci` walk) on the mutated `MemoryOutbox`."""
    import contextlib
    import io

    from jobs_core.testing.outbox import OUTBOX_SCENARIOS, make_outbox_machine, run_outbox_scenario
    from jobs_core.testing.profiles import profile_settings
    from jobs_memory import MemoryOutbox
    from tests.teeth import SEEDS, ci_walk
    from tests.test_outbox_parity import memory_harness

    assert getattr(module, "MemoryOutbox", None) is MemoryOutbox

    def factory():  # type: ignore[no-untyped-def]
        return memory_harness(MemoryOutbox())

    for name in sorted(OUTBOX_SCENARIOS):
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run_outbox_scenario(factory, OUTBOX_SCENARIOS[name])
        except Exception as exc:
            return {"killed_by": f"scenario:{name}", "error": f"{type(exc).__name__}: {exc}"[:300]}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            ci_walk(make_outbox_machine(factory), profile_settings("ci"), SEEDS[0])
    except Exception as exc:
        return {"killed_by": "walk:outbox", "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"killed_by": None, "error": None}


def _child(
    spec: dict[str, object], timeout: float, script: Path = Path(__file__)
) -> dict[str, object]:
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, str(script), "--one", json.dumps(spec)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"killed_by": "timeout", "error": None, "seconds": timeout}
    lines = done.stdout.strip().splitlines()
    answer: dict[str, object]
    if done.returncode == 0 and lines:
        answer = json.loads(lines[-1])
    else:
        answer = {"killed_by": "crash", "error": done.stderr.strip()[-300:]}
    answer["seconds"] = round(time.monotonic() - started, 1)
    return answer


def _spec(m: Mutant, seeds: int, without_holes: bool) -> dict[str, object]:
    return {
        "kind": m.kind,
        "ordinal": m.ordinal,
        "variant": m.variant,
        "family": m.family,
        "func": m.func,
        "module": m.module,
        "line": m.line,
        "what": m.what,
        "key": m.key,
        "seeds": seeds,
        "without_holes": without_holes,
    }


def report(path: Path) -> str:
    """Mutants, kills and survivors per family of a results file (the last line per key)."""
    rows: dict[str, dict[str, object]] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        rows[row["key"]] = row
    made: Counter[str] = Counter()
    killed: Counter[str] = Counter()
    slow: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    survivors = []
    for row in rows.values():
        fam = str(row["family"])
        made[fam] += 1
        if row["killed_by"] is not None:
            killed[fam] += 1
            slow[fam] += row["killed_by"] == "timeout"
        else:
            kinds[str(row["kind"])] += 1
            survivors.append(row)
    # A timeout counts as killed (a hang fails a CI too), but may be a survivor on a busy box.
    out = [f"{'family':10} mutants killed survived (of the killed, timed out)"]
    for fam in sorted(made):
        line = f"{fam:10} {made[fam]:7} {killed[fam]:6} {made[fam] - killed[fam]:8}"
        out.append(line + (f" ({slow[fam]})" if slow[fam] else ""))
    total = f"{'all':10} {sum(made.values()):7} {sum(killed.values()):6} {len(survivors):8}"
    out.append(total + (f" ({sum(slow.values())})" if sum(slow.values()) else ""))
    out.append(f"survivors by kind: {dict(sorted(kinds.items()))}")
    for row in sorted(survivors, key=lambda r: (str(r["func"]), int(r["line"]))):  # type: ignore[call-overload]
        out.append(f"  {row['key']:18} {row['func']}:{row['line']}  {row['what']}")
    return "\n".join(out)


def show(key: str, module: str = "driver") -> str:
    """The unified diff of mutant `key` (`kind:ordinal:variant`) against its module."""
    kind, ordinal, variant = key.split(":")
    source = MODULES[module].read_text()
    before = ast.unparse(ast.parse(source))
    after = apply(source, kind, int(ordinal), int(variant))
    return "".join(
        difflib.unified_diff(before.splitlines(True), after.splitlines(True), "driver", key, n=2)
    )


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """The options every sampler takes (which mutants, how long each may run, where the
    results go, and the read-only views)."""
    parser.add_argument("--sample", type=int, default=250, help="how many mutants to run")
    parser.add_argument("--seed", type=int, default=7, help="the sampling seed")
    parser.add_argument("--seeds", type=int, default=1, help="walk from the first N SEEDS")
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant")
    parser.add_argument("--out", type=Path, default=Path("mutants.jsonl"))
    parser.add_argument("--rerun", type=Path, help="run again the survivors in this file")
    parser.add_argument("--keys", help="run these mutants (comma-separated keys) only")
    parser.add_argument(
        "--without-holes",
        action="store_true",
        help="leave out scenarios/holes.py (the suite as it was before this sampler's pass)",
    )
    parser.add_argument("--report", type=Path, help="summarise a results file and exit")
    parser.add_argument("--show", help="print one mutant's diff and exit")
    parser.add_argument("--list", action="store_true", help="count the sites per kind and exit")
    parser.add_argument("--one", help=argparse.SUPPRESS)


def campaign(
    args: argparse.Namespace,
    every: list[Mutant],
    base: dict[str, object],
    *,
    script: Path = Path(__file__),
    pick: Callable[[list[Mutant], int, int], list[Mutant]] = sample,
    before: Callable[[dict[str, object]], dict[str, object]] = dict,
    after: Callable[[dict[str, object]], None] = lambda spec: None,
    narrow: Callable[[list[Mutant], dict[str, object]], list[Mutant]] = lambda every, base: every,
) -> None:
    """Run the mutants `args` choose of `every` (`--keys`, `--rerun`, or the `--sample` that
    `pick` makes, resumed past what `--out` holds), each in a child of `script` after the unmutated
    `base` passed; each result is appended to `--out` as it comes. `before` completes a spec
    (a store of its own), `after` cleans up after its child, whatever the child did; `narrow`
    keeps the sample to what the unmutated run's answer says the suite can reach."""

    def run(spec: dict[str, object], timeout: float) -> dict[str, object]:
        spec = before(spec)
        try:
            return {**spec, **_child(spec, timeout, script)}
        finally:
            after(spec)

    # The unmutated driver must pass, or every kill means nothing.
    base = run({**base, "seeds": args.seeds}, args.timeout * 3)
    if base["killed_by"] is not None:
        raise SystemExit(f"the unmutated driver fails the suite: {base}")
    by_key = {m.key: m for m in every}
    if args.keys:
        chosen = [by_key[k] for k in args.keys.split(",")]
    elif args.rerun:
        rows = [json.loads(line) for line in args.rerun.read_text().splitlines()]
        last = {r["key"]: r for r in rows}
        chosen = [by_key[k] for k, r in last.items() if r["killed_by"] is None]
    else:
        chosen = pick(narrow(every, base), args.sample, args.seed)
        # A larger sample of the same seed starts with the smaller one: resume past what `--out`
        # already holds.
        if args.out.exists():
            done = {json.loads(line)["key"] for line in args.out.read_text().splitlines()}
            chosen = [m for m in chosen if m.key not in done]
    print(f"{len(every)} sites; running {len(chosen)} (baseline {base['seconds']} s)")
    with args.out.open("a") as out:
        for n, m in enumerate(chosen, 1):
            row = run(_spec(m, args.seeds, args.without_holes), args.timeout)
            out.write(json.dumps(row) + "\n")
            out.flush()
            mark = "survived" if row["killed_by"] is None else f"killed by {row['killed_by']}"
            print(f"[{n}/{len(chosen)}] {m.key} {m.func}:{m.line} {m.what}: {mark}", flush=True)


def run_main(
    args: argparse.Namespace,
    one: Callable[[dict[str, Any]], dict[str, object]],
    show_one: Callable[[str], str],
    every: Callable[[], list[Mutant]],
    base: dict[str, object],
    **options: Any,
) -> None:
    """What a sampler does with its parsed options: run one mutant (`--one`, the child), print
    a report, a diff or the sites' counts, or run a campaign (`options` go to `campaign`)."""
    sys.path.insert(0, str(ROOT))
    if args.one:
        print(json.dumps(one(json.loads(args.one))))
        return
    if args.report:
        print(report(args.report))
        return
    if args.show:
        print(show_one(args.show))
        return
    mutants = every()
    if args.list:
        print(len(mutants), dict(Counter(m.kind for m in mutants)))
        print(dict(Counter(m.family for m in mutants)))
        return
    campaign(args, mutants, base, **options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_run_args(parser)
    parser.add_argument("--module", choices=sorted(MODULES), default="driver")
    args = parser.parse_args()
    run_main(
        args,
        run_one,
        lambda key: show(key, args.module),
        lambda: enumerate_mutants(MODULES[args.module].read_text(), args.module),
        {"kind": "none", "family": "jobs", "module": args.module},
    )


if __name__ == "__main__":
    main()
