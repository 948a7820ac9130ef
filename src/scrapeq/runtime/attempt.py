"""The attempt phase: fetch one job, classify the answer (:mod:`.classify`), run the handler,
and build the job's settlement and results line (:class:`Attempts`).

An attempt never predicts whether its settlement ends the job: a retry, throttle or release
comes with the line the job ends with should the settle script answer ``dead`` (its budgets,
the adaptive excuse: ``includes/jobs.lua``, ``includes/adaptive.lua``), and the worker writes
it from that answer (:meth:`scrapeq.runtime.lines.Lines.write_settled`)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.model.exits import DIRECT
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.request import Request
from scrapeq.errors import Banned, ConfigError, Permanent, Retry
from scrapeq.runtime.auto_fetch import RenderFailed, auto_handled, auto_refused, is_auto
from scrapeq.runtime.bans import exit_result
from scrapeq.runtime.browser import BrowserFetcher, WaitingFetcher
from scrapeq.runtime.browser_notice import BenchNotice
from scrapeq.runtime.browser_pool import BrowserDown
from scrapeq.runtime.classify import (
    BrowserLost,
    Classification,
    Outcome,
    classify_exception,
    classify_response,
)
from scrapeq.runtime.fetch import Fetcher, Response, UnknownExit
from scrapeq.runtime.follow import Follow, Handled
from scrapeq.runtime.handlers import HandlerAborted, HandlerTimeout
from scrapeq.runtime.impersonate import FetcherUnavailable, ImpersonateFetcher
from scrapeq.runtime.links import extract_counted
from scrapeq.runtime.outcomes import latency, settlement_for
from scrapeq.runtime.records import (
    about,
    make_record,
    not_json,
    traceback_summary,
    with_latency,
)
from scrapeq.runtime.reporter import worker_id
from scrapeq.runtime.revisits import (
    conditional,
    not_modified,
    observed,
    plain_get,
    sends_conditional,
)
from scrapeq.runtime.session_jar import Changes, absorb, jar_request
from scrapeq.runtime.worker_core import WorkerCore

log = logging.getLogger("scrapeq.worker")

#: Pause of claiming after our own network failed (proxy down), seconds.
OURS_PAUSE = 2.0


class ExitSeen:
    """What one attempt observed of its exit: the settle item's ``exit`` and ``bytes``."""

    __slots__ = ("auto", "bytes", "jar", "result")

    def __init__(self) -> None:
        self.result: str | None = None  # None: no request was made
        self.auto: str | None = None  # fetcher auto: the evidence (runtime/auto_fetch.py)
        self.bytes = 0
        self.jar: Changes | None = None  # session = sticky: the answer's changes to the jar


