"""Sitemaps (the sitemaps.org protocol 0.9): urlsets and sitemap indexes, read as streams.

:class:`SitemapReader` fetches sitemap files through the worker's :class:`.fetch.Fetcher`
(its total deadline, redirects, proxies and SSRF guard; ``allow_private`` as the settings
say) and yields their page entries (:class:`Entry`: ``loc``, ``lastmod`` in epoch seconds,
``priority``) in batches, as each file is parsed.

How a file is read, and what bounds it:

* The body is downloaded *as sent* (``Accept-Encoding: identity``, no transport
  decompression) into a spooled temporary file: up to 1 MiB in memory, the rest on disk, and
  at most ``Limits.bytes`` (the protocol's 50 MB). It is then parsed in 64 KiB chunks by an
  :class:`lxml.etree.XMLPullParser` (``resolve_entities=False``, ``no_network=True``,
  ``load_dtd=False``, ``huge_tree=False``); each ``<url>`` is read when its end tag arrives and
  then cleared with the siblings before it, so a file never sits in memory as a tree.
* **gzip** is recognised by its magic bytes (``1f 8b``), whatever the Content-Type or the
  name says (a ``.xml.gz`` a server decompressed on the fly is plain XML). A gzip file is
  first inflated once without being kept, only counting bytes: one that inflates past
  ``Limits.bytes`` is a **gzip bomb**, refused whole (an error naming the sitemap; nothing
  from it is used). Every inflation step is bounded to 64 KiB of output.
* The protocol's limits: more than ``Limits.urls`` (50,000) ``<url>`` entries, or a plain
  file over ``Limits.bytes``: a warning naming the file; the entries before the limit are
  kept and the rest of the file is refused.
* **Hostile XML**: a ``DOCTYPE`` that declares entities (entity expansion, "billion laughs")
  or names an external DTD (external entities) is refused with an error naming the sitemap,
  before any entry of the file is read: nothing from it is used. Entities are never expanded
  and nothing is loaded from the network or the disk in any case.
* **Malformed XML**: an error ``line N: <the parser's reason>``. The entries whose
  ``</url>`` came before the break are kept (each was complete); nothing after it is read.
  An entry a file cut short ends inside is not kept (lxml closes what was left open, but its
  ``loc``, ``lastmod`` or ``priority`` may be cut short: ``sitemap_xml._FileParser``).
* A sitemap index's ``<sitemap><loc>`` children are read in turn (depth first, in the
  file's order): nested at most ``Limits.depth`` (3) index levels below the first file, at
  most ``Limits.files`` (1,000) files in one read, each file once.

What an entry must be (else it is skipped and counted by reason, see :class:`Tally`):

* ``loc``: an absolute ``http``/``https`` URL (``not_http``) on the sitemap's own host
  (``cross_host``), where the host is compared without a leading ``www.`` and with its port
  (``example.com`` and ``www.example.com`` match; ``:8080`` does not match the default
  port). A sitemap found through a host's robots.txt may list that host's pages (the
  protocol's cross-submission through robots.txt): the host the pages must be on is then the
  robots.txt's. An index's child sitemaps must be on that host or on the index's own host.
* ``lastmod``: a W3C datetime (``2024``, ``2024-05``, ``2024-05-01``,
  ``2024-05-01T10:20Z``, ``...T10:20:30.5+02:00``); no zone means UTC. Anything else is
  ``None`` (counted as ``bad_lastmod``, the entry kept).
* ``priority``: a number, 0.5 when missing or not a number; outside 0.0-1.0 it is clamped
  to the range (the entry kept).
"""

from __future__ import annotations

import logging
import re
import tempfile
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final, Literal

import aiohttp

