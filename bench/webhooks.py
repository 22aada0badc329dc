"""`python -m bench.webhooks` (`make bench-webhooks`): how fast webhooks go out and come in, on
Postgres and on Redis.

    .venv/bin/python -m bench.webhooks [--dry-run] [--jobs 2000] [--requests 5000]
        [--concurrency 16] [--only send,receive] [--stores pg,redis] [--out DIR]

- send: `--jobs` `webhook()` jobs (`tenant="none"`, one registered endpoint, loopback allowed
  through the factory's `allow_networks`) enqueued, then drained by ONE in-process `Worker` (its
  defaults) that POSTs each, signed, to a no-op endpoint in a process of its own (an asyncio
  HTTP server answering 204 on a spare loopback port, noting each `webhook-id` it got). The
  rate is jobs over the seconds from the worker's start to the last settle landing; the
  process's CPU seconds meanwhile are the worker's (nothing else runs in it). Then `trickle`
  jobs one at a time into the idle worker: enqueue-to-delivery latency (the enqueue call's
  start to the endpoint's receipt, both wall clocks of this machine), p50/p95. Every job must
  complete and the endpoint must have got every event exactly once, or the run is an error.
- receive: a `webhook_receiver()` route (Standard Webhooks verifier, a fixed org) under uvicorn,
  one worker process, driven by a load generator in another process (an httpx async client,
  `--concurrency` requests in flight, each a distinct event id signed with the receiver's
  secret, signed before the clock starts). Its rate counts 2xx answers over the run's seconds;
  p50/p95 per request. Afterwards the store must hold every event exactly once (its job, under
  the id derived from the event, and no other), every answer a 2xx not deduped, or the run is
  an error.

Each store is its own: a fresh Postgres schema (migrated) or Redis key prefix, removed after.
The one-minute load average is noted before and after each measurement: this is a shared
machine, and its absolute numbers wander with what else runs. Results: printed, and
`bench/results/webhooks-<stamp>.json` (`--out` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs, SettledEvent
from jobs_core.factories.webhooks import (
    register_endpoint,
    standard_webhooks_verifier,
    webhook,
    webhook_event,
    webhook_receiver,
)
from jobs_core.job import JobRegistry
from jobs_core.records import JobFilter, JobListParams
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_core.worker import Worker
from jobs_pg.migrate import upgrade
from jobs_pg.urls import libpq_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PG_URL = os.environ.get("JOBS_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("JOBS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
KINDS = ("send", "receive")
STORES = ("pg", "redis")
SECRET = "whsec_" + base64.b64encode(b"bench-webhooks-secret-32-bytes!!").decode()
ORG = "org_bench"
RECEIVER = "bench.orders"
ENDPOINT = "sink"
#: How long a measurement may take before the run gives up on it.
TIMEOUT_SECONDS = 600.0
#: A one-minute load average above this means other work shared the cores.
BUSY_LOAD = 1.0


@dataclass(frozen=True)
class Config:
    jobs: int  # webhook() jobs drained
    trickle: int  # jobs sent one at a time for the latency
    requests: int  # deliveries to the receiver
    concurrency: int  # the load generator's requests in flight


FULL = Config(jobs=2_000, trickle=100, requests=5_000, concurrency=16)
#: Every measurement end to end in seconds (its numbers mean nothing): what the test runs.
DRY = replace(FULL, jobs=10, trickle=3, requests=20, concurrency=4)


@dataclass(frozen=True)
class Servers:
    """Where the stores are made: a Postgres server (a schema each) and a Redis (a prefix each)."""

    pg: str = PG_URL
    redis: str = REDIS_URL


class BenchError(Exception):
    """A measurement that did not do what it measures (a job failed, an event lost or doubled)."""


# -- the processes beside this one ------------------------------------------------------------

#: The no-op endpoint: HTTP/1.1 keep-alive over asyncio streams; a POST is answered 204 and its
#: `webhook-id` noted with the wall time it arrived; `GET /seen` answers what was noted.
SINK = r"""
import asyncio, json, sys, time

seen = []

