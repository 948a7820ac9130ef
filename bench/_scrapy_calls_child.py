"""The crawl of ``bench/scrapy_calls.py``, in a process of its own (Scrapy's reactor starts once
a process): Scrapy on scrapeq (the add-on) over the given pages, each queue call counted by
name. Prints one line ``FIGURES {json}``.

Run by scrapy_calls.py and cost.py: ``python bench/_scrapy_calls_child.py REDIS_URL PAGES
CONCURRENCY PORTS_JSON [KIND]`` (the fleet's path kind: ``slow``, the default, or ``p``, an
instant page).
"""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

import scrapy
from scrapy.crawler import CrawlerProcess

from scrapeq.engine.queue import Queue

CALLS: dict[str, list[int]] = {}


def _count(name: str) -> None:
    """Count the calls of ``Queue.<name>`` and the jobs each carried (its answer's or its
    first argument's length)."""
    method: Callable[..., Any] = getattr(Queue, name)
    CALLS[name] = []

    def counted(self: Queue, *args: Any, **kwargs: Any) -> Any:
        answer = method(self, *args, **kwargs)
        if name == "claim":
            CALLS[name].append(len(answer.jobs))
        else:
            CALLS[name].append(len(args[0]) if args and isinstance(args[0], list) else 1)
        return answer

    setattr(Queue, name, counted)


class Pages(scrapy.Spider):
    name = "pages"
    urls: ClassVar[list[str]] = []

    async def start(self) -> AsyncIterator[scrapy.Request]:
        for url in self.urls:
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response: Any) -> Iterator[dict[str, str]]:
        yield {"url": response.url}


def main() -> None:
    url, pages, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ports: list[int] = json.loads(sys.argv[4])
    kind = sys.argv[5] if len(sys.argv) > 5 else "slow"
    for name in ("claim", "settle_many", "downloaded", "enqueue_many"):
        _count(name)
    Pages.urls = [f"http://127.0.0.1:{ports[i % len(ports)]}/{kind}/{i:07d}" for i in range(pages)]
    process = CrawlerProcess(
        settings={
            "ADDONS": {"scrapeq.contrib.scrapy.Addon": 0},
            "SCRAPEQ_REDIS_URL": url,
            "SCRAPEQ_QUEUE": "calls",
            "SCRAPEQ_SETTINGS": {"allow_private": True, "domain_concurrency": 4},
            "CONCURRENT_REQUESTS": concurrency,
            "LOG_LEVEL": "WARNING",
            "ROBOTSTXT_OBEY": False,
            "TELNETCONSOLE_ENABLED": False,
            "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
        }
    )
    process.crawl(Pages)
    started = time.monotonic()
    process.start()
    seconds = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_SELF)
    calls = {name: [len(n), sum(n)] for name, n in CALLS.items()}
    figures = {"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime, "calls": calls}
    print("FIGURES " + json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
