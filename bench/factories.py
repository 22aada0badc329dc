"""`python -m bench.factories` (`make bench-factories`): what a factory's durability costs — a
`backfill()` over a Postgres table and an `import_rows()` of a JSON Lines file, each run by a
real worker on Postgres, against a bare loop doing the same batches with no step and no ledger.

    .venv/bin/python -m bench.factories [--dry-run] [--pairs 5] [--rows 1000000]
        [--batch 1000] [--file-mb 100] [--page-bytes 1048576] [--only backfill,import]
        [--pg-url URL] [--out DIR]

The data is made in the run and removed after it: a table of `--rows` rows (bigint key,
integer, numeric, 32 characters of text) in a schema of its own, and a JSONL file of about
`--file-mb` MB (one object of 5 fields a line, ~100 bytes) in a temporary directory. The jobs'
store is another schema of its own on the same server, migrated by `jobs_pg`.

- backfill, factory: `backfill(tenant="none", source=select(items), key="id", batch=1,000)`
  with a no-op async `handle`, enqueued and run to its end by an in-process `Worker` (its
  defaults) on the Postgres driver: one step per window of batches (`checkpoint_s=`, its
  default of a second), recorded with the ledger's advance by the window's batches in one write
  (`sweep_checkpoint`);
- backfill, bare: the same keyset selects (`WHERE id > :last ORDER BY id LIMIT 1,000`, a
  connection of the same async engine per batch, as the factory reads) handed to the same
  no-op, in a plain loop: no step, no ledger, no worker;
- import, factory: `import_rows(format="jsonl", page_bytes=1 MiB)` with a no-op async `handle`,
  run the same way: one step per page checkpointed at its byte offset, the ledger per page;
- import, bare: the same pages read and parsed by the same code (`read_page` over the same
  `LocalFile` reader, page after page from each page's next offset) handed to the same no-op.

Each measurement is timed from the call that enqueues the job (or the loop's start) to the job's
settle landing (the worker's `on_settled` hook; or the loop's end); its rows are checked
(every row, once; the same batches on both sides). The factory's store calls are
timed as they go (the driver's methods wrapped on the instance): what each batch spends in its
checkpoint (a step record and its ledger advance, one write, once per window of batches for the
backfill and once per page for the import), where the overhead goes. Before
each pair the server's floor is probed: what one durable commit (a one-row UPDATE committed
alone, as each checkpoint write is) and one bare round trip take, medians of 100. Before the
pairs, one untimed pass of each bare loop warms the table and the file into the caches both
sides read from.
Then `--pairs` pairs of each kind, the order within a pair alternating (factory first in odd
pairs, bare first in even ones) so that drift on a shared machine hits both sides alike; the
overhead is the factory's time over the bare loop's
within each pair, minus one (target: at most 10 %), summarised by its median and range over the
pairs. Each sample carries the one-minute load average when it started and the process's CPU
seconds (every thread of it: the worker, its threads, the loop). Results: printed, and
`bench/results/factories-<stamp>.json` (`--out` elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import sql
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.factories.backfill import BackfillRegistry, backfill
from jobs_core.factories.rows import import_rows
from jobs_core.factories.rows.formats import Layout, read_page
from jobs_core.factories.rows.imports import DEFAULT_MAX_RECORD_BYTES, DEFAULT_PAGE_BYTES
from jobs_core.factories.rows.seams import LocalFile
from jobs_core.job import JobHandle, JobRegistry
from jobs_core.states import JobState
from jobs_core.worker import Worker
from jobs_pg import PgDriver
from jobs_pg.migrate import upgrade
from jobs_pg.urls import libpq_url, sqlalchemy_url

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PG_URL = os.environ.get("JOBS_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
KINDS = ("backfill", "import")
FACTORY, BARE = "factory", "bare"
SOURCE_FILE = "rows.jsonl"
#: How often the run looks whether the job ended without a settle (its claim lost).
WATCH_SECONDS = 1.0
#: How long a job may take before the run gives up on it.
TIMEOUT_SECONDS = 1_800.0
#: The overhead the issue asks for at most (factory time over bare time, minus one).
TARGET = 0.10
#: A one-minute load average above this means other work shared the cores.
BUSY_LOAD = 1.0


@dataclass(frozen=True)
class Config:
    rows: int  # the backfill's table
    batch: int  # rows per backfill batch
    file_bytes: int  # the import's file, about (whole lines)
    page_bytes: int  # bytes per import page
    pairs: int  # factory/bare pairs of each kind
    probes: int  # commits (and round trips) `commit_probe` times before each pair


FULL = Config(
    rows=1_000_000,
    batch=1_000,
    file_bytes=100 * 1_000_000,
    page_bytes=DEFAULT_PAGE_BYTES,
    pairs=5,
    probes=100,
)
#: Both kinds end to end in a few seconds (its numbers mean nothing): what the test runs.
DRY = replace(FULL, rows=5_000, file_bytes=500_000, page_bytes=65_536, pairs=1, probes=10)


class BenchError(Exception):
    """A measurement that did not do what it measures (a job failed, rows went missing)."""


@dataclass
class Places:
    """What one run measures on: the data (a table, a file), the engine reading the table, and
    the jobs' store."""

    pg_url: str
    data_schema: str
    jobs_schema: str
    items: sa.Table
    engine: AsyncEngine
    driver: JobDriver
    directory: Path
    file_bytes: int
    file_rows: int
    store: StoreTimes


