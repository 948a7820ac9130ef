"""A domain's cookie jar for ``session = sticky`` (issue 23; RFC 6265, issues 36 and 38): kept
in Redis by the scripts (``includes/exits.lua`` and ``includes/jar.lua``) so any worker
continues a session. This module decides what a cookie is and where it goes; the scripts only
store it. It sends a jar's cookies with a request (:func:`jar_request`) and turns an answer's
``Set-Cookie`` headers into the attempt's changes to the jar (:func:`absorb`), which the
settle call merges into the stored jar per cookie: attempts that started from the same copy
of the jar all keep what they got.

A jar is JSON text, a list of cookies laid out as :data:`scrapeq.engine.lua.wire.JAR_COOKIE`
(``[name, value, domain, path, expires, flags]``). One jar may serve several hosts (one per
queue domain: with ``politeness = ip`` or ``domain`` a domain holds several hosts), so each
cookie keeps its own domain, and the matching is the standard library's
(:mod:`http.cookiejar`, :class:`~http.cookiejar.DefaultCookiePolicy`) made stricter:

- a cookie without ``Domain`` is host-only: it goes to the host that set it, never to its
  subdomains or the jar's other hosts; a ``Domain`` cookie goes to that domain and its
  subdomains, and is refused unless the setting host domain-matches it, the domain is not a
  public suffix (the Public Suffix List; a public suffix naming the host itself makes a
  host-only cookie, RFC 6265 5.3 step 5) and the host is not an IP address;
- ``Path`` is path-matched (the default-path of RFC 6265 5.1.4 when absent or not absolute);
  ``Expires`` and ``Max-Age`` expire it (an expired one is a deletion);
- a ``Secure`` cookie is sent over https only, and one set over plain http is refused;
- ``Set-Cookie`` of a redirect hop on another host is taken when that host belongs to the
  jar's domain (the job's host, or the same politeness key), each cookie for its own domain.

Bounded (``JAR_LIMITS``): a change sets or deletes at most 50 cookies, each name and value
within 4 KiB; the merge keeps at most 50 cookies and 16 KiB of text, the oldest dropped first.
Cookies set by an earlier hop of the same fetch are not sent on its later hops (the fetcher
keeps none): they are sent from the next fetch on.
"""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.request
from http.cookiejar import Cookie, CookieJar, DefaultCookiePolicy
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq.engine.lua.wire import JAR_COOKIE, JAR_FLAGS, JAR_LIMITS
from scrapeq.engine.model.request import Request
from scrapeq.engine.model.urls import domain_of, is_public_suffix, politeness_key
from scrapeq.errors import InvalidRequest, ScrapeqError

__all__ = ["MAX_COOKIES", "MAX_JAR", "Changes", "absorb", "jar_request"]

MAX_COOKIES: Final = JAR_LIMITS["MAX_COOKIES"]
MAX_JAR: Final = JAR_LIMITS["MAX_BYTES"]

_HOST_ONLY, _SECURE, _HTTP_ONLY = (
    JAR_FLAGS["host_only"],
    JAR_FLAGS["secure"],
    JAR_FLAGS["http_only"],
)
# What includes/jar.lua takes (its checks, as Python patterns): a cookie the scripts would
# refuse is never sent to them.
_NAME = re.compile(r"[^\x00-\x20\x7f;=]+")
_VALUE = re.compile(r"[^\x00-\x1f\x7f;]*")
_DOMAIN = re.compile(r"[A-Za-z0-9._:\[\]-]+")
_PATH = re.compile(r"/[^\x00-\x1f\x7f;]*")

#: A cookie's key (name, domain, path): its positions in a stored cookie.
_KEY: Final = tuple(JAR_COOKIE.index(f) for f in ("name", "domain", "path"))

Changes = dict[str, list[list[Any]]]  # {"set": [cookie, ...], "del": [[name, domain, path]]}


#: The schemes a Secure cookie is sent over (and set from).
_SECURE_SCHEMES: Final = ("https",)


class _Policy(DefaultCookiePolicy):
    """The standard library's rules (Netscape cookies as RFC 6265 has them), stricter where
    they are liberal: host-only cookies match their host alone; no ``Domain`` that is a
    public suffix or on an IP address; no ``Secure`` cookie set over plain http."""

    def __init__(self) -> None:
        super().__init__(
            rfc2965=False,
            strict_ns_domain=DefaultCookiePolicy.DomainStrictNonDomain,
            secure_protocols=_SECURE_SCHEMES,
        )

    def set_ok(self, cookie: Cookie, request: Any) -> bool:
        if cookie.secure and request.type not in _SECURE_SCHEMES:
            return False  # RFC 6265bis 5.7: only a secure origin sets a Secure cookie
        return bool(super().set_ok(cookie, request))

    def set_ok_domain(self, cookie: Cookie, request: Any) -> bool:
        if not super().set_ok_domain(cookie, request):
            return False
        if not cookie.domain_specified:
            return True
        domain = cookie.domain.lstrip(".")
        host = _host(request.get_full_url())
        if _is_address(host):  # an address domain-matches itself alone (RFC 6265 5.1.3)
            return domain == host
        return not is_public_suffix(domain)


