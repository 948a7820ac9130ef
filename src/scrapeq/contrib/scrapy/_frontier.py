"""One crawler's link to its queue: the jobs it holds, claims, settlements, leases, refusals.

The :class:`~scrapeq.contrib.scrapy.Scheduler` opens a :class:`Frontier` per crawl; the
:class:`~scrapeq.contrib.scrapy.ReportMiddleware` finds it by its crawler (:meth:`Frontier.of`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from scrapy import Request, Spider
from scrapy.crawler import Crawler
from twisted.internet import task
from twisted.internet.base import DelayedCall

from scrapeq.contrib.scrapy._config import ScrapyConfig
from scrapeq.contrib.scrapy._start import StartFlag
from scrapeq.contrib.scrapy._store import (
    META_PREFIX,
    UnstorableRequest,
    decode_request,
    encode_request,
)
from scrapeq.contrib.scrapy._urgent import UrgentListener
from scrapeq.engine.lua.scripts import DownloadSample, EnqueueSpec, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import Queue
from scrapeq.engine.server.connection import resolve_url
from scrapeq.errors import ConfigError, InvalidURL, PayloadTooLarge, RedisUnavailable, ScrapeqError
from scrapeq.runtime.classify import Classification
from scrapeq.runtime.gc_tuning import tuned_gc
from scrapeq.runtime.outcomes import settlement_for, timed

if TYPE_CHECKING:
    from scrapeq.contrib.scrapy._dupefilter import DupeFilter

__all__ = ["JOB", "LATENCY", "SETTLED", "STARTED", "VERDICT", "Frontier", "settlement_for"]

log = logging.getLogger("scrapeq.scrapy")

#: Most seconds between two claims while nothing was ready.
IDLE_MAX = 1.0
#: Seconds a read of the queue's counts is reused for ``has_pending_requests``.
COUNTS_TTL = 0.25
#: Most requests written in one enqueue call: a batch this long is written at once.
MAX_BATCH = 500

#: ``meta`` keys of a live request (never stored): its claimed job, the attempt's start
#: time, its download's verdict and latency (seconds), whether it was settled.
JOB = f"{META_PREFIX}_job"
STARTED = f"{META_PREFIX}_started"
VERDICT = f"{META_PREFIX}_verdict"
LATENCY = f"{META_PREFIX}_latency"
SETTLED = f"{META_PREFIX}_settled"


class Frontier:
    """One crawler's link to its queue (module docstring)."""

    _of: ClassVar[weakref.WeakKeyDictionary[Crawler, Frontier]] = weakref.WeakKeyDictionary()

    def __init__(self, crawler: Crawler, spider: Spider) -> None:
        self.crawler = crawler
        self.spider = spider
        self.config = ScrapyConfig.from_crawler(crawler, spider.name)
        settings = self.config.settings
        url = resolve_url(settings.redis_url, settings.data_dir)
        self.queue = Queue.from_url(url, settings=settings)
        # Urgent work (the most urgent lane) may take every free slot; other work leaves
        # config.urgent_slots of them free for it, filled by urgent-only claims made when
        # urgent work may be ready (the wake streams, an urgent enqueue or settle here).
        self.urgent: set[str] = set()  # held jobs of urgent-only claims
        self._urgent_hint = False
        self._listener = (
            UrgentListener(url, settings, self._urgent_enqueued)
            if self.config.urgent_slots
            else None
        )
        self.held: dict[str, Job] = {}  # claimed, not settled: their leases are renewed
        # Held jobs whose download is over (their callbacks run): no claim slot is theirs.
        self.downloaded: set[str] = set()
        # Of those, the ones whose domain slot in the queue is to be given back unless their
        # download's sample charges the domain (one call at the turn's end, or before the next
        # claim: flush_given_back; the script decides).
        self.giving_back: dict[str, tuple[Job, DownloadSample]] = {}
        self.ready: deque[Request] = deque()  # claimed, not handed to the engine yet
        self.batch: list[tuple[Request, EnqueueSpec]] = []  # scheduled, not written yet
        self.on_dropped: Callable[[Request, str], None] = lambda request, status: None
        # One call at a reactor turn's end writes what the turn left (flush_settles: the
        # scheduled requests, the slots given back, the settlements); a second later when
        # Redis did not answer.
        self._turn_call: DelayedCall | None = None
        self.settling: list[Settlement] = []  # this turn's settlements (flush_settles)
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self.start = StartFlag(self.queue, self.holder)
        # While the spider's start() is read (ReportMiddleware.process_start), its requests
        # are written by the middleware, in batches, not at each reactor turn's end.
        self.reading_start = False
        self.enqueued = self.refused = self.claimed = 0
        self._claim_after = 0.0
        self._wake_call: DelayedCall | None = None
        self._counts: tuple[float, bool] = (0.0, True)
        self._beat = task.LoopingCall(self.heartbeat)
        self._gc = contextlib.ExitStack()  # the collector's tuning while the crawl runs
        self._closed = False

    @classmethod
    def of(cls, crawler: Crawler) -> Frontier | None:
        return cls._of.get(crawler)

    def open(self) -> None:
        """Take the crawl's start flag (and start a new crawl: ``SCRAPEQ_NEW_CRAWL``), then
        renew leases and listen for urgent work. Raises what Redis raised (nothing is left
        open: the queue's connection is closed)."""
        try:
            self._open()
        except BaseException:
            self._of.pop(self.crawler, None)
            self.queue.close()
            raise

    def _open(self) -> None:
        self._of[self.crawler] = self
        name = self.queue.name
        if self.config.new_crawl:
            done = self.queue.new_crawl()
            log.info("scrapeq queue=%s: new crawl (SCRAPEQ_NEW_CRAWL): seen-set forgotten (%d "
                     "keys), start flag cleared", name, done.seen_keys)  # fmt: skip
        flag = self.start.take()
        if flag.won:
            log.info("scrapeq queue=%s: this process takes the start requests", name)
        elif flag.leased:
            log.info(
                "scrapeq queue=%s: start requests are being taken by %s; this process waits "
                "for their work and claims its share", name, flag.holder,
            )  # fmt: skip
        elif self._has_work():
            log.info(
                "scrapeq queue=%s: start requests were taken by %s; this process only claims",
                name, flag.holder,
            )  # fmt: skip
        else:
            log.info(
                "scrapeq queue=%s: start requests were taken by %s and nothing is left to "
                "crawl (-s SCRAPEQ_NEW_CRAWL=1 starts a new crawl)",
                name, flag.holder,
            )  # fmt: skip
        self._beat.start(max(self.config.settings.lease / 3, 0.05), now=False)
        if self._listener is not None:
            self._listener.start()
        if self.config.tune_gc:
            # As the worker does: a response's callback output is worked on by Scrapy's
            # CONCURRENT_ITEMS tasks, alive a reactor turn or more; at the collector's
            # default threshold they set off collections that promote them, and full
            # collections walk every module and setting alive since start.
            self._gc.enter_context(tuned_gc())

    def close(self, reason: str) -> None:
        try:
            self._close(reason)
        finally:
            self._gc.close()  # the collector as it was

    def _close(self, reason: str) -> None:
        if self._beat.running:
            self._beat.stop()
        if self._listener is not None:
            self._listener.stop()
        for call in (self._wake_call, self._turn_call):
            if call is not None and call.active():
                call.cancel()
        self._closed = True  # nothing is tried again later
        self.giving_back.clear()  # their settle or release frees their domain slots
        stored = self._flush_at_close()
        if self.settling and not stored:
            # A page is done only once its callback's requests are stored: these pages'
            # leases end and they are fetched again (their requests made again).
            log.error("scrapeq: %d settlements not written: the requests scheduled before "
                      "them could not be", len(self.settling))  # fmt: skip
            self.settling.clear()
        if self.settling:
            try:
                self.flush_settles()
            finally:
                self.settling.clear()  # not written: their leases end, the jobs come back
        held = list(self.held.values())
        self.held.clear()
        self.downloaded.clear()
        self.urgent.clear()
        self.ready.clear()
        if held:
            # Stopping is nobody's fault: no attempt, no release budget spent.
            try:
                self.queue.settle_many([self.queue.releasing(j, shutdown=True) for j in held])
            except RedisUnavailable as exc:
                log.warning("scrapeq: releasing %d jobs failed (they come back when their "
                            "leases end): %s", len(held), exc)  # fmt: skip
            else:
                log.info("scrapeq: released %d jobs without spending an attempt (%s)",
                         len(held), reason)  # fmt: skip
                self.stat("released_at_close", len(held))
        try:
            self.start.abandon()  # stopped before start() was exhausted: the next run takes it
        except RedisUnavailable as exc:  # its lease runs out instead
            log.warning("scrapeq: releasing the start flag failed: %s", exc)
        self.queue.close()
        self._of.pop(self.crawler, None)

    # --- scheduling ------------------------------------------------------------------------

    def spec(self, request: Request, dupefilter: DupeFilter | None) -> EnqueueSpec:
        """The job ``request`` becomes.

        Raises:
            UnstorableRequest: it cannot be stored as JSON, its URL is refused, or its
                ``meta["scrapeq_lane"]`` is not a lane.
        """
        payload = encode_request(request, self.spider)
        lane = request.meta.get("scrapeq_lane", self.config.lane)
        unique = "off" if request.dont_filter else self.config.settings.unique
        # Scrapy's request fingerprint in place of the URL's (not worked out when unused)
        fp64 = (
            dupefilter.fingerprint_of(request, self.queue)
            if dupefilter is not None and unique != "off"
            else None
        )
        try:
            return self.queue.prepare(
                request.url, lane=lane, payload=payload, unique=unique, fingerprint64=fp64
            )
        except (InvalidURL, ConfigError) as exc:
            raise UnstorableRequest(f"cannot schedule {request!r}: {exc}") from None

    def add(self, request: Request, spec: EnqueueSpec) -> None:
        """Schedule ``request`` as ``spec``: the requests of one reactor turn are written in
        one enqueue call (:meth:`flush`, at the turn's end or at the next claim), at most
        :data:`MAX_BATCH` a call. Start requests read while :attr:`reading_start` wait for
        the middleware's next flush (every few ms of ``start()``, and at its end) instead of
        the turn's end: Scrapy reads one start request a reactor turn, which would otherwise
        cost one enqueue call each."""
        self.batch.append((request, spec))
        if len(self.batch) >= MAX_BATCH:
            self.flush()
            return
        if self.reading_start and request.meta.get("is_start_request"):
            return  # written by the middleware's next flush
        self._at_turn_end()

    def flush(self) -> bool:
        """Write the scheduled requests in one enqueue call; those the seen-set drops, and
        those refused (too large, or an error that trying again would not mend: the queue's
        seen-set built with other settings, a script's refusal), go to :attr:`on_dropped`.
        Redis unreachable: they stay scheduled, tried again in a second (False)."""
        batch, self.batch = self.batch, []
        if not batch:
            return True
        try:
            statuses = self._enqueue(batch)
        except Exception as exc:
            if not isinstance(exc, ScrapeqError) or isinstance(exc, RedisUnavailable):
                self.batch[:0] = batch  # Redis did not answer: tried again
                log.warning("scrapeq: scheduling %d requests failed, trying again: %s",
                            len(batch), exc)  # fmt: skip
                self._try_again_later()
                return False
            for request, _ in batch:  # refused for good: an error line each, not retried
                self.refuse(request, exc)
            statuses = ["refused"] * len(batch)
        for (request, _), status in zip(batch, statuses, strict=True):
            if status in ("seen", "duplicate", "refused"):
                self.on_dropped(request, status)
        return True

    def _enqueue(self, batch: list[tuple[Request, EnqueueSpec]]) -> list[str]:
        try:
            results = self.queue.enqueue_many([spec for _, spec in batch])
            self.stat("enqueue_calls")
        except PayloadTooLarge:
            if len(batch) == 1:
                raise
            return [self._enqueue_one(request, spec) for request, spec in batch]
        added = sum(1 for r in results if r.added)
        if any(r.urgent for r in results):  # the script's is_urgent, not a guess from lanes
            self._urgent_hint = True  # no need to wait for the wake stream's word
        self.enqueued += added
        self.stat("enqueued", added)
        if added and self._claim_after > 0.0:
            self._claim_soon()  # a job may be ready now
        return [r.status for r in results]

    def _enqueue_one(self, request: Request, spec: EnqueueSpec) -> str:
        try:
            (status,) = self._enqueue([(request, spec)])
        except PayloadTooLarge as exc:
            self.refuse(request, exc)
            return "refused"
        return status

    def _flush_at_close(self) -> bool:
        """Write what is scheduled; False when some of it could not be (logged, counted)."""
        if not self.batch or self.flush():
            return True
        log.error("scrapeq: %d requests could not be scheduled before the crawl stopped",
                  len(self.batch))  # fmt: skip
        self.stat("lost_at_close", len(self.batch))
        self.batch.clear()
        return False

    def refuse(self, request: Request, exc: Exception) -> None:
        """Log (one error line) and count a request that is not scheduled."""
        self.refused += 1
        self.stat("refused")
        text = str(exc).replace("\r", "\\r").replace("\n", "\\n")
        log.error("scrapeq: refused, not scheduled: %s", text, extra={"spider": self.spider})

    def all_refused(self) -> bool:
        """Whether every request this process met was refused (nothing scheduled, claimed)."""
        return self.refused > 0 and self.enqueued == 0 and self.claimed == 0

    def next_request(self) -> Request | None:
        if not self.ready and self.free() > 0:
            self.flush()  # what this process scheduled is claimable now (and urgent or not)
            if time.monotonic() >= self._claim_after and self.room() > 0:
                self._claim()
            if not self.ready and self._urgent_hint:
                self._claim_urgent()
        return self.ready.popleft() if self.ready else None

    def free(self) -> int:
        """Claim slots free: ``CONCURRENT_REQUESTS`` less the jobs held, but for those whose
        download is over (a job's callback does not hold a slot; its lease is still renewed,
        it is settled once its callback is done)."""
        return self.config.concurrency - len(self.held) + len(self.downloaded)

    def room(self) -> int:
        """Claim slots an ordinary claim may fill: the free ones but ``urgent_slots``, less
        those urgent-only claims hold (urgent work may take every slot; other work leaves
        ``urgent_slots`` for it)."""
        busy = len(self.held) - len(self.downloaded) - len(self.urgent)
        return min(self.free(), self.config.concurrency - self.config.urgent_slots - busy)

    def _claim(self) -> None:
        asked = min(self.room(), self.config.claim_batch)
        if asked <= 0:
            return
        self.flush_settles()  # the domain slots they free are claimable in this call
        claimed = self.queue.claim(asked)
        self._take(claimed.jobs, urgent=False)
        if len(claimed.jobs) < asked:
            # Fewer than asked: every domain with a job ready is at its limit. No claim
            # again until something can change that: a settlement of this process's (a
            # domain slot is free), an enqueue that adds a job, the next due time, or
            # IDLE_MAX (other processes' settlements).
            if claimed.jobs or claimed.next_due is None:
                wait = IDLE_MAX
            else:
                wait = min(claimed.next_due, IDLE_MAX)
            self._claim_after = time.monotonic() + wait
            self._wake_in(wait)

    def _claim_urgent(self) -> None:
        """Claim jobs of the most urgent lane only, into any free slot; once a claim finds
        fewer than it asked, none until urgent work may be ready again."""
        asked = min(self.free(), self.config.claim_batch)
        if asked <= 0:
            return
        self.flush_settles()
        claimed = self.queue.claim(asked, urgent_only=True)
        self._take(claimed.jobs, urgent=True)
        self.stat("claimed_urgent_only", len(claimed.jobs))
        if len(claimed.jobs) < asked:
            self._urgent_hint = False

    def _take(self, jobs: list[Job], *, urgent: bool) -> None:
        """Hold the claimed ``jobs`` and make each a request for the engine."""
        for job in jobs:
            self.held[job.id] = job
            if urgent:
                self.urgent.add(job.id)
            try:
                request = decode_request(job.payload, self.spider)
            except ValueError as exc:
                self.settle(job, self.queue.failing(job, "bad_payload", str(exc)))
                continue
            request.meta[JOB] = job
            request.meta.setdefault("download_slot", job.domain)  # Scrapy's slot = the domain
            if self.config.set_timeout:
                request.meta.setdefault("download_timeout", self.config.settings.request_timeout)
            self.ready.append(request)
        self.claimed += len(jobs)
        self.stat("claimed", len(jobs))

    def _urgent_enqueued(self) -> None:
        """The wake streams say urgent work was enqueued (called from the listener's thread)."""
        _reactor().callFromThread(self._urgent_ready)

    def _urgent_ready(self) -> None:
        self._urgent_hint = True
        self.queue.urgent_arrived()  # a queue of partitions: the next claim tries them all
        self._wake_in(0)

    def has_pending(self) -> bool:
        """Whether the crawl has work: jobs ready, delayed or in flight (Scrapy asks once the
        spider's start is over: a process that joins a crawl first waits for the start
        requests to be scheduled, :meth:`StartFlag.wait_turn`)."""
        if self.ready or self.batch:
            return True
        at, pending = self._counts
        if time.monotonic() - at > COUNTS_TTL:
            pending = self._has_work()
            self._counts = (time.monotonic(), pending)
        return pending

    def _has_work(self) -> bool:
        counts = self.queue.counts()
        return counts["ready"] + counts["delayed"] + counts["inflight"] > 0

    # --- settling --------------------------------------------------------------------------

    def closing(self) -> bool:
        """Whether the crawl is stopping (Scrapy waits for the downloads in flight)."""
        slot = getattr(self.crawler.engine, "_slot", None)
        return getattr(slot, "closing", None) is not None

    def settlement(self, job: Job, verdict: Classification, seconds: float | None) -> Settlement:
        """The settlement of a failed download, with its latency (``seconds``, None: not
        known) for the domain's adaptive limit; while the crawl stops, a release that spends
        nothing (a download cut short by the stop, or timing out while Scrapy waits for it,
        says nothing about the page or its site)."""
        if self.closing():
            return self.queue.releasing(job, shutdown=True)
        settlement = settlement_for(self.queue, job, verdict)
        return settlement if seconds is None else timed(settlement, verdict, seconds)

    @staticmethod
    def timed(settlement: Settlement, meta: dict[str, Any]) -> Settlement:
        """``settlement`` of a job whose download was answered, with the download's latency
        and verdict (``meta``: the request's) for the domain's adaptive limit."""
        verdict, seconds = meta.get(VERDICT), meta.get(LATENCY)
        if verdict is None or seconds is None:
            return settlement
        return timed(settlement, verdict, seconds)

    def download_done(self, job: Job, *, sample: DownloadSample) -> None:
        """``job``'s download is over and its callback is to run: its claim slot is free
        (the engine asks for requests once the download is out of its downloader). So is
        its domain's slot in the queue (the site sees no request of it any more), unless
        what the download taught of the site (``sample``) charges the domain, its breaker or
        its adaptive limit (the script decides: ``lua/downloaded-1.lua``): given back at the
        turn's end or before the next claim (:meth:`flush_given_back`), so the domain's next
        job is claimable while the callback runs. The job keeps its lease until it is
        settled."""
        if job.id not in self.held:
            return
        self.downloaded.add(job.id)
        self._freed_urgent(job)
        self.giving_back[job.id] = (job, sample)
        self._at_turn_end()
        self._claim_soon()

    def flush_given_back(self) -> None:
        """Give back, in one call, the domain slots of the downloads over since the last
        call whose jobs are still held (``Queue.downloaded``). Redis unreachable: not tried
        again; each job's settle frees its slot as ever."""
        batch = [(job, s) for job, s in self.giving_back.values() if job.id in self.held]
        self.giving_back.clear()
        if not batch:
            return
        try:
            given = self.queue.downloaded([job for job, _ in batch], [s for _, s in batch])
        except Exception as exc:
            log.warning("scrapeq: giving back %d domain slots failed (their settles will): %s",
                        len(batch), exc)  # fmt: skip
            return
        self.stat("slots_given_back", sum(given))

    def settle(self, job: Job, settlement: Settlement) -> None:
        """Write ``settlement`` with the others of this reactor turn, in one settle call at the
        turn's end (or before the next claim: the slots it frees are claimed at once), after
        the requests scheduled before it (a page is done only once the requests its callback
        made are stored)."""
        self.downloaded.discard(job.id)
        self.giving_back.pop(job.id, None)  # its settle frees its slot
        self._freed_urgent(job)
        if self.held.pop(job.id, None) is None:
            return  # released at close, or its lease was lost
        self.settling.append(settlement)
        self._at_turn_end()
        self._claim_soon()

    def flush_settles(self) -> None:
        """Write this turn's settlements in one call, after the requests scheduled before
        them and the domain slots given back (what a claim then finds free). Redis
        unreachable: they are tried again in a second (their leases are not renewed
        meanwhile: a lease that ends first makes its settle stale, the job is fetched
        again); none is written while the requests scheduled before it are not."""
        if not self.flush():
            return  # a page is done only once its callback's requests are stored
        self.flush_given_back()
        batch, self.settling = self.settling, []
        if not batch:
            return
        try:
            statuses = self.queue.settle_many(batch)
        except Exception as exc:
            self.settling[:0] = batch
            log.warning("scrapeq: settling %d jobs failed, trying again: %s", len(batch), exc)
            self._try_again_later()
            return
        for status in statuses:
            self.stat(f"settled/{status}")

    def heartbeat(self) -> None:
        for renew in (self._renew_leases, self.start.renew):
            try:
                renew()
            except Exception as exc:  # the next beat tries again; a lost lease comes back
                log.warning("scrapeq: renewing leases failed: %s", exc)

    def _renew_leases(self) -> None:
        jobs = list(self.held.values())
        if not jobs:
            return
        renewed = self.queue.heartbeat(jobs)
        for job, ok in zip(jobs, renewed, strict=True):
            if not ok:
                self.held.pop(job.id, None)
                self.downloaded.discard(job.id)
                self.urgent.discard(job.id)
                self.stat("lease_lost")

    # --- helpers ---------------------------------------------------------------------------

    def _freed_urgent(self, job: Job) -> None:
        """An urgent job's slot is free (its download is over, or it was settled): more urgent
        work of its domain may be claimable now."""
        if job.id in self.urgent:  # an urgent-only claim took it: the script found it urgent
            self.urgent.discard(job.id)
            self._urgent_hint = True

    def _at_turn_end(self) -> None:
        """Have :meth:`flush_settles` write what this reactor turn left, once, at its end
        (unless it is to try again a second after Redis did not answer)."""
        if self._turn_call is None or not self._turn_call.active():
            self._turn_call = _reactor().callLater(0, self.flush_settles)

    def _try_again_later(self) -> None:
        """Redis did not answer: what is left is written in a second (not once closed)."""
        if self._closed:
            return
        if self._turn_call is not None and self._turn_call.active():
            self._turn_call.cancel()
        self._turn_call = _reactor().callLater(1.0, self.flush_settles)

    def _claim_soon(self) -> None:
        """Something claimable may be in Redis now (a settlement or a slot given back freed a
        domain slot, an enqueue added a job): claim again at once."""
        self._claim_after = 0.0
        self._wake_in(0)

    def _wake_in(self, seconds: float) -> None:
        """Have the engine ask for requests again in ``seconds`` (its own heartbeat is 5 s)."""
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_call.getTime() <= time.time() + seconds:
                return
            self._wake_call.cancel()
        self._wake_call = _reactor().callLater(max(seconds, 0.0), self._wake)

    def _wake(self) -> None:
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()

    def stat(self, name: str, count: int = 1) -> None:
        """Add ``count`` to the crawl's stat ``scrapeq/<name>``."""
        if self.crawler.stats is not None and count:
            self.crawler.stats.inc_value(f"scrapeq/{name}", count)


def _reactor() -> Any:
    from twisted.internet import reactor  # not at import: Scrapy installs its reactor

    return reactor
