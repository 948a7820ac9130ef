"""Report each download to the queue; ack a job once its callback is done (package docstring)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, Self

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from scrapy.exceptions import IgnoreRequest, NotConfigured
from scrapy.http import Response

from scrapeq.contrib.scrapy._classify import classify_failure
from scrapeq.contrib.scrapy._frontier import JOB, LATENCY, SETTLED, STARTED, VERDICT, Frontier
from scrapeq.contrib.scrapy._scheduler import Scheduler
from scrapeq.contrib.scrapy._start import sleep
from scrapeq.engine.model.job import Job
from scrapeq.runtime.classify import Outcome, classify_response
from scrapeq.runtime.outcomes import download_sample

__all__ = ["ReportMiddleware"]

#: Seconds of ``start()`` read between two reactor turns (claims, downloads and
#: settlements go on meanwhile), counted in this thread's CPU time: the reactor's other work
#: waits only while the reading runs, and a busy machine that preempts the process would
#: otherwise cut the batches short (more enqueue calls for the same start requests).
START_TURN = 0.005


class ReportMiddleware:
    """Report each download to the queue; ack a job once its callback is done.

    Enable it as a downloader middleware near the downloader (after Scrapy's, e.g. 950) and as
    a spider middleware, and turn Scrapy's retry middleware off: scrapeq retries. As a spider
    middleware it also sees the spider's ``start()`` end (:mod:`._start`).
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
        if JOB in request.meta:
            request.meta[STARTED] = time.monotonic()

    def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        job = request.meta.get(JOB)
        frontier = Frontier.of(self.crawler)
        if job is None or frontier is None or request.meta.get(SETTLED):
            return response
        elapsed = time.monotonic() - request.meta.get(STARTED, time.monotonic())
        # The site's own latency (Scrapy's, to the response's headers), not the wait in
        # Scrapy's download slot: what the domain's adaptive limit learns from.
        latency = request.meta.get("download_latency", elapsed)
        retry_after = response.headers.get(b"Retry-After")
        headers = {"Retry-After": retry_after.decode("latin-1")} if retry_after else None
        verdict = classify_response(
            response.status, headers, elapsed, slow_call=frontier.config.settings.slow_call,
            conditional=_conditional(request),  # a 304 answers only such a request
        )  # fmt: skip
        if verdict.outcome is Outcome.OK or _handles(request, response, frontier.spider):
            request.meta[VERDICT] = verdict
            request.meta[LATENCY] = latency
            frontier.download_done(job, sample=download_sample(verdict, latency))
            return response
        request.meta[SETTLED] = True
        frontier.settle(job, frontier.settlement(job, verdict, latency))
        raise IgnoreRequest(f"scrapeq: {verdict.reason} ({verdict.outcome.value})")

    def process_exception(
        self, request: Request, exception: Exception, spider: Spider | None = None
    ) -> None:
        job = request.meta.get(JOB)
        frontier = Frontier.of(self.crawler)
        if job is None or frontier is None or request.meta.get(SETTLED):
            return
        request.meta[SETTLED] = True
        verdict = classify_failure(exception)
        # A failure of the site's (a timeout, a reset) teaches the adaptive limit; ours not.
        elapsed = time.monotonic() - request.meta.get(STARTED, time.monotonic())
        seconds = elapsed if verdict.counts_against_domain else None
        frontier.settle(job, frontier.settlement(job, verdict, seconds))

    # --- spider side -----------------------------------------------------------------------

    async def process_start(self, start: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Wait while another process reads the crawl's start requests (:mod:`._start`);
        schedule them; once they are all scheduled, keep the crawl's start flag; if
        ``start()`` raised, release it (the next process to open takes them).

        The start requests this process takes are scheduled here (``engine.crawl``, as the
        engine does with those it reads), ``start()`` read for :data:`START_TURN` seconds
        of CPU between two reactor turns, and written in batches (:attr:`Frontier.reading_start`):
        the engine reads one start request a reactor turn while its downloader has room,
        which, with the frontier in Redis, would hold the crawl to the pace of that reading.
        Items are passed on to the engine."""
        frontier = Frontier.of(self.crawler)  # opened before the first item is asked for
        if frontier is not None:
            await frontier.start.wait_turn()
            frontier.reading_start = frontier.start.mine
        try:
            turn = time.thread_time()
            async for item in start:
                if frontier is None or not frontier.reading_start or not isinstance(item, Request):
                    yield item
                else:
                    self.crawler.engine.crawl(item)
                if time.thread_time() - turn >= START_TURN:
                    frontier = Frontier.of(self.crawler)
                    if frontier is not None:
                        frontier.flush()
                    await sleep(0)  # a reactor turn: claims and downloads go on
                    frontier = Frontier.of(self.crawler)
                    turn = time.thread_time()
        except Exception:
            frontier = Frontier.of(self.crawler)
            if frontier is not None:
                frontier.reading_start = False
                frontier.start.abandon()
            raise
        frontier = Frontier.of(self.crawler)
        if frontier is not None:
            frontier.reading_start = False
            frontier.flush()  # kept only once every start request is written
            if frontier.batch:
                frontier.start.abandon()  # Redis unreachable: the next process takes them
            elif frontier.all_refused():
                # none scheduled, each refused (a setting missing, as allow_private for a
                # local site): the next run, its mistake mended, takes them again
                frontier.start.abandon()
            else:
                frontier.start.finish()

    def process_spider_output(
        self, response: Response, result: Any, spider: Spider | None = None
    ) -> Any:
        try:
            yield from result
        except Exception as exc:
            self._callback_done(response, exc)
            raise
        self._callback_done(response)

    async def process_spider_output_async(
        self, response: Response, result: Any, spider: Spider | None = None
    ) -> Any:
        try:
            async for item in result:
                yield item
        except Exception as exc:
            self._callback_done(response, exc)
            raise
        self._callback_done(response)

    def process_spider_exception(
        self, response: Response, exception: Exception, spider: Spider | None = None
    ) -> None:
        self._callback_done(response, exception)

    def _take(self, response: Response | None) -> tuple[Frontier, Job, Request] | None:
        request = getattr(response, "request", None)
        if request is None:
            return None
        job = request.meta.get(JOB)
        frontier = Frontier.of(self.crawler)
        if job is None or frontier is None or request.meta.get(SETTLED):
            return None
        request.meta[SETTLED] = True
        return frontier, job, request

    def _callback_done(self, response: Response | None, exc: Exception | None = None) -> None:
        """Ack the response's job once its callback's output is consumed. A callback that
        raised is the spider's bug, logged by Scrapy: its job is done too, unless the project
        set ``SCRAPEQ_RETRY_CALLBACK_ERRORS`` (then it is retried, not charged to the domain).
        A status the spider does not handle (``HttpError``) is no callback error."""
        from scrapy.spidermiddlewares.httperror import HttpError

        taken = self._take(response)
        if taken is None:
            return
        frontier, job, request = taken
        if exc is not None and not isinstance(exc, HttpError):
            frontier.stat("callback_errors")
            if frontier.config.retry_callback_errors:
                message = f"{type(exc).__name__}: {exc}"[:500]
                settlement = frontier.queue.retrying(
                    job, kind="handler_error", message=message, domain_failed=None
                )
                frontier.settle(job, frontier.timed(settlement, request.meta))
                return
        verdict = request.meta.get(VERDICT)
        failed = bool(verdict is not None and verdict.counts_against_domain)
        frontier.settle(job, frontier.timed(frontier.queue.done(job, domain_failed=failed),
                                            request.meta))  # fmt: skip


def _conditional(request: Request) -> bool:
    """Whether the request went out conditional (``If-None-Match``, ``If-Modified-Since``:
    Scrapy's HTTP cache revalidating sets them before this middleware sees the answer)."""
    return any(request.headers.get(name) for name in (b"If-None-Match", b"If-Modified-Since"))


def _handles(request: Request, response: Response, spider: Spider) -> bool:
    """Whether the spider asked to see this status (``handle_httpstatus_list``/``_all``)."""
    meta = request.meta
    if meta.get("handle_httpstatus_all"):
        return True
    allowed = meta.get("handle_httpstatus_list")
    if allowed is None:
        allowed = getattr(spider, "handle_httpstatus_list", None) or ()
    return response.status in allowed
