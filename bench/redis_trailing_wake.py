"""The Redis trailing wake's price and gain, paired: `python -m bench.redis_trailing_wake
--old TREE --new TREE [--pairs 6] [--rate 200] [--seconds 10] [--burst 1] [--gap-ms 0]`.

Each run, with the given tree's `jobs_*` on the path: a worker process (concurrency 10, the
worker's default polls) idles on a fresh prefix, then one producer enqueues `burst` due jobs
(`gap_ms` apart) `rate` times a second for `seconds` (`job_enqueue`, one a call, each stamped
with its creation wall time) while a subscriber of the queue's wake channel counts the
PUBLISHes. A job is "quiet" when an earlier one of the run fell in its wake slot (one producer:
the slot's PUBLISH was that one's). Per run:
the wait of quiet and of woken jobs (the enqueue's return to the body's start, ms, p50 and p95),
PUBLISHes per job, the worker's claims per job (and the empty ones) and its CPU per job. Runs
alternate old and new; one JSON line per run prints, and a summary of the paired ratios.
Nothing is written to the tree.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

PYTHON = Path(sys.executable)
SLOT_MS = 5  # the driver's default wake slot


async def _worker(url: str, prefix: str, out: Path, ready: Path) -> None:
    from jobs_core.job import JobRegistry, job
    from jobs_core.worker import Worker
    from jobs_redis import RedisDriver

    registry = JobRegistry()
    started: dict[str, float] = {}

    @job(tenant="none", name="noop", queue="q", registry=registry)
    async def noop(payload: Any, ctx: Any) -> None:
        started[payload["k"]] = time.time()

    claims = [0, 0]
    inner = RedisDriver._job_claim

    async def counted(self: RedisDriver, params: Any) -> Any:
        result = await inner(self, params)
        claims[0] += 1
        claims[1] += not result.jobs
        return result

    RedisDriver._job_claim = counted  # type: ignore[method-assign]
    driver = RedisDriver(url, prefix=prefix)
    worker = Worker(driver, [noop], concurrency=10, retention=None)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await worker.start()
    wake = worker._wake
    for _ in range(3000):  # proven within 30 s, or the run measures the poll alone
        if wake is not None and wake.is_live():
            break
        await asyncio.sleep(0.01)
    cpu0, claims0 = time.process_time(), list(claims)
    await asyncio.to_thread(ready.write_text, "1")
    await stop.wait()
    cpu = time.process_time() - cpu0
    await worker.stop()
    await driver.close()
    await asyncio.to_thread(
        out.write_text,
        json.dumps(
            {
                "started": started,
                "claims": claims[0] - claims0[0],
                "empty": claims[1] - claims0[1],
                "cpu_s": cpu,
            }
        ),
    )


async def _produce(
    url: str, prefix: str, rate: float, seconds: float, burst: int, gap_ms: float, out: Path
) -> None:
    from redis.asyncio import Redis

    from jobs_core.records import NewJob
    from jobs_redis import RedisDriver

    driver = RedisDriver(url, prefix=prefix)
    listener: Any = Redis.from_url(url, decode_responses=True)
    pubsub = listener.pubsub()
    await pubsub.subscribe(driver.keys.channel("q"))
    published = 0

    async def count() -> None:
        nonlocal published
        async for msg in pubsub.listen():
            if msg.get("type") == "message":
                published += 1

    counting = asyncio.get_running_loop().create_task(count())
    await asyncio.sleep(0.2)
    jobs: list[list[Any]] = []
    last_slot = -1
    begun = time.perf_counter()
    for i in range(round(rate * seconds) * burst):
        delay = begun + i // burst / rate + i % burst * gap_ms / 1000 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        k = f"j{i}"
        now_ms = int(time.time() * 1000)
        slot = now_ms // SLOT_MS
        await driver.job_enqueue(
            NewJob(
                id=k,
                run_id=k,
                name="noop",
                queue="q",
                tenant_id=None,
                idempotency_key=k,
                input_json=json.dumps({"k": k}),
                priority=0,
                run_at_ms=now_ms,
                max_attempts=3,
                created_at_ms=now_ms,
            )
        )
        jobs.append([k, time.time(), slot == last_slot])
        last_slot = slot
    await asyncio.sleep(1.0)
    counting.cancel()
    await pubsub.aclose()
    await listener.aclose()
    await driver.close()
    await asyncio.to_thread(out.write_text, json.dumps({"jobs": jobs, "published": published}))


def _q(xs: list[float], p: int) -> float:
    if len(xs) < 2:
        return float("nan")
    return statistics.quantiles(xs, n=100, method="inclusive")[p - 1]


def run_once(
    tree: Path, url: str, rate: float, seconds: float, burst: int, gap_ms: float
) -> dict[str, Any]:
    """One run on `tree`'s code: the worker started and idle, the stream, the numbers."""
    prefix = f"trail-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="redis-trail-"))
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # `-P`: the tree under test alone provides `jobs_*`, not this file's directory.
    me = [str(PYTHON), "-P", str(Path(__file__).resolve())]
    ready, wout, pout = tmp / "ready", tmp / "worker.json", tmp / "produced.json"
    worker = subprocess.Popen([*me, "worker", url, prefix, str(wout), str(ready)], env=env)
    try:
        while not ready.exists():
            if worker.poll() is not None:
                raise SystemExit("the worker died")
            time.sleep(0.05)
        time.sleep(1.0)
        subprocess.run(
            [*me, "produce", url, prefix, *map(str, (rate, seconds, burst, gap_ms)), str(pout)],
            env=env,
            check=True,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)
    w, p = json.loads(wout.read_text()), json.loads(pout.read_text())
    waits: dict[bool, list[float]] = {True: [], False: []}
    for k, returned, quiet in p["jobs"]:
        if k in w["started"]:
            waits[quiet].append((w["started"][k] - returned) * 1000)
    n = len(p["jobs"])
    _purge(url, prefix)
    return {
        "n": n,
        "done": len(w["started"]),
        "quiet": len(waits[True]),
        "quiet_p50_ms": _q(waits[True], 50),
        "quiet_p95_ms": _q(waits[True], 95),
        "woke_p50_ms": _q(waits[False], 50),
        "woke_p95_ms": _q(waits[False], 95),
        "publishes_per_job": p["published"] / n,
        "claims_per_job": w["claims"] / n,
        "empty_claims": w["empty"],
        "worker_cpu_ms_per_job": w["cpu_s"] * 1000 / n,
    }