_POLICY: Final = _Policy()


def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


# --- sending ----------------------------------------------------------------------------------


def _load(text: str | None) -> CookieJar:
    """The stored jar as a :class:`CookieJar` (entries not of the layout are left out)."""
    jar = CookieJar(_POLICY)
    try:
        data = json.loads(text) if text else []
    except ValueError:
        return jar
    for entry in data if isinstance(data, list) else []:
        cookie = _cookie(entry)
        if cookie is not None:
            jar.set_cookie(cookie)
    return jar


def _cookie(entry: Any) -> Cookie | None:
    """A stored entry as a :class:`Cookie`; None when it is not one the scripts take."""
    if not (isinstance(entry, list) and len(entry) == len(JAR_COOKIE)):
        return None
    f = dict(zip(JAR_COOKIE, entry, strict=True))
    name, value, domain, path, expires, flags = (
        f["name"], f["value"], f["domain"], f["path"], f["expires"], f["flags"]
    )  # fmt: skip
    if not (isinstance(name, str) and isinstance(value, str) and isinstance(domain, str)
            and isinstance(path, str) and isinstance(flags, int)
            and (expires is None or isinstance(expires, int | float))):  # fmt: skip
        return None
    if not (_NAME.fullmatch(name) and _VALUE.fullmatch(value)):
        return None  # a value a Cookie header could not carry
    host_only = bool(flags & _HOST_ONLY)
    return Cookie(
        0, name, value, None, False, domain if host_only else "." + domain, not host_only,
        not host_only, path, True, bool(flags & _SECURE), None if expires is None else int(expires),
        expires is None, None, None, {"HttpOnly": ""} if flags & _HTTP_ONLY else {},
    )  # fmt: skip


def jar_request(request: Request, jar_text: str | None, url: str) -> Request:
    """``request`` with the jar's cookies for ``url`` added (those RFC 6265 sends there: its
    host and domain, path, scheme, not expired; the request's own win a name)."""
    probe = urllib.request.Request(url)
    _load(jar_text).add_cookie_header(probe)
    header = probe.get_header("Cookie")
    if not header:
        return request
    own = {n for n, _ in request.cookies}
    sent: list[tuple[str, str]] = []
    for text in header.split("; "):  # names hold no ';' or '=', values no ';' (_load)
        name, _, value = text.partition("=")
        if name not in own:
            sent.append((name, value))
    if not sent:
        return request
    try:
        return _with_cookies(request, [*sent, *request.cookies])
    except InvalidRequest:  # a value a Cookie header may not carry: leave those out
        kept: list[tuple[str, str]] = []
        for pair in sent:
            try:
                _with_cookies(request, [pair])
            except InvalidRequest:
                continue
            kept.append(pair)
        return _with_cookies(request, [*kept, *request.cookies])


def _with_cookies(request: Request, cookies: list[tuple[str, str]]) -> Request:
    return Request(
        request.url, method=request.method, headers=request.headers, body=request.body,
        cookies=cookies, meta=request.meta,
    )  # fmt: skip


# --- taking an answer's cookies ---------------------------------------------------------------


class _Answer:
    """One hop's ``Set-Cookie`` headers as :meth:`CookieJar.make_cookies` reads a response
    (``response.info().get_all(name, default)``), taken as they are."""

    def __init__(self, values: list[str]) -> None:
        self._values = values

    def info(self) -> _Answer:
        return self

    def get_all(self, name: str, default: list[str]) -> list[str]:
        return list(self._values) if name.lower() == "set-cookie" else default


class _Parser(CookieJar):
    """Parses a hop's ``Set-Cookie`` (the standard library's parser); the deletions it asks
    for (an expired cookie: ``CookieJar`` clears it, unchecked) are recorded, not made."""

    def __init__(self) -> None:
        super().__init__(_POLICY)
        self.deleted: list[tuple[str, str, str]] = []

    def clear(
        self, domain: str | None = None, path: str | None = None, name: str | None = None
    ) -> None:
        if domain is not None and path is not None and name is not None:
            self.deleted.append((domain, path, name))


def _default_path(url: str) -> str:
    """RFC 6265 5.1.4: the directory of the URL's path."""
    path = urlsplit(url).path
    if not path.startswith("/") or path.count("/") == 1:
        return "/"
    return path[: path.rfind("/")]


def _in_jar(hop_url: str, url: str, domain: str, politeness: str) -> bool:
    """Whether a hop's host belongs to the jar of ``domain`` (the job's queue domain)."""
    if urlsplit(hop_url).hostname == urlsplit(url).hostname:
        return True
    try:
        return politeness_key(domain_of(hop_url), politeness) == domain
    except ScrapeqError:
        return False


