"""Crawlee's request-queue client on a scrapeq queue.

A crawlee :class:`~crawlee.Request` is one scrapeq job: its URL routes the job to its
domain (politeness, concurrency, breaker), the request itself is the job's payload
(``Request.model_dump_json``, read back with ``Request.model_validate``), and its
``unique_key`` is the job's 64-bit fingerprint in the queue's seen-set (``unique = seen``:
the check and the add are the enqueue script's, atomic across processes).

The methods, mapped:

* ``add_batch_of_requests``: one ``enqueue_many`` call; ``forefront`` puts the requests in
  the most urgent lane. A request already known (pending, in progress or handled, in any
  process) answers ``was_already_present``; which of the three is not known here, so
  ``was_already_handled`` is False for it.
* ``fetch_next_request``: a claim of one job (leased to this process; the lease is renewed
  while crawlee works on it). Nothing claimable (every domain waiting for its politeness
  slot, or at its concurrency): None, and no claim again until the queue's next due time
  (at most ``IDLE_MAX``) or this client's next settlement.
* ``mark_request_as_handled``: the job is done: the breaker counts a success (with a
  watched crawler, :mod:`._navigation`: the navigation's latency, a slow one a failure).
  Marked handled in crawlee's ``ERROR`` state (its retries spent), the job is dead-lettered
  with the navigation's reason (``timeout``, ``http_503``, ...; ``handler_error`` when the
  navigation was answered, or not seen), its domain charged when the reason says so;
  ``SKIPPED`` (robots.txt): done, the breaker told nothing.
* ``reclaim_request`` after a failure of the site (a watched crawler's navigation timed out,
  was refused, answered 5xx, 403 or 429): the job is retried as scrapeq's worker retries a
  fetch (``retry`` with the queue's backoff and ``max_attempts``, charged to the domain's
  breaker; ``throttle`` for a 429), so a hanging or failing domain parks and the others go on.
  Crawlee's count follows: a fetched request's ``retry_count`` adds the job's attempts spent,
  so crawlee's ``max_request_retries`` still ends it (then marked handled ``ERROR``, above).
  What crawlee changed in the request is not kept (the job's payload stays).
* ``reclaim_request`` otherwise (the handler failed, or nothing is known): the job is done and
  the request, as crawlee changed it (its ``retry_count``), is enqueued again in the same
  script call (a ``done`` settlement's follow-up: atomic), in the urgent lane with
  ``forefront``; the breaker learns nothing. Crawlee counts its own retries.
* ``get_metadata``: pending = jobs ready, delayed or in flight (any process's); handled = jobs
  done or dead less the reclaims' follow-ups (the queue's ``links_queued``: this client
  enqueues no other follow-up), so a reclaim is never a new request; total = the two summed.
* ``is_empty``: nothing ready or delayed in the queue (any process's) and nothing fetched
  here waiting; ``is_finished``: empty and nothing in flight in any process, so a crawl
  ends when every process's work is done, and not before a killed process's leases come
  back.
* ``drop``/``purge``: the queue's keys are deleted (``Queue.clear``).

A process killed mid-request leaves its jobs leased: they come back when their leases run
out (``lease``, 60 s by default), to any process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from crawlee import Request, RequestState
from crawlee.storage_clients._base import RequestQueueClient
from crawlee.storage_clients.models import (
    AddRequestsResponse,
    ProcessedRequest,
    RequestQueueMetadata,
    UnprocessedRequest,
)

from scrapeq.contrib.crawlee._navigation import Navigations
from scrapeq.engine.lua.scripts import EnqueueSpec, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import ConfigError, InvalidURL, PayloadTooLarge
from scrapeq.runtime.classify import Classification, Outcome
from scrapeq.runtime.outcomes import settlement_for, timed

__all__ = ["IDLE_MAX", "ScrapeqRequestQueueClient", "unique_key_fingerprint"]

log = logging.getLogger("scrapeq.crawlee")

#: Most seconds between two claims while nothing was claimable.
IDLE_MAX = 1.0
#: Seconds a read of the queue's counts is reused by ``is_empty``/``is_finished``.
COUNTS_TTL = 0.1


def unique_key_fingerprint(unique_key: str) -> int:
    """The 64-bit fingerprint of a crawlee ``unique_key``: the first 8 bytes of its SHA-1,
    as an unsigned integer (what the seen-set compares)."""
    return int.from_bytes(hashlib.sha1(unique_key.encode()).digest()[:8], "big")


def _now() -> datetime:
    return datetime.now(UTC)


class ScrapeqRequestQueueClient(RequestQueueClient):
    """A crawlee request queue that is a scrapeq queue (module docstring)."""

    def __init__(
        self, queue: AsyncQueue, *, id: str, name: str, navigations: Navigations | None = None
    ) -> None:
        self.queue = queue
        self.navigations = navigations or Navigations(queue.settings.slow_call)
        now = _now()
        self._metadata = RequestQueueMetadata(
            id=id,
            name=name,
            created_at=now,
            accessed_at=now,
            modified_at=now,
            had_multiple_clients=True,
            handled_request_count=0,
            pending_request_count=0,
            total_request_count=0,
        )
        self._top_lane = queue.settings.lanes.names[0]
        self._held: dict[str, Job] = {}  # unique_key -> the claimed job crawlee works on
        self._requests: dict[str, Request] = {}  # unique_key -> its request, as fetched
        self._claim_after = 0.0
        self._reap_after = 0.0
        self._counts: tuple[float, dict[str, int]] | None = None
        self._beat: asyncio.Task[None] | None = None
        self._added = 0  # requests this client added (new jobs)

    # -- metadata ------------------------------------------------------------------------

    async def get_metadata(self) -> RequestQueueMetadata:
        figures = await self.queue.figures()
        pending = figures["ready"] + figures["delayed"] + figures["inflight"]
        reclaims = figures.get("links_queued", 0)  # each did one done (the module docstring)
        handled = max(figures["done"] + figures["dead"] - reclaims, 0)
        self._metadata.handled_request_count = handled
        self._metadata.pending_request_count = pending
        self._metadata.total_request_count = handled + pending
        self._metadata.accessed_at = _now()
        return self._metadata

    async def _read_counts(self, *, fresh: bool = False) -> dict[str, int]:
        now = time.monotonic()
        if not fresh and self._counts is not None and now - self._counts[0] < COUNTS_TTL:
            return self._counts[1]
        counts = await self.queue.counts()
        if (
            counts["ready"] + counts["delayed"] == 0
            and counts["inflight"] > len(self._held)
            and now >= self._reap_after
        ):
            # Only other processes' leases are left: a killed process's come back only
            # when a claim or a reap finds them expired, and crawlee claims nothing while
            # the queue looks empty. One reap a second at most.
            self._reap_after = now + IDLE_MAX
            await self.queue.reap()
            counts = await self.queue.counts()
        self._counts = (now, counts)
        return counts

    # -- the queue as a whole ------------------------------------------------------------

    async def drop(self) -> None:
        await self.purge()
        await self.close()

    async def purge(self) -> None:
        self._held.clear()
        self._requests.clear()
        self._counts = None
        self._claim_after = 0.0
        await self.queue.clear()
        self._metadata.modified_at = _now()

    async def close(self) -> None:
        """Stop renewing leases and close the queue's connection. Jobs still held are
        released (not spent: nobody's fault) so another process takes them at once."""
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
            self._beat = None
        held = list(self._held.values())
        self._held.clear()
        if held:
            with contextlib.suppress(Exception):
                await self.queue.settle_many(
                    [self.queue.releasing(job, shutdown=True) for job in held]
                )
        await self.queue.close()

    # -- adding --------------------------------------------------------------------------

    def _spec(self, request: Request, *, forefront: bool, again: bool = False) -> EnqueueSpec:
        payload = json.loads(request.model_dump_json())
        lane = self._top_lane if forefront else None
        if again:  # a reclaimed request: its fingerprint is in the seen-set already
            return self.queue.prepare(request.url, lane=lane, payload=payload, unique=False)
        return self.queue.prepare(
            request.url,
            lane=lane,
            payload=payload,
            unique="seen",
            fingerprint64=unique_key_fingerprint(request.unique_key),
        )

    async def add_batch_of_requests(
        self, requests: Sequence[Request], *, forefront: bool = False
    ) -> AddRequestsResponse:
        specs: list[EnqueueSpec] = []
        taken: list[Request] = []
        unprocessed: list[UnprocessedRequest] = []
        for request in requests:
            try:
                specs.append(self._spec(request, forefront=forefront))
            except (InvalidURL, ConfigError, PayloadTooLarge) as exc:
                log.warning("scrapeq: request %s refused: %s", request.url, exc)
                unprocessed.append(
                    UnprocessedRequest(
                        unique_key=request.unique_key, url=request.url, method=request.method
                    )
                )
                continue
            taken.append(request)
        processed: list[ProcessedRequest] = []
        if specs:
            results = await self.queue.enqueue_many(specs)
            for request, result in zip(taken, results, strict=True):
                self._added += result.added
                processed.append(
                    ProcessedRequest(
                        id=result.id or None,
                        unique_key=request.unique_key,
                        was_already_present=not result.added,
                        was_already_handled=False,
                    )
                )
            self._counts = None
            self._claim_after = 0.0  # something may be claimable now
            self._metadata.modified_at = _now()
        return AddRequestsResponse(processed_requests=processed, unprocessed_requests=unprocessed)

    async def get_request(self, unique_key: str) -> Request | None:
        """The request of ``unique_key`` while this client holds it (fetched, not handled
        nor reclaimed); None otherwise: the queue keeps no index by crawlee's key."""
        return self._requests.get(unique_key)

    # -- fetching ------------------------------------------------------------------------

    async def fetch_next_request(self) -> Request | None:
        if time.monotonic() < self._claim_after:
            return None
        while True:
            claimed = await self.queue.claim(1)
            if not claimed.jobs:
                wait = IDLE_MAX if claimed.next_due is None else min(claimed.next_due, IDLE_MAX)
                self._claim_after = time.monotonic() + wait
                return None
            job = claimed.jobs[0]
            try:
                request = Request.model_validate(job.payload)
            except Exception as exc:  # not a crawlee request: a dead letter
                log.error("scrapeq: job %s holds no crawlee request (%s): failed", job.id, exc)
                await self.queue.fail(job, "bad_payload", str(exc)[:200])
                continue
            if request.unique_key in self._held:
                # Held here already: its lease ran out (renewals failed) and the job came
                # back to this client. Crawlee still works on it: the new lease is kept for
                # its settlement, and it is not handed out twice.
                self._held[request.unique_key] = job
                continue
            if job.attempts > 1:  # retried by scrapeq (:meth:`reclaim_request`): crawlee's count
                request.retry_count += job.attempts - 1
            self._held[request.unique_key] = job
            self._requests[request.unique_key] = request
            self.navigations.forget(request.unique_key)
            self._counts = None
            self._start_beat()
            return request

    def _start_beat(self) -> None:
        if self._beat is None or self._beat.done():
            self._beat = asyncio.get_running_loop().create_task(self._renew_leases())

    async def _renew_leases(self) -> None:
        period = max(self.queue.settings.lease / 3, 0.05)
        while self._held:
            await asyncio.sleep(period)
            jobs = list(self._held.values())
            if not jobs:
                break
            try:
                owned = await self.queue.heartbeat(jobs)
            except Exception as exc:  # Redis away: try again next period
                log.warning("scrapeq: leases not renewed: %s", exc)
                continue
            for job, mine in zip(jobs, owned, strict=True):
                if not mine:
                    log.warning("scrapeq: lease of %s lost (it ran out)", job.url)

    def _take(self, request: Request) -> Job | None:
        job = self._held.pop(request.unique_key, None)
        self._requests.pop(request.unique_key, None)
        self._counts = None
        return job

    async def mark_request_as_handled(self, request: Request) -> ProcessedRequest | None:
        job = self._take(request)
        if job is None:
            return None
        if request.handled_at is None:
            request.handled_at = _now()
        seen = self.navigations.verdict(request.unique_key)
        if request.state == RequestState.ERROR:
            settlement = self._failed(job, seen)
        elif request.state == RequestState.SKIPPED:  # never fetched: nothing to learn
            settlement = Settlement(job.id, job.token, "done", domain_failed=None)
        elif seen is None:
            settlement = self.queue.done(job)
        else:
            verdict, seconds = seen
            failed = verdict.counts_against_domain if verdict.outcome is Outcome.OK else None
            settlement = Settlement(job.id, job.token, "done", domain_failed=failed)
            settlement = timed(settlement, verdict, seconds)
        await self._settle(settlement, request, "handled")
        return ProcessedRequest(
            id=job.id, unique_key=request.unique_key, was_already_present=True,
            was_already_handled=True,
        )  # fmt: skip

    def _failed(self, job: Job, seen: tuple[Classification, float] | None) -> Settlement:
        """The dead letter of a request crawlee gave up on (its retries spent)."""
        if seen is None or seen[0].outcome is Outcome.OK:
            return self.queue.failing(job, "handler_error", "crawlee gave the request up")
        verdict, seconds = seen
        message = verdict.message or verdict.reason
        charged = verdict.counts_against_domain or None
        return timed(self.queue.failing(job, verdict.reason, message, domain_failed=charged),
                     verdict, seconds)  # fmt: skip

    async def _settle(self, settlement: Settlement, request: Request, what: str) -> str:
        settled = await self.queue.settle_many([settlement])
        status = settled[0] if settled else "stale"
        if status == "stale":
            log.warning("scrapeq: %s was %s after its lease ran out", request.url, what)
        elif status == "dead" and settlement.outcome != "fail":
            log.warning("scrapeq: %s died: %s (before crawlee's retries were spent)",
                        request.url, settled[0].reason)  # fmt: skip
        self._claim_after = 0.0  # its domain slot is free: claim again at once
        self._metadata.modified_at = _now()
        return status

    async def reclaim_request(
        self, request: Request, *, forefront: bool = False
    ) -> ProcessedRequest | None:
        job = self._take(request)
        if job is None:
            return None
        seen = self.navigations.verdict(request.unique_key)
        if seen is not None and _site_failed(seen[0]):
            # The site failed: scrapeq retries the job itself (backoff, max_attempts) and its
            # domain's breaker is charged; crawlee's retry_count follows the job's attempts.
            verdict, seconds = seen
            settlement = timed(settlement_for(self.queue, job, verdict), verdict, seconds)
        else:
            # Done, with the request as crawlee changed it enqueued again in the same call.
            # The breaker learns nothing from it (domain_failed None): the handler failed,
            # or nothing is known of the navigation.
            # A follow-up of the job (``parent``): counted as the queue's ``links_queued``.
            again = self._spec(request, forefront=forefront, again=True)
            again = again.child_of(job.id, job.depth)
            settlement = Settlement(job.id, job.token, "done", domain_failed=None, follow=(again,))
        await self._settle(settlement, request, "reclaimed")
        return ProcessedRequest(
            id=job.id, unique_key=request.unique_key, was_already_present=True,
            was_already_handled=False,
        )  # fmt: skip

    # -- state ---------------------------------------------------------------------------

    async def is_empty(self) -> bool:
        # Requests held here are in progress, not available to fetch; nothing is available
        # until the time the last claim that found nothing named (crawlee then waits
        # instead of asking again at once).
        if time.monotonic() < self._claim_after:
            return True
        counts = await self._read_counts()
        return counts["ready"] + counts["delayed"] == 0

    async def is_finished(self) -> bool:
        if self._held:
            return False
        # Read afresh: crawlee's pool asks twice a second at most.
        counts = await self._read_counts(fresh=True)
        return counts["ready"] + counts["delayed"] + counts["inflight"] == 0

    def describe(self) -> dict[str, Any]:
        """What this client holds (for logs and tests)."""
        return {"held": len(self._held), "added": self._added}


def _site_failed(verdict: Classification) -> bool:
    """Whether a navigation's verdict is a failure of the site to retry: a ``retry`` charged
    to its domain (timeout, refused, 5xx, 403), or ``throttled`` (429, 503 + Retry-After)."""
    if verdict.outcome is Outcome.THROTTLED:
        return True
    return verdict.outcome is Outcome.RETRY and verdict.counts_against_domain
