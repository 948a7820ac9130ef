"""Real loopback HTTP sites for worker tests: each site is its own domain (its own port).

Served in the test's event loop (:func:`sites`), by a background thread's loop for tests whose
own loop blocks (:class:`SiteThread`, :func:`threaded_site`: a CLI command run in this
process, worker subprocesses). Also :class:`NotRedis`, a port where something other than Redis
answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from http import HTTPStatus
from urllib.parse import urlsplit

from aiohttp import web

from support.loop_thread import LoopThread

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


class Proxy:
    """A forward HTTP proxy on 127.0.0.1, on asyncio streams (what aiohttp's client speaks).

    ``CONNECT host:port`` is tunnelled, unless ``host:port`` is in ``refuse``: then it is
    answered with that status (``502 Bad Gateway`` for a target the proxy cannot reach) and
    nothing is connected. An absolute-form request (``GET http://host:port/path``, a plain
    http target) is sent on to its host and the answer relayed, one request per connection.
    ``hosts`` maps target names to the addresses the proxy connects to (the proxy's own DNS:
    a public-looking name of a loopback site).

    Attributes:
        connects: CONNECT requests per ``host:port``.
        forwards: plain requests per ``host:port``.
    """

    def __init__(
        self, refuse: dict[str, int] | None = None, hosts: dict[str, str] | None = None
    ) -> None:
        self.refuse = dict(refuse or {})
        self.hosts = dict(hosts or {})
        self.connects: Counter[str] = Counter()
        self.forwards: Counter[str] = Counter()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):  # open tunnels: Python 3.11 does not close them
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            method, target, _ = head.split("\r\n", 1)[0].split(" ", 2)
            if method == "CONNECT":
                await self._connect(target, reader, writer)
            else:
                await self._forward(head, target, writer)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass  # a client or an upstream went away: so does this connection
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _connect(
        self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.connects[target] += 1
        refused = self.refuse.get(target)
        if refused is not None:
            phrase = HTTPStatus(refused).phrase
            writer.write(f"HTTP/1.1 {refused} {phrase}\r\nContent-Length: 0\r\n\r\n".encode())
            await writer.drain()
            return
        host, port = target.rsplit(":", 1)
        host = self.hosts.get(host, host)
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        self._writers.add(up_writer)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    async def _forward(self, head: str, target: str, writer: asyncio.StreamWriter) -> None:
        parts = urlsplit(target)
        self.forwards[parts.netloc] += 1
        request_line, *lines = head.rstrip("\r\n").split("\r\n")
        method = request_line.split(" ", 1)[0]
        kept = [h for h in lines if h.split(":", 1)[0].lower() not in _HOP_BY_HOP]
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        upstream = "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""])
        host = parts.hostname or ""
        up_reader, up_writer = await asyncio.open_connection(
            self.hosts.get(host, host), parts.port or 80
        )
        try:
            up_writer.write(upstream.encode("latin-1"))
            await up_writer.drain()
            await _pipe(up_reader, writer)
        finally:
            up_writer.close()


_HOP_BY_HOP = frozenset({"connection", "proxy-connection", "keep-alive", "proxy-authorization"})


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of file, then half-close the other side."""
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


@asynccontextmanager
async def proxy(
    refuse: dict[str, int] | None = None, hosts: dict[str, str] | None = None
) -> AsyncIterator[Proxy]:
    """Run a :class:`Proxy` for the block."""
    started = Proxy(refuse, hosts)
    await started.start()
    try:
        yield started
    finally:
        with contextlib.suppress(Exception):
            await started.stop()


async def ok(request: web.Request) -> web.StreamResponse:
    return web.Response(text=f"<title>{request.path}</title>", content_type="text/html")


def status(code: int, **headers: str) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.Response(status=code, text="x", headers=headers)

    return handler


async def echo(request: web.Request) -> web.StreamResponse:
    """Answer what was sent: method, path, headers (pairs, in order), body, cookies.

    ``/redirect/<code>?to=<url>`` answers that redirect to ``to`` instead (default ``/echo``).
    """
    if request.path.startswith("/redirect/"):
        code = int(request.path.rsplit("/", 1)[1])
        return web.Response(status=code, headers={"Location": request.query.get("to", "/echo")})
    body = await request.read()
    return web.json_response(
        {
            "method": request.method,
            "path": request.path_qs,
            "headers": [[k, v] for k, v in request.headers.items()],
            "body": body.decode("utf-8", "backslashreplace"),
            "cookies": dict(request.cookies),
        }
    )


def echoed(job: object, response: object) -> object:
    """A worker handler (``--handler sites:echoed``): the echo site's answer as the result."""
    return response.json()  # type: ignore[attr-defined]


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


def _linking(*links: str) -> web.Response:
    body = "".join(f'<a href="{href}">x</a>' for href in links)
    return web.Response(text=f"<html><head><title>t</title></head><body>{body}</body></html>",
                        content_type="text/html")  # fmt: skip


async def tree(request: web.Request) -> web.StreamResponse:
    """``/`` links /a and /b; /a links /a/1; every page links home (a cycle)."""
    links = {"/": ("/a", "/b"), "/a": ("/a/1", "/"), "/b": ("/",), "/a/1": ("/",)}
    return _linking(*links.get(request.path, ()))


class SiteThread:
    """Loopback sites served by an event loop in a background thread."""

    def __init__(self) -> None:
        self._served = LoopThread()
        self._served.start()
        self.sites: list[Site] = []

    def start(self, handler: Handler) -> Site:
        site = Site(handler)
        self._served.call(site.start())
        self.sites.append(site)
        return site

    async def _shutdown(self) -> None:
        await asyncio.gather(*(s.stop() for s in self.sites), return_exceptions=True)

    def close(self) -> None:
        self._served.stop(self._shutdown)


@contextlib.contextmanager
def threaded_site(handler: Handler) -> Iterator[Site]:
    """A site served from its own thread, for a CLI command run in this one."""
    box: dict[str, Site] = {}
    started, stop = threading.Event(), threading.Event()

    def serve() -> None:
        async def main() -> None:
            async with sites(handler) as (site,):
                box["site"] = site
                started.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)

        asyncio.run(main())

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert started.wait(10)
        yield box["site"]
    finally:
        stop.set()
        thread.join()


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
