"""Real loopback HTTP sites for worker tests: each site is its own domain (its own port).

Also :class:`NotRedis`, a port where something other than Redis answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Site:
    """One aiohttp server on 127.0.0.1 with a request counter."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.hits: Counter[str] = Counter()
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.hits[request.path] += 1
        return await self.handler(request)

    @property
    def total(self) -> int:
        return sum(self.hits.values())

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def domain(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base + path

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@asynccontextmanager
async def sites(*handlers: Handler) -> AsyncIterator[list[Site]]:
    """Start one site per handler; stop them all afterwards."""
    started = [Site(h) for h in handlers]
    try:
        for s in started:
            await s.start()
        yield started
    finally:
        await asyncio.gather(*(s.stop() for s in started), return_exceptions=True)


async def ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text=f"<title>{request.path}</title>", content_type="text/html")


def status(code: int, **headers: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=code, text="x", headers=headers)

    return handler


async def hang(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


async def drip(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    for _ in range(200):
        await resp.write(b"x")
        await asyncio.sleep(0.05)
    await resp.write_eof()
    return resp


def slow(seconds: float) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(seconds)
        return web.Response(text="slow but fine")

    return handler


class NotRedis:
    """A loopback TCP port where something other than Redis answers.

    Every connection gets ``HTTP/1.1 400 Bad Request`` once the client has sent anything, then
    is closed: what a Redis client meets when its URL names a web server's port. Served by a
    daemon thread; use as a context manager (``with NotRedis() as url:``).
    """

    REPLY = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.1)  # the accept loop notices the stop flag within 0.1 s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = int(self._sock.getsockname()[1])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2)
                conn.recv(4096)
                conn.sendall(self.REPLY)

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()
