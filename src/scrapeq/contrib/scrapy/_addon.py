"""Scrapy on scrapeq in one setting: ``ADDONS = {"scrapeq.contrib.scrapy.Addon": 0}``."""

from __future__ import annotations

from scrapy.downloadermiddlewares.retry import RetryMiddleware
from scrapy.settings import BaseSettings

from scrapeq.contrib.scrapy._middleware import ReportMiddleware

__all__ = ["DOWNLOADER_ORDER", "SPIDER_ORDER", "Addon"]

#: Where the add-on puts the ReportMiddleware: near the downloader (after Scrapy's own
#: downloader middlewares), and first among the spider middlewares.
DOWNLOADER_ORDER = 950
SPIDER_ORDER = 10


class Addon:
    """A Scrapy add-on (Scrapy's ``ADDONS`` setting) that puts a project's crawl on scrapeq.

    It sets, at the add-on's priority (a project's own ``SCHEDULER`` or ``DUPEFILTER_CLASS``
    wins): ``SCHEDULER`` to :class:`~scrapeq.contrib.scrapy.Scheduler`, ``DUPEFILTER_CLASS``
    to :class:`~scrapeq.contrib.scrapy.DupeFilter`; it adds the
    :class:`~scrapeq.contrib.scrapy.ReportMiddleware` to ``DOWNLOADER_MIDDLEWARES`` (950)
    and ``SPIDER_MIDDLEWARES`` (10) unless the project placed it, and takes Scrapy's
    ``RetryMiddleware`` out (scrapeq retries). With ``SCRAPEQ_REDIS_URL`` (or none: the
    embedded server), that is the whole switch.
    """

    def update_settings(self, settings: BaseSettings) -> None:
        settings.set("SCHEDULER", "scrapeq.contrib.scrapy.Scheduler", priority="addon")
        settings.set("DUPEFILTER_CLASS", "scrapeq.contrib.scrapy.DupeFilter", priority="addon")
        settings.setdefault_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", ReportMiddleware, DOWNLOADER_ORDER
        )
        settings.setdefault_in_component_priority_dict(
            "SPIDER_MIDDLEWARES", ReportMiddleware, SPIDER_ORDER
        )
        settings.set_in_component_priority_dict("DOWNLOADER_MIDDLEWARES", RetryMiddleware, None)
