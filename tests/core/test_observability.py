"""Traces (OpenTelemetry's SDK with its in-memory exporter), Prometheus metrics scraped over HTTP,
the health check, and sensitive values scrubbed from every log line a failing run writes."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import urllib.error
import urllib.request
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client.parser import text_string_to_metric_families

from jobs_core import tracing
from jobs_core.cli.base import _Formatter
from jobs_core.clock import FakeClock
from jobs_core.context import JobContext
from jobs_core.facade import Jobs
from jobs_core.operator import metrics
from jobs_core.operator.metrics import serve
from jobs_core.outbox import OutboxClaim, OutboxRelease, Relay
from jobs_core.records import ClaimParams, SweepAdvance, SweepStart
from jobs_core.retry import Retry
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_memory import MemoryDriver, MemoryOutbox
from tests.core import backfill_app
from tests.core.support import T0, counting, declare, until

CARD = "5500005555555559"


async def pay(input: Any, ctx: JobContext) -> dict[str, bool]:
    if input.get("fail"):
        raise RuntimeError(f"gateway refused {input['card']}")
    return {"ok": True}


def fast(driver: MemoryDriver, handles: list[Any], **options: Any) -> Worker:
    return Worker(driver, handles, poll_floor=0.001, poll_ceiling=0.01, lease=5.0, **options)


async def test_an_enqueue_and_its_runs_are_one_trace(spans: InMemorySpanExporter) -> None:
    driver = MemoryDriver()
    handle = declare(
        pay, name="pay", sensitive=("card",), retry=Retry(attempts=2, base_ms=1, cap_ms=1)
    )
    jobs = Jobs(driver)
    ok = await jobs.enqueue(handle, {"n": 1})
    bad = await jobs.enqueue(handle, {"n": 2, "fail": True, "card": "4242424242424242"})
    many = await jobs.enqueue_many(handle, [{"n": 3}, {"n": 4}])
    rows = await driver.job_get_many([ok.id, bad.id, *(r.id for r in many)])
    stamped = {i: r.traceparent for i, r in rows.items()}
    assert all(tp is not None for tp in stamped.values())
    # One span for the batch: its two rows carry the same context.
    assert stamped[many[0].id] == stamped[many[1].id] != stamped[ok.id]
    worker = fast(driver, [handle])
    await worker.start()

    async def ended() -> bool:
        got = await driver.job_get_many(list(rows))
        return all(r.state in (JobState.COMPLETED, JobState.DEAD) for r in got.values())

    await until(ended)
    await worker.stop()
    finished = spans.get_finished_spans()
    producers = [s for s in finished if s.kind is SpanKind.PRODUCER]
    consumers = [s for s in finished if s.kind is SpanKind.CONSUMER]
    assert len(producers) == 3 and [s.name for s in producers] == ["publish default"] * 3
    assert producers[2].attributes is not None
    assert producers[2].attributes["messaging.batch.message_count"] == 2
    by_job = {}
    for s in consumers:
        assert s.attributes is not None
        by_job.setdefault(s.attributes["messaging.message.id"], []).append(s)
    assert len(by_job[bad.id]) == 2 and len(by_job[ok.id]) == 1
    for job_id, runs in by_job.items():
        tp = stamped[job_id]
        assert tp is not None
        for run in runs:
            # A child of the span that enqueued it, in the same trace.
            assert run.parent is not None and f"{run.parent.span_id:016x}" == tp.split("-")[2]
            assert f"{run.context.trace_id:032x}" == tp.split("-")[1]
    assert by_job[ok.id][0].attributes is not None
    assert by_job[ok.id][0].attributes["ujobs.outcome"] == "completed"
    failed = by_job[bad.id]
    assert all(r.status.status_code is StatusCode.ERROR for r in failed)
    assert [r.attributes["ujobs.outcome"] for r in failed if r.attributes] == [
        "retried",
        "dead-lettered",
    ]
    raised = [e for r in failed for e in r.events if e.name == "exception"]
    assert len(raised) == 2
    for e in raised:  # the exception is exported with the input's secrets scrubbed out
        assert e.attributes is not None
        assert e.attributes["exception.message"] == "gateway refused [redacted]"
        assert "4242424242424242" not in str(e.attributes["exception.stacktrace"])
        assert "RuntimeError" in str(e.attributes["exception.stacktrace"])


async def test_without_a_tracer_provider_nothing_is_stamped() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    driver = MemoryDriver()
    done = await Jobs(driver).enqueue(declare(pay, name="pay"), {"n": 1})
    assert (await driver.job_get_many([done.id]))[done.id].traceparent is None


def test_the_tracer_is_kept_and_a_missing_provider_asked_again_after_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Asking OpenTelemetry reads os.environ: a run asks at most once a RECHECK_S while no
    # provider is set, and keeps a set provider's tracer (a provider is set once).
    now = [1_000.0]
    monkeypatch.setattr(tracing.time, "monotonic", lambda: now[0])
    asked: list[object] = []
    provider: list[object] = [trace.ProxyTracerProvider()]

    def get_provider() -> object:
        asked.append(provider[0])
        return provider[0]

    monkeypatch.setattr(tracing.trace, "get_tracer_provider", get_provider)
    monkeypatch.setattr(tracing.trace, "get_tracer", lambda name, version=None: ("tracer", name))
    assert [tracing._tracer(), tracing._tracer()] == [None, None]
    assert len(asked) == 1
    provider[0] = object()  # set meanwhile: seen once the answer is RECHECK_S old
    now[0] += tracing.RECHECK_S / 2
    assert tracing._tracer() is None
    now[0] += tracing.RECHECK_S
    assert tracing._tracer() == ("tracer", tracing.SYSTEM)
    now[0] += 10 * tracing.RECHECK_S
    assert tracing.active() and len(asked) == 2  # kept: not asked again
    monkeypatch.setattr(tracing.trace, "get_tracer_provider", lambda: trace.ProxyTracerProvider())
    assert not tracing.active()  # another getter (a test's) is asked at once


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _value(text: str, metric: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        name, _, rest = line.partition("{") if "{" in line else line.partition(" ")
        if name == metric and (not labels or rest.startswith(want + "}")):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {metric}{{{want}}} in:\n{text}")


async def test_metrics_and_health_are_served_over_http() -> None:
    driver = MemoryDriver()
    handle = declare(pay, name="pay", retry=Retry(attempts=2, base_ms=1, cap_ms=1))
    jobs = Jobs(driver)
    ids = [r.id for r in await jobs.enqueue_many(handle, [{"n": n} for n in range(5)])]
    ids.append((await jobs.enqueue(handle, {"n": 9, "fail": True, "card": CARD})).id)
    worker = fast(driver, [handle])
    server = serve(worker, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.port}"
    try:
        status, body = await asyncio.to_thread(_get, base + "/healthz")
        assert status == 503 and json.loads(body)["status"] == "unhealthy"  # not started yet
        await worker.start()

        async def ended() -> bool:
            got = await driver.job_get_many(ids)
            return all(r.state in (JobState.COMPLETED, JobState.DEAD) for r in got.values())

        await until(ended)
        status, body = await asyncio.to_thread(_get, base + "/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok"
        status, text = await asyncio.to_thread(_get, base + "/metrics")
        assert status == 200
        labels = {"name": "pay", "queue": "default"}
        assert _value(text, "ujobs_jobs_processed_total", **labels) == 6
        assert _value(text, "ujobs_jobs_failed_total", **labels) == 2
        assert _value(text, "ujobs_jobs_retried_total", **labels) == 1
        assert _value(text, "ujobs_job_run_seconds_count", **labels) == 7
        assert _value(text, "ujobs_queue_dead_jobs", queue="default") == 1
        assert _value(text, "ujobs_queue_demand", queue="default") == 0
        assert _value(text, "ujobs_queue_oldest_ready_seconds", queue="default") == 0
        assert _value(text, "ujobs_queue_jobs", queue="default", state="completed") == 5
        assert _value(text, "ujobs_store_up") == 1
        assert CARD not in text
        assert (await asyncio.to_thread(_get, base + "/nope"))[0] == 404
        await worker.stop()
        status, _ = await asyncio.to_thread(_get, base + "/healthz")
        assert status == 503
    finally:
        server.close()


async def test_a_relay_beside_the_worker_reports_its_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Gauges of the outbox as staged, a failing row among them; then the relay's count."""
    monkeypatch.setattr(metrics, "STORE_CACHE_S", 0.0)  # each scrape reads the outbox again
    clock = FakeClock(T0)
    driver, outbox = MemoryDriver(), MemoryOutbox(clock=clock)
    handle = declare(pay, name="pay")
    with outbox.transaction() as tx:
        staged = [outbox.stage(tx, handle, {"n": n, "card": CARD}) for n in range(3)]
    token = "t"
    await outbox.outbox_claim(OutboxClaim(token, 1, 60_000, T0))
    await outbox.outbox_release(OutboxRelease(token, (staged[0].id,), T0, "X_BOOM"))
    clock.set(T0 + 90_000)
    relay = Relay(outbox, driver, clock=clock)
    server = serve(fast(driver, [handle]), "127.0.0.1", 0, relay)
    base = f"http://127.0.0.1:{server.port}"
    try:
        text = (await asyncio.to_thread(_get, base + "/metrics"))[1]
        assert _value(text, "ujobs_outbox_up") == 1
        assert _value(text, "ujobs_outbox_pending_rows") == 3
        assert _value(text, "ujobs_outbox_oldest_seconds") == 90
        assert _value(text, "ujobs_outbox_failing_rows") == 1
        assert _value(text, "ujobs_relay_published_total") == 0
        assert CARD not in text
        assert await relay.tick() == 3
        text = (await asyncio.to_thread(_get, base + "/metrics"))[1]
        assert _value(text, "ujobs_relay_published_total") == 3
        assert _value(text, "ujobs_outbox_pending_rows") == 0
        assert _value(text, "ujobs_outbox_oldest_seconds") == 0
    finally:
        server.close()


