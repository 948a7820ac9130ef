"""The fetcher's own HTTP/1.1 client for direct connections: keep-alive connections on
asyncio's protocols, one pool a :class:`~scrapeq.runtime.fetch.Fetcher`.

A fetch through aiohttp's ``ClientSession`` builds request objects, header dicts, timers,
trace hooks and a stream reader for every request: it was about half of a plain job's
worker CPU. This client writes one request's bytes and parses the answer as it arrives, in
one :class:`asyncio.Protocol` a connection; a plain job's worker CPU fell from 486 to 315 µs
(BENCHMARKS section 43). The :class:`~scrapeq.runtime.fetch.Fetcher` sends every direct hop
through it; a hop through a proxy and :meth:`Fetcher.download` (a body streamed as sent)
stay on aiohttp.

What it keeps of a fetch's rules (the fetcher's docstring has them all):

* **the private-address guard**: every name is resolved through the resolver the fetcher
  gives (its :class:`~scrapeq.runtime.resolvers.GuardedResolver` when ``allow_private`` is
  off), and the socket connects to the address that resolver answered, never to a name.
  Answers are kept 60 s, as aiohttp's DNS cache did. A literal address is not resolved (the
  fetcher refused a private one before the hop).
* **max_body on the decompressed bytes**, checked while the body arrives (a gzip bomb is cut
  at the limit), and up front from a Content-Length.
* **the deadline** is the fetcher's: a hop cancelled mid-way closes its connection.
* the errors :func:`~scrapeq.runtime.classify.classify_exception` knows, as aiohttp raised
  them: ``ClientConnectorDNSError`` (a name that does not resolve), ``ClientConnectorError``
  (refused, unreachable), ``ClientConnectorCertificateError``/``ClientConnectorSSLError``
  (TLS), ``ServerDisconnectedError`` (closed before an answer) and ``ClientPayloadError`` (a
  body cut short, a malformed answer, an encoding that does not decode).

The wire: HTTP/1.1 only (an ``HTTP/1.0`` answer is read and its connection closed unless it
says ``keep-alive``); ``Content-Length``, ``chunked`` and read-until-close bodies; ``1xx``
answers skipped; no body after ``HEAD``, ``204`` or ``304``; ``gzip`` and ``deflate``
decoded (what the fetcher's ``Accept-Encoding`` asks for; a request's own
``Accept-Encoding`` is kept to those; a coding the server sends unasked is returned as sent,
as aiohttp does without its optional decoders). A redirect's body is read and dropped,
never held: over 64 KiB, its connection is closed instead. A reused connection that the
server closed before answering is retried once on a new one for an idempotent method,
as aiohttp does. Idle connections are kept 15 s; at most ``limit`` are open, the oldest idle
closed first, then callers wait.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import ssl
import string
import time
from base64 import b64encode
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, unquote, urlsplit

import aiohttp
import aiohttp.abc
from aiohttp.client_reqrep import ConnectionKey

from scrapeq.runtime.http1_wire import Answer, Connection, DiscardDone

__all__ = ["Http1Pool", "public_url"]

_KEEPALIVE: Final = 15.0
_DNS_TTL: Final = 60.0
_DNS_MAX: Final = 10_000
_ORIGINS_MAX: Final = 10_000
#: The content codings a body is decoded from (http1_wire's decoders), and no coding.
_DECODED: Final = frozenset({"gzip", "x-gzip", "deflate", "identity"})
_IDEMPOTENT: Final = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
_BODYLESS_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
#: Characters a request target keeps as they are; anything else is percent-encoded as UTF-8.
_TARGET_SAFE: Final = string.punctuation

#: The clock of DNS answers' and idle connections' ages (a test moves it).
_clock = time.monotonic


def _key(host: str, port: int, tls: bool) -> ConnectionKey:
    """aiohttp's connection key, which its connector errors print."""
    return ConnectionKey(host, port, tls, True, None, None, None)