async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            at = time.time()
            lines = head.decode("latin-1").split("\r\n")
            method = lines[0].split(" ", 1)[0]
            fields = {}
            for line in lines[1:]:
                if ":" in line:
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.strip()
            n = int(fields.get("content-length", "0"))
            if n:
                await reader.readexactly(n)
            if method == "GET":
                body = json.dumps(seen).encode()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % len(body) + body)
            else:
                seen.append([fields.get("webhook-id"), at])
                writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            await writer.drain()
            if fields.get("connection", "").lower() == "close":
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""

#: The receiver's app: one route, its client opened in the lifespan.
APP = f"""
import os
from contextlib import asynccontextmanager

from starlette.applications import Starlette

from jobs_core.facade import Jobs
from jobs_core.factories.webhooks import (
    receiver_starlette,
    standard_webhooks_verifier,
    webhook_receiver,
)
from jobs_core.urls import driver_from_url


async def on_event(event, ctx):
    return None


orders = webhook_receiver(
    name={RECEIVER!r},
    verify=standard_webhooks_verifier(os.environ["BENCH_SECRET"]),
    tenant={ORG!r},
    handle=on_event,
)


@asynccontextmanager
async def lifespan(app):
    driver = driver_from_url(os.environ["BENCH_STORE"])
    async with driver:
        app.state.jobs = Jobs(driver)
        yield


app = Starlette(lifespan=lifespan)
app.router.routes.append(
    receiver_starlette.route(orders, "/hooks", client=lambda: app.state.jobs)
)
"""


