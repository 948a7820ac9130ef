"""Links of a fetched HTML page, for crawls: absolute http(s) URLs, bad links counted.

:func:`extract` lists the links a crawl may follow from a :class:`~scrapeq.runtime.fetch.Response`;
:func:`extract_counted` also says how many hrefs were skipped and why. Both are pure (no
I/O) and never raise on a bad link: a link that cannot be followed is skipped and counted.

What is a link:
    * ``<a href>``, ``<area href>``, and ``<link href>`` whose ``rel`` has the token
      ``next`` or ``canonical`` (tokens are case-insensitive); ``<a>`` without ``href`` is
      not a link, ``<a href="">`` is one to the page itself.
    * resolved against the document's base URL: the first ``<base href>``, itself resolved
      against the final URL after redirects (``response.url``); a ``<base>`` that does not
      resolve to a valid http(s) URL is ignored, as browsers do.

What is skipped (:attr:`Extracted.skipped`, by reason):
    * ``nofollow``: ``rel`` has the token ``nofollow`` and ``respect_nofollow`` is set;
    * ``scheme``: a scheme other than http and https (``javascript:``, ``mailto:``,
      ``tel:``, ``data:``, ``ftp:`` ...);
    * ``invalid``: no valid http(s) URL comes out (a bad host or port, an unclosed IPv6
      bracket, over 8 KiB ...: whatever :func:`~scrapeq.engine.model.urls.parse_target` refuses).

Each link is given once, in document order, in :func:`~scrapeq.engine.model.urls.parse_target`'s
normal form (lower-case scheme and host, punycode, no default port) with its fragment
kept: whether ``#a`` and ``#b`` are one page is :func:`~scrapeq.engine.model.urls.canonical_url`'s
question (``canonical_keep_fragments``). Spaces and non-ASCII characters are
percent-encoded as browsers do (the path as UTF-8, the query in the page's encoding).
Private addresses are not refused here: whether to enqueue them is ``allow_private``'s.

The page is HTML when its Content-Type is ``text/html`` or ``application/xhtml+xml``, or,
without a Content-Type, when its body starts like HTML (``<!doctype html``, ``<html`` ...);
any other response gives no links. The status does not matter: a 404 page's body has
links like any other (the crawl decides whether it reads failed pages). The text is
decoded as w3lib's ``html_to_unicode`` does, as browsers do: a byte-order mark, else the
header's charset, else a ``<meta charset>``, else UTF-8; an unknown charset is passed
over, undecodable bytes become U+FFFD.

The parser is selectolax's Lexbor (an HTML5 parser in C): the fastest of the candidates
measured by ``bench/link_extract.py`` (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from selectolax.lexbor import LexborHTMLParser
from w3lib.encoding import html_to_unicode
from w3lib.url import safe_url_string

from scrapeq.engine.model.urls import MAX_URL_BYTES, parse_target
from scrapeq.errors import InvalidURL
from scrapeq.runtime.fetch import Response

__all__ = [
    "HTML_TYPES",
    "SKIP_REASONS",
    "Extracted",
    "extract",
    "extract_counted",
    "is_html",
    "resolve_link",
]

HTML_TYPES: Final = frozenset({"text/html", "application/xhtml+xml"})
"""Media types whose bodies are parsed for links."""

SKIP_REASONS: Final = ("nofollow", "scheme", "invalid")
"""Why a link is skipped (:attr:`Extracted.skipped`'s keys)."""

_SELECTOR: Final = "a[href], area[href], link[href]"
_LINK_RELS: Final = frozenset({"next", "canonical"})
# A scheme: letters, digits, "+", "-", "." after a letter, then ":" (RFC 3986, section 3.1).
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# The characters a URL may hold as they are: no quoting needed (RFC 3986 and "%").
_SAFE = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*")
# Removed from anywhere in an href, as the URL Standard does (ASCII tab and newlines).
_TAB_OR_NEWLINE = str.maketrans("", "", "\t\n\r")
_HTML_WHITESPACE = " \t\n\r\f"
_DOT_SEGMENT = re.compile(r"/\.\.?(?:/|$)")
_BEFORE_QUERY = re.compile(r"[^?#]*")
_SNIFF = (b"<!doctype html", b"<html", b"<head", b"<body", b"<title", b"<!--")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class Extracted:
    """The links of a page and what was skipped.

    Attributes:
        links: absolute http(s) URLs, each once, in document order.
        skipped: hrefs not followed, by reason (:data:`SKIP_REASONS`); only reasons that
            occurred are present.
        duplicates: links given again on the page (after the first), not repeated in
            ``links``.
        html: whether the response was parsed as HTML; False means no link was looked for.
    """

    links: list[str] = field(default_factory=list)
    skipped: Mapping[str, int] = field(default_factory=dict)
    duplicates: int = 0
    html: bool = False

    @property
    def skipped_total(self) -> int:
        """How many hrefs were skipped, all reasons together."""
        return sum(self.skipped.values())


def extract(response: Response, *, respect_nofollow: bool = False) -> list[str]:
    """Return the links of an HTML response: absolute http(s) URLs, each once.

    Args:
        response: a fetched response; its ``url`` (after redirects) is the base URL
            unless the page has a ``<base href>``.
        respect_nofollow: skip links whose ``rel`` has ``nofollow``.

    Returns:
        The links in document order; empty for a response that is not HTML. Never raises
        on a bad link (see :func:`extract_counted` for the counts).
    """
    return extract_counted(response, respect_nofollow=respect_nofollow).links


def extract_counted(response: Response, *, respect_nofollow: bool = False) -> Extracted:
    """Return the links of an HTML response with the counts of what was skipped.

    Args:
        response: a fetched response.
        respect_nofollow: skip (and count) links whose ``rel`` has ``nofollow``.

    Returns:
        The links, the skipped hrefs by reason and the duplicates; ``html=False`` and no
        links for a response that is not HTML.
    """
    if not _is_html(response):
        return Extracted()
    encoding, text = html_to_unicode(response.headers.get("Content-Type"), response.body)
    tree = LexborHTMLParser(text)
    base = _base_url(tree, response.url)
    links: dict[str, None] = {}
    resolved: dict[str, tuple[str | None, str]] = {}  # href -> _absolute's answer
    skipped: Counter[str] = Counter()
    duplicates = 0
    for node in tree.css(_SELECTOR):
        attrs = node.attributes
        rel = attrs.get("rel")
        rels = rel.lower().split() if rel else ()
        if node.tag == "link" and _LINK_RELS.isdisjoint(rels):
            continue  # a style sheet, an icon ...: not a page to follow
        if respect_nofollow and "nofollow" in rels:
            skipped["nofollow"] += 1
            continue
        href = attrs.get("href") or ""
        answer = resolved.get(href)
        if answer is None:
            answer = resolved[href] = _absolute(base, href, encoding)
        url, reason = answer
        if url is None:
            skipped[reason] += 1
        elif url in links:
            duplicates += 1
        else:
            links[url] = None
    return Extracted(list(links), dict(skipped), duplicates, html=True)


def resolve_link(base_url: str, href: str) -> str | None:
    """``href`` resolved against ``base_url`` as a page's link is (RFC 3986): an absolute
    http(s) URL, or None when it cannot be followed (another scheme, invalid, too long)."""
    try:
        base: _Base | None = _Base.parse(base_url)
    except InvalidURL:
        base = None
    url, _ = _absolute(base, href, "utf-8")
    return url


def is_html(response: Response) -> bool:
    """Whether ``response`` is parsed as HTML (its Content-Type, else its first bytes)."""
    return _is_html(response)


def _is_html(response: Response) -> bool:
    """By the Content-Type's media type; without one, by how the body starts."""
    content_type = response.headers.get("Content-Type")
    if content_type is not None:
        return content_type.partition(";")[0].strip().lower() in HTML_TYPES
    head = response.body[:1024].removeprefix(_BOM).lstrip().lower()
    return head.startswith(_SNIFF)


def _base_url(tree: LexborHTMLParser, url: str) -> _Base | None:
    """The document's base URL: the first ``<base href>`` if it resolves, else ``url``.

    None when ``url`` itself is not a valid http(s) URL (a hand-made response): then only
    absolute links can be resolved.
    """
    try:
        base = _Base.parse(url)
    except InvalidURL:
        return None
    node = tree.css_first("base[href]")
    if node is not None:
        found, _ = _absolute(base, node.attributes.get("href") or "", "utf-8")
        if found is not None:
            return _Base.parse(found)
    return base


@dataclass(frozen=True, slots=True)
class _Base:
    """A base URL in parts: ``origin`` (``scheme://authority``), ``path``, ``query``."""

    scheme: str
    origin: str
    path: str
    query: str

    @classmethod
    def parse(cls, url: str) -> _Base:
        normal = parse_target(url, allow_private=True).url
        scheme, _, rest = normal.partition("://")
        slash = rest.index("/")  # the normal form always has a path
        path, _, query = rest[slash:].partition("?")
        return cls(scheme, normal[: len(scheme) + 3 + slash], path, query)


def _absolute(base: _Base | None, href: str, encoding: str) -> tuple[str | None, str]:
    """``(url, "")`` for a link that can be followed, else ``(None, reason)``.

    ``encoding`` is the page's, for percent-encoding the query.
    """
    href = href.strip(_HTML_WHITESPACE)
    safe = href.isascii() and _SAFE.fullmatch(href) is not None  # the common case
    if not safe:
        href = href.translate(_TAB_OR_NEWLINE)
    scheme = _SCHEME.match(href)
    if scheme is not None and scheme.group().lower() not in ("http:", "https:"):
        return None, "scheme"
    if len(href) > MAX_URL_BYTES:
        return None, "invalid"
    try:
        if not safe:
            href = safe_url_string(_backslashes(href), encoding)
        if scheme is None and not href.startswith("//"):
            url = _relative(base, href)
        else:
            url = _absolute_ref(base, href)
    except ValueError:  # InvalidURL, a bad IPv6 bracket, an IDNA label ...
        return None, "invalid"
    if len(url) > MAX_URL_BYTES:
        return None, "invalid"
    return url, ""


def _relative(base: _Base | None, href: str) -> str:
    """Resolve a relative-path reference (RFC 3986, section 5.2.2): same origin."""
    if base is None:
        raise InvalidURL(href, "no base URL to resolve a relative link against")
    rest, _, fragment = href.partition("#")
    path, has_query, query = rest.partition("?")
    if path.startswith("/"):
        pass
    elif path:
        path = base.path[: base.path.rfind("/") + 1] + path
    else:
        path = base.path
        if not has_query:
            query = base.query
    return _assemble(base.origin, _remove_dot_segments(path), query, fragment)


def _absolute_ref(base: _Base | None, href: str) -> str:
    """Resolve an absolute URL or a network-path reference (``//host/path``)."""
    if href.startswith("//"):
        if base is None:
            raise InvalidURL(href, "no base URL to resolve a relative link against")
        href = f"{base.scheme}:{href}"
    if base is not None and href.startswith(base.origin):
        rest = href[len(base.origin) :]
        if not rest or rest[0] in "/?#":  # the base's own origin, spelt as it normalises
            return _relative(base, rest if rest.startswith("/") else "/" + rest)
    fragment = href.partition("#")[2]
    normal = parse_target(href, allow_private=True).url
    scheme, _, rest = normal.partition("://")
    slash = rest.index("/")
    path, _, query = rest[slash:].partition("?")
    return _assemble(normal[: len(scheme) + 3 + slash], _remove_dot_segments(path), query, fragment)


def _assemble(origin: str, path: str, query: str, fragment: str) -> str:
    """The URL in normal form: an empty query or fragment is dropped, as parse_target does."""
    url = origin + path
    if query:
        url += "?" + query
    if fragment:
        url += "#" + fragment
    return url


def _remove_dot_segments(path: str) -> str:
    """RFC 3986, section 5.2.4, for an absolute path (``/a/./b/../c`` -> ``/a/c``)."""
    if "." not in path or not _DOT_SEGMENT.search(path):
        return path
    out: list[str] = []
    segments = path.split("/")
    for segment in segments[1:]:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")  # "/a/.." is the directory "/", not the file "/a"
    return "/" + "/".join(out)


def _backslashes(href: str) -> str:
    """``\\`` is ``/`` before the query in http(s) URLs (the URL Standard)."""
    if "\\" not in href:
        return href
    end = len(_BEFORE_QUERY.match(href).group())  # type: ignore[union-attr]
    return href[:end].replace("\\", "/") + href[end:]
