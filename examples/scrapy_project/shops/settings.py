"""A Scrapy project whose frontier is a scrapeq queue (see README, "Scrapy")."""

import os

BOT_NAME = "shops"
SPIDER_MODULES = ["shops.spiders"]
ROBOTSTXT_OBEY = False
LOG_LEVEL = "INFO"
CONCURRENT_REQUESTS = 32

# The frontier: every `scrapy crawl` on this queue shares it.
SCHEDULER = "scrapeq.contrib.scrapy.Scheduler"
DUPEFILTER_CLASS = "scrapeq.contrib.scrapy.DupeFilter"
DOWNLOADER_MIDDLEWARES = {
    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,  # scrapeq retries
    "scrapeq.contrib.scrapy.ReportMiddleware": 950,
}
SPIDER_MIDDLEWARES = {"scrapeq.contrib.scrapy.ReportMiddleware": 10}
SCRAPEQ_REDIS_URL = os.environ.get("SCRAPEQ_REDIS_URL", "redis://127.0.0.1:6379/0")
SCRAPEQ_QUEUE = os.environ.get("SCRAPEQ_QUEUE", "shops")
SCRAPEQ_SETTINGS = {
    "domain_concurrency": 4,
    "request_timeout": 30,
    # The shops of the tests and the demo are on loopback.
    "allow_private": os.environ.get("SCRAPEQ_ALLOW_PRIVATE") == "1",
}
