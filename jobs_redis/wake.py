"""The Redis wake channel: pub/sub on `{prefix}:wake:<queue>`, proven live by a probe.

An enqueue script publishes a queue's name at most once per queue per wake slot; a due job whose
enqueue found its slot's publish gone out already gets one more at the slot's end from the
enqueuing driver (`jobs_core.wake.Trails`). This channel only shortens an idle worker's wait;
the worker's poll stays the guarantee, so a dropped subscription merely turns `is_live()` false
until a new probe crosses it. The flow family's finish channel (`{prefix}:finish`, a watched
row's id per finish) rides the same machinery (`RedisWake.finishes`), with the same promise: a
hint, the waiter's bounded poll the guarantee.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from jobs_redis.driver import RedisDriver

_log = logging.getLogger("jobs.redis.wake")

#: Seconds a probe gets to cross before another is sent, while the channel is unproven.
PROBE_WAIT_S: Final = 5.0
#: Probes per dial. Once one crosses, the channel stays live until its connection drops (which
#: redis-py reports), so an idle worker sends no probe at all; a channel that never proves itself
#: costs these few, and the poll carries on alone.
PROBES_PER_DIAL: Final = 6
#: Seconds to wait before resubscribing after the connection dropped.
RETRY_FLOOR_S: Final = 0.1
RETRY_CEILING_S: Final = 5.0


class RedisWake:
    """One subscription to the wake channels of some queues (a `WakeSubscription`)."""

    def __init__(
        self, driver: RedisDriver, queues: list[str], on_wake: Callable[[str], None]
    ) -> None:
        self._driver = driver
        #: channel -> what `on_wake` gets for a message on it (None: the message itself).
        self._by_channel: dict[str, str | None] = {driver.keys.channel(q): q for q in queues}
        self._on_wake = on_wake
        self._live = False
        self._closed = False
        #: Set once a probe first crossed (`proven`).
        self._proven = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._probe_token = ""
        self._probe_channel = driver.keys.probe_channel(uuid.uuid4().hex)

    @classmethod
    def finishes(cls, driver: RedisDriver, on_finish: Callable[[str], None]) -> RedisWake:
        """A subscription to the prefix's finish channel: `on_finish` gets each id published."""
        sub = cls(driver, [], on_finish)
        sub._by_channel = {driver.keys.finish: None}
        return sub

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="jobs-redis-wake")

    async def proven(self, timeout_s: float) -> bool:
        """Wait (at most `timeout_s`) until the subscription is proven: a message published from
        then on reaches it while the connection holds. Answers whether it was."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._proven.wait(), timeout_s)
        return self._proven.is_set()

    def is_live(self) -> bool:
        """True once a probe has crossed the channel and it has not dropped since."""
        return self._live and not self._closed

    async def close(self) -> None:
        self._closed = True
        self._live = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        unavailable = self._driver._unavailable
        delay = RETRY_FLOOR_S
        while not self._closed:
            pubsub: Any = self._driver.client.pubsub()
            try:
                await pubsub.subscribe(*self._by_channel, self._probe_channel)
                await self._probe()
                sent = time.monotonic()
                probes = 1
                while not self._closed:
                    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                    if msg is not None and msg.get("type") == "message":
                        channel = msg["channel"]
                        if channel == self._probe_channel:
                            if msg["data"] == self._probe_token:
                                self._live = True
                                self._proven.set()
                                delay = RETRY_FLOOR_S
                        elif channel in self._by_channel:
                            target = self._by_channel[channel]
                            self._deliver(msg["data"] if target is None else target)
                    if (
                        not self._live
                        and probes < PROBES_PER_DIAL
                        and time.monotonic() - sent >= PROBE_WAIT_S
                    ):
                        await self._probe()
                        sent = time.monotonic()
                        probes += 1
            except asyncio.CancelledError:
                raise
            except unavailable as exc:
                _log.debug("wake channel dropped: %s", type(exc).__name__)
            except Exception:  # a callback or parser bug must not kill the channel for good
                _log.exception("wake channel failed")
            finally:
                self._live = False
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            if not self._closed:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_CEILING_S)

    async def _probe(self) -> None:
        self._probe_token = uuid.uuid4().hex
        await self._driver.client.publish(self._probe_channel, self._probe_token)

    def _deliver(self, queue: str) -> None:
        try:
            self._on_wake(queue)
        except Exception:
            _log.exception("on_wake raised")
