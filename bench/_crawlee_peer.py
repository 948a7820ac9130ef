"""bench/incident.py's Crawlee systems: Crawlee for Python's ``HttpCrawler`` with its default
storage (``crawlee``) and on scrapeq's storage client (``crawlee-scrapeq``).

Both crawl the same job list with the bench's timeout (crawlee's ``navigation_timeout``, 30 s)
and concurrency (``ConcurrencySettings`` min = desired = max = ``--concurrency``: crawlee's
autoscaling neither starts lower nor backs off), crawlee's own retries (``max_request_retries``
3; a 429 is a blocked session for crawlee: a rotation, up to 10, not a retry) and a handler
that does nothing with the page. The burst goes in with ``forefront=True``, crawlee's only
priority (scrapeq's urgent lane on scrapeq's client).

* ``crawlee``: crawlee's default storage client, ``FileSystemStorageClient``: a JSON file per
  request under ``<storage>/request_queues/default/`` (``handled_at`` once handled), the
  queue's order and in-progress set in a state persisted now and then. The default queue is
  unnamed, so crawlee purges it at the next start (``purge_on_start``, on by default): a
  request not handled when the crawl was stopped is ``stranded``, not pending.
* ``crawlee-scrapeq``: :class:`scrapeq.contrib.crawlee.ScrapeqStorageClient` on the bench's
  Redis (queue ``incident``, the worker's settings), the crawler watched
  (:meth:`~scrapeq.contrib.crawlee.ScrapeqStorageClient.watch`): its failed navigations reach
  scrapeq's breakers and retries. Its store is read as scrapeq's (its counts).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def storage_dir(redis_url: str) -> Path:
    """The ``crawlee`` system's storage directory: one per bench Redis (the child and the
    store's reader agree on it from the URL alone)."""
    port = urlsplit(redis_url).port or 0
    return Path(tempfile.gettempdir()) / f"bench-incident-crawlee-{port}"


def run_crawlee(
    redis_url: str,
    urls: list[str],
    concurrency: int,
    burst_urls: list[str],
    burst_at: float,
    *,
    on_scrapeq: bool,
    timeout: float,
    retries: int,
    scrapeq_settings: dict[str, Any],
) -> None:
    """Crawl ``urls`` with an HttpCrawler until stopped (or crawlee finds the crawl done)."""
    from crawlee import ConcurrencySettings, Request
    from crawlee.configuration import Configuration
    from crawlee.crawlers import HttpCrawler, HttpCrawlingContext
    from crawlee.storage_clients import FileSystemStorageClient

    logging.basicConfig(level=logging.WARNING)
    options: dict[str, Any] = {
        "concurrency_settings": ConcurrencySettings(
            min_concurrency=concurrency, desired_concurrency=concurrency,
            max_concurrency=concurrency,
        ),
        "max_request_retries": retries,
        "navigation_timeout": timedelta(seconds=timeout),
        "configure_logging": False,
    }  # fmt: skip
    if on_scrapeq:
        from scrapeq.contrib.crawlee import ScrapeqStorageClient
        from scrapeq.engine.config.settings import Settings

        settings = Settings(
            allow_private=True, request_timeout=timeout, queue="incident", **scrapeq_settings
        )
        storage = ScrapeqStorageClient(redis_url, settings=settings)
        crawler: Any = storage.watch(HttpCrawler(storage_client=storage, **options))
    else:
        where = storage_dir(redis_url)
        shutil.rmtree(where, ignore_errors=True)
        configuration = Configuration(storage_dir=str(where))
        crawler = HttpCrawler(
            configuration=configuration, storage_client=FileSystemStorageClient(), **options
        )

    @crawler.router.default_handler
    async def handle(context: HttpCrawlingContext) -> None:
        return None

    async def burst_in() -> None:
        await asyncio.sleep(max(0.0, burst_at - time.monotonic()))
        await crawler.add_requests([Request.from_url(u) for u in burst_urls], forefront=True)

    async def main() -> None:
        task = asyncio.create_task(burst_in())
        await crawler.run(urls)
        await task

    asyncio.run(main())


def read_store(redis_url: str) -> dict[str, Any]:
    """The ``crawlee`` system's store: each request's file, handled (``handled_at``: it
    ended, fetched or given up) or not (stranded: purged at the next start). The storage
    directory is removed once read."""
    queue = storage_dir(redis_url) / "request_queues" / "default"
    ended: list[str] = []
    unhandled: list[str] = []
    for path in sorted(queue.glob("*.json")) if queue.is_dir() else []:
        try:
            request = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(request, dict) or "url" not in request:
            continue  # the queue's metadata
        (ended if request.get("handled_at") else unhandled).append(str(request["url"]))
    shutil.rmtree(storage_dir(redis_url), ignore_errors=True)
    where = "request_queues/default (unhandled: purged at the next start)"
    return {
        "finished": {"request_queues/default (handled)": sorted(set(ended))} if ended else {},
        "pending": {},
        "stranded": {where: sorted(set(unhandled))} if unhandled else {},
    }
