"""A Scrapy scheduler whose frontier is a scrapeq queue (package docstring)."""

from __future__ import annotations

import logging
from typing import Self

from scrapy import Request, Spider, signals
from scrapy.crawler import Crawler
from scrapy.exceptions import CloseSpider

from scrapeq.contrib.scrapy._dupefilter import DupeFilter
from scrapeq.contrib.scrapy._frontier import JOB, SETTLED, Frontier
from scrapeq.contrib.scrapy._store import UnstorableRequest
from scrapeq.errors import PayloadTooLarge

__all__ = ["ALL_REFUSED", "Scheduler"]

log = logging.getLogger("scrapeq.scrapy")

#: The crawl's finish reason when every request it made was refused.
ALL_REFUSED = "scrapeq_all_refused"


class Scheduler:
    """A Scrapy scheduler whose frontier is a scrapeq queue (package docstring)."""

    def __init__(self, crawler: Crawler, dupefilter: DupeFilter | None) -> None:
        self.crawler = crawler
        self.df = dupefilter
        self.frontier: Frontier | None = None
        self._said_all_refused = False

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from scrapy.utils.misc import build_from_crawler, load_object

        df_class = load_object(crawler.settings["DUPEFILTER_CLASS"])
        df = build_from_crawler(df_class, crawler) if issubclass(df_class, DupeFilter) else None
        scheduler = cls(crawler, df)
        crawler.signals.connect(scheduler.spider_idle, signal=signals.spider_idle)
        return scheduler

    def open(self, spider: Spider) -> None:
        self.frontier = Frontier(self.crawler, spider)
        self.frontier.on_dropped = self._dropped
        self.frontier.open()

    def close(self, reason: str) -> None:
        if self.frontier is not None:
            self.frontier.close(reason)

    def has_pending_requests(self) -> bool:
        return self.frontier is not None and self.frontier.has_pending()

    def enqueue_request(self, request: Request) -> bool:
        """Schedule ``request`` as a job; False when it is dropped: a start request another
        process of the crawl takes, or refused (logged: it cannot be stored as JSON, its URL
        or lane is refused).

        The requests of one reactor turn are written in one enqueue call at the turn's end
        (a burst of 40 costs one round trip, not 40), so the seen-set's answer comes after
        this returns True: a request seen before, or whose payload is too large (logged), is
        then dropped with Scrapy's ``request_dropped`` signal."""
        frontier = self.frontier
        assert frontier is not None, "the scheduler is not open"
        parent = request.meta.get(JOB)
        if parent is not None:
            # A request made from a claimed one by a middleware: a redirect (the job moves
            # on to the new URL: done), or a retry of a job scrapeq already settled (dropped:
            # scrapeq retries it).
            if request.meta.get(SETTLED):
                return False
            request.meta[SETTLED] = True
        elif request.meta.get("is_start_request") and not frontier.start.mine:
            frontier.stat("start_requests_skipped")
            return False
        scheduled = self._add(frontier, request)
        if parent is not None:  # the new request is written first (settle flushes)
            frontier.settle(parent, frontier.timed(frontier.queue.done(parent), request.meta))
        return scheduled

    def _add(self, frontier: Frontier, request: Request) -> bool:
        try:
            frontier.add(request, frontier.spec(request, self.df))
        except (UnstorableRequest, PayloadTooLarge) as exc:
            frontier.refuse(request, exc)
            return False
        return True

    def _dropped(self, request: Request, status: str) -> None:
        """A scheduled request the enqueue call dropped (seen before, or too large)."""
        frontier = self.frontier
        assert frontier is not None
        if status != "refused" and self.df is not None:
            self.df.log(request, frontier.spider)
        self.crawler.signals.send_catch_log(
            signals.request_dropped, request=request, spider=frontier.spider
        )

    def next_request(self) -> Request | None:
        return None if self.frontier is None else self.frontier.next_request()

    def spider_idle(self) -> None:
        """Close the crawl loudly when every request it made was refused: an error line,
        and the finish reason ``scrapeq_all_refused`` (Scrapy's exit status stays 0: no
        component may set it)."""
        frontier = self.frontier
        if frontier is None or not frontier.all_refused():
            return
        if not self._said_all_refused:
            self._said_all_refused = True
            log.error(
                "scrapeq queue=%s: every request of this crawl was refused (%d, reasons "
                "above): nothing was scheduled or fetched", frontier.queue.name, frontier.refused,
            )  # fmt: skip
        raise CloseSpider(ALL_REFUSED)
