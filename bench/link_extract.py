"""Link extraction: pages/s of each HTML parser on a 100 KB page with ~1,000 links.

Builds one page of about 100 KB (a shop listing: a head with ``<base href>`` and
``<link rel=next|canonical>``, ~1,000 links of every kind scrapeq meets: relative, absolute,
protocol-relative, with fragments, ``rel=nofollow``, ``mailto:``/``javascript:``/``tel:``,
``<area>``; paragraphs, an inline script and a style sheet between them). Each candidate
parses the decoded text and lists the raw ``(tag, href, rel)`` of ``a``, ``area``, ``link``
and ``base`` elements, ``--runs`` times a round over ``--rounds`` rounds (candidates
alternate, so machine noise hits them alike); the median round is reported. The candidates
must agree on what they find (checked first). Then ``scrapeq.runtime.links.extract_counted`` (the
chosen parser plus URL resolution, validation and de-duplication) is timed the same way.

Candidates: the standard library's ``html.parser`` (the baseline), lxml (libxml2),
selectolax (Lexbor, an HTML5 parser) and parsel (Scrapy's selectors, over lxml).

Bar: ``extract_counted`` >= 200 pages/s (5 ms a 100 KB page with 1,000 links), so a worker
extracting links from every page spends less on it than on fetching.

Run: ``.venv/bin/python bench/link_extract.py [--quick] [--runs N] [--rounds R] [--strict]``
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from html.parser import HTMLParser

import lxml.html
import parsel
from selectolax.lexbor import LexborHTMLParser

from _redis import format_table, load_note
from scrapeq.engine.model.urls import (
    canonical_url,
    fingerprint64,
    in_scope,
    parse_target,
    registrable_domain,
)
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.links import extract_counted

BAR_PAGES_S = 200.0
PAGE_BYTES = 100_000
LINKS = 1_000
TAGS = ("a", "area", "link", "base")
CHOSEN = "selectolax"

Raw = list[tuple[str, str, str]]  # (tag, href, rel)


# --- the page ----------------------------------------------------------------------------------


_LINK_KINDS = (
    '<a href="/catalogue/item-{i}.html">Item {i}</a>',
    '<a href="item-{i}.html?colour=red&amp;size={i}" class="prod">Red {i}</a>',
    '<a href="https://shop.example.com/p/{i}#reviews">Reviews {i}</a>',
    '<a href="//cdn.example.com/img/{i}.jpg" rel="nofollow">Photo {i}</a>',
    '<a href="../offers/{i}/">Offer {i}</a>',
    '<a href="#top">Top</a>',
    '<a href="mailto:sales+{i}@example.com">Mail</a>',
    '<a href="javascript:addToCart({i})">Add</a>',
    '<a href="tel:+44-20-{i}">Call</a>',
    '<area shape="rect" coords="0,0,{i},10" href="/map/{i}" alt="zone {i}">',
)

_FILLER = (
    "<p>Handmade in small batches from recycled materials, shipped within two working days. "
    "Free returns for thirty days; see the delivery page for the countries we serve.</p>"
)


def build_page(links: int = LINKS, size: int = PAGE_BYTES) -> bytes:
    """A shop listing of about ``size`` bytes with ``links`` links (UTF-8)."""
    head = (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>Catalogue — page 2"
        '</title>\n<base href="https://shop.example.com/catalogue/">\n'
        '<link rel="canonical" href="https://shop.example.com/catalogue/page-2.html">\n'
        '<link rel="next" href="page-3.html"><link rel="stylesheet" href="/s.css">\n'
        "<style>body{font:14px sans-serif}.prod{color:#c00}</style>\n"
        "<script>window.dataLayer=[];function addToCart(n){dataLayer.push(n)}</script>\n"
        "</head><body><ul>\n"
    )
    items = [
        "<li>" + _LINK_KINDS[i % len(_LINK_KINDS)].format(i=i) + "</li>\n" for i in range(links)
    ]
    body = head + "".join(items) + "</ul>\n"
    filler = []
    while len(body.encode()) + sum(len(f) for f in filler) < size - len("</body></html>\n"):
        filler.append(_FILLER + "\n")
    return (body + "".join(filler) + "</body></html>\n").encode()


# --- the candidates: raw (tag, href, rel) of a, area, link, base -------------------------------


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: Raw = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in TAGS:
            values = dict(attrs)
            href = values.get("href")
            if href is not None:
                self.found.append((tag, href, values.get("rel") or ""))


def stdlib(text: str) -> Raw:
    parser = _Collector()
    parser.feed(text)
    parser.close()
    return parser.found


def lxml_iter(text: str) -> Raw:
    root = lxml.html.document_fromstring(text)
    return [
        (el.tag, el.get("href"), el.get("rel") or "")
        for el in root.iter(*TAGS)
        if el.get("href") is not None
    ]


def selectolax(text: str) -> Raw:
    tree = LexborHTMLParser(text)
    found: Raw = []
    for node in tree.css("a[href], area[href], link[href], base[href]"):
        attrs = node.attributes
        found.append((node.tag or "", attrs.get("href") or "", attrs.get("rel") or ""))
    return found


def parsel_css(text: str) -> Raw:
    selector = parsel.Selector(text=text)
    return [
        (s.root.tag, s.attrib["href"], s.attrib.get("rel", ""))
        for s in selector.css("a[href], area[href], link[href], base[href]")
    ]


CANDIDATES: dict[str, Callable[[str], Raw]] = {
    "html.parser (stdlib)": stdlib,
    "lxml": lxml_iter,
    "selectolax": selectolax,
    "parsel": parsel_css,
}


# --- timing ------------------------------------------------------------------------------------


def time_round(work: Callable[[], object], runs: int) -> float:
    """Pages per second of ``runs`` calls of ``work``."""
    started = time.perf_counter()
    for _ in range(runs):
        work()
    return runs / (time.perf_counter() - started)


def url_costs(links: list[str], rounds: int) -> list[list[object]]:
    """Microseconds a call of each URL-layer function costs, over the page's links."""
    page = "https://shop.example.com/catalogue/page-2.html"
    fresh = itertools.count()

    def uncached() -> None:  # hosts never seen before: no cache helps
        for _ in links:
            registrable_domain(f"www.shop{next(fresh)}.example.co.uk")

    calls: dict[str, Callable[[], object]] = {
        "parse_target": lambda: [parse_target(u, allow_private=True) for u in links],
        "canonical_url": lambda: [canonical_url(u) for u in links],
        "fingerprint64": lambda: [fingerprint64(u) for u in links],
        "registrable_domain, distinct hosts": uncached,
        "in_scope(domain), one site": lambda: [in_scope(u, page, "domain") for u in links],
    }
    rows: list[list[object]] = []
    for name, call in calls.items():
        best = min(_seconds(call) for _ in range(rounds))
        rows.append([name, best / len(links) * 1e6])
    return rows