def _cpu_seconds(pid: int) -> float:
    """A process's user + system CPU seconds so far (Linux `/proc`)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _child_env(*first: Path) -> dict[str, str]:
    path = os.pathsep.join([*(str(p) for p in first), str(ROOT)])
    return {**os.environ, "PYTHONPATH": path}


def _start_sink() -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True, env=_child_env()
    )


def _start_uvicorn(app_dir: Path, store_url: str, port: int) -> subprocess.Popen[bytes]:
    with (app_dir / "uvicorn.log").open("w") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bench_receiver_app:app", "--host", "127.0.0.1",
             "--port", str(port), "--log-level", "warning", "--no-access-log"],
            cwd=app_dir,
            env={**_child_env(app_dir), "BENCH_STORE": store_url, "BENCH_SECRET": SECRET},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )  # fmt: skip


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- the stores -------------------------------------------------------------------------------


@asynccontextmanager
async def store(kind: str, servers: Servers) -> AsyncIterator[tuple[str, str]]:
    """A fresh store of `kind`: its URL and its name (schema or prefix), removed on the way out."""
    tag = uuid.uuid4().hex[:8]
    if kind == "pg":
        schema = f"bench_webhooks_{tag}"
        await asyncio.to_thread(upgrade, servers.pg, schema)
        try:
            yield f"{servers.pg}?schema={schema}", schema
        finally:
            await asyncio.to_thread(_drop_schema, servers.pg, schema)
        return
    prefix = f"bench-webhooks-{tag}"
    url = f"{servers.redis}?prefix={prefix}"
    try:
        yield url, prefix
    finally:
        await _purge(url)


def _drop_schema(pg_url: str, schema: str) -> None:
    with psycopg.connect(libpq_url(pg_url), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


async def _purge(url: str) -> None:
    """Every key of the prefix deleted (SCAN + DEL, never FLUSHDB: others share the server)."""
    driver: Any = driver_from_url(url)
    async with driver:
        client = driver.client
        found = [k async for k in client.scan_iter(match=driver.keys.pattern(), count=1000)]
        if found:
            await client.delete(*found)


async def left_behind(kind: str, name: str, servers: Servers) -> int:
    """What a removed store left: schemas of that name, or keys of that prefix."""
    if kind == "pg":

        def count() -> int:
            with psycopg.connect(libpq_url(servers.pg)) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                    (name,),
                ).fetchone()
            assert row is not None
            return int(row[0])

        return await asyncio.to_thread(count)
    driver: Any = driver_from_url(f"{servers.redis}?prefix={name}")
    async with driver:
        return len([k async for k in driver.client.scan_iter(match=driver.keys.pattern())])


async def job_ids(driver: JobDriver, name: str, state: JobState | None = None) -> list[str]:
    """Every job row's id of `name` (in `state`), paged through."""
    states = frozenset() if state is None else frozenset({state})
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = await driver.job_list(
            JobListParams(JobFilter(states=states, name=name), limit=500, cursor=cursor)
        )
        ids.extend(j.id for j in page.jobs)
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def _pcts(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        v = values[0] if values else 0.0
        return {"p50": v, "p95": v, "max": v}
    q = statistics.quantiles(values, n=20, method="inclusive")
    return {"p50": statistics.median(values), "p95": q[18], "max": max(values)}


# -- send -------------------------------------------------------------------------------------


async def measure_send(kind: str, config: Config, servers: Servers) -> dict[str, Any]:
    """`config.jobs` webhook() jobs drained by one worker into the no-op endpoint, then the
    trickle: the sample (rate, latencies, CPU), every event checked delivered exactly once."""
    sink = await asyncio.to_thread(_start_sink)
    try:
        assert sink.stdout is not None
        port = int(await asyncio.wait_for(asyncio.to_thread(sink.stdout.readline), 20))
        url = f"http://127.0.0.1:{port}/in"
        async with store(kind, servers) as (store_url, name):
            sample = await _send(store_url, url, port, config)
            sample["sink_cpu_s"] = _cpu_seconds(sink.pid)
        sample["store"] = {
            "kind": kind,
            "name": name,
            "left": await left_behind(kind, name, servers),
        }
        return sample
    finally:
        _stop(sink)


async def _send(store_url: str, url: str, port: int, config: Config) -> dict[str, Any]:
    registry = JobRegistry()
    # The factory's documented door for a private target: the loopback network, allowed.
    handle = webhook(
        "bench.send",
        secrets=[SECRET],
        tenant="none",
        allow_networks=["127.0.0.0/8"],
        registry=registry,
    )
    driver = driver_from_url(store_url)
    async with driver:
        await register_endpoint(driver, ENDPOINT, url, allow_networks=["127.0.0.0/8"])
        jobs = Jobs(driver)
        settled: list[SettledEvent] = []
        wake = asyncio.Event()

        def on_settled(event: SettledEvent) -> None:
            settled.append(event)
            wake.set()

        async def until(n: int) -> None:
            deadline = time.perf_counter() + TIMEOUT_SECONDS
            while len(settled) < n:
                wake.clear()
                try:
                    await asyncio.wait_for(wake.wait(), 1.0)
                except TimeoutError:
                    if time.perf_counter() > deadline:
                        raise BenchError(f"{len(settled)} of {n} settled in time") from None

        ids = [f"msg_bench_{i:07d}" for i in range(config.jobs)]
        load_before = os.getloadavg()[0]
        began = time.perf_counter()
        for i, event_id in enumerate(ids):
            await jobs.enqueue(handle, webhook_event(ENDPOINT, "order.paid", {"n": i}, id=event_id))
        enqueue_s = time.perf_counter() - began

        worker = Worker(driver, [handle], on_settled=on_settled)
        cpu0 = time.process_time()
        began = time.perf_counter()
        await worker.start()
        try:
            await until(config.jobs)
            drain_s = time.perf_counter() - began
            cpu_s = time.process_time() - cpu0
            load_after = os.getloadavg()[0]

            # The trickle: one job at a time into the idle worker.
            enqueued_at: dict[str, float] = {}
            trickle = [f"msg_trickle_{i:05d}" for i in range(config.trickle)]
            for i, event_id in enumerate(trickle):
                enqueued_at[event_id] = time.time()
                await jobs.enqueue(
                    handle, webhook_event(ENDPOINT, "order.paid", {"n": i}, id=event_id)
                )
                await until(config.jobs + i + 1)
        finally:
            await worker.stop()

        async with httpx.AsyncClient() as client:
            seen = (await client.get(f"http://127.0.0.1:{port}/seen", timeout=30)).json()
        completed = await job_ids(driver, handle.name, JobState.COMPLETED)
    wanted = [*ids, *trickle]
    failed = [s.job_id for s in settled if s.outcome != "completed"]
    at = check_sent(wanted, seen, failed, completed)
    latency = [(at[e] - enqueued_at[e]) * 1000 for e in trickle]
    return {
        "jobs": config.jobs,
        "enqueue_s": enqueue_s,
        "enqueue_per_s": config.jobs / enqueue_s,
        "drain_s": drain_s,
        "jobs_per_s": config.jobs / drain_s,
        "worker_cpu_s": cpu_s,
        "trickle": config.trickle,
        "latency_ms": _pcts(latency),
        "delivered": len(at),
        "exactly_once": True,
        "load_1m": {"before": load_before, "after": load_after},
    }


def check_sent(
    wanted: list[str], seen: list[list[Any]], failed: list[str], completed: list[str]
) -> dict[str, float]:
    """When each wanted event reached the endpoint; `BenchError` unless every one of them got
    there exactly once, nothing else did, and every job completed."""
    got: dict[str, int] = {}
    at: dict[str, float] = {}
    for event_id, when in seen:
        got[event_id] = got.get(event_id, 0) + 1
        at.setdefault(event_id, when)
    missing = [e for e in wanted if e not in got]
    doubled = [e for e, n in got.items() if n != 1]
    strangers = set(got) - set(wanted)
    if missing or doubled or strangers or failed or len(completed) != len(wanted):
        raise BenchError(
            f"send: {len(missing)} events missing, {len(doubled)} doubled, {len(strangers)}"
            f" unknown, {len(failed)} jobs not completed, {len(completed)} of {len(wanted)}"
            " completed rows"
        )
    return at


# -- receive ----------------------------------------------------------------------------------


async def measure_receive(kind: str, config: Config, servers: Servers) -> dict[str, Any]:
    """The receiver under uvicorn, driven by the load generator: the sample, every event
    checked stored exactly once."""
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        app_dir = Path(tmp)
        (app_dir / "bench_receiver_app.py").write_text(APP)
        async with store(kind, servers) as (store_url, name):
            sample = await _receive(app_dir, store_url, config)
        sample["store"] = {
            "kind": kind,
            "name": name,
            "left": await left_behind(kind, name, servers),
        }
        return sample


async def _serve(app_dir: Path, store_url: str) -> tuple[subprocess.Popen[Any], str]:
    sock_port = await asyncio.to_thread(_free_port)
    proc = await asyncio.to_thread(_start_uvicorn, app_dir, store_url, sock_port)
    base = f"http://127.0.0.1:{sock_port}/hooks"
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient() as client:
        while True:
            try:
                up = await client.get(base, timeout=1)
                if up.status_code == 405:  # the app answers, its lifespan done
                    return proc, base
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                _stop(proc)
                raise BenchError("uvicorn did not answer: " + (app_dir / "uvicorn.log").read_text())
            await asyncio.sleep(0.1)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _receive(app_dir: Path, store_url: str, config: Config) -> dict[str, Any]:
    proc, base = await _serve(app_dir, store_url)
    try:
        cpu0 = _cpu_seconds(proc.pid)
        load_before = os.getloadavg()[0]
        tag = uuid.uuid4().hex[:8]
        generator = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.webhooks", "load-generator", base,
            str(config.requests), str(config.concurrency), tag,
            stdout=asyncio.subprocess.PIPE,
            env=_child_env(),
        )  # fmt: skip
        out, _ = await asyncio.wait_for(generator.communicate(), TIMEOUT_SECONDS)
        if generator.returncode != 0:
            raise BenchError(f"the load generator exited {generator.returncode}")
        load = json.loads(out)
        load_after = os.getloadavg()[0]
        server_cpu_s = _cpu_seconds(proc.pid) - cpu0
    finally:
        _stop(proc)

    receiver = webhook_receiver(
        name=RECEIVER,
        verify=standard_webhooks_verifier(SECRET),
        tenant=ORG,
        handle=lambda event, ctx: None,
        registry=JobRegistry(),
    )
    wanted = {receiver.job_id_for(e, ORG) for e in load["event_ids"]}
    driver = driver_from_url(store_url)
    async with driver:
        rows = await job_ids(driver, RECEIVER)
    check_stored(wanted, rows, load, config.requests)
    return {
        "requests": config.requests,
        "concurrency": config.concurrency,
        "seconds": load["seconds"],
        "ok": load["statuses"]["200"],
        "req_per_s": load["statuses"]["200"] / load["seconds"],
        "latency_ms": load["latency_ms"],
        "server_cpu_s": server_cpu_s,
        "generator_cpu_s": load["cpu_s"],
        "stored": len(rows),
        "exactly_once": True,
        "load_1m": {"before": load_before, "after": load_after},
    }


