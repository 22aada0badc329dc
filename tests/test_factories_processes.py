"""The factories under SIGKILL, with real `ujobs worker` processes on real Postgres and real
Redis: a `backfill()` over a Postgres table (keyset) and an `import_rows()` of a JSON Lines
file, each run's worker killed (`kill -9`) twice mid-sweep and a standby worker taking the run
over each time.

The application's data lives in Postgres in a schema of the test's own, whichever store holds
the jobs, steps and ledger: so the Redis case runs the very same keyset source and differs only
in its store. Each `handle` notes every row it is given in a side table (`seen`), committed on a
connection of its own before the step that hands it the rows is recorded: a row handled again
after a kill shows there as a second line. So "nothing skipped", "handled again only where a
kill landed" and "resumed at the checkpoint" are read from what really ran; the ledger and the
step records from the store.

The backfill checkpoints in windows (`checkpoint_s=`): one step over the batches run within
`WINDOW_S`, its handle pausing a little longer than that in every `WINDOW`-th batch, so each
window holds exactly `WINDOW` batches. The import checkpoints per page.

Each kill lands at a chosen place: the first process to get there holds (sleeps) until the test
kills it, and leaves a mark (its rows in `seen`, or a file) that lets every later one through:
- the first, in `handle`, its rows committed and its step not recorded: for the backfill, in
  the second batch of a window, so a window of several batches is in flight — its batches are
  handled again, whole, from the window's start, and each counted once; for the import, that
  page;
- the second, right after a window's (page's) checkpoint landed — its step record and its
  ledger advance, one write — before the run went on: the resumed run replays it from its
  record, handles nothing of it again and counts nothing twice.
Holding there is the app's own wrapping of the drivers' `_sweep_checkpoint` (the one write a
window's checkpoint is): the worker runs the real driver, then holds.

A killed worker's lease lapses (2 s) and a standby takes the run back. A standby started with the
killed one does not reclaim a lapsed lease for its first `RECLAIM_GRACE_MS` (4 s; see
`jobs_core.worker.outage`), and an idle one polls only every few seconds: once the lease lapsed
the test enqueues a no-op `nudge` job, whose wake makes the standbys claim at once (and take the
lapsed run with it).
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from jobs_core.driver import JobDriver
from jobs_core.facade import Jobs
from jobs_core.factories.rows import import_report
from jobs_core.factories.rows.formats import Layout, Page, read_page
from jobs_core.job import JobHandle, JobRegistry, job
from jobs_core.jsonform import loads
from jobs_core.records import JobRecord, StepRecord, SweepRecord
from jobs_core.states import JobState
from jobs_core.urls import driver_from_url
from jobs_pg.urls import libpq_url, sqlalchemy_url
from tests.core.support import ledger_worker, reaping
from tests.pg.conftest import PG_URL, admin, drop_schema, fresh_schema

#: The backfill's table: keys 1..ROWS, BATCH a batch (the last one short: ROWS // BATCH + 1).
ROWS = 250
BATCH = 20
#: The backfill's windows: `checkpoint_s=WINDOW_S`, and every WINDOW-th batch's handle pauses
#: `PAUSE_S`, past it (the batches before it take milliseconds): batches 0-3, 4-7, 8-11, 12.
WINDOW = 4
WINDOW_S = 0.6
PAUSE_S = 0.7
#: The first kill: in `handle` of the batch holding this key — batch 5, the second of the
#: window at batch:4.
HOLD_KEY = 5 * BATCH + 1
#: The second kill: right after the checkpoint of the window at batch:8 (batches 8-11) landed.
HOLD_LANDED = 8
#: The import's file: RECORDS good records, the malformed ones planted among them.
RECORDS = 150
PAGE_BYTES = 320
#: The first kill: in `handle` of the page holding this record (its `n`).
HOLD_N = 52
#: The second kill: right after page:9's checkpoint landed (pages 0..9 recorded and counted).
HOLD_PAGE = 9
#: Malformed records, each planted just before the good record `n`: its bytes, and the field
#: and the code the error report names it by.
PLANTED: dict[int, tuple[bytes, str | None, str]] = {
    7: (b'{"n": 7000, "note": ', None, "json"),
    60: (b"[60, 61]", None, "not_object"),
    100: (b'{"n": 100, "note": "\\ud800"}', "note", "surrogate"),
    123: (b'{"n": NaN}', None, "number"),
    140: (b'{"n": 140, "note": "\xff\xfe"}', None, "utf8"),
}
#: The workers' lease, in seconds: a killed worker's run comes back once it lapses.
LEASE_S = "2"
#: One holder and a standby for each kill.
WORKERS = 3
#: The file the app creates as it holds between two store writes (then never holds there again).
STORE_HOLD = "held-in-store"

APP = f"""
import asyncio, os, time
from pathlib import Path
import psycopg
import sqlalchemy as sa
from psycopg import sql
from jobs_core import job
from jobs_core.factories.backfill import backfill
from jobs_core.factories.rows import import_rows
from jobs_core.retry import Retry