from scrapeq.engine.model.request import Request
from scrapeq.errors import InvalidURL, ScrapeqError
from scrapeq.runtime.classify import BlockedAddress
from scrapeq.runtime.fetch import Download, Fetcher
from scrapeq.runtime.sitemap_xml import (
    DEFAULT_PRIORITY,
    _Broken,
    _FileParser,
    _Hostile,
    _inflate,
    _is_http,
    _Item,
    _TooLarge,
    host_key,
    parse_lastmod,
    parse_priority,
)

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_BYTES",
    "MAX_DEPTH",
    "MAX_FILES",
    "MAX_URLS",
    "Entry",
    "Limits",
    "Problem",
    "SitemapReader",
    "Source",
    "Tally",
    "parse_lastmod",
    "parse_priority",
]

log = logging.getLogger(__name__)

MAX_URLS: Final = 50_000
"""The protocol's limit of URLs in one sitemap file."""
MAX_BYTES: Final = 50 * 1024 * 1024
"""The protocol's limit of one file's uncompressed size (50 MB, taken as MiB)."""
MAX_DEPTH: Final = 3
"""Index levels followed below the first file."""
MAX_FILES: Final = 1000
"""Sitemap files read in one :meth:`SitemapReader.read`."""

_CHUNK: Final = 64 * 1024
_SPOOL: Final = 1024 * 1024  # bytes of a download kept in memory before it goes to disk
_GZIP_MAGIC: Final = b"\x1f\x8b"
_GZIP_WBITS: Final = zlib.MAX_WBITS | 16
_ACCEPT: Final = "application/xml,text/xml;q=0.9,application/gzip;q=0.8,*/*;q=0.5"
_REQUEST: Final = Request(
    "https://sitemap.invalid/",  # the fetcher sends to the URL it is given, not this one
    headers={"Accept": _ACCEPT, "Accept-Encoding": "identity"},
)
_ROOTS: Final = frozenset({"urlset", "sitemapindex"})
_AT: Final = re.compile(r",? line \d+, column \d+$")


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one read (the protocol's by default; smaller ones for tests)."""

    urls: int = MAX_URLS
    bytes: int = MAX_BYTES
    depth: int = MAX_DEPTH
    files: int = MAX_FILES


@dataclass(frozen=True, slots=True)
class Source:
    """A sitemap to read; ``site``: a URL on the host its pages must be on (the robots.txt
    that named it), None: the sitemap's own host."""

    url: str
    site: str | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    """One page of a sitemap.

    Attributes:
        loc: the page's URL, as the sitemap gives it (stripped).
        lastmod: its ``lastmod`` in epoch seconds (UTC), or None.
        priority: its ``priority``, 0.0-1.0 (0.5 when not given).
    """

    loc: str
    lastmod: int | None
    priority: float

    def meta(self) -> dict[str, Any]:
        """What a job carries for a later revisit: ``sitemap_priority``, and ``lastmod``
        when the sitemap gave a valid one."""
        out: dict[str, Any] = {"sitemap_priority": self.priority}
        if self.lastmod is not None:
            out["lastmod"] = self.lastmod
        return out


@dataclass(frozen=True, slots=True)
class Problem:
    """A sitemap that could not be read in whole: ``error`` (nothing, or nothing after the
    break, was read from it) or ``warning`` (a limit cut it, or parts were not followed).
    ``fetch`` marks an error of the network or the server rather than of the content."""

    sitemap: str
    message: str
    level: Literal["error", "warning"] = "error"
    fetch: bool = False

    def line(self) -> str:
        return f"sitemap {self.sitemap}: {self.message}"


@dataclass
class Tally:
    """What a read saw so far.

    Attributes:
        files: sitemap files downloaded and parsed (in whole or in part).
        found: page entries yielded.
        skipped: entries (pages or child sitemaps) left out, by reason: ``cross_host``,
            ``not_http``, ``no_loc``, ``too_deep``, ``too_many_files``.
        bad_lastmod: entries kept whose ``lastmod`` was not a W3C datetime.
        problems: every error and warning, in order.
    """

    files: int = 0
    found: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    bad_lastmod: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "error"]