def check_stored(wanted: set[str], rows: list[str], load: dict[str, Any], requests: int) -> None:
    """`BenchError` unless every request was answered 200 (none deduped) and the store holds
    each event's job exactly once and no other."""
    stored_once = len(rows) == len(set(rows)) == len(wanted) and set(rows) == wanted
    answered = load["statuses"] == {"200": requests} and load["deduped"] == 0
    if not (stored_once and answered):
        raise BenchError(
            f"receive: answers {load['statuses']} ({load['deduped']} deduped), {len(rows)} rows"
            f" stored ({len(set(rows) & wanted)} of the {len(wanted)} events)"
        )


async def generate(base: str, requests: int, concurrency: int, tag: str) -> dict[str, Any]:
    """The load generator's run: `requests` distinct events, signed up front, POSTed with
    `concurrency` in flight; the statuses, the seconds, per-request latency, the event ids."""
    from standardwebhooks import Webhook

    hook = Webhook(SECRET)
    now = datetime.now(UTC)
    deliveries: list[tuple[str, bytes, dict[str, str]]] = []
    for i in range(requests):
        event_id = f"msg_{tag}_{i:07d}"
        body = json.dumps({"type": "order.paid", "data": {"n": i, "sku": "A-1"}}).encode()
        deliveries.append(
            (
                event_id,
                body,
                {
                    "content-type": "application/json",
                    "webhook-id": event_id,
                    "webhook-timestamp": str(int(now.timestamp())),
                    "webhook-signature": hook.sign(event_id, now, body),
                },
            )
        )
    queue: asyncio.Queue[tuple[str, bytes, dict[str, str]]] = asyncio.Queue()
    for d in deliveries:
        queue.put_nowait(d)
    statuses: dict[str, int] = {}
    latency: list[float] = []
    deduped = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def lane() -> None:
            nonlocal deduped
            while not queue.empty():
                _, body, headers = queue.get_nowait()
                began = time.perf_counter()
                answer = await client.post(base, content=body, headers=headers)
                latency.append((time.perf_counter() - began) * 1000)
                statuses[str(answer.status_code)] = statuses.get(str(answer.status_code), 0) + 1
                if answer.status_code == 200 and answer.json().get("deduped"):
                    deduped += 1

        cpu0 = time.process_time()
        began = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(concurrency)))
        seconds = time.perf_counter() - began
        cpu_s = time.process_time() - cpu0
    return {
        "statuses": statuses,
        "deduped": deduped,
        "seconds": seconds,
        "cpu_s": cpu_s,
        "latency_ms": _pcts(latency),
        "event_ids": [d[0] for d in deliveries],
    }


