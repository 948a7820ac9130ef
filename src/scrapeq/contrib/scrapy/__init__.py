"""Scrapy on scrapeq: keep the spiders, get scrapeq's frontier.

One setting puts a project on scrapeq: ``ADDONS = {"scrapeq.contrib.scrapy.Addon": 0}``
(:class:`Addon`, a Scrapy add-on) installs the three pieces below and takes Scrapy's retry
middleware out (see docs/guide/scrapy.md). A scheduler opened without them (the middleware
missing from either setting, Scrapy's retry on) refuses with one error line naming what is
missing and the finish reason ``scrapeq_incomplete_setup``; a bad setting
(``scrapeq_config_error``) or Redis out of reach (``scrapeq_redis_unavailable``) is one error
line too: the spider opens and closes at once, no traceback, nothing claimed.

The pieces:

* :class:`Scheduler` (``SCHEDULER``): every request a spider yields becomes a scrapeq job
  (its URL, lane and a JSON payload holding the request: :mod:`._store`, never a pickle); the
  engine's ``next_request`` claims jobs, so every ``scrapy crawl`` process on one queue shares
  one frontier, with scrapeq's per-domain breakers, politeness, concurrency and leases. A
  claimed job's lease is renewed while its request is in flight; a killed process's requests
  come back when their leases expire; a graceful stop releases what the process holds without
  spending an attempt. A request that cannot be scheduled (not JSON, its URL refused) is
  refused with one error line and the crawl goes on; a crawl whose every request was refused
  ends with an error line and the finish reason ``scrapeq_all_refused``. Start requests are
  taken from one process per crawl only (:mod:`._start`: the first process to open reads
  them; another waits for their work and claims its share; a start cut short is taken again
  by the next process to open).
* :class:`DupeFilter` (``DUPEFILTER_CLASS``): de-duplication on scrapeq's seen-set, by Scrapy's
  request fingerprint (method, canonical URL, body); the check and the add are the enqueue
  script's, atomic across processes.
* :class:`ReportMiddleware` (a downloader middleware, and a spider middleware): reports each
  response or exception (status, latency, Retry-After) to the queue exactly as scrapeq's own
  worker does (:mod:`scrapeq.runtime.classify`): a 503 or a timeout is a retry charged to the
  domain's breaker, a 429 a throttle, a 404 a dead letter; an answer that is not ``ok`` is
  settled at once and the request dropped (``IgnoreRequest``: scrapeq retries it later, from
  any process). An ``ok`` response goes to its callback, and the job is acked once the
  callback's output is consumed; a callback that raised is the spider's bug (Scrapy logs it):
  its job is done too, unless ``SCRAPEQ_RETRY_CALLBACK_ERRORS`` is set (then it is retried,
  not charged to the domain).

Settings (:mod:`._config`): scrapeq's are loaded as the CLI loads them (environment
``SCRAPEQ_<NAME>``, ``scrapeq.toml``), with the Scrapy settings as flags: ``SCRAPEQ_SETTINGS``
[``{}``: scrapeq settings by name, e.g. ``{"domain_concurrency": 4}``], ``SCRAPEQ_REDIS_URL``
[the embedded server], ``SCRAPEQ_QUEUE`` [the spider's name], ``SCRAPEQ_UNIQUE`` [``"seen"``:
a request without ``dont_filter`` is dropped when its fingerprint was ever enqueued;
``"pending"``: while a job has it; ``"off"``], ``SCRAPEQ_CONFIG`` [the TOML file]. Scrapy's
own: ``SCRAPEQ_LANE`` [the default lane; a request's ``meta["scrapeq_lane"]`` wins],
``SCRAPEQ_CLAIM_BATCH`` [16: jobs claimed per round trip at most],
``SCRAPEQ_RETRY_CALLBACK_ERRORS`` [False], ``SCRAPEQ_NEW_CRAWL`` [False: the process forgets
what the queue has seen before it opens, so a finished crawl runs again; the first process
of a new crawl only].
"""

from __future__ import annotations

from scrapeq.contrib.scrapy._addon import Addon
from scrapeq.contrib.scrapy._dupefilter import DupeFilter
from scrapeq.contrib.scrapy._frontier import settlement_for
from scrapeq.contrib.scrapy._middleware import ReportMiddleware
from scrapeq.contrib.scrapy._scheduler import Scheduler
from scrapeq.contrib.scrapy._store import UnstorableRequest

__all__ = [
    "Addon",
    "DupeFilter",
    "ReportMiddleware",
    "Scheduler",
    "UnstorableRequest",
    "settlement_for",
]
