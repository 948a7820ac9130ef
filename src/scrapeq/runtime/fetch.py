"""The default fetcher: one aiohttp session per process, with the guards a queue needs.

:class:`Fetcher` GETs a URL (or sends a job's :class:`~scrapeq.engine.request.Request`:
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
  (http/https only, :func:`~scrapeq.engine.urls.parse_target`), and checked against private
  addresses. One hop too many raises :class:`aiohttp.TooManyRedirects` (``redirect_loop``).
* an **SSRF guard** when ``allow_private`` is off: a literal private IP (or ``localhost``) in
  any hop's URL raises :class:`.classify.BlockedAddress` before connecting, and every
  DNS resolution the connector makes goes through :class:`GuardedResolver`, which refuses a
  name if *any* of its addresses is private. The check is on the resolved address the socket
  connects to, so a public-looking name that resolves to ``127.0.0.1`` is refused, after a
  redirect as well, and after a DNS change (results are cached by aiohttp only once checked).
* proxies (``proxy``): rotated per fetch (every hop of one fetch uses the same proxy). A proxy
  we cannot reach surfaces as :class:`aiohttp.ClientProxyConnectionError`, one whose name does
  not resolve as :class:`.classify.OurNetworkDown` (both ``ours``); a proxy's refusal
  of ``CONNECT`` for one target as :class:`aiohttp.ClientHttpProxyError` with its status (the
  target's failure, except 407: ``ours``). Only ``http://`` and ``https://`` proxies are
  supported (aiohttp has no SOCKS support built in).

A private address in a URL is reported as ``BlockedAddress`` (``fail``, ``blocked_address``)
whether it is literal or resolved; any other bad URL (a ``Location`` with a ``ftp:`` scheme,
an invalid host) raises :class:`~scrapeq.errors.InvalidURL` (``fail``, ``invalid_url``).

Limitations:
    * **With a proxy, the SSRF check is done before the request**: the proxy resolves and
      connects to the target, not us, so the fetcher resolves the target itself (through the
      same guarded resolver, with a 60 s cache) and refuses private results. A DNS answer that
      changes between our look-up and the proxy's (DNS rebinding) is not caught; a proxy that
      must not reach private networks has to be configured so itself. Proxy hosts are exempt
      from the guard (a proxy is our own infrastructure and often lives on a private network).
    * Cookies are not kept (a :class:`aiohttp.DummyCookieJar`): jobs are independent and may
      run on any worker, so a process-wide jar would leak state between sites and jobs. A
      job's request sends its own cookies; a ``Set-Cookie`` answer is not kept.
    * Environment proxy variables (``HTTP_PROXY`` ...) are ignored (``trust_env=False``): the
      ``proxy`` setting is the one source of truth.

:class:`Robots` answers robots.txt questions (``respect_robots``), with the file fetched once
per origin through the same :class:`Fetcher`, shared between workers through Redis.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import itertools
import json
import logging
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from email.message import Message
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final, Self
from urllib.parse import urljoin, urlsplit

import aiohttp
import aiohttp.abc
from protego import Protego
from redis.exceptions import RedisError

from scrapeq.engine.connection import AsyncClient
from scrapeq.engine.exits import ExitPool
from scrapeq.engine.request import Request
from scrapeq.engine.settings import Settings
from scrapeq.engine.urls import is_private_address, is_private_host, parse_target
from scrapeq.errors import ConfigError, InvalidURL
from scrapeq.runtime.classify import BlockedAddress, BodyTooLarge, OurNetworkDown, RobotsDisallowed
from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.outgoing import Outgoing, after_redirect, same_origin

if TYPE_CHECKING:
    import parsel

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


# --- the response ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Response:
    """A fetched response, body read in full.

    Attributes:
        url: the final URL, after redirects.
        status: the final HTTP status.
        headers: the final response's headers (case-insensitive, read-only).
        body: the (decompressed) body.
        elapsed: seconds the whole fetch took, redirects and body included.
        redirects: how many redirects were followed.
        set_cookies: every ``Set-Cookie`` of every hop, with the URL of the hop that set it
            (``session = sticky`` keeps them: :mod:`.session_jar`); the fetcher itself keeps
            no cookies.

    :meth:`css` and :meth:`xpath` select as Scrapy's responses do (parsel, Scrapy's own
    selector library): the selector is built on first use and kept, so a handler that never
    selects pays nothing (parsel is not even imported).
    """

    url: str
    status: int
    headers: Mapping[str, str]
    body: bytes
    elapsed: float
    redirects: int
    set_cookies: tuple[tuple[str, str], ...] = ()
    _selector: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def selector(self) -> parsel.Selector:
        """A :class:`parsel.Selector` of the body (as HTML, decoded as browsers do), built
        once."""
        if self._selector is None:
            import parsel
            from w3lib.encoding import html_to_unicode

            _, text = html_to_unicode(self.headers.get("Content-Type"), self.body)
            object.__setattr__(self, "_selector", parsel.Selector(text=text, base_url=self.url))
        return self._selector  # type: ignore[no-any-return]

    def css(self, query: str) -> parsel.SelectorList[parsel.Selector]:
        """``response.css("h1::text").get()``, as in Scrapy."""
        return self.selector.css(query)

    def xpath(self, query: str, **variables: Any) -> parsel.SelectorList[parsel.Selector]:
        """``response.xpath("//h1/text()").get()``, as in Scrapy (``$name`` variables)."""
        return self.selector.xpath(query, **variables)

    @property
    def charset(self) -> str | None:
        """The charset the Content-Type header names, or ``None``."""
        content_type = self.headers.get("Content-Type")
        if not content_type:
            return None
        message = Message()
        message["Content-Type"] = content_type
        charset = message.get_content_charset()
        return charset or None

    def text(self, encoding: str | None = None) -> str:
        """The body as text: ``encoding``, else the header's charset, else UTF-8.

        Undecodable bytes are replaced (U+FFFD); an unknown charset falls back to UTF-8.
        """
        chosen = encoding or self.charset or "utf-8"
        try:
            return self.body.decode(chosen, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON (UTF-8, -16 or -32, detected by :func:`json.loads`)."""
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class Download:
    """What :meth:`Fetcher.download` wrote: the final URL, status and headers, the body's
    size as sent (``size`` bytes written), whether it was cut at the limit, the seconds the
    whole download took and the redirects followed."""

    url: str
    status: int
    headers: Mapping[str, str]
    size: int
    truncated: bool
    elapsed: float
    redirects: int


