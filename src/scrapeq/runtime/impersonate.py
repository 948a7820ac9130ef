"""The ``impersonate`` fetcher: curl_cffi with a browser's TLS handshake (issue 42).

A site that refuses clients whose TLS ClientHello does not look like a browser's answers
every exit of every tier alike (a 403, a closed connection): no proxy is the remedy, a
browser's fingerprint is. :class:`ImpersonateFetcher` sends a job as :class:`.fetch.Fetcher`
does, through curl_cffi impersonating ``impersonate_target`` (its cipher suites, extensions,
HTTP/2 settings and default headers), and keeps every guard of the default fetcher:

* the **total deadline** ``request_timeout`` over every hop and the body (the same
  :class:`~scrapeq.runtime.deadlines.Deadlines` scope: :class:`TimeoutError`);
* ``max_body`` while the body arrives (decompressed bytes): :class:`.classify.BodyTooLarge`;
* redirects followed by hand, each hop's target validated and checked, ``max_redirects``
  (:class:`aiohttp.TooManyRedirects`); a cross-origin hop drops the secret headers and
  cookies as :mod:`.outgoing` says;
* the **SSRF guard**: curl never resolves a target itself. The fetcher resolves each hop's
  host through its own resolver, refuses a private answer (``allow_private`` off), and pins
  curl to the checked address (``CURLOPT_RESOLVE``), so a name is connected to the address
  that was checked and DNS rebinding between the check and the connect cannot happen. A
  literal private host is refused before anything; through a proxy the target is prechecked
  as :meth:`.fetch.Fetcher._precheck` does (the proxy resolves it: the same limitation);
* the same exits (``exit=``; curl's proxy option with the exit's URL, the proxy's own name
  resolved by our resolver and exempt from the guard, as with the default fetcher) and no
  cookie jar: a job's cookies go in its request's ``Cookie`` header, each hop's
  ``Set-Cookie`` lands in :attr:`Response.set_cookies`.

curl's errors are raised as what :func:`.classify.classify_exception` reads for aiohttp's:
a timeout as :class:`TimeoutError`, a refused or reset connection as
:class:`ConnectionRefusedError` / :class:`ConnectionResetError` (``connection_error``), an
empty answer as :class:`aiohttp.ServerDisconnectedError`, a cut body as
:class:`aiohttp.ClientPayloadError`, a TLS failure as :class:`ssl.SSLError`, a proxy we
cannot reach as :class:`.classify.ProxyDown` (``ours``, ``proxy_error``) and a proxy's
refusal of ``CONNECT`` as :class:`.classify.ProxyAnswered` (its status, as aiohttp's
``ClientHttpProxyError``).

Differences from the default fetcher: the ``User-Agent`` and ``Accept`` headers are the
browser's (curl_cffi's for the target: a Chrome handshake with scrapeq's User-Agent is the
kind of mismatch such sites look for); a job's own headers still win. :meth:`download`
(sitemaps) is the default fetcher's business and is refused here. The CA bundle is curl_cffi's
(certifi), or the file ``SSL_CERT_FILE`` names, as OpenSSL (and so aiohttp) reads it.

Needs the ``impersonate`` extra (``pip install 'scrapeq[impersonate]'``): without it,
:func:`require_curl_cffi` refuses with one line naming it.
"""

from __future__ import annotations

import contextvars
import ipaddress
import os
import re
import socket
import ssl
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

import aiohttp
import aiohttp.abc
from multidict import CIMultiDict, CIMultiDictProxy

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.exits import ExitPool
from scrapeq.engine.model.request import Request
from scrapeq.errors import ConfigError
from scrapeq.runtime.classify import (
    BodyTooLarge,
    OurNetworkDown,
    ProxyAnswered,
    ProxyDown,
)
from scrapeq.runtime.fetch import Fetcher
from scrapeq.runtime.outgoing import Outgoing
from scrapeq.runtime.resolvers import _refuse_private
from scrapeq.runtime.response import Download

if TYPE_CHECKING:
    from curl_cffi.requests import AsyncSession

__all__ = ["EXTRA_HINT", "FetcherUnavailable", "ImpersonateFetcher", "require_curl_cffi"]

#: How to install what the impersonate fetcher needs.
EXTRA_HINT: Final = "pip install 'scrapeq[impersonate]'"

_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
_MAX_CLIENTS: Final = 100
#: The pins of the hop being sent (``host:port:address``), read when curl_cffi takes a handle
#: for it: the session's options are per session, the pins per request.
_PINS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("scrapeq_pins")
_CONNECT_STATUS: Final = re.compile(r"\b(?:response|CONNECT[^0-9]*)\s*([1-5][0-9][0-9])\b")

