"""Rendering a JavaScript shop (issue 42): pages a second and the memory of the whole process
tree, scrapeq's ``browser`` fetcher beside scrapy-playwright and crawlee-python's
``PlaywrightCrawler`` and ``AdaptivePlaywrightCrawler`` (``bench/_crawlee_render.py``), same
shop, same chromium; then scrapeq's failure checks (``bench/_render_checks.py``: a hanging
page, killed browsers).

The shop is ``tests/support/js_shop.py`` on loopback (in a thread of this process): each
product page ``/p/<n>`` arrives empty and a script fills its name and price from
``/api/p/<n>`` 150 ms after load; images are blocked by both systems. Each system renders
``--pages`` distinct product pages (1,000) in a child process of its own, waiting on each page
for ``.price:not(:empty)`` (scrapeq: ``domain set --browser-wait-for``; scrapy-playwright: a
``wait_for_selector`` PageMethod), with the same pages in flight (``--pages-at-once``: 8; for
scrapeq 2 browsers of 4 pages, its defaults; for scrapy-playwright ``CONCURRENT_REQUESTS`` and
one context). This process samples every 0.25 s:

* pages rendered so far: the shop's count of ``/api/p/<n>`` calls (each rendered page makes
  one), the same figure for both systems;
* the RSS of the child's whole process tree (Python, Playwright's node driver, every
  chromium process), read from /proc.

Figures: pages a second (rendered pages over the run's wall time, start-up included), the
peak tree RSS, the peak over the first tenth of the pages and over the last tenth, and their
ratio (what a leak grows: target <= 1.2); from 1,000 pages on, the peak over the first 500
pages and over the last 500 and their ratio (the issue's "RSS after 5,000 pages at most 1.2x
that after 500"); the pages whose price was extracted (from the systems' own output).
scrapeq's worker recycles a browser after 100 pages (its default);
``scrapeq`` gives each page a fresh browser context (``browser_context = page``, the
default), ``scrapeq-shared`` one context per browser (``browser_context = browser``), as
scrapy-playwright does.

Run: ``python bench/render.py [--pages 1000] [--pages-at-once 8] [--systems
scrapeq,scrapeq-shared,scrapy-playwright,crawlee-playwright,crawlee-adaptive] [--checks
hang,kill] [--json FILE]`` (``--systems ''``: the checks alone). Needs Debian's chromium
(``/usr/bin/chromium``), Playwright and, for the peers, scrapy-playwright and
``crawlee[playwright,adaptive-crawler]`` (``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _render_checks import check_hang, check_kill
from scrapeq import Queue
from scrapeq.engine.config.settings import Settings
from scrapeq.runtime.browser_pool import tree_rss
from support.js_shop import shop
from support.redis_proc import RedisProcess
from support.sites import Site, threaded_site

WAIT_FOR = ".price:not(:empty)"
CHROMIUM = "/usr/bin/chromium"

SCRAPY_SPIDER = textwrap.dedent("""
    import json, sys
    import scrapy
    from scrapy.crawler import CrawlerProcess
    from scrapy_playwright.page import PageMethod

    BASE, PAGES, AT_ONCE, OUT = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

    class Shop(scrapy.Spider):
        name = "shop"

        async def start(self):
            wait = [PageMethod("wait_for_selector", ".price:not(:empty)", timeout=30000)]
            for n in range(1, PAGES + 1):
                yield scrapy.Request(f"{BASE}/p/{n}", meta={
                    "playwright": True, "playwright_page_methods": wait})

        def parse(self, response):
            yield {"url": response.url, "price": response.css(".price::text").get()}

    process = CrawlerProcess(settings={
        "DOWNLOAD_HANDLERS": {
            "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
            "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
        },
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        "PLAYWRIGHT_LAUNCH_OPTIONS": {
            "executable_path": "/usr/bin/chromium", "headless": True,
            "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        },
        "PLAYWRIGHT_ABORT_REQUEST": lambda r: r.resource_type in ("image", "font", "media"),
        "CONCURRENT_REQUESTS": AT_ONCE, "CONCURRENT_REQUESTS_PER_DOMAIN": AT_ONCE,
        "PLAYWRIGHT_MAX_PAGES_PER_CONTEXT": AT_ONCE,
        "ROBOTSTXT_OBEY": False, "TELNETCONSOLE_ENABLED": False, "LOG_LEVEL": "ERROR",
        "FEEDS": {OUT: {"format": "jsonlines"}},
    })
    process.crawl(Shop)
    process.start()
""")


def _rendered(site: Site) -> int:
    return sum(v for k, v in site.hits.copy().items() if k.startswith("/api/p/"))


def _watch(proc: subprocess.Popen[bytes], site: Site, pages: int, limit: float) -> dict[str, Any]:
    """Sample the child's tree until it exits (or ``limit`` s): rendered pages and RSS."""
    started = time.monotonic()
    first = _rendered(site)
    samples: list[tuple[float, int, int]] = []  # (seconds, pages, rss)
    while proc.poll() is None and time.monotonic() - started < limit:
        samples.append((time.monotonic() - started, _rendered(site) - first, tree_rss(proc.pid)))
        time.sleep(0.25)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    seconds = time.monotonic() - started
    done = _rendered(site) - first
    tenth = max(pages // 10, 1)
    early = [rss for _, n, rss in samples if n <= tenth]
    late = [rss for _, n, rss in samples if n >= pages - tenth]
    out: dict[str, Any] = {
        "pages_rendered": done,
        "seconds": round(seconds, 1),
        "pages_per_s": round(done / seconds, 2),
        "peak_rss_mb": round(max(r for *_, r in samples) / 1e6) if samples else None,
        "peak_rss_first_tenth_mb": round(max(early) / 1e6) if early else None,
        "peak_rss_last_tenth_mb": round(max(late) / 1e6) if late else None,
    }
    if early and late:
        out["late_over_early"] = round(max(late) / max(early), 2)
    return out | _after_500(samples, pages)


def _after_500(samples: list[tuple[float, int, int]], pages: int) -> dict[str, Any]:
    """From 1,000 pages on: the peak RSS over the first 500 pages, over the last 500, ratio."""
    if pages < 1000:
        return {}
    first = [rss for _, n, rss in samples if n <= 500]
    last = [rss for _, n, rss in samples if n >= pages - 500]
    if not first or not last:
        return {}
    return {
        "peak_rss_first_500_mb": round(max(first) / 1e6),
        "peak_rss_last_500_mb": round(max(last) / 1e6),
        "last_500_over_first_500": round(max(last) / max(first), 2),
    }


def run_scrapeq(
    site: Site, redis_url: str, pages: int, at_once: int, tmp: Path, context: str = "page"
) -> dict[str, Any]:
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    q.domain_set(site.domain, fetcher="browser", browser_wait_for=WAIT_FOR)
    q.enqueue_many([site.url(f"/p/{n}") for n in range(1, pages + 1)])
    q.close()
    out = tmp / f"scrapeq-{context}.jsonl"
    env = {
        **os.environ,
        "SCRAPEQ_ALLOW_PRIVATE": "true",
        "SCRAPEQ_BROWSER_CONTEXT": context,
        "SCRAPEQ_DOMAIN_CONCURRENCY": str(at_once),
    }
    argv = [sys.executable, "-m", "scrapeq", "--redis", redis_url, "worker", "--burst",
            "--concurrency", str(at_once), "--results", str(out), "--extract",
            "price=.price::text"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    figures = _watch(proc, site, pages, limit=pages * 2.0 + 60)
    lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    figures["extracted"] = sum(1 for r in lines if (r.get("result") or {}).get("price"))
    figures["results_lines"] = len(lines)
    return figures


def run_scrapy_playwright(
    site: Site, redis_url: str, pages: int, at_once: int, tmp: Path
) -> dict[str, Any]:
    out = tmp / "scrapy.jsonl"
    argv = [sys.executable, "-c", SCRAPY_SPIDER, site.base, str(pages), str(at_once), str(out)]
    return _run_peer(argv, out, site, pages)


def _run_peer(argv: list[str], out: Path, site: Site, pages: int) -> dict[str, Any]:
    """A peer crawler in its own process: watched as scrapeq's worker is, its JSON lines (one
    item a page, ``price`` its field) counted."""
    proc = subprocess.Popen(argv, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    figures = _watch(proc, site, pages, limit=pages * 2.0 + 60)
    lines = [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []
    figures["extracted"] = sum(1 for r in lines if r.get("price"))
    figures["results_lines"] = len(lines)
    return figures


def run_scrapeq_shared(
    site: Site, redis_url: str, pages: int, at_once: int, tmp: Path
) -> dict[str, Any]:
    return run_scrapeq(site, redis_url, pages, at_once, tmp, context="browser")


def run_crawlee(site: Site, pages: int, at_once: int, tmp: Path, mode: str) -> dict[str, Any]:
    out = tmp / f"crawlee-{mode}.jsonl"
    peer = Path(__file__).resolve().parent / "_crawlee_render.py"
    argv = [sys.executable, str(peer), site.base, str(pages), str(at_once), str(out), mode]
    return _run_peer(argv, out, site, pages)


def run_crawlee_playwright(
    site: Site, redis_url: str, pages: int, at_once: int, tmp: Path
) -> dict[str, Any]:
    return run_crawlee(site, pages, at_once, tmp, "playwright")


def run_crawlee_adaptive(
    site: Site, redis_url: str, pages: int, at_once: int, tmp: Path
) -> dict[str, Any]:
    return run_crawlee(site, pages, at_once, tmp, "adaptive")


SYSTEMS = {
    "scrapeq": run_scrapeq,
    "scrapeq-shared": run_scrapeq_shared,
    "scrapy-playwright": run_scrapy_playwright,
    "crawlee-playwright": run_crawlee_playwright,
    "crawlee-adaptive": run_crawlee_adaptive,
}


def run_checks(site: Site, redis_url: str, tmp: Path, checks: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "hang" in checks:
        out["hang"] = check_hang(site, redis_url, tmp)
        print(json.dumps({"hang": out["hang"]}), file=sys.stderr, flush=True)
    if "kill" in checks:
        out["kill"] = check_kill(site, redis_url, tmp, lambda: _rendered(site))
        print(json.dumps({"kill": out["kill"]}), file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--pages-at-once", type=int, default=8)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--checks", default="hang,kill")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"no {CHROMIUM} (apt-get install chromium)")
    results: dict[str, Any] = {"pages": args.pages, "pages_at_once": args.pages_at_once,
                               "load_average": os.getloadavg()[0]}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="scrapeq-render-") as folder:
        tmp = Path(folder)
        (tmp / "redis").mkdir()
        redis = RedisProcess(tmp / "redis").start()
        try:
            with threaded_site(shop) as site:
                for name in [n for n in args.systems.split(",") if n]:
                    print(f"{name}: {args.pages} pages ...", file=sys.stderr, flush=True)
                    results[name] = SYSTEMS[name](site, redis.url, args.pages,
                                                  args.pages_at_once, tmp)  # fmt: skip
                    print(json.dumps({name: results[name]}), file=sys.stderr, flush=True)
                checks = [c for c in args.checks.split(",") if c]
                results["checks"] = run_checks(site, redis.url, tmp, checks)
        finally:
            redis.stop()
    results["load_average_after"] = os.getloadavg()[0]
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
