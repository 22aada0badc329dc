"""The wake: ONE dedicated LISTEN session per subscription, proven by a probe before it is trusted.

A subscription listens on one channel and hands every payload but its own probe to `deliver`:
the driver's queue wakes (`queue_wakes`: enqueues NOTIFY `q:<queue>` on the schema's channel at
most once per queue per wake slot, see `jobs_pg.statements.job.wake_cte`) and the outbox's
stage wakes (`jobs_pg.outbox`) both ride it. The subscription answers `is_live()` only after a
probe (`p:<token>`, sent by `probe` through a POOL after LISTEN succeeded) came back on this
session; every re-dial starts unproven. Behind PgBouncer in transaction mode LISTEN "succeeds"
but nothing is delivered, so the probe never crosses and the caller keeps polling: the poll is
the guarantee, the wake only shortens the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any, Final

import psycopg
from psycopg import sql

from jobs_core.errors import JobsError
from jobs_core.loops import cancel_and_wait

if TYPE_CHECKING:
    from jobs_pg.driver import PgDriver

log = logging.getLogger("jobs.pg.wake")

#: Probe retries after LISTEN (seconds); past the last one the session stays unproven until a
#: re-dial, so a proxy that swallows notifications costs a handful of probes, not one a minute.
PROBE_DELAYS: Final = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)
#: Re-dial backoff after the session drops.
REDIAL_MIN_S: Final = 0.2
REDIAL_MAX_S: Final = 5.0


def queue_wakes(queues: Collection[str], on_wake: Callable[[str], None]) -> Callable[[str], None]:
    """A `deliver` for the driver's channel: `on_wake(queue)` for a wake of one of `queues`."""

    def deliver(payload: str) -> None:
        if payload.startswith("q:") and payload[2:] in queues:
            on_wake(payload[2:])

    return deliver


class PgWakeSubscription:
    """A LISTEN session on `channel` handing its payloads to `deliver`; trusted once proven.

    `driver` says where to dial (`listen_conninfo`, `connect_kwargs`) and keeps the subscription
    so its `close()` ends it; `probe(payload)` must NOTIFY `payload` on `channel` through another
    session (a pool), never this one.
    """

    def __init__(
        self,
        driver: PgDriver,
        channel: str,
        deliver: Callable[[str], None],
        probe: Callable[[str], Awaitable[None]],
    ) -> None:
        self._driver = driver
        self._channel = channel
        self._deliver_to = deliver
        self._probe_with = probe
        self._live = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[Any] | None = None
        #: The current session's end: set with the error that broke it.
        self._ended: asyncio.Future[None] | None = None
        self._want = ""
        self._encoding = "utf-8"
        #: Sessions dialled so far (each re-dial starts unproven); read by tests.
        self.dials = 0

    def is_live(self) -> bool:
        """True once a probe sent after LISTEN crossed this session, and it has not dropped."""
        return self._live and not self._closed

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ujobs-wake")

    async def close(self) -> None:
        """Stop listening and close the session; idempotent."""
        self._closed = True
        self._live = False
        task, self._task = self._task, None
        if task is not None:
            # Cancelled again while it runs on: psycopg may drop a cancel (`cancel_and_wait`).
            await cancel_and_wait(task)
        self._driver.forget_subscription(self)

    async def drop_session(self) -> None:
        """Close the current session as if the network dropped it (tests exercise re-dials)."""
        conn = self._conn
        if conn is not None:
            self._lost(psycopg.OperationalError("the LISTEN session was dropped"))
            await conn.close()

    async def _run(self) -> None:
        delay = REDIAL_MIN_S
        while not self._closed:
            try:
                await self._session()
                delay = REDIAL_MIN_S
            except asyncio.CancelledError:
                raise
            except (psycopg.Error, OSError) as exc:
                log.info("jobs.wake.dropped: %s", type(exc).__name__)
            finally:
                self._live = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, REDIAL_MAX_S)

    async def _session(self) -> None:
        d = self._driver
        conn = await psycopg.AsyncConnection.connect(
            d.listen_conninfo, autocommit=True, **d.connect_kwargs()
        )
        self._conn = conn
        self.dials += 1
        token = uuid.uuid4().hex
        probe: asyncio.Task[None] | None = None
        loop = asyncio.get_running_loop()
        fd: int | None = None
        try:
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
            self._ended = ended = loop.create_future()
            self._want = "p:" + token
            self._encoding = conn.info.encoding
            # The socket is read straight from the event loop: a callback per readable socket
            # instead of psycopg's `notifies()` generator, which takes the connection's lock and
            # adds and removes a reader around each wait (a wake is sent for nearly every job of
            # a trickle). Nothing else ever runs on this session, so no lock is needed.
            fd = conn.pgconn.socket
            loop.add_reader(fd, self._readable, conn.pgconn)
            # A notification that came with LISTEN's answer is already in libpq's queue.
            self._readable(conn.pgconn, consume=False)
            probe = loop.create_task(self._probe(token))
            await ended  # resolves only with the error that ended the session
        finally:
            if fd is not None:
                loop.remove_reader(fd)
            self._ended = None
            self._live = False
            self._conn = None
            with contextlib.suppress(Exception):
                await conn.close()
            if probe is not None:
                # Shielded: a close that cancels this session again (`close`) must not leave
                # the probe running on a cancel it dropped.
                await asyncio.shield(cancel_and_wait(probe))

    def _readable(self, pgconn: Any, consume: bool = True) -> None:
        """Read what the server sent and hand each notification on; a broken session ends."""
        try:
            if consume:
                pgconn.consume_input()
            while (note := pgconn.notifies()) is not None:
                try:
                    payload = note.extra.decode(self._encoding)
                except UnicodeDecodeError:
                    # Not one of ours (a queue name went out in the session's encoding): a
                    # stranger's bytes on the channel must not hold back the notes behind it.
                    continue
                if payload == self._want:
                    self._live = True
                elif not payload.startswith("p:"):
                    self._deliver(payload)
        except psycopg.Error as exc:
            self._lost(exc)
            return
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            self._lost(psycopg.OperationalError("the LISTEN session closed"))

    def _lost(self, exc: BaseException) -> None:
        ended = self._ended
        if ended is not None and not ended.done():
            ended.set_exception(exc)

    async def _probe(self, token: str) -> None:
        for delay in PROBE_DELAYS:
            await asyncio.sleep(delay)
            if self._live:
                return
            try:
                await self._probe_with("p:" + token)
            except JobsError as exc:
                log.info("jobs.wake.probe_failed: %s", exc.code)

    def _deliver(self, payload: str) -> None:
        try:
            self._deliver_to(payload)
        except Exception:
            log.exception("jobs.wake.callback_failed")
