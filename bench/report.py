"""The markdown of one result file: every variant's medians, then ours over a peer in pairs,
each ratio taken within one run and its median over the runs; the machine and how each worker
ran. Reads nothing but the result dict (what `bench/harness.py` writes)."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

BACKENDS = {"pg": "Postgres", "redis": "Redis"}
# A one-minute load average at the start above this means other work shared the two cores.
BUSY_LOAD = 1.0
# Each metric, its column heading, and its format.
COLUMNS = {
    "enqueue_per_s": ("enqueue/s", "{:,.0f}"),
    "bulk_per_s": ("bulk/s", "{:,.0f}"),
    "drain_per_s": ("drain/s", "{:,.0f}"),
    "p50_ms": ("p50 ms", "{:.2f}"),
    "p95_ms": ("p95 ms", "{:.2f}"),
    "p99_ms": ("p99 ms", "{:.2f}"),
    "stream_p50_ms": ("p50 ms at 200/s", "{:.2f}"),
    "stream_p95_ms": ("p95 ms at 200/s", "{:.2f}"),
    "client_cpu_s_per_1k": ("client CPU s/1k", "{:.3f}"),
    "server_cpu_s_per_1k": ("server CPU s/1k", "{:.3f}"),
    "wal_bytes_per_job": ("WAL bytes/job", "{:,.0f}"),
    "statements_per_job": ("statements/job", "{:.3f}"),
    "commits_per_job": ("commits/job", "{:.3f}"),
}
METRICS = tuple(COLUMNS)
# Measured once per system and run: they do not depend on the worker's settings.
SYSTEM_METRICS = ("enqueue_per_s", "bulk_per_s")
# Read from the database's own counters: Postgres only.
PG_METRICS = ("wal_bytes_per_job", "statements_per_job", "commits_per_job")
# For these a higher ratio of ours over the peer is better; for every other metric, worse.
HIGHER_IS_BETTER = frozenset({"enqueue_per_s", "bulk_per_s", "drain_per_s"})
BEST = "best"


def metrics_of(backend: str) -> tuple[str, ...]:
    """The table's metrics on `backend`."""
    return METRICS if backend == "pg" else tuple(m for m in METRICS if m not in PG_METRICS)


def _system_of(row: str) -> str:
    return row.partition(":")[0]