async def _noop(rows: list[Any]) -> None:
    """The handle of every measurement: the rows are read and handed, nothing is done."""
    return None


def _items_table(schema: str) -> sa.Table:
    return sa.Table(
        "items",
        sa.MetaData(schema=schema),
        sa.Column("id", sa.BigInteger, primary_key=True),
        sa.Column("qty", sa.Integer, nullable=False),
        sa.Column("price", sa.Numeric(12, 2), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
    )


def _make_schema(pg_url: str, schema: str, rows: int | None) -> None:
    """`schema` with its `probe` table (one row, for `commit_probe`) and, given `rows`, its
    `items` table of `rows` rows (ids 1..rows), vacuumed and analysed."""
    with psycopg.connect(libpq_url(pg_url), autocommit=True) as conn:
        name = sql.Identifier(schema)
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(name))
        conn.execute(
            sql.SQL("CREATE TABLE {}.probe (id integer PRIMARY KEY, n bigint NOT NULL)").format(
                name
            )
        )
        conn.execute(sql.SQL("INSERT INTO {}.probe VALUES (1, 0)").format(name))
        if rows is None:
            return
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.items (id bigint PRIMARY KEY, qty integer NOT NULL,"
                " price numeric(12, 2) NOT NULL, note text NOT NULL)"
            ).format(name)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.items SELECT g, g %% 100, (g %% 100000) / 100.0, md5(g::text)"
                " FROM generate_series(1, %s) g"
            ).format(name),
            (rows,),
        )
        conn.execute(sql.SQL("VACUUM ANALYZE {}.items").format(name))


def _write_file(path: Path, least_bytes: int) -> tuple[int, int]:
    """A JSONL file of whole lines, at least `least_bytes` long: (its bytes, its rows)."""
    written = rows = 0
    with path.open("w", encoding="utf-8", newline="\n") as out:
        while written < least_bytes:
            chunk = "".join(
                f'{{"id": {i}, "org": "acme", "qty": {i % 100}, "price": {i % 100000 / 100},'
                f' "note": "row {i:012d} of the benchmark"}}\n'
                for i in range(rows + 1, rows + 10_001)
            )
            if written + len(chunk) > least_bytes:
                lines = chunk.splitlines(keepends=True)
                while lines and written < least_bytes:
                    line = lines.pop(0)
                    out.write(line)
                    written += len(line)
                    rows += 1
                break
            out.write(chunk)
            written += len(chunk)
            rows += 10_000
    return written, rows