# -- the run ----------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()


def _versions(pg_url: str) -> dict[str, str]:
    names = ("ultimat3-jobs", "httpx", "uvicorn", "starlette", "standardwebhooks")
    got = {name: metadata.version(name) for name in names}
    with psycopg.connect(libpq_url(pg_url)) as conn:
        row = conn.execute("SELECT current_setting('server_version')").fetchone()
    assert row is not None
    got["postgres"] = str(row[0])
    return got


async def _redis_version(redis_url: str) -> str:
    driver: Any = driver_from_url(f"{redis_url}?prefix=bench-webhooks-version")
    async with driver:
        info = await driver.client.info("server")
    return str(info["redis_version"])


async def run(
    config: Config, kinds: tuple[str, ...], stores: tuple[str, ...], servers: Servers
) -> dict[str, Any]:
    """Every measurement asked for, each on a fresh store: the result (not yet saved)."""
    about: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "versions": {**_versions(servers.pg), "redis": await _redis_version(servers.redis)},
        "commit": _git("describe", "--always", "--dirty"),
        "load_before": os.getloadavg(),
    }
    samples: list[dict[str, Any]] = []
    for kind in kinds:
        for where in stores:
            print(f"bench: {kind} on {where} (load {os.getloadavg()[0]:.2f})", flush=True)
            measure = measure_send if kind == "send" else measure_receive
            samples.append(
                {"kind": kind, "backend": where, **await measure(where, config, servers)}
            )
    about["load_after"] = os.getloadavg()
    return {"config": asdict(config), "kinds": list(kinds), "stores": list(stores),
            "machine": about, "samples": samples}  # fmt: skip


