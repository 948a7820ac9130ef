"""Scrapy on scrapeq: keep the spiders, get scrapeq's frontier.

Three pieces, configured in a Scrapy project's settings (see README, "Scrapy"):

* :class:`Scheduler` (``SCHEDULER``): every request a spider yields becomes a scrapeq job
  (its URL, lane and a JSON payload holding the request: :mod:`._store`, never a pickle); the
  engine's ``next_request`` claims jobs, so every ``scrapy crawl`` process on one queue shares
  one frontier, with scrapeq's per-domain breakers, politeness, concurrency and leases. A
  claimed job's lease is renewed while its request is in flight; a killed process's requests
  come back when their leases expire; a graceful stop releases what the process holds without
  spending an attempt. Start requests are taken from one process per crawl only (the queue's
  ``once`` flag ``scrapy-start``: the first process to open wins).
* :class:`DupeFilter` (``DUPEFILTER_CLASS``): de-duplication on scrapeq's seen-set, by Scrapy's
  request fingerprint (method, canonical URL, body); the check and the add are the enqueue
  script's, atomic across processes.
* :class:`ReportMiddleware` (a downloader middleware, and a spider middleware): reports each
  response or exception (status, latency, Retry-After) to the queue exactly as scrapeq's own
  worker does (:mod:`scrapeq.runtime.classify`): a 503 or a timeout is a retry charged to the
  domain's breaker, a 429 a throttle, a 404 a dead letter; an answer that is not ``ok`` is
  settled at once and the request dropped (``IgnoreRequest``: scrapeq retries it later, from
  any process). An ``ok`` response goes to its callback, and the job is acked once the
  callback's output is consumed (retried, not charged to the domain, if the callback raised).

Scrapy's settings (defaults in brackets): ``SCRAPEQ_REDIS_URL`` [``redis://127.0.0.1:6379/0``],
``SCRAPEQ_QUEUE`` [the spider's name], ``SCRAPEQ_SETTINGS`` [``{}``: scrapeq settings by name,
e.g. ``{"domain_concurrency": 4, "breaker_cooldown": 60}``], ``SCRAPEQ_LANE`` [the default
lane; a request's ``meta["scrapeq_lane"]`` wins], ``SCRAPEQ_UNIQUE`` [``"seen"``: a request
without ``dont_filter`` is dropped when its fingerprint was ever enqueued; ``"pending"``: while
a job has it; ``"off"``], ``SCRAPEQ_CLAIM_BATCH`` [16: jobs claimed per round trip at most].
"""

from __future__ import annotations

import logging
import os
import socket
import time
import weakref
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Self

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.dupefilters import BaseDupeFilter
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response
from twisted.internet import task
from twisted.internet.base import DelayedCall

from scrapeq.contrib.scrapy._classify import classify_failure
from scrapeq.contrib.scrapy._store import (
    META_PREFIX,
    UnstorableRequest,
    decode_request,
    encode_request,
)
from scrapeq.engine.job import Job
from scrapeq.engine.queue import Queue
from scrapeq.engine.scripts import EnqueueSpec, Settlement
from scrapeq.engine.seen import exact_bucket, stored_buckets
from scrapeq.engine.settings import UNIQUE_MODES, Settings
from scrapeq.errors import ConfigError, InvalidURL
from scrapeq.runtime.classify import Classification, Outcome, classify_response

__all__ = [
    "DupeFilter",
    "ReportMiddleware",
    "Scheduler",
    "UnstorableRequest",
    "settlement_for",
]

log = logging.getLogger("scrapeq.scrapy")

#: The queue's ``once`` flag that elects the process whose start requests are taken.
START_FLAG = "scrapy-start"
#: Most seconds between two claims while nothing was ready.
IDLE_MAX = 1.0
#: Seconds a read of the queue's counts is reused for ``has_pending_requests``.
COUNTS_TTL = 0.25

_JOB = f"{META_PREFIX}_job"
_STARTED = f"{META_PREFIX}_started"
_VERDICT = f"{META_PREFIX}_verdict"
_SETTLED = f"{META_PREFIX}_settled"


