"""The router of a queue of ``partitions = P > 1``: operations fan out and their answers merge.

A domain lives in partition ``crc32(domain) % P`` (keys ``sq:{Q:i}:``) and a job's id ends
in ``.<i>``. An operation on a domain or a job runs the core's operation on its partition
(its steps moved there, :func:`~scrapeq.engine.partitioned.routing._retarget`); one on the whole
queue runs on every partition (:class:`Many`: concurrently on the async queue) and sums or merges.
What every router shares is :class:`~scrapeq.engine.partitioned.routers.PartitionRouter`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import (
    Call,
    Command,
    EnqueueSpec,
    Many,
    Op,
    Samples,
    Settled,
    Settlement,
    Step,
)
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.keys import Keys
from scrapeq.engine.ops.audit import AuditReport, audit_op
from scrapeq.engine.ops.core import _QueueCore, check_claim_size, settled_one
from scrapeq.engine.ops.oputil import (
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
from scrapeq.engine.ops.results import CancelResult, Claimed, EnqueueResult, ReplayResult
from scrapeq.engine.ops.status import eviction_alarm, shape_counts, shape_figures, shape_status
from scrapeq.engine.partitioned.routers import PartitionRouter
from scrapeq.engine.partitioned.routing import (
    PARTITION_RECHECK,
    _merge_status,
    _stream_key,
    partition_of,
)

__all__ = ["MultiPartitionRouter"]

T = TypeVar("T")
X = TypeVar("X")


def _indexes_by_part(parts: Iterable[int]) -> dict[int, list[int]]:
    """Each partition with the indexes of the batch's items it holds (``parts``: each one's)."""
    groups: dict[int, list[int]] = {}
    for index, part in enumerate(parts):
        groups.setdefault(part, []).append(index)
    return groups


def _in_order(n: int, replies: Sequence[Sequence[T]], owners: Sequence[list[int]]) -> list[T]:
    """The answers of calls (each for the batch's items at its ``owners`` indexes) put back
    in the batch's order."""
    placed: dict[int, T] = {}
    for answers, indexes in zip(replies, owners, strict=True):
        placed.update(zip(indexes, answers, strict=True))
    return [placed[index] for index in range(n)]


class MultiPartitionRouter(PartitionRouter):
    """``partitions = P > 1``: each operation on its partition(s), the answers merged."""

    def __init__(self, core: _QueueCore) -> None:
        count = core.settings.partitions
        super().__init__(core, [Keys(core.name, i) for i in range(count)])
        #: Per partition: when (monotonic) to claim there next; whether it had nothing at all.
        self._due = [0.0] * count
        self._empty = [False] * count
        self._turn = 0

    # --- routing ---------------------------------------------------------------------------

    def _on(self, op: Op[T], part: int) -> Op[T]:
        return (yield from self._on_prefix(op, self.parts[part].prefix))

    def _wake(self, parts: Iterable[int]) -> None:
        """This client wrote to ``parts``: claim there again without waiting."""
        for part in parts:
            self._due[part], self._empty[part] = 0.0, False

    def urgent_arrived(self) -> None:
        self._wake(range(self.partitions))

    def _many(self, steps: Sequence[Step]) -> Op[list[Any]]:
        if not steps:
            return []
        answers: list[Any] = yield Many(tuple(steps))  # type: ignore[arg-type]
        return answers

    def _calls_by_part(
        self,
        groups: dict[int, list[int]],
        chosen: Callable[[int, list[int]], Sequence[X]],
        size: Callable[[X], int],
        script: Callable[[Sequence[X], str], Call[Any]],
    ) -> tuple[list[Step], list[list[int]]]:
        """A batch spread over the partitions: for each (``groups``: the indexes of the
        batch's items it holds), the items ``chosen`` there in calls of bounded size to
        ``script`` on its keys (new ids suffixed ``.<i>``). Returns the calls and the indexes
        each call answers for."""
        calls: list[Step] = []
        owners: list[list[int]] = []
        for part, indexes in sorted(groups.items()):
            start = 0
            for chunk in _chunks(chosen(part, indexes), size):
                calls.append(script(chunk, f".{part}").on(self.parts[part].prefix))
                owners.append(indexes[start : start + len(chunk)])
                start += len(chunk)
        return calls, owners

    # --- writes ----------------------------------------------------------------------------

    def _enqueue(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        self.core._check_payload_sizes(specs)
        groups = _indexes_by_part(self._part(spec.domain) for spec in specs)

        def chosen(part: int, indexes: list[int]) -> list[EnqueueSpec]:
            picked = [specs[i] for i in indexes]
            if self.core._fingerprint_all:
                return [_with_fingerprint(s) for s in picked]
            return picked

        calls, owners = self._calls_by_part(groups, chosen, _spec_size, scripts.enqueue)
        replies = yield from self._many(calls)
        self._wake(groups)
        # one partition that had a unique enqueue is enough for every job to carry its print
        self.core._fingerprint_all = any(hold_all for _, hold_all in replies)
        answers = _in_order(len(specs), [answers for answers, _ in replies], owners)
        return [_enqueue_result(answer) for answer in answers]

    def _claim(self, n: int, urgent: bool, domain: str | None = None) -> Op[Claimed]:
        check_claim_size(n)
        if domain is not None:  # its partition alone holds its jobs
            call = scripts.claim(n, urgent=urgent, domain=domain)
            home = self.parts[partition_of(domain, self.partitions)]
            next_ms, texts = yield call.on(home.prefix)
            return Claimed(
                [Job.from_json(t) for t in texts], None if next_ms < 0 else next_ms / 1000
            )
        if urgent:
            return (yield from self._claim_urgent(n))
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

    def _claim_urgent(self, n: int) -> Op[Claimed]:
        """Jobs of the most urgent lane only, from each partition in turn; what a partition
        answers says nothing of its other lanes, so the claim schedule is left as it was."""
        jobs: list[Job] = []
        for i in range(self.partitions):
            want = n - len(jobs)
            if want <= 0:
                break
            part = (self._turn + i) % self.partitions
            _, texts = yield scripts.claim(want, urgent=True).on(self.parts[part].prefix)
            jobs.extend(Job.from_json(t) for t in texts)
        return Claimed(jobs, 0.0 if jobs else None)

    def _settle(self, items: Sequence[Settlement]) -> Op[list[Settled]]:
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
        groups = _indexes_by_part(self._part_of_id(item.job_id) for item in items)

        def chosen(part: int, indexes: list[int]) -> list[Settlement]:
            return [_keep_follow(items[i], part, self._part) for i in indexes]

        calls, owners = self._calls_by_part(groups, chosen, _settlement_size, scripts.settle)
        replies = yield from self._many(calls)
        self._wake(groups)  # a settled job frees its domain's slot; a retry is due there
        return _in_order(len(items), replies, owners)

    def _op_settle_one(self, item: Settlement) -> Op[Settled]:
        (status,) = yield from self._op_settle([item])
        return settled_one(item, status)

    def _on_leases(
        self,
        jobs: Sequence[Job],
        script: Callable[[list[tuple[str, int]], list[int]], Call[list[bool]]],
    ) -> Op[tuple[list[bool], list[int]]]:
        """``script`` called with the (id, token) pairs of ``jobs`` on each one's partition
        (and their indexes in ``jobs``): the answers in the order of ``jobs``, and the
        partitions called."""
        groups = sorted(_indexes_by_part(self._part_of_id(job.id) for job in jobs).items())
        calls: list[Step] = []
        for part, indexes in groups:
            pairs = [(jobs[i].id, jobs[i].token) for i in indexes]
            calls.append(script(pairs, indexes).on(self.parts[part].prefix))
        answers = yield from self._many(calls)
        owners = [indexes for _, indexes in groups]
        return _in_order(len(jobs), answers, owners), [part for part, _ in groups]

    def _op_heartbeat(
        self, jobs: Sequence[Job], lease: float | None, handling: bool = False
    ) -> Op[list[bool]]:
        lease_ms = _seconds_ms("lease", lease)
        renewed, _ = yield from self._on_leases(
            jobs, lambda pairs, _: scripts.heartbeat(pairs, lease_ms, handling=handling)
        )
        return renewed

    def _op_downloaded(self, jobs: Sequence[Job], samples: Samples = None) -> Op[list[bool]]:
        def call(pairs: list[tuple[str, int]], indexes: list[int]) -> Call[list[bool]]:
            mine = None if samples is None else [samples[i] for i in indexes]
            return scripts.downloaded(pairs, mine)

        given, parts = yield from self._on_leases(jobs, call)
        self._wake(parts)  # a slot given back there: claim there again
        return given

    def _reap(self) -> Op[tuple[int, int, int]]:
        answers = yield from self._many([scripts.reap().on(k.prefix) for k in self.parts])
        return (
            sum(a[0] for a in answers),
            sum(a[1] for a in answers),
            sum(a[2] for a in answers),
        )

    def _cancel(
        self, ids: Sequence[str] | None, domain: str | None, force: bool
    ) -> Op[CancelResult]:
        if (ids is None) == (domain is None):
            return (yield from self.core._op_cancel(ids, domain, force))  # it refuses them
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

    def _replay(
        self, ids: Sequence[str] | None, domain: str | None, everything: bool, reset: bool
    ) -> Op[ReplayResult]:
        if sum([ids is not None, domain is not None, everything]) != 1:
            return (yield from self.core._op_replay(ids, domain, everything, reset))  # refused
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

    # --- reads -----------------------------------------------------------------------------

    def _status_raw(self, top: int = 0) -> Op[dict[str, Any]]:
        """One status-1.lua answer for the whole queue (``top`` domains worth a look each)."""
        lanes = self.core.settings.lanes.names
        raws = yield from self._many([scripts.status(lanes, top).on(k.prefix) for k in self.parts])
        return _merge_status(raws)

    def _status(self) -> Op[dict[str, Any]]:
        top = self.core.settings.status_top
        raw = yield from self._status_raw(top)
        domains = yield from self._op_domains_info(sorted(_names(raw.get("top"))[:top]))
        status = shape_status(self.core.name, raw, domains)
        policy = yield from self.core._op_eviction_policy()
        if policy not in (None, "noeviction"):
            status["alarms"].append(eviction_alarm(policy))
        return status

    def _counts(self) -> Op[dict[str, int]]:
        return shape_counts((yield from self._status_raw()))

    def _figures(self) -> Op[dict[str, int]]:
        return shape_figures((yield from self._status_raw()))

    def _domain_names(self) -> Op[list[str]]:
        names: set[str] = set()
        for part in range(self.partitions):
            names.update((yield from self._on(scripts.registry_names_op(), part)))
        return sorted(names)

    def _domains_info(self, domains: Sequence[str] | None) -> Op[list[dict[str, Any]]]:
        if domains is None:
            domains = yield from self._op_domain_names()
        found: dict[str, dict[str, Any]] = {}
        for part, chosen in _by_part(domains, self._part):
            for info in (yield from self._on(self.core._op_domains_info(chosen), part)):
                found[str(info.get("domain"))] = info
        return [found[d] for d in domains if d in found]

    def _op_dead_letters(self, domain: str | None, limit: int) -> Op[list[Job]]:
        if domain is not None:
            op = self.core._op_dead_letters(domain, limit)
            return (yield from self._on(op, self._part(domain)))
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
        if domain is not None:
            return (yield from self._on(self.core._op_dead_count(domain), self._part(domain)))
        counts = yield from self._many([Command(("ZCARD", k.dead)) for k in self.parts])
        return sum(int(c) for c in counts)

    def _audit(self, repair: bool) -> Op[AuditReport]:
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
        steps: list[Step] = [Command(("EXISTS", self.core.keys.meta))]
        steps += [
            Command(("EXISTS", k.meta, k.domain_count, k.domains, k.stats)) for k in self.parts
        ]
        return any(int(x) for x in (yield from self._many(steps)))

    def _op_events(self, count: int) -> Op[list[dict[str, Any]]]:
        pages = yield from self._many(
            [Command(("XREVRANGE", k.events, "+", "-", "COUNT", count)) for k in self.parts]
        )
        entries = [entry for page in pages for entry in page]
        entries.sort(key=lambda e: _stream_key(e[0]), reverse=True)
        return [_event(entry_id, fields) for entry_id, fields in entries[:count]]

    def _op_events_after(self, after: str, count: int) -> Op[list[dict[str, str]]]:
        """Every partition's events after stream id ``after``, merged in id order. A page
        ends between two different ids only, so the last id is a cursor for every stream."""
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
