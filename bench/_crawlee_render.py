"""bench/render.py's Crawlee systems, run as a child process: crawlee-python's
``PlaywrightCrawler`` (``crawlee-playwright``) and ``AdaptivePlaywrightCrawler`` with its Parsel
static parser (``crawlee-adaptive``) on the JS shop, Debian's chromium through
``browser_launch_options`` (``executable_path``: never a browser Playwright downloads).

Both: concurrency fixed at ``AT_ONCE`` (``ConcurrencySettings`` min = desired = max), crawlee's
in-memory storage, images, fonts and media blocked (``block_requests`` in a pre-navigation
hook), crawlee's defaults otherwise (its browser pool, its fingerprints). Each page waits for
``.price:not(:empty)`` (PlaywrightCrawler: ``page.wait_for_selector``; the adaptive crawler:
``query_selector_one``, which fails in its static pass and finds the price in its browser
pass) and pushes ``{url, price}``; the dataset is written to ``OUT`` as JSON lines at the end.

Run: ``python bench/_crawlee_render.py BASE PAGES AT_ONCE OUT playwright|adaptive``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from datetime import timedelta
from typing import Any

WAIT_FOR = ".price:not(:empty)"
LAUNCH = {
    "executable_path": "/usr/bin/chromium",
    "args": ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
}
BLOCKED = [".png", ".jpg", ".jpeg", ".gif", ".svg", ".woff", ".woff2", ".ttf", ".mp4"]


def _crawler(mode: str, at_once: int) -> Any:
    from crawlee import ConcurrencySettings
    from crawlee.crawlers import AdaptivePlaywrightCrawler, PlaywrightCrawler
    from crawlee.storage_clients import MemoryStorageClient

    options: dict[str, Any] = {
        "concurrency_settings": ConcurrencySettings(
            min_concurrency=at_once, desired_concurrency=at_once, max_concurrency=at_once
        ),
        "storage_client": MemoryStorageClient(),
        "configure_logging": False,
        "request_handler_timeout": timedelta(seconds=60),
    }
    browser = {"browser_type": "chromium", "headless": True, "browser_launch_options": LAUNCH}
    if mode == "adaptive":
        return AdaptivePlaywrightCrawler.with_parsel_static_parser(
            playwright_crawler_specific_kwargs=browser, **options
        )
    return PlaywrightCrawler(**browser, **options)


def main() -> None:
    base, pages, at_once, out, mode = sys.argv[1:6]
    logging.basicConfig(level=logging.WARNING)
    crawler = _crawler(mode, int(at_once))

    @crawler.pre_navigation_hook
    async def block(context: Any) -> None:
        if mode != "adaptive" or hasattr(context, "block_requests"):
            # (the adaptive crawler's static pass has no browser to block in)
            with contextlib.suppress(Exception):
                await context.block_requests(url_patterns=BLOCKED)

    @crawler.router.default_handler
    async def handle(context: Any) -> None:
        if mode == "adaptive":
            found = await context.query_selector_one(WAIT_FOR, timeout=timedelta(seconds=30))
            price = None if found is None else found.css("::text").get()
        else:
            await context.page.wait_for_selector(WAIT_FOR, timeout=30_000)
            price = await context.page.text_content(".price")
        await context.push_data({"url": context.request.url, "price": price})

    async def run() -> None:
        await crawler.run([f"{base}/p/{n}" for n in range(1, int(pages) + 1)])
        data = await crawler.get_data()
        with open(out, "w") as f:
            for item in data.items:
                f.write(json.dumps(item) + "\n")

    asyncio.run(run())


if __name__ == "__main__":
    main()
