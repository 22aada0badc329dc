"""The Redis commands a claim and an ack of plain rows run inside their scripts (flows: none more).

`PYTHONPATH=<tree> .venv/bin/python bench/redis_settle_calls.py --url redis://127.0.0.1:PORT/0`
(run by path, so `<tree>` can be a tree without this file: the baseline). The URL must name a
PRIVATE server: the script resets its command statistics and flushes it.

Enqueues `--jobs` plain rows (no parent, batch, join or watch), then counts with `INFO
commandstats` the commands one claim of all of them runs, and those one ack of all of them runs
(Lua's calls included). Counts, not times, so a busy machine cannot skew them: a tree whose
finishing scripts cost a plain row an extra call shows it here.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from jobs_core.records import Ack, ClaimParams, NewJob
from jobs_redis import RedisDriver

_SKIP = ("config|resetstat", "info", "script|load")


def _job(i: int) -> NewJob:
    return NewJob(
        id=f"j{i}",
        run_id=f"r{i}",
        name="n",
        queue="q",
        tenant_id=None,
        idempotency_key=f"j{i}",
        input_json="{}",
        priority=0,
        run_at_ms=1,
        max_attempts=3,
        created_at_ms=1,
    )


async def _calls(client: Any) -> dict[str, int]:
    info = await client.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}
    return {k: n for k, n in sorted(calls.items()) if k not in _SKIP}


async def main(url: str, jobs: int) -> None:
    driver = RedisDriver(url, prefix="settle-calls")
    async with driver:
        client = driver.client
        await client.flushall()
        await driver.job_enqueue_many([_job(i) for i in range(jobs)])
        await client.config_resetstat()
        got = await driver.job_claim(ClaimParams(("q",), "w", jobs, 60_000, 2))
        print("claim", await _calls(client))
        await client.config_resetstat()
        await driver.job_ack([Ack(j.fence, 3) for j in got.jobs])
        print("ack  ", await _calls(client))
        await client.flushall()
    await driver.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--jobs", type=int, default=100)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.jobs))