# --- resolvers ---------------------------------------------------------------------------------


def _parse_ip(text: str) -> _IPAddress:
    """The address of a resolver result (an IPv6 zone id ``%eth0`` is dropped)."""
    return ipaddress.ip_address(text.split("%", 1)[0])


class StaticResolver(aiohttp.abc.AbstractResolver):
    """Resolve some names to fixed addresses; every other name through a fallback resolver.

    For tests and the demo, to give loopback servers public-looking names. It does *not*
    bypass the SSRF guard: the :class:`Fetcher` checks what it returns like any answer.

    Args:
        mapping: host name (case-insensitive, no port) -> IP address text.
        fallback: the resolver for other names; default aiohttp's ``DefaultResolver``,
            created on first use. It is closed with this resolver.
    """

    def __init__(
        self, mapping: Mapping[str, str], fallback: aiohttp.abc.AbstractResolver | None = None
    ) -> None:
        self._mapping = {name.lower().rstrip("."): _parse_ip(ip) for name, ip in mapping.items()}
        self._fallback = fallback

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        ip = self._mapping.get(host.lower().rstrip("."))
        if ip is None:
            if self._fallback is None:
                self._fallback = aiohttp.DefaultResolver()
            return await self._fallback.resolve(host, port, family)
        found = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
        if family not in (socket.AF_UNSPEC, found):
            raise socket.gaierror(socket.EAI_NONAME, f"{host}: no address of family {family!r}")
        return [
            aiohttp.abc.ResolveResult(
                hostname=host, host=str(ip), port=port, family=found, proto=0, flags=_NUMERIC_FLAGS
            )
        ]

    async def close(self) -> None:
        if self._fallback is not None:
            await self._fallback.close()


