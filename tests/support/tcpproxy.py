"""A loopback TCP forwarder that can turn into a black hole, for tests of a stalled network.

:class:`TcpProxy` listens on 127.0.0.1 and forwards every connection to one upstream
address (also loopback), from an event loop in a background thread, so a test that blocks
(``subprocess.wait``) or a worker under test never stops it. :meth:`TcpProxy.blackhole` keeps
every connection open but stops moving bytes in both directions, as a dead route or a
frozen server does: writes still succeed (the kernel buffers them) and nothing ever answers.
New connections are accepted and held too. :meth:`TcpProxy.resume` forwards again,
including what was held meanwhile. :meth:`TcpProxy.cut_replies` drops a share of the chunks
coming back from upstream and resets that connection, as a flaky network does: the request
reached the server (a script ran), its reply never reaches the client.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from support.loop_thread import LoopThread

_CHUNK = 65536


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``upstream_host:upstream_port``.

    Use as a context manager, or call :meth:`start` and :meth:`close`.
    """

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        if upstream_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the test proxy forwards to loopback only")
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self._served = LoopThread()
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._cut: tuple[float, random.Random, int] | None = None
        self.cuts = 0

    @classmethod
    def for_redis_url(cls, url: str) -> TcpProxy:
        """A proxy in front of the Redis server of ``url`` (``redis://127.0.0.1:PORT/DB``)."""
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        return cls(parts.hostname, parts.port)

    def url(self, template: str) -> str:
        """``template`` (a ``redis://`` URL of the upstream) pointed at the proxy instead."""
        parts = urlsplit(template)
        return parts._replace(netloc=f"127.0.0.1:{self.port}").geturl()

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._served.start()
        self._call(self._start())
        return self

    def close(self) -> None:
        self._served.stop(self._stop)

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- steering ------------------------------------------------------------------------------

    def blackhole(self) -> None:
        """Stop forwarding bytes, both ways, on every connection (open ones and new ones)."""
        self._call(self._set_flowing(False))

    def resume(self) -> None:
        """Forward again, held bytes included."""
        self._call(self._set_flowing(True))

    def cut_replies(self, share: float, seed: int = 0, *, min_bytes: int = 0) -> None:
        """From now on, drop each chunk of at least ``min_bytes`` read from upstream with
        probability ``share`` (a seeded draw, so a test replays the same cuts) and reset both
        sides of its connection. ``share`` 0 forwards everything again."""
        self._cut = (share, random.Random(seed), min_bytes) if share > 0 else None

    @property
    def connections(self) -> int:
        """Open client connections (each has one upstream connection beside it)."""
        return len(self._writers) // 2

    # --- inside the proxy's loop -------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        self._served.call(coro)

    async def _start(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._server is not None:
            self._server.close()
        # a connection accepted just now: its handler runs to its first wait, so the cancel
        # that follows reaches its ``finally`` (a task cancelled before it ever ran skips it,
        # and its socket was left to the collector: a ResourceWarning in a later test). From
        # the accept, that takes three turns of the loop: the protocol's connection_made is
        # called soon, it creates the handler's task, whose first step is called soon.
        for _ in range(3):
            await asyncio.sleep(0)
        for writer in list(self._writers):
            writer.transport.abort()

    async def _set_flowing(self, flowing: bool) -> None:
        assert self._flowing is not None
        if flowing:
            self._flowing.set()
        else:
            self._flowing.clear()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*self.upstream)
        except (OSError, asyncio.CancelledError):
            # upstream refused, or close() while connecting: the client's socket is closed
            # here (left open, the collector found it in whichever test ran next)
            client_w.transport.abort()
            return
        self._writers |= {client_w, upstream_w}
        try:
            await asyncio.gather(
                self._pump(client_r, upstream_w), self._pump(upstream_r, client_w, reply=True)
            )
        except (OSError, asyncio.CancelledError):
            # A reset is how a forwarded connection may end; a cancel is close(). Both end
            # here: start_server reports a handler task that ends cancelled as an error.
            pass
        finally:
            for writer in (client_w, upstream_w):
                self._writers.discard(writer)
                writer.transport.abort()

    def _cuts(self, data: bytes) -> bool:
        if self._cut is None:
            return False
        share, rng, min_bytes = self._cut
        return len(data) >= min_bytes and rng.random() < share

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, reply: bool = False
    ) -> None:
        assert self._flowing is not None
        while True:
            await self._flowing.wait()  # black-holed: stop reading, so the sender's bytes pile up
            data = await reader.read(_CHUNK)
            if not data:
                writer.transport.abort()
                return
            await self._flowing.wait()  # a chunk read just before the black hole is held too
            if reply and self._cuts(data):
                self.cuts += 1
                raise ConnectionResetError("reply cut by the test proxy")
            writer.write(data)
            await writer.drain()