def _drop_schemas(pg_url: str, *schemas: str) -> None:
    with psycopg.connect(libpq_url(pg_url), autocommit=True) as conn:
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@asynccontextmanager
async def places(pg_url: str, config: Config, kinds: tuple[str, ...]) -> AsyncIterator[Places]:
    """The run's data and store, made here and removed on the way out."""
    tag = uuid.uuid4().hex[:8]
    data_schema, jobs_schema = f"bench_factories_data_{tag}", f"bench_factories_jobs_{tag}"
    directory = Path(tempfile.mkdtemp(prefix="bench-factories-"))
    engine = create_async_engine(sqlalchemy_url(pg_url))
    try:
        rows = config.rows if "backfill" in kinds else None
        await asyncio.to_thread(_make_schema, pg_url, data_schema, rows)
        file_bytes = file_rows = 0
        if "import" in kinds:
            file_bytes, file_rows = await asyncio.to_thread(
                _write_file, directory / SOURCE_FILE, config.file_bytes
            )
        await asyncio.to_thread(upgrade, pg_url, jobs_schema)
        async with PgDriver(pg_url, schema=jobs_schema) as driver:
            yield Places(
                pg_url,
                data_schema,
                jobs_schema,
                _items_table(data_schema),
                engine,
                driver,
                directory,
                file_bytes,
                file_rows,
                StoreTimes(driver),
            )
    finally:
        await engine.dispose()
        shutil.rmtree(directory, ignore_errors=True)
        await asyncio.to_thread(_drop_schemas, pg_url, data_schema, jobs_schema)


# -- the two sides ----------------------------------------------------------------------------


class StoreTimes:
    """The store calls a driver makes and the wall time each kind took (its `_` methods,
    wrapped on the instance): where a factory's time goes beside its reads."""

    PREFIXES = ("_job_", "_step_", "_sweep_", "_worker_", "_queue_", "_counter_", "_lease_")

    def __init__(self, driver: JobDriver) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds: dict[str, float] = {}
        self.counting = False
        for name in dir(type(driver)):
            if name.startswith(self.PREFIXES):
                setattr(driver, name, self._wrap(getattr(driver, name), name[1:]))

    def _wrap(self, fn: Callable[..., Awaitable[Any]], name: str) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if not self.counting:
                return await fn(*args, **kwargs)
            began = time.perf_counter()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.calls[name] += 1
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - began

        return call

    def take(self) -> dict[str, dict[str, Any]]:
        """What was counted since the last take, and stop counting."""
        got = {
            name: {"calls": self.calls[name], "seconds": self.seconds[name]}
            for name in sorted(self.calls)
        }
        self.calls.clear()
        self.seconds.clear()
        self.counting = False
        return got


async def _on_worker(p: Places, handle: JobHandle, input: Any) -> dict[str, Any]:
    """Enqueue one job of `handle` and let a worker run it: the seconds from the enqueue call
    to its end as the worker counts it, the job's result, and the store calls made meanwhile."""
    driver = p.driver
    settled = asyncio.Event()
    # Its defaults (what `ujobs worker` runs) but the hook that says the job's settle landed:
    # the run waits on it, not on a poll whose wake-ups would take the GIL from the import's
    # parsing thread hundreds of times a second.
    worker = Worker(driver, [handle], on_settled=lambda _: settled.set())
    await worker.start()
    try:
        await asyncio.sleep(0.2)  # the worker's start-up writes are not the job's
        p.store.counting = True
        began = time.perf_counter()
        done = await Jobs(driver).enqueue(handle, input)
        while not settled.is_set():
            try:
                await asyncio.wait_for(settled.wait(), WATCH_SECONDS)
            except TimeoutError:
                if _ended(worker):  # a run that ended without a settle (its claim lost)
                    break
                if time.perf_counter() - began > TIMEOUT_SECONDS:
                    raise BenchError(
                        f"{handle.name}: not finished after {TIMEOUT_SECONDS:.0f} s"
                    ) from None
        took = time.perf_counter() - began
        calls = p.store.take()
    finally:
        p.store.counting = False
        await worker.stop()
    record = (await driver.job_get_many([done.id]))[done.id]
    if record.state is not JobState.COMPLETED:
        raise BenchError(f"{handle.name} ended {record.state.value}: {record.last_error}")
    return {"seconds": took, "result": json.loads(record.result_json or "null"), "store": calls}


def _ended(worker: Worker) -> bool:
    """Whether the worker's one run has ended, however (a retry ends the measurement too)."""
    s = worker.stats
    return s.completed + s.retried + s.dead_lettered + s.dropped + s.refused + s.lost > 0


