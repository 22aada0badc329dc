"""Probes for `python -m bench.pickup_phases`: loaded by a worker process whose PYTHONPATH starts
with this directory, whatever the system (ours, PgQueuer, oban-py), when BENCH_PROBE_FILE names a
file. One line a event, "<event> <wall time> <label>": `notify` (a NOTIFY reached the worker's
code), `send` / `answer` (a statement's call and its answer; ours: the claim, `PgDriver._job_claim`,
pipeline and all). Only the standard library and the system's own driver are imported."""

from __future__ import annotations

import os
import time
from typing import Any


def _install(path: str) -> None:
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life

    def note(event: str, label: str = "") -> None:
        out.write(f"{event} {time.time()} {label}\n")

    async def timed(text: object, answer: Any) -> Any:
        """Await `answer` (a statement's call) between its `send` and `answer` lines."""
        label = " ".join(str(text).split())[:40].replace(" ", "_")
        note("send", label)
        try:
            return await answer
        finally:
            note("answer", label)

    try:
        from jobs_pg.driver import PgDriver
        from jobs_pg.wake import PgWakeSubscription
    except ImportError:
        pass
    else:
        deliver = PgWakeSubscription._deliver

        def traced_deliver(self: Any, payload: str) -> None:
            note("notify")
            deliver(self, payload)

        PgWakeSubscription._deliver = traced_deliver  # type: ignore[method-assign]
        claim = PgDriver._job_claim

        async def traced_claim(self: Any, params: Any) -> Any:
            return await timed("claim", claim(self, params))

        PgDriver._job_claim = traced_claim  # type: ignore[method-assign]
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
    cur_execute = psycopg.AsyncCursor.execute

    async def traced_cur_execute(self: Any, query: Any, *a: Any, **kw: Any) -> Any:
        try:
            text = query if isinstance(query, str) else query.as_string(self.connection)
        except Exception:
            text = type(query).__name__
        return await timed(text, cur_execute(self, query, *a, **kw))

    psycopg.AsyncCursor.execute = traced_cur_execute  # type: ignore[method-assign]


if os.environ.get("BENCH_PROBE_FILE"):
    _install(os.environ["BENCH_PROBE_FILE"])
