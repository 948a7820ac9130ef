"""The partitioned queue core: runs single-partition operations on the right partitions."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from scrapeq.engine import listing, scripts
from scrapeq.engine.audit import AuditReport, audit_op
from scrapeq.engine.core import MAX_CLAIM, _QueueCore
from scrapeq.engine.job import Job, JobInfo
from scrapeq.engine.keys import Keys
from scrapeq.engine.limits import check_count
from scrapeq.engine.listing import JobListing
from scrapeq.engine.oputil import (
    _audit_conc,
    _by_part,
    _chunks,
    _dead_job,
    _enqueue_result,
    _event,
    _keep_follow,
    _names,
    _pairs,
    _seconds_ms,
    _settlement_size,
    _spec_size,
    _stream_entries,
    _with_fingerprint,
)
from scrapeq.engine.results import CancelResult, Claimed, EnqueueResult, ReplayResult
from scrapeq.engine.routing import (
    PARTITION_RECHECK,
    _merge_status,
    _retarget,
    _stream_key,
    partition_of,
    partition_of_id,
)
from scrapeq.engine.schema import SchemaOpener
from scrapeq.engine.scripts import (
    Command,
    EnqueueSpec,
    Many,
    Op,
    Settled,
    Settlement,
    Step,
)
from scrapeq.engine.seen import warn_if_resized
from scrapeq.engine.status import (
    eviction_alarm,
    shape_counts,
    shape_figures,
    shape_status,
)
from scrapeq.errors import (
    ConfigError,
    StaleLease,
)

T = TypeVar("T")


class PartitionRouter:
    """Routes a queue's operations over its ``partitions = P`` hash tags; wraps the core.

    The router holds the queue's :class:`_QueueCore` (``core``: the settings, the job builders
    and the single-partition operations) and adds the partitions: with P = 1 every operation
    is the core's, on the keys ``sq:{Q}:``. With P > 1 a domain lives in partition
    ``crc32(domain) % P`` (keys ``sq:{Q:i}:``) and a job's id ends in ``.<i>``: an operation
    on a domain or a job runs the core's operation on its partition (its steps moved there,
    :func:`_retarget`); one on the whole queue runs on every partition (:class:`Many`:
    concurrently on the async queue) and sums or merges. The core's other operations (once
    flags, history, stats, paused_until, known_queues, eviction_policy) read or write the
    queue's home keys only, and the facades call them on the core directly.
    """

    def __init__(self, core: _QueueCore) -> None:
        self.core = core
        self.partitions = core.settings.partitions
        self.parts = (
            [Keys(core.name, i) for i in range(self.partitions)]
            if self.partitions > 1
            else [core.keys]
        )
        self._parts_checked = False
        #: Opens the queue (its schema) once, before the first operation that reads its layout.
        self._schema = SchemaOpener(core.keys.prefix, [k.prefix for k in self.parts])
        self._seen_told = False  # whether the queue's seen-set bucket count was compared
        now = 0.0
        #: Per partition: when (monotonic) to claim there next; whether it had nothing at all.
        self._due = [now] * self.partitions
        self._empty = [False] * self.partitions
        self._turn = 0

    # --- routing ---------------------------------------------------------------------------

    def _on(self, op: Op[T], part: int) -> Op[T]:
        """Run a single-partition operation on partition ``part``."""
        if self.partitions == 1:
            return (yield from op)
        return (yield from self._on_prefix(op, self.parts[part].prefix))

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

    def _wake(self, parts: Iterable[int]) -> None:
        """This client wrote to ``parts``: claim there again without waiting."""
        for part in parts:
            self._due[part], self._empty[part] = 0.0, False

    def urgent_arrived(self) -> None:
        """Urgent work was enqueued (engine/wake.py): the next claim tries every partition."""
        self._wake(range(self.partitions))

    def _op_check_parts(self, create: bool = False) -> Op[None]:
        """Once per queue object, before its first write: migrated (engine/schema.py), and
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
            if int(stored or 1) != self.partitions:
                raise scripts.map_error(f"SQ_PARTITIONS {int(stored or 1)} {self.partitions}")
            self._parts_checked = True
        yield from self._schema.op_all()

    def _many(self, steps: Sequence[Step]) -> Op[list[Any]]:
        if not steps:
            return []
        answers: list[Any] = yield Many(tuple(steps))  # type: ignore[arg-type]
        return answers

    # --- writes ----------------------------------------------------------------------------

    def _op_enqueue(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        yield from self._op_check_parts()
        done = yield from self._op_enqueue_checked(specs)
        if specs:  # stamped once it holds something: a refused enqueue writes nothing at all
            yield from self._schema.op_all(create=True)
        return done

    def _op_enqueue_checked(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        if self.partitions == 1:
            done = yield from self.core._op_enqueue(specs)
            yield from self._op_tell_seen_buckets(specs)
            return done
        self.core._check_payload_sizes(specs)
        groups: dict[int, list[int]] = {}
        for index, spec in enumerate(specs):
            groups.setdefault(self._part(spec.domain), []).append(index)
        calls: list[Step] = []
        owners: list[list[int]] = []
        for part, indexes in sorted(groups.items()):
            chosen = [specs[i] for i in indexes]
            if self.core._fingerprint_all:
                chosen = [_with_fingerprint(s) for s in chosen]
            start = 0
            for chunk in _chunks(chosen, _spec_size):
                calls.append(scripts.enqueue(chunk, f".{part}").on(self.parts[part].prefix))
                owners.append(indexes[start : start + len(chunk)])
                start += len(chunk)
        results: list[EnqueueResult | None] = [None] * len(specs)
        replies = yield from self._many(calls)
        self._wake(groups)
        # one partition that had a unique enqueue is enough for every job to carry its print
        self.core._fingerprint_all = any(hold_all for _, hold_all in replies)
        for (answers, _), indexes in zip(replies, owners, strict=True):
            for index, answer in zip(indexes, answers, strict=True):
                results[index] = _enqueue_result(answer)
        yield from self._op_tell_seen_buckets(specs)
        return [r for r in results if r is not None]

    def _op_tell_seen_buckets(self, specs: Sequence[EnqueueSpec]) -> Op[None]:
        """Once a client, after its first seen enqueue: warn when the queue's seen-set has
        another bucket count than this client's ``seen_capacity`` asks for (the queue's is
        used: ``seen.warn_if_resized``)."""
        spec = None if self._seen_told else next((s for s in specs if s.seen), None)
        if spec is None:
            return
        self._seen_told = True
        keys = self.parts[self._part(spec.domain) if self.partitions > 1 else 0]
        warn_if_resized(self.core._seen, (yield Command(("HGET", keys.meta, "seen"))))

    def _op_claim(self, n: int) -> Op[Claimed]:
        yield from self._op_check_parts()
        if self.partitions == 1:
            return (yield from self.core._op_claim(n))
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLAIM:
            raise ConfigError("n", f"claim size must be an integer in 1..{MAX_CLAIM}, got {n!r}")
        now = time.monotonic()
        count = self.partitions
        # the most urgent partition first; among those due now, each in turn
        order = sorted(
            range(count), key=lambda i: (max(self._due[i] - now, 0.0), (i - self._turn) % count)
        )
        self._turn = (self._turn + 1) % count
        jobs: list[Job] = []
        for part in order:
            want = n - len(jobs)
            if want <= 0 or self._due[part] > now:
                continue
            call = scripts.claim(want).on(self.parts[part].prefix)
            next_ms, texts = yield call
            jobs.extend(Job.from_json(t) for t in texts)
            self._empty[part] = next_ms < 0 and not texts
            if len(texts) < want:  # nothing more there for now: leave it until it is due
                wait = PARTITION_RECHECK if next_ms < 0 else min(next_ms / 1000, PARTITION_RECHECK)
                self._due[part] = now + wait
        if jobs:
            return Claimed(jobs, 0.0)
        if all(self._empty):
            return Claimed([], None)
        return Claimed([], max(min(self._due) - now, 0.0))

    def _op_settle(self, items: Sequence[Settlement]) -> Op[list[Settled]]:
        yield from self._schema.op_all()
        if self.partitions == 1:
            return (yield from self.core._op_settle(items))
        # Follow-ups to another partition's domains cannot be in that partition's settle call:
        # they are enqueued first (a settle found stale leaves them queued: at least once).
        elsewhere = [
            spec
            for item in items
            for spec in item.follow
            if self._part(spec.domain) != self._part_of_id(item.job_id)
        ]
        if elsewhere:
            yield from self._op_enqueue(elsewhere)
        groups: dict[int, list[int]] = {}
        for index, item in enumerate(items):
            groups.setdefault(self._part_of_id(item.job_id), []).append(index)
        calls: list[Step] = []
        owners: list[list[int]] = []
        for part, indexes in sorted(groups.items()):
            chosen = [_keep_follow(items[i], part, self._part) for i in indexes]
            start = 0
            for chunk in _chunks(chosen, _settlement_size):
                calls.append(scripts.settle(chunk, f".{part}").on(self.parts[part].prefix))
                owners.append(indexes[start : start + len(chunk)])
                start += len(chunk)
        out = [Settled("")] * len(items)
        replies = yield from self._many(calls)
        self._wake(groups)  # a settled job frees its domain's slot; a retry is due there
        for answers, indexes in zip(replies, owners, strict=True):
            for index, answer in zip(indexes, answers, strict=True):
                out[index] = answer
        return out

    def _op_settle_one(self, item: Settlement) -> Op[Settled]:
        if self.partitions == 1:
            return (yield from self.core._op_settle_one(item))
        (status,) = yield from self._op_settle([item])
        if status == "stale":
            raise StaleLease(f"job {item.job_id}: token {item.token} no longer owns the lease")
        return status

    def _op_heartbeat(
        self, jobs: Sequence[Job], lease: float | None, handling: bool = False
    ) -> Op[list[bool]]:
        if self.partitions == 1:
            return (yield from self.core._op_heartbeat(jobs, lease, handling))
        lease_ms = _seconds_ms("lease", lease)
        groups: dict[int, list[int]] = {}
        for index, job in enumerate(jobs):
            groups.setdefault(self._part_of_id(job.id), []).append(index)
        calls: list[Step] = []
        for part, indexes in sorted(groups.items()):
            pairs = [(jobs[i].id, jobs[i].token) for i in indexes]
            call = scripts.heartbeat(pairs, lease_ms, handling=handling)
            calls.append(call.on(self.parts[part].prefix))
        out = [False] * len(jobs)
        answers = yield from self._many(calls)
        for renewed, (_, indexes) in zip(answers, sorted(groups.items()), strict=True):
            for index, ok in zip(indexes, renewed, strict=True):
                out[index] = ok
        return out

    def _op_reap(self) -> Op[tuple[int, int, int]]:
        yield from self._schema.op_all()
        if self.partitions == 1:
            return (yield scripts.reap())  # type: ignore[no-any-return]
        answers = yield from self._many([scripts.reap().on(k.prefix) for k in self.parts])
        return (
            sum(a[0] for a in answers),
            sum(a[1] for a in answers),
            sum(a[2] for a in answers),
        )

    def _op_breaker(self, domain: str, action: str, cooldown: float | None) -> Op[str]:
        yield from self._schema.op_all()
        return (
            yield from self._on(self.core._op_breaker(domain, action, cooldown), self._part(domain))
        )

    def _op_domain_set(
        self, domain: str, delay: float | None, concurrency: int | str | None
    ) -> Op[dict[str, Any]]:
        yield from self._schema.op_all()
        op = self.core._op_domain_set(domain, delay, concurrency)
        return (yield from self._on(op, self._part(domain)))

    def _op_cancel(
        self, ids: Sequence[str] | None, domain: str | None, force: bool
    ) -> Op[CancelResult]:
        yield from self._schema.op_all()
        if self.partitions == 1 or (ids is None) == (domain is None):
            return (yield from self.core._op_cancel(ids, domain, force))
        if domain is not None:
            return (
                yield from self._on(self.core._op_cancel(None, domain, force), self._part(domain))
            )
        assert ids is not None
        merged = CancelResult(0)
        for part, chosen in _by_part(ids, self._part_of_id):
            got = yield from self._on(self.core._op_cancel(chosen, None, force), part)
            merged = CancelResult(
                merged.cancelled + got.cancelled,
                merged.inflight + got.inflight,
                merged.dead + got.dead,
                merged.done + got.done,
                merged.unknown + got.unknown,
                merged.corrupt + got.corrupt,
            )
        return merged

    def _op_replay(
        self, ids: Sequence[str] | None, domain: str | None, everything: bool, reset: bool
    ) -> Op[ReplayResult]:
        yield from self._schema.op_all()
        chosen = [ids is not None, domain is not None, everything]
        if self.partitions == 1 or sum(chosen) != 1:
            return (yield from self.core._op_replay(ids, domain, everything, reset))
        if domain is not None:
            op = self.core._op_replay(None, domain, False, reset)
            return (yield from self._on(op, self._part(domain)))
        results: list[ReplayResult] = []
        if ids is not None:
            for part, some in _by_part(ids, self._part_of_id):
                op = self.core._op_replay(some, None, False, reset)
                results.append((yield from self._on(op, part)))
        else:
            results = yield from self._on_all(lambda: self.core._op_replay(None, None, True, reset))
        return ReplayResult(
            sum(r.moved for r in results),
            [i for r in results for i in r.missing],
            [i for r in results for i in r.duplicates],
        )

    def _op_purge(self, older_than: float | None, domain: str | None) -> Op[int]:
        if domain is not None:
            return (
                yield from self._on(self.core._op_purge(older_than, domain), self._part(domain))
            )
        if self.partitions == 1:
            return (yield from self.core._op_purge(older_than, domain))
        return sum((yield from self._on_all(lambda: self.core._op_purge(older_than, None))))

    def _op_clear(self) -> Op[int]:
        # The partitions the queue has (its home says), whatever these settings say: a
        # clear with the wrong number would leave the others' keys behind.
        stored = yield Command(("HGET", self.core.keys.meta, "parts"))
        count = int(stored) if stored else 1
        if count == 1 and self.partitions == 1:
            return (yield from self.core._op_clear())
        deleted = 0
        for part in range(count if count > 1 else 0):
            prefix = Keys(self.core.name, part).prefix
            deleted += yield from self._on_prefix(self.core._op_clear(), prefix)
        # the home last (its meta holds the number of partitions): a clear cut short leaves it
        deleted += yield from self.core._op_clear()
        self._parts_checked = False
        self._schema.reset()
        return deleted

    def _op_renew(self) -> Op[scripts.Renewed]:
        yield from self._schema.op_all()
        stored = yield Command(("HGET", self.core.keys.meta, "parts"))  # as _op_clear: all of them
        count = int(stored) if stored else 1
        done = scripts.Renewed()
        for part in range(count if count > 1 else 0):
            prefix = Keys(self.core.name, part).prefix
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

    def _op_get_job(self, job_id: str) -> Op[Job | None]:
        return (yield from self._on(self.core._op_get_job(job_id), self._part_of_id(job_id)))

    def _op_status_raw(self, top: int = 0) -> Op[dict[str, Any]]:
        yield from self._op_check_parts_read()
        lanes = self.core.settings.lanes.names
        if self.partitions == 1:
            raw: dict[str, Any] = yield scripts.status(lanes, top)
            return raw
        raws = yield from self._many([scripts.status(lanes, top).on(k.prefix) for k in self.parts])
        return _merge_status(raws)

    def _op_status(self) -> Op[dict[str, Any]]:
        if self.partitions == 1:
            yield from self._op_check_parts_read()
            return (yield from self.core._op_status())
        top = self.core.settings.status_top
        raw = yield from self._op_status_raw(top)
        domains = yield from self._op_domains_info(sorted(_names(raw.get("top"))[:top]))
        status = shape_status(self.core.name, raw, domains)
        policy = yield from self.core._op_eviction_policy()
        if policy not in (None, "noeviction"):
            status["alarms"].append(eviction_alarm(policy))
        return status

    def _op_counts(self) -> Op[dict[str, int]]:
        if self.partitions == 1:
            yield from self._op_check_parts_read()
            return (yield from self.core._op_counts())
        return shape_counts((yield from self._op_status_raw()))

    def _op_figures(self) -> Op[dict[str, int]]:
        if self.partitions == 1:
            yield from self._op_check_parts_read()
            return (yield from self.core._op_figures())
        return shape_figures((yield from self._op_status_raw()))

    def _op_domain_known(self, domain: str) -> Op[bool]:
        yield from self._schema.op_all()
        if self.partitions == 1:
            return (yield from self.core._op_domain_known(domain))
        return (yield from self._on(self.core._op_domain_known(domain), self._part(domain)))

    def _op_domain_names(self) -> Op[list[str]]:
        yield from self._schema.op_all()
        if self.partitions == 1:
            return (yield from self.core._op_domain_names())
        names: set[str] = set()
        for part in range(self.partitions):
            names.update((yield from self._on(scripts.registry_names_op(), part)))
        return sorted(names)

    def _op_domains_info(self, domains: Sequence[str] | None) -> Op[list[dict[str, Any]]]:
        yield from self._schema.op_all()
        if self.partitions == 1:
            return (yield from self.core._op_domains_info(domains))
        if domains is None:
            domains = yield from self._op_domain_names()
        found: dict[str, dict[str, Any]] = {}
        for part, chosen in _by_part(domains, self._part):
            for info in (yield from self._on(self.core._op_domains_info(chosen), part)):
                found[str(info.get("domain"))] = info
        return [found[d] for d in domains if d in found]

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

    def _op_dead_letters(self, domain: str | None, limit: int) -> Op[list[Job]]:
        if self.partitions == 1 or domain is not None:
            part = 0 if domain is None else self._part(domain)
            return (yield from self._on(self.core._op_dead_letters(domain, limit), part))
        top = max(limit, 1)
        pages = yield from self._many(
            [Command(("ZREVRANGE", k.dead, 0, top - 1, "WITHSCORES")) for k in self.parts]
        )
        scored = [
            (float(score), str(job_id), part)
            for part, page in enumerate(pages)
            for job_id, score in _pairs(page)
        ]
        scored.sort(key=lambda s: (-s[0], s[1]))
        chosen = scored[:top]
        by_part: dict[int, list[str]] = {}
        for _, job_id, part in chosen:
            by_part.setdefault(part, []).append(job_id)
        texts: dict[str, str | None] = {}
        for part, some in sorted(by_part.items()):
            keys = self.parts[part]
            got = yield Command(("MGET", *[keys.job(i) for i in some]))
            texts.update(zip(some, got, strict=True))
        return [_dead_job(i, t) for _, i, _ in chosen if (t := texts.get(i)) is not None]

    def _op_dead_count(self, domain: str | None) -> Op[int]:
        if self.partitions == 1 or domain is not None:
            part = 0 if domain is None else self._part(domain)
            return (yield from self._on(self.core._op_dead_count(domain), part))
        counts = yield from self._many([Command(("ZCARD", k.dead)) for k in self.parts])
        return sum(int(c) for c in counts)

    def _op_audit(self, repair: bool) -> Op[AuditReport]:
        yield from self._schema.op_all()
        if self.partitions == 1:
            return (yield from self.core._op_audit(repair))
        s = self.core.settings
        keep_ms = round(s.keep_done * 1000)
        reports: list[AuditReport] = []
        for keys in self.parts:  # the partition's own keys (the scan cuts ids off its keys)
            op = audit_op(keys, list(s.lanes.names), _audit_conc(s), repair, keep_ms)
            reports.append((yield from self._on_prefix(op, keys.prefix)))
        checked: dict[str, int] = {}
        for r in reports:
            for name, value in r.checked.items():
                checked[name] = checked.get(name, 0) + value
        problems = [p for r in reports for p in r.problems]
        return AuditReport(self.core.name, problems, checked, sum(r.suspected for r in reports))

    def _op_exists(self) -> Op[bool]:
        if self.partitions == 1:
            return (yield from self.core._op_exists())
        steps: list[Step] = [Command(("EXISTS", self.core.keys.meta))]
        steps += [
            Command(("EXISTS", k.meta, k.domain_count, k.domains, k.stats)) for k in self.parts
        ]
        return any(int(x) for x in (yield from self._many(steps)))

    def _op_events(self, count: int) -> Op[list[dict[str, Any]]]:
        if self.partitions == 1:
            return (yield from self.core._op_events(count))
        pages = yield from self._many(
            [Command(("XREVRANGE", k.events, "+", "-", "COUNT", count)) for k in self.parts]
        )
        entries = [entry for page in pages for entry in page]
        entries.sort(key=lambda e: _stream_key(e[0]), reverse=True)
        return [_event(entry_id, fields) for entry_id, fields in entries[:count]]

    def _op_events_after(self, after: str, count: int) -> Op[list[dict[str, str]]]:
        """Every partition's events after stream id ``after``, merged in id order. A page
        ends between two different ids only, so the last id is a cursor for every stream."""
        if self.partitions == 1:
            return (yield from self.core._op_events_after(after, count))
        replies = yield from self._many(
            [Command(("XREAD", "COUNT", count, "STREAMS", k.events, after)) for k in self.parts]
        )
        entries = [e for reply in replies for e in _stream_entries(reply)]
        entries.sort(key=lambda e: _stream_key(e["id"]))
        if len(entries) <= count:
            return entries
        cut = count
        while cut < len(entries) and entries[cut]["id"] == entries[cut - 1]["id"]:
            cut += 1
        return entries[:cut]