async def commit_probe(p: Places, times: int) -> dict[str, float]:
    """What one durable commit costs on this server now — a one-row UPDATE committed alone, as
    each of a batch's two checkpoint writes is — and a bare round trip (`SELECT 1`): medians
    of `times` each, in ms. The floor of a checkpoint, whatever the factory's own code does."""
    commits: list[float] = []
    trips: list[float] = []
    update = sql.SQL("UPDATE {}.probe SET n = n + 1 WHERE id = 1").format(
        sql.Identifier(p.data_schema)
    )
    async with await psycopg.AsyncConnection.connect(libpq_url(p.pg_url), autocommit=True) as conn:
        for _ in range(times):
            began = time.perf_counter()
            await conn.execute(update)
            commits.append((time.perf_counter() - began) * 1000)
            began = time.perf_counter()
            await conn.execute("SELECT 1")
            trips.append((time.perf_counter() - began) * 1000)
    return {"commit_ms": statistics.median(commits), "round_trip_ms": statistics.median(trips)}


def _select(items: sa.Table) -> sa.Select[Any]:
    return sa.select(items.c.id, items.c.qty, items.c.price, items.c.note)


async def backfill_factory(p: Places, config: Config, n: int) -> dict[str, Any]:
    """The backfill run by a worker: seconds, rows handled, batches, store calls."""
    handle = backfill(
        name="bench-backfill",
        tenant="none",
        source=_select(p.items),
        engine=p.engine,
        key="id",
        handle=_noop,
        batch=config.batch,
        version=n,  # each measurement a new sweep: a completed one would block the next
        registry=JobRegistry(),
        backfills=BackfillRegistry(),
    )
    ran = await _on_worker(p, handle, None)
    result = ran.pop("result")
    return {**ran, "rows": result["rows"], "batches": result["batches"]}


async def backfill_bare(p: Places, config: Config, n: int) -> dict[str, Any]:
    """The same keyset batches in a plain loop: seconds, rows handled, batches."""
    sweep = await keyset_sweep(p, config)
    return {"seconds": sweep.wall_s, "rows": sweep.rows, "batches": sweep.batches}


@dataclass(frozen=True)
class Sweep:
    """What one plain keyset sweep of the table took."""

    cpu_s: float
    wall_s: float
    rows: int
    batches: int


async def keyset_sweep(
    p: Places, config: Config, after_batch: Callable[[], Awaitable[object]] | None = None
) -> Sweep:
    """The table's keyset batches in a plain loop, each handed to the no-op handle, then
    `after_batch` (the floor's one commit, bench/factories_floor.py) when given."""
    select, key = _select(p.items), p.items.c.id
    cpu, began = time.process_time(), time.perf_counter()
    last: Any = None
    rows = batches = 0
    while True:
        batches += 1
        stmt = select if last is None else select.where(key > last)
        async with p.engine.connect() as conn:
            page = (await conn.execute(stmt.order_by(key).limit(config.batch))).all()
        if page:
            await _noop(page)
            rows += len(page)
            last = page[-1].id
        if after_batch is not None:
            await after_batch()
        if len(page) < config.batch:
            break
    return Sweep(time.process_time() - cpu, time.perf_counter() - began, rows, batches)


async def import_factory(p: Places, config: Config, n: int) -> dict[str, Any]:
    """The import run by a worker: seconds, rows handled, pages, store calls."""
    handle = import_rows(
        name="bench-import",
        tenant="none",
        format="jsonl",
        handle=_noop,
        root=str(p.directory),
        page_bytes=config.page_bytes,
        max_record_bytes=min(DEFAULT_MAX_RECORD_BYTES, config.page_bytes),
        registry=JobRegistry(),
    )
    # Each measurement another input: a completed import of the same input blocks a re-run.
    ran = await _on_worker(p, handle, {"source": SOURCE_FILE, "pass": n})
    result = ran.pop("result")
    if result["bytes"] != p.file_bytes or result["errors"] != 0:
        raise BenchError(f"the import read {result}, the file holds {p.file_bytes} bytes")
    return {**ran, "rows": result["rows"], "batches": result["pages"]}


