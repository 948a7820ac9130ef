"""A crawlee BeautifulSoupCrawler on a scrapeq queue (watched), as a process of its own.

``python -m support.crawlee_crawler REDIS_URL QUEUE START_URL OUT [LEASE]``: crawls from
START_URL (links of the same host), writing ``begin URL`` to OUT when its handler starts and
``done URL`` when it ends (after a pause of ``SCRAPEQ_TEST_HANDLER_PAUSE`` seconds, 0 by
default), each line flushed at once (a process killed with SIGKILL leaves every line it
wrote); exits 0 once crawlee's ``is_finished`` says the queue's crawl is over (every
process's requests handled).
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys

from crawlee.crawlers import BeautifulSoupCrawler, BeautifulSoupCrawlingContext

from scrapeq.contrib.crawlee import ScrapeqStorageClient
from scrapeq.engine.config.settings import Settings


async def crawl(redis_url: str, queue: str, start: str, out: str, lease: float) -> None:
    # Four pages of the site at a time, shared by every process of the queue.
    settings = Settings(allow_private=True, queue=queue, lease=lease, domain_concurrency=4)
    storage = ScrapeqStorageClient(redis_url, settings=settings)
    crawler = storage.watch(BeautifulSoupCrawler(storage_client=storage, configure_logging=False))

    pause = float(os.environ.get("SCRAPEQ_TEST_HANDLER_PAUSE", "0"))

    def note(what: str, url: str) -> None:
        with open(out, "a") as lines:
            lines.write(f"{what} {url}\n")
            lines.flush()

    @crawler.router.default_handler
    async def handle(context: BeautifulSoupCrawlingContext) -> None:
        note("begin", context.request.url)
        await context.enqueue_links()
        await asyncio.sleep(pause)
        note("done", context.request.url)

    await crawler.run([start])


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    redis_url, queue, start, out = sys.argv[1:5]
    lease = float(sys.argv[5]) if len(sys.argv) > 5 else 60.0
    asyncio.run(crawl(redis_url, queue, start, out, lease))


if __name__ == "__main__":
    main()
