"""The server CPU a record of the `job_enqueue_many` script costs, whole or with parts taken out.

`PYTHONPATH=<tree> .venv/bin/python bench/redis_enqueue_script.py --url redis://127.0.0.1:PORT/0
[--variant whole|no-writes|parse-only|empty] [--rounds 3]` (run by path, so `<tree>` can be a
tree without this file: the baseline). The URL must name a PRIVATE server: its `INFO cpu` is the
whole server's.

Each round packs 20 calls of 1,000 records (the facade's batches of a no-op job, as the tree's
driver packs them, their ids fresh as the facade's are) on a fresh prefix, then reads the
server's CPU (user + sys) around sending them by EVALSHA: µs per record. `no-writes` drops the
script's `HSET`s and `ZADD`s (the dedupe's lookups stay), `parse-only` returns before the
`HMGET`s, `empty` runs a script that returns at once (the cost of receiving the arguments).
Prints one JSON list of the rounds' figures.
"""

from __future__ import annotations

import argparse
import json
import uuid
from typing import Any

import redis

from jobs_core.clock import SystemClock
from jobs_core.facade import build_records
from jobs_core.job import job
from jobs_redis import RedisDriver
from jobs_redis.scripts import load_source

_WRITES = (
    'redis.call("ZADD", ACC.created, unpack(ACC.new, i, math.min(i + 999, #ACC.new)))',
    'redis.call("ZADD", KEYS[4 + q], unpack(z))',
    'redis.call("HSET", KEYS[1], unpack(state_args))',
    'redis.call("HSET", KEYS[2], unpack(data_args))',
    'redis.call("HSET", KEYS[3], unpack(live_args))',
)


@job(name="noop", queue="default", idempotency_key=lambda inp: inp["k"], tenant="none")
async def _noop(inp: Any, ctx: Any) -> None:
    return None


def _source(variant: str) -> str:
    src = load_source("job_enqueue_many")
    if variant == "empty":
        return "return ''"
    if variant == "parse-only":
        at = src.index("local found = ")
        return src[:at] + "do return '' end\n" + src[at:]
    if variant == "no-writes":
        for write in _WRITES:
            if write not in src:
                raise SystemExit(f"the script has no {write!r}: update this bench")
            src = src.replace(write, "")
    return src


def _call(d: RedisDriver, records: Any) -> Any:
    """`_chunk_call` as `job_enqueue_many` makes it for the facade's batch: its ids fresh (a
    tree before `NewJobs.take_fresh` has no such flag and always looks them up)."""
    take = getattr(records, "take_fresh", None)
    if take is None:
        return d._chunk_call(records)
    return d._chunk_call(records, take())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument(
        "--variant", choices=("whole", "no-writes", "parse-only", "empty"), default="whole"
    )
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    r = redis.Redis.from_url(args.url)
    sha = r.script_load(_source(args.variant))
    out = []
    for _ in range(args.rounds):
        d = RedisDriver(args.url, prefix=f"bench-{uuid.uuid4().hex[:8]}")
        calls = [
            _call(
                d,
                build_records(_noop, [{"k": f"{c}-{i}"} for i in range(1000)], clock=SystemClock()),
            )
            for c in range(20)
        ]
        before = r.info("cpu")
        for keys, argv in calls:
            r.evalsha(sha, len(keys), *keys, *argv)
        after = r.info("cpu")
        spent = sum(float(after[f]) - float(before[f]) for f in ("used_cpu_user", "used_cpu_sys"))
        out.append(round(spent / 20_000 * 1e6, 2))
        found = list(r.scan_iter(match=d.keys.pattern(), count=1000))
        if found:
            r.delete(*found)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
