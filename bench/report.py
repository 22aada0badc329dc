"""The markdown table of one result file: medians, the machine, and how each worker ran."""

from __future__ import annotations

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
    "p99_ms": ("p99 ms", "{:.2f}"),
    "client_cpu_s_per_1k": ("client CPU s/1k", "{:.3f}"),
    "server_cpu_s_per_1k": ("server CPU s/1k", "{:.3f}"),
}
METRICS = tuple(COLUMNS)


def _cell(key: str, row: dict[str, Any], config: dict[str, Any]) -> str:
    value = row[key]
    if value is None:
        return "no bulk API" if key == "bulk_per_s" else "-"
    text = COLUMNS[key][1].format(value)
    if key == "drain_per_s" and row["drain_jobs"] != config["drain_jobs"]:
        text += f" ({row['drain_jobs']:,.0f} jobs)"
    return text


def render(result: dict[str, Any]) -> str:
    config, about = result["config"], result["machine"]
    runs = config["runs"]
    title = (
        f"### {BACKENDS[result['backend']]}: {about['date'][:10]}, {about['nproc']} cores"
        f" ({about['cpu']}), Python {about['python']}, {about['server']},"
        f" median of {runs} run{'s' if runs > 1 else ''}"
    )
    if result["dry_run"]:
        title += " (DRY RUN: tiny counts, the numbers mean nothing)"
    elif about["load_before"][0] >= BUSY_LOAD:
        title += f" (BUSY MACHINE, load {about['load_before'][0]:.2f}: not for the README)"
    if about["commit_after"] != about["commit"]:
        title += f" (THE TREE MOVED from {about['commit']} to {about['commit_after']} mid-run)"
    lines = [
        title,
        "",
        "| system | " + " | ".join(heading for heading, _ in COLUMNS.values()) + " |",
        "|---|" + "---:|" * len(COLUMNS),
    ]
    for label, row in result["median"].items():
        name = f"{label} {about['versions'][label]}"
        if label == "ultimat3-jobs":
            name += f" ({about['commit']})"
        if "drain_per_s" in row:
            cells = " | ".join(_cell(key, row, config) for key in METRICS)
        else:
            cells = " | ".join(["failed (see the JSON)"] + ["-"] * (len(METRICS) - 1))
        if row["failed_runs"] and "drain_per_s" in row:
            name += f" ({row['failed_runs']} of {runs} runs failed)"
        lines.append(f"| {name} | {cells} |")
    load_before, load_after = about["load_before"][0], about["load_after"][0]
    lines += [
        "",
        f"Enqueue: {config['enqueue_jobs']:,} jobs, one call each. Bulk: {config['bulk_jobs']:,}"
        f" jobs through the system's bulk API. Drain: {config['drain_jobs']:,} pre-enqueued"
        " no-op jobs, one worker process, first claim to last finish as the store shows them."
        f" Latency: {config['latency_rate']:g} jobs/s for {config['latency_seconds']:g} s on an"
        " idle worker, enqueue call to job start. CPU: seconds per 1,000 drained jobs, client ="
        " the worker process (with its children), server = every server process."
        f" Load average {load_before:.2f} before, {load_after:.2f} after.",
        "",
        *(f"- {label}: {note}" for label, note in result["workers"].items()),
    ]
    return "\n".join(lines)