# --- the reader --------------------------------------------------------------------------------

_Host = tuple[str, int | None] | None


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a file sits: the host its pages must be on, its own host, its depth below the
    first file, and the list its child sitemaps go to."""

    host: _Host
    own: _Host
    depth: int
    children: list[str]


class SitemapReader:
    """Read sitemaps and their indexes; see the module's docstring for the rules.

    Args:
        fetcher: downloads each file (its settings: deadline, proxies, ``allow_private``).
        limits: the bounds (the protocol's by default).
        report: told each :class:`Problem` as it happens (they are kept in ``tally`` too).

    Attributes:
        tally: what was read, skipped and refused so far.
    """

    def __init__(
        self,
        fetcher: Fetcher,
        *,
        limits: Limits | None = None,
        report: Callable[[Problem], None] | None = None,
    ) -> None:
        self._fetcher = fetcher
        self.limits = limits or Limits()
        self._report = report
        self.tally = Tally()

    async def read(self, sources: Iterable[Source]) -> AsyncIterator[list[Entry]]:
        """The page entries of ``sources`` and the sitemaps their indexes list, a batch at a
        time (at most one 64 KiB chunk's worth), each file once."""
        pending: list[tuple[str, _Host, int]] = [
            (s.url, host_key(s.site or s.url), 0) for s in reversed(list(sources))
        ]
        seen: set[str] = set()
        while pending:
            url, host, depth = pending.pop()
            if url in seen:
                continue
            if len(seen) >= self.limits.files:
                self._problem(url, f"more than {self.limits.files} sitemap files in one read: "
                              f"this one and {len(pending)} more not read", "warning")  # fmt: skip
                self.tally.skipped["too_many_files"] += 1 + len(pending)
                return
            seen.add(url)
            children: list[str] = []
            async for batch in self._file(url, host, depth, children):
                yield batch
            room = self.limits.files - len(seen) - len(pending)
            if len(children) > room:
                self._problem(url, f"lists {len(children)} sitemaps: only {max(room, 0)} "
                              f"read (at most {self.limits.files} files)", "warning")  # fmt: skip
                self.tally.skipped["too_many_files"] += len(children) - max(room, 0)
                children = children[: max(room, 0)]
            pending.extend((c, host, depth + 1) for c in reversed(children))

    def _problem(
        self, url: str, message: str, level: Literal["error", "warning"] = "error",
        *, fetch: bool = False,
    ) -> None:  # fmt: skip
        problem = Problem(url, message, level, fetch)
        self.tally.problems.append(problem)
        if self._report is not None:
            self._report(problem)

    async def _file(
        self, url: str, host: _Host, depth: int, children: list[str]
    ) -> AsyncIterator[list[Entry]]:
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            got = await self._download(url, spool)
            if got is None:
                return
            chunks = self._chunks(url, spool, got.truncated)
            if chunks is None:
                return
            place = _Place(host, host_key(url), depth, children)
            parser = _FileParser(self.limits.urls)
            deep = self.tally.skipped["too_deep"]
            try:
                for chunk in chunks:
                    batch = self._take(parser.feed(chunk), place)
                    if batch:
                        yield batch
                    if parser.full:
                        break
                else:
                    if not got.truncated:
                        batch = self._take(parser.close(), place)
                        if batch:
                            yield batch
            except _Hostile as exc:
                self._problem(url, f"refused: {exc}; nothing read from it")
                return
            except _Broken as exc:
                batch = self._take(exc.items, place)
                if batch:
                    yield batch
                self._broken(url, exc, parser.count)
                return
            self._limits_met(url, parser.full, got.truncated, self.tally.skipped["too_deep"] - deep)

    async def _download(self, url: str, spool: IO[bytes]) -> Download | None:
        """Download one file into ``spool``; None (and an error) when it cannot be had."""
        try:
            got = await self._fetcher.download(
                url, spool, limit=self.limits.bytes, request=_REQUEST
            )
        except (BlockedAddress, InvalidURL) as exc:  # the address's fault, not the network's
            self._problem(url, f"cannot fetch: {exc}")
            return None
        except (TimeoutError, OSError, aiohttp.ClientError, ScrapeqError) as exc:
            self._problem(url, f"cannot fetch: {_reason(exc)}", fetch=True)
            return None
        if not 200 <= got.status < 300:
            self._problem(url, f"cannot fetch: HTTP {got.status}", fetch=True)
            return None
        self.tally.files += 1
        spool.seek(0)
        return got

    def _chunks(self, url: str, spool: IO[bytes], truncated: bool) -> Iterator[bytes] | None:
        """The file's XML in chunks, inflated when it is gzip; None when it is refused."""
        gzipped = spool.read(2) == _GZIP_MAGIC
        spool.seek(0)
        if not gzipped:
            return iter(lambda: spool.read(_CHUNK), b"")
        if not self._gzip_ok(url, spool, truncated):
            return None
        spool.seek(0)
        return _inflate(spool, self.limits.bytes)

    def _broken(self, url: str, exc: _Broken, count: int) -> None:
        where = f"line {exc.line}" if exc.line > 0 else "at its end"
        kept = f"; the {count} entries before it were read" if count else ""
        self._problem(url, f"{where}: {exc.reason}{kept}")

    def _limits_met(self, url: str, full: bool, truncated: bool, deep: int) -> None:
        """The warnings of a file read up to a limit."""
        if deep:
            self._problem(url, f"{deep} sitemaps it lists not read: indexes nested more than "
                          f"{self.limits.depth} deep", "warning")  # fmt: skip
        if full:
            self._problem(url, f"more than {self.limits.urls} entries (the protocol's limit): "
                          f"the first {self.limits.urls} read, the rest refused",
                          "warning")  # fmt: skip
        elif truncated:
            self._problem(url, f"over {self.limits.bytes} bytes (the protocol's limit): the "
                          "entries before it read, the rest refused", "warning")  # fmt: skip

    def _gzip_ok(self, url: str, spool: IO[bytes], truncated: bool) -> bool:
        """Inflate once, counting: a bomb (or a file that is not gzip) is refused whole."""
        if truncated:
            self._problem(url, f"refused: over {self.limits.bytes} bytes compressed; "
                          "nothing read from it")  # fmt: skip
            return False
        try:
            for _ in _inflate(spool, self.limits.bytes):
                pass
        except _TooLarge:
            self._problem(url, f"refused: gzip bomb: inflates past {self.limits.bytes} bytes "
                          "(the protocol's limit of a file); nothing read from it")  # fmt: skip
            return False
        except zlib.error as exc:
            self._problem(url, f"refused: not valid gzip ({exc}); nothing read from it")
            return False
        return True

    def _take(self, items: list[_Item], place: _Place) -> list[Entry]:
        """The entries of ``items`` that pass; child sitemaps go to ``place.children``."""
        host, own = place.host, place.own
        out: list[Entry] = []
        skipped = self.tally.skipped
        for item in items:
            if not item.loc:
                skipped["no_loc"] += 1
            elif not _is_http(item.loc):
                skipped["not_http"] += 1
            elif item.kind == "sitemap":
                if host_key(item.loc) not in (host, own):
                    skipped["cross_host"] += 1
                elif place.depth >= self.limits.depth:
                    skipped["too_deep"] += 1
                else:
                    place.children.append(item.loc)
            elif host_key(item.loc) != host:
                skipped["cross_host"] += 1
            else:
                lastmod = parse_lastmod(item.lastmod)
                if lastmod is None and item.lastmod:
                    self.tally.bad_lastmod += 1
                out.append(Entry(item.loc, lastmod, parse_priority(item.priority)))
        self.tally.found += len(out)
        return out


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__
