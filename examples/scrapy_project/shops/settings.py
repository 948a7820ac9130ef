"""A Scrapy project whose frontier is a scrapeq queue (see README, "Scrapy").

scrapeq's settings are read as the CLI reads them: SCRAPEQ_<NAME> environment variables
(SCRAPEQ_REDIS_URL, SCRAPEQ_QUEUE, SCRAPEQ_ALLOW_PRIVATE, ...) and scrapeq.toml, below the
SCRAPEQ_* settings here (or `scrapy crawl -s`), which play the part of the CLI's flags.
"""

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
SCRAPEQ_SETTINGS = {"domain_concurrency": 4, "request_timeout": 30}