SCHEMA = os.environ["DATA_SCHEMA"]
HERE = Path(__file__).parent
RETRY = Retry(attempts=5, base_ms=10)


def note(keys, hold, pause=False):
    with psycopg.connect(os.environ["DATA_URL"]) as conn:
        seen = sql.Identifier(SCHEMA, "seen")
        with conn.cursor() as cur:
            cur.executemany(
                sql.SQL("INSERT INTO {{}} (key, pid) VALUES (%s, %s)").format(seen),
                [(k, os.getpid()) for k in keys],
            )
        first = hold in keys and conn.execute(
            sql.SQL("SELECT count(*) FROM {{}} WHERE key = %s").format(seen), (hold,)
        ).fetchone()[0] == 1
    if first:  # committed: held here until the test kills this process
        time.sleep(3600)
    if pause and keys[-1] % ({WINDOW} * {BATCH}) == 0:  # the last batch of a window
        time.sleep({PAUSE_S})


async def hold_once(here):
    # The first process to come here holds until it is killed; every later one goes through.
    if here:
        try:
            (HERE / "{STORE_HOLD}").open("x").close()
        except FileExistsError:
            return
        await asyncio.sleep(3600)


def holding(cls):
    # A batch's checkpoint, the one write that records its step and counts it.
    checkpoint = cls._sweep_checkpoint

    async def held_checkpoint(self, c):
        landed = await checkpoint(self, c)
        await hold_once(c.step.name == os.environ.get("HOLD_LANDED"))
        return landed

    cls._sweep_checkpoint = held_checkpoint


# Only the store's own driver is imported: a worker's start-up is most of a case's time.
if os.environ["UJOBS_DRIVER"].startswith("redis"):
    from jobs_redis import RedisDriver as Driver
else:
    from jobs_pg import PgDriver as Driver
holding(Driver)

items = sa.Table("items", sa.MetaData(schema=SCHEMA), sa.Column("id", sa.Integer, primary_key=True))

items_backfill = backfill(
    name="items_backfill",
    tenant="none",
    source=sa.select(items.c.id),
    engine=sa.create_engine(os.environ["DATA_SA_URL"], poolclass=sa.pool.NullPool),
    key="id",
    handle=lambda rows: note([r.id for r in rows], {HOLD_KEY}, pause=True),
    batch={BATCH},
    count={ROWS},
    checkpoint_s={WINDOW_S},
    retry=RETRY,
)

orders_import = import_rows(
    name="orders_import",
    tenant="none",
    format="jsonl",
    root=str(HERE),
    handle=lambda rows: note([r["n"] for r in rows], {HOLD_N}),
    page_bytes={PAGE_BYTES},
    max_record_bytes={PAGE_BYTES},
    retry=RETRY,
)


@job(tenant="none", idempotency_key=lambda i: str(i["n"]))
async def nudge(input, ctx):
    return None