async def test_the_sweep_gauges_read_the_ledger_once_per_period_and_escape_its_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker running two backfills, scraped over its metrics port: the rows its sweep
    processed and what is pending here, from the ledger (a name another app wrote there too,
    quotes and a newline in it); two scrapes within the cache period read the ledger once."""
    monkeypatch.setattr(metrics, "STORE_CACHE_S", 0.5)
    monkeypatch.delenv("UJOBS_ENVIRONMENT", raising=False)
    driver = counting(MemoryDriver)()
    jobs = Jobs(driver)
    worker = fast(driver, [backfill_app.nums, backfill_app.per_org])
    server = serve(worker, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.port}"

    def ledger_reads() -> int:
        return driver.calls.count("_sweep_list")

    try:
        await worker.start()
        done = await backfill_app.nums.enqueue({}, client=jobs)

        async def swept() -> bool:
            return (await driver.job_get_many([done.id]))[done.id].state is JobState.COMPLETED

        await until(swept)
        text = (await asyncio.to_thread(_get, base + "/metrics"))[1]
        assert _value(text, "ujobs_sweep_rows", kind="backfill", name="nums") == 30
        assert _value(text, "ujobs_sweep_rows", kind="backfill", name="per-org") == 0
        assert _value(text, "ujobs_sweeps_pending", environment="default", name="nums") == 0
        # per-org requires nums and no tenant has started it: the sweep itself is pending.
        assert _value(text, "ujobs_sweeps_pending", environment="default", name="per-org") == 1
        reads = ledger_reads()
        await asyncio.to_thread(_get, base + "/metrics")
        assert ledger_reads() == reads  # within the period: answered from the last read

        odd = 'exp"ort\n{x}\nend'
        loader = declare(lambda i, c: None, name="load", queue="raw")
        await jobs.enqueue(loader, {"n": 1})
        now = jobs.clock.now_ms()
        (held,) = (await driver.job_claim(ClaimParams(("raw",), "w", 1, 60_000, now))).jobs
        start = SweepStart(
            held.fence, held.run_id, odd, "none", "default", "export", "c", None, now
        )
        await driver.sweep_start(start)
        await driver.sweep_advance(SweepAdvance(held.fence, held.run_id, 1, 12, 0, None, now))
        await asyncio.sleep(0.5)
        text = (await asyncio.to_thread(_get, base + "/metrics"))[1]
        assert ledger_reads() > reads
        rows = {
            (s.labels["name"], s.labels["kind"]): s.value
            for family in text_string_to_metric_families(text)
            if family.name == "ujobs_sweep_rows"
            for s in family.samples
        }
        assert rows == {("nums", "backfill"): 30, ("per-org", "backfill"): 0, (odd, "export"): 12}
    finally:
        await worker.stop()
        server.close()


async def test_a_failing_runs_log_lines_never_print_its_secrets() -> None:
    driver = MemoryDriver()
    handle = declare(pay, name="pay", sensitive=("card",), retry=Retry(attempts=2, base_ms=1))
    job = await Jobs(driver).enqueue(handle, {"n": 1, "fail": True, "card": CARD})
    out = {"text": io.StringIO(), "json": io.StringIO()}
    handlers = []
    for kind, stream in out.items():
        h = logging.StreamHandler(stream)
        h.setFormatter(_Formatter(kind, []))
        handlers.append(h)
        logging.getLogger().addHandler(h)
    try:
        worker = fast(driver, [handle])
        await worker.start()

        async def dead() -> bool:
            return (await driver.job_get_many([job.id]))[job.id].state is JobState.DEAD

        await until(dead)
        await worker.stop()
    finally:
        for h in handlers:
            logging.getLogger().removeHandler(h)
    for kind, stream in out.items():
        text = stream.getvalue()
        assert "gateway refused [redacted]" in text, (kind, text)
        assert "Traceback" in text and CARD not in text, (kind, text)


async def test_a_buried_final_attempt_counts_as_processed_and_failed() -> None:
    """A lapsed final attempt a claim buried is a dead letter like one a body's error made:
    `ujobs_jobs_failed_total` and `ujobs_jobs_processed_total` count it (they heard only
    settles, so a burial was in the logs and `on_settled` but in no metric)."""
    import time

    driver = MemoryDriver()
    handle = declare(pay, name="pay", retry=Retry(attempts=1))
    queued = await Jobs(driver).enqueue(handle, {"n": 1})
    now = int(time.time() * 1000)
    claim = await driver.job_claim(ClaimParams(("default",), "crashed", 1, 1, now))
    assert [j.id for j in claim.jobs] == [queued.id]
    worker = fast(driver, [handle])
    server = serve(worker, "127.0.0.1", 0)
    try:
        await worker.start()
        await until(lambda: worker.stats.buried == 1)
        status, text = await asyncio.to_thread(_get, f"http://127.0.0.1:{server.port}/metrics")
        assert status == 200
        labels = {"name": "pay", "queue": "default"}
        assert _value(text, "ujobs_jobs_failed_total", **labels) == 1
        assert _value(text, "ujobs_jobs_processed_total", **labels) == 1
        await worker.stop()
    finally:
        server.close()
