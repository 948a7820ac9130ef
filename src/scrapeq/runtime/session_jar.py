"""A domain's cookie jar for ``session = sticky`` (issue 23): plain data, kept in Redis by the
scripts (``includes/exits.lua``: the domain's session exit and its jar) so any worker continues
a session; this module only reads a jar, sends it and takes a response's cookies into it.

A jar is JSON text: ``[[name, value, path, expires], ...]`` (``expires``: epoch seconds, or
null for a session cookie). Cookies are kept per domain (the queue's unit), so a cookie's
``Domain`` attribute is not consulted beyond the job's host: cookies set by a hop on another
host are not taken. Bounded: at most :data:`MAX_COOKIES` cookies and :data:`MAX_JAR` bytes of
text (the oldest dropped first). Cookies set by an earlier hop of the same fetch are not sent
on its later hops (the fetcher keeps none): they are sent from the next fetch on.
"""

from __future__ import annotations

import json
import time
from email.utils import parsedate_to_datetime
from http.cookies import CookieError, SimpleCookie
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq.engine.request import Request
from scrapeq.errors import InvalidRequest

__all__ = ["MAX_COOKIES", "MAX_JAR", "absorb", "jar_request"]

MAX_COOKIES: Final = 50
MAX_JAR: Final = 16_384

_Cookie = list[Any]  # [name, value, path, expires or None]


def _load(text: str | None) -> list[_Cookie]:
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    return [c for c in data if isinstance(c, list) and len(c) == 4 and isinstance(c[0], str)]


def _live(jar: list[_Cookie], now: float) -> list[_Cookie]:
    return [c for c in jar if c[3] is None or c[3] > now]


def _path_matches(cookie_path: str, path: str) -> bool:
    """RFC 6265 section 5.1.4."""
    if path == cookie_path:
        return True
    if path.startswith(cookie_path):
        return cookie_path.endswith("/") or path[len(cookie_path)] == "/"
    return False


def jar_request(request: Request, jar_text: str | None, url: str) -> Request:
    """``request`` with the jar's cookies for ``url`` added (the request's own win a name)."""
    path = urlsplit(url).path or "/"
    own = {n for n, _ in request.cookies}
    sent = [(c[0], c[1]) for c in _live(_load(jar_text), time.time())
            if c[0] not in own and _path_matches(c[2], path)]  # fmt: skip
    if not sent:
        return request
    try:
        return _with_cookies(request, [*sent, *request.cookies])
    except InvalidRequest:  # a value a Cookie header may not carry: leave those out
        kept = []
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


def _expires(morsel: Any, now: float) -> float | None:
    max_age = morsel["max-age"]
    if max_age:
        try:
            return now + int(max_age)
        except ValueError:
            pass
    if morsel["expires"]:
        try:
            return parsedate_to_datetime(morsel["expires"]).timestamp()
        except (TypeError, ValueError):
            return None
    return None


def absorb(jar_text: str | None, set_cookies: tuple[tuple[str, str], ...], url: str) -> str:
    """The jar after a response: its ``Set-Cookie`` values taken in (those of hops on the
    job's host), expired cookies dropped; JSON text within :data:`MAX_JAR` bytes."""
    now = time.time()
    host = urlsplit(url).hostname
    jar = {(c[0], c[2]): c for c in _live(_load(jar_text), now)}
    for hop_url, header in set_cookies:
        if urlsplit(hop_url).hostname != host:
            continue
        parsed: SimpleCookie = SimpleCookie()
        try:
            parsed.load(header)
        except CookieError:
            continue
        for name, morsel in parsed.items():
            path = morsel["path"] or "/"
            expires = _expires(morsel, now)
            jar.pop((name, path), None)
            if expires is None or expires > now:
                jar[(name, path)] = [name, morsel.value, path, expires]
    cookies = list(jar.values())[-MAX_COOKIES:]
    text = json.dumps(cookies, separators=(",", ":"))
    while len(text) > MAX_JAR and cookies:
        cookies = cookies[1:]
        text = json.dumps(cookies, separators=(",", ":"))
    return text
