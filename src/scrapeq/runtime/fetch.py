"""The default fetcher, with the guards a queue needs: direct hops on our own HTTP/1.1 client
(:mod:`.http1`), hops through a proxy and downloads on an aiohttp session.

:class:`Fetcher` GETs a URL (or sends a job's :class:`~scrapeq.engine.model.request.Request`:
its method, headers, body and cookies, redirected as :mod:`.outgoing` says) and returns a
:class:`Response`, or raises an exception that
:func:`scrapeq.runtime.classify.classify_exception` understands:

* a **total deadline** (``request_timeout``) over DNS, connect, every redirect hop, headers and
  the whole body: one deadline around the fetch (:mod:`scrapeq.runtime.deadlines`: one timer for all
  of a fetcher's fetches, with ``asyncio.timeout()``'s semantics), so a server that drips a
  byte a second is cut at the deadline (a per-read timeout never fires on it). Raises
  :class:`TimeoutError`.
* ``max_body`` enforced while streaming (and up front from a Content-Length): raises
  :class:`.classify.BodyTooLarge`. The limit applies to the *decompressed* bytes, so a
  gzip bomb is cut too.
* redirects followed by hand, up to ``max_redirects``: every hop's target is validated again
  (http/https only, :func:`~scrapeq.engine.model.urls.parse_target`), and checked against private
  addresses. One hop too many raises :class:`aiohttp.TooManyRedirects` (``redirect_loop``).
* an **SSRF guard** when ``allow_private`` is off: a literal private IP (or ``localhost``) in
  any hop's URL raises :class:`.classify.BlockedAddress` before connecting, and every
  DNS resolution the connector makes goes through :class:`GuardedResolver`, which refuses a
  name if *any* of its addresses is private. The check is on the resolved address the socket
  connects to, so a public-looking name that resolves to ``127.0.0.1`` is refused, after a
  redirect as well, and after a DNS change (results are cached by aiohttp only once checked).
* proxies (``proxy``, ``proxy_file``: the exit pool, :mod:`scrapeq.engine.model.exits`): a job's
  fetch goes through the exit its claim chose (``exit=``; every hop of one fetch uses it); a
  fetch without one takes the pool's next in turn. A proxy
  we cannot reach surfaces as :class:`aiohttp.ClientProxyConnectionError`, one whose name does
  not resolve as :class:`.classify.OurNetworkDown` (both ``ours``: the exit's own failure with
  a pool); a proxy's refusal of ``CONNECT`` for one target as
  :class:`aiohttp.ClientHttpProxyError` with its status (the target's failure, except 401/407:
  ``ours``); a plain-http answer that is the proxy's own refusal of our credentials (a 407,
  a ``Proxy-Authenticate``, tinyproxy's 401: :mod:`.proxy_auth`) as
  :class:`.classify.ProxyRefused` (``ours``). Only ``http://`` and ``https://`` proxies are
  supported (aiohttp has no SOCKS support built in).

A private address in a URL is reported as ``BlockedAddress`` (``fail``, ``blocked_address``)
whether it is literal or resolved; any other bad URL (a ``Location`` with a ``ftp:`` scheme,
an invalid host) raises :class:`~scrapeq.errors.InvalidURL` (``fail``, ``invalid_url``).

Limitations:
    * **With a proxy, the SSRF check is done before the request**: the proxy resolves and
      connects to the target, not us, so the fetcher resolves the target itself (through the
      same guarded resolver, with a 60 s cache) and refuses private results. A DNS answer that
      changes between our look-up and the proxy's (DNS rebinding) is not caught; a proxy that
      must not reach private networks has to be configured so itself. The connection to a
      proxy is exempt from the guard (a proxy is our own infrastructure and often lives on a
      private network), and only that connection: the proxies are reached through a session
      of their own, so a target naming a proxy's host is guarded like any other.
    * Cookies are not kept (a :class:`aiohttp.DummyCookieJar`): jobs are independent and may
      run on any worker, so a process-wide jar would leak state between sites and jobs. A
      job's request sends its own cookies; a ``Set-Cookie`` answer is not kept by the fetcher
      (each hop's are in :attr:`Response.set_cookies`; ``session = sticky`` keeps a domain's
      jar in Redis: :mod:`.session_jar`).
    * Environment proxy variables (``HTTP_PROXY`` ...) are ignored (``trust_env=False``): the
      ``proxy`` setting is the one source of truth.

:class:`Robots` answers robots.txt questions (``respect_robots``), with the file fetched once
per origin through the same :class:`Fetcher`, shared between workers through Redis.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from types import TracebackType
from typing import IO, Final, Self
from urllib.parse import urljoin, urlsplit

import aiohttp
import aiohttp.abc
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.exits import ExitPool
from scrapeq.engine.model.request import Request
from scrapeq.engine.model.urls import is_private_host, parse_target
from scrapeq.errors import ConfigError
from scrapeq.runtime.classify import BlockedAddress, BodyTooLarge, OurNetworkDown
from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.http1 import Http1Pool, public_url
from scrapeq.runtime.outgoing import Outgoing, after_redirect, same_origin
from scrapeq.runtime.proxy_auth import ProxyAuthCheck
from scrapeq.runtime.resolvers import GuardedResolver, StaticResolver, _refuse_private
from scrapeq.runtime.response import Download, Response

__all__ = [
    "DEFAULT_ACCEPT",
    "Download",
    "Fetcher",
    "GuardedResolver",
    "Response",
    "Robots",
    "StaticResolver",
]

log = logging.getLogger(__name__)

DEFAULT_ACCEPT: Final = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
"""The Accept header every request sends."""

_CHUNK: Final = 64 * 1024
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
_CONNECTION_LIMIT: Final = 1000
_DNS_TTL: Final = 60
_PRECHECK_MAX: Final = 10_000
_NUMERIC_FLAGS: Final = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV

_IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: Reads a final response's body (as sent) for :meth:`Fetcher.download`.
_BodyReader = Callable[[aiohttp.ClientResponse], Awaitable[bytes]]


# --- the fetcher -------------------------------------------------------------------------------


def _find_blocked(exc: BaseException) -> BlockedAddress | None:
    """A BlockedAddress that aiohttp may have wrapped (cause, context, ``os_error``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, BlockedAddress):
            return current
        seen.add(id(current))
        wrapped = getattr(current, "os_error", None)
        if isinstance(wrapped, BlockedAddress):
            return wrapped
        current = current.__cause__ or current.__context__
    return None


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _check_proxies(pool: ExitPool) -> frozenset[str]:
    """The proxies' host names; refuse the schemes aiohttp cannot speak."""
    hosts: set[str] = set()
    for e in pool.exits:
        if e.url is None:
            continue
        parts = urlsplit(e.url)
        if parts.scheme.lower() not in ("http", "https"):
            raise ConfigError(
                "proxy", f"{parts.scheme}:// proxies are not supported by the default fetcher"
            )
        if parts.hostname:
            hosts.add(parts.hostname.lower().rstrip("."))
    return frozenset(hosts)