def _purge(url: str, prefix: str) -> None:
    import redis

    from jobs_redis.keys import Keys

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match=Keys(prefix).pattern(), count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        url, prefix, out, ready = sys.argv[2:6]
        asyncio.run(_worker(url, prefix, Path(out), Path(ready)))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "produce":
        url, prefix, rate, seconds, *shape, out = sys.argv[2:]
        burst, gap = (*shape, "1", "0")[:2]
        asyncio.run(
            _produce(url, prefix, float(rate), float(seconds), int(burst), float(gap), Path(out))
        )
        return
    parser = argparse.ArgumentParser(prog="python -m bench.redis_trailing_wake")
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=1, help="jobs enqueued together a tick")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="between a burst's jobs")
    args = parser.parse_args()
    rows: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    for i in range(args.pairs):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for which in order:
            got = run_once(
                getattr(args, which),
                args.redis_url,
                args.rate,
                args.seconds,
                args.burst,
                args.gap_ms,
            )
            got.update(
                tree=which, pair=i, load=os.getloadavg()[0], rate=args.rate, burst=args.burst
            )
            rows[which].append(got)
            print(json.dumps(got), flush=True)
    for key in (
        "quiet_p50_ms",
        "quiet_p95_ms",
        "woke_p50_ms",
        "publishes_per_job",
        "claims_per_job",
        "worker_cpu_ms_per_job",
    ):
        ratios = sorted(n[key] / o[key] for o, n in zip(rows["old"], rows["new"], strict=True))
        olds = sorted(r[key] for r in rows["old"])
        news = sorted(r[key] for r in rows["new"])
        print(
            f"{key:>22}: new/old median {statistics.median(ratios):.2f}"
            f" ({ratios[0]:.2f}-{ratios[-1]:.2f}); old {statistics.median(olds):.3f}"
            f" ({olds[0]:.3f}-{olds[-1]:.3f}), new {statistics.median(news):.3f}"
            f" ({news[0]:.3f}-{news[-1]:.3f})"
        )


if __name__ == "__main__":
    main()
