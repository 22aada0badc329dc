"""The factories' workload as declared in every process of the run: a `ledger()` of postings, a
`consumer()` of a Postgres table (pg) or a Redis Stream (redis-aof), a `webhook()` sender, and
three `backfill()` and three `import_rows()` sweeps. Every handler writes what it was handed to
the run's ledger (`bench/chaos/ledger.py`) before it returns, so the figures see each hand-over,
including those a kill -9 cut short.

`declare(url)` builds them once per process for the jobs' store at `url` (the workers get it in
`URL_ENV`, the feed from its `--url`).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.chaos.ledger import LEDGER_ENV, note
from bench.chaos.servers import NAMESPACE
from jobs_core import JobHandle, Retry
from jobs_core.factories import backfill, import_rows, ledger
from jobs_core.factories.backfill import Backfill
from jobs_core.factories.consumers import Consumer, Turn, consumer, stream, table
from jobs_core.factories.ledger import Ledger
from jobs_core.factories.webhooks import webhook
from jobs_core.jsonform import JsonValue

#: The jobs' store URL in the workers' environment (the feed gets it as `--url`).
URL_ENV: Final = "CHAOS_FACTORIES_URL"
QUEUE: Final = "chaos_factories"
#: The driver scheme the workers run on (`work.hooked_driver`).
SCHEME: Final = "chaosfac"
#: Sweeps of each kind (backfills, imports), started at three points of the timeline.
SWEEPS: Final = 3
#: Rows of each sweep, and how many a batch (a backfill's) takes.
SWEEP_ROWS: Final = 300
BACKFILL_BATCH: Final = 15
#: An import's page: about 15 of its records (each about 45 bytes).
IMPORT_PAGE_BYTES: Final = 700
IMPORT_RECORD_BYTES: Final = 256
#: How long a sweep's handler and a consumer's handler take: the kills land inside sweeps.
SWEEP_PAUSE_S: Final = 0.2
CONSUMER_PAUSE_S: Final = 0.3
CONSUMER: Final = "chaos_fac_consumer"
CONSUMER_BATCH: Final = 10
#: The Redis Stream (redis-aof) and the Postgres tables (pg) the workload uses.
STREAM: Final = "chaos_fac:stream"
SOURCE_TABLE: Final = "chaos_fac_src"
DONE_TABLE: Final = "chaos_fac_done"
SWEEP_TABLE: Final = "chaos_fac_sweep"
ENDPOINTS: Final = ("ep0", "ep1")
SECRET: Final = "whsec_" + base64.b64encode(b"chaos-factories-secret-0123").decode()
RETRY: Final = Retry(attempts=20, base_ms=100, cap_ms=1_000, jitter="full")


def backfill_name(k: int) -> str:
    return f"chaos_fac_bf{k}"


def import_name(k: int) -> str:
    return f"chaos_fac_imp{k}"


def import_file(k: int) -> str:
    return f"imp{k}.jsonl"


def import_root() -> Path:
    """Where the imports' files are: beside the run's ledger, so every process finds them."""
    return Path(os.environ[LEDGER_ENV]).parent / "import"


def is_pg(url: str) -> bool:
    return url.startswith("postgresql")


def sa_url(url: str) -> str:
    """The jobs' Postgres URL as SQLAlchemy reads it (the driver's options dropped)."""
    base = url.split("?", 1)[0]
    return base if "+psycopg" in base else base.replace("postgresql://", "postgresql+psycopg://")


def redis_url(url: str) -> str:
    return url.split("?", 1)[0]


@dataclass(frozen=True)
class Decls:
    postings: Ledger
    consumer: Consumer
    hook: JobHandle
    backfills: tuple[Backfill, ...]
    imports: tuple[JobHandle, ...]
    #: The app's engine on the jobs' Postgres (pg), else None.
    engine: Any
    #: A `redis.asyncio` client of the jobs' Redis (redis-aof), else None.
    redis: Any


def _consumed_sync(rows: list[Any], turn: Turn) -> None:
    """A table turn: what it was handed, then one row per record in the turn's transaction
    (committed with the cursor: exactly once), then a pause for a kill to land in, then the
    handler's end (`handled`, naming the batch by its first record)."""
    import sqlalchemy as sa

    ids = [int(r[0]) for r in rows]
    note("consumed", ids=ids, cursor=turn.cursor)
    done = sa.table(DONE_TABLE, sa.column("src"), schema=NAMESPACE)
    turn.conn.execute(sa.insert(done), [{"src": i} for i in ids])
    time.sleep(CONSUMER_PAUSE_S)
    note("handled", ids=ids[:1])