def _refuse_private(host: str, results: list[aiohttp.abc.ResolveResult]) -> None:
    """Raise BlockedAddress when any resolved address of ``host`` is private."""
    for result in results:
        ip = _parse_ip(result["host"])
        if is_private_address(ip):
            raise BlockedAddress(
                f"{host} resolves to {ip}, a private address "
                "(set allow_private, or pass --allow-private)"
            )


class GuardedResolver(aiohttp.abc.AbstractResolver):
    """Wrap a resolver; refuse a name when any address it resolves to is private.

    Raises :class:`.classify.BlockedAddress` (not an ``OSError``, so aiohttp lets it
    through un-wrapped). Names in ``exempt`` (the proxies' hosts) are not checked.

    Args:
        inner: the resolver that does the look-up; closed with this one.
        exempt: host names resolved without the check.
    """

    def __init__(
        self, inner: aiohttp.abc.AbstractResolver, *, exempt: frozenset[str] = frozenset()
    ) -> None:
        self._inner = inner
        self._exempt = frozenset(name.lower().rstrip(".") for name in exempt)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        if host.lower().rstrip(".") not in self._exempt:
            _refuse_private(host, results)
        return results

    async def close(self) -> None:
        await self._inner.close()


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
    """The default fetcher: one aiohttp ``ClientSession`` per process.

    Use it as an async context manager, or call :meth:`close`. The session is created on
    first use, inside the running event loop.

    Args:
        settings: ``request_timeout``, ``max_body``, ``max_redirects``, ``proxy``,
            ``user_agent`` and ``allow_private`` are read.
        resolver: the DNS resolver (e.g. a :class:`StaticResolver`); default aiohttp's. The
            fetcher takes it over and closes it. With ``allow_private`` off it is wrapped in
            a :class:`GuardedResolver`, whatever it is.

    Raises:
        ConfigError: a SOCKS proxy is configured (not supported).
    """

    def __init__(
        self, settings: Settings, *, resolver: aiohttp.abc.AbstractResolver | None = None
    ) -> None:
        self.settings = settings
        self.pool = ExitPool.from_settings(settings)
        self._proxy_hosts = _check_proxies(self.pool)
        self._exit_urls = {e.id: e.url for e in self.pool.exits}
        # a job claimed without an exit (by a client with no pool) rotates over the pool
        self._proxies: Iterator[str | None] | None = (
            itertools.cycle(list(self._exit_urls.values())) if self.pool else None
        )
        self._given_resolver = resolver
        self._inner: aiohttp.abc.AbstractResolver | None = None  # does the look-ups
        self._resolver: aiohttp.abc.AbstractResolver | None = None  # the connector's
        self._session: aiohttp.ClientSession | None = None
        self._prechecked: dict[tuple[str, int], float] = {}
        self._deadlines = Deadlines(settings.request_timeout)
        self._closed = False

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
        session, self._session = self._session, None
        resolver, self._resolver = self._resolver, None
        self._inner = None
        if session is not None:
            await session.close()
        if resolver is not None:
            await resolver.close()
        elif self._given_resolver is not None:
            await self._given_resolver.close()
        self._given_resolver = None

    async def address(self, host: str) -> str | None:
        """The first address ``host`` resolves to, through this fetcher's resolver (what its
        requests connect to; ``politeness = ip``); None when it does not resolve."""
        self._ensure_session()
        assert self._inner is not None
        try:
            found = await self._inner.resolve(host, 0)
        except OSError:
            return None
        return str(found[0]["host"]) if found else None

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is not None:
            return self._session
        if self._closed:
            raise RuntimeError("Fetcher is closed")
        inner = self._given_resolver or aiohttp.DefaultResolver()
        self._given_resolver = None
        self._inner = inner
        self._resolver = (
            inner
            if self.settings.allow_private
            else GuardedResolver(inner, exempt=self._proxy_hosts)
        )
        connector = aiohttp.TCPConnector(
            limit=_CONNECTION_LIMIT,
            limit_per_host=0,
            ttl_dns_cache=_DNS_TTL,
            enable_cleanup_closed=True,
            resolver=self._resolver,
        )
        self._session = aiohttp.ClientSession(
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
        return self._session

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
            normalised: the URL is already in :func:`~scrapeq.engine.urls.parse_target`'s normal
                form (a job's URL): its parsing is skipped, the private-address check is not.
            request: what to send (method, headers, body, cookies; its URL is not read);
                None: a GET with the fetcher's default headers.
            exit: the id of the exit (engine/exits.py) to go through, as the job's claim
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
        session = self._ensure_session()
        proxy = self._proxy_for(exit)
        out = Outgoing.of(request) if request is not None else None
        started = time.monotonic()
        with self._deadlines.start():
            current = self._check_private(url) if normalised else self._validate(url)
            redirects = 0
            while True:
                status, headers, body, final_url, location = await self._hop(
                    session, current, proxy, redirects, out, read
                )
                if cookies is not None and hasattr(headers, "getall"):
                    cookies.extend((current, v) for v in headers.getall("Set-Cookie", ()))
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
                location = resp.headers.get("Location")
                if resp.status in _REDIRECT_STATUSES and location:
                    if redirects >= self.settings.max_redirects:
                        raise aiohttp.TooManyRedirects(
                            resp.request_info,
                            (),
                            status=resp.status,
                            message=f"more than {self.settings.max_redirects} redirects",
                            headers=resp.headers,
                        )
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
        assert self._inner is not None
        _refuse_private(host, await self._inner.resolve(host, port, socket.AF_UNSPEC))
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


# --- robots.txt --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Entry:
    rules: Protego
    expires: float  # time.monotonic()


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL: robots.txt is per origin (RFC 9309)."""
    target = parse_target(url, allow_private=True)
    scheme = urlsplit(target.url).scheme
    return f"{scheme}://{target.domain}"


class Robots:
    """robots.txt rules per origin, fetched once and shared by every worker through Redis.

    Policy (RFC 9309, adapted to a queue that isolates failures):

    * 2xx: the file is parsed (protego) and cached, in Redis for ``ttl`` seconds
      (``SET key text EX ttl``) and in this process.
    * 4xx (404, 403, 410 ...), or a redirect chain that never ends: "unavailable", allow all;
      cached like a file (an empty file).
    * 5xx, 429, a timeout, a connection error, a too-large file: "unreachable". RFC 9309 says
      disallow all; here that would dead-letter jobs for a passing outage. Instead the fetch
      is **allowed** (fail open: the page fetch itself will meet the outage and be retried and
      charged to the domain), and nothing is written to Redis; this process remembers it for
      ``unreachable_ttl`` seconds so it does not hammer a failing site's robots.txt.
    * a :class:`.classify.BlockedAddress` or :class:`~scrapeq.errors.InvalidURL`
      propagates: the page fetch would be refused the same way.
    * Redis failures are logged and skipped: the cache is an optimisation.

    Rules are matched against ``settings.user_agent`` (protego matches the product token,
    e.g. ``scrapeq`` in ``scrapeq/0.1.0``). Concurrent questions about one origin share one
    fetch.

    Args:
        fetcher: fetches robots.txt (with its timeouts, size limit and SSRF guard).
        redis: an async Redis client (``decode_responses`` either way), or ``None`` for an
            in-process cache only.
        prefix: key prefix, e.g. ``sq:{Q}:robots:``; the key is prefix + origin.
        ttl: seconds a fetched file is cached (Redis and in-process).
        unreachable_ttl: seconds an unreachable robots.txt is taken as allow-all in-process.
        user_agent: the name to match; default ``fetcher.settings.user_agent``.
        max_entries: origins kept in the in-process cache (least recently used dropped).
    """

    def __init__(
        self,
        fetcher: Fetcher,
        redis: AsyncClient | None,
        prefix: str,
        *,
        ttl: float = 3600.0,
        unreachable_ttl: float = 60.0,
        user_agent: str | None = None,
        max_entries: int = 10_000,
    ) -> None:
        self._fetcher = fetcher
        self._redis = redis
        self._prefix = prefix
        self._ttl = ttl
        self._unreachable_ttl = unreachable_ttl
        self._user_agent = user_agent or fetcher.settings.user_agent
        self._max_entries = max_entries
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._pending: dict[str, asyncio.Task[_Entry]] = {}

    async def allowed(self, url: str) -> tuple[bool, float | None]:
        """Whether ``url`` may be fetched, and the origin's crawl delay in seconds (or None).

        The crawl delay is ``Crawl-delay``, else derived from ``Request-rate``
        (seconds / requests).
        """
        rules = await self._rules(_origin(url))
        allowed = rules.can_fetch(url, self._user_agent)
        return allowed, self._delay(rules)

    async def check(self, url: str) -> float | None:
        """Like :meth:`allowed`, raising :class:`.classify.RobotsDisallowed`.

        Returns:
            The crawl delay in seconds, or ``None``.
        """
        allowed, delay = await self.allowed(url)
        if not allowed:
            raise RobotsDisallowed(f"robots.txt disallows {url}")
        return delay

    async def sitemaps(self, url: str) -> list[str]:
        """The ``Sitemap:`` URLs of the robots.txt of ``url``'s origin, in the file's order
        (none when the file is missing or unreachable: the same policy as :meth:`allowed`)."""
        rules = await self._rules(_origin(url))
        return list(rules.sitemaps)

    def _delay(self, rules: Protego) -> float | None:
        delay = rules.crawl_delay(self._user_agent)
        if delay is not None:
            return float(delay)
        rate = rules.request_rate(self._user_agent)
        if rate is not None and rate.requests > 0:
            return float(rate.seconds) / rate.requests
        return None

    async def _rules(self, origin: str) -> Protego:
        entry = self._cache.get(origin)
        if entry is not None and entry.expires > time.monotonic():
            self._cache.move_to_end(origin)
            return entry.rules
        task = self._pending.get(origin)
        if task is None:
            task = asyncio.create_task(self._load(origin))
            self._pending[origin] = task
            task.add_done_callback(functools.partial(self._loaded, origin))
        entry = await asyncio.shield(task)
        self._cache[origin] = entry
        self._cache.move_to_end(origin)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
        return entry.rules

    def _loaded(self, origin: str, task: asyncio.Task[_Entry]) -> None:
        self._pending.pop(origin, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have been cancelled

    async def _load(self, origin: str) -> _Entry:
        key = self._prefix + origin
        text = await self._redis_get(key)
        if text is not None:
            return _Entry(Protego.parse(text), time.monotonic() + self._ttl)
        text = await self._download(origin)
        if text is None:
            return _Entry(Protego.parse(""), time.monotonic() + self._unreachable_ttl)
        await self._redis_set(key, text)
        return _Entry(Protego.parse(text), time.monotonic() + self._ttl)

    async def _download(self, origin: str) -> str | None:
        """The file's text, ``""`` for allow-all (4xx), ``None`` when unreachable."""
        try:
            response = await self._fetcher.fetch(origin + "/robots.txt")
        except (BlockedAddress, InvalidURL):
            raise
        except aiohttp.TooManyRedirects:
            return ""
        except (TimeoutError, OSError, aiohttp.ClientError, BodyTooLarge) as exc:
            log.info("robots.txt of %s unreachable (%s): allowing for now", origin, exc)
            return None
        status = response.status
        if 200 <= status < 300:
            return response.text()
        if status == 429 or status >= 500:
            log.info("robots.txt of %s answered HTTP %s: allowing for now", origin, status)
            return None
        return ""  # 3xx without Location, 4xx: unavailable, allow all

    async def _redis_get(self, key: str) -> str | None:
        if self._redis is None:
            return None
        try:
            value = await self._redis.get(key)
        except RedisError as exc:
            log.warning("robots cache read failed: %s", exc)
            return None
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        return str(value)

    async def _redis_set(self, key: str, text: str) -> None:
        if self._redis is None:
            return
        try:
            await self._redis.set(key, text, ex=max(1, round(self._ttl)))
        except RedisError as exc:
            log.warning("robots cache write failed: %s", exc)