class Http1Pool:
    """Keep-alive connections to origins, keyed by (TLS, host, port).

    Args:
        resolver: resolves names (the fetcher's guarded resolver: what it answers is what
            the sockets connect to). Not closed here.
        user_agent: the ``User-Agent`` every request sends unless it names its own.
        accept: the ``Accept`` header, likewise.
        limit: open connections at most.
    """

    def __init__(
        self,
        resolver: aiohttp.abc.AbstractResolver,
        *,
        user_agent: str,
        accept: str,
        limit: int,
    ) -> None:
        self._resolver = resolver
        self._defaults: tuple[tuple[str, str], ...] = (
            ("User-Agent", user_agent),
            ("Accept", accept),
            ("Accept-Encoding", "gzip, deflate"),
        )
        self._default_block = "".join(f"{n}: {v}\r\n" for n, v in self._defaults).encode("latin-1")
        self._limit = limit
        self._idle: dict[tuple[bool, str, int], list[Connection]] = {}
        self._order: collections.OrderedDict[Connection, None] = collections.OrderedDict()
        self._all: set[Connection] = set()
        self._opening = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._origins: dict[str, tuple[tuple[bool, str, int], str, str | None]] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[aiohttp.abc.ResolveResult]]] = {}
        self._tls: ssl.SSLContext | None = None
        self._next_sweep = 0.0
        self._closed = False

    async def request(
        self,
        method: str,
        url: str,
        headers: Iterable[tuple[str, str]] | None,
        body: bytes | None,
        max_body: int,
    ) -> Answer:
        """Send one request to ``url`` (normalised: http or https, with a host) and read its
        whole answer: (status, headers, body decoded). Redirects are the caller's."""
        key, host, auth, target = self._split(url)
        data = self._encode(method, target, host, auth, headers, body)
        head = method == "HEAD"
        for attempt in (0, 1):
            conn = await self._acquire(key, fresh=attempt == 1)
            reused = conn.used
            waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            try:
                conn.send(data, waiter, head, max_body)
                answer = await waiter
            except DiscardDone:
                conn.abort()
                return conn.head_only()
            except aiohttp.ServerDisconnectedError:
                conn.abort()
                if attempt == 0 and reused and method in _IDEMPOTENT:
                    continue  # the server closed an idle connection as we wrote on it: a new one
                raise
            except BaseException:
                conn.abort()  # cancelled by the deadline, or the answer was refused
                raise
            self._release(conn)
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    def _split(self, url: str) -> tuple[tuple[bool, str, int], str, str | None, str]:
        """A URL's connection key, ``Host`` value, Basic credentials (or None) and request
        target. An origin is parsed once (:data:`_ORIGINS_MAX` kept); the target is what
        follows it, without a fragment."""
        start = 8 if url.startswith("https://") else 7
        slash = url.find("/", start)
        if slash < 0:
            slash = len(url)
        origin = url[:slash]
        found = self._origins.get(origin)
        if found is None:
            found = _parse_origin(origin)
            if len(self._origins) >= _ORIGINS_MAX:
                self._origins.clear()
            self._origins[origin] = found
        target = url[slash:].partition("#")[0]
        if not target or target[0] != "/":
            target = "/" + target
        if not target.isascii() or " " in target:
            target = quote(target, safe=_TARGET_SAFE)
        return found[0], found[1], found[2], target

    def _encode(
        self,
        method: str,
        target: str,
        host: str,
        auth: str | None,
        headers: Iterable[tuple[str, str]] | None,
        body: bytes | None,
    ) -> bytes:
        if auth is not None and not any(n.lower() == "authorization" for n, _ in headers or ()):
            headers = [*(headers or ()), ("Authorization", auth)]
        if headers is None and body is None and method in _BODYLESS_METHODS:
            return (
                f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")
                + self._default_block
                + b"\r\n"
            )
        given = list(headers or ())
        names = {n.lower() for n, _ in given}
        lines = [f"{method} {target} HTTP/1.1"]
        if "host" not in names:
            lines.append(f"Host: {host}")
        lines.extend(f"{n}: {v}" for n, v in self._defaults if n.lower() not in names)
        for n, v in given:
            low = n.lower()
            if low == "accept-encoding":
                v = _decodable(v)
            if low != "content-length":
                lines.append(f"{n}: {v}")
        if body:
            lines.append(f"Content-Length: {len(body)}")
        elif method not in _BODYLESS_METHODS:
            lines.append("Content-Length: 0")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
        return head + body if body else head

    # -- connections -----------------------------------------------------------------------

    async def _acquire(self, key: tuple[bool, str, int], *, fresh: bool = False) -> Connection:
        """A connection to ``key``: an idle one (the last released), or a new one within the
        limit (``fresh``: always a new one, for a retry after a stale one: a server that
        restarted closed all of them)."""
        if self._closed:
            raise RuntimeError("Fetcher is closed")
        while True:
            idle = None if fresh else self._idle.get(key)
            if idle:
                conn = idle.pop()
                del self._order[conn]
                if not conn.closed and _clock() - conn.idle_since < _KEEPALIVE:
                    return conn
                conn.abort()
                continue
            if len(self._all) + self._opening < self._limit:
                break
            if self._order:  # close the connection idle longest to make room
                old, _ = self._order.popitem(last=False)
                self._idle[old.key].remove(old)
                old.abort()
                self._all.discard(old)
                continue
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, then cancelled: the room goes to the next
                waiter.cancel()
                raise
        self._opening += 1
        try:
            conn = await self._connect(key)
        finally:
            self._opening -= 1
            self._wake()
        self._all.add(conn)
        return conn

    async def _connect(self, key: tuple[bool, str, int]) -> Connection:
        tls, host, port = key
        ckey = _key(host, port, tls)
        found = await self._resolve(host, port, ckey)
        context = self._tls_context() if tls else None
        loop = asyncio.get_running_loop()
        error: OSError | None = None
        for result in found:
            try:
                _, conn = await loop.create_connection(
                    lambda: Connection(key, self._lost),
                    result["host"],
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                    family=result["family"],
                    proto=result["proto"],
                    flags=result["flags"],
                )
            except ssl.SSLCertVerificationError as exc:
                raise aiohttp.ClientConnectorCertificateError(ckey, exc) from exc
            except ssl.SSLError as exc:
                raise aiohttp.ClientConnectorSSLError(ckey, exc) from exc
            except OSError as exc:
                error = exc
                continue
            return conn
        assert error is not None
        raise aiohttp.ClientConnectorError(ckey, error) from error

    async def _resolve(
        self, host: str, port: int, ckey: ConnectionKey
    ) -> list[aiohttp.abc.ResolveResult]:
        if _is_literal(host):
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            return [
                aiohttp.abc.ResolveResult(
                    hostname=host, host=host, port=port, family=family, proto=0, flags=0
                )
            ]
        now = _clock()
        cached = self._dns.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            found = await self._resolver.resolve(host, port, socket.AF_UNSPEC)
        except OSError as exc:
            raise aiohttp.ClientConnectorDNSError(ckey, exc) from exc
        if not found:
            error = OSError(socket.EAI_NONAME, f"{host} has no address")
            raise aiohttp.ClientConnectorDNSError(ckey, error)
        if len(self._dns) >= _DNS_MAX:
            self._dns.clear()
        self._dns[(host, port)] = (now + _DNS_TTL, found)
        return found

    def _tls_context(self) -> ssl.SSLContext:
        if self._tls is None:
            self._tls = ssl.create_default_context()
        return self._tls

    def _release(self, conn: Connection) -> None:
        conn.used = True
        if not conn.reusable or self._closed:
            conn.abort()
            return
        now = conn.idle_since = _clock()
        self._idle.setdefault(conn.key, []).append(conn)
        self._order[conn] = None
        if now >= self._next_sweep:
            self._sweep(now)
        self._wake()

    def _sweep(self, now: float) -> None:
        """Close the connections idle longer than the keep-alive (oldest first), at most
        once a second: a crawl over many sites does not keep a socket open for each."""
        self._next_sweep = now + 1.0
        order = self._order
        while order:
            conn = next(iter(order))
            if now - conn.idle_since < _KEEPALIVE:
                return
            del order[conn]
            self._idle[conn.key].remove(conn)
            conn.abort()

    def _lost(self, conn: Connection) -> None:
        """A connection closed (by either side)."""
        if conn in self._order:
            del self._order[conn]
            self._idle[conn.key].remove(conn)
        self._all.discard(conn)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        """Close every connection; idempotent."""
        self._closed = True
        for conn in list(self._all):
            conn.abort()
        self._all.clear()
        self._idle.clear()
        self._order.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
        await asyncio.sleep(0)  # let the transports' connection_lost run


