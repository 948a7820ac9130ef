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
from scrapeq.errors import ConfigError, PayloadTooLarge, RedisUnavailable

__all__ = ["ALL_REFUSED", "CONFIG_ERROR", "INCOMPLETE_SETUP", "REDIS_UNAVAILABLE", "Scheduler"]

log = logging.getLogger("scrapeq.scrapy")

#: The crawl's finish reason when every request it made was refused.
ALL_REFUSED = "scrapeq_all_refused"
#: The finish reasons of a crawl the scheduler would not open: a scrapeq or Scrapy setting
#: is wrong; Redis cannot be reached; what acknowledges the pages is missing.
CONFIG_ERROR = "scrapeq_config_error"
REDIS_UNAVAILABLE = "scrapeq_redis_unavailable"
INCOMPLETE_SETUP = "scrapeq_incomplete_setup"
#: What the error line of an incomplete setup suggests.
ADDON_HINT = 'set ADDONS = {"scrapeq.contrib.scrapy.Addon": 0}, which installs them all'


class Scheduler:
    """A Scrapy scheduler whose frontier is a scrapeq queue (package docstring)."""

    def __init__(self, crawler: Crawler, dupefilter: DupeFilter | None) -> None:
        self.crawler = crawler
        self.df = dupefilter
        self.frontier: Frontier | None = None
        self._said_all_refused = False
        self._refused: str | None = None  # the finish reason of a crawl not opened

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from scrapy.utils.misc import build_from_crawler, load_object

        df_class = load_object(crawler.settings["DUPEFILTER_CLASS"])
        df = build_from_crawler(df_class, crawler) if issubclass(df_class, DupeFilter) else None
        scheduler = cls(crawler, df)
        crawler.signals.connect(scheduler.spider_idle, signal=signals.spider_idle)
        crawler.signals.connect(scheduler.spider_opened, signal=signals.spider_opened)
        return scheduler

    def open(self, spider: Spider) -> None:
        """Open the crawl's frontier; a mistake (a setting, Redis out of reach, a middleware
        missing) is one error line, and the spider is closed as soon as it is open, with its
        own finish reason (:meth:`spider_opened`): no traceback, no claim never settled."""
        try:
            self._check_setup()
            frontier = Frontier(self.crawler, spider)
            frontier.on_dropped = self._dropped
            frontier.open()
        except ConfigError as exc:
            self._refuse(CONFIG_ERROR, str(exc))
        except RedisUnavailable as exc:
            self._refuse(REDIS_UNAVAILABLE, str(exc))
        except _IncompleteSetup as exc:
            self._refuse(INCOMPLETE_SETUP, str(exc))
        else:
            self.frontier = frontier

    def _refuse(self, reason: str, text: str) -> None:
        self._refused = reason
        text = text.replace("\r", "\\r").replace("\n", "\\n")
        log.error("scrapeq: the crawl cannot start: %s", text)

    def spider_opened(self) -> None:
        """Close a crawl whose scheduler would not open (Scrapy honours a ``CloseSpider``
        raised here once every component is open, so each closes cleanly)."""
        if self._refused is not None:
            raise CloseSpider(self._refused)

    def _check_setup(self) -> None:
        """Raise _IncompleteSetup when the crawl lacks what settles its claims: the
        ReportMiddleware as a downloader and a spider middleware, Scrapy's RetryMiddleware
        off (it would fetch again what scrapeq retries). Checked on the middlewares Scrapy
        built (a scheduler built without an engine, as in a unit test, is not checked)."""
        from scrapy.downloadermiddlewares.retry import RetryMiddleware

        from scrapeq.contrib.scrapy._middleware import ReportMiddleware

        try:
            engine = self.crawler.engine
        except RuntimeError:  # Scrapy's "not set yet": no crawl runs this scheduler
            return
        downloader = getattr(getattr(engine, "downloader", None), "middleware", None)
        spider = getattr(getattr(engine, "scraper", None), "spidermw", None)
        if downloader is None or spider is None:
            return
        missing = [
            name
            for name, manager in (
                ("DOWNLOADER_MIDDLEWARES", downloader),
                ("SPIDER_MIDDLEWARES", spider),
            )
            if not any(isinstance(m, ReportMiddleware) for m in manager.middlewares)
        ]
        wrong = []
        if missing:
            wrong.append(
                f"scrapeq.contrib.scrapy.ReportMiddleware is missing from {' and '.join(missing)}"
                " (without it no page fetched is ever acknowledged)"
            )
        if any(isinstance(m, RetryMiddleware) for m in downloader.middlewares):
            wrong.append(
                "Scrapy's RetryMiddleware is on in DOWNLOADER_MIDDLEWARES (scrapeq retries: "
                "it must be off)"
            )
        if wrong:
            raise _IncompleteSetup(f"{'; '.join(wrong)}: {ADDON_HINT}")

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
        if frontier is None:
            return False  # not opened (the error is logged): the crawl is closing
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
                "above): nothing was scheduled or fetched; the next run takes the start "
                "requests again", frontier.queue.name, frontier.refused,
            )  # fmt: skip
        raise CloseSpider(ALL_REFUSED)


class _IncompleteSetup(Exception):
    """The crawl lacks a component that settles its claims (:meth:`Scheduler._check_setup`)."""
