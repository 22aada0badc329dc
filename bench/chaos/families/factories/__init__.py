"""The factories over `job()` under chaos: `ledger()` postings, a `consumer()` (a Postgres table
on pg, a Redis Stream on redis-aof), `webhook()` sends to a local endpoint that fails a share of
them, and `backfill()` and `import_rows()` sweeps, all on one fleet of workers killed -9,
drained and cut off from a restarting store like every family's (docs/chaos.md).

- `decl`: the declarations and their handlers (each writes what it was handed to the ledger);
- `work`: the workers' module, and their driver (each webhook attempt's record in the ledger);
- `endpoint`: the webhooks' endpoint, the run's sidecar (each answer in the ledger);
- `feed`: the sources set up and the work enqueued over the timeline;
- `analysis`: the figures; below, what the run reads back at the end and the self-check.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from bench.chaos.families import Family, Urls
from bench.chaos.families.factories.analysis import analyse
from bench.chaos.families.factories.cases import CASES, clean
from bench.chaos.families.factories.decl import (
    CONSUMER,
    DONE_TABLE,
    ENDPOINTS,
    SCHEME,
    SOURCE_TABLE,
    STREAM,
    SWEEPS,
    backfill_name,
    import_name,
    redis_url,
)
from bench.chaos.families.factories.feed import ACCOUNTS, feed
from bench.chaos.servers import NAMESPACE, PgStore, Store

__all__ = ["FAMILY", "feed", "gather"]


def fleet(urls: Urls, args: Any) -> tuple[list[str], dict[str, str]]:
    """`ujobs worker` of the workload, on the hooked driver over the jobs' store."""
    from bench.chaos.families.factories.decl import URL_ENV

    return [
        "worker",
        "bench.chaos.families.factories.work",
        "--driver",
        f"{SCHEME}://hooked",
        "--lease",
        str(args.lease),
        "--drain-timeout",
        str(args.drain_timeout),
        "--concurrency",
        str(args.concurrency),
        "--quiet",
    ], {URL_ENV: urls.jobs}


def gather(urls: Urls, stores: Mapping[str, Store]) -> dict[str, Any]:
    """What the store holds at the end: postings and balances, the consumer's source, its
    writes and cursor, the sweeps' ledger entries, the webhook attempts."""
    return asyncio.run(_gather(urls, stores["jobs"]))


async def _gather(urls: Urls, store: Store) -> dict[str, Any]:
    import json
    from pathlib import Path

    from jobs_core.records import WebhookAttemptListParams
    from jobs_core.urls import driver_from_url

    keys: set[str] = set()
    if urls.rundir is not None:
        answers = Path(urls.rundir) / "answers.jsonl"
        for line in answers.read_text(encoding="utf-8").splitlines() if answers.exists() else []:
            doc = json.loads(line)
            if doc.get("name") == "chaos_fac_post" and doc.get("key"):
                keys.add(doc["key"])
    driver = driver_from_url(urls.jobs)
    out: dict[str, Any] = {}
    async with driver:
        postings = {}
        for key in sorted(keys):
            got = await driver.posting_get(None, key)
            postings[key] = (
                None if got is None else [[x.account, x.currency, x.amount] for x in got.lines]
            )
        out["postings"] = postings
        rows = await driver.posting_balances(None, list(ACCOUNTS))
        out["balances"] = [[b.account, b.currency, b.balance] for b in rows]
        cursor = await driver.consumer_cursor_get(CONSUMER, None)
        out["cursor"] = None if cursor is None else json.loads(cursor.cursor_json)
        names = [backfill_name(k) for k in range(SWEEPS)] + [import_name(k) for k in range(SWEEPS)]
        out["sweeps"] = {
            n: [dataclasses.asdict(r) for r in await driver.sweep_list(n, 100)] for n in names
        }
        out["attempts"] = [
            dataclasses.asdict(a)
            for ep in ENDPOINTS
            for a in await driver.webhook_attempt_list(WebhookAttemptListParams(None, ep, 1_000))
        ]
    out.update(await _source(urls.jobs, store))
    return out


async def _source(url: str, store: Store) -> dict[str, Any]:
    """The consumer's records as the source holds them, and (pg) the handler's writes."""
    if url.startswith("postgresql"):
        assert isinstance(store, PgStore)
        query = store.query
        ids = query(f'SELECT id FROM "{NAMESPACE}".{SOURCE_TABLE} ORDER BY id')
        done = query(f'SELECT src FROM "{NAMESPACE}".{DONE_TABLE}')
        return {"produced": [str(r[0]) for r in ids], "done": [str(r[0]) for r in done]}
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url(url))
    try:
        entries = await client.xrange(STREAM)
    finally:
        await client.aclose()  # type: ignore[attr-defined]
    return {"produced": [i.decode() for i, _ in entries], "done": None}


FAMILY = Family(
    name="factories",
    title="ledger postings, a consumer, webhook sends and backfill/import sweeps killed -9:"
    " each key posted once, every record and event handed over, every row swept once",
    fleet=fleet,
    feed=("-m", "bench.chaos.feed", "--family", "factories"),
    jobs=300,
    seconds=30.0,
    analyse=analyse,
    gather=gather,
    driver_hook=(SCHEME, "bench.chaos.families.factories.work:hooked_driver"),
    sidecar=("-m", "bench.chaos.families.factories.endpoint"),
    clean=clean,
    cases=CASES,
    tallies=frozenset(
        {
            "postings: keys enqueued",
            "postings: repeats answered already_applied",
            "consumer: records produced",
            "webhooks: events enqueued",
            "sweeps: started",
            "sweep rows handled again",
        }
    ),
)