"""


def stand_in(name: str, key: Any) -> JobHandle:
    """A handle enqueueing the app's job `name` (the workers run the app's own)."""

    async def body(i: Any, ctx: Any) -> None:
        return None

    handle: JobHandle = job(
        body, name=name, tenant="none", idempotency_key=key, registry=JobRegistry()
    )
    return handle


NUDGE = stand_in("nudge", lambda i: str(i["n"]))


@dataclass(frozen=True, slots=True)
class Seen:
    """One row a handle was given: its key (`n` for the import), by which process, in order."""

    seq: int
    key: int
    pid: int


@dataclass(frozen=True, slots=True)
class Kill:
    """One kill: the process killed, when it was gone (by the clock every worker stamps its
    writes with), the run's ledger entry as it left it, and the process that took the run over.

    What the victim wrote is told from what its successor wrote by that stamp, not by when the
    test reads it: a statement the victim sent just before it died may still commit after.
    The ledger entry is the last one read before the run was taken over whose stamp is the
    victim's.
    """

    victim: int
    died_ms: int
    entry: SweepRecord
    successor: int
    #: Seconds from the fleet's start: the kill, and the run taken over.
    at_s: float
    back_s: float

    def steps(self, steps: list[StepRecord]) -> list[StepRecord]:
        """Of the run's final step records, those written before the kill: the batch (page)
        in flight at the kill is the first one not among them."""
        mine = [s for s in steps if s.recorded_at_ms <= self.died_ms]
        assert mine == steps[: len(mine)], "the steps before the kill are not a prefix"
        return mine


def pid_of(row: JobRecord) -> int:
    """The process of the worker holding `row` (a worker id is `host:pid:suffix`)."""
    assert row.claimed_by is not None, row
    return int(row.claimed_by.split(":")[-2])


def index(step: StepRecord) -> int:
    """A batch's (page's) position from its step's name (`batch:7`, `page:7`)."""
    return int(step.name.split(":")[1])


class Fleet:
    """The workers on one store, the run they sweep, and what its handle saw."""

    def __init__(
        self,
        app: Path,
        store_url: str,
        driver: JobDriver,
        data: psycopg.AsyncConnection[Any],
        schema: str,
        workers: list[subprocess.Popen[str]],
    ) -> None:
        self.app, self.url, self.driver, self.data = app, store_url, driver, data
        self.schema, self.workers = schema, workers
        self.job_id = ""
        self.name = ""
        self.kills: list[Kill] = []
        self._killed: set[int] = set()
        self._nudged = 0.0
        self._nudges = 0
        self._began = 0.0

    async def start(self, name: str, input: Any, **env: str) -> None:
        """Enqueue the run, then start the workers (one takes it, the others stand by)."""
        self.name = name
        self._began = time.monotonic()
        self.job_id = (await Jobs(self.driver).enqueue(stand_in(name, lambda i: "one"), input)).id
        for _ in range(WORKERS):
            self.workers.append(
                ledger_worker(
                    self.app,
                    "factoryapp",
                    self.url,
                    "--lease",
                    LEASE_S,
                    DATA_SCHEMA=self.schema,
                    DATA_URL=libpq_url(PG_URL),
                    DATA_SA_URL=sqlalchemy_url(PG_URL),
                    **env,
                )
            )

    def took(self) -> float:
        return time.monotonic() - self._began

    async def row(self) -> JobRecord:
        return (await self.driver.job_get_many([self.job_id]))[self.job_id]

    async def seen(self) -> list[Seen]:
        query = sql.SQL("SELECT seq, key, pid FROM {} ORDER BY seq").format(
            sql.Identifier(self.schema, "seen")
        )
        cur = await self.data.execute(query)
        return [Seen(*r) for r in await cur.fetchall()]

    async def handled(self, key: int) -> bool:
        return any(s.key == key for s in await self.seen())

    async def held_in_store(self) -> bool:
        return (self.app / STORE_HOLD).exists()

    async def steps(self) -> list[StepRecord]:
        return sorted(await self.driver.step_list((await self.row()).run_id), key=index)

    async def entry(self) -> SweepRecord:
        (entry,) = await self.driver.sweep_list(self.name, 10)
        return entry

    async def completed(self) -> bool:
        return (await self.row()).state is JobState.COMPLETED

    async def until(self, check: Callable[[], Awaitable[bool]], what: str) -> None:
        deadline = time.monotonic() + 60
        while not await check():
            dead = [w for w in self.workers if w.poll() is not None and w.pid not in self._killed]
            assert not dead, dead[0].communicate()[0]  # a worker died on its own: its output
            assert time.monotonic() < deadline, f"never: {what}"
            await asyncio.sleep(0.01)

    async def kill_holder(self) -> Kill:
        """SIGKILL the worker holding the run and wait for a standby to take it over."""
        row = await self.row()
        assert row.state is JobState.RUNNING, row
        victim = next(w for w in self.workers if w.pid == pid_of(row))
        self._killed.add(victim.pid)
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=60)
        at_s = self.took()
        died_ms = int(time.time() * 1000)
        entry = await self.entry()

        async def taken_over() -> bool:
            nonlocal entry
            latest = await self.entry()
            if latest.updated_at_ms <= died_ms:
                entry = latest
            return await self._reclaimed(row.claims)

        await self.until(taken_over, "a standby took the run over")
        assert entry.updated_at_ms <= died_ms, "the victim's entry was never read"
        kill = Kill(victim.pid, died_ms, entry, pid_of(await self.row()), at_s, self.took())
        self.kills.append(kill)
        return kill

    async def _reclaimed(self, claims: int) -> bool:
        """Whether a standby holds the run again (its claims moved); until then, once the
        killed worker's lease lapsed, a nudge now and then wakes the standbys' claims."""
        row = await self.row()
        if row.claims > claims:
            return True
        lapsed = row.lease_until_ms is not None and row.lease_until_ms < time.time() * 1000
        if lapsed and time.monotonic() - self._nudged > 0.5:
            self._nudges += 1
            await Jobs(self.driver).enqueue(NUDGE, {"n": self._nudges})
            self._nudged = time.monotonic()
        return False

    def stop(self) -> None:
        """SIGTERM the live workers: each drains and exits 0 (or, still starting, ends)."""
        for w in self.workers:
            if w.poll() is None:
                w.send_signal(signal.SIGTERM)
                out, _ = w.communicate(timeout=60)
                assert w.returncode in (0, -signal.SIGTERM), out

    def timeline(self, what: str, in_flight: list[int]) -> str:
        """When each kill landed and the run was taken over, and what was in flight."""
        kills = ", ".join(
            f"{k.at_s:.1f}s (back at {k.back_s:.1f}s; {what} {n} in flight, ledger at "
            f"{k.entry.batches})"
            for k, n in zip(self.kills, in_flight, strict=True)
        )
        return (
            f"\n{self.url.split(':')[0]} {self.name}: killed at {kills}; done at {self.took():.1f}s"
        )


