"""De-duplication on scrapeq's seen-set, by Scrapy's request fingerprint."""

from __future__ import annotations

from typing import Self

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.dupefilters import BaseDupeFilter

from scrapeq.engine.model.seen import exact_bucket, stored_buckets
from scrapeq.engine.queue import Queue

__all__ = ["DupeFilter"]


class DupeFilter(BaseDupeFilter):
    """De-duplication on scrapeq's seen-set, by Scrapy's request fingerprint.

    The :class:`Scheduler` asks :meth:`fingerprint_of` each request it enqueues: the request's
    fingerprint (``crawler.request_fingerprinter``: method, canonical URL, body) takes the
    place of scrapeq's URL fingerprint (``Queue.prepare(fingerprint64=...)``); the enqueue
    script checks and adds it atomically, for every process of the crawl. :meth:`request_seen`
    answers the same question read-only.
    """

    def __init__(self, crawler: Crawler | None = None) -> None:
        self.crawler = crawler
        self._queue: Queue | None = None
        self._buckets: int | None = None  # the queue's seen-set bucket count, once read

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    def fingerprint64(self, request: Request) -> int:
        """The first 8 bytes of Scrapy's request fingerprint, as scrapeq's 64-bit one."""
        if self.crawler is not None and self.crawler.request_fingerprinter is not None:
            digest = self.crawler.request_fingerprinter.fingerprint(request)
        else:
            from scrapy.utils.request import fingerprint

            digest = fingerprint(request)
        return int.from_bytes(digest[:8], "big")

    def fingerprint_of(self, request: Request, queue: Queue) -> int:
        """The 64-bit fingerprint ``request`` is enqueued in ``queue`` with (the queue
        :meth:`request_seen` then reads)."""
        self._queue = queue
        return self.fingerprint64(request)

    def request_seen(self, request: Request) -> bool:
        """Whether the crawl's seen-set has the request (read only; exact seen-sets)."""
        if self._queue is None:
            return False  # nothing was enqueued through this filter yet
        if self._queue._dedup.seen.filter != "exact":
            return False  # a Bloom filter is read by the enqueue script only
        if self._buckets is None:  # fixed for the queue's life once it has a seen-set
            stamp = self._queue.client.hget(self._queue.keys.meta, "seen")
            self._buckets = stored_buckets(str(stamp) if stamp is not None else None)
            if self._buckets is None:
                return False  # nothing was seen yet
        fp64 = self.fingerprint64(request)
        key = self._queue.keys.seen(exact_bucket(fp64, self._buckets))
        return bool(self._queue.client.sismember(key, str(fp64)))

    def log(self, request: Request, spider: Spider) -> None:
        if self.crawler is not None and self.crawler.stats is not None:
            self.crawler.stats.inc_value("dupefilter/filtered")