def _parse_origin(origin: str) -> tuple[tuple[bool, str, int], str, str | None]:
    """``scheme://[user:password@]host[:port]``: the connection key, the ``Host`` value and
    the URL's user and password as a Basic ``Authorization`` value (as aiohttp sends them)."""
    parts = urlsplit(origin)
    tls = parts.scheme == "https"
    userinfo, _, host = parts.netloc.rpartition("@")
    if not host.isascii():
        host = host.encode("idna").decode("ascii")
    auth = None
    if userinfo:
        user, _, password = userinfo.partition(":")
        token = b64encode(f"{unquote(user)}:{unquote(password)}".encode("latin-1"))
        auth = "Basic " + token.decode("ascii")
    key = (tls, parts.hostname or "", parts.port or (443 if tls else 80))
    return key, host, auth


def _decodable(accept: str) -> str:
    """An ``Accept-Encoding`` a request names, kept to the codings this client decodes
    (``gzip``, ``deflate``, ``identity``): a body in another (``br``, ``zstd``) would reach
    the handler undecoded. None of those left: ``gzip, deflate``."""
    kept = [
        item.strip()
        for item in accept.split(",")
        if item.split(";", 1)[0].strip().lower() in _DECODED
    ]
    return ", ".join(kept) if kept else "gzip, deflate"


def public_url(url: str) -> str:
    """``url`` without its user information (what aiohttp answered as a response's URL:
    the credentials went in an ``Authorization`` header)."""
    if "@" not in url:
        return url
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _is_literal(host: str) -> bool:
    if ":" in host:
        return True
    return host.replace(".", "").isdigit() and host.count(".") == 3
