"""The factories' feed: the sources set up (tables, import files, webhook endpoints), then over
the timeline postings (15 % of their keys enqueued twice), consumer records produced, webhook
events, the consumer's job every second (deduped while a run is live), and a backfill and an
import at three points; at the end the consumer's job again until its cursor reached the last
record produced (bounded).

Every call to the store goes through `persist` (retried under the same ids), and every answer is
one line of the answers file.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from bench.chaos.families import SIDECAR_ENV
from bench.chaos.families.factories.decl import (
    CONSUMER,
    ENDPOINTS,
    SOURCE_TABLE,
    STREAM,
    SWEEP_ROWS,
    SWEEP_TABLE,
    SWEEPS,
    Decls,
    declare,
    import_file,
    import_root,
    is_pg,
)
from bench.chaos.feed import Feeder, persist
from bench.chaos.servers import NAMESPACE
from jobs_core import JobHandle
from jobs_core.factories.webhooks import register_endpoint, webhook_event
from jobs_core.ids import new_id
from jobs_core.jsonform import loads

ACCOUNTS: Final = ("cash", "bank", "revenue", "fees", "tax", "receivable", "payable")
CURRENCIES: Final = ("EUR", "USD", "JPY")
REPEAT_SHARE: Final = 0.15
#: Where in the timeline (its share) each sweep pair starts.
SWEEP_AT: Final = (0.03, 0.38, 0.70)
#: Bound on waiting, after the timeline, for the consumer to reach the last record.
CATCH_UP_S: Final = 90.0


def sweep_row_id(k: int, n: int) -> int:
    """Row `n` (1-based) of sweep `k` in the pg sweep table."""
    return k * 10_000 + n


def posting_lines(f: Feeder) -> list[list[Any]]:
    """One or two currencies, each two or three distinct accounts summing to zero, no zero."""
    lines: list[list[Any]] = []
    for cur in f.rng.sample(CURRENCIES, f.rng.randint(1, 2)):
        accounts = f.rng.sample(ACCOUNTS, f.rng.randint(2, 3))
        amounts = [0]
        while 0 in amounts:
            rest = [f.rng.choice((-1, 1)) * f.rng.randint(1, 100_000) for _ in accounts[1:]]
            amounts = [-sum(rest), *rest]
        lines += [[a, cur, m] for a, m in zip(accounts, amounts, strict=True)]
    return lines


async def enqueue(f: Feeder, handle: JobHandle, inp: Any, **fields: Any) -> None:
    """`enqueue_many` of one input."""
    await enqueue_many(f, handle, [inp], [fields])


async def enqueue_many(
    f: Feeder, handle: JobHandle, inputs: list[Any], fields: list[dict[str, Any]]
) -> None:
    """Enqueue `inputs` in one call under ids of their own, retried under them; one answer
    line each, naming the job that holds it (the live one when deduped) and its `fields`."""
    ids = [new_id() for _ in inputs]
    got, tries, errors, refused = await persist(
        lambda: f.client.enqueue_many(handle, inputs, ids=ids)
    )
    for n, inp in enumerate(inputs):
        f.record(
            {
                "ev": "enqueued",
                "id": None if got is None else got[n].id,
                "asked": ids[n],
                "name": handle.name,
                "input": inp,
                "deduped": None if got is None else got[n].deduped,
                "tries": tries,
                "errors": errors,
                "refused": refused,
                **fields[n],
            }
        )


class Source:
    """The consumer's source as the app writes to it (and reads its last record)."""

    def __init__(self, decls: Decls, url: str) -> None:
        self._decls = decls
        self._url = url
        self._conn: Any = None

    async def _pg(self) -> Any:
        import psycopg

        from jobs_pg.urls import libpq_url, split_options

        if self._conn is None or self._conn.closed:
            conninfo = libpq_url(split_options(self._url)[0])
            self._conn = await psycopg.AsyncConnection.connect(
                conninfo, connect_timeout=3, autocommit=True
            )
        return self._conn

    async def sql(self, stmt: str, params: Any = None) -> list[tuple[Any, ...]]:
        conn = await self._pg()
        try:
            cur = await conn.execute(stmt, params)
            return list(await cur.fetchall()) if cur.description else []
        except Exception:
            await conn.close()
            raise

    async def produce(self, n: int) -> str:
        if is_pg(self._url):
            rows = await self.sql(
                f'INSERT INTO "{NAMESPACE}".{SOURCE_TABLE} (n) VALUES (%s) RETURNING id', (n,)
            )
            return str(rows[0][0])
        got = await self._decls.redis.xadd(STREAM, {"n": n})
        return got.decode() if isinstance(got, bytes) else str(got)

    async def last(self) -> str | None:
        if is_pg(self._url):
            rows = await self.sql(f'SELECT max(id) FROM "{NAMESPACE}".{SOURCE_TABLE}')
            return None if rows[0][0] is None else str(rows[0][0])
        got = await self._decls.redis.xrevrange(STREAM, count=1)
        return None if not got else got[0][0].decode()

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        if self._decls.redis is not None:
            await self._decls.redis.aclose()


async def _must(f: Feeder, what: str, fn: Callable[[], Awaitable[Any]]) -> Any:
    got, tries, errors, refused = await persist(fn)
    f.record({"ev": "setup", "what": what, "ok": refused is None, "tries": tries, "errors": errors})
    return got