@pytest.fixture
def schema() -> Iterator[str]:
    """The application's own schema (the data the sweeps read, and `seen`); dropped after."""
    name = fresh_schema()
    with admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (seq bigserial PRIMARY KEY, key integer NOT NULL,"
                " pid integer NOT NULL)"
            ).format(sql.Identifier(name, "seen"))
        )
    try:
        yield name
    finally:
        drop_schema(name)


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    yield from reaping()


@pytest.fixture
async def fleet(
    store_url: str, schema: str, tmp_path: Path, workers: list[subprocess.Popen[str]]
) -> AsyncIterator[Fleet]:
    """The store's driver, a connection to the application's data, and the app's directory:
    the workers are started by `Fleet.start` (and reaped, whatever happens)."""
    (tmp_path / "factoryapp.py").write_text(APP, encoding="utf-8")
    driver: JobDriver = driver_from_url(store_url)
    connect = psycopg.AsyncConnection.connect(libpq_url(PG_URL), autocommit=True)
    async with driver, await connect as data:
        yield Fleet(tmp_path, store_url, driver, data, schema, workers)


async def test_a_backfill_killed_twice_mid_sweep_resumes_at_its_checkpoints(fleet: Fleet) -> None:
    """Every row handled, again only in the window the first kill cut short (its batches from the
    window's start to the one in flight); each resume starts at the batch after the last
    recorded window; the ledger counts each batch once."""
    with admin() as conn:
        items = sql.Identifier(fleet.schema, "items")
        conn.execute(sql.SQL("CREATE TABLE {} (id integer PRIMARY KEY)").format(items))
        conn.execute(sql.SQL("INSERT INTO {} SELECT generate_series(1, %s)").format(items), (ROWS,))
    await fleet.start("items_backfill", {}, HOLD_LANDED=f"batch:{HOLD_LANDED}")
    await fleet.until(lambda: fleet.handled(HOLD_KEY), "the sweep reached its held batch")
    await fleet.kill_holder()
    await fleet.until(fleet.held_in_store, "the sweep checkpointed batch:8's window and held")
    await fleet.kill_holder()
    await fleet.until(fleet.completed, "the sweep completed")
    fleet.stop()
    seen, steps, entry, row = (
        await fleet.seen(),
        await fleet.steps(),
        await fleet.entry(),
        await fleet.row(),
    )
    batches = ROWS // BATCH + 1
    recorded = [k.entry.batches for k in fleet.kills]
    print(fleet.timeline("the window at batch", recorded))
    # The kills landed where they were meant to: in batch 5's handle, the window at batch:4
    # in flight (batch 4 handled, its checkpoint not yet written); then right after the
    # window at batch:8 (batches 8-11) landed. Either way the ledger counted exactly the
    # batches of the windows recorded, as the last recorded window's mark says.
    held = (HOLD_KEY - 1) // BATCH
    assert recorded == [held - held % WINDOW, HOLD_LANDED + WINDOW]
    for kill in fleet.kills:
        before = kill.steps(steps)
        assert json.loads(before[-1].output_json)["batches"] == kill.entry.batches

    # Nothing skipped; the window cut short in its handle handled twice, whole up to its batch
    # in flight; no other row again (the window at batch:8, checkpointed before its kill, is
    # replayed from its record).
    counts = Counter(s.key for s in seen)
    assert set(counts) == set(range(1, ROWS + 1))
    again = set(range(recorded[0] * BATCH + 1, (held + 1) * BATCH + 1))
    assert {k for k, n in counts.items() if n > 1} == again
    assert len(again) == 2 * BATCH  # two batches of the window ran again
    assert max(counts.values()) == 2
    for kill, last in zip(fleet.kills, (held + 1, recorded[1]), strict=True):
        # The killed worker handled nothing past its batch in flight (the second one never
        # began one); its successor started exactly at the last checkpoint.
        assert max(s.key for s in seen if s.pid == kill.victim) == last * BATCH
        first_key = next(s.key for s in seen if s.pid == kill.successor)
        assert first_key == kill.entry.batches * BATCH + 1, (first_key, kill.entry)
        # The ledger as the victim left it: running, its cursor the last key it counted.
        assert kill.entry.status == "running"
        assert kill.entry.rows == kill.entry.batches * BATCH
        assert loads(kill.entry.cursor_json or "null") == kill.entry.batches * BATCH
    # One step per window, named by its first batch, each holding its cursor and running
    # counts, never the page.
    starts = list(range(0, batches, WINDOW))
    assert [s.name for s in steps] == [f"batch:{i}" for i in starts]
    for i, step in zip(starts, steps, strict=True):
        mark = json.loads(step.output_json)
        ends = min(i + WINDOW, batches)
        last = min(ends * BATCH, ROWS)
        assert (mark["batches"], mark["cursor"], mark["rows"], mark["done"]) == (
            ends,
            last,
            last,
            ends == batches,
        )
    # The ledger: completed, each batch counted once, the cursor the last key.
    assert (entry.status, entry.batches, entry.rows, entry.errors) == (
        "completed",
        batches,
        ROWS,
        0,
    )
    assert (entry.expected, loads(entry.cursor_json or "null")) == (ROWS, ROWS)
    assert (entry.job_id, entry.run_id, entry.kind) == (fleet.job_id, row.run_id, "backfill")
    assert row.claims == 3 and row.attempt == 3
    summary = json.loads(row.result_json or "null")
    assert (summary["batches"], summary["rows"], summary["cursor"]) == (batches, ROWS, ROWS)


