"""What one hop of a fetch sends, and how a redirect changes it (RFC 9110 section 15.4).

A job's :class:`~scrapeq.engine.model.request.Request` becomes an :class:`Outgoing` (its cookies
folded into one ``Cookie`` header); each redirect makes the next hop's:

* **303** turns any method but ``HEAD`` into a ``GET`` without a body; **301** and **302**
  turn a ``POST`` into a ``GET`` without a body, as browsers and aiohttp do (RFC 9110 allows
  it); **307** and **308** keep the method and the body.
* A dropped body takes its ``Content-*`` headers with it.
* A hop to another origin (scheme, host, port) drops every header the project treats as a
  secret (:data:`~scrapeq.engine.model.request.SECRET_HEADERS`: ``Authorization``,
  ``Proxy-Authorization``, ``Cookie``, ``X-Api-Key``, ``Api-Key``, ``X-Auth-Token``, ...):
  credentials meant for one site never reach another (what aiohttp, requests and browsers
  do for the standard ones).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final
from urllib.parse import urlsplit

from scrapeq.engine.model.request import SECRET_HEADERS, Request

__all__ = ["Outgoing", "after_redirect", "same_origin"]

_CONTENT: Final = frozenset(
    {"content-type", "content-encoding", "content-language", "content-location", "digest"}
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One hop's method, headers (over the fetcher's defaults) and body."""

    method: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    @classmethod
    def of(cls, request: Request) -> Outgoing:
        """The first hop of a request: its cookies joined into its ``Cookie`` header."""
        headers = request.headers
        if request.cookies:
            jar = "; ".join(f"{n}={v}" for n, v in request.cookies)
            given = [v for n, v in headers if n.lower() == "cookie"]
            headers = tuple(p for p in headers if p[0].lower() != "cookie")
            headers += (("Cookie", "; ".join([*given, jar])),)
        return cls(request.method, headers, request.body)


def same_origin(a: str, b: str) -> bool:
    """Whether two normalised URLs share scheme, host and port."""
    x, y = urlsplit(a), urlsplit(b)
    return (x.scheme, x.hostname, x.port) == (y.scheme, y.hostname, y.port)


def after_redirect(out: Outgoing, status: int, *, same: bool) -> Outgoing:
    """The next hop after a ``status`` redirect (``same``: to the same origin)."""
    if (status == 303 and out.method != "HEAD") or (status in (301, 302) and out.method == "POST"):
        kept = tuple(p for p in out.headers if p[0].lower() not in _CONTENT)
        out = Outgoing("GET", kept, b"")
    if not same:
        out = replace(
            out, headers=tuple(p for p in out.headers if p[0].lower() not in SECRET_HEADERS)
        )
    return out
