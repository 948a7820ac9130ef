"""One crawl of Scrapy on scrapeq, measured (:func:`crawl`), for ``bench/scrapy_calls.py`` and
``bench/cost.py``'s Scrapy row.

:func:`crawl` runs this file again as a process of its own (Scrapy's reactor starts once a
process): Scrapy with the add-on over the given pages of the fleet, each queue call counted by
name, printing one line ``FIGURES {json}``; the parent adds what redis-server spent.
Child's arguments: ``REDIS_URL PAGES CONCURRENCY PORTS_JSON KIND``.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

import redis

from _redis import commandstats, server_cpu

#: The figures scrapy_calls.py shows, in order (crawl's docstring).
SHOWN = (
    "pages/s", "scrapy us/page", "redis us/page", "calls/page", "jobs/claim", "jobs/settle",
    "give-backs/page",
)  # fmt: skip


def crawl(url: str, pages: int, concurrency: int, ports: list[int], kind: str) -> dict[str, float]:
    """One crawl of ``pages`` pages of ``kind`` (``slow`` or ``p``) over the fleet's ``ports``
    by a child process, on a flushed server: the figures of :data:`SHOWN`
    (``bench/scrapy_calls.py``),
    ``seconds`` (the crawl's wall time) and ``cmds/page`` (every command Redis ran, those inside
    scripts included)."""
    client = redis.Redis.from_url(url)
    client.flushall()
    client.config_resetstat()
    cpu = server_cpu(client)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = [url, str(pages), str(concurrency), json.dumps(ports), kind]
    done = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, env=env, timeout=600
    )
    redis_s = server_cpu(client) - cpu
    stats = commandstats(client)
    client.close()
    line = next((s for s in done.stdout.splitlines() if s.startswith("FIGURES ")), None)
    if line is None:
        raise SystemExit(f"the crawl gave no figures:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    f: dict[str, Any] = json.loads(line.removeprefix("FIGURES "))
    calls = f["calls"]
    scripts = stats["scripts"][0]
    cmds = sum(n for name, (n, _) in stats.items() if name not in ("info", "config"))
    return {
        "pages/s": pages / f["seconds"],
        "scrapy us/page": f["cpu"] / pages * 1e6,
        "redis us/page": redis_s / pages * 1e6,
        "calls/page": scripts / pages,
        "jobs/claim": calls["claim"][1] / max(calls["claim"][0], 1),
        "jobs/settle": calls["settle_many"][1] / max(calls["settle_many"][0], 1),
        "give-backs/page": calls["downloaded"][0] / pages,
        "seconds": f["seconds"],
        "cmds/page": cmds / pages,
    }


# --- the child --------------------------------------------------------------------------------


def _counted(calls: dict[str, list[int]], name: str) -> None:
    """Count the calls of ``Queue.<name>`` in ``calls[name]``: the jobs each carried (its
    answer's or its first argument's length)."""
    from scrapeq.engine.queue import Queue

    method: Callable[..., Any] = getattr(Queue, name)
    calls[name] = []

    def counted(self: Queue, *args: Any, **kwargs: Any) -> Any:
        answer = method(self, *args, **kwargs)
        if name == "claim":
            calls[name].append(len(answer.jobs))
        else:
            calls[name].append(len(args[0]) if args and isinstance(args[0], list) else 1)
        return answer

    setattr(Queue, name, counted)


def _child() -> None:
    import scrapy  # here: the parent runs where Scrapy may be missing
    from scrapy.crawler import CrawlerProcess

    url, pages, concurrency = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ports: list[int] = json.loads(sys.argv[4])
    kind = sys.argv[5]
    calls: dict[str, list[int]] = {}
    for name in ("claim", "settle_many", "downloaded", "enqueue_many"):
        _counted(calls, name)

    class Pages(scrapy.Spider):
        name = "pages"
        urls: ClassVar[list[str]] = [
            f"http://127.0.0.1:{ports[i % len(ports)]}/{kind}/{i:07d}" for i in range(pages)
        ]

        async def start(self) -> AsyncIterator[scrapy.Request]:
            for page in self.urls:
                yield scrapy.Request(page, callback=self.parse)

        def parse(self, response: Any) -> Iterator[dict[str, str]]:
            yield {"url": response.url}

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
    counts = {name: [len(n), sum(n)] for name, n in calls.items()}
    figures = {"seconds": seconds, "cpu": usage.ru_utime + usage.ru_stime, "calls": counts}
    print("FIGURES " + json.dumps(figures), flush=True)


if __name__ == "__main__":
    _child()
