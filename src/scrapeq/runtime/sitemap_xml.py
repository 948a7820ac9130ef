"""One sitemap file's content for :mod:`.sitemaps`: entry values (``lastmod``, ``priority``,
hosts), a streaming, hostile-XML-refusing parser of one file, and bounded gzip inflation.
Split from :mod:`.sitemaps`, which re-exports the public names."""

from __future__ import annotations

import datetime
import math
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, Final, Literal
from urllib.parse import urlsplit

from lxml import etree

__all__ = ["DEFAULT_PRIORITY", "host_key", "parse_lastmod", "parse_priority"]

DEFAULT_PRIORITY: Final = 0.5
"""The protocol's priority of an entry that gives none."""

_CHUNK: Final = 64 * 1024
_GZIP_MAGIC: Final = b"\x1f\x8b"
_GZIP_WBITS: Final = zlib.MAX_WBITS | 16
_ROOTS: Final = frozenset({"urlset", "sitemapindex"})
_AT: Final = re.compile(r",? line \d+, column \d+$")


# --- values ------------------------------------------------------------------------------------

_W3C: Final = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})"
    r"(?:[Tt](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?\s*([Zz]|[+-]\d{2}:?\d{2})?)?)?)?"
)


def parse_lastmod(text: str | None) -> int | None:
    """A W3C datetime as epoch seconds (UTC; no zone: UTC), or None when it is not one."""
    if not text:
        return None
    m = _W3C.fullmatch(text.strip())
    if m is None:
        return None
    year, month, day, hour, minute, second, _fraction, zone = m.groups()
    offset = datetime.timedelta(0)
    if zone and zone not in "Zz":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset = sign * datetime.timedelta(hours=int(digits[:2]), minutes=int(digits[2:]))
    try:
        when = datetime.datetime(
            int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
            int(second or 0), tzinfo=datetime.timezone(offset),
        )  # fmt: skip
    except ValueError:  # month 13, hour 25, an offset of a day or more
        return None
    return math.floor(when.timestamp())


def parse_priority(text: str | None) -> float:
    """A priority: 0.5 when missing or not a number; outside 0.0-1.0, clamped to it."""
    if not text:
        return DEFAULT_PRIORITY
    try:
        value = float(text.strip())
    except ValueError:
        return DEFAULT_PRIORITY
    if math.isnan(value):
        return DEFAULT_PRIORITY
    return min(1.0, max(0.0, value))