def _hop_changes(hop_url: str, headers: list[str]) -> list[tuple[str, list[Any]]]:
    """A hop's cookies the policy takes, in order: ("set", cookie) or ("del", key)."""
    request = urllib.request.Request(hop_url)
    parser = _Parser()
    out: list[tuple[str, list[Any]]] = []
    for cookie in parser.make_cookies(_Answer(headers), request):  # type: ignore[arg-type]
        cookie.version, cookie.port, cookie.port_specified = 0, None, False  # RFC 6265
        if not cookie.path_specified or not cookie.path.startswith("/"):
            cookie.path = _default_path(hop_url)
        host = _host(hop_url)
        if cookie.domain_specified and cookie.domain.lstrip(".") == host and is_public_suffix(host):
            # RFC 6265 5.3 step 5; as the standard library names a host-only cookie's domain
            cookie.domain = host if "." in host else host + ".local"
            cookie.domain_specified = cookie.domain_initial_dot = False
        if cookie.value is None or not _POLICY.set_ok(cookie, request):
            continue
        entry = _entry(cookie)
        if entry is not None:
            out.append(("set", entry))
    for domain, path, name in parser.deleted:
        dotted = domain.startswith(".")
        probe = Cookie(0, name, "", None, False, domain, dotted, dotted, path, True, False, None,
                       True, None, None, {})  # fmt: skip
        key = [name, domain.lstrip("."), path]
        if _POLICY.set_ok(probe, request) and _fits(name, "", key[1], path):
            out.append(("del", key))
    return out


def _fits(name: str, value: str, domain: str, path: str) -> bool:
    """Whether includes/jar.lua takes these fields (its patterns and JAR_LIMITS)."""
    try:
        pair = len(name.encode()) + len(value.encode())
    except UnicodeEncodeError:  # a header's undecodable bytes
        return False
    return bool(
        _NAME.fullmatch(name) and _VALUE.fullmatch(value) and pair <= JAR_LIMITS["MAX_PAIR"]
        and _DOMAIN.fullmatch(domain) and len(domain) <= JAR_LIMITS["MAX_DOMAIN"]
        and _PATH.fullmatch(path) and len(path.encode()) <= JAR_LIMITS["MAX_PATH"]
    )  # fmt: skip


def _entry(cookie: Cookie) -> list[Any] | None:
    """A taken cookie as stored (``JAR_COOKIE``); None when the scripts would refuse it."""
    value = cookie.value or ""
    domain = cookie.domain.lstrip(".")
    if not _fits(cookie.name, value, domain, cookie.path):
        return None
    expires = None if cookie.expires is None else min(cookie.expires, JAR_LIMITS["MAX_EXPIRES"])
    flags = 0 if cookie.domain_specified else _HOST_ONLY
    flags |= _SECURE if cookie.secure else 0
    http_only = cookie.has_nonstandard_attr("HttpOnly") or cookie.has_nonstandard_attr("httponly")
    flags |= _HTTP_ONLY if http_only else 0
    fields = {"name": cookie.name, "value": value, "domain": domain, "path": cookie.path,
              "expires": expires, "flags": flags}  # fmt: skip
    return [fields[f] for f in JAR_COOKIE]


def absorb(
    set_cookies: tuple[tuple[str, str], ...], url: str, *, domain: str, politeness: str
) -> Changes | None:
    """What an answer changes in the jar: its ``Set-Cookie`` values (``(hop URL, header)``,
    every hop's) that RFC 6265 lets their hop set, from hops on the jar's hosts.

    Args:
        set_cookies: the answer's :attr:`~scrapeq.runtime.fetch.Response.set_cookies`.
        url: the job's URL.
        domain: the job's queue domain (the jar's): a hop on another host is taken when it
            has the same politeness key.
        politeness: the queue's ``politeness`` setting.

    Returns:
        ``{"set": [cookie, ...], "del": [[name, domain, path], ...]}`` (each key once, the
        last word of the answer on it; at most :data:`MAX_COOKIES` of each), or None when the
        answer changes nothing.
    """
    by_key: dict[tuple[Any, ...], tuple[str, list[Any]]] = {}
    for hop_url, header in set_cookies:
        if not _in_jar(hop_url, url, domain, politeness):
            continue
        for kind, item in _hop_changes(hop_url, [header]):
            key = tuple(item[i] for i in (_KEY if kind == "set" else (0, 1, 2)))
            by_key.pop(key, None)  # the newest last
            by_key[key] = (kind, item)
    if not by_key:
        return None
    changes: Changes = {
        "set": [item for kind, item in by_key.values() if kind == "set"][-MAX_COOKIES:],
        "del": [item for kind, item in by_key.values() if kind == "del"][-MAX_COOKIES:],
    }
    return changes
