"""Workflows: durable parents that fan out to a few dozen children (`ctx.step.enqueue_many`, and
one in three a single `ctx.step.enqueue`) and fan in (`ctx.step.gather`, `ctx.step.result`);
jobs enqueued `after=` others (the default policy, or `"always"`); batches whose `on_complete`
callback reports their counts. Some children, dependencies and members fail for good on
purpose (`chaos_doomed`, one attempt), so the failure paths run too.

Every body writes its start and end to the ledger; a parent writes the children it was answered
(`fanned`) and what its gather handed it (`gathered`), a dependent the join it was released from
(`dep`), a callback the counts it was handed (`callback`). The figures hold them against the
rows: no flow lost, no parent past its gather twice or handed a wrong result, no child enqueued
twice, no dependent early or against its policy, every closed batch's callback once, with its
true counts.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter, defaultdict
from typing import Any, Final

from bench.chaos.families import Evidence, Family, workers
from bench.chaos.feed import Feeder, persist
from bench.chaos.figures import (
    LIVE,
    Config,
    Ends,
    Figure,
    Findings,
    Life,
    Row,
    Run,
    fate,
    in_long_outage,
    killed_before_settle,
    runs_by_job,
)
from bench.chaos.ledger import logged, note
from jobs_core import JobContext, JobHandle, Retry, job
from jobs_core.errors import ResultFailedError
from jobs_core.ids import derived_id, new_id

QUEUE: Final = "chaos_flows"
#: Clocks are read in whole ms: a start this much before a finish is rounding, not early.
ROUNDING_MS: Final = 2.0
#: The failed states a doomed job (or a dependent refused by its policy) may end in.
FAILED: Final = frozenset({"dead", "failed"})
RETRY: Final = Retry(attempts=5, base_ms=100, cap_ms=1_000, jitter="full")


class ChaosFailure(Exception):
    """A deliberate failure: a first attempt (retried), or every attempt of a doomed job."""


def kids(inp: dict[str, Any]) -> list[dict[str, Any]]:
    """The inputs of a parent's `enqueue_many` children, a function of its own input (a replay
    builds the same ones): one in eight sleeps 0.3-1.5 s, one in ten fails its first attempt."""
    out = []
    for x in range(inp["n"]):
        h = (inp["seed"] * 7_919 + x * 104_729) % 1_000_003
        out.append(
            {
                "i": f"{inp['i']}.{x}",
                "k": f"{inp['k']}.{x}",
                "p": inp["i"],
                "x": x,
                "v": h % 100_000,
                "ms": 300 + h % 1_200 if h % 8 == 0 else h % 100,
                "fail1": h % 10 == 3,
            }
        )
    return out


def solo_of(inp: dict[str, Any]) -> dict[str, Any]:
    """The input of the child a parent enqueues alone (`ctx.step.enqueue`)."""
    return {
        "i": f"{inp['i']}.solo",
        "k": f"{inp['k']}.solo",
        "p": inp["i"],
        "x": "solo",
        "v": inp["seed"] % 977,
        "ms": inp["seed"] % 200,
        "fail1": False,
    }


def expected(inp: dict[str, Any]) -> list[Any]:
    """What a parent's gather must hand it: each child's value, in order, then `failed` for
    its doomed child; then its solo child's value."""
    seen: list[Any] = [k["v"] for k in kids(inp)]
    if inp["doomed"]:
        seen.append("failed")
    if inp["solo"]:
        seen.append(solo_of(inp)["v"])
    return seen


async def _work(inp: dict[str, Any], ctx: JobContext) -> None:
    await asyncio.sleep(inp.get("ms", 0) / 1000)
    if inp.get("fail1") and ctx.attempt == 1:
        raise ChaosFailure("attempt 1 fails on purpose")