def settlement_for(queue: Queue, job: Job, verdict: Classification) -> Settlement:
    """The settlement scrapeq's worker makes of a verdict (``Worker._from_classification``)."""
    message = verdict.message or verdict.reason
    counts = verdict.counts_against_domain
    if verdict.outcome is Outcome.OK:
        return queue.done(job, domain_failed=counts)
    if verdict.outcome is Outcome.FAIL:
        return queue.failing(job, verdict.reason, message, domain_failed=counts or None)
    if verdict.outcome is Outcome.THROTTLED:
        return queue.throttling(
            job, verdict.retry_after, kind=verdict.reason, message=message, domain_failed=counts
        )
    if verdict.outcome is Outcome.OURS:
        return queue.releasing(job, kind=f"released:{verdict.reason}", message=message)
    return queue.retrying(
        job,
        kind=verdict.reason,
        message=message,
        retry_after=verdict.retry_after,
        domain_failed=counts,
    )


@dataclass(frozen=True, slots=True)
class _Config:
    redis_url: str
    queue: str
    settings: Settings
    lane: str | None
    unique: str
    claim_batch: int
    concurrency: int
    set_timeout: bool

    @classmethod
    def from_crawler(cls, crawler: Crawler, spider_name: str) -> _Config:
        s = crawler.settings
        overrides = s.getdict("SCRAPEQ_SETTINGS")
        name = s.get("SCRAPEQ_QUEUE") or overrides.get("queue") or spider_name
        try:
            settings = Settings(**{**overrides, "queue": name})
        except TypeError as exc:
            raise ConfigError("SCRAPEQ_SETTINGS", str(exc)) from None
        unique = s.get("SCRAPEQ_UNIQUE", "seen")
        if unique not in UNIQUE_MODES:
            raise ConfigError("SCRAPEQ_UNIQUE", f"expected off, pending or seen, got {unique!r}")
        batch = s.getint("SCRAPEQ_CLAIM_BATCH", 16)
        if batch < 1:
            raise ConfigError("SCRAPEQ_CLAIM_BATCH", f"must be >= 1, got {batch}")
        lane = s.get("SCRAPEQ_LANE")
        if lane is not None:
            settings.lanes.get(lane)  # raises ConfigError naming the known lanes
        return cls(
            redis_url=s.get("SCRAPEQ_REDIS_URL") or "redis://127.0.0.1:6379/0",
            queue=name,
            settings=settings,
            lane=lane,
            unique=unique,
            claim_batch=batch,
            concurrency=s.getint("CONCURRENT_REQUESTS", 16),
            # Scrapy's DOWNLOAD_TIMEOUT (180 s) unless the project set it: scrapeq's
            # request_timeout, so a hanging site costs what it costs scrapeq's worker.
            set_timeout=(s.getpriority("DOWNLOAD_TIMEOUT") or 0) <= 0,
        )