# curl's error codes (curl/curl.h: CURLcode) the fetcher maps.
_COULDNT_RESOLVE_PROXY: Final = 5
_COULDNT_RESOLVE_HOST: Final = 6
_COULDNT_CONNECT: Final = 7
_PARTIAL_FILE: Final = 18
_OPERATION_TIMEDOUT: Final = 28
_SSL_CONNECT_ERROR: Final = 35
_GOT_NOTHING: Final = 52
_SEND_ERROR: Final = 55
_RECV_ERROR: Final = 56
_PEER_FAILED_VERIFICATION: Final = 60
_BAD_CONTENT_ENCODING: Final = 61
_HTTP2: Final = 16
_HTTP2_STREAM: Final = 92
_PROXY: Final = 97


class FetcherUnavailable(OurNetworkDown):
    """A job names the impersonate fetcher and this worker cannot run it (curl_cffi is not
    installed): our deployment's fault, not the site's (``ours``: no attempt spent)."""


def require_curl_cffi() -> None:
    """Refuse, with one line naming the extra, when curl_cffi cannot be imported.

    Raises:
        ConfigError: ``setting 'fetcher': impersonate needs curl_cffi: pip install ...``.
    """
    try:
        import curl_cffi
        import curl_cffi.requests  # noqa: F401
    except ImportError:
        raise ConfigError("fetcher", f"impersonate needs curl_cffi: {EXTRA_HINT}") from None


def _targets() -> frozenset[str]:
    from curl_cffi.requests import BrowserType

    return frozenset(str(b.value) for b in BrowserType)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _pin(host: str, port: int, addresses: list[str]) -> str:
    """A ``CURLOPT_RESOLVE`` entry: curl connects to one of ``addresses`` (in order, as
    it would to a name's answers) for ``host:port``, and to nothing else."""
    shown = ",".join(f"[{a}]" if ":" in a else a for a in addresses)
    return f"{host}:{port}:{shown}"


def _port(parts: Any) -> int:
    return int(parts.port or (443 if parts.scheme == "https" else 80))


class ImpersonateFetcher(Fetcher):
    """The ``impersonate`` fetcher: :class:`.fetch.Fetcher`'s guards, curl_cffi's transport.

    Args:
        settings: as :class:`.fetch.Fetcher`, and ``impersonate_target``.
        resolver: the resolver every host is looked up with (then checked and pinned);
            default aiohttp's. Taken over and closed.
        pool: the exit pool, as :class:`.fetch.Fetcher`.
        target: the browser to look like; default the ``impersonate_target`` setting.

    Raises:
        ConfigError: curl_cffi is missing (one line naming the extra), or the target is not
            one of curl_cffi's.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        resolver: aiohttp.abc.AbstractResolver | None = None,
        pool: ExitPool | None = None,
        target: str | None = None,
    ) -> None:
        require_curl_cffi()
        self.target = target or settings.impersonate_target
        if self.target not in _targets():
            raise ConfigError(
                "impersonate_target",
                f"{self.target!r} is not a target of this curl_cffi (e.g. chrome152, firefox147)",
            )
        super().__init__(settings, resolver=resolver, pool=pool)
        self._curl: AsyncSession[Any] | None = None
        self._cafile = os.environ.get("SSL_CERT_FILE") or None

    async def close(self) -> None:
        curl, self._curl = self._curl, None
        if curl is not None:
            await curl.close()
        await super().close()

    def _curl_session(self) -> AsyncSession[Any]:
        if self._closed:
            raise RuntimeError("Fetcher is closed")
        if self._curl is None:
            self._curl = _new_session(self.target, self._cafile)
        return self._curl

    async def download(
        self, url: str, sink: IO[bytes], *, limit: int, request: Request | None = None
    ) -> Download:
        """Not here: sitemaps are read by the default fetcher."""
        raise NotImplementedError("download() is the http fetcher's (sitemaps)")

    async def _send(
        self,
        url: str,
        proxy: str | None,
        redirects: int,
        out: Outgoing | None,
        read: Any,
    ) -> tuple[int, Mapping[str, str], bytes, str, str | None]:
        session = self._curl_session()
        pins = await self._pins(url, proxy)
        method, headers, data = "GET", None, None
        if out is not None:
            method, headers, data = out.method, out.headers, out.body or None
        limit = self.settings.max_body
        body = bytearray()
        too_large = False

        def collect(chunk: bytes) -> int:
            nonlocal too_large
            body.extend(chunk)
            if len(body) > limit:
                too_large = True
                raise BodyTooLarge(f"body is over max_body {limit} bytes")
            return len(chunk)

        token = _PINS.set(pins)
        try:
            resp = await session.request(
                method,  # type: ignore[arg-type]
                url,
                headers=dict(headers) if headers is not None else None,
                data=data,
                proxy=proxy,
                allow_redirects=False,
                timeout=self.settings.request_timeout,
                content_callback=collect,
                discard_cookies=True,
            )
        except Exception as exc:
            if too_large:
                raise BodyTooLarge(f"body is over max_body {limit} bytes") from None
            raise _mapped(exc, proxy) from None
        finally:
            _PINS.reset(token)
        found: CIMultiDict[str] = CIMultiDict(
            (k, v) for k, v in resp.headers.multi_items() if v is not None
        )
        answer = CIMultiDictProxy(found)
        status = int(resp.status_code)
        location = answer.get("Location")
        if status in _REDIRECT_STATUSES and location:
            if redirects >= self.settings.max_redirects:
                raise _too_many(url, status, self.settings.max_redirects)
            return status, answer, b"", str(resp.url or url), location
        return status, answer, bytes(body), str(resp.url or url), None

    async def _pins(self, url: str, proxy: str | None) -> tuple[str, ...]:
        """The ``CURLOPT_RESOLVE`` entries of one hop: the target's checked address when we
        connect to it, else (through a proxy) the proxy's address, the target prechecked."""
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if proxy is not None:
            if not self.settings.allow_private:
                await self._precheck(url)
            p = urlsplit(proxy)
            name = (p.hostname or "").lower()
            if not name or _is_ip(name):
                return ()
            # the connection to a proxy is exempt from the guard (SECURITY.md)
            return (_pin(name, _port(p), await self._addresses(name, _port(p), guard=False)),)
        if not host or _is_ip(host):  # a literal: refused before this when it is private
            return ()
        port = _port(parts)
        addresses = await self._addresses(host, port, guard=not self.settings.allow_private)
        return (_pin(host, port, addresses),)

    async def _addresses(self, host: str, port: int, *, guard: bool) -> list[str]:
        """The addresses curl may connect to for ``host``: looked up through this fetcher's
        resolver; with ``guard``, refused when *any* of them is private."""
        results = await self._resolver().resolve(host, port, socket.AF_UNSPEC)
        if not results:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} does not resolve")
        if guard:
            _refuse_private(host, results)
        found = (str(r["host"]).split("%", 1)[0] for r in results)
        return list(dict.fromkeys(found))


