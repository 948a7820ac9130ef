"""The dashboard's access rules (:class:`Guard`) and the middlewares that apply them before
any handler runs: a ``Host`` header that names no configured host is refused (421: DNS
rebinding); with a token every request must present it (``Authorization: Bearer`` or the
``login`` cookie, else 401); a POST needs the session's ``X-CSRF-Token`` (unless it came with
a bearer token) and a same-site ``Origin`` (403); ``read_only`` refuses every POST (403).
The library's errors become JSON answers (:func:`json_errors`).
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp import web

from scrapeq.errors import ConfigError, NotFound, RedisUnavailable, ScrapeqError
from scrapeq.interfaces.web.pages import LOGIN_PAGE

__all__ = [
    "CSRF_HEADER",
    "GUARD_KEY",
    "HOLDER_KEY",
    "LOOPBACK_HOSTS",
    "MIN_TOKEN_CHARS",
    "TOKEN_COOKIE",
    "TOKEN_ENV",
    "Guard",
    "check_request",
    "check_token",
    "default_hosts",
    "is_loopback",
    "json_errors",
    "same_secret",
]

log = logging.getLogger("scrapeq.interfaces.web")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Host names a loopback dashboard always answers to (the ``Host`` header's name part).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: The cookie a browser keeps the token in after signing in at ``login``.
TOKEN_COOKIE = "scrapeq_token"
#: The header an action (POST) must carry with the session's CSRF token.
CSRF_HEADER = "X-CSRF-Token"
#: The environment variable ``scrapeq dashboard`` reads the token from.
TOKEN_ENV = "SCRAPEQ_DASHBOARD_TOKEN"
#: Shortest token accepted: a guessable token would be worse than none.
MIN_TOKEN_CHARS = 16

_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class Guard:
    """The dashboard's access rules (see docs/DESIGN.md, "the dashboard's security model").

    Attributes:
        hosts: host names the ``Host`` header may name (DNS rebinding is refused otherwise).
        token: when set, every request must present it (``Authorization: Bearer``, or the
            cookie set by ``login``); payloads are shown only to a request that presented it.
        read_only: refuse every action and tell the page to hide them.
        csrf: the secret every action must echo in ``X-CSRF-Token`` (random per app).
    """

    hosts: frozenset[str]
    token: str | None = None
    read_only: bool = False
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def host_allowed(self, host_header: str | None) -> bool:
        """True when the ``Host`` header names one of :attr:`hosts` (any port)."""
        if not host_header:
            return False
        try:
            name = urlsplit(f"//{host_header}").hostname
        except ValueError:
            return False
        return name is not None and name.lower() in self.hosts

    def presented(self, request: web.Request) -> str | None:
        """How the request proved it holds the token: ``bearer``, ``cookie`` or None."""
        if self.token is None:
            return None
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and same_secret(value.strip(), self.token):
            return "bearer"
        if same_secret(request.cookies.get(TOKEN_COOKIE, ""), self.token):
            return "cookie"
        return None


def same_secret(given: str, expected: str) -> bool:
    """True when ``given`` is the secret (compared in constant time; empty is never it)."""
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def is_loopback(host: str) -> bool:
    """True for an address (or ``localhost``) that only this machine can reach."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str | None, host: str) -> None:
    """Refuse a bind address other machines can reach without a good enough token.

    Raises:
        ConfigError: ``host`` is not loopback and ``token`` is missing or too short.
    """
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError("token", f"must be at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise ConfigError(
            "host",
            f"{host} is reachable from other machines: a token is required "
            f"(--token or {TOKEN_ENV})",
        )


def default_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a dashboard bound to ``bind`` answers to: loopback, the bind address
    (unless a wildcard), this machine's name for a wildcard bind, and ``extra``."""
    names = set(LOOPBACK_HOSTS)
    if bind in ("0.0.0.0", "::", ""):
        names.update({socket.gethostname(), socket.getfqdn()})
    else:
        names.add(bind.strip("[]"))
    names.update(extra)
    return frozenset(n.lower() for n in names if n)


GUARD_KEY = web.AppKey("guard", Guard)
HOLDER_KEY = web.RequestKey("token_holder", bool)


def error_response(status: int, message: str) -> web.Response:
    """An error as the dashboard answers it: ``{"error": message}``."""
    return web.json_response({"error": message}, status=status)


@web.middleware
async def check_request(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Host check, token check, CSRF and read-only, before any handler runs."""
    guard = request.app[GUARD_KEY]
    if not guard.host_allowed(request.headers.get("Host")):
        return error_response(421, "unknown Host header refused (add it with --allowed-host)")
    how = guard.presented(request)
    request[HOLDER_KEY] = how is not None
    is_login = request.match_info.route.name == "login"
    if guard.token is not None and how is None and not is_login:
        if request.method == "GET" and request.match_info.route.name == "index":
            return web.Response(text=LOGIN_PAGE, content_type="text/html", status=401)
        return error_response(
            401, "a token is required (Authorization: Bearer, or sign in at /login)"
        )
    if request.method == "POST" and not is_login:
        if guard.read_only:
            return error_response(403, "read-only dashboard: actions are disabled")
        if not _same_origin(request):
            return error_response(403, "cross-site request refused")
        # A bearer token cannot be sent by another site's page: only cookie or no-token
        # sessions, which a browser attaches by itself, need the CSRF token.
        if how != "bearer" and not same_secret(request.headers.get(CSRF_HEADER, ""), guard.csrf):
            return error_response(403, f"missing or wrong {CSRF_HEADER} (GET api/session gives it)")
    response = await handler(request)
    response.headers.update(_SECURITY_HEADERS)
    return response


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map the library's errors to JSON answers; anything else is a 500 as usual."""
    try:
        return await handler(request)
    except NotFound as exc:
        return error_response(404, str(exc))
    except ConfigError as exc:
        return error_response(400, str(exc))
    except RedisUnavailable as exc:
        return error_response(503, str(exc))
    except ScrapeqError as exc:
        log.exception("dashboard request %s failed", request.path)
        return error_response(500, str(exc))


def _same_origin(request: web.Request) -> bool:
    """False for a browser POST from another site (CSRF); tools send no Origin at all."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host