@dataclass(frozen=True, slots=True)
class Jsonl:
    """The import's file as the test wrote it: where each good record starts (by its `n`), the
    malformed ones as the report names them, and its pages as one read of the whole file
    splits them."""

    data: bytes
    offsets: dict[int, int]
    planted: list[dict[str, Any]]
    pages: list[Page]

    def page_of(self, n: int) -> int:
        return next(i for i, p in enumerate(self.pages) if self.offsets[n] < p.next_offset)

    def start(self, page: int) -> int:
        """The byte offset page `page` starts at: the previous page's checkpoint."""
        return 0 if page == 0 else self.pages[page - 1].next_offset


def orders_file(path: Path) -> Jsonl:
    """Write the import's file: RECORDS good records, PLANTED malformed ones among them."""
    data, offsets, planted, line = b"", {}, [], 1
    for n in range(RECORDS):
        if n in PLANTED:
            bad, field, code = PLANTED[n]
            data += bad + b"\n"
            planted.append({"line": line, "field": field, "code": code})
            line += 1
        offsets[n] = len(data)
        data += json.dumps({"n": n, "note": f"order {n:04d}"}).encode() + b"\n"
        line += 1
    path.write_bytes(data)
    layout = Layout("jsonl", PAGE_BYTES)
    pages: list[Page] = []
    offset, line = 0, 1
    while not pages or not pages[-1].done:
        pages.append(read_page(lambda o, k: data[o : o + k], layout, offset, line, PAGE_BYTES))
        offset, line = pages[-1].next_offset, pages[-1].next_line
    return Jsonl(data, offsets, planted, pages)