async def import_bare(p: Places, config: Config, n: int) -> dict[str, Any]:
    """The same pages read and parsed in a plain loop: seconds, rows handled, pages."""
    read = LocalFile(str(p.directory / SOURCE_FILE), SOURCE_FILE).read
    layout = Layout("jsonl", min(DEFAULT_MAX_RECORD_BYTES, config.page_bytes))
    began = time.perf_counter()
    offset, line, rows, pages = 0, 1, 0, 0
    while True:
        pages += 1
        page = read_page(read, layout, offset, line, config.page_bytes)
        if page.rows:
            await _noop(page.rows)
            rows += len(page.rows)
        offset, line = page.next_offset, page.next_line
        if page.done:
            break
    return {"seconds": time.perf_counter() - began, "rows": rows, "batches": pages}


Side = Callable[[Places, Config, int], Awaitable[dict[str, Any]]]
SIDES: dict[str, dict[str, Side]] = {
    "backfill": {FACTORY: backfill_factory, BARE: backfill_bare},
    "import": {FACTORY: import_factory, BARE: import_bare},
}


def expected_rows(p: Places, config: Config, kind: str) -> int:
    return config.rows if kind == "backfill" else p.file_rows


async def sample(p: Places, config: Config, kind: str, side: str, pair: int) -> dict[str, Any]:
    """One measurement, its rows checked: every row once."""
    load = os.getloadavg()[0]
    cpu = time.process_time()
    got = await SIDES[kind][side](p, config, pair)
    cpu = time.process_time() - cpu
    if got["rows"] != expected_rows(p, config, kind):
        raise BenchError(
            f"{kind} {side}: {got['rows']} rows handled of {expected_rows(p, config, kind)}"
        )
    return {
        "kind": kind,
        "side": side,
        "pair": pair,
        **got,
        "rows_per_s": got["rows"] / got["seconds"],
        "cpu_s": cpu,
        "load_1m": load,
    }


