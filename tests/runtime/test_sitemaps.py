"""Sitemaps (issue 25): urlsets, indexes, gzip, the protocol's limits, hostile and malformed
XML, read from real loopback sites; ``enqueue --sitemap`` and ``crawl --sitemaps`` end to end
on a real Redis."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import Queue
from scrapeq.runtime.fetch import Fetcher
from scrapeq.runtime.sitemaps import (
    MAX_BYTES,
    Entry,
    Limits,
    SitemapReader,
    Source,
    Tally,
    host_key,
    parse_lastmod,
    parse_priority,
)
from support.cli_helpers import run, scrub_env
from support.sites import Site, sites, threaded_site

NS = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
XML = "application/xml"
GZ = "application/x-gzip"

Files = dict[str, tuple[bytes, Mapping[str, str]]]


def urlset(*entries: str) -> bytes:
    head = f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset {NS}>\n'
    return f"{head}{''.join(entries)}\n</urlset>\n".encode()


def url(loc: str, lastmod: str | None = None, priority: str | None = None) -> str:
    out = f"<url><loc>{loc}</loc>"
    if lastmod is not None:
        out += f"<lastmod>{lastmod}</lastmod>"
    if priority is not None:
        out += f"<priority>{priority}</priority>"
    return out + "</url>\n"


def index(*locs: str) -> bytes:
    body = "".join(f"<sitemap><loc>{loc}</loc></sitemap>\n" for loc in locs)
    return f'<?xml version="1.0"?>\n<sitemapindex {NS}>\n{body}</sitemapindex>\n'.encode()


def serve(files: Files) -> Callable[[web.Request], Any]:
    async def handle(request: web.Request) -> web.StreamResponse:
        found = files.get(request.path_qs)
        if found is None:
            return web.Response(status=404, text="not found")
        body, headers = found
        return web.Response(body=body, headers=dict(headers))

    return handle


class Live:
    """A site whose files the test fills in after it started (it needs the site's URL)."""

    def __init__(self) -> None:
        self.files: Files = {}

    def put(self, path: str, body: bytes, kind: str = XML, **headers: str) -> None:
        self.files[path] = (body, {"Content-Type": kind, **headers})

    def handler(self) -> Callable[[web.Request], Any]:
        return serve(self.files)


async def read(
    urls: list[str] | list[Source], *, limits: Limits | None = None, private: bool = True
) -> tuple[list[Entry], Tally]:
    sources = [u if isinstance(u, Source) else Source(u) for u in urls]
    out: list[Entry] = []
    async with Fetcher(Settings(allow_private=private, request_timeout=20)) as fetcher:
        reader = SitemapReader(fetcher, limits=limits)
        async for batch in reader.read(sources):
            out += batch
    return out, reader.tally


def lines(tally: Tally) -> list[str]:
    return [f"{p.level}: {p.line()}" for p in tally.problems]


# --- values ------------------------------------------------------------------------------------


def test_lastmod_priority_and_host_rules() -> None:
    assert parse_lastmod("2024-05-01") == 1714521600
    assert parse_lastmod("2024-05-01T12:00:00+02:00") == 1714557600
    assert parse_lastmod("2024-05-01T10:00Z") == 1714557600
    assert parse_lastmod("2024") == 1704067200
    for bad in ("yesterday", "2024-13-01", "2024-05-01T25:00Z", "", None, "2024-05-01T10"):
        assert parse_lastmod(bad) is None, bad
    assert [parse_priority(x) for x in (None, "0.8", "7", "-1", "nan", "high")] == [
        0.5, 0.8, 1.0, 0.0, 0.5, 0.5,
    ]  # fmt: skip
    assert host_key("http://www.example.com/a") == host_key("https://example.com:443/b")
    assert host_key("http://example.com:8080/") != host_key("http://example.com/")
    assert host_key("http://shop.example.com/") != host_key("http://example.com/")


def test_a_file_is_never_held_as_a_tree() -> None:
    """Each entry is dropped once read: the tree under the root never grows."""
    from scrapeq.runtime.sitemaps import _FileParser

    body = urlset(*(url(f"http://a.example/{i}", "2024-01-01", "0.1") for i in range(20_000)))
    parser = _FileParser(50_000)
    got, most = 0, 0
    for i in range(0, len(body), 64 * 1024):
        got += len(parser.feed(body[i : i + 64 * 1024]))
        most = max(most, parser.held)
    got += len(parser.close())
    assert got == 20_000 and most <= 2  # the entry just read (cleared) and the next one


# --- reading -----------------------------------------------------------------------------------


async def test_a_urlset_gives_its_pages_with_lastmod_and_priority() -> None:
    live = Live()
    async with sites(live.handler(), serve({})) as (site, other):
        live.put("/sitemap.xml", urlset(
            url(site.url("/a"), "2024-05-01T12:00:00+02:00", "0.9"),
            url(site.url("/b"), "not a date", "3.5"),
            url(site.url("/c")),
            url(other.url("/elsewhere")),  # another host (another port): skipped
            url("ftp://127.0.0.1/file"),
            "<url><lastmod>2024-01-01</lastmod></url>",  # no loc
        ))  # fmt: skip
        entries, tally = await read([site.url("/sitemap.xml")])
    assert entries == [
        Entry(site.url("/a"), 1714557600, 0.9),
        Entry(site.url("/b"), None, 1.0),
        Entry(site.url("/c"), None, 0.5),
    ]
    assert entries[0].meta() == {"sitemap_priority": 0.9, "lastmod": 1714557600}
    assert entries[2].meta() == {"sitemap_priority": 0.5}
    assert tally.files == 1 and tally.found == 3 and tally.bad_lastmod == 1
    assert tally.skipped == {"cross_host": 1, "not_http": 1, "no_loc": 1}
    assert tally.problems == []


async def test_an_index_leads_to_its_urlsets_plain_and_gzip_each_read_once() -> None:
    live = Live()
    async with sites(live.handler(), serve({})) as (site, other):
        live.put("/index.xml", index(
            site.url("/one.xml"), site.url("/two.xml.gz"), site.url("/three.xml"),
            site.url("/index.xml"),  # a loop: read once
            other.url("/foreign.xml"),  # an index may not send us to another host
        ))  # fmt: skip
        live.put("/one.xml", urlset(url(site.url("/1")), url(site.url("/2"))))
        live.put("/two.xml.gz", gzip.compress(urlset(url(site.url("/3")), url(site.url("/4")))), GZ)
        # gzip sent as a transport encoding: read as sent (identity asked), recognised by magic
        live.put("/three.xml", gzip.compress(urlset(url(site.url("/5")))), XML,
                 **{"Content-Encoding": "gzip"})  # fmt: skip
        entries, tally = await read([site.url("/index.xml")])
    assert [e.loc for e in entries] == [site.url(f"/{i}") for i in range(1, 6)]
    assert site.hits["/index.xml"] == 1 and other.total == 0
    assert tally.files == 4 and tally.skipped == {"cross_host": 1}
    assert tally.problems == []


async def test_nesting_and_file_count_are_bounded() -> None:
    live = Live()
    async with sites(live.handler()) as (site,):
        for level in range(4):  # i0 -> i1 -> i2 -> i3 -> leaf
            live.put(f"/i{level}.xml", index(site.url(f"/i{level + 1}.xml")))
        live.put("/i4.xml", urlset(url(site.url("/deep"))))
        entries, tally = await read([site.url("/i0.xml")], limits=Limits(depth=2))
        assert entries == [] and tally.files == 3 and tally.skipped == {"too_deep": 1}
        assert lines(tally) == [f"warning: sitemap {site.url('/i2.xml')}: 1 sitemaps it lists not "
                                "read: indexes nested more than 2 deep"]  # fmt: skip

        entries, tally = await read([site.url("/i0.xml")])  # the default depth, 3
        assert entries == [] and tally.skipped == {"too_deep": 1} and tally.files == 4

        live.put("/many.xml", index(*(site.url(f"/s{i}.xml") for i in range(10))))
        for i in range(10):
            live.put(f"/s{i}.xml", urlset(url(site.url(f"/page{i}"))))
        entries, tally = await read([site.url("/many.xml")], limits=Limits(files=4))
    assert [e.loc for e in entries] == [site.url(f"/page{i}") for i in range(3)]
    assert tally.files == 4 and tally.skipped == {"too_many_files": 7}
    assert "lists 10 sitemaps: only 3 read (at most 4 files)" in lines(tally)[0]


async def test_more_than_50000_urls_keeps_the_first_50000_and_says_so() -> None:
    live = Live()
    async with sites(live.handler()) as (site,):
        live.put("/big.xml", urlset(*(url(site.url(f"/p/{i}")) for i in range(50_003))))
        entries, tally = await read([site.url("/big.xml")])
    assert len(entries) == 50_000 and entries[-1].loc == site.url("/p/49999")
    assert lines(tally) == [
        f"warning: sitemap {site.url('/big.xml')}: more than 50000 entries (the protocol's "
        "limit): the first 50000 read, the rest refused"
    ]


async def test_a_plain_file_over_the_size_limit_keeps_what_came_before() -> None:
    live = Live()
    async with sites(live.handler()) as (site,):
        live.put("/long.xml", urlset(*(url(site.url(f"/p/{i}")) for i in range(2000))))
        entries, tally = await read([site.url("/long.xml")], limits=Limits(bytes=20_000))
    assert 100 < len(entries) < 2000
    assert [e.loc for e in entries] == [site.url(f"/p/{i}") for i in range(len(entries))]
    assert lines(tally) == [
        f"warning: sitemap {site.url('/long.xml')}: over 20000 bytes (the protocol's limit): "
        "the entries before it read, the rest refused"
    ]


def _bomb(site: Site, inflated: int) -> bytes:
    """A valid start (one real entry), then ``inflated`` bytes of spaces, gzip'd."""
    head = urlset(url(site.url("/before-the-bomb"))).replace(b"</urlset>\n", b"")
    c = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    out = [c.compress(head)]
    block = b" " * (1 << 20)
    for _ in range(inflated // len(block)):
        out.append(c.compress(block))
    out.append(c.compress(b"</urlset>\n"))
    out.append(c.flush())
    return b"".join(out)


async def test_a_gzip_bomb_is_refused_whole() -> None:
    live = Live()
    async with sites(live.handler()) as (site,):
        live.put("/small-limit.xml.gz", _bomb(site, 3 << 20), GZ)
        bomb = _bomb(site, 60 << 20)  # over the real limit, 50 MB
        assert len(bomb) < 100_000
        live.put("/bomb.xml.gz", bomb, GZ)
        entries, tally = await read([site.url("/small-limit.xml.gz")], limits=Limits(bytes=1 << 20))
        assert entries == []
        assert lines(tally) == [f"error: sitemap {site.url('/small-limit.xml.gz')}: refused: gzip "
                                f"bomb: inflates past {1 << 20} bytes (the protocol's limit of a "
                                "file); nothing read from it"]  # fmt: skip
        entries, tally = await read([site.url("/bomb.xml.gz")])  # the real limit
        assert entries == [] and f"inflates past {MAX_BYTES} bytes" in lines(tally)[0]
        # under the limit, the same file is read
        live.put("/fine.xml.gz", _bomb(site, 2 << 20), GZ)
        entries, tally = await read([site.url("/fine.xml.gz")])
    assert [e.loc for e in entries] == [site.url("/before-the-bomb")] and tally.problems == []


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>BASE/ok</loc></url>
<url><loc>BASE/&lol9;</loc></url>
</urlset>
"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE urlset [ <!ENTITY xxe SYSTEM "file:///etc/passwd"> ]>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc>BASE/ok</loc></url>
<url><loc>BASE/?leak=&xxe;</loc></url>
</urlset>
"""

EXTERNAL_DTD = b"""<?xml version="1.0"?>
<!DOCTYPE urlset SYSTEM "file:///etc/passwd">
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>BASE/ok</loc></url></urlset>
"""


async def test_hostile_xml_is_refused_with_one_line_and_gives_nothing() -> None:
    live = Live()
    async with sites(live.handler()) as (site,):
        base = site.base.encode()
        live.put("/laughs.xml", BILLION_LAUGHS.replace(b"BASE", base))
        live.put("/xxe.xml", XXE.replace(b"BASE", base))
        live.put("/dtd.xml", EXTERNAL_DTD.replace(b"BASE", base))
        live.put("/laughs.xml.gz", gzip.compress(BILLION_LAUGHS.replace(b"BASE", base)), GZ)
        got = {}
        for path in ("/laughs.xml", "/xxe.xml", "/dtd.xml", "/laughs.xml.gz"):
            got[path] = await read([site.url(path)])
    for path, (entries, tally) in got.items():
        assert entries == [], path
        assert len(tally.problems) == 1 and tally.problems[0].level == "error"
        line = tally.problems[0].line()
        assert (
            line.startswith(f"sitemap {site.url(path)}: refused: its DOCTYPE ") and "\n" not in line
        )
        assert "nothing read from it" in line
    assert "declares entities" in got["/laughs.xml"][1].problems[0].message
    assert "external DTD" in got["/dtd.xml"][1].problems[0].message
    assert "root:" not in repr(got["/xxe.xml"])


async def test_a_malformed_file_says_its_line_and_keeps_only_complete_entries() -> None:
    live = Live()
    async with sites(live.handler()) as (site,):
        live.put("/broken.xml", (
            f'<?xml version="1.0"?>\n<urlset {NS}>\n'
            f"<url><loc>{site.url('/1')}</loc></url>\n"
            f"<url><loc>{site.url('/2')}</loc></url>\n"
            f"<url><loc>{site.url('/3')}</lo></url>\n"
            f"<url><loc>{site.url('/4')}</loc></url>\n</urlset>\n"
        ).encode())  # fmt: skip
        live.put("/cut.xml", urlset(url(site.url("/x")), url(site.url("/y")))[:-40])
        live.put("/page.html", b"<html><body>hello</body></html>", "text/html")
        broken = await read([site.url("/broken.xml")])
        cut = await read([site.url("/cut.xml")])
        html = await read([site.url("/page.html")])
        missing = await read([site.url("/nothing.xml")])
    entries, tally = broken
    assert [e.loc for e in entries] == [site.url("/1"), site.url("/2")]
    assert lines(tally) == [
        f"error: sitemap {site.url('/broken.xml')}: line 5: Opening and ending tag mismatch: "
        "loc line 5 and lo; the 2 entries before it were read"
    ]
    assert [e.loc for e in cut[0]] == [site.url("/x")] and "error" in lines(cut[1])[0]
    assert html[0] == [] and lines(html[1]) == [
        f"error: sitemap {site.url('/page.html')}: line 1: not a sitemap: the root element is "
        "<html>"
    ]
    assert missing[0] == [] and missing[1].problems[0].fetch
    assert lines(missing[1]) == [
        f"error: sitemap {site.url('/nothing.xml')}: cannot fetch: HTTP 404"
    ]


async def test_a_file_cut_inside_an_entry_keeps_only_the_entries_that_closed() -> None:
    """Issue 38, item 11: a urlset cut off inside its last ``<url>`` (the parser closes
    what is left open at the end) must not give that entry: its loc, lastmod or priority
    may be cut short. Only entries whose ``</url>`` came count."""
    live = Live()
    async with sites(live.handler()) as (site,):
        head = urlset(url(site.url("/1")), url(site.url("/2"), "2024-05-01", "0.8"))
        head = head[: head.index(b"\n</urlset>")].decode()
        cut = site.url("/broken/5")
        tails = {
            "/lo.xml": f"<url><loc>{cut}</lo",
            "/text.xml": f"<url><loc>{cut}",
            "/lastmod.xml": f"<url><loc>{cut}</loc><lastmod>2024",
            "/priority.xml": f"<url><loc>{cut}</loc><priority>0.",
            "/url.xml": f"<url><loc>{cut}</loc></ur",
            "/open.xml": f"<url><loc>{cut}</loc>",
        }
        for path, tail in tails.items():
            live.put(path, f"{head}\n{tail}".encode())
        got = {path: await read([site.url(path)]) for path in tails}
    for path, (entries, tally) in got.items():
        assert [e.loc for e in entries] == [site.url("/1"), site.url("/2")], path
        assert tally.found == 2 and not tally.skipped, path
        [problem] = lines(tally)
        assert problem.startswith(f"error: sitemap {site.url(path)}: "), problem
        assert problem.endswith("; the 2 entries before it were read"), problem


def test_every_cut_of_a_file_gives_exactly_its_closed_entries() -> None:
    """A file cut at any byte gives the entries whose end tag came before the cut, and
    nothing else (no cut entry, no error but a broken file's), prefixed names too."""
    from scrapeq.runtime.sitemap_xml import _Broken, _FileParser

    pre = 'xmlns:sm="http://www.sitemaps.org/schemas/sitemap/0.9"'
    body = (
        f"<?xml version='1.0'?>\n<sm:urlset {pre}>\n"
        "<sm:url><sm:loc>http://a.example/1</sm:loc></sm:url>\n"
        "<sm:url><sm:loc>http://a.example/2</sm:loc><sm:lastmod>2024-05-01</sm:lastmod>"
        "<sm:priority>0.8</sm:priority></sm:url>\n"
        "<sm:url><sm:lastmod>2024</sm:lastmod><sm:loc><![CDATA[http://a.example/3]]></sm:loc>"
        "</sm:url>\n</sm:urlset>\n"
    ).encode()
    closed = [(body.index(b"</sm:url>", body.index(f"/{i}<".encode())
                          if i < 3 else body.index(b"/3]")) + 9, i) for i in (1, 2, 3)]  # fmt: skip
    for step in (1, 7, len(body)):
        for end in range(len(body) + 1):
            data = body[:end]
            parser = _FileParser(100)
            items = []
            try:
                for i in range(0, len(data), step):
                    items += parser.feed(data[i : i + step])
                items += parser.close()
            except _Broken as exc:
                items += exc.items
            want = [f"http://a.example/{i}" for at, i in closed if at <= end]
            assert [item.loc for item in items] == want, (step, data[-30:])
            assert parser.count == len(want), (step, data[-30:])
            if len(want) > 1:
                assert (items[1].lastmod, items[1].priority) == ("2024-05-01", "0.8")


async def test_private_addresses_need_allow_private_and_robots_vouches_for_its_host() -> None:
    live = Live()
    async with sites(live.handler(), serve({})) as (host_a, host_b):
        # a sitemap on host A listing host B's pages: refused from A, accepted when B's
        # robots.txt names it (the protocol's cross-submission)
        live.put("/for-b.xml", urlset(url(host_b.url("/p")), url(host_a.url("/q"))))
        entries, tally = await read([host_a.url("/for-b.xml")], private=False)
        assert entries == [] and "private address" in lines(tally)[0]
        assert not tally.problems[0].fetch
        entries, tally = await read([host_a.url("/for-b.xml")])
        assert [e.loc for e in entries] == [host_a.url("/q")]
        entries, tally = await read([Source(host_a.url("/for-b.xml"), site=host_b.url("/"))])
    assert [e.loc for e in entries] == [host_b.url("/p")] and tally.skipped == {"cross_host": 1}


# --- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def live_site() -> Iterator[tuple[Live, Site]]:
    live = Live()
    with threaded_site(live.handler()) as site:
        yield live, site


def _cli(redis_url: str, *argv: str) -> list[str]:
    return ["--redis", redis_url, *argv]


def test_enqueue_sitemap_adds_every_page_once_with_its_meta(
    capsys: Any, redis_url: str, make_queue: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, live_site: tuple[Live, Site],
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    live, site = live_site
    live.put("/index.xml", index(site.url("/a.xml"), site.url("/b.xml.gz")))
    live.put("/a.xml", urlset(url(site.url("/1"), "2024-05-01", "0.8"), url(site.url("/2")),
                              url("http://other.example/x"), url(site.url("/a b"))))  # fmt: skip
    live.put("/b.xml.gz", gzip.compress(urlset(url(site.url("/2")), url(site.url("/3")))), GZ)
    argv = _cli(redis_url, "enqueue", "--sitemap", site.url("/index.xml"), "--allow-private",
                "--unique", "--lane", "bulk")  # fmt: skip
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert out.strip() == ("3 sitemap files read, 5 URLs found: added 3 jobs, skipped 1 "
                           "duplicate, 1 invalid; 1 entry skipped (1 on another host)")  # fmt: skip
    assert err == (f"scrapeq: invalid URL skipped: {site.url('/a b')}: contains whitespace or "
                   "control characters\n")  # fmt: skip
    q = make_queue()
    assert q.counts()["ready"] == 3 and q.counts()["enqueued"] == 3

    code, out, err = run(capsys, *argv, "--json")  # again: every page is pending already
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["added"], doc["skipped"], doc["files"], doc["found"]) == (0, 4, 3, 5)
    assert doc["invalid"] == 1
    assert doc["entries_skipped"] == {"cross_host": 1} and doc["errors"] == []

    jobs = q.list_jobs("ready", limit=10).jobs
    metas = {j.job.url: j.job.meta for j in jobs}
    assert metas == {
        site.url("/1"): {"sitemap_priority": 0.8, "lastmod": 1714521600},
        site.url("/2"): {"sitemap_priority": 0.5},
        site.url("/3"): {"sitemap_priority": 0.5},
    }
    assert {j.job.lane for j in jobs} == {"bulk"}


def test_a_page_listed_over_and_over_with_a_newer_lastmod_stays_one_pending_job(
    capsys: Any, redis_url: str, make_queue: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, live_site: tuple[Live, Site],
) -> None:  # fmt: skip
    """Issue 38, item 10: with revisit on and --unique=seen, one page listed 2,000 times with
    lastmod 2100-01-01 (newer than its last visit) gave 2,000 jobs per read. Its pending
    revisit is made due now instead: no job added, read after read (two enqueue calls of
    1,000 entries each time)."""
    scrub_env(monkeypatch, tmp_path)
    monkeypatch.setenv("SCRAPEQ_REVISIT", "on")
    live, site = live_site
    page = site.url("/page")
    live.put("/sm.xml", urlset(*[url(page, "2100-01-01")] * 2000))
    q = make_queue(revisit="on", unique="seen", allow_private=True)
    q.enqueue(page)
    (visit,) = q.claim(1).jobs
    assert q.settle_many([q.done(visit)]) == ["done"]  # visited: its revisit is in days
    revisit = q.enqueue(page)
    assert revisit.status == "duplicate" and q.claim(1).jobs == []
    argv = _cli(redis_url, "enqueue", "--sitemap", site.url("/sm.xml"), "--allow-private",
                "--unique=seen")  # fmt: skip
    for _ in range(2):
        code, out, err = run(capsys, *argv)
        assert code == 0, err
        assert out.strip() == ("1 sitemap file read, 2000 URLs found: added 0 jobs, skipped "
                               "2000 duplicates")  # fmt: skip
        counts = q.counts()
        assert counts["ready"] + counts["delayed"] + counts["inflight"] == 1
    assert [j.id for j in q.claim(10).jobs] == [revisit.id]  # due now
    assert q.audit().problems == []


def test_enqueue_sitemap_refusals_are_one_line_and_add_nothing(
    capsys: Any, redis_url: str, make_queue: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, live_site: tuple[Live, Site],
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    live, site = live_site
    live.put("/laughs.xml", BILLION_LAUGHS.replace(b"BASE", site.base.encode()))
    live.put("/bomb.xml.gz", _bomb(site, 60 << 20), GZ)
    q = make_queue()
    for path in ("/laughs.xml", "/bomb.xml.gz"):
        code, out, err = run(capsys, *_cli(redis_url, "enqueue", "--sitemap", site.url(path),
                                           "--allow-private"))  # fmt: skip
        assert code == 2, err
        assert len(err.splitlines()) == 1 and err.startswith(
            f"scrapeq: error: sitemap {site.url(path)}: refused: "
        ), err
        assert "Traceback" not in err
        assert out.startswith("1 sitemap file read, 0 URLs found: added 0 jobs")
    assert q.counts()["enqueued"] == 0

    code, out, err = run(capsys, *_cli(redis_url, "enqueue", "--sitemap", site.url("/none.xml"),
                                       "--allow-private"))  # fmt: skip
    assert code == 1 and "cannot fetch: HTTP 404" in err
    code, out, err = run(capsys, *_cli(redis_url, "enqueue", "--sitemap", site.url("/laughs.xml")))
    assert code == 2 and "private address" in err and "--allow-private" in err
    code, _, err = run(capsys, *_cli(redis_url, "enqueue", "--sitemap", "ftp://x/s.xml"))
    assert code == 2 and err.startswith("scrapeq: error: --sitemap ") and len(err.splitlines()) == 1
    code, _, err = run(capsys, *_cli(redis_url, "enqueue", site.url("/"), "--sitemap",
                                     site.url("/s.xml")))  # fmt: skip
    assert code == 2 and "give it without URLs" in err
    assert q.counts()["enqueued"] == 0


def test_enqueue_sitemap_over_50000_urls_adds_50000(
    capsys: Any, redis_url: str, make_queue: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, live_site: tuple[Live, Site],
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    live, site = live_site
    live.put("/big.xml.gz", gzip.compress(urlset(*(url(site.url(f"/p/{i}"))
                                                   for i in range(50_010)))), GZ)  # fmt: skip
    code, out, err = run(capsys, *_cli(redis_url, "enqueue", "--sitemap", site.url("/big.xml.gz"),
                                       "--allow-private"))  # fmt: skip
    assert code == 0, err
    assert err.strip() == (
        f"scrapeq: warning: sitemap {site.url('/big.xml.gz')}: more than 50000 entries (the "
        "protocol's limit): the first 50000 read, the rest refused"
    )
    assert out.startswith("1 sitemap file read, 50000 URLs found: added 50000 jobs")
    assert make_queue().counts()["ready"] == 50_000


def test_crawl_sitemaps_reads_robots_txt_and_crawls_the_pages(
    capsys: Any, redis_url: str, make_queue: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path, live_site: tuple[Live, Site],
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    live, site = live_site
    page = b"<html><body>no links</body></html>"
    for path in ("/", "/hidden-1", "/hidden-2", "/hidden-3"):
        live.put(path, page, "text/html")
    robots = f"User-agent: *\nAllow: /\nSitemap: {site.url('/sm.xml')}\n"
    robots += "Sitemap: /gone.xml\n"  # relative (not the protocol's): read against the seed
    live.put("/robots.txt", robots.encode(), "text/plain")
    live.put("/sm.xml", urlset(url(site.url("/hidden-1"), "2024-01-01"), url(site.url("/hidden-2")),
                               url(site.url("/hidden-3")), url(site.url("/")),
                               url("http://elsewhere.example/x")))  # fmt: skip
    results = str(tmp_path / "r.jsonl")
    code, _, err = run(capsys, *_cli(redis_url, "crawl", site.url("/"), "--sitemaps",
                                     "--allow-private", "--results", results))  # fmt: skip
    assert code == 0, err
    assert "crawl: 1 seeds enqueued (0 seen before)" in err
    assert (f"crawl: warning: sitemap {site.url('/gone.xml')}: cannot fetch: HTTP 404") in err
    assert ("crawl: sitemaps: 1 sitemap file read, 4 URLs found: added 3 jobs, skipped 1 "
            "duplicate; 1 entry skipped (1 on another host)") in err  # fmt: skip
    assert all(site.hits[p] == 1 for p in ("/", "/hidden-1", "/hidden-2", "/hidden-3"))
    assert make_queue().counts()["done"] == 4
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    hidden = next(r for r in rows if r["url"] == site.url("/hidden-1"))
    assert hidden["meta"] == {"sitemap_priority": 0.5, "lastmod": 1704067200}

    code, _, err = run(capsys, *_cli(redis_url, "crawl", site.url("/"), "--sitemaps",
                                     "--allow-private"))  # fmt: skip
    assert code == 0 and "all 1 seeds were seen before" in err  # the pages too: nothing to do
    assert "added 0 jobs, skipped 4 duplicates" in err