class _Frontier:
    """One crawler's link to its queue: the jobs it holds, claims, settlements, leases."""

    _of: ClassVar[weakref.WeakKeyDictionary[Crawler, _Frontier]] = weakref.WeakKeyDictionary()

    def __init__(self, crawler: Crawler, spider: Spider) -> None:
        self.crawler = crawler
        self.spider = spider
        self.config = _Config.from_crawler(crawler, spider.name)
        self.queue = Queue.from_url(self.config.redis_url, settings=self.config.settings)
        self.held: dict[str, Job] = {}  # claimed, not settled: their leases are renewed
        self.ready: deque[Request] = deque()  # claimed, not handed to the engine yet
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.starter = False
        self._claim_after = 0.0
        self._wake_call: DelayedCall | None = None
        self._counts: tuple[float, bool] = (0.0, True)
        self._beat = task.LoopingCall(self.heartbeat)

    @classmethod
    def of(cls, crawler: Crawler) -> _Frontier | None:
        return cls._of.get(crawler)

    def open(self) -> None:
        self._of[self.crawler] = self
        self.starter, winner = self.queue.once(START_FLAG, self.holder)
        if self.starter:
            log.info("scrapeq queue=%s: this process takes the start requests", self.queue.name)
        else:
            log.info(
                "scrapeq queue=%s: start requests were taken by %s; this process only claims",
                self.queue.name,
                winner,
            )
        self._beat.start(max(self.config.settings.lease / 3, 0.05), now=False)

    def close(self, reason: str) -> None:
        if self._beat.running:
            self._beat.stop()
        if self._wake_call is not None and self._wake_call.active():
            self._wake_call.cancel()
        held = list(self.held.values())
        self.held.clear()
        self.ready.clear()
        if held:
            # Stopping is nobody's fault: no attempt, no release budget spent.
            self.queue.settle_many([self.queue.releasing(j, shutdown=True) for j in held])
            log.info("scrapeq: released %d jobs without spending an attempt (%s)", len(held),
                     reason)  # fmt: skip
            self._stat("released_at_close", len(held))
        self.queue.close()
        self._of.pop(self.crawler, None)

    # --- scheduling ------------------------------------------------------------------------

    def spec(self, request: Request, dupefilter: DupeFilter | None) -> EnqueueSpec:
        payload = encode_request(request, self.spider)
        lane = request.meta.get("scrapeq_lane", self.config.lane)
        unique = "off" if request.dont_filter else self.config.unique
        try:
            spec = self.queue.prepare(request.url, lane=lane, payload=payload, unique=unique)
        except InvalidURL as exc:
            raise UnstorableRequest(f"cannot schedule {request!r}: {exc}") from None
        if dupefilter is not None and spec.unique is not None:
            spec = dupefilter.key(request, spec, self.queue)
        return spec

    def enqueue(self, spec: EnqueueSpec) -> str:
        (result,) = self.queue.enqueue_many([spec])
        if result.added and not self.ready:
            self._claim_after = 0.0  # a job may be ready now: the next request claims
        return result.status

    def next_request(self) -> Request | None:
        if not self.ready and time.monotonic() >= self._claim_after:
            self._claim()
        return self.ready.popleft() if self.ready else None

    def _claim(self) -> None:
        free = self.config.concurrency - len(self.held)
        if free <= 0:
            return
        claimed = self.queue.claim(min(free, self.config.claim_batch))
        for job in claimed.jobs:
            self.held[job.id] = job
            try:
                request = decode_request(job.payload, self.spider)
            except ValueError as exc:
                self.settle(job, self.queue.failing(job, "bad_payload", str(exc)))
                continue
            request.meta[_JOB] = job
            request.meta.setdefault("download_slot", job.domain)  # Scrapy's slot = the domain
            if self.config.set_timeout:
                request.meta.setdefault("download_timeout", self.config.settings.request_timeout)
            self.ready.append(request)
        self._stat("claimed", len(claimed.jobs))
        if not claimed.jobs:
            wait = IDLE_MAX if claimed.next_due is None else min(claimed.next_due, IDLE_MAX)
            self._claim_after = time.monotonic() + wait
            self._wake_in(wait)

    def has_pending(self) -> bool:
        if self.ready:
            return True
        at, pending = self._counts
        if time.monotonic() - at > COUNTS_TTL:
            counts = self.queue.counts()
            pending = counts["ready"] + counts["delayed"] + counts["inflight"] > 0
            self._counts = (time.monotonic(), pending)
        return pending

    # --- settling --------------------------------------------------------------------------

    def closing(self) -> bool:
        """Whether the crawl is stopping (Scrapy waits for the downloads in flight)."""
        slot = getattr(self.crawler.engine, "_slot", None)
        return getattr(slot, "closing", None) is not None

    def settlement(self, job: Job, verdict: Classification) -> Settlement:
        """The settlement of a failed download; while the crawl stops, a release that spends
        nothing (a download cut short by the stop, or timing out while Scrapy waits for it,
        says nothing about the page or its site)."""
        if self.closing():
            return self.queue.releasing(job, shutdown=True)
        return settlement_for(self.queue, job, verdict)

    def settle(self, job: Job, settlement: Settlement) -> str:
        if self.held.pop(job.id, None) is None:
            return "not_held"  # released at close, or its lease was lost
        (status,) = self.queue.settle_many([settlement])
        self._stat(f"settled/{status}")
        self._claim_after = 0.0  # a domain slot is free in Redis: claim again at once
        self._wake_in(0)
        return status

    def heartbeat(self) -> None:
        jobs = list(self.held.values())
        if not jobs:
            return
        try:
            renewed = self.queue.heartbeat(jobs)
        except Exception as exc:  # the next beat tries again; a lost lease comes back anyway
            log.warning("scrapeq: renewing leases failed: %s", exc)
            return
        for job, ok in zip(jobs, renewed, strict=True):
            if not ok:
                self.held.pop(job.id, None)
                self._stat("lease_lost")

    # --- helpers ---------------------------------------------------------------------------

    def _wake_in(self, seconds: float) -> None:
        """Have the engine ask for requests again in ``seconds`` (its own heartbeat is 5 s)."""
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_call.getTime() <= time.time() + seconds:
                return
            self._wake_call.cancel()
        from twisted.internet import reactor  # not at import: Scrapy installs its reactor

        clock: Any = reactor
        self._wake_call = clock.callLater(max(seconds, 0.0), self._wake)

    def _wake(self) -> None:
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def _stat(self, name: str, count: int = 1) -> None:
        if self.crawler.stats is not None and count:
            self.crawler.stats.inc_value(f"scrapeq/{name}", count)


