"""A TCP proxy between the producer and the store that can lose answers: for a while it passes
the producer's requests on but drops the store's replies, then cuts every connection. An
enqueue sent in that window is committed and never answered (issue 7, item 7).

On Postgres a connection's replies are dropped only from its first `COMMIT` on: dropping an
INSERT's reply would stop the client before it commits, and nothing would be written."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class AnswerDropper:
    """Pipes 127.0.0.1:`port` to 127.0.0.1:`upstream_port`, on an event loop of its own."""

    def __init__(self, upstream_port: int, mute_after: bytes | None = None) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self._mute_after = mute_after
        self._armed = False
        #: Client writers whose replies are being dropped.
        self._muted: set[asyncio.StreamWriter] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    async def _start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:  # the store is down: so is the proxy, to its client
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        self._loop.create_task(self._pipe(reader, up_writer, client=writer))
        self._loop.create_task(self._pipe(up_reader, writer, client=None))

    async def _pipe(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        *,
        client: asyncio.StreamWriter | None,
    ) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await src.read(65536):
                if client is not None:  # a request
                    if self._armed and (self._mute_after is None or self._mute_after in data):
                        self._muted.add(client)
                elif dst in self._muted:
                    continue  # the store answered; the answer never reaches the producer
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(OSError):
            dst.transport.abort()
        self._writers.discard(dst)

    def lose_answers(self, seconds: float) -> None:
        """Drop the store's replies for `seconds`, then cut every connection (non-blocking)."""

        def arm() -> None:
            self._armed = True
            self._loop.call_later(seconds, cut)

        def cut() -> None:
            for w in list(self._writers):
                w.transport.abort()
            self._writers.clear()
            self._muted.clear()
            self._armed = False

        self._loop.call_soon_threadsafe(arm)

    def close(self) -> None:
        def stop() -> None:
            for w in list(self._writers):
                w.transport.abort()
            if self._server is not None:
                self._server.close()
            self._loop.stop()

        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(stop)
            self._thread.join(timeout=5)
