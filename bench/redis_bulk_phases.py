"""Where a bulk enqueue's wall time goes: the harness's bulk phase, timed by parts.

`PYTHONPATH=<tree> .venv/bin/python bench/redis_bulk_phases.py --url redis://127.0.0.1:PORT/0
[--rounds 5] [--n 20000]` (run by path, so `<tree>` can be a tree without this file). The URL
must name a PRIVATE server: its `INFO commandstats` and `INFO cpu` are the whole server's.

Each round enqueues `n` jobs as `bench.peers.ours_peer` does (`Jobs.enqueue_many` of the
harness's no-op job, `MAX_ENQUEUE_BATCH` a call) on a fresh prefix and reports, per record in
µs: the wall time; the client's time building the records (`build_records`), checking them
(`check_new_jobs`), packing the chunks (`_chunk_resp`), sending them (`send`) and awaiting their
answers (`read`, the server's time included); the server's script time (`INFO commandstats`
usec of EVALSHA) and CPU (user + sys); and `serial`, wall less the server's script time: the
time no script ran (the client's work before the first write, the server receiving, the gaps).
Prints one JSON object a round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import redis

import jobs_core.driver as core_driver
import jobs_core.facade as facade
from jobs_core.driver import MAX_ENQUEUE_BATCH
from jobs_core.facade import Jobs
from jobs_core.job import job
from jobs_redis import RedisDriver

spent: defaultdict[str, float] = defaultdict(float)


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - began

    return wrapper


def _timed_async(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - began

    return wrapper


facade.build_records = _timed("build", facade.build_records)
core_driver.check_new_jobs = _timed("check", core_driver.check_new_jobs)
RedisDriver._chunk_resp = _timed("pack", RedisDriver._chunk_resp)  # type: ignore[method-assign]


def _patch_connection() -> None:
    from redis.asyncio.connection import Connection

    Connection.read_response = _timed_async("read", Connection.read_response)  # type: ignore[method-assign]
    Connection.send_packed_command = _timed_async("send", Connection.send_packed_command)  # type: ignore[method-assign]


@job(name="noop", queue="default", idempotency_key=lambda inp: inp["k"], tenant="none")
async def _noop(inp: Any, ctx: Any) -> None:
    return None


def _server(url: str) -> tuple[float, float]:
    with redis.Redis.from_url(url) as r:
        stats = r.info("commandstats").get("cmdstat_evalsha", {"usec": 0})
        cpu = r.info("cpu")
        return stats["usec"] / 1e6, cpu["used_cpu_user"] + cpu["used_cpu_sys"]


async def _round(url: str, n: int) -> dict[str, float]:
    tag = uuid.uuid4().hex[:8]
    inputs = [{"k": f"{tag}-{i}"} for i in range(n)]
    async with RedisDriver(url, prefix=f"bp{tag}") as driver:
        jobs = Jobs(driver)
        await jobs.enqueue(_noop, {"k": f"{tag}-warm"})
        spent.clear()
        script0, cpu0 = _server(url)
        cpu_c0 = time.process_time()
        began = time.perf_counter()
        for start in range(0, n, MAX_ENQUEUE_BATCH):
            await jobs.enqueue_many(_noop, inputs[start : start + MAX_ENQUEUE_BATCH])
        wall = time.perf_counter() - began
        cpu_c = time.process_time() - cpu_c0
        script1, cpu1 = _server(url)
    us = 1e6 / n
    out = {"jobs_per_s": round(n / wall), "wall": wall * us, "client_cpu": cpu_c * us}
    out |= {k: v * us for k, v in sorted(spent.items())}
    out |= {"script": (script1 - script0) * us, "server_cpu": (cpu1 - cpu0) * us}
    out["serial"] = out["wall"] - out["script"]
    return {k: round(v, 2) for k, v in out.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    _patch_connection()
    for _ in range(args.rounds):
        print(json.dumps(asyncio.run(_round(args.url, args.n))), flush=True)
    with redis.Redis.from_url(args.url) as r:
        r.flushdb()


if __name__ == "__main__":
    main()