class DupeFilter(BaseDupeFilter):
    """De-duplication on scrapeq's seen-set, by Scrapy's request fingerprint.

    The :class:`Scheduler` hands each request it enqueues to :meth:`key`, which puts the
    request's fingerprint (``crawler.request_fingerprinter``: method, canonical URL, body) in
    place of scrapeq's URL fingerprint; the enqueue script checks and adds it atomically, for
    every process of the crawl. :meth:`request_seen` answers the same question read-only.
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

    def key(self, request: Request, spec: EnqueueSpec, queue: Queue) -> EnqueueSpec:
        """``spec`` de-duplicated by the request's fingerprint instead of its URL's."""
        self._queue = queue
        fp64 = self.fingerprint64(request)
        seen = queue._seen.arg(fp64) if spec.unique == "seen" else None
        return replace(spec, fingerprint=format(fp64, "016x"), seen=seen)

    def request_seen(self, request: Request) -> bool:
        """Whether the crawl's seen-set has the request (read only; exact seen-sets)."""
        if self._queue is None:
            return False  # nothing was enqueued through this filter yet
        if self._queue._seen.filter != "exact":
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


class Scheduler:
    """A Scrapy scheduler whose frontier is a scrapeq queue (module docstring)."""

    def __init__(self, crawler: Crawler, dupefilter: DupeFilter | None) -> None:
        self.crawler = crawler
        self.df = dupefilter
        self.frontier: _Frontier | None = None

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        from scrapy.utils.misc import build_from_crawler, load_object

        df_class = load_object(crawler.settings["DUPEFILTER_CLASS"])
        df = build_from_crawler(df_class, crawler) if issubclass(df_class, DupeFilter) else None
        return cls(crawler, df)

    def open(self, spider: Spider) -> None:
        self.frontier = _Frontier(self.crawler, spider)
        self.frontier.open()

    def close(self, reason: str) -> None:
        if self.frontier is not None:
            self.frontier.close(reason)

    def has_pending_requests(self) -> bool:
        return self.frontier is not None and self.frontier.has_pending()

    def enqueue_request(self, request: Request) -> bool:
        """Store ``request`` as a job; False when it is dropped (seen, or a start request
        another process of the crawl takes).

        Raises:
            UnstorableRequest: it cannot be stored as JSON, or its URL is refused.
        """
        frontier = self.frontier
        assert frontier is not None, "the scheduler is not open"
        parent = request.meta.get(_JOB)
        if parent is not None:
            # A request made from a claimed one by a middleware: a redirect (the job moves
            # on to the new URL: done), or a retry of a job scrapeq already settled (dropped:
            # scrapeq retries it).
            if request.meta.get(_SETTLED):
                return False
            request.meta[_SETTLED] = True
            frontier.settle(parent, frontier.queue.done(parent))
        elif request.meta.get("is_start_request") and not frontier.starter:
            frontier._stat("start_requests_skipped")
            return False
        status = frontier.enqueue(frontier.spec(request, self.df))
        if status in ("seen", "duplicate"):
            if self.df is not None:
                self.df.log(request, frontier.spider)
            return False
        frontier._stat("enqueued")
        return True

    def next_request(self) -> Request | None:
        return None if self.frontier is None else self.frontier.next_request()