def _seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short run: 20 runs, 3 rounds")
    parser.add_argument("--runs", type=int, default=None, help="pages a round (default 100)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the bar is missed")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs = args.runs or (20 if args.quick else 100)
    rounds = args.rounds or (3 if args.quick else 5)
    body = build_page()
    text = body.decode()
    response = Response(
        url="https://shop.example.com/catalogue/page-2.html",
        status=200,
        headers={"Content-Type": "text/html; charset=utf-8"},
        body=body,
        elapsed=0.0,
        redirects=0,
    )
    reference = stdlib(text)
    for name, candidate in CANDIDATES.items():
        if candidate(text) != reference:
            print(f"FAIL: {name} does not find what html.parser finds")
            return 1
    extracted = extract_counted(response)
    print(f"page: {len(body):,} bytes, {len(reference):,} a/area/link/base hrefs")
    print(
        f"extract_counted: {len(extracted.links):,} links, skipped {dict(extracted.skipped)}, "
        f"{extracted.duplicates:,} duplicates"
    )
    print(f"{runs} pages a round, {rounds} rounds, median round; {load_note()}\n")

    work: dict[str, Callable[[], object]] = {
        name: (lambda c=candidate: c(text)) for name, candidate in CANDIDATES.items()
    }
    work["scrapeq.links.extract_counted"] = lambda: extract_counted(response)
    figures: dict[str, list[float]] = {name: [] for name in work}
    for _ in range(rounds):
        for name, call in work.items():
            figures[name].append(time_round(call, runs))
    baseline = statistics.median(figures["html.parser (stdlib)"])
    rows: list[list[object]] = []
    for name, values in figures.items():
        median = statistics.median(values)
        rows.append([name, median, max(values), 1000 / median, f"{median / baseline:.1f}x"])
    print(format_table(["parser", "pages/s", "best pages/s", "ms/page", "vs stdlib"], rows))

    print(f"\nURL layer, per link of the page (best of {rounds}; informational):")
    print(format_table(["call", "us/call"], url_costs(extracted.links, rounds)))

    parsers = {name: statistics.median(figures[name]) for name in CANDIDATES}
    fastest = max(parsers, key=parsers.__getitem__)
    print(f"\nfastest parser: {fastest}; chosen for scrapeq.links: {CHOSEN}")
    result = statistics.median(figures["scrapeq.links.extract_counted"])
    passed = result >= BAR_PAGES_S
    verdict = "PASS" if passed else "FAIL"
    print(
        f"{verdict}: extract_counted {result:,.0f} pages/s of {len(body) // 1000} KB with "
        f"{LINKS:,} links (bar >= {BAR_PAGES_S:,.0f})"
    )
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
