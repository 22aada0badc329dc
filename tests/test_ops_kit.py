"""The operations kit in deploy/ (Prometheus alerts, the Grafana dashboard, the KEDA example)
names only metrics our exporter serves: every `ujobs_*` name in it is checked against the
families a real `WorkerMetrics` registry yields (a worker with a backfill, a relay and a
scheduler beside it, on the memory driver), so a renamed metric fails here. The rules are also
checked by `promtool check rules` and their unit tests run by `promtool test rules` wherever
promtool is on PATH (Debian's `prometheus` package)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobs_core.operator.metrics import WorkerMetrics
from jobs_core.outbox import Relay
from jobs_core.scheduler import Scheduler
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver, MemoryOutbox
from tests.core import backfill_app

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\bujobs_[a-z0-9_]+\b")
#: The series a family of each type adds to its own name in the text format.
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


async def _families() -> dict[str, str]:
    driver = MemoryDriver()
    worker = Worker(driver, [backfill_app.nums])
    relay = Relay(MemoryOutbox(), driver, clock=worker.clock)
    scheduler = Scheduler(driver, [])
    registry = WorkerMetrics(
        worker, asyncio.get_running_loop(), relay, scheduler=scheduler
    ).registry
    # The store gauges are read on the loop: collected from a thread, as a scrape is.
    families = await asyncio.to_thread(lambda: list(registry.collect()))
    await driver.close()
    return {f.name: f.type for f in families}


@pytest.fixture(scope="module")
def exported() -> set[str]:
    """Every series name a scrape of a fully equipped worker can hold."""
    families = asyncio.run(_families())
    return {name + s for name, kind in families.items() for s in SUFFIXES.get(kind, ("",))}


def names_in(expr: str) -> set[str]:
    return set(METRIC.findall(expr))


def test_the_registry_serves_the_families_the_kit_is_about(exported: set[str]) -> None:
    for name in (
        "ujobs_queue_demand",
        "ujobs_queue_oldest_ready_seconds",
        "ujobs_queue_dead_jobs",
        "ujobs_worker_in_flight",
        "ujobs_outbox_oldest_seconds",
        "ujobs_scheduler_leading",
        "ujobs_jobs_processed_total",
        "ujobs_job_run_seconds_bucket",
    ):
        assert name in exported


def test_alert_rules_are_well_formed_and_name_only_exported_metrics(exported: set[str]) -> None:
    doc = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text(encoding="utf-8"))
    rules = [r for g in doc["groups"] for r in g["rules"]]
    alerts = {r["alert"] for r in rules}
    assert alerts == {
        "UjobsOldestReadyJobTooOld",
        "UjobsDeadJobsGrowing",
        "UjobsNoLiveWorker",
        "UjobsStoreDown",
        "UjobsRelayBacklog",
        "UjobsSchedulerWithoutLeader",
    }
    for rule in rules:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}, rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        used = names_in(rule["expr"])
        assert used, f"{rule['alert']} names none of our metrics"
        assert used <= exported, f"{rule['alert']}: {used - exported} are not exported"
    tests = yaml.safe_load((DEPLOY / "prometheus" / "alerts.test.yml").read_text("utf-8"))
    tested = {t["alertname"] for case in tests["tests"] for t in case["alert_rule_test"]}
    assert tested == alerts
    series = {s["series"] for case in tests["tests"] for s in case["input_series"]}
    assert {n for s in series for n in names_in(s)} <= exported


def test_promtool_checks_and_unit_tests_the_rules_where_it_is_installed() -> None:
    """Structure and names are checked above on every machine; promtool adds PromQL parsing
    and the rules' unit tests (each alert fires on a sick fleet, none on a healthy one)."""
    promtool = shutil.which("promtool")
    if promtool is None:  # not installed here: the test above still guards the file
        assert (DEPLOY / "prometheus" / "alerts.test.yml").is_file()
        return
    where = DEPLOY / "prometheus"
    for args in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"]):
        done = subprocess.run(
            [promtool, *args], cwd=where, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "SUCCESS" in done.stdout + done.stderr


def _exprs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for v in node.values() for e in _exprs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _exprs(v)]
    return []


def test_grafana_dashboard_is_json_over_exported_metrics(exported: set[str]) -> None:
    dash = json.loads((DEPLOY / "grafana" / "ujobs.json").read_text(encoding="utf-8"))
    panels = dash["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        assert p["targets"] and {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
    exprs = _exprs(panels)
    assert len(exprs) == sum(len(p["targets"]) for p in panels)
    for expr in exprs:
        used = names_in(expr)
        assert used and used <= exported, f"{expr}: {used - exported} are not exported"
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert names_in(variables["queue"]["query"]) <= exported


def test_keda_scaled_object_scales_on_queue_demand(exported: set[str]) -> None:
    doc = yaml.safe_load((DEPLOY / "keda" / "scaledobject.yml").read_text(encoding="utf-8"))
    assert doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject"
    assert doc["spec"]["minReplicaCount"] >= 1  # the workers serve the gauge it scales on
    (trigger,) = doc["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert names_in(trigger["metadata"]["query"]) == {"ujobs_queue_demand"} <= exported
    assert float(trigger["metadata"]["threshold"]) > 0


async def test_the_scheduler_gauge_says_whether_this_process_leads() -> None:
    """`ujobs_scheduler_leading` is 0 before the scheduler beside the worker leads, 1 once it
    does, 0 again once it stopped (what `UjobsSchedulerWithoutLeader` sums)."""
    driver = MemoryDriver()
    worker = Worker(driver, [backfill_app.nums])
    scheduler = Scheduler(driver, [])
    registry = WorkerMetrics(worker, asyncio.get_running_loop(), scheduler=scheduler).registry

    async def leading() -> float | None:
        value = await asyncio.to_thread(registry.get_sample_value, "ujobs_scheduler_leading")
        return value

    assert await leading() == 0
    await scheduler.start()
    try:
        for _ in range(200):
            if scheduler.leading:
                break
            await asyncio.sleep(0.01)
        assert await leading() == 1
    finally:
        await scheduler.stop(1)
    assert await leading() == 0
    await driver.close()
