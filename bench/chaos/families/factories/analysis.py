"""The factories' figures: pure functions of the evidence (the feed's answers, the ledger the
handlers, the endpoint and the hooked driver wrote, the rows, and what `gather` read back from
the store at the end), one group per factory.

- postings: each key posted once with its lines; balances are the distinct postings' sums;
  every currency sums to zero.
- consumer: every record produced handled; a record handled twice only in a batch a fault cut
  (its cursor never committed); the cursor never behind a batch it committed; on pg, the
  handler's writes in the turn's transaction exactly once.
- webhooks: every event 2xx'd; a second 2xx only after a kill -9 (or an outage, or a drain)
  between the first and its settle; one attempt recorded per claim, each delivered one a 2xx.
- sweeps (backfills, imports): every row handled, the ledger's count the rows exactly, each
  sweep completed once.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from bench.chaos.families import Evidence
from bench.chaos.families.factories.decl import (
    SWEEP_ROWS,
    SWEEPS,
    backfill_name,
    import_name,
)
from bench.chaos.figures import Config, Ends, Figure, Findings, lost_figures

#: A sender that got its 2xx and reached no attempt record died within this long after it, or
#: its repeat is not the kill's.
SENDER_DEATH_MS = 3_000.0


def sweep_expected(name: str, backend: str) -> set[str]:
    """The row ids sweep `name` must hand over, as text."""
    for k in range(SWEEPS):
        if name == import_name(k):
            return {f"imp{k}-{n:05d}" for n in range(1, SWEEP_ROWS + 1)}
        if name == backfill_name(k):
            base = k * 10_000 if backend == "pg" else 0
            return {str(base + n) for n in range(1, SWEEP_ROWS + 1)}
    return set()


def order(value: Any) -> tuple[int, ...]:
    """A record's (or cursor's) place: a table key, or a stream id `ms-seq`; None first."""
    if value is None:
        return (-1,)
    text = str(value)
    return tuple(int(p) for p in text.split("-")) if "-" in text else (int(text),)


def in_outage(cfg: Config, start: float, end: float) -> bool:
    return any(a <= end and b >= start for a, b in cfg.outages)


def _enqueued(ev: Evidence, name: str) -> list[dict[str, Any]]:
    return [a for a in ev.answers if a.get("ev") == "enqueued" and a.get("name") == name]


# -- postings ---------------------------------------------------------------------------------


def _lines(raw: Iterable[Any]) -> list[tuple[str, str, int]]:
    return sorted((str(a), str(c), int(m)) for a, c, m in raw)


def posting_figures(ev: Evidence) -> list[Figure]:
    answered = [a for a in _enqueued(ev, "chaos_fac_post") if a.get("id")]
    intended: dict[str, list[tuple[str, str, int]]] = {}
    for a in answered:
        intended[a["key"]] = _lines(a["input"]["lines"])
    stored: dict[str, Any] = ev.extra.get("postings", {})
    lost = sorted(k for k in intended if stored.get(k) is None)
    other = sorted(
        k for k, lines in intended.items() if stored.get(k) and _lines(stored[k]) != lines
    )
    applied: Counter[str] = Counter()
    already = 0
    for row in ev.rows.values():
        if row.name != "chaos_fac_post" or not row.result_json:
            continue
        result = json.loads(row.result_json)
        if result.get("status") == "applied":
            applied[result["key"]] += 1
        elif result.get("status") == "already_applied":
            already += 1
    twice = sorted(k for k, n in applied.items() if n > 1)
    want: Counter[tuple[str, str]] = Counter()
    for lines in intended.values():
        for acct, cur, amount in lines:
            want[acct, cur] += amount
    have = {(str(a), str(c)): int(b) for a, c, b in ev.extra.get("balances", [])}
    off = sorted(
        f"{a}/{c}: {have.get((a, c), 0)} != {want.get((a, c), 0)}"
        for a, c in set(want) | set(have)
        if have.get((a, c), 0) != want.get((a, c), 0)
    )
    per_currency: Counter[str] = Counter()
    for (_, cur), amount in have.items():
        per_currency[cur] += amount
    unbalanced = sorted(f"{c}: {n}" for c, n in per_currency.items() if n)
    repeats = [a for a in answered if a.get("repeat")]
    return [
        Figure("postings: keys enqueued", len(intended), False, f"{len(repeats)} enqueued again"),
        Figure(
            "postings: repeats answered already_applied",
            already,
            False,
            "a later job of a posted key (or a retry after the post) wrote nothing",
        ),
        Figure("postings lost", len(lost), True, "answered keys with no posting stored", lost[:3]),
        Figure(
            "postings stored with other lines",
            len(other),
            True,
            "the stored posting is not the lines its key was enqueued with",
            other[:3],
        ),
        Figure(
            "postings applied twice",
            len(twice),
            True,
            "two runs answered `applied` for one key",
            twice[:3],
        ),
        Figure(
            "balances off the distinct postings",
            len(off),
            True,
            "an account's balance is not the sum of its distinct postings' lines",
            off[:3],
        ),
        Figure(
            "currencies not summing to zero",
            len(unbalanced),
            True,
            "the balances of one currency over every account",
            unbalanced[:3],
        ),
    ]


# -- the consumer -----------------------------------------------------------------------------


def _cause(ev: Evidence, ends: Ends, batch: dict[str, Any], until: float) -> str:
    """What cut a batch whose cursor never committed, before its records were read again at
    `until`: `kill` (its process killed -9 after it), `other` (its process drained or exited,
    or the store was down), or `none`."""
    pid, t = batch["pid"], float(batch["t"])
    if t <= ends.killed.get(pid, until + 1) <= until:
        return "kill"
    # Alive at `t`, so a SIGTERM before the re-read means a drain cut it (its deadline cancels
    # the run), even one sent before the batch began.
    if ends.termed.get(pid, until + 1) <= until or (
        pid in ends.on_own and t <= ends.exited.get(pid, until + 1) <= until
    ):
        return "other"
    return "other" if in_outage(ev.cfg, t, until) else "none"


def consumer_figures(ev: Evidence) -> list[Figure]:
    ends = Ends.of(ev.lives)
    batches = ev.of("consumed")
    produced = {str(r) for r in ev.extra.get("produced", [])}
    handled: dict[str, list[int]] = defaultdict(list)
    early: list[str] = []
    behind: list[str] = []
    high: tuple[int, ...] = (-1,)
    for n, b in enumerate(batches):
        at = order(b["cursor"])
        if at < high:
            behind.append(f"batch at {b['t']:.0f} read after {b['cursor']}, behind {high}")
        high = max(high, at)
        for rec in b["ids"]:
            handled[str(rec)].append(n)
            if order(rec) <= at:
                early.append(f"{rec} handled after cursor {b['cursor']}")
    final = ev.extra.get("cursor")
    if final is not None and order(final) < high:
        behind.append(f"the stored cursor {final} is behind {high}")
    causes: Counter[str] = Counter()
    unexcused: list[str] = []
    for rec, ns in handled.items():
        for first, again in itertools.pairwise(ns):
            why = _cause(ev, ends, batches[first], float(batches[again]["t"]))
            causes[why] += 1
            if why == "none":
                unexcused.append(f"{rec}: batch {first} (pid {batches[first]['pid']}) then {again}")
    never = sorted(produced - handled.keys(), key=order)
    beside = _overlaps(batches, ev.of("handled"))
    figures = [
        Figure("consumer: records produced", len(produced), False, f"{len(batches)} batches"),
        Figure(
            "consumer records never handled",
            len(never),
            True,
            "records the source holds that no batch handed over",
            never[:3],
        ),
        Figure(
            "consumer records handled at or before their batch's cursor",
            len(early),
            True,
            "a batch read after a cursor handed over a record the cursor had passed",
            early[:3],
        ),
        Figure(
            "consumer cursor behind a committed batch",
            len(behind),
            True,
            "a batch read after (or the stored cursor at) a cursor behind one already read after",
            behind[:3],
        ),
        Figure(
            "consumer turns run beside another",
            len(beside),
            True,
            "a batch handed over while another batch's handler still ran: one run at a time"
            " (the lease)",
            beside[:3],
        ),
        Figure(
            "consumer records handled twice outside a batch a fault cut",
            len(unexcused),
            True,
            "handled again, yet its first batch's process was not killed, drained or cut off",
            unexcused[:3],
        ),
        Figure(
            "consumer records handled twice in a batch a kill -9 cut",
            causes["kill"],
            False,
            "at least once: the batch's cursor never committed (the documented last batch)",
        ),
        Figure(
            "consumer records handled twice in a batch an outage or a drain cut",
            causes["other"],
            False,
            "at least once: the store was down, or the run was drained, before the cursor",
        ),
    ]
    return figures + _exactly_once(ev, produced)


def _overlaps(batches: list[dict[str, Any]], ends: list[dict[str, Any]]) -> list[str]:
    """Batches that began while an earlier one's handler ran (its end line came after): a
    handler cut by a kill or a cancellation writes no end line, and counts for nothing."""
    end_of: dict[tuple[int, str], float] = {}
    for d in ends:
        end_of.setdefault((d["pid"], str(d["ids"][0])), float(d["t"]))
    found = []
    for n, b in enumerate(batches):
        end = end_of.get((b["pid"], str(b["ids"][0])))
        if end is None:
            continue
        for later in batches[n + 1 :]:
            if float(later["t"]) >= end:
                break
            found.append(f"{later['ids'][0]} (pid {later['pid']}) beside {b['ids'][0]}")
    return found


def _exactly_once(ev: Evidence, produced: set[str]) -> list[Figure]:
    """pg: the handler's writes on the turn's connection commit with the cursor."""
    done = ev.extra.get("done")
    counts = Counter(str(d) for d in done or [])
    twice = sorted((r for r, n in counts.items() if n > 1), key=order)
    missing = sorted(produced - counts.keys(), key=order) if done is not None else []
    note = "pg (a table source) only" if done is None else "the turn's transaction"
    return [
        Figure(
            "consumer records written twice by committed turns",
            len(twice),
            True,
            note,
            twice[:3],
        ),
        Figure(
            "consumer records never written by a committed turn",
            len(missing),
            True,
            note,
            missing[:3],
        ),
    ]


# -- webhooks ---------------------------------------------------------------------------------


def _repeat_cause(
    ev: Evidence, ends: Ends, puts: list[dict[str, Any]], first: float, again: float
) -> str:
    """Why an event was 2xx'd again at `again` after a 2xx at `first`: `kill` (the sender of
    the first was killed -9 between it and its settle), `other` (an outage or a drain in
    between), or `none`."""
    sender = next(
        (p for p in puts if first <= float(p["t"]) < again and p["outcome"] == "delivered"), None
    )
    if sender is not None:
        # Its repeat comes after the kill (the lease has to run out first).
        if float(sender["t"]) <= ends.killed.get(sender["pid"], again + 1) <= again:
            return "kill"
        if ends.termed.get(sender["pid"], again + 1) <= again:
            return "other"
    elif any(first <= k <= first + SENDER_DEATH_MS for k in ends.killed.values()):
        return "kill"
    elif any(first <= t <= first + SENDER_DEATH_MS for t in ends.termed.values()):
        return "other"
    return "other" if in_outage(ev.cfg, first, again) else "none"


def webhook_figures(ev: Evidence) -> list[Figure]:
    ends = Ends.of(ev.lives)
    events = {a["event"] for a in _enqueued(ev, "chaos_fac_hook") if a.get("id")}
    ok: dict[str, list[float]] = defaultdict(list)
    failed = 0
    for d in ev.of("delivery"):
        if 200 <= int(d["status"]) < 300:
            ok[d["event"]].append(float(d["t"]))
        else:
            failed += 1
    puts: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in ev.of("put"):
        puts[p["event"]].append(p)
    causes: Counter[str] = Counter()
    unexcused: list[str] = []
    for event, ts in ok.items():
        for first, again in itertools.pairwise(ts):
            why = _repeat_cause(ev, ends, puts[event], first, again)
            causes[why] += 1
            if why == "none":
                unexcused.append(f"{event}: 2xx at {first:.0f} and {again:.0f}")
    never = sorted(events - ok.keys())
    attempts: list[dict[str, Any]] = ev.extra.get("attempts", [])
    per_claim = Counter((a["job_id"], a["claims"]) for a in attempts)
    doubled = sorted(f"{j} claim {c}" for (j, c), n in per_claim.items() if n > 1)
    delivered = Counter(a["event_id"] for a in attempts if a["outcome"] == "delivered")
    unseen = sorted(e for e, n in delivered.items() if n > len(ok.get(e, [])))
    completed = {
        str(json.loads(r.input_json)["id"])
        for r in ev.rows.values()
        if r.name == "chaos_fac_hook" and r.state == "completed"
    }
    unrecorded = sorted(completed - delivered.keys())
    return [
        Figure(
            "webhooks: events enqueued",
            len(events),
            False,
            f"{sum(map(len, ok.values()))} 2xx and {failed} 5xx at the endpoint;"
            f" {len(attempts)} attempts recorded",
        ),
        Figure(
            "webhook events never delivered", len(never), True, "no 2xx at the endpoint", never[:3]
        ),
        Figure(
            "webhook events 2xx'd again with no kill, outage or drain",
            len(unexcused),
            True,
            "a repeat only a death between the endpoint's 2xx and the settle may explain",
            unexcused[:3],
        ),
        Figure(
            "webhook events 2xx'd again after a kill -9",
            causes["kill"],
            False,
            f"the first 2xx's sender was killed before its settle ({len(ends.killed)} kills)",
        ),
        Figure(
            "webhook events 2xx'd again after an outage or a drain",
            causes["other"],
            False,
            "the store was down (or the sender drained) between the 2xx and its settle",
        ),
        Figure(
            "webhook claims with two attempts recorded",
            len(doubled),
            True,
            "the store holds one attempt per claim",
            doubled[:3],
        ),
        Figure(
            "webhook attempts recorded delivered without a 2xx",
            len(unseen),
            True,
            "more delivered attempts recorded for an event than the endpoint answered 2xx",
            unseen[:3],
        ),
        Figure(
            "webhook events completed with no delivered attempt recorded",
            len(unrecorded),
            True,
            "the job completed, yet no attempt of it was recorded delivered",
            unrecorded[:3],
        ),
    ]


# -- sweeps -----------------------------------------------------------------------------------


def sweep_figures(ev: Evidence) -> list[Figure]:
    started = {a["sweep"] for a in ev.answers if a.get("ev") == "enqueued" and a.get("sweep")}
    handled: dict[str, Counter[str]] = defaultdict(Counter)
    for d in ev.of("swept"):
        handled[d["name"]].update(str(i) for i in d["ids"])
    records: dict[str, list[dict[str, Any]]] = ev.extra.get("sweeps", {})
    skipped: list[str] = []
    miscounted: list[str] = []
    not_once: list[str] = []
    again = 0
    for name in sorted(started):
        want = sweep_expected(name, ev.cfg.backend)
        got = handled.get(name, Counter())
        missing = want - got.keys()
        if missing:
            skipped.append(f"{name}: {len(missing)} rows, e.g. {sorted(missing)[:2]}")
        again += sum(n - 1 for n in got.values())
        done = [r for r in records.get(name, []) if r["status"] == "completed"]
        if len(done) != 1:
            not_once.append(f"{name}: {len(done)} completed entries")
        for r in done:
            if r["rows"] != len(want):
                miscounted.append(f"{name}: ledger {r['rows']} rows, the source {len(want)}")
    return [
        Figure("sweeps: started", len(started), False, "backfills and imports"),
        Figure(
            "sweep rows never handled",
            len(skipped),
            True,
            "sweeps that skipped rows of their source",
            skipped[:3],
        ),
        Figure(
            "sweeps whose ledger count is not their rows",
            len(miscounted),
            True,
            "the completed entry's row count is not the source's (a batch counted twice or lost)",
            miscounted[:3],
        ),
        Figure(
            "sweeps not completed exactly once",
            len(not_once),
            True,
            "each sweep has exactly one completed ledger entry",
            not_once[:3],
        ),
        Figure(
            "sweep rows handled again",
            again,
            False,
            "at least once: a backfill's window of batches (an import's page) a crash"
            " interrupted before its step record",
        ),
    ]


# -- the whole ----------------------------------------------------------------------------------


def analyse(ev: Evidence) -> Findings:
    answered = {str(a["id"]) for a in ev.answers if a.get("ev") == "enqueued" and a.get("id")}
    failed = sorted(
        f"{r.id} {r.name} {r.state}" for r in ev.rows.values() if r.state in ("dead", "failed")
    )
    figures = [
        *lost_figures(ev.cfg, answered, ev.rows),
        Figure(
            "jobs that ended dead or failed",
            len(failed),
            False,
            "a factory's job gave up (its retries spent, or refused)",
            failed[:3],
        ),
        *posting_figures(ev),
        *consumer_figures(ev),
        *webhook_figures(ev),
        *sweep_figures(ev),
    ]
    codes = Counter(
        (r.last_error or "-")[:60] for r in ev.rows.values() if r.state in ("dead", "failed")
    )
    return Findings(figures, {"dead or failed jobs, by their last error": dict(codes)})
