"""Where our pickup time goes: `python -m bench.pickup_trace --pg-url URL [--rate 200]`.

One `ujobs worker` process (concurrency 10, as the harness's c10) on a fresh schema, fed at a
steady rate the way the harness's stream phase feeds it (each job stamped with its enqueue wall
time just before the call). The worker is instrumented in-process: the wall time of each wake
NOTIFY it receives, each claim sent and answered (with the jobs it took), and each body's start;
the producer records each enqueue's return. Each job's pickup is then split into:

- enqueue: the stamp to the enqueue call's return (round trip, commit; the NOTIFY leaves at commit)
- to claim: the enqueue's return to the claim that took it being sent (the NOTIFY crossing, the
  worker's reaction, or a wait behind the previous claim)
- claim: that claim's round trip
- to body: the claim's answer to the body's start (admission, task start)

Medians and p95 of each part print, then what the worker did per job over the stream (its
CPU, statements sent, transactions, claims and empty claims, ack calls, NOTIFYs received, wakes,
claim-loop waits, event-loop turns, timers and tasks), counted in-process. `--tree OTHER` runs
the worker on another checkout's `jobs_*` (the probes stay this tree's): old and new, alternately.
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

from bench.systems import OURS_PYTHON, ROOT

TRACE_ENV = "BENCH_TRACE_FILE"
TREE_ENV = "BENCH_TRACE_TREE"
COUNTS = (
    "statements",
    "transactions",
    "claims",
    "empty_claims",
    "acks",
    "notifies",
    "wakes",
    "waits",
    "loop_turns",
    "timers",
    "tasks",
)


def _install_counters(out: Any) -> None:
    """Count, in this (worker) process, what each job costs; written on a `counts` line when
    the trace file is told to (a `mark` line's arrival is polled by a timer)."""
    import asyncio.base_events as be

    import psycopg

    import jobs_core.worker.claim as claim_mod
    from jobs_pg.driver import PgDriver

    n = dict.fromkeys(COUNTS, 0)

    def wrap(owner: Any, name: str, key: str) -> None:
        orig = getattr(owner, name)

        def counted(*a: Any, **kw: Any) -> Any:
            n[key] += 1
            return orig(*a, **kw)

        setattr(owner, name, counted)

    wrap(psycopg.AsyncCursor, "execute", "statements")
    wrap(be.BaseEventLoop, "_run_once", "loop_turns")
    wrap(be.BaseEventLoop, "call_at", "timers")
    wrap(be.BaseEventLoop, "create_task", "tasks")
    wrap(claim_mod.ClaimLoop, "on_wake", "wakes")
    wrap(claim_mod, "wait_kick", "waits")
    conn = PgDriver._conn

    def counted_conn(self: PgDriver, *a: Any, **kw: Any) -> Any:
        n["transactions"] += 1
        return conn(self, *a, **kw)

    PgDriver._conn = counted_conn  # type: ignore[method-assign]
    ack = PgDriver._job_ack

    async def counted_ack(self: PgDriver, *a: Any, **kw: Any) -> Any:
        n["acks"] += 1
        return await ack(self, *a, **kw)

    PgDriver._job_ack = counted_ack  # type: ignore[method-assign]

    def snapshot() -> None:
        out.write(json.dumps({"ev": "counts", "cpu": time.process_time(), **n}) + "\n")

    import signal

    signal.signal(signal.SIGUSR1, lambda *_: snapshot())
    _COUNTED.update(n=n)


_COUNTED: dict[str, Any] = {}


def _install_probes(trace: Path) -> None:
    """Wrap the wake's delivery, the claim and the body start of this (worker) process."""
    from jobs_pg.driver import PgDriver
    from jobs_pg.wake import PgWakeSubscription

    out = trace.open("a", buffering=1)
    _install_counters(out)
    counted: dict[str, int] = _COUNTED["n"]

    deliver = PgWakeSubscription._deliver

    def traced_deliver(self: PgWakeSubscription, payload: str) -> None:
        counted["notifies"] += 1
        out.write(json.dumps({"ev": "notify", "t": time.time(), "cpu": time.thread_time()}) + "\n")
        deliver(self, payload)

    PgWakeSubscription._deliver = traced_deliver  # type: ignore[method-assign]

    claim = PgDriver._job_claim

    async def traced_claim(self: PgDriver, params: Any) -> Any:
        sent, sent_cpu = time.time(), time.thread_time()
        result = await claim(self, params)
        counted["claims"] += 1
        counted["empty_claims"] += not result.jobs
        answered, answered_cpu = time.time(), time.thread_time()
        keys = [json.loads(j.input_json).get("k") for j in result.jobs]
        out.write(
            json.dumps(
                {
                    "ev": "claim",
                    "sent": sent,
                    "answered": answered,
                    "sent_cpu": sent_cpu,
                    "answered_cpu": answered_cpu,
                    "limit": params.limit,
                    "k": keys,
                }
            )
            + "\n"
        )
        return result

    PgDriver._job_claim = traced_claim  # type: ignore[method-assign]

    import bench.peers.ours_peer as peer

    record = peer.record_start

    def traced_start(inp: dict[str, Any]) -> None:
        cpu = time.thread_time()
        record(inp)
        if "t" in inp:
            out.write(json.dumps({"ev": "body", "k": inp["k"], "cpu": cpu}) + "\n")

    peer.record_start = traced_start


def worker_main(argv: list[str]) -> None:
    """The worker, instrumented: `ujobs worker ARGV...`."""
    tree = os.environ.get(TREE_ENV)
    if tree:
        sys.path.insert(0, tree)
        # This module's imports (bench.systems, bench.stores) loaded this tree's jobs_*: drop
        # them, so the probes and the worker import the other checkout's.
        for name in [m for m in sys.modules if m.partition(".")[0].startswith("jobs_")]:
            del sys.modules[name]
    _install_probes(Path(os.environ[TRACE_ENV]))
    from jobs_core.cli import main

    sys.argv = ["ujobs", "worker", *argv]
    main()


async def _produce(url: str, rate: float, seconds: float, tag: str) -> list[str]:
    """Enqueue at `rate` for `seconds`, as the harness's client does: one line a job."""
    from bench.peers.ours_peer import _Client
    from jobs_core.urls import driver_from_url

    lines = []
    async with driver_from_url(url) as driver:
        client = _Client(driver)
        started = time.perf_counter()
        for i in range(round(rate * seconds)):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            before = driver._spent_slots.get("default")  # type: ignore[attr-defined]
            inp = {"k": f"{tag}-{i}", "t": time.time()}
            await client.enqueue(inp)
            # A new slot recorded: this enqueue notified (else it went out quiet).
            woke = int(driver._spent_slots.get("default") != before)  # type: ignore[attr-defined]
            lines.append(f"{inp['k']} {inp['t']} {time.time()} {woke}\n")
    return lines


async def _warm(url: str, tag: str) -> None:
    from bench.peers.ours_peer import _Client
    from jobs_core.urls import driver_from_url

    async with driver_from_url(url) as driver:
        await _Client(driver).enqueue({"k": f"{tag}-warm"})


def _cut(xs: list[float]) -> str:
    if len(xs) < 2:
        return "n/a"
    q = statistics.quantiles(xs, n=100, method="inclusive")
    return f"p50 {q[49]:6.2f}  p95 {q[94]:6.2f}  mean {statistics.fmean(xs):6.2f}  n {len(xs)}"


def analyse(trace: Path, produced: Path, starts: Path) -> dict[str, Any]:
    stamp: dict[str, tuple[float, float]] = {}
    woke: dict[str, bool] = {}
    for line in produced.read_text().splitlines():
        k, t0, t1, w = line.split()
        stamp[k] = (float(t0), float(t1))
        woke[k] = w == "1"
    started: dict[float, float] = {}
    for line in starts.read_text().splitlines():
        t0, s = line.split()
        started[float(t0)] = float(s)
    notifies: list[float] = []
    notify_cpu: list[float] = []
    body_cpu: dict[str, float] = {}
    claim_of: dict[str, dict[str, Any]] = {}
    claims: list[dict[str, Any]] = []
    counts: list[dict[str, Any]] = []
    for line in trace.read_text().splitlines():
        ev = json.loads(line)
        if ev["ev"] == "counts":
            counts.append(ev)
        elif ev["ev"] == "notify":
            notifies.append(ev["t"])
            notify_cpu.append(ev["cpu"])
        elif ev["ev"] == "body":
            body_cpu[ev["k"]] = ev["cpu"]
        else:
            claims.append(ev)
            for k in ev["k"]:
                claim_of[k] = ev
    parts: dict[str, list[float]] = {
        k: []
        for k in (
            "pickup",
            "pickup_woke",
            "pickup_quiet",
            "enqueue",
            "to_claim",
            "to_claim_woke",
            "to_claim_quiet",
            "claim",
            "to_body",
            "notified_after",
            "cpu_answer_to_body",
            "cpu_notify_to_send",
            "cpu_in_claim",
        )
    }
    per_claim = [len(c["k"]) for c in claims]
    notifies.sort()
    import bisect

    for k, (t0, t1) in stamp.items():
        c = claim_of.get(k)
        s = started.get(t0)
        if c is None or s is None:
            continue
        parts["pickup"].append((s - t0) * 1000)
        parts["enqueue"].append((t1 - t0) * 1000)
        parts["to_claim"].append((c["sent"] - t1) * 1000)
        how = "woke" if woke[k] else "quiet"
        parts["pickup_" + how].append((s - t0) * 1000)
        parts["to_claim_" + how].append((c["sent"] - t1) * 1000)
        parts["claim"].append((c["answered"] - c["sent"]) * 1000)
        parts["to_body"].append((s - c["answered"]) * 1000)
        if k in body_cpu:
            parts["cpu_answer_to_body"].append((body_cpu[k] - c["answered_cpu"]) * 1000)
        parts["cpu_in_claim"].append((c["answered_cpu"] - c["sent_cpu"]) * 1000)
        j = bisect.bisect_left(notifies, c["sent"]) - 1
        if j >= 0 and notifies[j] >= t0:
            parts["cpu_notify_to_send"].append((c["sent_cpu"] - notify_cpu[j]) * 1000)
        i = bisect.bisect_left(notifies, t0)
        if i < len(notifies):
            parts["notified_after"].append((notifies[i] - t1) * 1000)
    for name, xs in parts.items():
        print(f"{name:>15}: {_cut(xs)}")
    print(
        f"{'claims':>15}: {len(claims)} ({sum(1 for n in per_claim if n == 0)} empty),"
        f" jobs per non-empty claim {statistics.fmean([n for n in per_claim if n] or [0]):.2f},"
        f" notifies {len(notifies)}"
    )
    if len(counts) >= 2 and stamp:
        jobs = len(stamp)
        before, after = counts[0], counts[-1]
        per = {k: (after[k] - before[k]) / jobs for k in ("cpu", *COUNTS)}
        print(f"{'per job':>15}: cpu {per.pop('cpu') * 1e6:.0f} µs (probes included); ", end="")
        print(", ".join(f"{k} {v:.2f}" for k, v in per.items()))
    return {name: statistics.median(xs) for name, xs in parts.items() if xs}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(prog="python -m bench.pickup_trace")
    parser.add_argument("--pg-url", required=True)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--tree", help="run the worker on this checkout's jobs_* packages")
    args = parser.parse_args()

    schema = f"trace_{uuid.uuid4().hex[:8]}"
    url = f"{args.pg_url}?schema={schema}"
    from jobs_pg import migrate

    migrate.upgrade(args.pg_url, schema)
    tmp = Path(tempfile.mkdtemp(prefix="pickup-trace-"))
    trace, produced, starts = tmp / "trace.jsonl", tmp / "produced.txt", tmp / "starts.txt"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        TRACE_ENV: str(trace),
        **({TREE_ENV: str(Path(args.tree).resolve())} if args.tree else {}),
        "BENCH_LATENCY_FILE": str(starts),
    }
    argv = [str(OURS_PYTHON), "-m", "bench.pickup_trace", "worker", "bench.peers.ours_peer"]
    argv += ["--driver", url, "--quiet", "--concurrency", str(args.concurrency)]
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        tag = uuid.uuid4().hex[:8]
        asyncio.run(_warm(url, tag))
        # The worker is up once it took the warm-up job; then it idles a second, as in the harness.
        while f"{tag}-warm" not in (trace.read_text() if trace.exists() else ""):
            time.sleep(0.1)
        time.sleep(1.0)
        proc.send_signal(signal.SIGUSR1)
        produced.write_text("".join(asyncio.run(_produce(url, args.rate, args.seconds, tag))))
        time.sleep(1.0)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(20)
    analyse(trace, produced, starts)
    import sqlalchemy as sa

    from jobs_pg.urls import split_options

    eng = sa.create_engine(split_options(args.pg_url)[0])
    with eng.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    eng.dispose()


if __name__ == "__main__":
    main()