async def _consumed_async(records: list[Any], turn: Turn) -> None:
    """A stream turn: what it was handed (entry ids), then a pause for a kill to land in, then
    the handler's end."""
    note("consumed", ids=[str(i) for i, _ in records], cursor=turn.cursor)
    await asyncio.sleep(CONSUMER_PAUSE_S)
    note("handled", ids=[str(records[0][0])])


def _swept(name: str, key: Callable[[Any], JsonValue], rows: list[Any]) -> None:
    note("swept", name=name, ids=[key(r) for r in rows])
    time.sleep(SWEEP_PAUSE_S)


def _pages(cursor: JsonValue, scope: str, limit: int) -> tuple[list[int], int | None]:
    """The redis-aof backfills' source (no table there): rows 1..SWEEP_ROWS by number."""
    start = int(cursor) + 1 if isinstance(cursor, int) else 1
    rows = list(range(start, min(start + limit, SWEEP_ROWS + 1)))
    last = rows[-1] if rows else SWEEP_ROWS
    return rows, (None if last >= SWEEP_ROWS else last)


@functools.cache
def declare(url: str) -> Decls:
    """Every factory of the workload, declared once per process for the store at `url`."""
    engine: Any = None
    client: Any = None
    if is_pg(url):
        import sqlalchemy as sa

        engine = sa.create_engine(sa_url(url), pool_pre_ping=True)
        src = sa.table(SOURCE_TABLE, sa.column("id"), sa.column("n"), schema=NAMESPACE)
        source: Any = table(sa.select(src.c.id, src.c.n), engine=engine, key=src.c.id)
        handler: Any = _consumed_sync
    else:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(redis_url(url))
        source = stream(client, STREAM)
        handler = _consumed_async
    made = consumer(
        CONSUMER,
        source=source,
        handle=handler,
        tenant="none",
        batch=CONSUMER_BATCH,
        run_for=3.0,
        idle=0.2,
        lease=3.0,
        queue=QUEUE,
        retry=RETRY,
    )
    postings = ledger(
        name="chaos_fac_post",
        tenant="none",
        idempotency_key=lambda i: i["key"],
        lines=lambda i: i["lines"],
        queue=QUEUE,
        retry=RETRY,
    )
    hook = webhook(
        "chaos_fac_hook",
        secrets=[SECRET],
        tenant="none",
        disable_after=10_000,
        allow_networks=["127.0.0.0/8"],
        connect_timeout=2.0,
        read_timeout=5.0,
        queue=QUEUE,
        retry=RETRY,
    )
    return Decls(
        postings,
        made,
        hook,
        tuple(_backfill(k, engine) for k in range(SWEEPS)),
        tuple(_import(k) for k in range(SWEEPS)),
        engine,
        client,
    )


def _backfill(k: int, engine: Any) -> Backfill:
    name = backfill_name(k)
    if engine is None:
        return backfill(
            name=name,
            tenant="none",
            pages=_pages,
            handle=functools.partial(_swept, name, int),
            batch=BACKFILL_BATCH,
            count=SWEEP_ROWS,
            queue=QUEUE,
            retry=RETRY,
        )
    import sqlalchemy as sa

    rows = sa.table(SWEEP_TABLE, sa.column("id"), sa.column("sweep"), schema=NAMESPACE)
    return backfill(
        name=name,
        tenant="none",
        source=sa.select(rows.c.id).where(rows.c.sweep == k),
        engine=engine,
        key=rows.c.id,
        handle=functools.partial(_swept, name, lambda r: int(r[0])),
        batch=BACKFILL_BATCH,
        count=SWEEP_ROWS,
        queue=QUEUE,
        retry=RETRY,
    )


def _import(k: int) -> JobHandle:
    name = import_name(k)
    return import_rows(
        name=name,
        tenant="none",
        format="jsonl",
        handle=functools.partial(_swept, name, lambda r: r["id"]),
        root=str(import_root()),
        page_bytes=IMPORT_PAGE_BYTES,
        max_record_bytes=IMPORT_RECORD_BYTES,
        queue=QUEUE,
        retry=RETRY,
    )