class Attempts(WorkerCore):
    """One attempt of a job: robots, fetch, classify, handle, results line."""

    def _internal_error(self, job: Job, exc: Exception) -> Settlement:
        """Settle a job whose attempt failed in our own code (a settlement that could not be
        built, say): a retry with the reason kept. It keeps the attempt the claim spent, so a
        job that always fails here ends dead (``max_attempts``) instead of going round."""
        message = traceback_summary(exc)
        return self.queue.retrying(job, kind="internal_error", message=message, domain_failed=None)

    async def _attempt(self, job: Job) -> tuple[Settlement, dict[str, Any] | None]:
        """Fetch, classify and handle one job; answers its settlement and result record.

        A job claimed through an exit (``job.exit``) settles with what became of the attempt
        there (``exit_result``, ``bytes_in``: includes/exits.lua decides what it does).
        (The worker's hot path awaits :meth:`_attempt_seen` and :meth:`_with_seen` itself:
        one coroutine less a job.)"""
        seen = ExitSeen()
        return self._with_seen(job, seen, await self._attempt_seen(job, seen))

    def _with_seen(
        self, job: Job, seen: ExitSeen, attempted: tuple[Settlement, dict[str, Any] | None]
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """The attempt's settlement with what it observed of its exit (``seen``)."""
        settlement, record = attempted
        if job.exit is not None and seen.result is not None:
            settlement = dataclasses.replace(
                settlement, exit_result=seen.result, bytes_in=seen.bytes, jar=seen.jar
            )
        elif seen.bytes and self.settings.max_bytes is not None:
            # counted per domain by the settle script: what max_bytes caps
            settlement = dataclasses.replace(settlement, bytes_in=seen.bytes)
        if seen.auto is not None:
            settlement = dataclasses.replace(settlement, auto_evidence=seen.auto)
        return settlement, record

    async def _attempt_seen(
        self, job: Job, seen: ExitSeen
    ) -> tuple[Settlement, dict[str, Any] | None]:
        started = fetched = time.monotonic()
        fetching = 0.0  # when the fetch started (0: not yet), for the metrics
        try:
            if self._robots is not None:
                allowed, crawl_delay = await self._robots.allowed(job.url)
                if not allowed:
                    return self._dead(job, "robots_disallowed", "disallowed by robots.txt", None)
                await self._apply_crawl_delay(job.domain, crawl_delay)
            assert self._fetcher is not None
            name = self._fetcher_name(job)  # once a job: the job and the settings decide it
            fetched = fetching = time.monotonic()
            if name == "http" and plain_get(job):  # what _fetch does for it, a frame less
                response = await self._fetcher.fetch(job.url, normalised=True)
            else:
                response = await self._fetch(job, name=name)
            if name != "browser":  # a browser counts each of its requests
                self._fetched_by(name, 1, len(response.body))
            if self.metrics is not None:
                self.metrics.fetched(job.lane, time.monotonic() - fetching)
            if self._grouped is not None and job.domain not in self._grouped:
                await self._learn_group(job)
        except Exception as exc:
            if self.metrics is not None and fetching:
                self.metrics.fetched(job.lane, time.monotonic() - fetching)
            return self._fetch_failed(job, exc, seen, started, fetched, bool(fetching))
        verdict = classify_response(
            response.status, response.headers, response.elapsed, slow_call=self.settings.slow_call,
            conditional=response.status == 304 and sends_conditional(job),
        )  # fmt: skip
        banned = self._observe(job, response, seen)
        if banned is not None:
            return self._banned(job, seen, banned)
        seen.result = exit_result(verdict)
        if verdict.outcome is not Outcome.OK:
            out = self._from_classification(job, verdict, response, started, None, seen)
            return with_latency(out, verdict, response.elapsed)
        if not_modified(job, response.status):  # a 304 to a revisit's conditional request
            out = self._not_modified(job, response, verdict, started)
            return with_latency(out, verdict, response.elapsed)
        return await self._handle(job, response, verdict, started, seen)  # with its latency

    def _fetch_failed(
        self,
        job: Job,
        exc: Exception,
        seen: ExitSeen,
        started: float,
        fetched: float,
        fetching: bool,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """What an exception before the page's answer (robots, fetch) makes of the job."""
        if isinstance(exc, BrowserDown):
            return self._browser_down(job, exc)
        verdict = classify_exception(exc)
        if isinstance(exc, BrowserLost):
            return self._browser_lost(job, exc, verdict, started)
        if fetching and not isinstance(exc, UnknownExit | FetcherUnavailable):
            seen.result = exit_result(verdict)
            seen.auto = auto_refused(self, job, exc)
            if seen.auto is not None and job.exit is not None:
                seen.result = "ban"  # a fingerprint refused through the exit: the site's ban
        out = self._from_classification(job, verdict, None, started, exc, seen)
        if not verdict.counts_against_domain:  # no answer of the site's to learn from
            return out
        return with_latency(out, verdict, time.monotonic() - fetched)

    def _browser_lost(
        self, job: Job, exc: BrowserLost, verdict: Classification, started: float
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """The job's browser was lost (crash, kill, hang): the job is given back at once, no
        attempt spent, its domain not charged (the pool starts another browser); a release
        is spent, so a page that kills whole browsers ends dead past ``max_releases``."""
        log.info("job %s: %s", job.id, exc, extra=about(job, "browser_lost"))
        message = verdict.message or str(exc)
        settlement = self.queue.releasing(
            job, delay=0, kind="released:browser_lost", message=message
        )
        return self._if_dead(job, settlement, None, started, message)

    def _browser_down(self, job: Job, exc: BrowserDown) -> tuple[Settlement, dict[str, Any] | None]:
        """No browser for the job now (benched, or a launch just failed): it waits, given
        back for the rest of the bench with nothing spent or recorded (no attempt, no
        release, its domain not charged: as a stopping worker gives its jobs back)."""
        log.info("job %s waits %.1f s: %s", job.id, exc.wait, exc, extra=about(job, "browser_down"))
        return self.queue.releasing(job, delay=max(exc.wait, 0.5), shutdown=True), None

    def _observe(self, job: Job, response: Response, seen: ExitSeen) -> str | None:
        """What the answer says of the job's exit: its bytes, the session's cookies
        (``session = sticky``); a ban's message, or None."""
        seen.bytes = len(response.body)
        if response.status == 403:  # fetcher auto: a block is evidence (runtime/auto_fetch.py)
            seen.auto = auto_refused(self, job, None)
        if job.exit is None:
            return None
        if job.jar is not None or self.settings.session == "sticky":
            seen.jar = absorb(
                response.set_cookies, job.url, domain=job.domain,
                politeness=self.settings.politeness,
            )  # fmt: skip
        why = self._bans.why(response)
        return None if why is None else f"{why} through exit {self._exit_name(job)}"

    def _exit_name(self, job: Job) -> str:
        pool = getattr(self._fetcher, "pool", None)
        found = pool.by_id(job.exit) if pool is not None and job.exit else None
        return found.name if found is not None else str(job.exit)

    def _banned(
        self, job: Job, seen: ExitSeen, message: str
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """A ban of the job's exit by its site: the job goes through another exit at once,
        spending a release (includes/exits.lua benches the pair; the domain is charged only
        when no usable exit is left for it)."""
        seen.result = "ban"
        log.info("job %s: %s", job.id, message, extra=about(job, "banned"))
        settlement = self.queue.releasing(job, delay=0, kind="banned", message=message)
        return self._if_dead(job, settlement, None, time.monotonic(), message)

    def _not_modified(
        self, job: Job, response: Response, verdict: Classification, started: float
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """A 304 to a revisit's conditional request: done, no handler (there is no body),
        the page unchanged (includes/revisit.lua; its line says so from the settle's answer)."""
        done = self.queue.done(job, domain_failed=verdict.counts_against_domain)
        settlement = observed(done, response.headers, None)
        if self.sink is None:
            return settlement, None
        return settlement, make_record(job, "done", response, started, None, None)

    def _fetcher_name(self, job: Job) -> str:
        name = job.fetcher or job.domain_fetcher or self.settings.fetcher
        return (job.auto_fetcher or "http") if name == "auto" else name

    def _new_browser(self) -> BrowserFetcher:
        """The browser fetcher, its requests counted (the http fetcher's guard and exits)."""
        assert self._fetcher is not None
        fetcher = BrowserFetcher(
            self.settings, self._fetcher, on_fetched=lambda n, size: self._fetched_by(
                "browser", n, size)
        )  # fmt: skip
        self.stats.browser_cpu = fetcher.pool.cpu_seconds
        if self.metrics is not None:
            self.metrics.cpu_of("browser", fetcher.pool.cpu_seconds)
        name = self._reporter.id if self._reporter is not None else worker_id()
        self._bench_notice = BenchNotice(self.queue, name, fetcher.pool)
        return fetcher

    def _fetched_by(self, fetcher: str, requests: int, size: int) -> None:
        self.stats.fetched_by(fetcher, requests, size)
        if self.metrics is not None:
            self.metrics.fetched_by(fetcher, requests, size)

    def _fetcher_for(self, job: Job, name: str | None = None) -> Fetcher | WaitingFetcher:
        """The fetcher a job goes through: its own (enqueued with ``fetcher=``), else its
        domain's (``domain set --fetcher``, handed over by its claim), else the ``fetcher``
        setting (``name``: :meth:`_fetcher_name`'s, when the caller has it). ``http`` is the
        worker's fetcher (the one given to it, if any)."""
        assert self._fetcher is not None
        name = name or self._fetcher_name(job)
        if name == "browser":
            if self._browser is None:
                try:
                    self._browser = self._new_browser()
                except ConfigError as exc:  # Playwright or chromium missing here: ours
                    raise FetcherUnavailable(exc.reason) from None
            return self._browser.waiting_for(job.domain_wait_for)
        if name != "impersonate":
            return self._fetcher
        if self._impersonator is None:
            try:
                self._impersonator = ImpersonateFetcher(self.settings, pool=self.queue.exit_pool)
            except ConfigError as exc:  # curl_cffi missing here: ours, not the site's
                raise FetcherUnavailable(exc.reason) from None
        return self._impersonator

    async def _fetch(
        self, job: Job, through: Fetcher | WaitingFetcher | None = None, name: str | None = None
    ) -> Response:
        """Fetch a job's URL (``through``: that fetcher, not the job's; ``name``: the job's
        fetcher's name, when known), sending its request when it has one (a plain GET is
        called as before requests existed, so a fetcher subclass without ``request=`` still
        works)."""
        fetcher = through or self._fetcher_for(job, name)
        revisit = conditional(job)
        if revisit is not None:  # a revisit: If-None-Match / If-Modified-Since
            if job.jar:  # session = sticky: the domain's cookies go with it
                revisit = jar_request(revisit, job.jar, job.url)
            if job.exit is not None:
                return await fetcher.fetch(job.url, normalised=True, request=revisit, exit=job.exit)
            return await fetcher.fetch(job.url, normalised=True, request=revisit)
        if job.exit is not None:  # only with a pool: a fetcher of the user's may not know exits
            request = None if job.request_text is None else job.request
            if job.jar:  # session = sticky: the domain's cookies go with it
                request = jar_request(request or Request(job.url), job.jar, job.url)
            return await fetcher.fetch(job.url, normalised=True, request=request, exit=job.exit)
        if job.request_text is None:
            return await fetcher.fetch(job.url, normalised=True)
        return await fetcher.fetch(job.url, normalised=True, request=job.request)

    async def _learn_group(self, job: Job) -> None:
        """``politeness = ip``: after a host's first fetch in this process, file the host
        under its address's group (``ip:<address>``, host_group-1.lua; the first worker's
        stands): its jobs enqueued from then on share that group's limits and breaker."""
        assert self._grouped is not None and self._fetcher is not None
        self._grouped.add(job.domain)
        if job.domain.startswith("ip:"):
            return
        name = urlsplit(job.url).hostname
        address = await self._fetcher.address(name) if name else None
        if address is None:
            return
        try:
            await self.queue.host_group(job.domain, address)
        except Exception as exc:  # learned again on the host's next fetch
            self._grouped.discard(job.domain)
            log.warning("could not file %s under ip:%s: %s", job.domain, address, exc)

    async def _apply_crawl_delay(self, domain: str, crawl_delay: float | None) -> None:
        """Honour robots.txt's Crawl-delay.

        The first time a process learns a domain's delay it raises the domain's politeness
        delay in Redis (so every worker's later claims respect it); jobs of the domain this
        worker already holds are spaced locally by the same delay before they start.
        """
        if crawl_delay is None or crawl_delay <= self.settings.domain_delay:
            return
        if domain not in self._crawl_delays:
            self._crawl_delays[domain] = time.monotonic()
            await self.queue.domain_set(domain, delay=crawl_delay)
            log.info("crawl-delay domain=%s delay=%.1fs (robots.txt)", domain, crawl_delay)
        slot = self._crawl_delays[domain]
        now = time.monotonic()
        self._crawl_delays[domain] = max(slot, now) + crawl_delay
        if slot > now:
            await asyncio.sleep(slot - now)

    async def _handle(
        self,
        job: Job,
        response: Response,
        verdict: Classification,
        started: float,
        seen: ExitSeen,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """Run the handler on a page that answered: the job done with its follow-ups (and,
        revisit = on, what the fetch and the handler said of the content), or what the
        handler's error makes of it; with the fetch's latency (:func:`with_latency`; a done
        job's settlement is built with it)."""
        elapsed = response.elapsed  # the page's fetch (auto may render it again)
        try:
            if job.auto_fetcher is None or job.auto_fetcher == "browser" or not is_auto(self, job):
                result = await self._call_handler(job, response)
            else:  # fetcher auto: it may render the page (runtime/auto_fetch.py)
                result, response, seen.auto = await auto_handled(self, job, response)
        except RenderFailed as exc:  # the page's rendering failed: a fetch's failure
            out = self._fetch_failed(job, exc.original, seen, started, started, True)
            return with_latency(out, verdict, elapsed)
        except Exception as exc:  # HandlerAborted too: a SystemExit is the handler's error
            out = self._handler_failed(job, exc, response, started, seen)
            return with_latency(out, verdict, elapsed)
        handled = result if isinstance(result, Handled) else Handled(result, [])
        latency_ms, overload = latency(verdict, elapsed)
        settlement = self.queue.done(
            job,
            domain_failed=verdict.counts_against_domain,
            follow=handled.follow,
            final_url=response.url if response.redirects else None,
            latency_ms=latency_ms,
            overload=overload,
        )
        if self.settings.revisit == "on":
            settlement = observed(settlement, response.headers, response.body, handled.content)
        if self.sink is None:
            return settlement, None
        problem = not_json(handled.result)
        if problem is not None:
            # The handler's error, not the sink's: a retry spending an attempt (so it ends
            # dead), never a release of ours, and no str() of it written in its place.
            settlement = self.queue.retrying(
                job, kind="handler_result", message=problem, domain_failed=None
            )
            out = self._if_dead(job, settlement, response, started, problem)
            return with_latency(out, verdict, elapsed)
        record = make_record(job, "done", response, started, None, handled.result)
        if handled.links is not None:
            record["links"] = handled.links.as_dict()
        if handled.body_path is not None:
            record["body_path"] = handled.body_path
        return settlement, record

    def _handler_failed(
        self, job: Job, exc: Exception, response: Response, started: float, seen: ExitSeen
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """What the handler raised makes of the job: a ban of its exit, a retry it asked for,
        a permanent failure, or a retry for its timeout or its error."""
        if isinstance(exc, Banned) and job.exit is not None:
            return self._banned(job, seen, f"{exc.reason} through exit {self._exit_name(job)}")
        if isinstance(exc, Permanent):
            return self._dead(job, exc.reason, str(exc), response, started)
        if isinstance(exc, Banned):
            kind, message, domain_failed, delay = "banned", exc.reason, True, None
        elif isinstance(exc, Retry):
            kind, message, domain_failed, delay = "retry_requested", exc.reason, None, exc.delay
        elif isinstance(exc, HandlerTimeout):
            log.warning("job %s: %s", job.id, exc, extra=about(job, "handler_timeout"))
            kind, message, domain_failed, delay = "handler_timeout", str(exc), None, None
        else:
            message = traceback_summary(exc.original if isinstance(exc, HandlerAborted) else exc)
            kind, domain_failed, delay = "handler_error", None, None
        settlement = self.queue.retrying(
            job, kind=kind, message=message, delay=delay, domain_failed=domain_failed
        )
        return self._if_dead(job, settlement, response, started, message)

    def _finish_page(
        self, job: Job, response: Response, result: Any, follows: list[Follow]
    ) -> Handled:
        """After the handler, where it ran (a thread for a sync one): the job specs of the
        page's follow-ups (the handler's; with ``follow_links`` every link of the page), and
        the body stored when ``save_bodies`` is set."""
        skipped: Mapping[str, int] = {}
        if self.follow_links:
            page = extract_counted(response, respect_nofollow=self.settings.respect_robots)
            follows = follows + [Follow(url) for url in page.links]
            skipped = page.skipped
        specs, counts = self._follow.specs(job, response.url, follows, skipped)
        body_path = self._bodies.put(response.body) if self._bodies is not None else None
        return Handled(result, specs, counts, body_path)

    def _from_classification(
        self,
        job: Job,
        verdict: Classification,
        response: Response | None,
        started: float,
        exc: BaseException | None,
        seen: ExitSeen | None = None,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        message = verdict.message or (str(exc) if exc else verdict.reason)
        settlement = settlement_for(self.queue, job, verdict, message)
        if verdict.outcome is Outcome.FAIL:
            error = f"{verdict.reason}: {message}"
            return settlement, make_record(job, "dead", response, started, error, None)
        if verdict.outcome is Outcome.OURS:
            # Our proxy or network: pause claiming, and give the job back with a backoff over
            # its releases (spending a release, not an attempt; max_releases bounds them).
            # A proxy of a pool that failed is that exit's failure, not ours as a whole: its
            # breaker rests it (includes/exits.lua) and claiming goes on through the others.
            if seen is not None and seen.result == "down" and job.exit != DIRECT:
                # the job goes through another exit at once (an exit down rests, and with
                # every exit down nothing is claimed: no loop)
                settlement = dataclasses.replace(settlement, delay_ms=0, backoff=False)
            else:
                self._pause.until = time.monotonic() + OURS_PAUSE
        return self._if_dead(job, settlement, response, started, message)

    def _if_dead(
        self,
        job: Job,
        settlement: Settlement,
        response: Response | None,
        started: float,
        message: str,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        """A settlement the settle script may end dead (a retry past ``max_attempts``, a
        throttle past ``max_throttles``, a release past ``max_releases``), with the line the
        job then ends with: written only when the settle answers ``dead``."""
        if self.sink is None:
            return settlement, None
        return settlement, make_record(job, "dead", response, started, message, None)

    def _dead(
        self,
        job: Job,
        reason: str,
        message: str,
        response: Response | None,
        started: float | None = None,
        domain_failed: bool | None = None,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        settlement = self.queue.failing(job, reason, message, domain_failed=domain_failed)
        begun = started if started is not None else time.monotonic()
        return settlement, make_record(job, "dead", response, begun, f"{reason}: {message}", None)
