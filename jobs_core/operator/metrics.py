"""Prometheus metrics and a health check for one worker (`ujobs worker --metrics-port N`).

`/metrics` serves Prometheus text (the standard `prometheus_client` library):
- from this worker, as it settles (and as its claims bury lapsed final attempts, counted
  processed and failed): `ujobs_jobs_processed_total`, `ujobs_jobs_failed_total`,
  `ujobs_jobs_retried_total` (by job name and queue) and the body run-time histogram
  `ujobs_job_run_seconds`; `ujobs_worker_running` and `ujobs_worker_in_flight`;
  `ujobs_processes_killed_total` and `ujobs_processes_died_total` (`executor="process"`
  bodies killed as their run ended, or whose process died: `WorkerStats`' counters);
- from the store, read when scraped (at most once per `STORE_CACHE_S`, so an eager scraper
  cannot load the store): `ujobs_queue_oldest_ready_seconds`, `ujobs_queue_dead_jobs`,
  `ujobs_queue_demand` and `ujobs_queue_jobs` (by state), for every queue holding rows;
  `ujobs_store_up` says whether that read answered. On a driver without the operator family
  (`Capabilities.operator`: no `queue_stats`) only `ujobs_queue_demand` is served, for the
  worker's own queues, and the worker says so once in its log (`jobs.metrics.partial`);
- with `--with-relay`, from the outbox the same way: `ujobs_outbox_pending_rows` (committed
  stages not yet published, counted up to 1,000), `ujobs_outbox_oldest_seconds`,
  `ujobs_outbox_failing_rows`, `ujobs_outbox_up`, and `ujobs_relay_published_total`;
- from the sweep ledger, read through its one projection (`inspect_backfills`) the same way:
  `ujobs_sweep_rows` (by sweep name and kind — backfill, import, export: the rows its runs
  processed, summed over the newest 1,000 entries of each name) and `ujobs_sweeps_pending` (by
  environment and name, for each backfill this worker runs that may run here: how many of its
  scopes have not completed in this worker's `$UJOBS_ENVIRONMENT` at its current declaration;
  0 when none). Rows are a gauge read from the ledger, not a counter this worker moves: a worker
  sees only its own batches, counts a batch a crash replayed twice and starts again from 0 when
  it restarts, while the ledger counts each batch once, whichever worker ran it. Every worker
  of a fleet serves the same value (aggregate with `max`, never `sum`); it can fall when an
  entry leaves the newest 1,000 of its name. Pending needs the declarations, which a worker has
  (the backfills among its jobs); one that runs none serves no pending gauge. On a driver
  without the `sweeps` family neither is served, and the worker says so once in its log
  (`jobs.metrics.partial`);
- from the consumers' cursors (a driver with the `consumers` family), the same way:
  `ujobs_consumer_lag` (by consumer and tenant: the records its last turn found left past
  its cursor; a consumer whose source cannot tell is not served). A cross-tenant consumer's
  `tenant` is empty (`NO_TENANT_LABEL`: an org id never is), so an org named "none" keeps a
  series of its own;
- from this process's `webhook()` senders (a driver with the `webhooks` family):
  `ujobs_webhook_attempts_total` (by `outcome`, delivered or failed: attempts whose record
  landed in the endpoint ledger; an attempt whose fence did not hold counts nothing). Labelled
  by outcome only: endpoints are per tenant and unbounded, and `ujobs webhooks show` or the
  dashboard's `/webhooks` page tell them apart. The count is the process's, shared by every
  worker in it;
- with `--with-scheduler`: `ujobs_scheduler_leading` (1 while this process's scheduler holds
  the fleet's lead, else 0; a fleet whose sum stays 0 fires no task).
`/healthz` answers 200 only while the worker's loops are alive and its store answered within
one lease (`Worker.healthy`), else 503 — what a liveness probe restarts a wedged worker on.

A worker without `--metrics-port` serves nothing and reads nothing more from its store: the
idle cost of a worker is unchanged. Labels are job names and queues only, never inputs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Generic, Protocol, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from jobs_core.factories.backfill import Backfill, BackfillsView, inspect_backfills
from jobs_core.factories.consumers.inspect import ConsumerView, inspect_consumers
from jobs_core.factories.sweep import current_environment
from jobs_core.factories.webhook_tally import ATTEMPTS
from jobs_core.outbox import OutboxRow, Relay
from jobs_core.outbox.store import MAX_OUTBOX_PENDING
from jobs_core.records import BuriedJob, ClaimedJob, QueueStats
from jobs_core.scheduler import Scheduler
from jobs_core.states import JobState, Outcome
from jobs_core.worker import Worker

log = logging.getLogger("jobs.metrics")
T = TypeVar("T")

#: Store reads for the queue gauges are reused for this long (seconds).
STORE_CACHE_S: Final = 5.0
#: How long a scrape waits for the store before it answers without the queue gauges.
STORE_TIMEOUT_S: Final = 5.0
#: Run-time buckets (seconds): from a no-op to a long batch job.
RUN_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
_FAILED: Final = frozenset({Outcome.RETRIED, Outcome.DEAD_LETTERED, Outcome.DROPPED})
_ENDED: Final = frozenset(
    {Outcome.COMPLETED, Outcome.DEAD_LETTERED, Outcome.DROPPED, Outcome.REFUSED}
)


class _CachedRead(Generic[T]):
    """A store read run on the worker's loop when scraped, its answer reused for
    `STORE_CACHE_S`; None when the store did not answer within `STORE_TIMEOUT_S`."""

    def __init__(
        self, read: Callable[[], Coroutine[Any, Any, T]], loop: asyncio.AbstractEventLoop, what: str
    ) -> None:
        self._read = read
        self._loop = loop
        self._what = what
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._last: T | None = None

    def current(self) -> T | None:
        with self._lock:
            if self._last is not None and time.monotonic() - self._read_at < STORE_CACHE_S:
                return self._last
            future = asyncio.run_coroutine_threadsafe(self._read(), self._loop)
            try:
                self._last = future.result(STORE_TIMEOUT_S)
            except (FutureTimeout, Exception) as exc:  # a scrape reports the store down
                future.cancel()
                log.warning("jobs.metrics.%s_read_failed: %r", self._what, exc)
                self._last = None
            self._read_at = time.monotonic()
            return self._last


class _StoreGauges(Collector):
    """The per-queue gauges, read from the store on the worker's loop when scraped."""

    def __init__(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self._worker = worker
        self._reads = _CachedRead(self._read, loop, "store")
        self._counts = worker.driver.capabilities().operator
        if not self._counts:
            log.warning(
                "jobs.metrics.partial: %s does not declare the operator family; of the queue"
                " gauges only ujobs_queue_demand is served, for this worker's queues",
                worker.driver.describe(),
            )

    async def _read(self) -> tuple[list[QueueStats], dict[str, int], int]:
        now = self._worker.clock.now_ms()
        driver = self._worker.driver
        stats = await driver.queue_stats(now) if self._counts else []
        queues = [s.queue for s in stats] if self._counts else list(self._worker.queues)
        demand = await driver.queue_demand(queues, now) if queues else {}
        return stats, demand, now

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("ujobs_store_up", "1 when the store answered the last read")
        current = self._reads.current()
        up.add_metric([], 0 if current is None else 1)
        yield up
        if current is None:
            return
        stats, demand, now = current
        oldest = GaugeMetricFamily(
            "ujobs_queue_oldest_ready_seconds",
            "How long the oldest due ready job of the queue has waited",
            labels=["queue"],
        )
        dead = GaugeMetricFamily(
            "ujobs_queue_dead_jobs", "Dead jobs in the queue", labels=["queue"]
        )
        wanted = GaugeMetricFamily(
            "ujobs_queue_demand", "Ready jobs due now in the queue", labels=["queue"]
        )
        jobs = GaugeMetricFamily(
            "ujobs_queue_jobs", "Jobs in the queue by state", labels=["queue", "state"]
        )
        for s in stats:
            age = 0.0 if s.oldest_ready_at_ms is None else max(0, now - s.oldest_ready_at_ms)
            oldest.add_metric([s.queue], age / 1000)
            dead.add_metric([s.queue], s.count(JobState.DEAD))
            for state, n in s.counts:
                jobs.add_metric([s.queue, state.value], n)
        for queue, n in sorted(demand.items()):
            wanted.add_metric([queue], n)
        yield from (oldest, dead, wanted, jobs) if self._counts else (wanted,)


class _SweepGauges(Collector):
    """Rows processed per sweep and the sweeps pending here, read from the sweep ledger's one
    projection on the worker's loop when scraped."""

    def __init__(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self._driver = worker.driver
        #: What exists: the backfills this worker runs (pending is declared minus completed).
        self._declared = [h for h in worker.handles if isinstance(h, Backfill)]
        self._reads = _CachedRead(self._read, loop, "sweeps")

    async def _read(self) -> BackfillsView:
        here = current_environment()
        return await inspect_backfills(self._driver, self._declared, environments=[here])

    def collect(self) -> Iterator[Metric]:
        view = self._reads.current()
        if view is None:
            return
        rows = GaugeMetricFamily(
            "ujobs_sweep_rows",
            "Rows the sweep's runs processed, as its ledger counts them (each batch once,"
            " whichever worker ran it)",
            labels=["name", "kind"],
        )
        for (name, kind), n in sorted(view.rows().items()):
            rows.add_metric([name, kind], n)
        yield rows
        if not self._declared:
            return
        pending = GaugeMetricFamily(
            "ujobs_sweeps_pending",
            "Scopes of a declared backfill not completed in this environment at its current"
            " declaration",
            labels=["environment", "name"],
        )
        here = view.environment
        items = view.pending.get(here, [])
        for h in self._declared:
            if h.spec.runs_in(here):
                pending.add_metric([here, h.name], sum(1 for p in items if p.name == h.name))
        yield pending


# -- consumers --

#: The `tenant` label of a series of no tenant: empty, which no org id can be (a tenant is a
#: non-empty string), so `tenant="none"` is an org named "none" and only that; to Prometheus
#: an empty label is no label, so `{tenant=""}` selects these series.
NO_TENANT_LABEL: Final = ""


def tenant_label(tenant: str | None) -> str:
    """The `tenant` label value of `tenant` (`NO_TENANT_LABEL` for None)."""
    return NO_TENANT_LABEL if tenant is None else tenant


class _ConsumerGauges(Collector):
    """Each consumer's lag per tenant, as its last turn measured it, read through the consumers'
    one projection on the worker's loop when scraped."""

    def __init__(self, worker: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self._driver = worker.driver
        self._reads = _CachedRead(self._read, loop, "consumers")

    async def _read(self) -> list[ConsumerView]:
        return await inspect_consumers(self._driver, now_ms=int(time.time() * 1000))

    def collect(self) -> Iterator[Metric]:
        views = self._reads.current()
        if views is None:
            return
        lag = GaugeMetricFamily(
            "ujobs_consumer_lag",
            "Records left past the consumer's cursor when its last turn measured them",
            labels=["consumer", "tenant"],
        )
        for v in views:
            if v.lag is not None:
                lag.add_metric([v.name, tenant_label(v.tenant)], v.lag)
        yield lag


class _OutboxGauges(Collector):
    """The relay's backlog (`ujobs worker --with-relay`), read from its outbox when scraped."""

    def __init__(self, relay: Relay, loop: asyncio.AbstractEventLoop) -> None:
        self._relay = relay
        self._reads = _CachedRead(self._read, loop, "outbox")

    async def _read(self) -> tuple[list[OutboxRow], int]:
        now = self._relay.clock.now_ms()
        return await self._relay.outbox.outbox_pending(MAX_OUTBOX_PENDING), now

    def collect(self) -> Iterator[Metric]:
        published = CounterMetricFamily(
            "ujobs_relay_published", "Outbox rows this relay published as jobs"
        )
        published.add_metric([], self._relay.published)
        yield published
        up = GaugeMetricFamily("ujobs_outbox_up", "1 when the outbox answered the last read")
        current = self._reads.current()
        up.add_metric([], 0 if current is None else 1)
        yield up
        if current is None:
            return
        rows, now = current
        waiting = GaugeMetricFamily(
            "ujobs_outbox_pending_rows",
            f"Committed stages not yet published (counted up to {MAX_OUTBOX_PENDING})",
        )
        waiting.add_metric([], len(rows))
        oldest = GaugeMetricFamily(
            "ujobs_outbox_oldest_seconds", "How long the oldest unpublished stage has waited"
        )
        oldest.add_metric([], max(0, now - rows[0].job.created_at_ms) / 1000 if rows else 0.0)
        failing = GaugeMetricFamily(
            "ujobs_outbox_failing_rows", "Unpublished stages whose publish failed at least once"
        )
        failing.add_metric([], sum(1 for r in rows if r.attempts))
        yield from (waiting, oldest, failing)


# -- webhooks --
class _WebhookAttempts(Collector):
    """`ujobs_webhook_attempts_total{outcome}`: the attempts `webhook()` recorded in this
    process (`jobs_core.factories.webhook_tally.ATTEMPTS`), read when scraped."""

    def collect(self) -> Iterator[Metric]:
        attempts = CounterMetricFamily(
            "ujobs_webhook_attempts",
            "Webhook delivery attempts this process recorded, by outcome",
            labels=["outcome"],
        )
        for outcome, n in ATTEMPTS.counts().items():
            attempts.add_metric([outcome], n)
        yield attempts


def store_collectors(worker: Worker, loop: asyncio.AbstractEventLoop) -> Iterator[Collector]:
    """The gauges read from `worker`'s store when scraped (queues, sweeps, consumers), as its
    driver's families allow; served once per worker, or once per `--processes` group."""
    yield _StoreGauges(worker, loop)
    if worker.driver.capabilities().sweeps:
        yield _SweepGauges(worker, loop)
    else:
        log.warning(
            "jobs.metrics.partial: %s does not declare the sweeps family;"
            " ujobs_sweep_rows and ujobs_sweeps_pending are not served",
            worker.driver.describe(),
        )
    # -- consumers --
    if worker.driver.capabilities().consumers:
        yield _ConsumerGauges(worker, loop)


# -- scheduler --
class _SchedulerGauges(Collector):
    """`ujobs_scheduler_leading`: whether the scheduler beside this worker leads now (its own
    memory of the lease: no store read)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        leading = GaugeMetricFamily(
            "ujobs_scheduler_leading", "1 while this process's scheduler holds the fleet's lead"
        )
        leading.add_metric([], 1 if self._scheduler.leading else 0)
        yield leading


class WorkerMetrics:
    """A registry of one worker's metrics, fed by its settles (`Worker.observe`) and its
    burials (`Worker.observe_burials`)."""

    def __init__(
        self,
        worker: Worker,
        loop: asyncio.AbstractEventLoop,
        relay: Relay | None = None,
        *,
        group_child: bool = False,
        scheduler: Scheduler | None = None,
    ) -> None:
        """`group_child`: a child of `ujobs worker --processes` (prometheus-client's multiprocess
        mode) writes only its settles and live gauges; its supervisor serves the store's. So a
        group serves no `ujobs_scheduler_leading` (a collector of one process's memory, which
        multiprocess mode does not gather): alert on a scheduler run apart, or one worker."""
        self.worker = worker
        self.registry = CollectorRegistry()
        labels = ["name", "queue"]
        self._processed = Counter(
            "ujobs_jobs_processed",
            "Runs that ended for good (completed, dead-lettered, dropped, refused)",
            labels,
            registry=self.registry,
        )
        self._failed = Counter(
            "ujobs_jobs_failed",
            "Attempts that failed (retried, dead-lettered or dropped)",
            labels,
            registry=self.registry,
        )
        self._retried = Counter(
            "ujobs_jobs_retried", "Failed attempts given another", labels, registry=self.registry
        )
        self._run = Histogram(
            "ujobs_job_run_seconds",
            "How long bodies ran",
            labels,
            buckets=RUN_BUCKETS,
            registry=self.registry,
        )
        # livesum: in a group (multiprocess mode) the children's values add up, a dead one's
        # dropped; a child sets them itself, as a function is not read across processes.
        self.running = Gauge(
            "ujobs_worker_running",
            "Bodies running now",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.running.set_function(lambda: worker.stats.running)
        self.in_flight = Gauge(
            "ujobs_worker_in_flight",
            "Jobs held now",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.in_flight.set_function(lambda: worker.stats.in_flight)
        # -- process executor --
        # Copied from the worker's counters (`WorkerStats`) by `sync`: at each scrape, and in a
        # group by the child's own loop (multiprocess mode reads no function, nor this process's
        # memory).
        self._from_stats = {
            "processes_killed": Counter(
                "ujobs_processes_killed",
                'executor="process" bodies whose process was killed as their run ended'
                " (deadline, cancel, lost lease, drain)",
                registry=self.registry,
            ),
            "processes_died": Counter(
                "ujobs_processes_died",
                'executor="process" bodies whose process died under them (X_JOB_PROCESS_DIED)',
                registry=self.registry,
            ),
        }
        self._synced = dict.fromkeys(self._from_stats, 0)
        self._sync_lock = threading.Lock()
        worker.observe(self._observe)
        worker.observe_burials(self._observe_burial)
        if group_child:
            return
        for collector in store_collectors(worker, loop):
            self.registry.register(collector)
        # -- webhooks --
        if worker.driver.capabilities().webhooks:
            self.registry.register(_WebhookAttempts())
        if relay is not None:
            self.registry.register(_OutboxGauges(relay, loop))
        # -- scheduler --
        if scheduler is not None:
            self.registry.register(_SchedulerGauges(scheduler))

    def _observe(self, job: ClaimedJob, outcome: Outcome, body_ms: int | None) -> None:
        labels = (job.name, job.queue)
        if outcome in _ENDED:
            self._processed.labels(*labels).inc()
        if outcome in _FAILED:
            self._failed.labels(*labels).inc()
        if outcome is Outcome.RETRIED:
            self._retried.labels(*labels).inc()
        if body_ms is not None and outcome in _ENDED | _FAILED:
            self._run.labels(*labels).observe(body_ms / 1000)

    def _observe_burial(self, b: BuriedJob, outcome: Outcome) -> None:
        # A dead letter (or drop) no body's settle wrote: it ended, and it failed.
        labels = (b.name, b.queue)
        self._processed.labels(*labels).inc()
        self._failed.labels(*labels).inc()

    def sync(self) -> None:
        """Move the counters copied from the worker's (`WorkerStats`) up to its values now."""
        stats = self.worker.stats
        with self._sync_lock:  # scrapes run on threads of their own: each step counted once
            for field, counter in self._from_stats.items():
                now = getattr(stats, field)
                if now > self._synced[field]:
                    counter.inc(now - self._synced[field])
                    self._synced[field] = now

    def render(self) -> bytes:
        self.sync()
        return generate_latest(self.registry)

    def health(self) -> tuple[int, bytes]:
        """200 while the worker is healthy (`Worker.healthy`: running, its loops alive, its
        store answered within one lease), else 503; the body says why."""
        w = self.worker
        ok = w.healthy
        doc = {
            "status": "ok" if ok else "unhealthy",
            "worker_id": w.worker_id,
            "store_answered_ms_ago": w.clock.now_ms() - w.stats.store_ok_ms,
            "lease_ms": w.lease_ms,
            "draining": w.draining,
        }
        return (200 if ok else 503), json.dumps(doc).encode()


class Exposed(Protocol):
    """What `/metrics` and `/healthz` serve: a worker's metrics, or a `--processes` group's."""

    def render(self) -> bytes: ...

    def health(self) -> tuple[int, bytes]: ...


def metrics_http_server(exposed: Exposed, host: str, port: int) -> ThreadingHTTPServer:
    """`exposed` over HTTP (`/metrics`, `/healthz`, else 404), not yet serving; each request on
    a daemon thread of its own."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                status, body, kind = 200, exposed.render(), CONTENT_TYPE_LATEST
            elif path == "/healthz":
                (status, body), kind = exposed.health(), "application/json"
            else:
                status, body, kind = 404, b"not found\n", "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            return  # a scrape every few seconds is not news

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


class MetricsServer:
    """`/metrics` and `/healthz` of one worker over HTTP, on a daemon thread."""

    def __init__(self, metrics: WorkerMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self._server = metrics_http_server(metrics, host, port)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="ujobs-metrics", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve(
    worker: Worker,
    host: str,
    port: int,
    relay: Relay | None = None,
    *,
    scheduler: Scheduler | None = None,
) -> MetricsServer:
    """Serve `worker`'s metrics and health on `host:port` (0: any free port), with `relay`'s
    backlog and `scheduler`'s lead when they run beside the worker; call from the worker's event
    loop."""
    metrics = WorkerMetrics(worker, asyncio.get_running_loop(), relay, scheduler=scheduler)
    server = MetricsServer(metrics, host, port)
    server.start()
    return server
