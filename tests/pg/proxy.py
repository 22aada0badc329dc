"""A TCP proxy on a spare loopback port, in the test's own event loop, that a test can cut.

Cutting closes every piped connection at once, as a network drop or a server crash would look
to the client; `stop()` also refuses new connections (the server "is down"). `drop_next_reply()`
cuts at the worst moment for a write: after the server answered it, before the client read it.
"""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit


class Proxy:
    """Pipes to the server of `upstream_url` (its host and port)."""

    def __init__(self, upstream_url: str) -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        #: When set, the server's next reply is held back until it holds this, then everything is
        #: cut: the client never reads it (b"" cuts at the first byte of the reply).
        self._drop_until: bytes | None = None
        #: The connection whose reply is swallowed: the first to send a request once armed
        #: (that holds `_matching`, when set).
        self._target: int | None = None
        self._matching: bytes | None = None
        #: When set, the target's replies go through until the one that holds `_drop_until`.
        self._through = False
        self._held = b""
        #: How many replies were swallowed by `drop_next_reply`.
        self.dropped = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        for src, dst, reply in ((reader, up_writer, False), (up_reader, writer, True)):
            task = asyncio.get_running_loop().create_task(self._pipe(src, dst, reply, id(writer)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, reply: bool, conn: int
    ) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await src.read(65536):
                if (
                    not reply
                    and self._drop_until is not None
                    and self._target is None
                    and (self._matching is None or self._matching in data)
                ):
                    self._target = conn
                if reply and self._drop_until is not None and self._target == conn:
                    self._held += data
                    if self._drop_until in self._held:
                        self._drop_until, self._target, self._held = None, None, b""
                        self.dropped += 1
                        self.cut()
                        return
                    if not self._through:
                        continue
                    # Only a tail is kept: enough to see `until` split across two reads.
                    self._held = self._held[-len(self._drop_until) :]
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(OSError):
            dst.close()

    def drop_next_reply(
        self, until: bytes = b"", matching: bytes | None = None, *, through: bool = False
    ) -> None:
        """Swallow the server's next reply (once it holds `until`), then cut every connection.

        The reply swallowed is on the first connection to send a request after this call; with
        `matching`, the first to send one holding those bytes (a bind value or a script argument
        the write alone carries), so a runtime's other traffic meanwhile goes through. With
        `through`, that connection's replies go on through until the one holding `until`: for
        a write of several statements in one transaction, whose COMMIT's answer is the one lost
        (for Postgres, `until=b"Z\\x00\\x00\\x00\\x05I"`: ready, idle, after the commit).

        For Postgres, `until=b"Z\\x00\\x00\\x00\\x05"` (ReadyForQuery) waits for the end of
        the answer, sent after the statement's implicit transaction committed.
        """
        self._held = b""
        self._target = None
        self._matching = matching
        self._through = through
        self._drop_until = until

    def cut(self) -> None:
        """Drop every open connection (both directions), like a network failure."""
        for w in list(self._writers):
            transport = w.transport
            # abort(): no FIN handshake, pending data discarded — a hard drop.
            transport.abort()
        self._writers.clear()

    async def stop(self) -> None:
        """Refuse new connections and drop the open ones: the server is gone."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.cut()
        for t in list(self._tasks):
            t.cancel()

    def url(self, base: str) -> str:
        """`base` (the upstream URL) re-pointed at this proxy."""
        host, port = self.upstream
        return base.replace(f"@{host}:{port}/", f"@127.0.0.1:{self.port}/", 1)