@job(name="chaos_child", queue=QUEUE, tenant="none", retry=RETRY)
async def chaos_child(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A parent's child (no key function: its derived id is its key)."""

    async def body(run: dict[str, Any]) -> dict[str, Any]:
        await _work(inp, ctx)
        return {"x": inp["x"], "v": inp["v"]}

    return await logged(inp, ctx, body)


@job(
    name="chaos_doomed",
    queue=QUEUE,
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=Retry(attempts=1),
)
async def chaos_doomed(inp: dict[str, Any], ctx: JobContext) -> None:
    """Fails for good: a child gathered with `return_errors=True`, a dependency, a member."""

    async def body(run: dict[str, Any]) -> None:
        await asyncio.sleep(0.02)
        raise ChaosFailure("doomed on purpose")

    return await logged(inp, ctx, body)


@job(
    name="chaos_parent",
    queue=QUEUE,
    idempotency_key=lambda i: i["k"],
    tenant="none",
    retry=RETRY,
)
async def chaos_parent(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    async def body(run: dict[str, Any]) -> dict[str, Any]:
        ids = await ctx.step.enqueue_many("kids", chaos_child, kids(inp))
        doomed = None
        if inp["doomed"]:
            alone = {**solo_of(inp), "i": f"{inp['i']}.doomed", "x": "doomed"}
            doomed = await ctx.step.enqueue("doomed", chaos_doomed, alone)
            ids = [*ids, doomed]
        solo = await ctx.step.enqueue("solo", chaos_child, solo_of(inp)) if inp["solo"] else None
        note("fanned", **run, ids=ids, solo=solo)
        await asyncio.sleep(inp["gaps"][0] / 1000)
        got = await ctx.step.gather("all", ids, return_errors=doomed is not None)
        seen = [_seen(g) for g in got]
        if solo is not None:
            one = await ctx.step.result("one", solo)
            seen.append(one["v"] if isinstance(one, dict) else one)
        note("gathered", **run, seen=seen)
        await asyncio.sleep(inp["gaps"][1] / 1000)
        return {"n": len(seen), "sum": sum(v for v in seen if isinstance(v, int))}

    return await logged(inp, ctx, body)


def _seen(answer: Any) -> Any:
    """A gathered answer as the ledger holds it: a child's value, or `failed` (a doomed child
    dead or failed; any other failure names its state)."""
    if isinstance(answer, ResultFailedError):
        return "failed" if answer.state in FAILED else f"failed: {answer.state}"
    return answer["v"] if isinstance(answer, dict) else answer


@job(name="chaos_leaf", queue=QUEUE, idempotency_key=lambda i: i["k"], tenant="none", retry=RETRY)
async def chaos_leaf(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A dependency of a dependent, or a batch's member."""

    async def body(run: dict[str, Any]) -> dict[str, Any]:
        await _work(inp, ctx)
        return {"i": inp["i"]}

    return await logged(inp, ctx, body)


@job(name="chaos_dep", queue=QUEUE, idempotency_key=lambda i: i["k"], tenant="none", retry=RETRY)
async def chaos_dep(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """Enqueued `after=` its dependencies: writes the join it was released from."""

    async def body(run: dict[str, Any]) -> dict[str, Any]:
        join = ctx.join
        note(
            "dep",
            **run,
            total=None if join is None else join.total,
            failed=None if join is None else join.failed,
            pending=None if join is None else join.pending,
        )
        await asyncio.sleep(0.01)
        return {"i": inp["i"]}

    return await logged(inp, ctx, body)


@job(name="chaos_callback", queue=QUEUE, tenant="none", retry=RETRY)
async def chaos_callback(inp: dict[str, Any], ctx: JobContext) -> dict[str, Any]:
    """A batch's `on_complete`: writes the counts it was handed."""
    head = inp["input"]

    async def body(run: dict[str, Any]) -> dict[str, Any]:
        counts = {k: inp[k] for k in ("total", "succeeded", "failed")}
        note("callback", **run, batch=inp["batch_id"], **counts)
        await asyncio.sleep(0.01)
        return counts

    return await logged(head, ctx, body)


# -- the feed -----------------------------------------------------------------------------------


def _part(f: Feeder, **fields: Any) -> dict[str, Any]:
    """An input of a flow's part (a dependency, a member): not a flow of its own."""
    i = new_id()
    return {"i": i, "k": f"part-{i}", **fields}


def _leaf(f: Feeder) -> dict[str, Any]:
    long = f.rng.random() < 0.2
    return _part(
        f,
        ms=f.rng.randint(300, 1_500) if long else f.rng.randint(5, 150),
        fail1=f.rng.random() < 0.15,
    )


async def feed(f: Feeder) -> None:
    """Flows over the run, a third of each kind: parents (12-36 children; one in three also a
    solo child, one in four a doomed one), dependents after 1-4 leaves (one in four also after
    a doomed leaf, one in four after a parent; three in ten with `after_policy="always"`), and
    batches of 3-10 members (three in ten with a doomed member)."""
    parents: list[str] = []
    while f.made < f.total and f.elapsed() < f.seconds:
        r = f.rng.random()
        if r < 0.35:
            batch = []
            for _ in range(min(f.rng.randint(1, 3), f.total - f.made)):
                gaps = [
                    f.rng.randint(500, 2_000) if f.rng.random() < 0.2 else f.rng.randint(0, 300)
                    for _ in range(2)
                ]
                batch.append(
                    f.intent(
                        n=f.rng.randint(12, 36),
                        seed=f.rng.randrange(1_000_000),
                        solo=f.rng.random() < 0.33,
                        doomed=f.rng.random() < 0.25,
                        gaps=gaps,
                    )
                )
            parents += [i for i in await f.enqueue(chaos_parent, batch) if i is not None]
        elif r < 0.7:
            await _dependent(f, parents)
        else:
            await _batch(f)
        await f.pace()


async def _dependent(f: Feeder, parents: list[str]) -> None:
    leaves = [_leaf(f) for _ in range(f.rng.randint(1, 4))]
    after = [i for i in await f.enqueue(chaos_leaf, leaves, role="leaf") if i is not None]
    if f.rng.random() < 0.25:
        after += [i for i in await f.enqueue(chaos_doomed, [_part(f)], role="leaf") if i]
    if parents and f.rng.random() < 0.25:
        after.append(f.rng.choice(parents[-10:]))
    if not after:
        return
    policy = "always" if f.rng.random() < 0.3 else None
    inp = f.intent(policy=policy)
    dep_id = new_id()
    options: dict[str, Any] = {"id": dep_id, "after": after}
    if policy is not None:
        options["after_policy"] = policy
    got, tries, errors, refused = await persist(lambda: f.client.enqueue(chaos_dep, inp, **options))
    f.record(
        {
            "ev": "enqueued",
            "id": dep_id if got is not None else None,
            **inp,
            "name": chaos_dep.name,
            "after": after,
            "deduped": got.deduped if got is not None else None,
            "tries": tries,
            "errors": errors,
            "refused": refused,
        }
    )


async def _batch(f: Feeder) -> None:
    head = f.intent()
    batch_id = new_id()
    b = f.client.batch(on_complete=chaos_callback, id=batch_id, input=head)
    members = [_leaf(f) for _ in range(f.rng.randint(3, 10))]
    doomed = [_part(f)] if f.rng.random() < 0.3 else []
    ids = [new_id() for _ in members]
    doomed_ids = [new_id() for _ in doomed]
    tries = 0
    errors: list[str] = []
    ok = True

    async def add(handle: JobHandle, inputs: list[dict[str, Any]], named: list[str]) -> None:
        nonlocal tries, errors, ok
        got, n, errs, _ = await persist(lambda: b.enqueue_many(handle, inputs, ids=named))
        tries, errors, ok = tries + n, errors + errs, ok and got is not None

    await add(chaos_leaf, members, ids)
    if doomed and ok:
        await add(chaos_doomed, doomed, doomed_ids)
    closed = None
    if ok:
        closed, n, errs, _ = await persist(b.close)
        tries, errors = tries + n, errors + errs
    f.record(
        {
            "ev": "batch",
            **head,
            "batch_id": batch_id,
            "members": ids,
            "doomed": doomed_ids,
            "members_ok": ok,
            "callback": closed[0].id if closed else None,
            "tries": tries,
            "errors": errors,
        }
    )


# -- the figures --------------------------------------------------------------------------------


def _input(row: Row) -> dict[str, Any]:
    try:
        value = json.loads(row.input_json)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _code(row: Row) -> str:
    try:
        doc = json.loads(row.last_error or "null")
    except ValueError:
        return "?"
    return str(doc.get("code")) if isinstance(doc, dict) else "-"


def _doubled(cfg: Config, passes: list[Run], ends: Ends) -> str | None:
    """Why a run passing a point the run before it also passed is a double (it still ran; it
    returned and no crash lost its settle), or None when every pass after the first is a crash's
    resumption."""
    for prev, nxt in itertools.pairwise(passes):
        if ends.stopped(prev, cfg.ended_t or nxt.start_t) > nxt.start_t:
            return f"pid {nxt.pid} passed while pid {prev.pid}'s pass still ran"
        if prev.end_how != "ok":
            continue
        if killed_before_settle(cfg, prev, ends) or in_long_outage(cfg, prev):
            continue
        return f"the pass before (pid {prev.pid}) returned and no crash explains the next"
    return None


def analyse(ev: Evidence) -> Findings:
    cfg, ends = ev.cfg, Ends.of(ev.lives)
    rows = ev.rows
    runs = {r.r: r for r in ev.runs()}
    by_job = runs_by_job(runs.values())
    enq = {str(a["id"]): a for a in ev.answers if a.get("ev") == "enqueued" and a.get("id")}
    parents = {i: a for i, a in enq.items() if a["name"] == "chaos_parent"}
    deps = {i: a for i, a in enq.items() if a["name"] == "chaos_dep"}
    batches = [a for a in ev.answers if a.get("ev") == "batch"]
    closed = [b for b in batches if b["members_ok"] and b["callback"]]
    lines: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for line in sorted(ev.lines, key=lambda d: float(d["t"])):
        if line["ev"] not in ("start", "end"):
            lines[line["ev"]][line["job"]].append(line)
    children: dict[str, list[Row]] = defaultdict(list)
    for each in rows.values():
        if each.parent_id is not None:
            children[each.parent_id].append(each)

    # Every flow, and every part of one, must exist and be finished at the end.
    doomed_ids = {i for i, a in enq.items() if a["name"] == "chaos_doomed"}
    for b in batches:
        doomed_ids |= set(b["doomed"])
    wanted: dict[str, str] = {i: a["name"] for i, a in enq.items()}
    for b in batches:
        if b["members_ok"]:  # else some were given up: their rows may rightly not exist
            wanted |= {m: "member" for m in b["members"]} | {m: "member" for m in b["doomed"]}
    for b in closed:
        wanted[derived_id(b["batch_id"], "on_complete")] = "callback"
    for p in parents:
        for kid in children.get(p, []):
            wanted[kid.id] = "child"
        for line in lines["fanned"].get(p, []):
            wanted |= {c: "child" for c in line["ids"]}
            if line.get("solo"):
                wanted[line["solo"]] = "child"
    missing = sorted(f"{i} ({kind})" for i, kind in wanted.items() if i not in rows)
    unfinished = sorted(
        f"{i} ({kind}, {rows[i].state})"
        for i, kind in wanted.items()
        if i in rows and rows[i].state in LIVE
    )
    ended_wrong = []
    for i, kind in wanted.items():
        one = rows.get(i)
        if one is None or one.state in LIVE or kind == "chaos_dep":
            continue
        doomed = i in doomed_ids or _input(one).get("x") == "doomed"
        if doomed and one.state == "completed":
            ended_wrong.append(f"{i} ({kind}): doomed, yet completed")
        elif not doomed and one.state != "completed":
            ended_wrong.append(f"{i} ({kind}): {one.state} {_code(one)}")

    # Parents: past their gather once (crashes aside), handed the true results, no child twice.
    doubled, wrong, twice = [], [], []
    for p, a in parents.items():
        row = rows.get(p)
        want = expected(a)
        gathered = lines["gathered"].get(p, [])
        for g in gathered:
            if g["seen"] != want:
                wrong.append(f"{p}: handed {g['seen'][:4]}..., wanted {want[:4]}...")
                break
        else:
            if row is not None and row.state == "completed":
                result = json.loads(row.result_json or "null")
                total = sum(v for v in want if isinstance(v, int))
                if not gathered:
                    wrong.append(f"{p}: completed, yet no run of it passed its gather")
                elif result != {"n": len(want), "sum": total}:
                    wrong.append(f"{p}: result {result}, wanted n={len(want)} sum={total}")
        passes = [runs[g["r"]] for g in gathered if g["r"] in runs]
        why = _doubled(cfg, passes, ends)
        if why is not None:
            doubled.append(f"{p}: {why}")
        asked = a["n"] + bool(a["solo"]) + bool(a["doomed"])
        made = children.get(p, [])
        keys = Counter((str(_input(c).get("p")), str(_input(c).get("x"))) for c in made)
        fanned = {json.dumps(line["ids"]) for line in lines["fanned"].get(p, [])}
        if len(made) > asked or any(n > 1 for n in keys.values()) or len(fanned) > 1:
            twice.append(f"{p}: {len(made)} child rows for {asked} asked, {len(fanned)} fan-outs")

    # Dependents: none starts before every dependency finished; the policy is kept.
    early, against = [], []
    for d, a in deps.items():
        row = rows.get(d)
        mine = by_job.get(d, [])
        first = mine[0].start_t if mine else None
        after = list(dict.fromkeys(a["after"]))
        failed = [x for x in after if x not in rows or rows[x].state != "completed"]
        for x in after:
            dep_row = rows.get(x)
            if first is None:
                break
            if dep_row is None or dep_row.finished_t is None:
                early.append(f"{d}: started, {x} never finished")
            elif first < dep_row.finished_t - ROUNDING_MS:
                early.append(f"{d}: started {dep_row.finished_t - first:.0f} ms before {x} ended")
            elif any(r.start_t > first for r in by_job.get(x, [])):
                early.append(f"{d}: {x} started a run after {d} started")
            else:
                continue
            break
        if row is None or row.state in LIVE:
            continue
        if a["policy"] is None:
            if failed and (mine or row.state == "completed"):
                against.append(f"{d}: ran though {len(failed)} of its dependencies failed")
            elif failed and _code(row) != "X_JOB_DEPENDENCY_FAILED":
                against.append(f"{d}: {row.state} {_code(row)}, not X_JOB_DEPENDENCY_FAILED")
            elif not failed and row.state != "completed":
                against.append(f"{d}: {row.state} {_code(row)} though every dependency completed")
        else:
            seen = [(x["total"], x["failed"]) for x in lines["dep"].get(d, [])]
            if row.state != "completed" or not seen:
                against.append(f"{d} (always): {row.state}, {len(seen)} runs")
            elif any(s != (len(after), len(failed)) for s in seen):
                against.append(f"{d} (always): saw {seen}, wanted {(len(after), len(failed))}")

    # Batches: one callback, with the counts the members' rows hold.
    fired_twice, never, counts = [], [], []
    cb_rows: Counter[str] = Counter()
    for each in rows.values():
        stored = _input(each)
        if each.name == "chaos_callback" and stored.get("~batch"):
            cb_rows[str(stored.get("batch_id"))] += 1
    for b in closed:
        cb = derived_id(b["batch_id"], "on_complete")
        fired = lines["callback"].get(cb, [])
        oks = [runs[x["r"]] for x in fired if x["r"] in runs and runs[x["r"]].end_how == "ok"]
        row = rows.get(cb)
        if not oks or row is None or row.state != "completed":
            never.append(f"{cb}: {len(oks)} runs returned, row {row.state if row else 'missing'}")
        why = _doubled(cfg, [runs[x["r"]] for x in fired if x["r"] in runs], ends)
        if why is not None or cb_rows[b["batch_id"]] > 1:
            fired_twice.append(f"{cb}: {why or ''} {cb_rows[b['batch_id']]} callback rows")
        members = b["members"] + b["doomed"]
        bad = sum(1 for m in members if m not in rows or rows[m].state != "completed")
        true = {"total": len(members), "succeeded": len(members) - bad, "failed": bad}
        for x in fired:
            handed = {k: x[k] for k in true}
            if handed != true:
                counts.append(f"{cb}: handed {handed}, wanted {true}")
                break

    # What happened, not defects: runs after a crash, and how long releases took.
    again: Counter[str] = Counter()
    replayed: Counter[str] = Counter()
    for rs in by_job.values():
        for prev in rs[:-1]:
            if prev.end_how in ("fail", "parked"):
                continue
            (replayed if prev.name == "chaos_parent" else again)[fate(cfg, prev, ends)] += 1
    release: dict[str, list[float]] = {"parent": [], "dependent": [], "callback": []}
    for p in parents:
        mine = by_job.get(p, [])
        finished = [c.finished_t for c in children.get(p, []) if c.finished_t is not None]
        passed = {g["r"] for g in lines["gathered"].get(p, [])}
        for n, r in enumerate(mine):
            if r.r in passed:
                if n and mine[n - 1].end_how == "parked" and finished:
                    release["parent"].append(r.start_t - max(finished))
                break
    for dep_id, a in deps.items():
        ends_t = [rows[x].finished_t for x in a["after"] if x in rows]
        if by_job.get(dep_id) and ends_t and all(t is not None for t in ends_t):
            release["dependent"].append(by_job[dep_id][0].start_t - max(t or 0 for t in ends_t))
    for b in closed:
        cb = derived_id(b["batch_id"], "on_complete")
        ends_t = [rows[m].finished_t for m in b["members"] + b["doomed"] if m in rows]
        if by_job.get(cb) and ends_t and all(t is not None for t in ends_t):
            release["callback"].append(by_job[cb][0].start_t - max(t or 0 for t in ends_t))

    kinds = Counter(a["name"] for a in enq.values())
    figures = [
        Figure(
            "flows enqueued",
            len(parents) + len(deps) + len(batches),
            False,
            f"{len(parents)} parents ({sum(len(children.get(p, [])) for p in parents):,}"
            f" children), {len(deps)} dependents ({kinds['chaos_leaf']} leaves,"
            f" {kinds['chaos_doomed']} doomed), {len(batches)} batches ({len(closed)} closed,"
            f" {sum(len(b['members']) + len(b['doomed']) for b in batches)} members)",
        ),
        Figure(
            "flows lost: missing",
            len(missing),
            True,
            "a parent, child, dependency, dependent, member or closed batch's callback with no row",
            missing[:3],
        ),
        Figure(
            "flows lost: never finished",
            len(unfinished),
            True,
            "still ready/running/parked after the wait",
            unfinished[:3],
        ),
        Figure(
            "flows that ended wrong",
            len(ended_wrong),
            True,
            "a parent, child, leaf, member or callback finished other than completed (or a doomed"
            " job completed)",
            ended_wrong[:3],
        ),
        Figure(
            "parents past their gather twice",
            len(doubled),
            True,
            "a second run passed the gather while the first still ran, or after it returned"
            " with no kill -9 before its settle and no long outage",
            doubled[:3],
        ),
        Figure(
            "parents handed a wrong or missing child result",
            len(wrong),
            True,
            "the gather (and result) answered other than each child's value in order, `failed`"
            " for its doomed child; or the parent's row holds another result",
            wrong[:3],
        ),
        Figure(
            "children enqueued twice",
            len(twice),
            True,
            "more child rows than the parent asked for, two for one input, or two fan-outs",
            twice[:3],
        ),
        Figure(
            "dependents started early",
            len(early),
            True,
            "a dependent's body started before every dependency's row finished (or while a"
            " dependency's run started after it)",
            early[:3],
        ),
        Figure(
            "dependents against their policy",
            len(against),
            True,
            "default policy: ran though a dependency did not complete, or did not complete"
            " though all did; `always`: did not run, or its join's counts were wrong",
            against[:3],
        ),
        Figure(
            "batch callbacks fired twice",
            len(fired_twice),
            True,
            "a second pass while one still ran or after one returned (no crash explains it),"
            " or two callback rows for one batch",
            fired_twice[:3],
        ),
        Figure(
            "batch callbacks never fired",
            len(never),
            True,
            "a closed batch whose callback never returned, or whose row is not completed",
            never[:3],
        ),
        Figure(
            "batch callbacks with wrong counts",
            len(counts),
            True,
            "total, succeeded or failed other than the members' rows say",
            counts[:3],
        ),
        Figure(
            "bodies run again after a crash",
            sum(again.values()),
            False,
            "children, leaves, members, dependents and callbacks run again (at least once);"
            " why: below",
        ),
        Figure(
            "parents replayed",
            sum(replayed.values()),
            False,
            "parent runs after a run that did not park or fail (it died); why: below",
        ),
        Figure(
            "latest release after the last child finished (ms)",
            round(max(release["parent"], default=0)),
            False,
            f"parents parked at their gather: median"
            f" {_median(release['parent']):.0f} ms; dependents after their last dependency: max"
            f" {max(release['dependent'], default=0):.0f} ms; callbacks after their last member:"
            f" max {max(release['callback'], default=0):.0f} ms (outages and kills delay them)",
        ),
    ]
    return Findings(
        figures,
        {
            "runs again (not parents), by the run before": dict(again),
            "parents replayed, by the run before": dict(replayed),
        },
    )


def _median(values: list[float]) -> float:
    s = sorted(values)
    return s[len(s) // 2] if s else 0.0


# -- self-check ---------------------------------------------------------------------------------

T = 1_000_000.0
PARENT: Final = {"i": "ip", "k": "kp", "n": 2, "seed": 5, "solo": False, "doomed": False}


def clean() -> Evidence:
    """A parent gathering its 2 children (parked once, released), a dependent after two
    leaves, a dependent refused by a doomed leaf, an `always` dependent run after it, and a
    batch of a member and a doomed member whose callback ran once."""
    cfg = Config("pg", True, lease_s=5.0, drain_timeout_s=3.0, outage_s=3.0, family="flows")
    answers: list[dict[str, Any]] = [
        {"ev": "enqueued", "id": "P", **PARENT, "name": "chaos_parent", "gaps": [0, 0]},
        *(
            {"ev": "enqueued", "id": f"L{n}", "i": f"il{n}", "k": f"kl{n}", "name": name}
            for n, name in ((1, "chaos_leaf"), (2, "chaos_leaf"), (3, "chaos_doomed"))
        ),
        {"ev": "enqueued", "id": "D", "i": "id", "k": "kd", "name": "chaos_dep"}
        | {"after": ["L1", "L2"], "policy": None},
        {"ev": "enqueued", "id": "E", "i": "ie", "k": "ke", "name": "chaos_dep"}
        | {"after": ["L1", "L3"], "policy": None},
        {"ev": "enqueued", "id": "A", "i": "ia", "k": "ka", "name": "chaos_dep"}
        | {"after": ["L1", "L3"], "policy": "always"},
        {"ev": "batch", "i": "ib", "k": "kb", "batch_id": "B", "members": ["M1"]}
        | {"doomed": ["M2"], "members_ok": True, "callback": derived_id("B", "on_complete")},
    ]
    lines: list[dict[str, Any]] = []

    def run(r: str, job_id: str, name: str, t: float, how: str, *notes: dict[str, Any]) -> None:
        base = {"r": r, "job": job_id, "name": name, "i": f"i{job_id}", "k": f"k{job_id}"}
        lines.append({"ev": "start", **base, "attempt": 1, "pid": 100, "t": t})
        lines.extend({**base, **n, "pid": 100, "t": t + 1 + k} for k, n in enumerate(notes))
        lines.append({"ev": "end", **base, "how": how, "pid": 100, "t": t + 5})

    kid_ids = ["C0", "C1"]
    fanned = {"ev": "fanned", "ids": kid_ids, "solo": None}
    run("p1", "P", "chaos_parent", T, "parked", fanned)
    run("c0", "C0", "chaos_child", T + 10, "ok")
    run("c1", "C1", "chaos_child", T + 20, "ok")
    run(
        "p2",
        "P",
        "chaos_parent",
        T + 40,
        "ok",
        fanned,
        {"ev": "gathered", "seen": expected(PARENT)},
    )
    run("l1", "L1", "chaos_leaf", T + 10, "ok")
    run("l2", "L2", "chaos_leaf", T + 20, "ok")
    run("l3", "L3", "chaos_doomed", T + 20, "fail")
    run("d", "D", "chaos_dep", T + 40, "ok", {"ev": "dep", "total": 2, "failed": 0, "pending": 0})
    run("a", "A", "chaos_dep", T + 40, "ok", {"ev": "dep", "total": 2, "failed": 1, "pending": 0})
    run("m1", "M1", "chaos_leaf", T + 10, "ok")
    run("m2", "M2", "chaos_doomed", T + 10, "fail")
    cb = derived_id("B", "on_complete")
    counts = {"total": 2, "succeeded": 1, "failed": 1}
    run("cb", cb, "chaos_callback", T + 40, "ok", {"ev": "callback", "batch": "B", **counts})

    def row(i: str, name: str, state: str, t: float, **more: Any) -> Row:
        return Row(i, name, state, 1, None, f"i{i}", f"k{i}", finished_t=t, **more)

    values = expected(PARENT)
    rows = {
        "P": row(
            "P",
            "chaos_parent",
            "completed",
            T + 46,
            result_json=json.dumps({"n": 2, "sum": sum(values)}),
        ),
        **{
            c: row(
                c,
                "chaos_child",
                "completed",
                T + 16 + 10 * x,
                parent_id="P",
                input_json=json.dumps(kids(PARENT)[x]),
            )
            for x, c in enumerate(kid_ids)
        },
        "L1": row("L1", "chaos_leaf", "completed", T + 16),
        "L2": row("L2", "chaos_leaf", "completed", T + 26),
        "L3": row("L3", "chaos_doomed", "dead", T + 26),
        "D": row("D", "chaos_dep", "completed", T + 46),
        "E": Row(
            "E",
            "chaos_dep",
            "dead",
            0,
            '{"code":"X_JOB_DEPENDENCY_FAILED"}',
            "ie",
            "ke",
            finished_t=T + 27,
        ),
        "A": row("A", "chaos_dep", "completed", T + 46),
        "M1": row("M1", "chaos_leaf", "completed", T + 16, batch_id="B"),
        "M2": row("M2", "chaos_doomed", "dead", T + 16, batch_id="B"),
        cb: row(
            cb,
            "chaos_callback",
            "completed",
            T + 46,
            input_json=json.dumps({"~batch": True, "batch_id": "B", "total": 2}),
        ),
    }
    return Evidence(cfg, answers, rows, lines, [Life(0, 100, T)])


def _line(ev: Evidence, kind: str, job_id: str) -> dict[str, Any]:
    return next(d for d in ev.lines if d["ev"] == kind and d["job"] == job_id)


def _again(ev: Evidence, job_id: str, name: str, note_line: dict[str, Any], killed: bool) -> None:
    """A second pass of `job_id` 50 ms after its first returned; its worker killed -9 right
    after that return (`killed`: a crash explains the pass) or not."""
    base = {"r": f"{job_id}-again", "job": job_id, "name": name, "i": "x", "k": "x", "pid": 200}
    t = T + 100
    ev.lines += [
        {"ev": "start", **base, "attempt": 1, "t": t},
        {**note_line, **base, "t": t + 1},
        {"ev": "end", **base, "how": "ok", "t": t + 2},
    ]
    ev.lives.append(Life(1, 200, T))
    if killed:
        first = [d for d in ev.lines if d["ev"] == "end" and d["job"] == job_id][-2]
        for d in ev.lines:
            if d.get("r") == first["r"]:
                d["pid"] = 300
        ev.lives.append(Life(2, 300, T, killed_t=first["t"] + 10, exit_t=first["t"] + 11))


def _parent_twice(ev: Evidence) -> None:
    _again(ev, "P", "chaos_parent", {"ev": "gathered", "seen": expected(PARENT)}, killed=False)


def _parent_replayed(ev: Evidence) -> None:
    _again(ev, "P", "chaos_parent", {"ev": "gathered", "seen": expected(PARENT)}, killed=True)


def _child_again(ev: Evidence) -> None:
    """Child C0's first run was killed -9 mid-body: it ran again."""
    ev.lines[:] = [d for d in ev.lines if not (d["r"] == "c0" and d["ev"] == "end")]
    for d in ev.lines:
        if d["r"] == "c0":
            d["pid"] = 300
    ev.lives.append(Life(1, 300, T, killed_t=T + 12, exit_t=T + 13))
    base = {"r": "c0b", "job": "C0", "name": "chaos_child", "i": "x", "k": "x", "pid": 100}
    ev.lines += [
        {"ev": "start", **base, "attempt": 2, "t": T + 13},
        {"ev": "end", **base, "how": "ok", "t": T + 14},
    ]


def _wrong_result(ev: Evidence) -> None:
    _line(ev, "gathered", "P")["seen"] = [*expected(PARENT)[:-1], 0]


def _child_twice(ev: Evidence) -> None:
    ev.rows["C9"] = replace_row(ev.rows["C0"], id="C9")


def replace_row(row: Row, **changes: Any) -> Row:
    from dataclasses import replace

    return replace(row, **changes)


def _early(ev: Evidence) -> None:
    for d in ev.lines:
        if d["job"] == "D":
            d["t"] -= 25  # starts at T + 15, before L2 finished (T + 26)


def _against(ev: Evidence) -> None:
    """The dependent after a doomed leaf ran anyway, and completed."""
    base = {"r": "e", "job": "E", "name": "chaos_dep", "i": "ie", "k": "ke", "pid": 100}
    ev.lines += [
        {"ev": "start", **base, "attempt": 1, "t": T + 40},
        {"ev": "end", **base, "how": "ok", "t": T + 45},
    ]
    ev.rows["E"] = replace_row(ev.rows["E"], state="completed", last_error=None)


def _cb_twice(ev: Evidence) -> None:
    cb = derived_id("B", "on_complete")
    _again(ev, cb, "chaos_callback", dict(_line(ev, "callback", cb)), killed=False)


def _cb_never(ev: Evidence) -> None:
    cb = derived_id("B", "on_complete")
    ev.lines[:] = [d for d in ev.lines if d["job"] != cb]
    ev.rows[cb] = replace_row(ev.rows[cb], state="dead", last_error='{"code":"X_JOB_LEASE_LOST"}')


def _cb_counts(ev: Evidence) -> None:
    d = _line(ev, "callback", derived_id("B", "on_complete"))
    d["succeeded"], d["failed"] = 2, 0


FAMILY = Family(
    name="flows",
    title="parents fanning out and in, dependents `after=` others, batch callbacks: none lost,"
    " early, doubled or miscounted",
    fleet=workers("bench.chaos.families.flows"),
    feed=("-m", "bench.chaos.feed", "--family", "flows"),
    jobs=300,
    seconds=30.0,
    analyse=analyse,
    clean=clean,
    cases={
        "flows lost: missing": lambda ev: ev.rows.__delitem__("C1"),
        "flows lost: never finished": lambda ev: ev.rows.update(
            D=replace_row(ev.rows["D"], state="parked")
        ),
        "flows that ended wrong": lambda ev: ev.rows.update(
            M1=replace_row(ev.rows["M1"], state="dead")
        ),
        "parents past their gather twice": _parent_twice,
        "parents handed a wrong or missing child result": _wrong_result,
        "children enqueued twice": _child_twice,
        "dependents started early": _early,
        "dependents against their policy": _against,
        "batch callbacks fired twice": _cb_twice,
        "batch callbacks never fired": _cb_never,
        "batch callbacks with wrong counts": _cb_counts,
        "bodies run again after a crash": _child_again,
        "parents replayed": _parent_replayed,
    },
    tallies=frozenset({"flows enqueued", "latest release after the last child finished (ms)"}),
)
