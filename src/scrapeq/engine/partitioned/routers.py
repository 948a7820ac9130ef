"""The partition routers: each wraps the queue's core and runs its operations where they belong.

A queue of ``partitions = 1`` keeps every key under ``sq:{Q}:`` and each operation is the
core's own (:class:`SinglePartitionRouter`). With ``partitions = P > 1`` a domain lives in
partition ``crc32(domain) % P`` (keys ``sq:{Q:i}:``) and a job's id ends in ``.<i>``; the
operations fan out and merge (:class:`~scrapeq.engine.partitioned.multi.MultiPartitionRouter`).
``engine/facades/shared.py`` picks one router, once, from the settings.

:class:`PartitionRouter` is what they share and what the facades call (the ``_op_*``
methods). An operation written once is here: the checks every operation makes before it
runs (the queue's schema, its stored number of partitions), and each operation on one
domain or one job (the core's operation run on that partition, :meth:`PartitionRouter._on`).
What depends on the number of partitions (an operation on the whole queue) is a hook each
router writes: with one partition the core's, with several a fan-out and merge.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from scrapeq.engine.config.limits import check_count
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.owed import OwedLine
from scrapeq.engine.lua.schema import SchemaOpener
from scrapeq.engine.lua.scripts import (
    Command,
    EnqueueSpec,
    Op,
    Samples,
    Settled,
    Settlement,
)
from scrapeq.engine.model.job import Job, JobInfo
from scrapeq.engine.model.keys import Keys
from scrapeq.engine.model.seen import warn_if_resized
from scrapeq.engine.model.urls import domain_of
from scrapeq.engine.ops import listing
from scrapeq.engine.ops.audit import AuditReport
from scrapeq.engine.ops.core import _QueueCore
from scrapeq.engine.ops.listing import JobListing
from scrapeq.engine.ops.oputil import _by_part
from scrapeq.engine.ops.results import CancelResult, Claimed, EnqueueResult, ReplayResult
from scrapeq.engine.partitioned.routing import _retarget, partition_of, partition_of_id
from scrapeq.errors import ConfigError

__all__ = ["PartitionRouter", "SinglePartitionRouter"]

T = TypeVar("T")


class PartitionRouter(ABC):
    """Routes a queue's operations over its partitions; holds the core (``core``).

    The core (:class:`_QueueCore`) has the settings, the job builders and the operations of
    one key space. The core's other operations (once flags, history, stats, paused_until,
    known_queues, eviction_policy) read or write the queue's home keys only, and the facades
    call them on the core directly.
    """

    def __init__(self, core: _QueueCore, parts: list[Keys]) -> None:
        self.core = core
        self.partitions = core.settings.partitions
        #: The keys of each partition (the queue's own keys with one partition).
        self.parts = parts
        self._parts_checked = False
        #: Opens the queue (its schema) once, before the first operation that reads its layout.
        self._schema = SchemaOpener(core.keys.prefix, [k.prefix for k in parts])
        self._seen_told = False  # whether the queue's seen-set bucket count was compared

    # --- routing ---------------------------------------------------------------------------

    @abstractmethod
    def _on(self, op: Op[T], part: int) -> Op[T]:
        """Run a single-partition operation on partition ``part``."""

    def _on_prefix(self, op: Op[T], prefix: str) -> Op[T]:
        """Run a single-partition operation on the keys under ``prefix``."""
        base = self.core.keys.prefix
        try:
            step = next(op)
            while True:
                step = op.send((yield _retarget(step, base, prefix)))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _on_all(self, make: Callable[[], Op[T]]) -> Op[list[T]]:
        """Run a single-partition operation on every partition in turn; answers per partition."""
        out: list[T] = []
        for part in range(self.partitions):
            out.append((yield from self._on(make(), part)))
        return out

    def _part(self, domain: str) -> int:
        return partition_of(domain, self.partitions)

    def _part_of_id(self, job_id: str) -> int:
        return partition_of_id(job_id, self.partitions)

    @abstractmethod
    def urgent_arrived(self) -> None:
        """Urgent work was enqueued (engine/facades/wake.py): the next claim tries every
        partition."""

    def _op_check_parts(self, create: bool = False) -> Op[None]:
        """Once per queue object, before its first write: migrated (engine/lua/schema.py), and
        its stored number of partitions agrees with the settings (partitions-1.lua)."""
        if not self._parts_checked:
            yield from self._schema.op_home(create)
            yield scripts.partitions(self.partitions)
            self._parts_checked = True
        yield from self._schema.op_all(create)

    def _op_check_parts_read(self) -> Op[None]:
        """:meth:`_op_check_parts` for the queue-wide reads, writing nothing (but a migration)."""
        if not self._parts_checked:
            yield from self._schema.op_home(False)
            stored = yield Command(("HGET", self.core.keys.meta, "parts"))
            if stored is None and self.partitions > 1 and not (yield from self.core._op_exists()):
                return  # a queue not written yet: every partition reads empty, nothing to check
            if int(stored or 1) != self.partitions:
                raise scripts.map_error(f"SQ_PARTITIONS {int(stored or 1)} {self.partitions}")
            self._parts_checked = True
        yield from self._schema.op_all()

    def _op_stored_prefixes(self) -> Op[list[str]]:
        """The key prefixes of the partitions the queue has (its home says), whatever these
        settings say; none with one partition (its keys are the home's)."""
        stored = yield Command(("HGET", self.core.keys.meta, "parts"))
        count = int(stored) if stored else 1
        return [Keys(self.core.name, part).prefix for part in range(count if count > 1 else 0)]

    # --- writes ----------------------------------------------------------------------------

    def _op_enqueue(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        yield from self._op_check_parts()
        done = yield from self._enqueue(specs)
        yield from self._op_tell_seen_buckets(specs)
        if specs:  # stamped once it holds something: a refused enqueue writes nothing at all
            yield from self._schema.op_all(create=True)
        return done

    @abstractmethod
    def _enqueue(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        """Enqueue ``specs`` (the queue checked): each on its domain's partition."""

    def _op_tell_seen_buckets(self, specs: Sequence[EnqueueSpec]) -> Op[None]:
        """Once a client, after its first seen enqueue: warn when the queue's seen-set has
        another bucket count than this client's ``seen_capacity`` asks for (the queue's is
        used: ``seen.warn_if_resized``)."""
        spec = None if self._seen_told else next((s for s in specs if s.seen), None)
        if spec is None:
            return
        self._seen_told = True
        keys = self.parts[self._part(spec.domain)]
        warn_if_resized(self.core._dedup.seen, (yield Command(("HGET", keys.meta, "seen"))))

    def _op_claim(self, n: int, urgent: bool = False, domain: str | None = None) -> Op[Claimed]:
        yield from self._op_check_parts()
        return (yield from self._claim(n, urgent, domain))

    @abstractmethod
    def _claim(self, n: int, urgent: bool, domain: str | None = None) -> Op[Claimed]:
        """Claim up to ``n`` jobs (the queue checked); ``urgent``: of the most urgent lane
        only; ``domain``: of that domain only."""

    def _op_settle(self, items: Sequence[Settlement]) -> Op[list[Settled]]:
        yield from self._schema.op_all()
        return (yield from self._settle(items))

    @abstractmethod
    def _settle(self, items: Sequence[Settlement]) -> Op[list[Settled]]:
        """Settle ``items`` (the queue opened), each on its job's partition; answers in order."""

    @abstractmethod
    def _op_settle_one(self, item: Settlement) -> Op[Settled]:
        """Settle one job; :class:`~scrapeq.errors.StaleLease` when its token lost the lease."""

    @abstractmethod
    def _op_heartbeat(
        self, jobs: Sequence[Job], lease: float | None, handling: bool = False
    ) -> Op[list[bool]]:
        """Renew the leases of ``jobs``: whether each was still held."""

    @abstractmethod
    def _op_downloaded(self, jobs: Sequence[Job], samples: Samples = None) -> Op[list[bool]]:
        """Give back the domain slots of ``jobs`` whose download is over (unless its sample
        charges its domain): whether each was."""

    # --- the owed-lines ledger (lua/includes/owed.lua) -------------------------------------

    def _op_owed_ack(self, ids: Sequence[str]) -> Op[int]:
        """Acknowledge owed lines, each on its job's partition: how many were owed."""
        acked = 0
        for part, chosen in _by_part(ids, self._part_of_id):
            acked += yield from self._on(self.core._op_owed_ack(chosen), part)
        return acked

    def _op_owed_take(self, n: int) -> Op[list[OwedLine]]:
        """Take over up to ``n`` overdue owed lines of each partition."""
        parts = yield from self._on_all(lambda: self.core._op_owed_take(n))
        return [line for taken in parts for line in taken]

    def _op_owed_count(self) -> Op[int]:
        """The lines owed, on every partition."""
        return sum((yield from self._on_all(self.core._op_owed_count)))

    def _op_reap(self) -> Op[tuple[int, int, int]]:
        yield from self._schema.op_all()
        return (yield from self._reap())

    @abstractmethod
    def _reap(self) -> Op[tuple[int, int, int]]:
        """Housekeeping on every partition (reap-1.lua): its three counts, summed."""

    def _op_breaker(self, domain: str, action: str, cooldown: float | None) -> Op[str]:
        yield from self._schema.op_all()
        return (
            yield from self._on(self.core._op_breaker(domain, action, cooldown), self._part(domain))
        )

    def _op_page_info(self, url: str) -> Op[dict[str, Any]]:
        yield from self._schema.op_all()
        op = self.core._op_page_info(url)
        domain = self.core._politeness_domain(domain_of(url))
        return (yield from self._on(op, self._part(domain)))

    def _op_domain_set(
        self,
        domain: str,
        delay: float | None,
        concurrency: int | str | None,
        fetcher: str | None = None,
        max_pages: int | None = None,
        blocked_until: float | None = None,
        crawl_limit: int | None = None,
        wait_for: str | None = None,
    ) -> Op[dict[str, Any]]:
        yield from self._schema.op_all()
        op = self.core._op_domain_set(
            domain, delay, concurrency, fetcher, max_pages, blocked_until, crawl_limit, wait_for
        )
        return (yield from self._on(op, self._part(domain)))

    def _op_cancel(
        self, ids: Sequence[str] | None, domain: str | None, force: bool
    ) -> Op[CancelResult]:
        yield from self._schema.op_all()
        return (yield from self._cancel(ids, domain, force))

    @abstractmethod
    def _cancel(
        self, ids: Sequence[str] | None, domain: str | None, force: bool
    ) -> Op[CancelResult]:
        """Cancel jobs by id, or a domain's (the queue opened)."""

    def _op_replay(
        self, ids: Sequence[str] | None, domain: str | None, everything: bool, reset: bool
    ) -> Op[ReplayResult]:
        yield from self._schema.op_all()
        return (yield from self._replay(ids, domain, everything, reset))

    @abstractmethod
    def _replay(
        self, ids: Sequence[str] | None, domain: str | None, everything: bool, reset: bool
    ) -> Op[ReplayResult]:
        """Replay dead letters by id, a domain's or all of them (the queue opened)."""

    def _op_purge(self, older_than: float | None, domain: str | None) -> Op[int]:
        if domain is not None:
            return (
                yield from self._on(self.core._op_purge(older_than, domain), self._part(domain))
            )
        return sum((yield from self._on_all(lambda: self.core._op_purge(older_than, None))))

    def _op_clear(self) -> Op[int]:
        # Every partition the queue has: a clear by the wrong number would leave keys behind.
        prefixes = yield from self._op_stored_prefixes()
        return (yield from self._clear(prefixes))

    def _clear(self, prefixes: list[str]) -> Op[int]:
        """Delete the partitions' keys (under ``prefixes``), then the home's; the queue is
        opened again before its next use."""
        deleted = 0
        for prefix in prefixes:
            deleted += yield from self._on_prefix(self.core._op_clear(), prefix)
        # the home last (its meta holds the number of partitions): a clear cut short leaves it
        deleted += yield from self.core._op_clear()
        self._parts_checked = False
        self._schema.reset()
        return deleted

    def _op_renew(self) -> Op[scripts.Renewed]:
        yield from self._schema.op_all()
        prefixes = yield from self._op_stored_prefixes()  # as _op_clear: all of them
        done = scripts.Renewed()
        for prefix in prefixes:
            done += yield from self._on_prefix(self.core._op_renew(), prefix)
        return done + (yield from self.core._op_renew())

    def _op_log_leader(
        self, worker_id: str, lease: float, cursor_ttl: float, cursor: str | None, release: bool
    ) -> Op[scripts.LeaderAnswer]:
        op = self.core._op_log_leader(worker_id, lease, cursor_ttl, cursor, release)
        return (yield from self._on(op, 0))

    # --- reads -----------------------------------------------------------------------------

    def _op_job_info(self, job_id: str) -> Op[JobInfo | None]:
        return (yield from self._on(self.core._op_job_info(job_id), self._part_of_id(job_id)))

    def _op_url_job(self, spec: EnqueueSpec) -> Op[JobInfo | None]:
        """The job holding ``spec``'s fingerprint, on its domain's partition, then where it
        is (two reads: the job may move between them)."""
        if spec.fingerprint is None:
            return None
        yield from self._op_check_parts_read()
        held = yield from self._on(
            self.core._op_url_holder(spec.fingerprint), self._part(spec.domain)
        )
        return None if held is None else (yield from self._op_job_info(held))

    def _op_url_seen(self, spec: EnqueueSpec) -> Op[bool]:
        """Whether ``spec``'s URL is in the seen-set of its domain's partition."""
        if spec.seen is None:
            return False
        yield from self._op_check_parts_read()
        return (yield from self._on(_seen_has(spec.seen), self._part(spec.domain)))

    def _op_get_job(self, job_id: str) -> Op[Job | None]:
        return (yield from self._on(self.core._op_get_job(job_id), self._part_of_id(job_id)))

    def _op_status(self) -> Op[dict[str, Any]]:
        yield from self._op_check_parts_read()
        return (yield from self._status())

    @abstractmethod
    def _status(self) -> Op[dict[str, Any]]:
        """The queue's status (``Queue.status``; the queue checked)."""

    def _op_counts(self) -> Op[dict[str, int]]:
        yield from self._op_check_parts_read()
        return (yield from self._counts())

    @abstractmethod
    def _counts(self) -> Op[dict[str, int]]:
        """The queue's counts (``Queue.counts``; the queue checked)."""

    def _op_figures(self) -> Op[dict[str, int]]:
        yield from self._op_check_parts_read()
        return (yield from self._figures())

    @abstractmethod
    def _figures(self) -> Op[dict[str, int]]:
        """The queue's figures (``Queue.figures``; the queue checked)."""

    def _op_domain_known(self, domain: str) -> Op[bool]:
        yield from self._schema.op_all()
        return (yield from self._on(self.core._op_domain_known(domain), self._part(domain)))

    def _op_domain_names(self) -> Op[list[str]]:
        yield from self._schema.op_all()
        return (yield from self._domain_names())

    @abstractmethod
    def _domain_names(self) -> Op[list[str]]:
        """Every domain of the queue's registry, sorted (the queue opened)."""

    def _op_domains_info(self, domains: Sequence[str] | None) -> Op[list[dict[str, Any]]]:
        yield from self._schema.op_all()
        return (yield from self._domains_info(domains))

    @abstractmethod
    def _domains_info(self, domains: Sequence[str] | None) -> Op[list[dict[str, Any]]]:
        """Each known domain's state (None: every domain; the queue opened)."""

    def _op_recent_errors(self, domain: str) -> Op[list[dict[str, Any]]]:
        op = listing.op_recent_errors(self.core.keys, domain)
        return (yield from self._on(op, self._part(domain)))

    def _op_list_jobs(self, state: str, domain: str | None, limit: int) -> Op[JobListing]:
        if state not in listing.JOB_STATES:
            raise ConfigError("state", f"expected one of {', '.join(listing.JOB_STATES)}")
        check_count("limit", limit)

        def make() -> Op[JobListing]:
            offset = self.core.testing_clock_offset_ms
            return listing.op_job_list(self.core.keys, state, domain, limit, offset)

        if domain is not None:
            return (yield from self._on(make(), self._part(domain)))
        return listing.merge_listings((yield from self._on_all(make)), limit)

    def _op_walk_page(
        self, state: str, domain: str | None, part: int | None, start: int, count: int
    ) -> Op[tuple[list[JobInfo], int]]:
        """A page of a walk (``listing.op_walk_page``) on partition ``part`` (None, and every
        ready page: ``domain``'s)."""
        if state not in listing.PENDING_STATES or (state == "ready" and domain is None):
            raise ConfigError("state", "ready (of a domain), delayed or inflight")
        check_count("count", count)
        yield from self._schema.op_all()
        offset = self.core.testing_clock_offset_ms
        op = listing.op_walk_page(self.core.keys, state, domain, start, count, offset)
        if part is None or state == "ready":
            part = self._part(domain or "")
        return (yield from self._on(op, part))

    @abstractmethod
    def _op_dead_letters(self, domain: str | None, limit: int) -> Op[list[Job]]:
        """The newest ``limit`` dead letters, of the queue or of one domain."""

    @abstractmethod
    def _op_dead_count(self, domain: str | None) -> Op[int]:
        """How many dead letters the queue (or one domain) holds."""

    def _op_audit(self, repair: bool) -> Op[AuditReport]:
        yield from self._schema.op_all()
        return (yield from self._audit(repair))

    @abstractmethod
    def _audit(self, repair: bool) -> Op[AuditReport]:
        """Audit (and ``repair``) every partition (the queue opened)."""

    @abstractmethod
    def _op_exists(self) -> Op[bool]:
        """Whether the queue has any data."""

    @abstractmethod
    def _op_events(self, count: int) -> Op[list[dict[str, Any]]]:
        """The newest ``count`` events, newest first."""

    @abstractmethod
    def _op_events_after(self, after: str, count: int) -> Op[list[dict[str, str]]]:
        """The events after stream id ``after``, oldest first."""


class SinglePartitionRouter(PartitionRouter):
    """``partitions = 1``: every operation is the core's own, on the keys ``sq:{Q}:``."""

    def __init__(self, core: _QueueCore) -> None:
        super().__init__(core, [core.keys])

    def _on(self, op: Op[T], part: int) -> Op[T]:
        return op

    def urgent_arrived(self) -> None:
        """One partition: every claim asks it."""

    def _enqueue(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        return self.core._op_enqueue(specs)

    def _claim(self, n: int, urgent: bool, domain: str | None = None) -> Op[Claimed]:
        return self.core._op_claim(n, urgent, domain)

    def _settle(self, items: Sequence[Settlement]) -> Op[list[Settled]]:
        return self.core._op_settle(items)

    def _op_settle_one(self, item: Settlement) -> Op[Settled]:
        return self.core._op_settle_one(item)

    def _op_heartbeat(
        self, jobs: Sequence[Job], lease: float | None, handling: bool = False
    ) -> Op[list[bool]]:
        return self.core._op_heartbeat(jobs, lease, handling)

    def _op_downloaded(self, jobs: Sequence[Job], samples: Samples = None) -> Op[list[bool]]:
        return self.core._op_downloaded(jobs, samples)

    def _reap(self) -> Op[tuple[int, int, int]]:
        return (yield scripts.reap())  # type: ignore[no-any-return]

    def _cancel(
        self, ids: Sequence[str] | None, domain: str | None, force: bool
    ) -> Op[CancelResult]:
        return self.core._op_cancel(ids, domain, force)

    def _replay(
        self, ids: Sequence[str] | None, domain: str | None, everything: bool, reset: bool
    ) -> Op[ReplayResult]:
        return self.core._op_replay(ids, domain, everything, reset)

    def _status(self) -> Op[dict[str, Any]]:
        return self.core._op_status()

    def _counts(self) -> Op[dict[str, int]]:
        return self.core._op_counts()

    def _figures(self) -> Op[dict[str, int]]:
        return self.core._op_figures()

    def _domain_names(self) -> Op[list[str]]:
        return self.core._op_domain_names()

    def _domains_info(self, domains: Sequence[str] | None) -> Op[list[dict[str, Any]]]:
        return self.core._op_domains_info(domains)

    def _op_dead_letters(self, domain: str | None, limit: int) -> Op[list[Job]]:
        return self.core._op_dead_letters(domain, limit)

    def _op_dead_count(self, domain: str | None) -> Op[int]:
        return self.core._op_dead_count(domain)

    def _audit(self, repair: bool) -> Op[AuditReport]:
        return self.core._op_audit(repair)

    def _op_exists(self) -> Op[bool]:
        return self.core._op_exists()

    def _op_events(self, count: int) -> Op[list[dict[str, Any]]]:
        return self.core._op_events(count)

    def _op_events_after(self, after: str, count: int) -> Op[list[dict[str, str]]]:
        return self.core._op_events_after(after, count)


def _seen_has(seen: dict[str, Any]) -> Op[bool]:
    """Whether the seen-set holds the URL of seen-set argument ``seen`` (one partition)."""
    got: list[bool] = yield scripts.seen_has([seen])
    return got[0]
