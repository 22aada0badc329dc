"""Probes for `python -m bench.pickup_phases`: loaded by a worker process whose PYTHONPATH starts
with this directory, whatever the system (ours, PgQueuer, oban-py), when BENCH_PROBE_FILE names a
file. One line a event, "<event> <wall time> <label>": `notify` (a NOTIFY reached the worker's
code), `send` / `answer` (the claim's call and its answer — ours: `PgDriver._job_claim`, its
gathering and its round; PgQueuer: each asyncpg statement; oban-py: `Query.fetch_jobs`, its pool
connection, BEGIN, the fetch and COMMIT, which end before its jobs are dispatched), and
`step_send` / `step_answer` (one round trip on psycopg's `AsyncConnection.wait` — ours' `Round`,
oban-py's BEGIN, statement or COMMIT — labelled with its task, as a claim's are, so the claim's
own round trips can be told from its client's work). Only the standard library and the system's
own driver are imported."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any


def _install(path: str) -> None:
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def note(event: str, label: str = "") -> None:
        out.write(f"{event} {time.time()} {label}\n")

    def task() -> str:
        """The running task's id: a claim's round trips are the ones in its task."""
        try:
            return f"t{id(asyncio.current_task())}"
        except RuntimeError:
            return "t0"

    async def timed(text: object, answer: Any) -> Any:
        """Await `answer` (a statement's call) between its `send` and `answer` lines."""
        label = " ".join(str(text).split())[:40].replace(" ", "_") + "@" + task()
        note("send", label)
        try:
            return await answer
        finally:
            note("answer", label)

    def steps(psycopg: Any) -> None:
        """Each round trip psycopg waits for, as `step_send` / `step_answer` of its task."""
        wait = psycopg.AsyncConnection.wait

        async def traced_wait(self: Any, gen: Any, *a: Any, **kw: Any) -> Any:
            label = task()
            note("step_send", label)
            try:
                return await wait(self, gen, *a, **kw)
            finally:
                note("step_answer", label)

        psycopg.AsyncConnection.wait = traced_wait  # type: ignore[method-assign]

    try:
        from jobs_pg.driver import PgDriver
        from jobs_pg.wake import PgWakeSubscription
    except ImportError:
        pass
    else:
        import psycopg

        deliver = PgWakeSubscription._deliver

        def traced_deliver(self: Any, payload: str) -> None:
            note("notify")
            deliver(self, payload)

        PgWakeSubscription._deliver = traced_deliver  # type: ignore[method-assign]
        claim = PgDriver._job_claim

        async def traced_claim(self: Any, params: Any) -> Any:
            return await timed("claim", claim(self, params))

        PgDriver._job_claim = traced_claim  # type: ignore[method-assign]
        steps(psycopg)
        return
    try:
        import asyncpg.connection as apg
    except ImportError:
        pass
    else:
        process = apg.Connection._process_notification

        def traced_process(self: Any, pid: Any, channel: Any, payload: Any) -> Any:
            note("notify")
            return process(self, pid, channel, payload)

        apg.Connection._process_notification = traced_process  # type: ignore[method-assign]
        execute = apg.Connection._execute

        async def traced_execute(self: Any, query: Any, *a: Any, **kw: Any) -> Any:
            return await timed(query, execute(self, query, *a, **kw))

        apg.Connection._execute = traced_execute  # type: ignore[method-assign]
    try:
        import psycopg
    except ImportError:
        return
    notifies = psycopg.AsyncConnection.notifies

    async def traced_notifies(self: Any, *a: Any, **kw: Any) -> Any:
        async for n in notifies(self, *a, **kw):
            note("notify")
            yield n

    psycopg.AsyncConnection.notifies = traced_notifies  # type: ignore[method-assign]
    try:
        from oban._query import Query
    except ImportError:
        return
    # oban-py's claim is the whole of `fetch_jobs`: a pool connection, BEGIN, the fetch and
    # COMMIT, all before its jobs are dispatched (its statements alone would leave the COMMIT
    # in the answer → body part).
    fetch = Query.fetch_jobs

    async def traced_fetch(self: Any, *a: Any, **kw: Any) -> Any:
        return await timed("fetch_jobs", fetch(self, *a, **kw))

    Query.fetch_jobs = traced_fetch  # type: ignore[method-assign]
    steps(psycopg)


if os.environ.get("BENCH_PROBE_FILE"):
    _install(os.environ["BENCH_PROBE_FILE"])