def host_key(url: str) -> tuple[str, int | None] | None:
    """A URL's host as sitemaps compare them: no leading ``www.``, the port only when it is
    not the scheme's default; None when the URL has no host (or a bad port)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").rstrip(".")
    if not host:
        return None
    if port == {"http": 80, "https": 443}.get(parts.scheme.lower()):
        port = None
    return host.removeprefix("www."), port


def _is_http(url: str) -> bool:
    return url.split(":", 1)[0].lower() in ("http", "https") and "://" in url


# --- one file's XML ----------------------------------------------------------------------------


class _Hostile(Exception):
    """The file declares entities or an external DTD."""


class _Broken(Exception):
    """The XML is malformed: ``line`` is where the parser stopped (0: unknown, at the end),
    ``items`` what was complete before it."""

    def __init__(self, line: int, reason: str, items: list[_Item] | None = None) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason
        self.items = items or []


@dataclass(frozen=True, slots=True)
class _Item:
    kind: Literal["url", "sitemap"]
    loc: str
    lastmod: str | None = None
    priority: str | None = None


def _local(tag: Any) -> str | None:
    if not isinstance(tag, str):
        return None
    try:
        name: str = etree.QName(tag).localname
    except ValueError:  # a start tag cut short ('sm:'), closed by the parser at the end
        return None
    return name


class _FileParser:
    """One file's XML, fed in chunks: its ``<url>`` or ``<sitemap>`` items, each read at its
    end tag and then dropped from the tree.

    A document cut short is closed by lxml at :meth:`close`: it adds an end event for every
    element left open, after the events of what was parsed. An entry those events close was
    cut (its loc, lastmod or priority may be too), so an entry counts only when its end tag
    came in a :meth:`feed`, or in a :meth:`close` that found the document complete. (libxml2
    parses an end tag as soon as its ``>`` has been fed; were one held back to the close of
    a broken file, that entry would be dropped with the cut one: the safe side.)"""

    def __init__(self, max_items: int) -> None:
        self._parser = etree.XMLPullParser(
            events=("start", "end"),
            resolve_entities=False,
            no_network=True,
            load_dtd=False,
            huge_tree=False,
            remove_comments=True,
            remove_pis=True,
        )
        self._max = max_items
        self.root: str | None = None  # "urlset" or "sitemapindex" once the root was seen
        self._root_el: Any = None
        self.count = 0
        self.full = False  # a further entry came after max_items: stop reading

    def feed(self, data: bytes) -> list[_Item]:
        """The items completed by ``data``.

        Raises:
            _Hostile: the DOCTYPE declares entities or names an external DTD.
            _Broken: the XML is malformed (with the items completed before the break).
        """
        try:
            self._parser.feed(data)
        except etree.XMLSyntaxError as exc:
            raise self._fail(exc) from None
        return self._drain()

    def close(self) -> list[_Item]:
        """The last items; raises :class:`_Broken` for a document that is not complete."""
        try:
            self._parser.close()
        except etree.XMLSyntaxError as exc:
            # the end events now pending close what the cut left open: no entry of them
            raise self._fail(exc, cut=True) from None
        return self._drain()

    def _fail(self, exc: etree.XMLSyntaxError, cut: bool = False) -> _Broken:
        reason = _AT.sub("", exc.msg or str(exc))  # the line is said once, first
        return _Broken(exc.lineno or 0, reason, self._drain(cut))

    def _drain(self, cut: bool = False) -> list[_Item]:
        """The items the pending events complete; none when ``cut`` (the end events are
        the parser's closing of a document cut short)."""
        items: list[_Item] = []
        for event, el in self._parser.read_events():
            if self.full:
                continue
            if event == "start":
                if self.root is None:
                    self._check_root(el)
                continue
            if cut:
                continue
            parent = el.getparent()
            if parent is None or parent.getparent() is not None:
                continue  # the root itself, or deeper than an entry: read with their entry
            name = _local(el.tag)
            if (self.root, name) in (("urlset", "url"), ("sitemapindex", "sitemap")):
                if self.count >= self._max:
                    self.full = True
                    continue
                self.count += 1
                item = _item(el, "url" if name == "url" else "sitemap")
                if item is not None:
                    items.append(item)
            el.clear()
            while el.getprevious() is not None:
                del parent[0]
        return items

    def _check_root(self, el: Any) -> None:
        info = el.getroottree().docinfo
        dtd = info.internalDTD
        if dtd is not None and any(True for _ in dtd.iterentities()):
            raise _Hostile("its DOCTYPE declares entities (entity expansion is refused)")
        if info.system_url or info.public_id:
            raise _Hostile("its DOCTYPE names an external DTD (external entities are refused)")
        name = _local(el.tag)
        if name not in _ROOTS:
            raise _Broken(el.sourceline or 1, f"not a sitemap: the root element is <{name}>")
        self.root = name
        self._root_el = el

    @property
    def held(self) -> int:
        """Elements the tree holds under the root now (read entries are dropped)."""
        return 0 if self._root_el is None else len(self._root_el)


def _item(el: Any, kind: Literal["url", "sitemap"]) -> _Item | None:
    values: dict[str, str] = {}
    for child in el:
        name = _local(child.tag)
        if name in ("loc", "lastmod", "priority") and name not in values:
            values[name] = (child.text or "").strip()
    loc = values.get("loc")
    if not loc:
        return _Item(kind, "")
    return _Item(kind, loc, values.get("lastmod"), values.get("priority"))


# --- gzip --------------------------------------------------------------------------------------


class _TooLarge(Exception):
    pass


def _inflate(stream: IO[bytes], limit: int) -> Iterator[bytes]:
    """The gzip ``stream`` inflated, 64 KiB at most a step (members concatenated; bytes after
    the last member that do not start another are ignored). Raises :class:`_TooLarge` past
    ``limit`` bytes, :class:`zlib.error` when it is not gzip or is cut short."""
    inflater = zlib.decompressobj(_GZIP_WBITS)
    total = 0
    raw = b""
    while True:
        if not raw:
            raw = stream.read(_CHUNK)
        # No input left: what zlib still holds comes out with empty input.
        out = inflater.decompress(raw, _CHUNK)
        if not raw and not out:
            break
        raw = inflater.unconsumed_tail
        total += len(out)
        if total > limit:
            raise _TooLarge
        if out:
            yield out
        if inflater.eof:
            raw = inflater.unused_data or stream.read(_CHUNK)
            if not raw.startswith(_GZIP_MAGIC):
                return  # the end, or padding after the last member
            inflater = zlib.decompressobj(_GZIP_WBITS)
    if not inflater.eof:
        raise zlib.error("the gzip stream is cut short")