class ReportMiddleware:
    """Report each download to the queue; ack a job once its callback is done.

    Enable it as a downloader middleware near the downloader (after Scrapy's, e.g. 950) and as
    a spider middleware, and turn Scrapy's retry middleware off: scrapeq retries.
    """

    def __init__(self, crawler: Crawler) -> None:
        self.crawler = crawler
        scheduler = crawler.settings.get("SCHEDULER", "")
        if not str(scheduler).endswith("scrapeq.contrib.scrapy.Scheduler") and not (
            isinstance(scheduler, type) and issubclass(scheduler, Scheduler)
        ):
            raise NotConfigured("scrapeq's ReportMiddleware needs scrapeq's Scheduler")

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> Self:
        return cls(crawler)

    # --- downloader side -------------------------------------------------------------------

    def process_request(self, request: Request, spider: Spider | None = None) -> None:
        if _JOB in request.meta:
            request.meta[_STARTED] = time.monotonic()

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        job = request.meta.get(_JOB)
        frontier = _Frontier.of(self.crawler)
        if job is None or frontier is None or request.meta.get(_SETTLED):
            return response
        elapsed = time.monotonic() - request.meta.get(_STARTED, time.monotonic())
        retry_after = response.headers.get(b"Retry-After")
        headers = {"Retry-After": retry_after.decode("latin-1")} if retry_after else None
        verdict = classify_response(
            response.status, headers, elapsed, slow_call=frontier.config.settings.slow_call
        )
        if verdict.outcome is Outcome.OK or _handles(request, response, frontier.spider):
            request.meta[_VERDICT] = verdict
            return response
        request.meta[_SETTLED] = True
        frontier.settle(job, frontier.settlement(job, verdict))
        raise IgnoreRequest(f"scrapeq: {verdict.reason} ({verdict.outcome.value})")

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        job = request.meta.get(_JOB)
        frontier = _Frontier.of(self.crawler)
        if job is None or frontier is None or request.meta.get(_SETTLED):
            return
        request.meta[_SETTLED] = True
        frontier.settle(job, frontier.settlement(job, classify_failure(exception)))

    # --- spider side -----------------------------------------------------------------------

    def process_spider_output(
        self, response: Response, result: Any, spider: Spider | None = None
    ) -> Any:
        try:
            yield from result
        except Exception as exc:
            self._callback_failed(response, exc)
            raise
        self._callback_done(response)

    async def process_spider_output_async(
        self, response: Response, result: Any, spider: Spider | None = None
    ) -> Any:
        try:
            async for item in result:
                yield item
        except Exception as exc:
            self._callback_failed(response, exc)
            raise
        self._callback_done(response)

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Spider | None = None
    ) -> None:
        self._callback_failed(response, exception)

    def _take(self, response: Response | None) -> tuple[_Frontier, Job] | None:
        request = getattr(response, "request", None)
        if request is None:
            return None
        job = request.meta.get(_JOB)
        frontier = _Frontier.of(self.crawler)
        if job is None or frontier is None or request.meta.get(_SETTLED):
            return None
        request.meta[_SETTLED] = True
        return frontier, job

    def _callback_done(self, response: Response | None) -> None:
        taken = self._take(response)
        if taken is not None:
            frontier, job = taken
            assert response is not None and response.request is not None
            verdict = response.request.meta.get(_VERDICT)
            failed = bool(verdict is not None and verdict.counts_against_domain)
            frontier.settle(job, frontier.queue.done(job, domain_failed=failed))

    def _callback_failed(self, response: Response | None, exc: Exception) -> None:
        from scrapy.spidermiddlewares.httperror import HttpError

        if isinstance(exc, HttpError):  # a status the spider does not handle: page fetched
            self._callback_done(response)
            return
        taken = self._take(response)
        if taken is not None:
            frontier, job = taken
            message = f"{type(exc).__name__}: {exc}"[:500]
            settlement = frontier.queue.retrying(
                job, kind="handler_error", message=message, domain_failed=None
            )
            frontier.settle(job, settlement)


def _handles(request: Request, response: Response, spider: Spider) -> bool:
    """Whether the spider asked to see this status (``handle_httpstatus_list``/``_all``)."""
    meta = request.meta
    if meta.get("handle_httpstatus_all"):
        return True
    allowed = meta.get("handle_httpstatus_list")
    if allowed is None:
        allowed = getattr(spider, "handle_httpstatus_list", None) or ()
    return response.status in allowed
