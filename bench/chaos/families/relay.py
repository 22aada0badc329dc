"""The outbox's relay under chaos: the feed is an app that stages one job per transaction in the
app's own Postgres (a second throwaway cluster), beside a row of its own business table naming
the job; one transaction in ten rolls back on purpose. Two `ujobs relay` processes publish to
the jobs' store through the answer-losing proxy, in batches of 20.

The relays run on a driver scheme of the run's own (`chaoshook://`: the real driver, each
publish written to the ledger), so the timeline's kill -9 lands between a publish and its mark:
the run sets a trap file, the first relay to publish takes it and hangs, and is killed there.
The store faults alternate between the jobs' store and the app's Postgres.

The business table is the truth of what committed: each of its rows must be one job, and no
stage whose transaction did not commit may be one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Final

from bench.chaos.families import TRAP_ENV, Evidence, Family, Urls
from bench.chaos.feed import Feeder
from bench.chaos.figures import Config, Figure, Findings, Life, Row
from bench.chaos.ledger import note
from bench.chaos.servers import NAMESPACE, PgStore, Store
from jobs_core import JobContext, job
from jobs_core.driver import JobDriver
from jobs_core.records import EnqueueResult, NewJob

#: The real driver's URL, for the hooked one the relays run on.
INNER_ENV: Final = "CHAOS_INNER_DRIVER"
SCHEME: Final = "chaoshook"
#: The app's business table: one row per committed stage, naming its job.
APP_TABLE: Final = f'"{NAMESPACE}".chaos_app'
ROLLBACK_SHARE: Final = 0.1
BATCH: Final = 20


@job(name="chaos_relay", queue="chaos_relay", idempotency_key=lambda i: i["k"], tenant="none")
async def chaos_relay(inp: dict[str, Any], ctx: JobContext) -> None:
    return None


def hooked_driver(url: str) -> JobDriver:
    """The driver at `INNER_ENV`, each publish written to the ledger (and trapped when told)."""
    from jobs_core.urls import driver_from_url

    driver = driver_from_url(os.environ[INNER_ENV])
    many, one = driver.job_enqueue_many, driver.job_enqueue

    async def enqueue_many(jobs: Sequence[NewJob]) -> list[EnqueueResult]:
        answers = await many(jobs)
        await _published(answers)
        return answers

    async def enqueue(job: NewJob) -> EnqueueResult:  # the name the driver's method gives it
        answer = await one(job)
        await _published([answer])
        return answer

    driver.job_enqueue_many = enqueue_many  # type: ignore[method-assign]
    driver.job_enqueue = enqueue  # type: ignore[method-assign]
    return driver


async def _published(answers: Sequence[EnqueueResult]) -> None:
    ids = [a.id for a in answers]
    note("published", ids=ids, deduped=[a.id for a in answers if a.deduped])
    trap = os.environ.get(TRAP_ENV)
    if not trap:
        return
    try:
        os.rename(trap, f"{trap}.{os.getpid()}")
    except FileNotFoundError:
        return
    note("trapped", ids=ids)
    await asyncio.sleep(3600)  # published, never marked: the run kills this relay here


async def feed(f: Feeder) -> None:
    """One stage per transaction, with its business row; 10 % rolled back on purpose. A commit
    that raised is `unknown` (the business table says what happened); the app goes on."""
    import psycopg

    from jobs_pg import PgOutbox
    from jobs_pg.urls import libpq_url, split_options

    outbox = PgOutbox(schema=NAMESPACE)
    conninfo = libpq_url(split_options(f.url)[0])
    conn: psycopg.AsyncConnection[Any] | None = None
    while f.made < f.total and f.elapsed() < f.seconds:
        inp = f.intent()
        rollback = f.rng.random() < ROLLBACK_SHARE
        how, error, staged_id = "", None, None
        try:
            if conn is None or conn.closed:
                conn = await psycopg.AsyncConnection.connect(conninfo, connect_timeout=3)
                await conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {APP_TABLE}"
                    " (i text PRIMARY KEY, job text NOT NULL)"
                )
                await conn.commit()
            staged = await outbox.stage(conn, chaos_relay, inp)
            staged_id = staged.id
            await conn.execute(
                f"INSERT INTO {APP_TABLE} (i, job) VALUES (%s, %s)", (inp["i"], staged.id)
            )
        except Exception as exc:
            how, error = "failed", f"{type(exc).__name__}: {exc}"[:200]
            await _drop(conn)
            conn = None
        else:
            try:
                await (conn.rollback() if rollback else conn.commit())
                how = "rolled back" if rollback else "committed"
            except Exception as exc:
                # A rollback that raised committed nothing; a commit that raised may have.
                how = "rolled back" if rollback else "unknown"
                error = f"{type(exc).__name__}: {exc}"[:200]
                await _drop(conn)
            conn = None
        f.record({"ev": "staged", "id": staged_id, "i": inp["i"], "how": how, "error": error})
        if how in ("failed", "unknown"):
            await asyncio.sleep(0.25)
        await f.pace()
    await _drop(conn)


async def _drop(conn: Any) -> None:
    """Close `conn` (a dead one has nothing to close); the next stage connects again."""
    if conn is not None:
        with contextlib.suppress(Exception):
            await conn.close()


def _fleet(urls: Urls, args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    assert urls.outbox is not None
    return [
        "relay",
        "--outbox",
        urls.outbox,
        "--driver",
        f"{SCHEME}://jobs",
        "--batch",
        str(BATCH),
        "--lease",
        str(args.lease),
        "--drain-timeout",
        str(args.drain_timeout),
    ], {INNER_ENV: urls.proxied}


def _outbox(stores: Mapping[str, Store]) -> PgStore:
    store = stores["outbox"]
    assert isinstance(store, PgStore)
    return store


def _drained(stores: Mapping[str, Store], timeline_t: float) -> bool:
    try:
        return _outbox(stores).query(f'SELECT count(*) FROM "{NAMESPACE}".outbox')[0][0] == 0
    except Exception:
        return False


def _gather(urls: Urls, stores: Mapping[str, Store]) -> dict[str, Any]:
    store = _outbox(stores)
    left = store.query(f'SELECT count(*) FROM "{NAMESPACE}".outbox')[0][0]
    committed = {str(i): str(j) for i, j in store.query(f"SELECT i, job FROM {APP_TABLE}")}
    return {"committed": committed, "outbox_left": left}


def analyse(ev: Evidence) -> Findings:
    committed: dict[str, str] = ev.extra.get("committed") or {}
    staged = [a for a in ev.answers if a.get("ev") == "staged"]
    jobs_of: dict[str, set[str]] = defaultdict(set)
    for row in ev.rows.values():
        if row.name == "chaos_relay" and row.intent:
            jobs_of[row.intent].add(row.id)
    lost = [f"{i}: job {j}" for i, j in committed.items() if j not in ev.rows]
    phantom = [
        f"{a['i']} ({a['how']}): job {a['id']}"
        for a in staged
        if a["id"] in ev.rows and a["i"] not in committed
    ]
    twice = [f"{i}: {sorted(ids)}" for i, ids in jobs_of.items() if len(ids) > 1]
    hows = Counter(a["how"] for a in staged)
    unknown_committed = sum(1 for a in staged if a["how"] == "unknown" and a["i"] in committed)
    published = ev.of("published")
    figures = [
        Figure(
            "stages committed",
            len(committed),
            False,
            f"of {len(staged)} tried: "
            + ", ".join(f"{how} {n}" for how, n in sorted(hows.items()))
            + f"; {unknown_committed} of the unknown commits had committed",
        ),
        Figure(
            "committed stages with no job",
            len(lost),
            True,
            "a row of the app's table (its transaction committed) whose job is not in the store",
            lost[:3],
        ),
        Figure(
            "uncommitted stages that became jobs",
            len(phantom),
            True,
            "a stage rolled back, failed, or whose commit did not land, has a job",
            phantom[:3],
        ),
        Figure(
            "stages that became two jobs",
            len(twice),
            True,
            "one staged input, two jobs in the store",
            twice[:3],
        ),
        Figure(
            "outbox rows left at the end",
            int(ev.extra.get("outbox_left") or 0),
            False,
            "rows no relay published before the wait ran out",
        ),
        Figure(
            "publishes deduped",
            sum(len(d["deduped"]) for d in published),
            False,
            "rows published again (a relay killed before its mark, a lapsed claim): no new job",
        ),
        Figure(
            "relays killed between publish and mark",
            len(ev.of("trapped")),
            False,
            "relays that fell into the run's trap after a publish, and were killed there",
        ),
    ]
    return Findings(figures, {})


# -- self-check ---------------------------------------------------------------------------------

T = 1_000_000.0


def clean() -> Evidence:
    """Two stages: one committed (published twice: the first relay killed before its mark),
    one rolled back."""
    cfg = Config("pg", True, lease_s=5.0, drain_timeout_s=3.0, outage_s=3.0, family="relay")
    answers = [
        {"ev": "staged", "id": "j1", "i": "i1", "how": "committed", "error": None},
        {"ev": "staged", "id": "j2", "i": "i2", "how": "rolled back", "error": None},
    ]
    lines = [
        {"ev": "published", "ids": ["j1"], "deduped": [], "pid": 100, "t": T},
        {"ev": "trapped", "ids": ["j1"], "pid": 100, "t": T + 1},
        {"ev": "published", "ids": ["j1"], "deduped": ["j1"], "pid": 200, "t": T + 6_000},
    ]
    rows = {"j1": Row("j1", "chaos_relay", "ready", 0, None, "i1", "k1")}
    extra = {"committed": {"i1": "j1"}, "outbox_left": 0}
    return Evidence(cfg, answers, rows, lines, [Life(0, 100, T), Life(1, 200, T)], extra)


FAMILY = Family(
    name="relay",
    title="stages in the app's transactions, relays killed between publish and mark, both"
    " Postgres servers restarted: each committed stage one job",
    fleet=_fleet,
    feed=("-m", "bench.chaos.feed", "--family", "relay"),
    jobs=600,
    seconds=30.0,
    analyse=analyse,
    feed_proxied=False,
    fleet_size=2,
    outbox=True,
    drained=_drained,
    gather=_gather,
    trap=True,
    driver_hook=(SCHEME, "bench.chaos.families.relay:hooked_driver"),
    clean=clean,
    cases={
        "committed stages with no job": lambda ev: ev.rows.clear(),
        "uncommitted stages that became jobs": lambda ev: ev.rows.update(
            j2=Row("j2", "chaos_relay", "ready", 0, None, "i2", "k2")
        ),
        "stages that became two jobs": lambda ev: ev.rows.update(
            j3=Row("j3", "chaos_relay", "ready", 0, None, "i1", "k1")
        ),
        "outbox rows left at the end": lambda ev: ev.extra.update(outbox_left=1),
    },
    tallies=frozenset(
        {"stages committed", "publishes deduped", "relays killed between publish and mark"}
    ),
)
