"""Link extraction (scrapeq.links) from pages a real Fetcher gets from a loopback site."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from hypothesis import given, settings
from hypothesis import strategies as st
from yarl import URL

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.urls import parse_target
from scrapeq.runtime.fetch import Fetcher, Response
from scrapeq.runtime.links import SKIP_REASONS, Extracted, extract, extract_counted
from support.sites import Site, sites


@dataclass(frozen=True)
class Page:
    body: bytes | str
    content_type: str | None = "text/html; charset=utf-8"
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)


def html(body: str, head: str = "") -> str:
    return f"<!DOCTYPE html><html><head>{head}</head><body>{body}</body></html>"


def site_of(pages: Mapping[str, Page]) -> Site:
    """One loopback site serving ``pages`` by path; 404 with no body elsewhere."""

    async def handler(request: web.Request) -> web.StreamResponse:
        page = pages.get(request.path_qs) or pages.get(request.path)
        if page is None:
            return web.Response(status=404)
        body = page.body.encode() if isinstance(page.body, str) else page.body
        headers = dict(page.headers)
        if page.content_type is not None:
            headers["Content-Type"] = page.content_type
        return web.Response(status=page.status, body=body, headers=headers)

    return Site(handler)


@asynccontextmanager
async def serving(pages: Mapping[str, Page]) -> AsyncIterator[tuple[Site, Fetcher]]:
    site = site_of(pages)
    settings = Settings(allow_private=True, request_timeout=5.0)
    async with sites(site.handler) as (running,), Fetcher(settings) as fetcher:
        yield running, fetcher


async def fetch_page(pages: Mapping[str, Page], path: str = "/") -> tuple[Site, Response]:
    async with serving(pages) as (site, fetcher):
        return site, await fetcher.fetch(site.url(path))


def response(
    body: bytes | str, url: str = "https://example.com/dir/page", **headers: str
) -> Response:
    """A hand-made response, for pure cases (no server needed to tell them)."""
    raw = body.encode() if isinstance(body, str) else body
    return Response(url=url, status=200, headers=headers, body=raw, elapsed=0.0, redirects=0)


# --- from a real site ----------------------------------------------------------------------------


KINDS = html(
    head='<link rel="stylesheet" href="/s.css"><link rel="icon" href="/i.png">'
    '<link rel="Next" href="?page=2"><link rel="canonical alternate" href="/list">',
    body='<a href="a.html">relative</a>'
    '<a href="/root">root-relative</a>'
    '<a href="../up">up</a>'
    '<a href="https://Other.Example:443/x?q=1#frag">absolute</a>'
    '<a href="//cdn.example/p">protocol-relative</a>'
    '<a href="#top">fragment only</a>'
    '<a href="  b.html\n ">whitespace</a>'
    '<a href="c d.html?q=a b">spaces</a>'
    '<a href="mailto:shop@example.com">mail</a>'
    '<a href="JavaScript:void(0)">js</a>'
    '<a href="tel:+4420">phone</a>'
    '<a href="data:text/html,hi">data</a>'
    '<a href="ftp://files.example/">ftp</a>'
    '<a href="http://exa mple.com/">bad host</a>'
    '<a href="http://[::1">bad bracket</a>'
    '<a href="http://example.com:99999/">bad port</a>'
    '<a href="/n" rel="nofollow">nofollow</a>'
    '<a href="/n2" rel="external NoFollow">nofollow among others</a>'
    "<a>no href</a>"
    '<a href="a.html">duplicate</a>'
    '<map><area href="/zone" alt="z"></map>',
)


async def test_links_of_every_kind_from_a_real_site() -> None:
    site, resp = await fetch_page({"/dir/list": Page(KINDS)}, "/dir/list")
    got = extract_counted(resp)
    base = site.base
    assert got.html
    assert got.links == [
        f"{base}/dir/list?page=2",  # <link rel=next>, relative to the page
        f"{base}/list",  # rel=canonical among other tokens
        f"{base}/dir/a.html",
        f"{base}/root",
        f"{base}/up",
        "https://other.example/x?q=1#frag",  # host lower-cased, default port dropped
        "http://cdn.example/p",  # the page's scheme
        f"{base}/dir/list#top",
        f"{base}/dir/b.html",  # surrounding whitespace is not part of the URL
        f"{base}/dir/c%20d.html?q=a%20b",  # spaces percent-encoded, as browsers do
        f"{base}/n",
        f"{base}/n2",
        f"{base}/zone",
    ]
    assert got.skipped == {"scheme": 5, "invalid": 3}
    assert got.duplicates == 1
    assert got.skipped_total == 8
    assert extract(resp) == got.links


async def test_nofollow_is_skipped_and_counted_when_respected() -> None:
    _, resp = await fetch_page({"/": Page(KINDS)})
    got = extract_counted(resp, respect_nofollow=True)
    assert not any(link.endswith(("/n", "/n2")) for link in got.links)
    assert got.skipped == {"scheme": 5, "invalid": 3, "nofollow": 2}
    assert set(got.skipped) <= set(SKIP_REASONS)
    assert extract(resp, respect_nofollow=True) == got.links


async def test_base_href_is_resolved_against_the_page_and_wins() -> None:
    page = html(
        head='<base target="_blank"><base href="/other/dir/"><base href="/ignored/">',
        body='<a href="x">x</a><a href="/abs">abs</a><a href="?q">q</a><a href="#f">f</a>',
    )
    site, resp = await fetch_page({"/page": Page(page)}, "/page")
    assert extract(resp) == [
        site.url("/other/dir/x"),
        site.url("/abs"),
        site.url("/other/dir/?q"),
        site.url("/other/dir/#f"),
    ]


async def test_a_base_href_that_is_not_http_is_ignored() -> None:
    page = html(head='<base href="javascript:alert(1)">', body='<a href="x">x</a>')
    site, resp = await fetch_page({"/d/page": Page(page)}, "/d/page")
    assert extract(resp) == [site.url("/d/x")]


async def test_links_resolve_against_the_final_url_after_redirects() -> None:
    async def moved(request: web.Request) -> web.StreamResponse:
        if request.path == "/old":
            raise web.HTTPFound("/new/place/page.html")
        return web.Response(text=html('<a href="sibling">s</a>'), content_type="text/html")

    settings = Settings(allow_private=True, request_timeout=5.0)
    async with sites(moved) as (site,), Fetcher(settings) as fetcher:
        resp = await fetcher.fetch(site.url("/old"))
    assert resp.redirects == 1
    assert extract(resp) == [site.url("/new/place/sibling")]


async def test_a_404_page_that_is_html_still_has_links() -> None:
    # The status is the crawl's business; the body of a custom 404 page is HTML like any.
    page = Page(html('<a href="/home">home</a><a href="/search">search</a>'), status=404)
    site, resp = await fetch_page({"/missing": page}, "/missing")
    assert resp.status == 404
    assert extract(resp) == [site.url("/home"), site.url("/search")]


@pytest.mark.parametrize(
    "content_type",
    [
        "application/json",
        "text/plain; charset=utf-8",
        "image/png",
        "application/octet-stream",
        "text/xml",
        "text/htmlx",
    ],
)
async def test_non_html_content_types_give_no_links(content_type: str) -> None:
    _, resp = await fetch_page({"/": Page(html('<a href="/x">x</a>'), content_type)})
    assert extract_counted(resp) == Extracted(links=[], skipped={}, duplicates=0, html=False)
    assert extract(resp) == []


@pytest.mark.parametrize("content_type", ["TEXT/HTML", "application/xhtml+xml; charset=UTF-8"])
async def test_html_content_types_in_any_case(content_type: str) -> None:
    site, resp = await fetch_page({"/": Page(html('<a href="/x">x</a>'), content_type)})
    assert extract(resp) == [site.url("/x")]


async def test_without_a_content_type_html_is_recognised_by_its_start() -> None:
    # aiohttp.web always sends a Content-Type: this server writes the response by hand.
    bodies = {
        "/html": b"\xef\xbb\xbf\n  <!DOCTYPE html><a href='/x'>x</a>",
        "/frag": b"<html><a href='/y'>y</a>",
        "/text": b"plain text that mentions <a href='/z'>",
    }

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = (await reader.readuntil(b"\r\n\r\n")).split(b" ", 2)[1].decode()
        body = bodies[path]
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % len(body))
        writer.write(b"Connection: close\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with Fetcher(Settings(allow_private=True, request_timeout=5.0)) as fetcher:
            found = {path: await fetcher.fetch(base + path) for path in bodies}
    finally:
        server.close()
        await server.wait_closed()
    assert all("Content-Type" not in r.headers for r in found.values())
    assert extract(found["/html"]) == [base + "/x"]
    assert extract(found["/frag"]) == [base + "/y"]
    assert extract_counted(found["/text"]).html is False


# --- charsets --------------------------------------------------------------------------------


async def test_page_charset_decodes_and_encodes_the_query() -> None:
    # As browsers do: the path as UTF-8, the query in the page's encoding.
    body = html('<a href="/café?q=café">c</a>').encode("iso-8859-1")
    site, resp = await fetch_page({"/": Page(body, "text/html; charset=iso-8859-1")})
    assert extract(resp) == [site.url("/caf%C3%A9?q=caf%E9")]


async def test_meta_charset_is_read_when_the_header_has_none() -> None:
    body = html('<a href="/книги">k</a>', head='<meta charset="windows-1251">').encode("cp1251")
    site, resp = await fetch_page({"/": Page(body, "text/html")})
    assert extract(resp) == [site.url("/%D0%BA%D0%BD%D0%B8%D0%B3%D0%B8")]


async def test_unknown_charset_falls_back_to_utf8() -> None:
    body = html('<a href="/über">u</a>').encode()
    site, resp = await fetch_page({"/": Page(body, "text/html; charset=no-such-charset")})
    assert extract(resp) == [site.url("/%C3%BCber")]


async def test_undecodable_bytes_are_replaced_not_raised() -> None:
    body = b"<html><body><a href='/ok'>ok</a><a href='/\xff\xfe'>bad</a>\xc3\x28</body></html>"
    site, resp = await fetch_page({"/": Page(body, "text/html; charset=utf-8")})
    got = extract_counted(resp)
    assert got.links == [site.url("/ok"), site.url("/%EF%BF%BD%EF%BF%BD")]
    assert got.skipped == {}


# --- size ------------------------------------------------------------------------------------


async def test_a_page_with_5000_links_is_parsed_quickly() -> None:
    anchors = "".join(f'<li><a href="/item/{i}?ref=list">Item {i}</a></li>' for i in range(5000))
    site, resp = await fetch_page({"/": Page(html(f"<ul>{anchors}</ul>"))})
    started = time.perf_counter()
    got = extract_counted(resp)
    took = time.perf_counter() - started
    assert len(got.links) == 5000
    assert got.links[4999] == site.url("/item/4999?ref=list")
    # About 20-25 ms here; the bound leaves room for a loaded shared machine.
    assert took < 1.0, f"{took:.3f} s for 5,000 links"


# --- pure cases: hand-made responses ------------------------------------------------------------


def test_relative_hrefs_resolve_as_rfc_3986_says() -> None:
    # RFC 3986, section 5.4.1, base http://a/b/c/d;p?q ("?" alone: an empty query, not q).
    cases = {
        "g": "http://a/b/c/g",
        "./g": "http://a/b/c/g",
        "g/": "http://a/b/c/g/",
        "/g": "http://a/g",
        "//g": "http://g/",
        "?y": "http://a/b/c/d;p?y",
        "g?y": "http://a/b/c/g?y",
        "#s": "http://a/b/c/d;p?q#s",
        "g#s": "http://a/b/c/g#s",
        ";x": "http://a/b/c/;x",
        "": "http://a/b/c/d;p?q",
        ".": "http://a/b/c/",
        "./": "http://a/b/c/",
        "..": "http://a/b/",
        "../g": "http://a/b/g",
        "../..": "http://a/",
        "../../g": "http://a/g",
        "../../../g": "http://a/g",
        "/./g": "http://a/g",
        "/../g": "http://a/g",
        "g.": "http://a/b/c/g.",
        "..g": "http://a/b/c/..g",
        "./../g": "http://a/b/g",
        "g/./h": "http://a/b/c/g/h",
        "g/../h": "http://a/b/c/h",
        "g?y/./x": "http://a/b/c/g?y/./x",
        "g#s/../x": "http://a/b/c/g#s/../x",
        "?": "http://a/b/c/d;p",
        "\\\\evil.example\\x": "http://evil.example/x",  # backslashes: the URL Standard
    }
    page = html("".join(f'<a href="{href}">x</a>' for href in cases))
    got = extract_counted(response(page, url="http://a/b/c/d;p?q", **{"Content-Type": "text/html"}))
    assert got.links == list(dict.fromkeys(cases.values()))


def test_a_response_with_an_invalid_url_still_gives_its_absolute_links() -> None:
    page = html('<a href="relative">r</a><a href="https://example.com/a">a</a>')
    got = extract_counted(response(page, url="not a url", **{"Content-Type": "text/html"}))
    assert got.links == ["https://example.com/a"]
    assert got.skipped == {"invalid": 1}


_HREF_PARTS = st.sampled_from(
    ["a", "b", ".", "..", "/", "//", "?", "#", "=", "&", ";", "x=1", "~", "-", "_", "g"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_HREF_PARTS, max_size=8).map("".join))
def test_relative_resolution_agrees_with_yarl(href: str) -> None:
    base = "https://example.com/b/c/d?q=1"
    got = extract(response(f'<a href="{href}">x</a>', url=base, **{"Content-Type": "text/html"}))
    path_and_query, _, fragment = href.partition("#")
    if href.startswith("//") or path_and_query == "?" or not got:
        return  # another host; yarl keeps the base's query for "?" (RFC 3986 does not)
    normal = parse_target(str(URL(base).join(URL(path_and_query))), allow_private=True).url
    assert got == [normal + (f"#{fragment}" if fragment else "")]


_NASTY = st.text(
    alphabet=st.characters(codec="utf-8") | st.sampled_from(list(":/?#[]@%\\. \t\n")),
    max_size=40,
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.lists(_NASTY, max_size=6), st.sampled_from(["utf-8", "latin-1", "bogus"]))
def test_never_raises_and_every_link_is_a_valid_url(hrefs: list[str], charset: str) -> None:
    anchors = "".join(f"<a href='{h.replace(chr(39), '')}'>x</a>" for h in hrefs)
    page = html(anchors).encode("utf-8", "surrogatepass")
    got = extract_counted(response(page, **{"Content-Type": f"text/html; charset={charset}"}))
    assert len(got.links) + got.skipped_total + got.duplicates == len(hrefs)
    for link in got.links:
        assert parse_target(link, allow_private=True).url == link.partition("#")[0]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_raise(body: bytes) -> None:
    for headers in ({"Content-Type": "text/html"}, {}):
        got = extract_counted(response(body, **headers))
        assert isinstance(got.links, list)