async def setup(f: Feeder, decls: Decls, src: Source) -> None:
    """The tables (pg), the import files, the endpoints; each retried like any call."""
    if is_pg(f.url):
        rows = ", ".join(
            f"({sweep_row_id(k, n)}, {k})" for k in range(SWEEPS) for n in range(1, SWEEP_ROWS + 1)
        )
        ddl = (
            f'CREATE TABLE IF NOT EXISTS "{NAMESPACE}".{SOURCE_TABLE}'
            " (id bigserial PRIMARY KEY, n int NOT NULL);"
            f' CREATE TABLE IF NOT EXISTS "{NAMESPACE}".chaos_fac_done (src bigint NOT NULL);'
            f' CREATE TABLE IF NOT EXISTS "{NAMESPACE}".{SWEEP_TABLE}'
            " (id int PRIMARY KEY, sweep int NOT NULL);"
            f' INSERT INTO "{NAMESPACE}".{SWEEP_TABLE} (id, sweep) VALUES {rows}'
            " ON CONFLICT DO NOTHING"
        )
        await _must(f, "tables", lambda: src.sql(ddl))
    root = import_root()
    root.mkdir(parents=True, exist_ok=True)
    for k in range(SWEEPS):
        with (root / import_file(k)).open("w", encoding="utf-8") as out:
            for n in range(1, SWEEP_ROWS + 1):
                out.write(json.dumps({"id": f"imp{k}-{n:05d}", "pad": "x" * 12}) + "\n")
    url = os.environ[SIDECAR_ENV] + "/hook"
    for ep in ENDPOINTS:
        await _must(
            f,
            f"endpoint {ep}",
            lambda ep=ep: register_endpoint(  # type: ignore[misc]
                f.client.driver, ep, url, allow_networks=["127.0.0.0/8"]
            ),
        )


async def feed(f: Feeder) -> None:
    """See the module's docstring; `f.total` postings, as many records, half as many events."""
    decls = declare(f.url)
    src = Source(decls, f.url)
    try:
        await setup(f, decls, src)
        await _timeline(f, decls, src)
        await _catch_up(f, decls, src)
    finally:
        await src.close()


async def _timeline(f: Feeder, decls: Decls, src: Source) -> None:
    posted = produced = events = 0
    repeats: list[tuple[float, dict[str, Any]]] = []
    sweeps = 0
    next_consumer = 0.0
    while f.elapsed() < f.seconds:
        share = f.elapsed() / f.seconds
        want = round(f.total * share)
        batch: list[dict[str, Any]] = []
        while posted < min(want, f.total) and len(batch) < 10:
            inp = {"key": f"pay:{posted:05d}", "lines": posting_lines(f)}
            batch.append(inp)
            posted += 1
            if f.rng.random() < REPEAT_SHARE:
                repeats.append((f.elapsed() + f.rng.uniform(0.0, 5.0), inp))
        due = [inp for at, inp in repeats if at <= f.elapsed()]
        repeats = [(at, inp) for at, inp in repeats if at > f.elapsed()]
        if batch:
            keys = [{"key": inp["key"], "repeat": False} for inp in batch]
            await enqueue_many(f, decls.postings, batch, keys)
        for inp in due:
            await enqueue(f, decls.postings, inp, key=inp["key"], repeat=True)
        while produced < want:
            got, tries, _, _ = await persist(lambda n=produced: src.produce(n))  # type: ignore[misc]
            f.record({"ev": "produced", "n": produced, "id": None, "record": got, "tries": tries})
            produced += 1
        sends = [
            webhook_event(ENDPOINTS[n % len(ENDPOINTS)], "chaos.test", {"n": n}, id=f"evt_{n}")
            for n in range(events, want // 2)
        ]
        if sends:
            await enqueue_many(f, decls.hook, sends, [{"event": e["id"]} for e in sends])
            events += len(sends)
        while sweeps < len(SWEEP_AT) and share >= SWEEP_AT[sweeps]:
            await enqueue(f, decls.backfills[sweeps], None, sweep=decls.backfills[sweeps].name)
            imp = decls.imports[sweeps]
            await enqueue(f, imp, {"source": import_file(sweeps)}, sweep=imp.name)
            sweeps += 1
        if f.elapsed() >= next_consumer:
            await enqueue(f, decls.consumer.job, {})
            next_consumer = f.elapsed() + 1.0
        await asyncio.sleep(0.1)
    for _, inp in repeats:
        await enqueue(f, decls.postings, inp, key=inp["key"], repeat=True)


async def _catch_up(f: Feeder, decls: Decls, src: Source) -> None:
    """The consumer's job every second until its stored cursor is the last record produced."""
    deadline = time.monotonic() + CATCH_UP_S
    last, _, _, _ = await persist(src.last)
    while time.monotonic() < deadline:
        got, _, _, _ = await persist(lambda: f.client.driver.consumer_cursor_get(CONSUMER, None))
        at = None if got is None else loads(got.cursor_json)
        if last is None or (at is not None and str(at) == last):
            f.record({"ev": "caught_up", "cursor": at, "last": last, "id": None})
            return
        await enqueue(f, decls.consumer.job, {})
        await asyncio.sleep(1.0)
    f.record({"ev": "caught_up", "cursor": None, "last": last, "id": None, "timed_out": True})
