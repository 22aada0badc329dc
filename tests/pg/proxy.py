"""A TCP proxy on a spare loopback port, in the test's own event loop, that a test can cut.

Cutting closes every piped connection at once, as a network drop or a server crash would look
to the client; `stop()` also refuses new connections (the server "is down").
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
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        with contextlib.suppress(OSError):
            dst.close()

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