def medians(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per row (every system's name, every variant's key): how many of its runs failed, and
    the median over the others of each metric it has (None where no run has a value)."""
    out: dict[str, dict[str, Any]] = {}
    for row in [*result["systems"], *result["rows"]]:
        mine = [r for r in result["runs"] if r["row"] == row]
        good = [r for r in mine if "error" not in r]
        summary: dict[str, Any] = {"failed_runs": len(mine) - len(good), "runs": len(good)}
        for key in {k for r in good for k in r} - {"run", "row"}:
            values = [r[key] for r in good if r.get(key) is not None]
            summary[key] = statistics.median(values) if values else None
        out[row] = summary
    return out


def pick(records: list[dict[str, Any]], row: str) -> dict[str, Any] | None:
    """The record of `row` among one run's good records; for "<system>:best", the variant of
    that system with the highest drain in this run. None if it is missing or failed."""
    system, _, variant = row.partition(":")
    if variant == BEST:
        drained = [r for r in records if r["row"].startswith(f"{system}:") and r.get("drain_per_s")]
        return max(drained, key=lambda r: r["drain_per_s"], default=None)
    return next((r for r in records if r["row"] == row), None)


def ratios(result: dict[str, Any]) -> list[dict[str, Any]]:
    """For every pair and every metric its rows have: ours over the peer within each run, and
    the median, lowest and highest of those per-run ratios. A run where either side failed or
    has no value (a system without a bulk API) gives no ratio; a pair with no ratio in any run
    has median None. For "best" rows, which variant was best in each run."""
    runs = sorted({r["run"] for r in result["runs"]})
    good = {
        run: [r for r in result["runs"] if r["run"] == run and "error" not in r] for run in runs
    }
    out = []
    for pair in result["pairs"]:
        per_system = ":" not in pair["num"]
        metrics = [m for m in metrics_of(result["backend"]) if (m in SYSTEM_METRICS) == per_system]
        picked = {run: (pick(good[run], pair["num"]), pick(good[run], pair["den"])) for run in runs}
        cells: dict[str, dict[str, Any]] = {}
        for metric in metrics:
            values = [
                num[metric] / den[metric]
                for num, den in picked.values()
                if num is not None
                and den is not None
                and num.get(metric) is not None
                and den.get(metric)  # None, or 0: no ratio
            ]
            cells[metric] = {
                "per_run": values,
                "median": statistics.median(values) if values else None,
                "min": min(values, default=None),
                "max": max(values, default=None),
            }
        best = {}
        for i, side in enumerate(("num", "den")):
            if pair[side].endswith(f":{BEST}"):
                chosen = (sides[i] for sides in picked.values())
                best[side] = Counter(r["row"].partition(":")[2] for r in chosen if r is not None)
        out.append({**pair, "runs": len(runs), "cells": cells, "best": best})
    return out


def _cell(key: str, value: Any, drain_jobs: int | None, config: dict[str, Any]) -> str:
    if value is None:
        if key == "bulk_per_s":
            return "no bulk API"
        return "n/a" if key in PG_METRICS else "-"
    text = COLUMNS[key][1].format(value)
    if key == "drain_per_s" and drain_jobs is not None and drain_jobs != config["drain_jobs"]:
        text += f" ({drain_jobs:,.0f} jobs)"
    return text


def _title(result: dict[str, Any]) -> str:
    config, about = result["config"], result["machine"]
    runs = config["runs"]
    load = about["load_before"][0]
    title = (
        f"### {BACKENDS[result['backend']]}: {about['date'][:10]}, {about['nproc']} cores"
        f" ({about['cpu']}), load {load:.2f}, Python {about['python']}, {about['server']},"
        f" ours at {about['commit']}, median of {runs} run{'s' if runs > 1 else ''}"
        " (variants interleaved)"
    )
    if result["dry_run"]:
        title += " (DRY RUN: tiny counts, the numbers mean nothing)"
    elif load >= BUSY_LOAD:
        title += f" (BUSY MACHINE, load {load:.2f}: not for the README)"
    if about["commit_after"] != about["commit"]:
        title += f" (THE TREE MOVED from {about['commit']} to {about['commit_after']} mid-run)"
    return title


def _variants_table(result: dict[str, Any], summary: dict[str, dict[str, Any]]) -> list[str]:
    config, about = result["config"], result["machine"]
    metrics = metrics_of(result["backend"])
    lines = [
        "| system | settings | " + " | ".join(COLUMNS[m][0] for m in metrics) + " |",
        "|---|---|" + "---:|" * len(metrics),
    ]
    variants = Counter(row["system"] for row in result["rows"].values())
    seen: set[str] = set()
    for key, row in result["rows"].items():
        system = result["systems"][row["system"]]
        name = system["label"]
        first = row["system"] not in seen
        seen.add(row["system"])
        if first:
            name += f" {system['version']}"
            if row["system"] == "ours":
                name += f" ({about['commit']})"
        settings = row["settings"]
        if variants[row["system"]] > 1:
            settings = f"{row['variant']}: {settings}"
        if row["default"]:
            settings += " (default)"
        mine, once = summary[key], summary[row["system"]]
        cells = []
        for m in metrics:
            if m in SYSTEM_METRICS:
                if not first:
                    cells.append("(above)")
                elif once["runs"] == 0:
                    cells.append("failed")
                else:
                    cells.append(_cell(m, once.get(m), None, config))
            elif mine["runs"] == 0:
                cells.append("failed")
            else:
                cells.append(_cell(m, mine.get(m), mine.get("drain_jobs"), config))
        failed = mine["failed_runs"]
        if failed and mine["runs"]:
            settings += f" ({failed} of {failed + mine['runs']} runs failed)"
        lines.append(f"| {name} | {settings} | " + " | ".join(cells) + " |")
    return lines


def _ratio_cell(metric: str, cell: dict[str, Any], runs: int) -> str:
    if cell["median"] is None:
        return "n/a (no bulk API)" if metric == "bulk_per_s" else "n/a"
    text = f"{cell['median']:.2f}"
    if len(cell["per_run"]) > 1:
        text += f" ({cell['min']:.2f}–{cell['max']:.2f})"
    if len(cell["per_run"]) < runs:
        text += f" [{len(cell['per_run'])} of {runs} runs]"
    return text


def _ratios_table(result: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    systems = result["systems"]
    metrics = metrics_of(result["backend"])
    peers = sorted({_system_of(r["den"]) for r in rows})
    heading = " / ".join(systems[s]["label"] for s in peers)
    lines = [
        f"| ours / {heading}: settings | " + " | ".join(COLUMNS[m][0] for m in metrics) + " |",
        "|---|" + "---:|" * len(metrics),
    ]
    notes = []
    for row in rows:
        cells = [
            _ratio_cell(m, row["cells"][m], row["runs"]) if m in row["cells"] else ""
            for m in metrics
        ]
        label = row["label"]
        if len(peers) > 1:
            label += f" ({systems[_system_of(row['den'])]['label']})"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
        for side, counts in row["best"].items():
            system = systems[_system_of(row[side])]["label"]
            picks = ", ".join(f"{v} in {n} of {row['runs']}" for v, n in counts.most_common())
            notes.append(f"{system}: {picks or 'none'}")
    lines += [
        "",
        "Each cell: ours ÷ the peer within one run, the median over the runs, the lowest and"
        " highest run's ratio in parentheses. Above 1 is better for ours in enqueue/s, bulk/s and"
        " drain/s, and WORSE in every other column: there above 1 means ours is slower or costs"
        " more.",
    ]
    if notes:
        lines.append("Best drain of each run: " + "; ".join(notes) + ".")
    return lines


def _notes(result: dict[str, Any]) -> list[str]:
    config, about = result["config"], result["machine"]
    lines = [
        f"Enqueue: {config['enqueue_jobs']:,} jobs, one call each. Bulk: {config['bulk_jobs']:,}"
        " jobs through the system's bulk API. Both once per system and run: the worker's settings"
        f" do not enter them. Drain: {config['drain_jobs']:,} pre-enqueued no-op jobs, one worker"
        " process, first claim to last finish as the store shows them. Latency:"
        f" {config['latency_rate']:g} jobs/s for {config['latency_seconds']:g} s on an idle"
        ' worker, enqueue call to job start; "at 200/s": the same at'
        f" {config.get('stream_rate', 200):g} jobs/s. CPU: seconds per 1,000 drained jobs,"
        " client = the worker process (with its children), server = the server's processes."
        f" Load average {about['load_before'][0]:.2f} before, {about['load_after'][0]:.2f} after.",
    ]
    if result["backend"] == "pg":
        lines[0] += (
            " WAL, statements and commits: per drained job, from the worker's start to its exit"
            " (its start-up and shut-down included), the harness's own statements subtracted."
        )
    lines += ["", f"- Server: {about['server_note']}"]
    for name, system in result["systems"].items():
        rows = [row for row in result["rows"].values() if row["system"] == name]
        line = f"- {system['label']} {system['version']}: {system['note']}."
        if len(rows) > 1:
            line += " " + "; ".join(
                f"{row['variant']}{' (default)' if row['default'] else ''}: {row['passed']}"
                for row in rows
            )
            line += "."
        lines.append(line)
    return lines


def render(result: dict[str, Any]) -> str:
    """The result's two tables, under a title that carries the date, the machine, its load
    and our commit, with notes on how each worker ran."""
    summary = medians(result)
    return "\n".join(
        [
            _title(result),
            "",
            *_variants_table(result, summary),
            "",
            *_notes(result),
            "",
            *_ratios_table(result, ratios(result)),
        ]
    )
