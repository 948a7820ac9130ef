"""What a job sends: :class:`Request`, a method, headers, a body, cookies and ``meta``.

A job without one is today's ``GET`` of its URL, and is stored exactly as before: a request
that is a plain ``GET`` (no headers, body, cookies or meta) is never written. Any other is
kept in the stored job as one JSON text (field ``request``, compact ``q``; the scripts never
decode it, as they never decode a payload), in the form :meth:`Request.to_text` writes::

    {"method": "POST", "headers": [["K", "V"], ...], "body": "text" | "body64": "base64",
     "cookies": [["k", "v"], ...], "meta": <any JSON>}

with each member left out at its default (``GET``, none, empty). A body that is UTF-8 text is
kept as text, any other as base64.

De-duplication (:func:`request_fingerprint64`) hashes the method and the body with the
canonical URL, as Scrapy's request fingerprint does; a ``GET`` without a body keeps the URL's
own fingerprint (:func:`~scrapeq.engine.model.urls.fingerprint64`), so existing seen-sets and held
fingerprints still match. Headers, cookies and meta are not part of it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

from scrapeq.engine.config.limits import check_json_depth
from scrapeq.engine.model.urls import REDACTED, canonical_url, fingerprint64, redact_text
from scrapeq.errors import InvalidRequest

__all__ = ["SECRET_HEADERS", "Request", "is_secret_header", "redact_value", "request_fingerprint64"]

#: RFC 9110 token: a method and a field name.
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: A field value: visible characters, space, tab and obs-text but its C1 controls (no CR, LF,
#: NUL, DEL, nor U+0080-U+009F such as NEL ``\x85``: some parsers read them as line breaks).
_FIELD_VALUE: Final = re.compile(r"[\t\x20-\x7e\xa0-\xff]*")
#: RFC 6265 cookie-octet (a value may be quoted as a whole).
_COOKIE_VALUE: Final = re.compile(r'"?[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*"?')
#: Headers the fetcher writes from the URL and the body: a job may not set them.
_FORBIDDEN: Final = frozenset({"host", "content-length", "transfer-encoding", "connection"})
#: Headers whose values are secrets (lower-case names), the one list of them: shown as ``***``
#: (job show, dead list, the dashboard), in scrapeq's own requests and in any stored value
#: :func:`redact_value` is given (a Scrapy request in a job's payload); dropped on a redirect
#: to another origin (runtime/outgoing.py).
SECRET_HEADERS: Final = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "api-key",
        "x-api-key",
        "x-auth-token",
        "x-access-token",
        "x-csrf-token",
        "x-xsrf-token",
        "private-token",
        "x-goog-api-key",
        "x-amz-security-token",
        "ocp-apim-subscription-key",
    }
)
#: Keys whose values are a cookie jar (Scrapy's ``Request.cookies``): each cookie's value hidden.
_COOKIE_KEYS: Final = frozenset({"cookies"})
MAX_HEADERS: Final = 100
MAX_FIELD: Final = 8192  # characters of one header value, or of one cookie
MAX_METHOD: Final = 32

Pairs = tuple[tuple[str, str], ...]
PairsLike = Mapping[str, str] | Iterable[tuple[str, str]] | Iterable[list[str]]


def _pairs(name: str, value: PairsLike | None) -> Pairs:
    if value is None:
        return ()
    items = value.items() if isinstance(value, Mapping) else value
    out: list[tuple[str, str]] = []
    for item in items:
        pair = tuple(item)
        if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise InvalidRequest(name, f"expected name/value text pairs, got {item!r:.60}")
        out.append((pair[0], pair[1]))
    return tuple(out)


def _check_headers(headers: Pairs) -> None:
    if len(headers) > MAX_HEADERS:
        raise InvalidRequest("headers", f"{len(headers)} headers: at most {MAX_HEADERS}")
    for name, value in headers:
        if not _TOKEN.fullmatch(name):
            raise InvalidRequest("headers", f"header name {name!r:.60} is not an RFC 9110 token")
        if name.lower() in _FORBIDDEN:
            raise InvalidRequest("headers", f"{name} is set by the fetcher, not by a job")
        if not _FIELD_VALUE.fullmatch(value) or len(value) > MAX_FIELD:
            raise InvalidRequest(
                "headers",
                f"value of {name} has a CR, LF or other control character (C0, DEL or C1), "
                f"or is over {MAX_FIELD} characters",
            )


def _check_cookies(cookies: Pairs) -> None:
    if len(cookies) > MAX_HEADERS:
        raise InvalidRequest("cookies", f"{len(cookies)} cookies: at most {MAX_HEADERS}")
    for name, value in cookies:
        if not _TOKEN.fullmatch(name):
            raise InvalidRequest("cookies", f"cookie name {name!r:.60} is not an RFC 6265 token")
        if not _COOKIE_VALUE.fullmatch(value) or len(value) > MAX_FIELD:
            raise InvalidRequest(
                "cookies", f"value of cookie {name} has a character a cookie may not hold"
            )


def _method(method: str) -> str:
    if not isinstance(method, str) or not _TOKEN.fullmatch(method) or len(method) > MAX_METHOD:
        raise InvalidRequest("method", f"{method!r:.60} is not an HTTP method (an RFC 9110 token)")
    return method.upper()


def _body(body: bytes | str | None, json_body: Any, form: PairsLike | None) -> bytes:
    given = [x is not None for x in (body, form)] + [json_body is not _UNSET]
    if sum(given) > 1:
        raise InvalidRequest("body", "give one of body, json and form")
    if json_body is not _UNSET:
        return _json_text("json", json_body).encode()
    if form is not None:
        return urlencode(_pairs("form", form)).encode()
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body)
    raise InvalidRequest("body", f"expected bytes or text, got {type(body).__name__}")


def _json_text(name: str, value: Any) -> str:
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidRequest(name, f"not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidRequest(name, "JSON nested too deeply to encode") from None
    check_json_depth(name, text)
    return text


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Final = _Unset()


@dataclass(frozen=True, slots=True, init=False)
class Request:
    """One HTTP request a job sends (immutable). ``Request(url)`` is today's plain ``GET``.

    Args:
        url: the http(s) URL (validated by ``Queue.prepare``, like a URL).
        method: an RFC 9110 token, upper-cased (default ``GET``).
        headers: a mapping or name/value pairs (repeats kept, in order); names are tokens,
            values have no CR, LF or other control character; ``Host``, ``Content-Length``,
            ``Transfer-Encoding`` and ``Connection`` are the fetcher's. They replace the
            worker's defaults of the same name (``User-Agent``, ``Accept``).
        body: bytes, or text (sent as UTF-8).
        json: a JSON value for the body (``Content-Type: application/json`` unless given).
        form: fields for an ``application/x-www-form-urlencoded`` body (the same header).
        cookies: a mapping or pairs, sent in a ``Cookie`` header.
        meta: any JSON value: reaches the handler (``job.meta``) and the results line.

    Raises:
        InvalidRequest: a bad method, header, cookie, body or meta (names it); more than one of
            ``body``, ``json`` and ``form``.
    """

    url: str
    method: str
    headers: Pairs
    body: bytes
    cookies: Pairs
    meta: Any

    def __init__(
        self,
        url: str,
        *,
        method: str = "GET",
        headers: PairsLike | None = None,
        body: bytes | str | None = None,
        json: Any = _UNSET,
        form: PairsLike | None = None,
        cookies: PairsLike | None = None,
        meta: Any = None,
    ) -> None:
        if not isinstance(url, str):
            raise InvalidRequest("url", f"expected text, got {type(url).__name__}")
        pairs = _pairs("headers", headers)
        content = _body(body, json, form)
        kind = "application/json" if json is not _UNSET else None
        if form is not None:
            kind = "application/x-www-form-urlencoded"
        if kind and not any(n.lower() == "content-type" for n, _ in pairs):
            pairs += (("Content-Type", kind),)
        _check_headers(pairs)
        jar = _pairs("cookies", cookies)
        _check_cookies(jar)
        if meta is not None:
            _json_text("meta", meta)
        set_ = object.__setattr__
        set_(self, "url", url)
        set_(self, "method", _method(method))
        set_(self, "headers", pairs)
        set_(self, "body", content)
        set_(self, "cookies", jar)
        set_(self, "meta", meta)

    @property
    def plain(self) -> bool:
        """Whether this is a plain ``GET`` (stored as no request at all)."""
        return (
            self.method == "GET"
            and not self.headers
            and not self.body
            and not self.cookies
            and self.meta is None
        )

    def to_text(self) -> str | None:
        """The stored form (module docstring), ASCII only; None for a plain ``GET``."""
        if self.plain:
            return None
        out: dict[str, Any] = {}
        if self.method != "GET":
            out["method"] = self.method
        if self.headers:
            out["headers"] = [list(p) for p in self.headers]
        if self.body:
            try:
                out["body"] = self.body.decode("utf-8")
            except UnicodeDecodeError:
                out["body64"] = base64.b64encode(self.body).decode()
        if self.cookies:
            out["cookies"] = [list(p) for p in self.cookies]
        if self.meta is not None:
            out["meta"] = self.meta
        return json.dumps(out, separators=(",", ":"))

    @classmethod
    def from_text(cls, url: str, text: str) -> Request:
        """Read a stored form back (the job's URL given apart)."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise InvalidRequest("request", "stored request is not a JSON object")
        return cls.from_fields({"url": url, **data}, "request")

    @classmethod
    def from_fields(cls, data: Mapping[str, Any], name: str = "request") -> Request:
        """A request from a JSON object (``enqueue --requests``' lines, the stored form):
        ``url``, ``method``, ``headers``, ``body`` (text) or ``body64`` (base64) or ``json``
        or ``form``, ``cookies``, ``meta``.

        Raises:
            InvalidRequest: an unknown member, or a bad value (names it).
        """
        unknown = sorted(set(data) - _MEMBERS)
        if unknown:
            raise InvalidRequest(name, f"unknown member {unknown[0]!r:.40} (known: url, method, "
                              "headers, body, body64, json, form, cookies, meta)")  # fmt: skip
        if "url" not in data:
            raise InvalidRequest(name, "has no url")
        body = data.get("body")
        if "body64" in data:
            if body is not None:
                raise InvalidRequest(name, "give one of body and body64")
            body = _unbase64(data["body64"])
        elif body is not None and not isinstance(body, str):
            raise InvalidRequest("body", "must be text (body64: base64 of bytes)")
        return cls(
            data["url"],
            method=data.get("method", "GET"),
            headers=_pairs_of(data.get("headers"), "headers"),
            body=body,
            json=data.get("json", _UNSET),
            form=_pairs_of(data.get("form"), "form"),
            cookies=_pairs_of(data.get("cookies"), "cookies"),
            meta=data.get("meta"),
        )

    def shown(self) -> dict[str, Any]:
        """A view for people and listings (``job show``): secret header values and cookie
        values as ``***``, the body as its size, ``meta`` as :func:`redact_value` shows it
        (the credentials of a ``meta["proxy"]`` URL)."""
        return {
            "method": self.method,
            "headers": [[n, REDACTED if is_secret_header(n) else v] for n, v in self.headers],
            "body_bytes": len(self.body),
            "cookies": [[n, REDACTED] for n, _ in self.cookies],
            "meta": redact_value(self.meta),
        }


def is_secret_header(name: str) -> bool:
    """Whether a header's value is a secret (:data:`SECRET_HEADERS`, any case)."""
    return name.lower() in SECRET_HEADERS


def redact_value(value: Any) -> Any:
    """A stored JSON value as listings show it: a copy with every secret it holds as ``***``.

    The one rule for what a stored request holds (a job's payload, as Scrapy on scrapeq stores
    a request's ``to_dict``; a request's ``meta``): under a key that names a secret header
    (:data:`SECRET_HEADERS`: ``Authorization``, ``Proxy-Authorization``, ``Cookie``,
    ``Set-Cookie`` ..., any case) every value; under ``cookies`` each cookie's value (a name
    to value mapping, a list of ``{"name", "value", ...}`` objects or of pairs); a
    ``[name, value]`` pair whose name is a secret header, its value; in every text, the user
    and password of a URL (``meta["proxy"]``) and a ``password=`` parameter
    (:func:`~scrapeq.engine.model.urls.redact_text`). Anything else is unchanged; the stored value
    itself is never changed (the request is sent again with its secrets).
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            name = key.lower() if isinstance(key, str) else ""
            if name in SECRET_HEADERS:
                out[key] = _all_hidden(item)
            elif name in _COOKIE_KEYS:
                out[key] = _cookies_hidden(item)
            else:
                out[key] = redact_value(item)
        return out
    if isinstance(value, list | tuple):
        if len(value) == 2 and isinstance(value[0], str) and is_secret_header(value[0]):
            return [value[0], _all_hidden(value[1])]
        return [redact_value(item) for item in value]
    return value


def _all_hidden(value: Any) -> Any:
    """Every value in ``value`` as ``***`` (a header's list of values keeps its length)."""
    if isinstance(value, list | tuple):
        return [REDACTED for _ in value]
    if isinstance(value, dict):
        return dict.fromkeys(value, REDACTED)
    return REDACTED


def _cookies_hidden(value: Any) -> Any:
    """A cookie jar with each cookie's value as ``***`` (its names, domains and paths kept)."""
    if isinstance(value, dict):
        return dict.fromkeys(value, REDACTED)
    if isinstance(value, list | tuple):
        out: list[Any] = []
        for cookie in value:
            if isinstance(cookie, dict):
                shown = redact_value(cookie)
                out.append({**shown, "value": REDACTED} if "value" in cookie else shown)
            elif isinstance(cookie, list | tuple) and len(cookie) == 2:
                out.append([cookie[0], REDACTED])
            else:
                out.append(REDACTED)
        return out
    return REDACTED


_MEMBERS: Final = frozenset(
    {"url", "method", "headers", "body", "body64", "json", "form", "cookies", "meta"}
)


def _pairs_of(value: Any, name: str) -> PairsLike | None:
    if value is None or isinstance(value, Mapping | list):
        return value
    raise InvalidRequest(name, f"expected an object or a list of pairs, got {type(value).__name__}")


def _unbase64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise InvalidRequest("body64", "must be base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("body64", "is not valid base64") from None


def request_fingerprint64(
    url: str, method: str = "GET", body: bytes = b"", **canonical: bool
) -> int:
    """The 64-bit de-duplication fingerprint of a request, signed (as ``fingerprint64``).

    A ``GET`` without a body: the URL's :func:`~scrapeq.engine.model.urls.fingerprint64`, unchanged.
    Any other: the first 8 bytes of ``SHA-1(method + " " + canonical_url + "\\n" + body)``
    (a canonical URL never starts with a method and a space, so the two never meet).
    ``canonical``: :func:`~scrapeq.engine.model.urls.canonical_url`'s keyword arguments.
    """
    if method == "GET" and not body:
        return fingerprint64(url, **canonical)
    text = f"{method} {canonical_url(url, **canonical)}\n".encode() + body
    return int.from_bytes(
        hashlib.sha1(text, usedforsecurity=False).digest()[:8], "big", signed=True
    )
