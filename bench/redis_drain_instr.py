"""Instructions a drained job costs on Redis, the worker's and the server's (issue 29 item 6).

    .venv/bin/python bench/redis_drain_instr.py TREE [TREE ...] [--jobs 4000]
        [--concurrency 50 | --loop 50] [--port 26452] [--rounds 1] [--no-client | --timed]
        [--event-loop asyncio|uvloop|auto]

Starts a private `redis-server --port <port> --save '' --appendonly no` under `valgrind
--tool=callgrind`, and per tree and round (trees in turn, each round's order reversed) a process on
that tree (its PYTHONPATH) under callgrind too, which enqueues `--jobs` no-op jobs
(`bench.peers.ours_peer.noop`, `enqueue_many`) into a fresh prefix and says so; both counters are
then zeroed (`callgrind_control -z`), ONE in-process `Worker` at `--concurrency` drains the jobs,
and both are dumped (`-d`): the instructions (Ir) each ran during the drain alone, per job, and the
claims and acks (script calls) per job, with how they met (`_turns`: the median claim and ack call,
and the share of acks run with no claim in flight). Counts, not times: a busy machine cannot skew
them, though it and valgrind's slowness shape the batches (the calls per job say how). `--loop N`
drains by claims of N jobs each acked whole instead of a `Worker` (the same shape every run);
`--timed` runs neither process under valgrind and reports the drain's rate and CPU a job (the
server's from its `INFO cpu`) with the median of the pairs' ratios: run it under the bench lock.
`--event-loop` is the client's loop (`ujobs worker --loop`'s choice; the harness's worker runs
`auto`: uvloop where installed); asyncio's by default.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

VALGRIND = ["valgrind", "--tool=callgrind", "--dump-instr=no", "--dump-line=no"]


async def _loop(driver: object, jobs: int, batch: int) -> None:
    """Claims of `batch` jobs, each acked whole, until none is left (no worker: the scripts'
    own shape, the same every run)."""
    from jobs_core.records import Ack, ClaimParams

    now = int(time.time() * 1000)
    while True:
        now += 1
        got = await driver.job_claim(  # type: ignore[attr-defined]
            ClaimParams(("default",), "w-loop", batch, 60_000, now)
        )
        if not got.jobs:
            return
        await driver.job_ack([Ack(j.fence, now) for j in got.jobs])  # type: ignore[attr-defined]


async def _one(url: str, jobs: int, concurrency: int) -> None:
    """The client side, run in the measured tree: fill, wait for a line, drain, report. A
    negative `concurrency` drains by `_loop` in batches of its absolute value."""
    import gc

    from bench.peers.ours_peer import noop
    from jobs_core.driver import MAX_ENQUEUE_BATCH
    from jobs_core.facade import Jobs
    from jobs_core.worker import Worker
    from jobs_redis import RedisDriver

    driver = RedisDriver(url, prefix="instr_" + uuid.uuid4().hex[:10])
    calls = {"job_claim": 0, "job_ack": 0}
    spans: list[tuple[str, float, float]] = []
    run = driver._run

    async def counted(name: str, keys: object, args: object) -> object:
        if name not in calls:
            return await run(name, keys, args)  # type: ignore[arg-type]
        calls[name] += 1
        sent = time.perf_counter()
        try:
            return await run(name, keys, args)  # type: ignore[arg-type]
        finally:
            spans.append((name, sent, time.perf_counter()))

    driver._run = counted  # type: ignore[method-assign]
    async with driver:
        inputs = [{"k": str(i)} for i in range(jobs)]
        for start in range(0, jobs, MAX_ENQUEUE_BATCH):
            await Jobs(driver).enqueue_many(noop, inputs[start : start + MAX_ENQUEUE_BATCH])
        worker = Worker(driver, [noop], concurrency=max(concurrency, 1))
        gc.collect()
        gc.freeze()
        calls.update(job_claim=0, job_ack=0)
        spans.clear()
        print("filled", flush=True)
        sys.stdin.readline()
        began, cpu = time.perf_counter(), time.process_time()
        if concurrency < 0:
            await _loop(driver, jobs, -concurrency)
        else:
            await worker.start()
            while worker.stats.completed < jobs:  # noqa: ASYNC110 - a hook: in the timed path
                await asyncio.sleep(0.005)
        took = time.perf_counter() - began
        cpu = time.process_time() - cpu
        print(json.dumps({"seconds": took, "cpu": cpu, **calls, **_turns(spans)}), flush=True)
        sys.stdin.readline()
        if concurrency > 0:
            await worker.stop()


def _turns(spans: list[tuple[str, float, float]]) -> dict[str, float]:
    """How the drain's claims and acks met, from each call's send and answer in the client:
    the median claim and ack call in ms, and the share of acks that ran with no claim in flight
    at any moment of theirs (the server ran them while the worker ran a batch, not while it
    waited on a claim)."""
    claims = [(a, b) for name, a, b in spans if name == "job_claim"]
    acks = [(a, b) for name, a, b in spans if name == "job_ack"]
    alone = sum(1 for a, b in acks if not any(c < b and a < d for c, d in claims))
    return {
        "claim_ms": statistics.median(b - a for a, b in claims) * 1000 if claims else 0.0,
        "ack_ms": statistics.median(b - a for a, b in acks) * 1000 if acks else 0.0,
        "acks_alone": alone / len(acks) if acks else 0.0,
    }


def _ctl(flag: str, pid: int) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, capture_output=True)


def _ir(pattern: str, since: set[str]) -> int:
    """The Ir total of the one dump matching `pattern` that is not in `since`."""
    for _ in range(200):
        new = sorted(set(glob.glob(pattern)) - since)
        for name in new:
            text = Path(name).read_text()
            for line in text.splitlines():
                if line.startswith(("totals:", "summary:")):
                    since.add(name)
                    return int(line.split()[1])
        time.sleep(0.1)
    raise RuntimeError(f"no dump for {pattern}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="*", type=Path)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--loop", type=int, default=0, help="no worker: claims of this many, each acked whole"
    )
    parser.add_argument("--port", type=int, default=26452)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--no-client", action="store_true", help="count the server only")
    parser.add_argument(
        "--timed",
        action="store_true",
        help="no valgrind: the drain's rate and CPU a job (server's from INFO cpu), and the"
        " median of the pairs' ratios of the later trees to the first (run it under the bench"
        " lock)",
    )
    parser.add_argument(
        "--event-loop", default="asyncio", help="the client's loop: asyncio, uvloop or auto"
    )
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        from jobs_core.lifecycle import loop_factory

        with asyncio.Runner(loop_factory=loop_factory(args.one[3])) as runner:
            runner.run(_one(args.one[0], int(args.one[1]), int(args.one[2])))
        return 0
    out = Path(tempfile.mkdtemp(prefix="redis_drain_instr."))
    grind = [] if args.timed else [*VALGRIND, f"--callgrind-out-file={out}/srv.%p"]
    if args.timed:
        args.no_client = True
    server = subprocess.Popen(
        [*grind, "redis-server", "--port",
         str(args.port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    seen: set[str] = set()
    url = f"redis://127.0.0.1:{args.port}/0"
    rows: dict[str, list[dict[str, float]]] = {str(t): [] for t in args.trees}
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", args.port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        for r in range(args.rounds):
            order = args.trees if r % 2 == 0 else args.trees[::-1]
            for tree in order:
                env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
                shape = -args.loop if args.loop else args.concurrency
                cmd = [sys.executable, __file__, "--one", url, str(args.jobs), str(shape)]
                cmd.append(args.event_loop)
                if not args.no_client:
                    cmd = [*VALGRIND, f"--callgrind-out-file={out}/cli.%p", *cmd]
                client = subprocess.Popen(
                    cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
                )
                assert client.stdin is not None and client.stdout is not None
                while client.stdout.readline().strip() != "filled":
                    pass
                if args.timed:
                    srv_cpu = _server_cpu(args.port)
                else:
                    _ctl("-z", server.pid)
                if not args.no_client:
                    _ctl("-z", client.pid)
                client.stdin.write("go\n")
                client.stdin.flush()
                got = json.loads(client.stdout.readline())
                row = {
                    "claims_per_job": got["job_claim"] / args.jobs,
                    "acks_per_job": got["job_ack"] / args.jobs,
                    "claim_ms": got["claim_ms"],
                    "ack_ms": got["ack_ms"],
                    "acks_alone": got["acks_alone"],
                }
                if args.timed:
                    row["per_s"] = args.jobs / got["seconds"]
                    row["client_cpu_us"] = got["cpu"] * 1e6 / args.jobs
                    row["server_cpu_us"] = (_server_cpu(args.port) - srv_cpu) * 1e6 / args.jobs
                else:
                    _ctl("-d", server.pid)
                    row["server_ir_per_job"] = _ir(f"{out}/srv.{server.pid}.*", seen) / args.jobs
                if not args.no_client:
                    _ctl("-d", client.pid)
                    row["client_ir_per_job"] = _ir(f"{out}/cli.{client.pid}.*", seen) / args.jobs
                client.stdin.write("end\n")
                client.stdin.flush()
                client.wait()
                rows[str(tree)].append(row)
                shown = {k: round(v, 4) for k, v in row.items()}
                print(f"{tree}: " + json.dumps(shown), flush=True)
    finally:
        server.terminate()
        server.wait()
    first = str(args.trees[0])
    for tree in args.trees[1:]:
        for key in rows[first][0]:
            pairs = [
                b[key] / a[key] for a, b in zip(rows[first], rows[str(tree)], strict=True) if a[key]
            ]
            if not pairs:  # a figure that was 0 in every run of the first tree: no ratio
                continue
            print(
                f"{tree} / {first}: {key} median {statistics.median(pairs):.3f}"
                f" ({min(pairs):.3f}-{max(pairs):.3f}) over {len(pairs)} pairs;"
                f" medians {statistics.median(r[key] for r in rows[first]):.4g}"
                f" -> {statistics.median(r[key] for r in rows[str(tree)]):.4g}"
            )
    print(f"load {os.getloadavg()[0]:.2f}")
    return 0


def _server_cpu(port: int) -> float:
    """used_cpu_sys + used_cpu_user of the server on `port`, from INFO cpu."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"INFO cpu\r\n")
        text = b""
        while text.count(b"\r\n") < 2 or b"used_cpu_user:" not in text:
            text += conn.recv(65536)
    info = dict(line.split(":", 1) for line in text.decode().splitlines() if ":" in line)
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


if __name__ == "__main__":
    sys.exit(main())