class UnknownExit(OurNetworkDown):
    """A job's exit is not in this worker's pool (its claim was made with another pool): ours,
    and no request was made through that exit."""


class Fetcher:
    """The default fetcher: direct hops through one :class:`.http1.Http1Pool`, the rest through
    aiohttp ``ClientSession`` s (one of direct connections, for downloads; one to the proxies).

    Use it as an async context manager, or call :meth:`close`. The pool and sessions are
    created on first use, inside the running event loop.

    Args:
        settings: ``request_timeout``, ``max_body``, ``max_redirects``, ``proxy``,
            ``user_agent`` and ``allow_private`` are read.
        resolver: the DNS resolver (e.g. a :class:`StaticResolver`); default aiohttp's. The
            fetcher takes it over and closes it. With ``allow_private`` off it is wrapped in
            a :class:`GuardedResolver`, whatever it is.
        pool: the exit pool (the queue's ``exit_pool``, so the fetcher knows the exits the
            scripts hand out); default: read from ``settings`` now.

    Raises:
        ConfigError: a SOCKS proxy is configured (not supported).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        resolver: aiohttp.abc.AbstractResolver | None = None,
        pool: ExitPool | None = None,
    ) -> None:
        self.settings = settings
        self.pool = ExitPool.from_settings(settings) if pool is None else pool
        self._proxy_hosts = _check_proxies(self.pool)
        self._exit_urls = {e.id: e.url for e in self.pool.exits}
        # a job claimed without an exit (by a client with no pool) rotates over the pool
        self._proxies: Iterator[str | None] | None = (
            itertools.cycle(list(self._exit_urls.values())) if self.pool else None
        )
        self._given_resolver = resolver
        self._inner: aiohttp.abc.AbstractResolver | None = None  # does the look-ups
        self._session: aiohttp.ClientSession | None = None  # direct connections
        self._via_proxy: aiohttp.ClientSession | None = None  # connections to the proxies
        self._http1: Http1Pool | None = None  # direct hops (.http1: not aiohttp's session)
        self._prechecked: dict[tuple[str, int], float] = {}
        self._proxy_auth = ProxyAuthCheck()
        self._deadlines = Deadlines(settings.request_timeout)
        self._closed = False
        # a transport that replaces _send (.impersonate) is called through it; this class's
        # own _send is _hop on the proxy's session, called as such (one coroutine less a hop)
        self._own_send = type(self)._send is Fetcher._send

    async def __aenter__(self) -> Self:
        self._ensure_session()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the session and the resolver; idempotent."""
        self._closed = True
        self._deadlines.close()
        sessions = (self._session, self._via_proxy)
        self._session = self._via_proxy = None
        direct, self._http1 = self._http1, None
        if direct is not None:
            await direct.close()
        inner, self._inner = self._inner or self._given_resolver, None
        self._given_resolver = None
        for session in sessions:
            if session is not None:
                await session.close()
        if inner is not None:  # a connector given a resolver does not close it
            await inner.close()

    async def address(self, host: str) -> str | None:
        """The first address ``host`` resolves to, through this fetcher's resolver (what its
        requests connect to; ``politeness = ip``); None when it does not resolve."""
        try:
            found = await self._resolver().resolve(host, 0)
        except OSError:
            return None
        return str(found[0]["host"]) if found else None

    def _ensure_session(self) -> aiohttp.ClientSession:
        """The session of direct connections: every name it resolves is guarded."""
        if self._session is None:
            self._session = self._new_session(frozenset())
        return self._session

    def _session_for(self, proxy: str | None) -> aiohttp.ClientSession:
        """The session a hop through ``proxy`` (None: direct) uses.

        Connections to the proxies have a session of their own, whose resolver exempts the
        proxies' names from the guard: through a proxy the only name resolved here is the
        proxy's (the target is the proxy's to resolve, and :meth:`_precheck` checks it
        first). The direct session exempts nothing, so a job, a link, a redirect, robots.txt
        or a sitemap naming a proxy's host (any port of its box) is guarded like any other,
        and neither session's DNS cache holds an unchecked answer for the other.
        """
        if proxy is None:
            return self._ensure_session()
        if self._via_proxy is None:
            self._via_proxy = self._new_session(self._proxy_hosts)
        return self._via_proxy

    def _direct(self) -> Http1Pool:
        """The pool of direct connections a hop without a proxy goes through (:mod:`.http1`):
        every name it resolves is guarded, as the direct session's are."""
        if self._http1 is None:
            inner = self._resolver()
            resolver = (
                inner if self.settings.allow_private else GuardedResolver(inner, owns_inner=False)
            )
            self._http1 = Http1Pool(
                resolver,
                user_agent=self.settings.user_agent,
                accept=DEFAULT_ACCEPT,
                limit=_CONNECTION_LIMIT,
            )
        return self._http1

    def _resolver(self) -> aiohttp.abc.AbstractResolver:
        """The resolver that does the look-ups (unguarded: callers check what it answers),
        created on first use."""
        if self._closed:
            raise RuntimeError("Fetcher is closed")
        if self._inner is None:
            self._inner = self._given_resolver or aiohttp.DefaultResolver()
            self._given_resolver = None
        return self._inner

    def _new_session(self, exempt: frozenset[str]) -> aiohttp.ClientSession:
        inner = self._resolver()
        resolver = (
            inner
            if self.settings.allow_private
            else GuardedResolver(inner, exempt=exempt, owns_inner=False)
        )
        connector = aiohttp.TCPConnector(
            limit=_CONNECTION_LIMIT,
            limit_per_host=0,
            ttl_dns_cache=_DNS_TTL,
            enable_cleanup_closed=True,
            resolver=resolver,
        )
        return aiohttp.ClientSession(
            connector=connector,
            headers={
                "User-Agent": self.settings.user_agent,
                "Accept": DEFAULT_ACCEPT,
                "Accept-Encoding": "gzip, deflate",
            },
            # The deadline is one Deadlines scope around the whole fetch (see fetch()).
            timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_read=None),
            auto_decompress=True,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
        )

    async def fetch(
        self,
        url: str,
        *,
        normalised: bool = False,
        request: Request | None = None,
        exit: str | None = None,
    ) -> Response:
        """GET ``url`` (or send ``request`` to it), following redirects; read the whole body.

        Args:
            url: the URL to fetch.
            normalised: the URL is already in :func:`~scrapeq.engine.model.urls.parse_target`'s
            normal
                form (a job's URL): its parsing is skipped, the private-address check is not.
            request: what to send (method, headers, body, cookies; its URL is not read);
                None: a GET with the fetcher's default headers.
            exit: the id of the exit (engine/model/exits.py) to go through, as the job's claim
                chose it; None: the next of the pool in turn (none: direct).

        Raises:
            TimeoutError: the total deadline ``request_timeout`` passed.
            BodyTooLarge: the body is over ``max_body`` bytes.
            BlockedAddress: a hop's host is, or resolves to, a private address.
            InvalidURL: a hop's URL is refused (scheme, host ...).
            aiohttp.TooManyRedirects: more than ``max_redirects`` redirects.
            aiohttp.ClientError: other transport failures (connection refused, proxy
                errors, a broken payload ...), for ``classify_exception``.
        """
        cookies: list[tuple[str, str]] = []
        status, headers, body, final_url, redirects, elapsed = await self._follow(
            url, normalised, request, None, exit, cookies
        )
        return Response(
            url=final_url,
            status=status,
            headers=headers,
            body=body,
            elapsed=elapsed,
            redirects=redirects,
            set_cookies=tuple(cookies),
        )

    async def download(
        self, url: str, sink: IO[bytes], *, limit: int, request: Request | None = None
    ) -> Download:
        """GET ``url`` as :meth:`fetch` does (redirects, total deadline, SSRF guard, proxy),
        but write the final body to ``sink`` *as sent* (no decompression of a
        ``Content-Encoding``), at most ``limit`` bytes: a longer body is cut there and the
        rest is never read (``truncated``). A body is written only for a 2xx answer.

        Memory stays at one chunk whatever the body's size: what to do with the bytes is the
        caller's (a sitemap reader spools them to a temporary file).

        Raises:
            As :meth:`fetch`, except :class:`.classify.BodyTooLarge` (the body is cut).
        """
        size = 0
        truncated = False

        async def write(resp: aiohttp.ClientResponse) -> bytes:
            nonlocal size, truncated
            if not 200 <= resp.status < 300:
                return b""
            async for chunk in resp.content.iter_chunked(_CHUNK):
                room = limit - size
                if len(chunk) > room:
                    sink.write(chunk[:room])
                    size = limit
                    truncated = True
                    resp.close()  # drop the connection: the rest of the body is never read
                    break
                sink.write(chunk)
                size += len(chunk)
            return b""

        status, headers, _, final_url, redirects, elapsed = await self._follow(
            url, False, request, write, None
        )
        return Download(final_url, status, headers, size, truncated, elapsed, redirects)

    async def _follow(
        self,
        url: str,
        normalised: bool,
        request: Request | None,
        read: _BodyReader | None,
        exit: str | None,
        cookies: list[tuple[str, str]] | None = None,
    ) -> tuple[int, Mapping[str, str], bytes, str, int, float]:
        """Send ``url`` (or ``request``), following redirects under one deadline:
        (status, headers, body, final url, redirects, elapsed). ``read`` reads the final body
        as sent (no decompression); None: :meth:`_read_body`, decompressed."""
        proxy = self._proxy_for(exit)
        out = Outgoing.of(request) if request is not None else None
        started = time.monotonic()
        with self._deadlines.start():
            current = self._check_private(url) if normalised else self._validate(url)
            redirects = 0
            while True:
                if not self._own_send:
                    hop = self._send(current, proxy, redirects, out, read)
                elif proxy is None and read is None:  # a direct hop: our own client
                    hop = self._hop_direct(current, redirects, out)
                else:  # self._send(...) without its frame
                    hop = self._hop(self._session_for(proxy), current, proxy, redirects, out, read)
                status, headers, body, final_url, location = await hop
                if cookies is not None and hasattr(headers, "getall"):
                    got = headers.getall("Set-Cookie", ())
                    if got:  # most answers set none: no generator for them
                        cookies.extend((current, v) for v in got)
                if location is None:
                    elapsed = time.monotonic() - started
                    return status, headers, body, final_url, redirects, elapsed
                redirects += 1
                target = self._validate(urljoin(current, location))
                if out is not None:
                    out = after_redirect(out, status, same=same_origin(current, target))
                current = target

    def _proxy_for(self, exit: str | None) -> str | None:
        """The proxy URL of exit ``exit`` (None: direct); without one, the pool's next."""
        if exit is None:
            return next(self._proxies) if self._proxies is not None else None
        if exit not in self._exit_urls:
            # a claim made with another pool than this worker's: not a fault of the site's
            raise UnknownExit(f"exit {exit} is not in this worker's proxy pool")
        return self._exit_urls[exit]

    async def _send(
        self,
        url: str,
        proxy: str | None,
        redirects: int,
        out: Outgoing | None,
        read: _BodyReader | None,
    ) -> tuple[int, Mapping[str, str], bytes, str, str | None]:
        """One hop of :meth:`_follow`: (status, headers, body, url, Location to follow or
        None). Another transport (:mod:`.impersonate`) replaces this method alone."""
        return await self._hop(self._session_for(proxy), url, proxy, redirects, out, read)

    async def _hop(
        self,
        session: aiohttp.ClientSession,
        url: str,
        proxy: str | None,
        redirects: int,
        out: Outgoing | None,
        read: _BodyReader | None = None,
    ) -> tuple[int, Mapping[str, str], bytes, str, str | None]:
        """One request: (status, headers, body, url, Location to follow or None)."""
        if proxy is not None and not self.settings.allow_private:
            await self._precheck(url)
        method, headers, data = "GET", None, None
        if out is not None:
            method, headers, data = out.method, out.headers, out.body or None
        try:
            async with session.request(
                method,
                url,
                headers=headers,
                data=data,
                allow_redirects=False,
                proxy=proxy,
                auto_decompress=read is None,
            ) as resp:
                if proxy is not None:  # the proxy refusing our credentials: ours
                    await self._proxy_auth.check(proxy, url, resp.status, resp.headers)
                location = resp.headers.get("Location")
                if resp.status in _REDIRECT_STATUSES and location:
                    if redirects >= self.settings.max_redirects:
                        raise self._too_many(resp.request_info, resp.status, resp.headers)
                    return resp.status, resp.headers, b"", str(resp.url), location
                body = await (self._read_body if read is None else read)(resp)
                return resp.status, resp.headers, body, str(resp.url), None
        except aiohttp.ClientError as exc:
            blocked = _find_blocked(exc)
            if blocked is not None:
                raise blocked from None
            # Through a proxy we resolve only the proxy's name (the proxy resolves the
            # target): a failed look-up is ours, not the target's.
            if proxy is not None and isinstance(exc, aiohttp.ClientConnectorDNSError):
                where = urlsplit(proxy).hostname
                raise OurNetworkDown(f"proxy {where} does not resolve: {exc.os_error}") from exc
            raise

    async def _hop_direct(
        self, url: str, redirects: int, out: Outgoing | None
    ) -> tuple[int, Mapping[str, str], bytes, str, str | None]:
        """One request without a proxy, through :mod:`.http1`: as :meth:`_hop`."""
        method = "GET" if out is None else out.method
        status, headers, body = await self._direct().request(
            method,
            url,
            None if out is None else out.headers,
            None if out is None else out.body or None,
            self.settings.max_body,
        )
        location = headers.get("Location")
        if status in _REDIRECT_STATUSES and location:
            if redirects >= self.settings.max_redirects:
                info = aiohttp.RequestInfo(URL(url), method, CIMultiDictProxy(CIMultiDict()))
                raise self._too_many(info, status, headers)
            return status, headers, b"", public_url(url), location
        return status, headers, body, public_url(url), None

    def _too_many(
        self, info: aiohttp.RequestInfo, status: int, headers: Mapping[str, str]
    ) -> aiohttp.TooManyRedirects:
        """The error of a hop's redirect past ``max_redirects`` (``redirect_loop``)."""
        return aiohttp.TooManyRedirects(
            info,
            (),
            status=status,
            message=f"more than {self.settings.max_redirects} redirects",
            headers=headers,  # type: ignore[arg-type]
        )

    def _validate(self, url: str) -> str:
        """Normalise one hop's URL; refuse a literal private host before connecting."""
        return self._check_private(parse_target(url, allow_private=True).url)

    def _check_private(self, url: str) -> str:
        """Refuse a normalised URL whose host is a literal private address (or localhost)."""
        if not self.settings.allow_private:
            host = urlsplit(url).hostname or ""
            if is_private_host(host):
                raise BlockedAddress(
                    f"{host} is a private address (set allow_private, or pass --allow-private)"
                )
        return url

    async def _precheck(self, url: str) -> None:
        """With a proxy: resolve the target ourselves and refuse a private address.

        Literal addresses were checked by :meth:`_validate`; names are resolved with the
        unguarded resolver (a target is never exempt, even when it shares a proxy's name)
        and passing names are remembered for the DNS cache's TTL.
        """
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        key = (host, port)
        now = time.monotonic()
        if self._prechecked.get(key, 0.0) > now or _is_ip_literal(host):
            return
        _refuse_private(host, await self._resolver().resolve(host, port, socket.AF_UNSPEC))
        if len(self._prechecked) >= _PRECHECK_MAX:
            self._prechecked.clear()
        self._prechecked[key] = now + _DNS_TTL

    async def _read_body(self, resp: aiohttp.ClientResponse) -> bytes:
        limit = self.settings.max_body
        length = resp.content_length
        if length is not None and length > limit:
            resp.close()
            raise BodyTooLarge(f"Content-Length {length} is over max_body {limit} bytes")
        encoding = resp.headers.get("Content-Encoding", "identity").lower()
        if length is not None and encoding == "identity":
            return await resp.read()  # bounded by the Content-Length checked above
        body = bytearray()
        async for chunk in resp.content.iter_chunked(_CHUNK):
            body += chunk
            if len(body) > limit:
                resp.close()  # drop the connection: the rest of the body is never read
                raise BodyTooLarge(f"body is over max_body {limit} bytes")
        return bytes(body)


# robots.txt lives in .robots (it uses the fetcher); re-exported here
from scrapeq.runtime.robots import Robots  # noqa: E402