def _new_session(target: str, cafile: str | None) -> AsyncSession[Any]:
    from curl_cffi import CurlOpt
    from curl_cffi.requests import AsyncSession

    class _PinnedSession(AsyncSession):  # type: ignore[type-arg]
        """Each handle taken for a request gets that request's pins (``_PINS``)."""

        async def pop_curl(self) -> Any:
            curl = await super().pop_curl()
            pins = _PINS.get(())
            if pins:
                curl.setopt(CurlOpt.RESOLVE, list(pins))
            return curl

    options: dict[Any, Any] = {}
    if cafile is not None:
        options[CurlOpt.CAINFO] = cafile
    session: AsyncSession[Any] = _PinnedSession(
        impersonate=target,
        max_clients=_MAX_CLIENTS,
        trust_env=False,
        allow_redirects=False,
        discard_cookies=True,
        curl_options=options or None,
    )
    return session


def _too_many(url: str, status: int, limit: int) -> aiohttp.TooManyRedirects:
    from yarl import URL

    info = aiohttp.RequestInfo(URL(url), "GET", CIMultiDictProxy(CIMultiDict()), URL(url))
    return aiohttp.TooManyRedirects(info, (), status=status, message=f"more than {limit} redirects")


def _mapped(exc: BaseException, proxy: str | None) -> BaseException:
    """curl_cffi's error as what :func:`.classify.classify_exception` reads for aiohttp's."""
    code = int(getattr(exc, "code", 0) or 0)
    text = str(exc)
    if isinstance(exc, TimeoutError) or code == _OPERATION_TIMEDOUT:
        return TimeoutError(f"timed out: {text}")
    if proxy is not None:
        where = urlsplit(proxy).hostname
        connect = _CONNECT_STATUS.search(text) if "CONNECT" in text else None
        if connect is not None and (code in (_PROXY, _RECV_ERROR) or "tunnel" in text):
            status = int(connect.group(1))
            return ProxyAnswered(f"proxy {where} answered CONNECT with {status}", status)
        if code in (_COULDNT_CONNECT, _COULDNT_RESOLVE_PROXY, _PROXY):
            return ProxyDown(f"proxy {where} cannot be reached: {text}")
    if code == _COULDNT_CONNECT:
        return ConnectionRefusedError(f"connection refused: {text}")
    if code == _COULDNT_RESOLVE_HOST:
        return socket.gaierror(socket.EAI_NONAME, text)
    if code in (_SEND_ERROR, _RECV_ERROR):
        return ConnectionResetError(f"connection reset: {text}")
    if code == _GOT_NOTHING:
        return aiohttp.ServerDisconnectedError(text)
    if code in (_PARTIAL_FILE, _BAD_CONTENT_ENCODING, _HTTP2, _HTTP2_STREAM):
        return aiohttp.ClientPayloadError(text)
    if code in (_SSL_CONNECT_ERROR, _PEER_FAILED_VERIFICATION):
        return ssl.SSLError(text)
    return aiohttp.ClientConnectionError(text)