async def measure(p: Places, config: Config, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    """A warm-up pass of each bare loop, then the pairs of each kind, the order within a pair
    alternating."""
    for kind in kinds:
        await SIDES[kind][BARE](p, config, 0)
    samples: list[dict[str, Any]] = []
    for pair in range(1, config.pairs + 1):
        probe = {"kind": "probe", "pair": pair, "load_1m": os.getloadavg()[0]}
        samples.append({**probe, **await commit_probe(p, config.probes)})
        for kind in kinds:
            order = (FACTORY, BARE) if pair % 2 else (BARE, FACTORY)
            two = {}
            for side in order:
                two[side] = got = await sample(p, config, kind, side, pair)
                samples.append(got)
                print(
                    f"bench: pair {pair} {kind:8s} {side:7s} {got['seconds']:7.2f} s"
                    f" {got['rows_per_s']:10,.0f} rows/s  cpu {got['cpu_s']:6.2f} s"
                    f"  load {got['load_1m']:.2f}",
                    flush=True,
                )
            if two[FACTORY]["batches"] != two[BARE]["batches"]:
                raise BenchError(
                    f"{kind}: the factory ran {two[FACTORY]['batches']} batches, the bare loop"
                    f" {two[BARE]['batches']}: not the same batches"
                )
    return samples


# -- the summary ------------------------------------------------------------------------------


def _range(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Per kind: each side's rows/s (median and range over the pairs), and the overhead — the
    factory's seconds over the bare loop's within each pair, minus one — per pair, its median
    and range, and whether the median meets the target."""
    out: dict[str, Any] = {}
    probes = [s for s in result["samples"] if s["kind"] == "probe"]
    if probes:
        out["probe"] = {
            "commit_ms": _range([s["commit_ms"] for s in probes]),
            "round_trip_ms": _range([s["round_trip_ms"] for s in probes]),
        }
    for kind in result["kinds"]:
        mine = [s for s in result["samples"] if s["kind"] == kind]
        by_pair: dict[int, dict[str, dict[str, Any]]] = {}
        for s in mine:
            by_pair.setdefault(s["pair"], {})[s["side"]] = s
        whole = [sides for _, sides in sorted(by_pair.items()) if len(sides) == 2]
        if not whole:
            continue
        overhead = [sides[FACTORY]["seconds"] / sides[BARE]["seconds"] - 1 for sides in whole]
        batches = whole[0][FACTORY]["batches"]
        store: dict[str, list[tuple[float, float]]] = {}
        for sides in whole:
            for name, spent in sides[FACTORY].get("store", {}).items():
                store.setdefault(name, []).append(
                    (spent["calls"] / batches, spent["seconds"] * 1000 / batches)
                )
        out[kind] = {
            "pairs": len(whole),
            "rows": whole[0][FACTORY]["rows"],
            "batches": batches,
            # What the factory spends a batch beyond the bare loop, and in which store calls.
            "extra_ms_per_batch": _range(
                [
                    (sides[FACTORY]["seconds"] - sides[BARE]["seconds"]) * 1000 / batches
                    for sides in whole
                ]
            ),
            "bare_ms_per_batch": _range(
                [sides[BARE]["seconds"] * 1000 / batches for sides in whole]
            ),
            # Per store call: how many a batch, and the wall ms they took a batch (medians).
            "store_per_batch": {
                name: {
                    "calls": statistics.median(c for c, _ in v),
                    "ms": statistics.median(ms for _, ms in v),
                }
                for name, v in sorted(store.items())
            },
            FACTORY: _range([sides[FACTORY]["rows_per_s"] for sides in whole]),
            BARE: _range([sides[BARE]["rows_per_s"] for sides in whole]),
            "overhead": {**_range(overhead), "per_pair": overhead},
            "cpu_overhead": _range(
                [sides[FACTORY]["cpu_s"] / sides[BARE]["cpu_s"] - 1 for sides in whole]
            ),
            "load_1m": _range([s["load_1m"] for sides in whole for s in sides.values()]),
            "meets_target": statistics.median(overhead) <= TARGET,
        }
    return out


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def render(result: dict[str, Any]) -> str:
    """The markdown of a result (docs/factories.md, "Measured"): one row per sweep, then where
    the factory's time per batch went in the store."""
    about, config = result["machine"], result["config"]
    lines = [
        f"**{about['date'][:10]}, {about['nproc']} cores, load {about['load_before'][0]:.2f}"
        f" before and {about['load_after'][0]:.2f} after, Python {about['python']},"
        f" {about['pg']}, SQLAlchemy {about['versions']['sqlalchemy']}, psycopg"
        f" {about['versions']['psycopg']}, ours at {about['commit']},"
        f" {config['pairs']} pairs (order alternating)**",
        "",
        "| sweep | rows | batches | factory rows/s | bare loop rows/s | overhead, median"
        " (range) | per pair | bare ms/batch | factory's extra ms/batch | load |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    what = {
        "backfill": f"backfill, keyset, batch {config['batch']:,}",
        "import": f"import, JSONL {result['file_bytes'] / 1e6:,.3g} MB, page"
        f" {config['page_bytes'] / 1_048_576:g} MiB",
    }
    notes = []
    for kind in result["kinds"]:
        s = result["summary"].get(kind)
        if s is None:
            continue
        o = s["overhead"]
        lines.append(
            f"| {what[kind]} | {s['rows']:,} | {s['batches']:,} | {s[FACTORY]['median']:,.0f} |"
            f" {s[BARE]['median']:,.0f} | {_pct(o['median'])} ({_pct(o['min'])} to"
            f" {_pct(o['max'])}) | {' · '.join(_pct(x) for x in o['per_pair'])} |"
            f" {s['bare_ms_per_batch']['median']:.2f} |"
            f" {s['extra_ms_per_batch']['median']:.2f} |"
            f" {s['load_1m']['min']:.1f}–{s['load_1m']['max']:.1f} |"
        )
        # The calls every batch makes (the worker's own claims and beats run beside them).
        each = [(n, c["ms"]) for n, c in s["store_per_batch"].items() if c["calls"] >= 1]
        said = ", ".join(f"`{n}` {ms:.2f}" for n, ms in sorted(each, key=lambda x: -x[1]))
        windows = s["store_per_batch"].get("sweep_checkpoint")
        if windows is not None and 0 < windows["calls"] < 1:
            # A backfill checkpoints a window of batches at a time.
            said += (
                f"{'; ' if said else 'none; '}`sweep_checkpoint` once per"
                f" {1 / windows['calls']:,.0f} batches (a window's), {windows['ms']:.3f} ms a batch"
            )
        notes.append(
            f"{kind}: the store calls each batch makes, wall ms a batch: {said}"
            + f"; the process's CPU seconds over the bare loop's:"
            f" {_pct(s['cpu_overhead']['median'])}"
        )
    probe = result["summary"].get("probe")
    if probe is not None:
        c, t = probe["commit_ms"], probe["round_trip_ms"]
        notes.append(
            f"The server's floor, probed before each pair: a durable commit (a one-row UPDATE"
            f" committed alone, as each checkpoint write is) {c['median']:.2f} ms"
            f" ({c['min']:.2f}–{c['max']:.2f}); a bare round trip (`SELECT 1`)"
            f" {t['median']:.2f} ms ({t['min']:.2f}–{t['max']:.2f})."
        )
    return "\n".join([*lines, "", *notes])


# -- the run ----------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()


def _pg_version(pg_url: str) -> str:
    with psycopg.connect(libpq_url(pg_url)) as conn:
        row = conn.execute("SELECT current_setting('server_version')").fetchone()
    assert row is not None
    return f"PostgreSQL {row[0]}"


async def run(config: Config, kinds: tuple[str, ...], pg_url: str) -> dict[str, Any]:
    """Make the data, measure, remove the data: the result (not yet saved)."""
    about: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "pg": _pg_version(pg_url),
        "versions": {
            name: metadata.version(name) for name in ("ultimat3-jobs", "sqlalchemy", "psycopg")
        },
        "commit": _git("describe", "--always", "--dirty"),
        "load_before": os.getloadavg(),
    }
    began = time.perf_counter()
    async with places(pg_url, config, kinds) as p:
        about["setup_s"] = time.perf_counter() - began
        samples = await measure(p, config, kinds)
        file_bytes, file_rows = p.file_bytes, p.file_rows
        # Where the data was, for the record: every one of them is gone once this block ends. The
        # directory by its name in the system's temporary directory, never a machine's path.
        made = {"schemas": [p.data_schema, p.jobs_schema], "directory": p.directory.name}
    about["load_after"] = os.getloadavg()
    about["commit_after"] = _git("describe", "--always", "--dirty")
    result: dict[str, Any] = {
        "config": asdict(config),
        "kinds": list(kinds),
        "file_bytes": file_bytes,
        "file_rows": file_rows,
        "made": made,
        "machine": about,
        "samples": samples,
    }
    result["summary"] = summarise(result)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.factories", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, one pair")
    parser.add_argument("--pairs", type=int, help=f"default {FULL.pairs}")
    parser.add_argument("--rows", type=int, help=f"the table's rows (default {FULL.rows:,})")
    parser.add_argument("--batch", type=int, help=f"backfill batch (default {FULL.batch:,})")
    parser.add_argument("--file-mb", type=float, help="the JSONL file, MB (default 100)")
    parser.add_argument("--page-bytes", type=int, help=f"default {FULL.page_bytes:,}")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(KINDS)}")
    parser.add_argument("--pg-url", default=PG_URL, help="the server (default %(default)s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(argv)
    config = DRY if args.dry_run else FULL
    for option, value in (
        ("pairs", args.pairs),
        ("rows", args.rows),
        ("batch", args.batch),
        ("page_bytes", args.page_bytes),
        ("file_bytes", None if args.file_mb is None else round(args.file_mb * 1_000_000)),
    ):
        if value is not None:
            config = replace(config, **{option: value})
    kinds = tuple(args.only.split(",")) if args.only else KINDS
    if set(kinds) - set(KINDS):
        parser.error(f"unknown kinds: {', '.join(sorted(set(kinds) - set(KINDS)))}")
    load = os.getloadavg()[0]
    if load >= BUSY_LOAD:
        print(f"bench: load average {load:.2f}: other work shares the cores; read the ratios")
    result = asyncio.run(run(config, kinds, args.pg_url))
    result["dry_run"] = args.dry_run
    result["command"] = " ".join(["python -m bench.factories", *(argv or sys.argv[1:])])
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"factories-{stamp}{'-dry' if args.dry_run else ''}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print()
    print(render(result))
    print(f"\n(results: {path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
