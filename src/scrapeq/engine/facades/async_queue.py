"""The asyncio queue :class:`AsyncQueue`: it drives the operations with ``redis.asyncio``.

:mod:`scrapeq.engine.facades.sync_queue` is written from :mod:`scrapeq.engine.facades.async_queue`
by ``scripts/unasync.py`` (``make fmt`` writes it, ``make lint`` checks it is current): edit
``async_queue.py`` only. The script renames and drops ``async``/``await``; what a rename cannot
express is a pair of helpers in :mod:`scrapeq.engine.facades.shared`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar, Unpack

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.facades.async_steps import AsyncSteps
from scrapeq.engine.facades.options import (
    FailOptions,
    JobOptions,
    ReleaseOptions,
    RetryOptions,
    ThrottleOptions,
)
from scrapeq.engine.lua import browsers as browser_ops
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.owed import OwedLine
from scrapeq.engine.lua.scripts import (
    EnqueueSpec,
    OnceFlag,
    Samples,
    Settled,
    Settlement,
)
from scrapeq.engine.model.job import Job, JobInfo
from scrapeq.engine.model.request import Request
from scrapeq.engine.ops.audit import AuditReport
from scrapeq.engine.ops.listing import JobListing
from scrapeq.engine.ops.oputil import _op_host_group
from scrapeq.engine.ops.results import (
    CancelResult,
    Claimed,
    EnqueueResult,
    KnownQueues,
    ReplayResult,
)
from scrapeq.engine.partitioned import exit_ops
from scrapeq.engine.server.connection import aclose_client, async_client
from scrapeq.engine.server.transport import (
    _url_or_embedded,
)

T = TypeVar("T")


class AsyncQueue(AsyncSteps):
    """A queue over an asyncio redis-py client: for workers.

    Args:
        client: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` created
            with ``decode_responses=True``.
        name: queue name (overrides ``settings.queue``).
        settings: the settings in force; defaults to :class:`Settings` defaults.
    """

    @classmethod
    def from_url(
        cls, url: str | None, name: str | None = None, *, settings: Settings | None = None
    ) -> AsyncQueue:
        """Connect to ``url`` (``redis://``, ``rediss://``, ``unix://``), or with None to the
        embedded Redis of ``settings.data_dir``, started if it is not running: the server
        the CLI uses when no ``redis_url`` is set (``scrapeq server stop`` stops it).

        The client has scrapeq's options (:func:`scrapeq.engine.server.connection.async_client`): a
        call that gets no answer fails after a socket timeout instead of waiting forever.
        """
        given = settings or Settings()
        client = async_client(_url_or_embedded(url, given), given.cluster)
        return cls(client, name, settings=settings)

    async def close(self) -> None:
        """Close the client and its connections."""
        await aclose_client(self.client)

    # --- public API (one line each: the operations above hold the logic) -----------------------

    async def enqueue(self, url: str | Request, **options: Unpack[JobOptions]) -> EnqueueResult:
        """Add one job (options as :meth:`prepare`)."""
        results = await self._drive(self._route._op_enqueue([self.prepare(url, **options)]))
        return results[0]

    async def enqueue_many(
        self, urls: Iterable[str | Request | EnqueueSpec], **options: Unpack[JobOptions]
    ) -> list[EnqueueResult]:
        """Add many jobs (URLs or requests); every one is validated before anything is
        written. ``fingerprint64`` is one job's own: refused for more than one URL."""
        return await self._drive(self._route._op_enqueue(self.prepare_many(urls, **options)))

    async def claim(
        self, n: int = 1, *, urgent_only: bool = False, domain: str | None = None
    ) -> Claimed:
        """Claim up to ``n`` jobs (most urgent first, honouring every domain's limits).

        ``urgent_only``: only jobs of the most urgent lane (as the wake stream signals them),
        none of another: for a share of a client's slots kept for urgent work. Its
        ``next_due`` says nothing of the other lanes. ``domain``: only that domain's jobs,
        when its limits let it dispatch now (the URLFrontier service's GetURLs of one key)."""
        return await self._drive(self._route._op_claim(n, urgent_only, domain))

    async def settle_many(self, items: Sequence[Settlement]) -> list[Settled]:
        """Settle many jobs in one call; a stale token answers ``stale`` for its item (each
        answer a :class:`~scrapeq.engine.lua.scripts.Settled`: the status, with the dead-letter
        reason or the backoff the script chose)."""
        return await self._drive(self._route._op_settle(items))

    async def ack(self, job: Job, *, domain_failed: bool = False) -> str:
        """Mark a claimed job done. Raises StaleLease when the token no longer owns it."""
        return await self._drive(
            self._route._op_settle_one(self.done(job, domain_failed=domain_failed))
        )

    async def retry(self, job: Job, **options: Unpack[RetryOptions]) -> str:
        """Retry a claimed job (options as :meth:`retrying`); ``dead`` when out of budget."""
        return await self._drive(self._route._op_settle_one(self.retrying(job, **options)))

    async def throttle(
        self, job: Job, retry_after: float | None, **options: Unpack[ThrottleOptions]
    ) -> str:
        """Defer a throttled job without spending an attempt; the domain parks."""
        return await self._drive(
            self._route._op_settle_one(self.throttling(job, retry_after, **options))
        )

    async def fail(
        self, job: Job, reason: str, message: str = "", **options: Unpack[FailOptions]
    ) -> str:
        """Dead-letter a claimed job at once."""
        return await self._drive(
            self._route._op_settle_one(self.failing(job, reason, message, **options))
        )

    async def release(self, job: Job, **options: Unpack[ReleaseOptions]) -> str:
        """Give a claimed job back without spending an attempt (options as :meth:`releasing`);
        ``dead`` when past its release budget."""
        return await self._drive(self._route._op_settle_one(self.releasing(job, **options)))

    async def heartbeat(self, jobs: Sequence[Job], lease: float | None = None) -> list[bool]:
        """Renew leases; answers per job whether its token still owns it."""
        return await self._drive(self._route._op_heartbeat(jobs, lease))

    async def mark_handler_running(self, jobs: Sequence[Job]) -> list[bool]:
        """Record that the handlers of these claimed jobs run now: if a lease of theirs
        expires (the worker died or stalled in the handler), the reap spends the attempt,
        where an expired lease otherwise gives it back (at most 2 x ``max_attempts`` times,
        ``lua/includes/housekeeping.lua``). The
        worker marks the job it runs alone (one whose lease expired before) and a handler
        held past ``max_job_time``. Renews nothing; answers per job whether its token still
        owns it."""
        return await self._drive(self._route._op_heartbeat(jobs, None, True))

    async def downloaded(self, jobs: Sequence[Job], samples: Samples = None) -> list[bool]:
        """Give back the domain slots of claimed jobs whose download is over, before they are
        settled (``lua/downloaded-1.lua``): each domain's next job may be claimed while these
        jobs' callbacks run. The jobs keep their leases and are settled as usual. ``samples``
        (one per job, or None): what each download taught of its site (its latency, its
        breaker input, an overload): the script decides from it whether the slot may come
        back before the settle (not when it charges the domain's breaker or adaptive limit,
        so no further request goes to the site before the settle told them); the settle
        records it, once. Answers per job whether its slot is given back (False: its lease
        is stale, it is its half-open domain's probe, or its sample charges its domain)."""
        return await self._drive(self._route._op_downloaded(jobs, samples))

    async def owed_ack(self, ids: Sequence[str]) -> int:
        """Acknowledge owed results lines (``lua/includes/owed.lua``): the sink took them.
        Idempotent; answers how many of ``ids`` were owed."""
        return await self._drive(self._route._op_owed_ack(ids))

    async def owed_take(self, n: int = 100) -> list[OwedLine]:
        """Take over up to ``n`` (1 to 1,000) owed results lines of each partition that
        nobody acknowledged within ``lease`` seconds of their settle; each one taken gets
        ``lease`` seconds more. The taker writes each (built from its record and the settle's
        answer) and acknowledges it."""
        return await self._drive(self._route._op_owed_take(n))

    async def owed_count(self) -> int:
        """How many results lines are owed to a sink (settled, not yet written)."""
        return await self._drive(self._route._op_owed_count())

    async def reap(self) -> tuple[int, int, int]:
        """Housekeeping now: (leases reaped, delayed jobs promoted, domains woken)."""
        return await self._drive(self._route._op_reap())

    async def status(self) -> dict[str, Any]:
        """Counts, lanes, domains and alarms in the ``status --json`` schema."""
        return await self._drive(self._route._op_status())

    async def exits_info(self) -> list[dict[str, Any]]:
        """Each exit of the pool (``proxy``, ``proxy_file``): state, tier, requests, bans,
        success rate, latency, bytes (passwords redacted)."""
        return await self._drive(exit_ops.op_exits_info(self._route))

    async def exits_probe(self, ids: Sequence[str]) -> dict[str, bool]:
        """End the rest of the pool's exits ``ids`` (``scrapeq proxies probe``): one that is
        down may carry a probe at the next claim (its answer closes it). Answers each id and
        whether it was down. An id not of the pool is refused before anything changes
        (:class:`~scrapeq.errors.NotFound`)."""
        return await self._drive(exit_ops.op_exits_probe(self._route, list(ids)))

    async def browser_down(
        self, worker: str, wait: float | None, *, failures: int = 0, reason: str = ""
    ) -> int:
        """Say that ``worker``'s browsers are benched for ``wait`` seconds (None: usable
        again): the ``browsers_down`` alarm of ``status``. Answers the workers benched."""
        op = browser_ops.op_browser_down(self._route, worker, wait, failures, reason)
        return await self._drive(op)

    async def domain_exits(self, domain: str) -> dict[str, Any]:
        """A domain's tier, its benched exits and its requests and bytes per tier."""
        return await self._drive(exit_ops.op_domain_exits(self._route, domain))

    async def domains_info(self, domains: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Full per-domain figures (breaker state, politeness, counts)."""
        return await self._drive(self._route._op_domains_info(domains))

    async def paused_until(self) -> str | None:
        """When the global-fault guard's pause ends (ISO 8601), or None when not paused."""
        return await self._drive(self._op_paused_until())

    async def domain_names(self) -> list[str]:
        """Every domain the queue knows, sorted (its registry's names: no per-domain reads)."""
        return await self._drive(self._route._op_domain_names())

    async def domain_known(self, domain: str) -> bool:
        """Whether the queue knows ``domain`` (one or two reads, whatever the domain count)."""
        return await self._drive(self._route._op_domain_known(domain))

    async def recent_errors(self, domain: str) -> list[dict[str, Any]]:
        """The last failures charged to ``domain``'s breaker (at most 10), newest first:
        ``{"id", "at", "at_ms", "kind", "message"}``; a throttled or retried job's errors too,
        which are in no dead letter."""
        return await self._drive(self._route._op_recent_errors(domain))

    async def list_jobs(
        self, state: str, *, domain: str | None = None, limit: int = 20
    ) -> JobListing:
        """At most ``limit`` jobs in ``state`` (ready, delayed, inflight, dead), of ``domain``
        if given, in the order of :class:`~scrapeq.engine.ops.listing.JobListing`. Bounded reads:
        see :mod:`scrapeq.engine.ops.listing`."""
        return await self._drive(self._route._op_list_jobs(state, domain, limit))

    async def walk_page(
        self,
        state: str,
        *,
        domain: str | None = None,
        part: int | None = None,
        start: int = 0,
        count: int = 500,
    ) -> tuple[list[JobInfo], int]:
        """One page of a walk over every pending job (the URLFrontier service's CountURLs,
        ListURLs, PurgeURLs): ``count`` entries from index ``start`` of ``domain``'s ready
        jobs (``state`` ready), or of partition ``part``'s (None: ``domain``'s) delayed or
        inflight jobs, kept to ``domain``'s when given; answers the jobs and the entries
        read (fewer than ``count``: the end). Bounded reads; not a snapshot."""
        return await self._drive(self._route._op_walk_page(state, domain, part, start, count))

    async def dead_letters(self, domain: str | None = None, limit: int = 50) -> list[Job]:
        """Dead letters, newest first."""
        return await self._drive(self._route._op_dead_letters(domain, limit))

    async def get_job(self, job_id: str) -> Job | None:
        """The stored job, or None when it does not exist (done jobs are deleted unless
        ``keep_done`` keeps them)."""
        return await self._drive(self._route._op_get_job(job_id))

    async def job_info(self, job_id: str) -> JobInfo | None:
        """Where job ``job_id`` is (ready with its place in line, delayed until when, in
        flight until when, dead, done) and what it holds; None when there is no such job (a
        done job is deleted unless ``keep_done`` keeps it). One atomic look."""
        return await self._drive(self._route._op_job_info(job_id))

    async def url_job(self, url: str | Request, *, domain: str | None = None) -> JobInfo | None:
        """Where the job holding ``url`` is (as :meth:`job_info`), found by its fingerprint
        (URLs compare as ``unique`` compares them; ``domain``: the key it was filed under,
        when not its host). None when no pending or leased job holds it: the URL is
        unknown, done, dead, or was enqueued before the queue's first unique enqueue."""
        spec = self.prepare(url, unique="pending")
        if domain is not None:
            spec = dataclasses.replace(spec, domain=domain)
        return await self._drive(self._route._op_url_job(spec))

    async def url_seen(self, url: str | Request, *, domain: str | None = None) -> bool:
        """Whether the seen-set holds ``url`` (``unique = seen``: it was enqueued once; with
        no job holding it, it is done, dead, cancelled or purged); ``domain`` as
        :meth:`url_job`'s. False for a queue without a seen-set."""
        spec = self.prepare(url, unique="seen")
        if domain is not None:
            spec = dataclasses.replace(spec, domain=domain)
        return await self._drive(self._route._op_url_seen(spec))

    async def cancel(
        self,
        *,
        ids: Sequence[str] | None = None,
        domain: str | None = None,
        force: bool = False,
    ) -> CancelResult:
        """Remove pending jobs: ``ids``, or every pending job of ``domain``.

        A cancelled job leaves every structure (counters fixed, fingerprint released) and is
        counted in ``status`` as ``cancelled``. Jobs in flight are refused unless
        ``force=True`` (ids only): the lease is dropped and the domain's slot freed; the
        worker's later settle is stale. Dead letters and done jobs are not cancelled. A
        domain is worked through in slices of ``CANCEL_SLICE`` jobs a call; its jobs in flight
        are left to finish.

        Raises:
            ConfigError: not exactly one of ``ids`` and ``domain``, or ``force`` with
                ``domain``.
            NotFound: ``domain`` was never seen by this queue.
        """
        return await self._drive(self._route._op_cancel(ids, domain, force))

    async def counts(self) -> dict[str, int]:
        """The ``counts`` of :meth:`status`, without the per-domain pages (cheap)."""
        return await self._drive(self._route._op_counts())

    async def dead_count(self, domain: str | None = None) -> int:
        """How many dead letters the queue (or one domain) holds."""
        return await self._drive(self._route._op_dead_count(domain))

    async def known_queues(self, max_calls: int = 1000) -> KnownQueues | None:
        """The queues on this Redis (found by their marker keys), with at most ``max_calls``
        SCAN calls of COUNT 1000; ``complete`` says whether every key was looked at. None when
        the server refuses SCAN (an ACL user)."""
        return await self._drive(self._op_known_queues(max_calls))

    async def clear(self) -> int:
        """Delete every key of this queue, in slices (SCAN and UNLINK of about
        ``CLEAR_COUNT`` keys a call); answers how many keys. Stop its workers first: keys
        they write meanwhile may be left."""
        return await self._drive(self._route._op_clear())

    async def new_crawl(self) -> scripts.Renewed:
        """Forget what this queue has seen, so a crawl of the same seeds starts again: its
        seen-set, once-per-crawl flags and domains' counts of jobs enqueued (``max_pages``),
        nothing else (``lua/renew-1.lua``). Stop its workers first."""
        return await self._drive(self._route._op_renew())

    async def replay(
        self,
        *,
        ids: Sequence[str] | None = None,
        domain: str | None = None,
        all: bool = False,
        reset_attempts: bool = False,
    ) -> ReplayResult:
        """Move dead letters back to their lanes; answers (moved, missing, duplicates)."""
        return await self._drive(self._route._op_replay(ids, domain, all, reset_attempts))

    async def purge(self, older_than: float | None = None, domain: str | None = None) -> int:
        """Delete dead letters (those that died at least ``older_than`` seconds ago)."""
        return await self._drive(self._route._op_purge(older_than, domain))

    async def breaker_reset(self, domain: str) -> str:
        """Close a domain's breaker (un-retiring it). Raises NotFound for unknown domains."""
        return await self._drive(self._route._op_breaker(domain, "reset", None))

    async def breaker_trip(self, domain: str, cooldown: float | None = None) -> str:
        """Open a domain's breaker now, for ``cooldown`` seconds (default: next cooldown)."""
        return await self._drive(self._route._op_breaker(domain, "trip", cooldown))

    async def page_info(self, url: str) -> dict[str, Any]:
        """A page's revisit state (``revisit = on``): its ``domain``, ``tracked``; when tracked,
        its last and next visit (``last``, ``due``: epoch s), ``intervals`` observed and
        ``changes`` among them, its estimated change ``rate`` per hour (None before an
        interval was observed), the ``interval`` scheduled (s) and the expected ``freshness``
        at it."""
        return await self._drive(self._route._op_page_info(url))

    async def domain_set(
        self,
        domain: str,
        *,
        delay: float | None = None,
        concurrency: int | str | None = None,
        fetcher: str | None = None,
        max_pages: int | None = None,
        blocked_until: float | None = None,
        crawl_limit: int | None = None,
        browser_wait_for: str | None = None,
    ) -> dict[str, Any]:
        """Set a domain's politeness overrides and its fetcher (``http``, ``impersonate``,
        ``browser``; ``default``: none, the worker's setting decides); answers what is now in
        force. ``browser_wait_for``: a CSS selector the browser fetcher waits for on the
        domain's pages instead of network idle (``""`` removes it).

        ``max_pages``: the domain's own cap on jobs enqueued, for the URLFrontier service's
        URLs (enqueued ``capped``); -1 restores the queue's. ``blocked_until``: epoch
        seconds before which the domain dispatches nothing (a later wait already set
        stays); 0 lifts such a wait now. ``crawl_limit``: the domain's jobs done at most
        (its ``done`` count): once done and in flight reach it nothing more is claimed
        (its jobs stay queued); -1 removes it."""
        op = self._route._op_domain_set(
            domain,
            delay,
            concurrency,
            fetcher,
            max_pages,
            blocked_until,
            crawl_limit,
            browser_wait_for,
        )
        return await self._drive(op)

    async def host_group(self, host: str, address: str) -> str:
        """``politeness = ip``: file ``host`` (``host[:port]``) under ``ip:<address>`` unless it
        has a group already; answers its group. Its later jobs are filed there."""
        return await self._drive(_op_host_group(host, address))

    async def events(self, count: int = 100) -> list[dict[str, Any]]:
        """Recent events (trips, recoveries, retirements, dead letters), newest first."""
        return await self._drive(self._route._op_events(count))

    async def events_after(self, after: str = "0-0", count: int = 500) -> list[dict[str, str]]:
        """Up to ``count`` events after id ``after``, oldest first: ``id`` and every field
        (``kind``, ``domain``, ``message``, ``at`` in ms, and those some kinds add)."""
        return await self._drive(self._route._op_events_after(after, count))

    async def history(self, minutes: int = 60) -> dict[str, Any]:
        """Per-minute counts of the last ``minutes`` minutes (1..1440, the current one last and
        partial), kept in Redis by the scripts that settle (``lua/includes/history.lua``).

        Answers ``{"start", "start_ms", "step": 60, "minutes", "now_ms", "outcomes": {outcome:
        [n per minute]}, "lanes": {lane: {outcome: [...]}}, "events": {"trip"|"retired"|
        "pause": [...]}}``; outcomes are done, retried, throttled, released and dead.

        Raises:
            ConfigError: ``minutes`` is out of range.
        """
        return await self._drive(self._op_history(minutes))

    async def stats(self) -> dict[str, int]:
        """The queue's counters since it was created: ``enqueued``, ``done``, ``done:<lane>``,
        ``retried``, ``throttled``, ``released``, ``dead_total``, ``dead:<reason>``,
        ``trips``, ``retirements``, ``global_pauses``, ``cancelled``... (zero: absent)."""
        return await self._drive(self._op_stats())

    async def figures(self) -> dict[str, int]:
        """Queue-wide counts (``done``, ``retried``, ``dead``, ``ready``, ``delayed``,
        ``inflight``, ``open_breakers``, ``retired_domains``; ``exits_down_ms`` while every
        exit of the pool is down); the ones ``status`` shows agree with it. Reads every
        domain's breaker: O(domains)."""
        return await self._drive(self._route._op_figures())

    async def log_leader(
        self,
        worker_id: str,
        *,
        lease: float,
        cursor_ttl: float,
        cursor: str | None = None,
        release: bool = False,
    ) -> scripts.LeaderAnswer:
        """Take, renew (storing ``cursor``) or ``release`` the log leader's lease of
        ``lease`` seconds (``lua/log_leader-1.lua``; used by :mod:`scrapeq.runtime.reporter`)."""
        return await self._drive(
            self._route._op_log_leader(worker_id, lease, cursor_ttl, cursor, release)
        )

    async def once(self, name: str, holder: str = "") -> tuple[bool, str]:
        """Set the queue's flag ``name`` if nobody has: (whether this call set it, the text
        its setter left). One atomic step, so of several processes asking together exactly
        one wins; ``clear`` removes the flags with the queue."""
        flag = await self._drive(self._op_once(name, holder, "take", 0.0))
        return flag.won, flag.holder

    async def once_flag(
        self, name: str, holder: str = "", *, op: str = "take", lease: float = 0.0
    ) -> OnceFlag:
        """Take, renew, release or read (``op``) the queue's flag ``name`` as ``holder``.

        ``take`` sets it unless it is set, for ``lease`` seconds (0: for good); ``renew``
        makes the holder's flag last ``lease`` more seconds (0: for good); ``release``
        removes the holder's flag; ``peek`` only reads (``lua/once-1.lua``)."""
        return await self._drive(self._op_once(name, holder, op, lease))

    async def exists(self) -> bool:
        """Whether anything was ever enqueued to (or configured on) this queue."""
        return await self._drive(self._route._op_exists())

    async def audit(self, *, repair: bool = False) -> AuditReport:
        """Check the queue's structures (see :mod:`scrapeq.engine.ops.audit`); with ``repair``, fix
        what is safely fixable. Suspicions a moving job raised are checked again atomically:
        only problems that hold are reported."""
        return await self._drive(self._route._op_audit(repair))

    async def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None when INFO is not allowed). Anything but
        ``noeviction`` may delete job keys under memory pressure."""
        return await self._drive(self._op_eviction_policy())