async def test_an_import_killed_twice_mid_file_resumes_at_its_byte_offsets(fleet: Fleet) -> None:
    """Every record handled, again only in the page a kill cut short; each resume reads from
    the byte offset of the last recorded page; the ledger counts each page once and the error
    report holds each planted record once."""
    f = orders_file(fleet.app / "orders.jsonl")
    await fleet.start("orders_import", {"source": "orders.jsonl"}, HOLD_LANDED=f"page:{HOLD_PAGE}")
    await fleet.until(lambda: fleet.handled(HOLD_N), "the import reached its held page")
    await fleet.kill_holder()
    await fleet.until(fleet.held_in_store, "the import checkpointed page:9 and held")
    await fleet.kill_holder()
    await fleet.until(fleet.completed, "the import completed")
    fleet.stop()
    seen, steps, entry, row = (
        await fleet.seen(),
        await fleet.steps(),
        await fleet.entry(),
        await fleet.row(),
    )
    in_flight = [len(k.steps(steps)) for k in fleet.kills]
    print(fleet.timeline("page", in_flight))
    # The kills landed where they were meant to: in a page's handle, before its checkpoint;
    # then right after page:9's checkpoint landed. Either way the ledger counted exactly the
    # pages recorded.
    assert in_flight == [f.page_of(HOLD_N), HOLD_PAGE + 1]
    assert [k.entry.batches for k in fleet.kills] == in_flight

    # Nothing skipped; the page cut short in its handle handled twice, whole; nothing else.
    counts = Counter(s.key for s in seen)
    assert set(counts) == set(range(RECORDS))
    again = {n for n, times in counts.items() if times > 1}
    assert again == {n for n in range(RECORDS) if f.page_of(n) == in_flight[0]}
    assert max(counts.values()) == 2
    for kill, flying in zip(fleet.kills, in_flight, strict=True):
        # The successor read from the checkpoint: its first record is the first good one at
        # or after the offset the last recorded page stored, and none before it.
        checkpoint = f.start(flying)
        assert json.loads(steps[flying - 1].output_json)["next_offset"] == checkpoint
        first_n = next(s.key for s in seen if s.pid == kill.successor)
        assert first_n == min(n for n in range(RECORDS) if f.offsets[n] >= checkpoint)
        assert max(f.offsets[s.key] for s in seen if s.pid == kill.victim) < f.start(
            flying + (1 if kill is fleet.kills[0] else 0)
        )
        # The ledger as the victim left it: running, the pages it counted and where they end.
        done = kill.entry.batches
        assert kill.entry.status == "running"
        assert kill.entry.rows == sum(len(p.rows) for p in f.pages[:done])
        assert kill.entry.errors == sum(len(p.refusals) for p in f.pages[:done])
        cursor = {"offset": f.start(done), "line": f.pages[done - 1].next_line}
        assert loads(kill.entry.cursor_json or "null") == cursor
    # One step per page, each the page one read of the whole file makes: no page read from
    # anywhere but the last one's end, none counted twice.
    assert [s.name for s in steps] == [f"page:{i}" for i in range(len(f.pages))]
    for step, page in zip(steps, f.pages, strict=True):
        out = json.loads(step.output_json)
        assert (out["next_offset"], out["next_line"], out["rows"], out["errors"], out["done"]) == (
            page.next_offset,
            page.next_line,
            len(page.rows),
            len(page.refusals),
            page.done,
        )
    # The report: each planted record once, in the file's order, no value.
    assert await import_report(fleet.driver, row.run_id, 1_000) == f.planted
    # The ledger: completed, each page counted once, the cursor the end of the file.
    assert (entry.status, entry.kind, entry.batches, entry.rows, entry.errors) == (
        "completed",
        "import",
        len(f.pages),
        RECORDS,
        len(PLANTED),
    )
    end = {"offset": len(f.data), "line": RECORDS + len(PLANTED) + 1}
    assert loads(entry.cursor_json or "null") == end
    assert (entry.job_id, entry.run_id) == (fleet.job_id, row.run_id)
    assert row.claims == 3 and row.attempt == 3
    assert json.loads(row.result_json or "null") == {
        "pages": len(f.pages),
        "rows": RECORDS,
        "errors": len(PLANTED),
        "bytes": len(f.data),
    }