def render(result: dict[str, Any]) -> str:
    """The markdown of a result (docs/factories.md, "Measured"): one row per store and kind."""
    about = result["machine"]
    v = about["versions"]
    lines = [
        f"**{about['date'][:10]}, {about['nproc']} cores (shared), load"
        f" {about['load_before'][0]:.2f} before and {about['load_after'][0]:.2f} after,"
        f" Python {about['python']}, PostgreSQL {v['postgres']}, Redis {v['redis']}, httpx"
        f" {v['httpx']}, uvicorn {v['uvicorn']}, Starlette {v['starlette']}, ours at"
        f" {about['commit']}**",
        "",
        "| store | what | rate | latency p50 / p95 | CPU s | load 1m before → after |",
        "|---|---|---:|---:|---:|---:|",
    ]
    names = {"pg": "Postgres", "redis": "Redis"}
    for s in result["samples"]:
        lat, load = s["latency_ms"], s["load_1m"]
        if s["kind"] == "send":
            what = (
                f"send: {s['jobs']:,} `webhook()` jobs drained by one worker (default"
                f" concurrency) to a 204 endpoint; latency enqueue → delivery, one at a time"
                f" ({s['trickle']})"
            )
            rate = f"{s['jobs_per_s']:,.0f} jobs/s"
            cpu = f"worker {s['worker_cpu_s']:.1f}"
        else:
            what = (
                f"receive: {s['requests']:,} signed deliveries, {s['concurrency']} in flight,"
                " one uvicorn process, enqueue included"
            )
            rate = f"{s['req_per_s']:,.0f} req/s"
            cpu = f"server {s['server_cpu_s']:.1f}"
        lines.append(
            f"| {names[s['backend']]} | {what} | {rate} | {lat['p50']:.1f} / {lat['p95']:.1f}"
            f" ms | {cpu} | {load['before']:.2f} → {load['after']:.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["load-generator"]:
        base, requests, concurrency, tag = args_in[1:5]
        got = asyncio.run(generate(base, int(requests), int(concurrency), tag))
        print(json.dumps(got))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m bench.webhooks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, seconds in all")
    parser.add_argument("--jobs", type=int, help=f"webhook() jobs drained (default {FULL.jobs:,})")
    parser.add_argument("--requests", type=int, help=f"default {FULL.requests:,}")
    parser.add_argument("--concurrency", type=int, help=f"default {FULL.concurrency}")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(KINDS)}")
    parser.add_argument("--stores", help=f"comma-separated subset of {','.join(STORES)}")
    parser.add_argument("--pg-url", default=PG_URL, help="the server (default %(default)s)")
    parser.add_argument("--redis-url", default=REDIS_URL, help="the server (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(args_in)
    config = DRY if args.dry_run else FULL
    for option, value in (
        ("jobs", args.jobs),
        ("requests", args.requests),
        ("concurrency", args.concurrency),
    ):
        if value is not None:
            config = replace(config, **{option: value})
    kinds = tuple(args.only.split(",")) if args.only else KINDS
    stores = tuple(args.stores.split(",")) if args.stores else STORES
    if set(kinds) - set(KINDS):
        parser.error(f"unknown kinds: {', '.join(sorted(set(kinds) - set(KINDS)))}")
    if set(stores) - set(STORES):
        parser.error(f"unknown stores: {', '.join(sorted(set(stores) - set(STORES)))}")
    load = os.getloadavg()[0]
    if load >= BUSY_LOAD:
        print(f"bench: load average {load:.2f}: other work shares the cores; numbers wander")
    result = asyncio.run(run(config, kinds, stores, Servers(args.pg_url, args.redis_url)))
    result["dry_run"] = args.dry_run
    # What was asked, never where it went or the servers' URLs (a path, a password).
    asked = [
        f"--{name.replace('_', '-')} {value}"
        for name, value in vars(args).items()
        if name in ("jobs", "requests", "concurrency", "only", "stores") and value is not None
    ]
    result["command"] = " ".join(
        ["python -m bench.webhooks", *(["--dry-run"] if args.dry_run else []), *asked]
    )
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"webhooks-{stamp}{'-dry' if args.dry_run else ''}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(render(result))
    print(f"\n(results: {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
