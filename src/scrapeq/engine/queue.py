"""The queue: a sync :class:`Queue` and an async :class:`AsyncQueue` with the same methods.

Each public method is written once, as an *operation*: a generator that yields
:class:`~scrapeq.engine.scripts.Call` (a Lua script) or :class:`Command` (a read-only Redis command)
and receives each answer. The sync queue drives operations with a blocking client, the async
queue with ``redis.asyncio``; the bookkeeping is shared, the I/O is theirs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from scrapeq.engine import listing, scripts
from scrapeq.engine.audit import AuditReport, audit_op
from scrapeq.engine.backoff import full_jitter
from scrapeq.engine.connection import (
    AsyncClient,
    SyncClient,
    async_client,
    close_client,
    resolve_url,
    sync_client,
)
from scrapeq.engine.job import Job, JobInfo, expand_stored, ms_to_iso
from scrapeq.engine.keys import QUEUE_SCAN_PATTERN, Keys, queue_of_marker, registry_bucket
from scrapeq.engine.limits import check_count, check_json_depth, check_seconds
from scrapeq.engine.listing import JobListing
from scrapeq.engine.request import Request, request_fingerprint64
from scrapeq.engine.scripts import (
    ONCE_OPS,
    SCAN_START,
    Call,
    Command,
    EnqueueSpec,
    JobPlace,
    Many,
    OnceFlag,
    Op,
    ScriptConfig,
    Settlement,
    Step,
)
from scrapeq.engine.seen import SeenLayout, warn_if_resized
from scrapeq.engine.settings import UNIQUE_MODES, Settings
from scrapeq.engine.status import (
    HISTORY_MINUTES,
    eviction_alarm,
    shape_counts,
    shape_figures,
    shape_history,
    shape_status,
)
from scrapeq.engine.urls import fingerprint, fingerprint64, parse_target, politeness_key
from scrapeq.errors import (
    ConfigError,
    InvalidURL,
    PayloadTooLarge,
    RedisUnavailable,
    StaleLease,
)

__all__ = [
    "AsyncQueue",
    "CancelResult",
    "Claimed",
    "EnqueueResult",
    "KnownQueues",
    "Queue",
    "ReplayResult",
]

T = TypeVar("T")

#: Domains asked about per domain_info call, and dead letters read per page.
_PAGE = 200
#: Most jobs one claim may take: a script must not block Redis for long.
MAX_CLAIM = 1000
#: Most jobs, and about the most bytes of arguments, one enqueue or settle call carries: a
#: call must stay far below Redis's argument limit and answer well within the socket timeout.
CALL_ITEMS = 500
CALL_BYTES = 8 * 1024 * 1024
#: Jobs a ``cancel(domain=)`` call examines at most (ready ones, then delayed ones).
CANCEL_SLICE = 500
#: SCAN's COUNT for ``clear``: about the keys of the database one call looks at (and at most
#: about that many deleted: one UNLINK).
CLEAR_COUNT = 500
#: Passes of ``clear`` at most: another when the queue's marker keys came back (a worker
#: still running wrote while the first pass went).
CLEAR_PASSES = 3
#: Passes of a domain's delayed jobs ``cancel(domain=)`` makes at most: a second one when the
#: domain's delayed counter says some were missed (they moved while it paged).
CANCEL_DELAYED_PASSES = 2
#: What a ``once`` flag's name may be (it becomes part of a key).
_ONCE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What happened to one enqueued URL.

    Attributes:
        id: the job's id (for a duplicate: the pending job that has the fingerprint; for
            ``seen``: empty, no job was made).
        status: ``added``; ``duplicate`` (a pending job has the URL); ``seen`` (``unique=
            "seen"``: the queue's seen-set has the URL); ``dead`` (its domain is retired:
            the job went straight to the dead letters, replayable); or ``limit`` (a
            follow-up cut by ``max_pages``).
    """

    id: str
    status: str

    @property
    def added(self) -> bool:
        """Whether a job was made (``added`` or ``dead``), not skipped as a duplicate."""
        return self.status not in ("duplicate", "seen", "limit")


@dataclass(frozen=True, slots=True)
class Claimed:
    """The answer of a claim.

    Attributes:
        jobs: the claimed jobs, leased to the caller.
        next_due: seconds until something is next due (a delayed job, a parked domain, a
            lease to reap, the end of a global pause); 0.0 when jobs are ready now; ``None``
            when nothing at all is scheduled.
    """

    jobs: list[Job]
    next_due: float | None


class ReplayResult(NamedTuple):
    """What a replay did.

    Attributes:
        moved: dead letters put back in their lanes.
        missing: ids asked for that are not dead letters, or cannot be replayed (corrupt).
        duplicates: dead letters left dead because a pending job holds their de-duplication
            fingerprint (the URL was enqueued again after they died): replaying them would
            make two pending jobs for one URL.
    """

    moved: int
    missing: list[str]
    duplicates: list[str]


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a cancel did.

    Attributes:
        cancelled: pending jobs removed (counted in ``status`` as ``cancelled``).
        inflight: ids refused because a worker holds them (``force=True`` cancels them).
        dead: ids that are dead letters (``purge`` deletes those).
        done: ids of done jobs (kept by ``keep_done``).
        unknown: ids with no job (never enqueued, or done and not kept, or cancelled).
        corrupt: ids whose stored text is not a job (``audit --repair`` deals with them).
        left_inflight: ``domain=`` only: the domain's jobs in flight, left to finish.
    """

    cancelled: int
    inflight: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    left_inflight: int = 0


#: Why ``cancel-1.lua`` did not cancel an id: the CancelResult list it goes to.
_REFUSALS = ("inflight", "dead", "done", "unknown", "corrupt")


class KnownQueues(NamedTuple):
    """The queues a bounded SCAN found, and whether it looked at every key."""

    names: list[str]
    complete: bool


def _seconds_ms(name: str, value: float | None, *, allow_none: bool = True) -> int | None:
    if value is None:
        if allow_none:
            return None
        raise ConfigError(name, "a number of seconds is required")
    return round(check_seconds(name, value) * 1000)


class _QueueCore:
    """Everything but the I/O: argument checks, operations, result shaping."""

    def __init__(self, name: str | None = None, *, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        if name is not None and name != self.settings.queue:
            self.settings = self.settings.replace(queue=name)
        self.name = self.settings.queue
        self.keys = Keys(self.name)
        self._config_json = ScriptConfig.from_settings(self.settings).to_json()
        self._seen = SeenLayout.from_settings(self.settings)
        #: How URLs are compared for de-duplication (canonical_url's options).
        self._canonical = {
            "keep_fragments": self.settings.canonical_keep_fragments,
            "keep_blank_values": self.settings.canonical_keep_blank_values,
        }
        #: Whether jobs without uniqueness should carry their fingerprint: the queue has had
        #: a unique enqueue (or this client has not heard yet). Every enqueue answer says.
        self._fingerprint_all = True
        #: Testing switch: milliseconds added to the Redis clock in every script call.
        self.testing_clock_offset_ms = 0

    # --- building jobs ---------------------------------------------------------------------

    def prepare(
        self,
        url: str | Request,
        *,
        lane: str | None = None,
        delay: float = 0.0,
        max_attempts: int | None = None,
        payload: Any = None,
        unique: bool | str | None = None,
        expires: float | None = None,
    ) -> EnqueueSpec:
        """Validate one job without touching Redis.

        Args:
            url: http(s) URL; refused when invalid or (without ``allow_private``) private.
                Or a :class:`~scrapeq.engine.request.Request`: its URL, and what the job
                sends (its stored form, its body and meta count towards ``max_payload``).
            lane: lane name; default the settings' default lane (``normal``).
            delay: seconds before the job is eligible.
            max_attempts: attempt budget; default ``settings.max_attempts``.
            payload: any JSON-serialisable value, handed to the handler.
            unique: ``"pending"`` (or True): skip the job while a pending job has the same
                URL; ``"seen"``: skip it too when the URL was ever enqueued with ``"seen"``
                (or within ``recrawl_after``); ``"off"`` (or False): no de-duplication.
                Default: the ``unique`` setting. URLs are the same up to
                :func:`~scrapeq.engine.urls.canonical_url` (``canonical_*`` settings).
            expires: seconds after enqueue at which an unclaimed job dies as ``expired``.

        Raises:
            InvalidURL: the URL is refused.
            ConfigError: another argument is bad (names it).
        """
        request = None
        if isinstance(url, Request):
            request, url = url, url.url
        target = parse_target(url, allow_private=self.settings.allow_private)
        lanes = self.settings.lanes
        lane_name = lane if lane is not None else lanes.default_lane
        off_ms = lanes.offset_ms(lane_name)
        attempts = self.settings.max_attempts if max_attempts is None else max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError("max_attempts", f"must be an integer >= 1, got {attempts!r}")
        try:
            # Compact, as people and programs write JSON: a payload of max_payload bytes as
            # typed is max_payload bytes as stored and measured (default separators add one
            # space per key and item).
            payload_json = (
                None
                if payload is None
                else json.dumps(payload, allow_nan=False, separators=(",", ":"))
            )
        except (TypeError, ValueError) as exc:
            raise ConfigError("payload", f"not JSON-serialisable: {exc}") from None
        except RecursionError:  # nested past the encoder's stack: far past the bound below
            raise ConfigError("payload", "JSON nested too deeply to encode") from None
        if payload_json is not None:
            check_json_depth("payload", payload_json)
        expires_ms = _seconds_ms("expires", expires)
        if expires_ms is not None and expires_ms <= 0:
            raise ConfigError("expires", "must be > 0 seconds")
        mode = self._unique_mode(unique)
        # From the URL as given, not the job's: parse_target drops the fragment, which
        # canonical_keep_fragments may keep.
        fp64 = self._fp64(url, request) if mode == "seen" else None
        request_json = None if request is None else request.to_text()
        domain = target.domain
        if self.settings.politeness != "host":
            domain = politeness_key(domain, self.settings.politeness)
        return EnqueueSpec(
            url=target.url,
            domain=domain,
            lane=lane_name,
            off_ms=off_ms,
            delay_ms=_seconds_ms("delay", delay, allow_none=False) or 0,
            max_attempts=attempts,
            payload_json=payload_json,
            expires_ms=expires_ms,
            # a request's fingerprint is not its URL's: always carried (_with_fingerprint
            # knows only URLs); the script takes it only when it would take a URL's
            fingerprint=self._fingerprint(url, fp64, request)
            if mode != "off" or request_json is not None
            else None,
            unique=None if mode == "off" else mode,
            seen=None if fp64 is None else self._seen.arg(fp64),
            request_json=request_json,
        )

    def _fp64(self, url: str, request: Request | None) -> int:
        """The 64-bit fingerprint of what a job sends: its URL's for a plain GET."""
        if request is None:
            return fingerprint64(url, **self._canonical)
        return request_fingerprint64(url, request.method, request.body, **self._canonical)

    def _fingerprint(self, url: str, fp64: int | None, request: Request | None) -> str:
        """The request's fingerprint; from its 64-bit form (the same 8 bytes in hex)."""
        if fp64 is None:
            if request is None or request.plain:
                return fingerprint(url, **self._canonical)
            fp64 = self._fp64(url, request)
        return format(fp64 & 0xFFFF_FFFF_FFFF_FFFF, "016x")

    def _unique_mode(self, unique: bool | str | None) -> str:
        if unique is None:
            return self.settings.unique
        if isinstance(unique, bool):
            return "pending" if unique else "off"
        if unique not in UNIQUE_MODES:
            raise ConfigError("unique", f"expected off, pending or seen, got {unique!r}")
        return unique

    def _check_payload_sizes(self, specs: Sequence[EnqueueSpec]) -> None:
        limit = self.settings.max_payload
        for spec in specs:
            # the text is json.dumps' ASCII-only output: characters are bytes
            size = len(spec.payload_json or "") + len(spec.request_json or "")
            if size > limit:
                what = "payload" if spec.request_json is None else "payload and request"
                raise PayloadTooLarge(
                    f"{spec.url}: {what} of {size:,} bytes is over max_payload ({limit:,} bytes)"
                )

    # --- operations --------------------------------------------------------------------------

    def _op_enqueue(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        self._check_payload_sizes(specs)  # before anything is written
        results: list[EnqueueResult] = []
        for chunk in _chunks(specs, _spec_size):
            if self._fingerprint_all:
                chunk = [_with_fingerprint(s) for s in chunk]
            answers, self._fingerprint_all = yield scripts.enqueue(chunk)
            results.extend(_enqueue_result(a) for a in answers)
        return results

    def _op_claim(self, n: int) -> Op[Claimed]:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLAIM:
            raise ConfigError("n", f"claim size must be an integer in 1..{MAX_CLAIM}, got {n!r}")
        next_ms, texts = yield scripts.claim(n)
        jobs = [Job.from_json(t) for t in texts]
        return Claimed(jobs, None if next_ms < 0 else next_ms / 1000)

    def _op_settle(self, items: Sequence[Settlement]) -> Op[list[str]]:
        if len(items) <= CALL_ITEMS and sum(map(_settlement_size, items)) <= CALL_BYTES:
            return (yield scripts.settle(items))  # type: ignore[no-any-return]
        out: list[str] = []
        for chunk in _chunks(items, _settlement_size):
            out.extend((yield scripts.settle(chunk)))
        return out

    def _op_settle_one(self, item: Settlement) -> Op[str]:
        (status,) = yield scripts.settle([item])
        if status == "stale":
            raise StaleLease(f"job {item.job_id}: token {item.token} no longer owns the lease")
        return str(status)

    def _op_heartbeat(
        self, jobs: Sequence[Job], lease: float | None, handling: bool = False
    ) -> Op[list[bool]]:
        lease_ms = _seconds_ms("lease", lease)
        if not jobs:
            return []
        pairs = [(j.id, j.token) for j in jobs]
        renewed: list[bool] = yield scripts.heartbeat(pairs, lease_ms, handling=handling)
        return renewed

    def _op_status(self) -> Op[dict[str, Any]]:
        # O(status_top) whatever the number of domains: counts come from counters the
        # scripts keep, per-domain detail only for the domains the script picks
        raw = yield scripts.status(self.settings.lanes.names, self.settings.status_top)
        domains = yield from self._op_domains_info(sorted(_names(raw.get("top"))))
        status = shape_status(self.name, raw, domains)
        policy = yield from self._op_eviction_policy()
        if policy not in (None, "noeviction"):
            status["alarms"].append(eviction_alarm(policy))
        return status

    def _op_eviction_policy(self) -> Op[str | None]:
        info = yield Command(("INFO", "memory"), tolerant=True)
        if not isinstance(info, dict):
            return None
        policy = info.get("maxmemory_policy")
        return None if policy is None else str(policy)

    def _op_paused_until(self) -> Op[str | None]:
        until = yield Command(("HGET", self.keys.meta, "paused_until"))
        now_ms = yield from scripts.server_ms_op(self.testing_clock_offset_ms)
        return ms_to_iso(int(until)) if until and int(until) > now_ms else None

    def _op_domain_names(self) -> Op[list[str]]:
        return (yield from scripts.registry_names_op())

    def _op_domain_known(self, domain: str) -> Op[bool]:
        k = self.keys
        found = yield Command(("HEXISTS", k.registry(registry_bucket(domain)), domain))
        if int(found):
            return True
        # a queue written before the registry had buckets, not migrated yet
        return bool(int((yield Command(("SISMEMBER", k.domains, domain)))))

    def _op_domains_info(self, domains: Sequence[str] | None) -> Op[list[dict[str, Any]]]:
        if domains is None:
            domains = yield from scripts.registry_names_op()
        out: list[dict[str, Any]] = []
        for start in range(0, len(domains), _PAGE):
            out.extend((yield scripts.domain_info(domains[start : start + _PAGE])))
        return out

    def _op_dead_letters(self, domain: str | None, limit: int) -> Op[list[Job]]:
        key = self.keys.dead if domain is None else self.keys.domain_dead(domain)
        ids = yield Command(("ZREVRANGE", key, 0, max(limit, 1) - 1))
        if not ids:
            return []
        texts = yield Command(("MGET", *[self.keys.job(i) for i in ids]))
        return [_dead_job(i, t) for i, t in zip(ids, texts, strict=True) if t is not None]

    def _op_dead_count(self, domain: str | None) -> Op[int]:
        key = self.keys.dead if domain is None else self.keys.domain_dead(domain)
        return int((yield Command(("ZCARD", key))))

    def _op_job_info(self, job_id: str) -> Op[JobInfo | None]:
        place: JobPlace = yield scripts.job_info(job_id)
        if place.place == "unknown" or place.text is None:
            return None
        return _job_info(job_id, place)

    def _op_cancel(
        self, ids: Sequence[str] | None, domain: str | None, force: bool
    ) -> Op[CancelResult]:
        if (ids is None) == (domain is None):
            raise ConfigError("cancel", "choose exactly one of ids or domain")
        if domain is not None:
            if force:
                why = "applies to ids only: a domain's jobs in flight are left to finish"
                raise ConfigError("force", why)
            return (yield from self._op_cancel_domain(domain))
        assert ids is not None
        cancelled = 0
        refused: dict[str, list[str]] = {k: [] for k in _REFUSALS}
        for start in range(0, len(ids), CALL_ITEMS):
            chunk = ids[start : start + CALL_ITEMS]
            answers = yield scripts.cancel_ids(chunk, force)
            for job_id, answer in zip(chunk, answers, strict=True):
                if answer == "cancelled":
                    cancelled += 1
                else:
                    refused[answer].append(job_id)
        r = refused
        return CancelResult(
            cancelled, r["inflight"], r["dead"], r["done"], r["unknown"], r["corrupt"]
        )

    def _op_cancel_domain(self, domain: str) -> Op[CancelResult]:
        cancelled, cursor, passes = 0, SCAN_START, 1
        while True:
            got = yield scripts.cancel_domain(domain, cursor, CANCEL_SLICE)
            cancelled += got.cancelled
            cursor = got.cursor
            if got.scan_end and got.ready_left == 0:
                if got.delayed_left <= 0 or passes >= CANCEL_DELAYED_PASSES:
                    return CancelResult(cancelled, left_inflight=got.inflight)
                passes, cursor = passes + 1, SCAN_START

    def _op_known_queues(self, max_calls: int) -> Op[KnownQueues | None]:
        found: set[str] = set()
        cursor: int | str = 0
        for _ in range(max_calls):
            scan = ("SCAN", cursor, "MATCH", QUEUE_SCAN_PATTERN, "COUNT", 1000)
            reply = yield Command(scan, tolerant=True)
            if reply is None:  # an ACL user without SCAN
                return None
            # On a cluster, the cursor is every primary's (see _cluster_scan_all): opaque.
            cursor, batch = reply[0], reply[1]
            found.update(n for n in map(queue_of_marker, map(str, batch)) if n is not None)
            if str(cursor) == "0":
                return KnownQueues(sorted(found), True)
        return KnownQueues(sorted(found), False)

    def _op_clear(self) -> Op[int]:
        deleted = 0
        for _ in range(CLEAR_PASSES):
            cursor = "0"
            while True:
                cursor, n = yield scripts.clear(cursor, CLEAR_COUNT)
                deleted += n
                if cursor == "0":
                    break
            # the markers last: a clear cut short leaves the queue listed, to clear again
            deleted += (yield scripts.clear(markers=True))[1]
            if not (yield from self._op_exists()):
                break
        return deleted

    def _op_renew(self) -> Op[scripts.Renewed]:
        done, cursor = scripts.Renewed(), "0"
        while True:
            step: scripts.Renewed
            cursor, step = yield scripts.renew(cursor, CLEAR_COUNT)
            done = done + step
            if cursor == "0":
                return done

    def _op_counts(self) -> Op[dict[str, int]]:
        raw = yield scripts.status(self.settings.lanes.names)
        return shape_counts(raw)

    def _op_get_job(self, job_id: str) -> Op[Job | None]:
        text = yield Command(("GET", self.keys.job(job_id)))
        return None if text is None else _dead_job(job_id, text)

    def _op_replay(
        self, ids: Sequence[str] | None, domain: str | None, everything: bool, reset: bool
    ) -> Op[ReplayResult]:
        chosen = [ids is not None, domain is not None, everything]
        if sum(chosen) != 1:
            raise ConfigError("replay", "choose exactly one of ids, domain or all")
        if ids is not None:
            answer = yield scripts.replay("ids", ids=list(ids), reset=reset)
            return ReplayResult(answer.moved, answer.missing, answer.duplicates)
        mode = "domain" if domain is not None else "all"
        moved, offset, duplicates = 0, 0, []
        while True:
            answer = yield scripts.replay(mode, domain=domain, reset=reset, offset=offset)
            moved += answer.moved
            offset += answer.skipped
            duplicates += answer.duplicates
            if answer.remaining <= 0 or (answer.moved == 0 and answer.skipped == 0):
                return ReplayResult(moved, [], duplicates)

    def _op_purge(self, older_than: float | None, domain: str | None) -> Op[int]:
        older_ms = _seconds_ms("older_than", older_than)
        total = 0
        while True:
            purged: int
            remaining: int
            purged, remaining = yield scripts.purge(older_ms, domain)
            total += purged
            if remaining <= 0 or purged == 0:
                return total

    def _op_breaker(self, domain: str, action: str, cooldown: float | None) -> Op[str]:
        cool_ms = _seconds_ms("cooldown", cooldown)
        return str((yield scripts.breaker(domain, action, cool_ms)))

    def _op_domain_set(
        self, domain: str, delay: float | None, concurrency: int | str | None
    ) -> Op[dict[str, Any]]:
        delay_ms = _seconds_ms("delay", delay)
        if concurrency is not None and concurrency != "auto":
            check_count("concurrency", concurrency)
        got_delay, got_conc, adaptive = yield scripts.domain_set(domain, delay_ms, concurrency)
        return {
            "domain": domain,
            "delay": got_delay / 1000,
            "concurrency": got_conc,
            "adaptive": adaptive,
        }

    def _op_audit(self, repair: bool) -> Op[AuditReport]:
        s = self.settings
        keep_ms = round(s.keep_done * 1000)
        return audit_op(self.keys, list(s.lanes.names), _audit_conc(s), repair, keep_ms)

    def _op_once(self, name: str, holder: str, op: str, lease: float) -> Op[OnceFlag]:
        if not isinstance(name, str) or not _ONCE_NAME.fullmatch(name):
            raise ConfigError("once", f"a flag name is letters, digits, _ - . or :, got {name!r}")
        if op not in ONCE_OPS:
            raise ConfigError("once", f"op is one of {', '.join(ONCE_OPS)}, got {op!r}")
        lease_ms = _seconds_ms("lease", lease, allow_none=False) or 0
        answer: OnceFlag = yield scripts.once(name, holder, op=op, lease_ms=lease_ms)
        return answer

    def _op_exists(self) -> Op[bool]:
        k = self.keys
        found = yield Command(("EXISTS", k.meta, k.domain_count, k.domains, k.stats))
        return bool(found)

    def _op_events(self, count: int) -> Op[list[dict[str, Any]]]:
        entries = yield Command(("XREVRANGE", self.keys.events, "+", "-", "COUNT", count))
        return [_event(entry_id, fields) for entry_id, fields in entries]

    def _op_events_after(self, after: str, count: int) -> Op[list[dict[str, str]]]:
        reply = yield Command(("XREAD", "COUNT", count, "STREAMS", self.keys.events, after))
        return _stream_entries(reply)

    def _op_history(self, minutes: int) -> Op[dict[str, Any]]:
        if not 1 <= minutes <= HISTORY_MINUTES:
            raise ConfigError("minutes", f"must be in 1..{HISTORY_MINUTES}, got {minutes}")
        now_ms = yield from scripts.server_ms_op(self.testing_clock_offset_ms)
        last = now_ms // 60_000
        first = last - minutes + 1
        hashes: dict[int, dict[str, str]] = {}
        for hour in range(first // 60, last // 60 + 1):
            hashes[hour] = dict((yield Command(("HGETALL", self.keys.history(hour)))))
        return shape_history(hashes, first, minutes, now_ms)

    def _op_stats(self) -> Op[dict[str, int]]:
        flat = yield Command(("HGETALL", self.keys.stats))
        return {str(k): int(v) for k, v in dict(flat).items()}

    def _op_figures(self) -> Op[dict[str, int]]:
        return shape_figures((yield scripts.status(self.settings.lanes.names)))

    def _op_log_leader(
        self, worker_id: str, lease: float, cursor_ttl: float, cursor: str | None, release: bool
    ) -> Op[scripts.LeaderAnswer]:
        ttl_ms, keep_ms = _seconds_ms("lease", lease), _seconds_ms("cursor_ttl", cursor_ttl)
        call = scripts.log_leader(worker_id, ttl_ms or 1, keep_ms or 1, cursor=cursor,
                                  release=release)  # fmt: skip
        answer: scripts.LeaderAnswer = yield call
        return answer

    # --- settlements ---------------------------------------------------------------------------

    def done(
        self,
        job: Job,
        *,
        domain_failed: bool = False,
        follow: Sequence[EnqueueSpec] = (),
        final_url: str | None = None,
    ) -> Settlement:
        """A finished job; ``domain_failed`` charges the domain (a slow call); ``follow``:
        job specs (see :meth:`prepare`) enqueued with the settlement, atomically;
        ``final_url``: where the fetch ended after redirects, which joins the seen-set in the
        same call when the queue has one (a link to it is then skipped as seen)."""
        return Settlement(
            job.id,
            job.token,
            "done",
            domain_failed=domain_failed,
            follow=tuple(follow),
            final=self._final_spec(job, final_url),
        )

    def _final_spec(self, job: Job, url: str | None) -> EnqueueSpec | None:
        """The spec that marks ``url`` seen (None: no URL, the job's own, or one refused)."""
        if url is None or url == job.url or job.request_text is not None:
            return None  # a request's target is not marked seen as a plain GET
        try:
            return self.prepare(url, unique="seen")
        except (InvalidURL, ConfigError):
            return None

    def retrying(
        self,
        job: Job,
        *,
        kind: str = "error",
        message: str = "",
        delay: float | None = None,
        retry_after: float | None = None,
        domain_failed: bool | None = True,
    ) -> Settlement:
        """A failed attempt to retry after ``delay`` seconds (default: full-jitter backoff)."""
        if delay is None:
            s = self.settings
            delay = full_jitter(max(job.attempts - 1, 0), base=s.backoff_base, cap=s.backoff_cap)
        return Settlement(
            job.id,
            job.token,
            "retry",
            domain_failed=domain_failed,
            delay_ms=_seconds_ms("delay", delay) or 0,
            retry_after_ms=_seconds_ms("retry_after", retry_after) or 0,
            kind=kind,
            message=message,
        )

    def throttling(
        self,
        job: Job,
        retry_after: float | None,
        *,
        kind: str = "http_429",
        message: str = "",
        domain_failed: bool | None = True,
    ) -> Settlement:
        """A throttled attempt (429, 503 + Retry-After): the domain parks, no attempt spent."""
        wait = retry_after if retry_after is not None else self.settings.backoff_base
        return Settlement(
            job.id,
            job.token,
            "throttle",
            domain_failed=domain_failed,
            delay_ms=_seconds_ms("retry_after", wait) or 0,
            retry_after_ms=_seconds_ms("retry_after", retry_after) or 0,
            kind=kind,
            message=message,
        )

    def failing(
        self, job: Job, reason: str, message: str = "", *, domain_failed: bool | None = None
    ) -> Settlement:
        """A permanent failure: the job goes to the dead letters with ``reason``."""
        return Settlement(
            job.id,
            job.token,
            "fail",
            domain_failed=domain_failed,
            reason=reason,
            kind=reason,
            message=message,
        )

    def releasing(
        self,
        job: Job,
        *,
        delay: float | None = None,
        kind: str = "released",
        message: str = "",
        shutdown: bool = False,
    ) -> Settlement:
        """Give a job back without spending an attempt or blaming its domain.

        A release is for our own faults (proxy, sink, a bug of ours): it spends one of the
        job's ``max_releases`` and is kept in its error history as ``kind``/``message``; past
        the budget the job dies ``max_releases``. It waits ``delay`` seconds, by default a
        full-jitter backoff over the releases already taken,
        ``uniform(0, min(backoff_cap, backoff_base * 2**releases))``.

        ``shutdown=True`` (a worker stopping) spends and records nothing and, without a
        ``delay``, the job is ready again at once.
        """
        if shutdown:
            delay_ms = _seconds_ms("delay", delay) or 0
            return Settlement(job.id, job.token, "release", delay_ms=delay_ms, shutdown=True)
        if delay is None:
            s = self.settings
            delay = full_jitter(job.releases, base=s.backoff_base, cap=s.backoff_cap)
        return Settlement(
            job.id,
            job.token,
            "release",
            delay_ms=_seconds_ms("delay", delay) or 0,
            kind=kind,
            message=message,
        )


# --- partitions ------------------------------------------------------------------------------

#: Seconds a partition that had nothing to claim is left alone, at most: its answer said when
#: something is next due there, but another producer may enqueue to it meanwhile.
PARTITION_RECHECK = 1.0


def partition_of(domain: str, partitions: int) -> int:
    """The partition of a domain (its politeness key): a stable hash (CRC-32) of its name."""
    if partitions <= 1:
        return 0
    return zlib.crc32(domain.encode("utf-8")) % partitions


def partition_of_id(job_id: str, partitions: int) -> int:
    """The partition a job id names (ids of a partitioned queue end in ``.<i>``); 0 else."""
    _, dot, tail = job_id.rpartition(".")
    if not dot or not tail.isdigit() or int(tail) >= partitions:
        return 0
    return int(tail)


def _stream_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = str(entry_id).partition("-")
    return int(ms or 0), int(seq or 0)


def _merge_status(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``status-1.lua`` answer for the whole queue from its partitions' answers."""
    out: dict[str, Any] = {"stats": {}, "lanes": {}, "lane_order": [], "retired": []}
    for name in ("ready", "delayed", "inflight", "dead", "domains", "open_breakers"):
        out[name] = sum(int(r.get(name) or 0) for r in raws)
    out["retired_domains"] = sum(int(r.get("retired_domains") or 0) for r in raws)
    # each partition picked its own domains worth a look: their union, round-robin so that
    # every partition's first choices come first when the caller cuts it to status_top
    picks = [_names(r.get("top")) for r in raws]
    union: list[str] = []
    for rank in range(max((len(p) for p in picks), default=0)):
        union += [p[rank] for p in picks if rank < len(p) and p[rank] not in union]
    out["top"] = union
    out["now"] = max(int(r.get("now") or 0) for r in raws)
    for raw in raws:
        for field_name, value in (raw.get("stats") or {}).items():
            out["stats"][field_name] = out["stats"].get(field_name, 0) + value
        for lane in raw.get("lane_order") or []:
            if lane not in out["lane_order"]:
                out["lane_order"].append(lane)
        for lane, fig in (raw.get("lanes") or {}).items():
            have = out["lanes"].setdefault(lane, {"ready": 0, "delayed": 0, "oldest_ready_ms": 0})
            have["ready"] += int(fig["ready"])
            have["delayed"] += int(fig["delayed"])
            have["oldest_ready_ms"] = max(have["oldest_ready_ms"], fig["oldest_ready_ms"])
        out["retired"] += list(raw.get("retired") or [])
    paused = [r for r in raws if r.get("paused_until")]
    latest = max(paused, key=lambda r: int(r["paused_until"]), default=None)
    out["paused_until"] = None if latest is None else latest["paused_until"]
    out["pause_reason"] = None if latest is None else latest.get("pause_reason")
    return out


def _retarget(step: Step, base: str, prefix: str) -> Step:
    """``step`` moved from the queue's own keys (``base``) to a partition's (``prefix``)."""
    if isinstance(step, Call):
        return step if step.prefix is not None else step.on(prefix)
    if isinstance(step, Command):
        args = tuple(
            prefix + a[len(base) :] if isinstance(a, str) and a.startswith(base) else a
            for a in step.args
        )
        return Command(args, step.tolerant)
    return Many(tuple(_retarget(s, base, prefix) for s in step.steps))  # type: ignore[misc]


class _PartitionedCore(_QueueCore):
    """The operations of a queue of ``partitions = P`` hash tags.

    With P = 1 every operation is :class:`_QueueCore`'s, on the keys ``sq:{Q}:``. With P > 1
    a domain lives in partition ``crc32(domain) % P`` (keys ``sq:{Q:i}:``) and a job's id ends
    in ``.<i>``: an operation on a domain or a job runs the single-partition operation on its
    partition (its steps moved there, :func:`_retarget`); one on the whole queue runs on
    every partition (:class:`Many`: concurrently on the async queue) and sums or merges.
    """

    def __init__(self, name: str | None = None, *, settings: Settings | None = None) -> None:
        super().__init__(name, settings=settings)
        self.partitions = self.settings.partitions
        self.parts = (
            [Keys(self.name, i) for i in range(self.partitions)]
            if self.partitions > 1
            else [self.keys]
        )
        self._parts_checked = False
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
        base = self.keys.prefix
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

    def _op_check_parts(self) -> Op[None]:
        """Once per queue object, before its first write: the queue's stored number of
        partitions agrees with the settings (``lua/partitions-1.lua``)."""
        if self._parts_checked:
            return
        yield scripts.partitions(self.partitions)
        self._parts_checked = True

    def _op_check_parts_read(self) -> Op[None]:
        """The read-only twin of :meth:`_op_check_parts`, for the queue-wide reads (status,
        counts, figures): settings with another number of partitions would read none of
        the queue's jobs and show it empty."""
        if self._parts_checked:
            return
        stored = yield Command(("HGET", self.keys.meta, "parts"))
        if int(stored or 1) != self.partitions:
            raise scripts.map_error(f"SQ_PARTITIONS {int(stored or 1)} {self.partitions}")
        self._parts_checked = True

    def _many(self, steps: Sequence[Step]) -> Op[list[Any]]:
        if not steps:
            return []
        answers: list[Any] = yield Many(tuple(steps))  # type: ignore[arg-type]
        return answers

    # --- writes ----------------------------------------------------------------------------

    def _op_enqueue(self, specs: Sequence[EnqueueSpec]) -> Op[list[EnqueueResult]]:
        yield from self._op_check_parts()
        if self.partitions == 1:
            done = yield from super()._op_enqueue(specs)
            yield from self._op_tell_seen_buckets(specs)
            return done
        self._check_payload_sizes(specs)
        groups: dict[int, list[int]] = {}
        for index, spec in enumerate(specs):
            groups.setdefault(self._part(spec.domain), []).append(index)
        calls: list[Step] = []
        owners: list[list[int]] = []
        for part, indexes in sorted(groups.items()):
            chosen = [specs[i] for i in indexes]
            if self._fingerprint_all:
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
        self._fingerprint_all = any(hold_all for _, hold_all in replies)
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
        warn_if_resized(self._seen, (yield Command(("HGET", keys.meta, "seen"))))

    def _op_claim(self, n: int) -> Op[Claimed]:
        yield from self._op_check_parts()
        if self.partitions == 1:
            return (yield from super()._op_claim(n))
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

    def _op_settle(self, items: Sequence[Settlement]) -> Op[list[str]]:
        if self.partitions == 1:
            return (yield from super()._op_settle(items))
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
        out = [""] * len(items)
        replies = yield from self._many(calls)
        self._wake(groups)  # a settled job frees its domain's slot; a retry is due there
        for answers, indexes in zip(replies, owners, strict=True):
            for index, answer in zip(indexes, answers, strict=True):
                out[index] = answer
        return out

    def _op_settle_one(self, item: Settlement) -> Op[str]:
        if self.partitions == 1:
            return (yield from super()._op_settle_one(item))
        (status,) = yield from self._op_settle([item])
        if status == "stale":
            raise StaleLease(f"job {item.job_id}: token {item.token} no longer owns the lease")
        return status

    def _op_heartbeat(
        self, jobs: Sequence[Job], lease: float | None, handling: bool = False
    ) -> Op[list[bool]]:
        if self.partitions == 1:
            return (yield from super()._op_heartbeat(jobs, lease, handling))
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
        if self.partitions == 1:
            return (yield scripts.reap())  # type: ignore[no-any-return]
        answers = yield from self._many([scripts.reap().on(k.prefix) for k in self.parts])
        return (
            sum(a[0] for a in answers),
            sum(a[1] for a in answers),
            sum(a[2] for a in answers),
        )

    def _op_breaker(self, domain: str, action: str, cooldown: float | None) -> Op[str]:
        return (
            yield from self._on(super()._op_breaker(domain, action, cooldown), self._part(domain))
        )

    def _op_domain_set(
        self, domain: str, delay: float | None, concurrency: int | str | None
    ) -> Op[dict[str, Any]]:
        op = super()._op_domain_set(domain, delay, concurrency)
        return (yield from self._on(op, self._part(domain)))

    def _op_cancel(
        self, ids: Sequence[str] | None, domain: str | None, force: bool
    ) -> Op[CancelResult]:
        if self.partitions == 1 or (ids is None) == (domain is None):
            return (yield from super()._op_cancel(ids, domain, force))
        if domain is not None:
            return (
                yield from self._on(super()._op_cancel(None, domain, force), self._part(domain))
            )
        assert ids is not None
        merged = CancelResult(0)
        for part, chosen in _by_part(ids, self._part_of_id):
            got = yield from self._on(super()._op_cancel(chosen, None, force), part)
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
        chosen = [ids is not None, domain is not None, everything]
        if self.partitions == 1 or sum(chosen) != 1:
            return (yield from super()._op_replay(ids, domain, everything, reset))
        if domain is not None:
            op = super()._op_replay(None, domain, False, reset)
            return (yield from self._on(op, self._part(domain)))
        results: list[ReplayResult] = []
        if ids is not None:
            for part, some in _by_part(ids, self._part_of_id):
                op = super()._op_replay(some, None, False, reset)
                results.append((yield from self._on(op, part)))
        else:
            results = yield from self._on_all(
                lambda: _QueueCore._op_replay(self, None, None, True, reset)
            )
        return ReplayResult(
            sum(r.moved for r in results),
            [i for r in results for i in r.missing],
            [i for r in results for i in r.duplicates],
        )

    def _op_purge(self, older_than: float | None, domain: str | None) -> Op[int]:
        if domain is not None:
            return (yield from self._on(super()._op_purge(older_than, domain), self._part(domain)))
        if self.partitions == 1:
            return (yield from super()._op_purge(older_than, domain))
        return sum((yield from self._on_all(lambda: _QueueCore._op_purge(self, older_than, None))))

    def _op_clear(self) -> Op[int]:
        # The partitions the queue has (its home says), whatever these settings say: a
        # clear with the wrong number would leave the others' keys behind.
        stored = yield Command(("HGET", self.keys.meta, "parts"))
        count = int(stored) if stored else 1
        if count == 1 and self.partitions == 1:
            return (yield from super()._op_clear())
        deleted = 0
        for part in range(count if count > 1 else 0):
            prefix = Keys(self.name, part).prefix
            deleted += yield from self._on_prefix(_QueueCore._op_clear(self), prefix)
        # the home last (its meta holds the number of partitions): a clear cut short leaves it
        deleted += yield from _QueueCore._op_clear(self)
        self._parts_checked = False
        return deleted

    def _op_renew(self) -> Op[scripts.Renewed]:
        stored = yield Command(("HGET", self.keys.meta, "parts"))  # as _op_clear: all of them
        count = int(stored) if stored else 1
        done = scripts.Renewed()
        for part in range(count if count > 1 else 0):
            prefix = Keys(self.name, part).prefix
            done += yield from self._on_prefix(_QueueCore._op_renew(self), prefix)
        return done + (yield from _QueueCore._op_renew(self))

    def _op_log_leader(
        self, worker_id: str, lease: float, cursor_ttl: float, cursor: str | None, release: bool
    ) -> Op[scripts.LeaderAnswer]:
        op = super()._op_log_leader(worker_id, lease, cursor_ttl, cursor, release)
        return (yield from self._on(op, 0))

    # --- reads -----------------------------------------------------------------------------

    def _op_job_info(self, job_id: str) -> Op[JobInfo | None]:
        return (yield from self._on(super()._op_job_info(job_id), self._part_of_id(job_id)))

    def _op_get_job(self, job_id: str) -> Op[Job | None]:
        return (yield from self._on(super()._op_get_job(job_id), self._part_of_id(job_id)))

    def _op_status_raw(self, top: int = 0) -> Op[dict[str, Any]]:
        yield from self._op_check_parts_read()
        lanes = self.settings.lanes.names
        if self.partitions == 1:
            raw: dict[str, Any] = yield scripts.status(lanes, top)
            return raw
        raws = yield from self._many([scripts.status(lanes, top).on(k.prefix) for k in self.parts])
        return _merge_status(raws)

    def _op_status(self) -> Op[dict[str, Any]]:
        if self.partitions == 1:
            yield from self._op_check_parts_read()
            return (yield from super()._op_status())
        top = self.settings.status_top
        raw = yield from self._op_status_raw(top)
        domains = yield from self._op_domains_info(sorted(_names(raw.get("top"))[:top]))
        status = shape_status(self.name, raw, domains)
        policy = yield from self._op_eviction_policy()
        if policy not in (None, "noeviction"):
            status["alarms"].append(eviction_alarm(policy))
        return status

    def _op_counts(self) -> Op[dict[str, int]]:
        if self.partitions == 1:
            yield from self._op_check_parts_read()
            return (yield from super()._op_counts())
        return shape_counts((yield from self._op_status_raw()))

    def _op_figures(self) -> Op[dict[str, int]]:
        if self.partitions == 1:
            yield from self._op_check_parts_read()
            return (yield from super()._op_figures())
        return shape_figures((yield from self._op_status_raw()))

    def _op_domain_known(self, domain: str) -> Op[bool]:
        if self.partitions == 1:
            return (yield from super()._op_domain_known(domain))
        return (yield from self._on(super()._op_domain_known(domain), self._part(domain)))

    def _op_domain_names(self) -> Op[list[str]]:
        if self.partitions == 1:
            return (yield from super()._op_domain_names())
        names: set[str] = set()
        for part in range(self.partitions):
            names.update((yield from self._on(scripts.registry_names_op(), part)))
        return sorted(names)

    def _op_domains_info(self, domains: Sequence[str] | None) -> Op[list[dict[str, Any]]]:
        if self.partitions == 1:
            return (yield from super()._op_domains_info(domains))
        if domains is None:
            domains = yield from self._op_domain_names()
        found: dict[str, dict[str, Any]] = {}
        for part, chosen in _by_part(domains, self._part):
            for info in (yield from self._on(super()._op_domains_info(chosen), part)):
                found[str(info.get("domain"))] = info
        return [found[d] for d in domains if d in found]

    def _op_recent_errors(self, domain: str) -> Op[list[dict[str, Any]]]:
        op = listing.op_recent_errors(self.keys, domain)
        return (yield from self._on(op, self._part(domain)))

    def _op_list_jobs(self, state: str, domain: str | None, limit: int) -> Op[JobListing]:
        if state not in listing.JOB_STATES:
            raise ConfigError("state", f"expected one of {', '.join(listing.JOB_STATES)}")
        check_count("limit", limit)

        def make() -> Op[JobListing]:
            offset = self.testing_clock_offset_ms
            return listing.op_job_list(self.keys, state, domain, limit, offset)

        if domain is not None:
            return (yield from self._on(make(), self._part(domain)))
        return listing.merge_listings((yield from self._on_all(make)), limit)

    def _op_dead_letters(self, domain: str | None, limit: int) -> Op[list[Job]]:
        if self.partitions == 1 or domain is not None:
            part = 0 if domain is None else self._part(domain)
            return (yield from self._on(super()._op_dead_letters(domain, limit), part))
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
            return (yield from self._on(super()._op_dead_count(domain), part))
        counts = yield from self._many([Command(("ZCARD", k.dead)) for k in self.parts])
        return sum(int(c) for c in counts)

    def _op_audit(self, repair: bool) -> Op[AuditReport]:
        if self.partitions == 1:
            return (yield from super()._op_audit(repair))
        s = self.settings
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
        return AuditReport(self.name, problems, checked, sum(r.suspected for r in reports))

    def _op_exists(self) -> Op[bool]:
        if self.partitions == 1:
            return (yield from super()._op_exists())
        steps: list[Step] = [Command(("EXISTS", self.keys.meta))]
        steps += [
            Command(("EXISTS", k.meta, k.domain_count, k.domains, k.stats)) for k in self.parts
        ]
        return any(int(x) for x in (yield from self._many(steps)))

    def _op_events(self, count: int) -> Op[list[dict[str, Any]]]:
        if self.partitions == 1:
            return (yield from super()._op_events(count))
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
            return (yield from super()._op_events_after(after, count))
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


def _keep_follow(item: Settlement, part: int, part_of: Callable[[str], int]) -> Settlement:
    """The settlement with only the follow-ups of its own partition (and its final URL only
    when that partition's seen-set holds it: a redirect elsewhere is not marked)."""
    if item.final is not None and part_of(item.final.domain) != part:
        item = dataclasses.replace(item, final=None)
    if not item.follow:
        return item
    own = tuple(s for s in item.follow if part_of(s.domain) == part)
    return item if len(own) == len(item.follow) else dataclasses.replace(item, follow=own)


def _by_part(names: Sequence[str], part_of: Callable[[str], int]) -> list[tuple[int, list[str]]]:
    """``names`` grouped by partition (in the order given within each)."""
    groups: dict[int, list[str]] = {}
    for name in names:
        groups.setdefault(part_of(name), []).append(name)
    return sorted(groups.items())


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    """A WITHSCORES reply (flat list, or pairs under RESP3) as (member, score) pairs."""
    if reply and isinstance(reply[0], list | tuple):
        return [(m, s) for m, s in reply]
    return list(zip(reply[::2], reply[1::2], strict=True))


def _spec_size(spec: EnqueueSpec) -> int:
    """About the bytes a job adds to an enqueue call's arguments."""
    return 200 + len(spec.url) + len(spec.payload_json or "") + len(spec.request_json or "")


def _settlement_size(item: Settlement) -> int:
    """About the bytes a settlement adds to a settle call's arguments."""
    size = 100 + len(item.message or "") + len(item.kind or "") + len(item.reason or "")
    return size + sum(map(_spec_size, item.follow)) if item.follow else size


def _chunks(items: Sequence[T], size: Callable[[T], int]) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most CALL_ITEMS items and about CALL_BYTES (one item at least)."""
    start, used = 0, 0
    for i, item in enumerate(items):
        n = size(item)
        if i > start and (i - start >= CALL_ITEMS or used + n > CALL_BYTES):
            yield items[start:i]
            start, used = i, 0
        used += n
    if start < len(items):
        yield items[start:]


def _with_fingerprint(spec: EnqueueSpec) -> EnqueueSpec:
    """The spec with its fingerprint, so a job without uniqueness can take it when free."""
    if spec.fingerprint is not None:
        return spec
    return dataclasses.replace(spec, fingerprint=fingerprint(spec.url))


def _enqueue_result(answer: str) -> EnqueueResult:
    if answer.startswith("dup:"):
        return EnqueueResult(answer[4:], "duplicate")
    if answer == "seen":
        return EnqueueResult("", "seen")
    if answer.startswith("dead:"):
        return EnqueueResult(answer[5:], "dead")
    if answer == "limit":
        return EnqueueResult("", "limit")
    return EnqueueResult(answer, "added")


def _dead_job(job_id: str, text: str) -> Job:
    try:
        return Job.from_json(text, job_id)
    except (ValueError, KeyError, TypeError):
        return Job(id=job_id, url="", domain="", lane="", attempts=0, max_attempts=0, raw=text)


def _job_info(job_id: str, place: JobPlace) -> JobInfo:
    text = place.text or ""
    data: Any = None
    try:
        data = expand_stored(json.loads(text), job_id)
        job = Job.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError):
        data, job = {}, _dead_job(job_id, text)
    state = place.place
    done = state == "done"
    return JobInfo(
        job,
        state,
        place.now_ms,
        position=place.position,
        depth=place.depth,
        eligible_ms=place.score if state == "delayed" else (job.eligible_ms or None),
        lease_deadline_ms=place.score if state == "inflight" else None,
        done_ms=data.get("done_at") if done else None,
        kept_until_ms=place.now_ms + place.ttl_ms if done and place.ttl_ms is not None else None,
    )


def _event(entry_id: str, fields: Any) -> dict[str, Any]:
    data = fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2], strict=True))
    at = data.get("at")
    return {
        "id": entry_id,
        "kind": data.get("kind", ""),
        "domain": data.get("domain", ""),
        "message": data.get("message", ""),
        "at": ms_to_iso(float(at)) if at else None,
    }


def _stream_entries(reply: Any) -> list[dict[str, str]]:
    """An XREAD reply of one stream (RESP2 list or RESP3 map) as dicts: id, then every field."""
    streams = list(reply.values()) if isinstance(reply, dict) else [s[1] for s in reply or []]
    out: list[dict[str, str]] = []
    for entries in streams:
        for entry_id, fields in entries:
            pairs = zip(fields[::2], fields[1::2], strict=True) if isinstance(fields, list) else ()
            data = fields if isinstance(fields, dict) else dict(pairs)
            out.append({"id": str(entry_id), **{str(k): str(v) for k, v in data.items()}})
    return out


def _audit_conc(s: Settings) -> int:
    """The default limit the audit judges a domain by: with ``auto``, the lower bound, so a
    domain with leases counts as at its cap (the script checks each suspicion again with the
    domain's own limit)."""
    conc = s.domain_concurrency
    return conc if isinstance(conc, int) else s.domain_concurrency_min


def _names(value: Any) -> list[str]:
    """A list of names from a script's JSON (an empty Lua table encodes as ``{}``)."""
    return [str(v) for v in value] if isinstance(value, list) else []


def _op_host_group(host: str, address: str) -> Op[str]:
    return (yield scripts.host_group(host, f"ip:{address}"))  # type: ignore[no-any-return]


def _url_or_embedded(url: str | None, settings: Settings) -> str:
    """``url``, or for None the embedded server's (started if needed), as the CLI finds it."""
    return url if url is not None else resolve_url(None, settings.data_dir)


def _wrap_connection_error(exc: Exception) -> RedisUnavailable:
    return RedisUnavailable(f"Redis connection failed: {exc}")


#: Redis's smallest ``proto-max-bulk-len``: a call this large may be refused for its size.
_MIN_BULK_LIMIT = 1024 * 1024
_BULK_LIMIT_QUERY = ("CONFIG", "GET", "proto-max-bulk-len")


def _maybe_oversized(step: Step) -> bool:
    return isinstance(step, Call) and len(step.args) >= _MIN_BULK_LIMIT // 4


def _oversized(step: Step, limit_reply: Any) -> PayloadTooLarge | None:
    """When Redis cut the connection on ``step``: the error if its argument was over the
    server's ``proto-max-bulk-len`` (``limit_reply``: CONFIG GET's answer, None if refused;
    Redis then answers the error, or resets the connection while the call is still sent)."""
    assert isinstance(step, Call)
    limit = 512 * 1024 * 1024
    if isinstance(limit_reply, dict) and str(limit_reply.get("proto-max-bulk-len", "")).isdigit():
        limit = int(limit_reply["proto-max-bulk-len"])
    size = len(step.args.encode("utf-8", "replace"))
    if size <= limit:
        return None
    return PayloadTooLarge(
        f"payload too large: a {step.script} call of {size:,} bytes is over Redis's "
        f"proto-max-bulk-len ({limit:,} bytes)"
    )


def _moved(exc: redis.ResponseError) -> ConfigError | None:
    """A MOVED/ASK reply reaching a single-server client: the server is a cluster node."""
    if not isinstance(exc, redis.exceptions.AskError):
        return None
    return ConfigError(
        "cluster",
        f"this server is a cluster node; the queue's slot {exc.slot_id} is served by "
        f"{exc.node_addr[0]}:{exc.node_addr[1]}: set cluster = auto (or on) to follow the cluster",
    )


#: What a cluster client raises while the cluster cannot serve a slot (a failover under way,
#: a node unreachable): transient, like a lost connection.
_CLUSTER_TRANSIENT = (
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,
    redis.exceptions.TryAgainError,
)


def _cluster_unavailable(exc: Exception) -> RedisUnavailable:
    return RedisUnavailable(f"Redis Cluster cannot serve the call now: {exc or type(exc).__name__}")


#: Commands a cluster client must send to the node that owns the queue's slot: TIME (the
#: audit's clock, the one the scripts read) and SCAN of the queue's own keys (a MATCH with
#: its hash tag). A SCAN of every queue (no tag) goes to every primary.
_TAGGED_SCAN = re.compile(r"\{[^*?\[\]{}]+\}")


def _cluster_target(args: tuple[Any, ...], prefix: str) -> str | None:
    """For a cluster client: a key whose node runs the command (TIME: the queue's prefix; a
    SCAN whose MATCH has a hash tag: that tag, a partition's for a partitioned queue),
    ``"all"`` (a SCAN of every primary) or None (redis-py routes it by its keys)."""
    name = str(args[0]).upper()
    if name == "TIME":
        return prefix
    if name != "SCAN":
        return None
    pattern = next(
        (str(args[i + 1]) for i, a in enumerate(args[:-1]) if str(a).upper() == "MATCH"), ""
    )
    tag = _TAGGED_SCAN.search(pattern)
    return tag.group(0) if tag else "all"


def _split_cursor(cursor: Any, primaries: list[str]) -> dict[str, int]:
    """A cluster SCAN cursor (``node=cursor;...``, or ``0`` to start) by node name."""
    text = str(cursor)
    if text == "0":
        return dict.fromkeys(primaries, 0)
    pairs = (part.rpartition("=") for part in text.split(";") if part)
    return {name: int(value) for name, _, value in pairs}


def _join_cursor(cursors: dict[str, int]) -> str:
    return ";".join(f"{name}={c}" for name, c in cursors.items() if int(c) != 0) or "0"


class Queue(_PartitionedCore):
    """A queue over a blocking redis-py client: for producers, admin tools and tests.

    Args:
        client: a ``redis.Redis`` created with ``decode_responses=True``.
        name: queue name (overrides ``settings.queue``).
        settings: the settings in force; defaults to :class:`Settings` defaults.
    """

    def __init__(
        self, client: SyncClient, name: str | None = None, *, settings: Settings | None = None
    ) -> None:
        super().__init__(name, settings=settings)
        self.client = client
        self._cluster = isinstance(client, redis.cluster.RedisCluster)
        self._scripts = {n: client.register_script(scripts.load_source(n)) for n in scripts.SCRIPTS}

    @classmethod
    def from_url(
        cls, url: str | None, name: str | None = None, *, settings: Settings | None = None
    ) -> Queue:
        """Connect to ``url`` (``redis://``, ``rediss://``, ``unix://``), or with None to the
        embedded Redis of ``settings.data_dir``, started if it is not running: the server
        the CLI uses when no ``redis_url`` is set (``scrapeq server stop`` stops it).

        The client has scrapeq's options (:func:`scrapeq.engine.connection.sync_client`): a call
        that gets no answer fails after a socket timeout instead of waiting forever.
        """
        given = settings or Settings()
        return cls(
            sync_client(_url_or_embedded(url, given), given.cluster), name, settings=settings
        )

    def close(self) -> None:
        close_client(self.client)

    def _drive(self, op: Op[T]) -> T:
        try:
            step = next(op)
            while True:
                step = op.send(self._step(step))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    def _step(self, step: Step) -> Any:
        if isinstance(step, Many):
            return [self._step(s) for s in step.steps]
        try:
            if isinstance(step, Command):
                if self._cluster:
                    return self._cluster_command(step.args)
                return self.client.execute_command(*step.args)  # type: ignore[no-untyped-call]
            raw = self._scripts[step.script](
                keys=[step.prefix or self.keys.prefix],
                args=[self.testing_clock_offset_ms, self._config_json, step.args],
            )
        except redis.ResponseError as exc:
            moved = _moved(exc)
            if moved is not None:
                raise moved from None
            if isinstance(exc, _CLUSTER_TRANSIENT):
                raise _cluster_unavailable(exc) from exc
            if isinstance(step, Command) and step.tolerant:
                return None
            raise scripts.map_error(str(exc), getattr(step, "script", "a script")) from None
        except _CLUSTER_TRANSIENT as exc:
            raise _cluster_unavailable(exc) from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if _maybe_oversized(step):
                too_large = _oversized(step, self._step(Command(_BULK_LIMIT_QUERY, True)))
                if too_large is not None:
                    raise too_large from None
            raise _wrap_connection_error(exc) from exc
        return step.parse(raw)

    def _cluster_command(self, args: tuple[Any, ...]) -> Any:
        """Run a read on a cluster: on the queue's node, every primary, or as redis-py routes."""
        client = self.client
        assert isinstance(client, redis.cluster.RedisCluster)
        target = _cluster_target(args, self.keys.prefix)
        if target is None:
            return client.execute_command(*args)  # type: ignore[no-untyped-call]
        if target != "all":
            node = client.get_node_from_key(target)  # type: ignore[no-untyped-call]
            reply = client.execute_command(*args, target_nodes=node)  # type: ignore[no-untyped-call]
            if str(args[0]).upper() == "SCAN":
                cursors, batch = reply
                return [next(iter(cursors.values()), 0), batch]
            return reply
        names = [n.name for n in client.get_primaries()]  # type: ignore[no-untyped-call]
        after: dict[str, int] = {}
        found: list[str] = []
        for name, cursor in _split_cursor(args[1], names).items():
            node = client.get_node(node_name=name)  # type: ignore[no-untyped-call]
            if node is None:  # gone since the last call (a failover): its keys moved
                continue
            got, batch = client.execute_command("SCAN", cursor, *args[2:], target_nodes=node)  # type: ignore[no-untyped-call]
            after[name] = int(next(iter(got.values()), 0))
            found.extend(batch)
        return [_join_cursor(after), found]

    # --- public API (one line each: the operations above hold the logic) -----------------------

    def enqueue(self, url: str | Request, **options: Any) -> EnqueueResult:
        """Add one job (options as :meth:`prepare`)."""
        return self._drive(self._op_enqueue([self.prepare(url, **options)]))[0]

    def enqueue_many(
        self, urls: Iterable[str | Request | EnqueueSpec], **options: Any
    ) -> list[EnqueueResult]:
        """Add many jobs (URLs or requests); every one is validated before anything is
        written."""
        specs = [u if isinstance(u, EnqueueSpec) else self.prepare(u, **options) for u in urls]
        return self._drive(self._op_enqueue(specs))

    def claim(self, n: int = 1) -> Claimed:
        """Claim up to ``n`` jobs (most urgent first, honouring every domain's limits)."""
        return self._drive(self._op_claim(n))

    def settle_many(self, items: Sequence[Settlement]) -> list[str]:
        """Settle many jobs in one call; a stale token answers ``stale`` for its item."""
        return self._drive(self._op_settle(items))

    def ack(self, job: Job, *, domain_failed: bool = False) -> str:
        """Mark a claimed job done. Raises StaleLease when the token no longer owns it."""
        return self._drive(self._op_settle_one(self.done(job, domain_failed=domain_failed)))

    def retry(self, job: Job, **options: Any) -> str:
        """Retry a claimed job (options as :meth:`retrying`); ``dead`` when out of budget."""
        return self._drive(self._op_settle_one(self.retrying(job, **options)))

    def throttle(self, job: Job, retry_after: float | None, **options: Any) -> str:
        """Defer a throttled job without spending an attempt; the domain parks."""
        return self._drive(self._op_settle_one(self.throttling(job, retry_after, **options)))

    def fail(self, job: Job, reason: str, message: str = "", **options: Any) -> str:
        """Dead-letter a claimed job at once."""
        return self._drive(self._op_settle_one(self.failing(job, reason, message, **options)))

    def release(self, job: Job, **options: Any) -> str:
        """Give a claimed job back without spending an attempt (options as :meth:`releasing`);
        ``dead`` when past its release budget."""
        return self._drive(self._op_settle_one(self.releasing(job, **options)))

    def heartbeat(self, jobs: Sequence[Job], lease: float | None = None) -> list[bool]:
        """Renew leases; answers per job whether its token still owns it."""
        return self._drive(self._op_heartbeat(jobs, lease))

    def mark_handler_running(self, jobs: Sequence[Job]) -> list[bool]:
        """Record that the handlers of these claimed jobs run now: if a lease of theirs
        expires (the worker died or stalled in the handler), the reap spends the attempt,
        where an expired lease otherwise gives it back (at most 2 x ``max_attempts`` times,
        ``lua/includes/housekeeping.lua``). The
        worker marks the job it runs alone (one whose lease expired before) and a handler
        held past ``max_job_time``. Renews nothing; answers per job whether its token still
        owns it."""
        return self._drive(self._op_heartbeat(jobs, None, True))

    def reap(self) -> tuple[int, int, int]:
        """Housekeeping now: (leases reaped, delayed jobs promoted, domains woken)."""
        return self._drive(self._op_reap())

    def status(self) -> dict[str, Any]:
        """Counts, lanes, domains and alarms in the ``status --json`` schema."""
        return self._drive(self._op_status())

    def domains_info(self, domains: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Full per-domain figures (breaker state, politeness, counts)."""
        return self._drive(self._op_domains_info(domains))

    def paused_until(self) -> str | None:
        """When the global-fault guard's pause ends (ISO 8601), or None when not paused."""
        return self._drive(self._op_paused_until())

    def domain_names(self) -> list[str]:
        """Every domain the queue knows, sorted (its registry's names: no per-domain reads)."""
        return self._drive(self._op_domain_names())

    def domain_known(self, domain: str) -> bool:
        """Whether the queue knows ``domain`` (one or two reads, whatever the domain count)."""
        return self._drive(self._op_domain_known(domain))

    def recent_errors(self, domain: str) -> list[dict[str, Any]]:
        """The last failures charged to ``domain``'s breaker (at most 10), newest first:
        ``{"id", "at", "at_ms", "kind", "message"}``; a throttled or retried job's errors too,
        which are in no dead letter."""
        return self._drive(self._op_recent_errors(domain))

    def list_jobs(self, state: str, *, domain: str | None = None, limit: int = 20) -> JobListing:
        """At most ``limit`` jobs in ``state`` (ready, delayed, inflight, dead), of ``domain``
        if given, in the order of :class:`~scrapeq.engine.listing.JobListing`. Bounded reads:
        see :mod:`scrapeq.engine.listing`."""
        return self._drive(self._op_list_jobs(state, domain, limit))

    def dead_letters(self, domain: str | None = None, limit: int = 50) -> list[Job]:
        """Dead letters, newest first."""
        return self._drive(self._op_dead_letters(domain, limit))

    def get_job(self, job_id: str) -> Job | None:
        """The stored job, or None when it does not exist (done jobs are deleted unless
        ``keep_done`` keeps them)."""
        return self._drive(self._op_get_job(job_id))

    def job_info(self, job_id: str) -> JobInfo | None:
        """Where job ``job_id`` is (ready with its place in line, delayed until when, in
        flight until when, dead, done) and what it holds; None when there is no such job (a
        done job is deleted unless ``keep_done`` keeps it). One atomic look."""
        return self._drive(self._op_job_info(job_id))

    def cancel(
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
        return self._drive(self._op_cancel(ids, domain, force))

    def counts(self) -> dict[str, int]:
        """The ``counts`` of :meth:`status`, without the per-domain pages (cheap)."""
        return self._drive(self._op_counts())

    def dead_count(self, domain: str | None = None) -> int:
        """How many dead letters the queue (or one domain) holds."""
        return self._drive(self._op_dead_count(domain))

    def known_queues(self, max_calls: int = 1000) -> KnownQueues | None:
        """The queues on this Redis (found by their marker keys), with at most ``max_calls``
        SCAN calls of COUNT 1000; ``complete`` says whether every key was looked at. None when
        the server refuses SCAN (an ACL user)."""
        return self._drive(self._op_known_queues(max_calls))

    def clear(self) -> int:
        """Delete every key of this queue, in slices (SCAN and UNLINK of about
        ``CLEAR_COUNT`` keys a call); answers how many keys. Stop its workers first: keys
        they write meanwhile may be left."""
        return self._drive(self._op_clear())

    def new_crawl(self) -> scripts.Renewed:
        """Forget what this queue has seen, so a crawl of the same seeds starts again: its
        seen-set, once-per-crawl flags and domains' counts of jobs enqueued (``max_pages``),
        nothing else (``lua/renew-1.lua``). Stop its workers first."""
        return self._drive(self._op_renew())

    def replay(
        self,
        *,
        ids: Sequence[str] | None = None,
        domain: str | None = None,
        all: bool = False,
        reset_attempts: bool = False,
    ) -> ReplayResult:
        """Move dead letters back to their lanes; answers (moved, missing, duplicates)."""
        return self._drive(self._op_replay(ids, domain, all, reset_attempts))

    def purge(self, older_than: float | None = None, domain: str | None = None) -> int:
        """Delete dead letters (those that died at least ``older_than`` seconds ago)."""
        return self._drive(self._op_purge(older_than, domain))

    def breaker_reset(self, domain: str) -> str:
        """Close a domain's breaker (un-retiring it). Raises NotFound for unknown domains."""
        return self._drive(self._op_breaker(domain, "reset", None))

    def breaker_trip(self, domain: str, cooldown: float | None = None) -> str:
        """Open a domain's breaker now, for ``cooldown`` seconds (default: next cooldown)."""
        return self._drive(self._op_breaker(domain, "trip", cooldown))

    def domain_set(
        self, domain: str, *, delay: float | None = None, concurrency: int | str | None = None
    ) -> dict[str, Any]:
        """Set a domain's politeness overrides; answers what is now in force."""
        return self._drive(self._op_domain_set(domain, delay, concurrency))

    def host_group(self, host: str, address: str) -> str:
        """``politeness = ip``: file ``host`` (``host[:port]``) under ``ip:<address>`` unless it
        has a group already; answers its group. Its later jobs are filed there."""
        return self._drive(_op_host_group(host, address))

    def events(self, count: int = 100) -> list[dict[str, Any]]:
        """Recent events (trips, recoveries, retirements, dead letters), newest first."""
        return self._drive(self._op_events(count))

    def events_after(self, after: str = "0-0", count: int = 500) -> list[dict[str, str]]:
        """Up to ``count`` events after id ``after``, oldest first: ``id`` and every field
        (``kind``, ``domain``, ``message``, ``at`` in ms, and those some kinds add)."""
        return self._drive(self._op_events_after(after, count))

    def history(self, minutes: int = 60) -> dict[str, Any]:
        """Per-minute counts of the last ``minutes`` minutes (1..1440, the current one last and
        partial), kept in Redis by the scripts that settle (``lua/includes/history.lua``).

        Answers ``{"start", "start_ms", "step": 60, "minutes", "now_ms", "outcomes": {outcome:
        [n per minute]}, "lanes": {lane: {outcome: [...]}}, "events": {"trip"|"retired"|
        "pause": [...]}}``; outcomes are done, retried, throttled, released and dead.

        Raises:
            ConfigError: ``minutes`` is out of range.
        """
        return self._drive(self._op_history(minutes))

    def stats(self) -> dict[str, int]:
        """The queue's counters since it was created: ``enqueued``, ``done``, ``done:<lane>``,
        ``retried``, ``throttled``, ``released``, ``dead_total``, ``dead:<reason>``,
        ``trips``, ``retirements``, ``global_pauses``, ``cancelled``... (zero: absent)."""
        return self._drive(self._op_stats())

    def figures(self) -> dict[str, int]:
        """Queue-wide counts (``done``, ``retried``, ``dead``, ``ready``, ``delayed``,
        ``inflight``, ``open_breakers``, ``retired_domains``); the ones ``status`` shows agree
        with it. Reads every domain's breaker: O(domains)."""
        return self._drive(self._op_figures())

    def log_leader(
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
        return self._drive(self._op_log_leader(worker_id, lease, cursor_ttl, cursor, release))

    def once(self, name: str, holder: str = "") -> tuple[bool, str]:
        """Set the queue's flag ``name`` if nobody has: (whether this call set it, the text
        its setter left). One atomic step, so of several processes asking together exactly
        one wins; ``clear`` removes the flags with the queue."""
        flag = self._drive(self._op_once(name, holder, "take", 0.0))
        return flag.won, flag.holder

    def once_flag(
        self, name: str, holder: str = "", *, op: str = "take", lease: float = 0.0
    ) -> OnceFlag:
        """Take, renew, release or read (``op``) the queue's flag ``name`` as ``holder``.

        ``take`` sets it unless it is set, for ``lease`` seconds (0: for good); ``renew``
        makes the holder's flag last ``lease`` more seconds (0: for good); ``release``
        removes the holder's flag; ``peek`` only reads (``lua/once-1.lua``)."""
        return self._drive(self._op_once(name, holder, op, lease))

    def exists(self) -> bool:
        """Whether anything was ever enqueued to (or configured on) this queue."""
        return self._drive(self._op_exists())

    def audit(self, *, repair: bool = False) -> AuditReport:
        """Check the queue's structures (see :mod:`scrapeq.engine.audit`); with ``repair``, fix
        what is safely fixable. Suspicions a moving job raised are checked again atomically:
        only problems that hold are reported."""
        return self._drive(self._op_audit(repair))

    def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None when INFO is not allowed). Anything but
        ``noeviction`` may delete job keys under memory pressure."""
        return self._drive(self._op_eviction_policy())


class AsyncQueue(_PartitionedCore):
    """The asyncio twin of :class:`Queue` (same methods, awaited), for workers."""

    def __init__(
        self,
        client: AsyncClient,
        name: str | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        super().__init__(name, settings=settings)
        self.client = client
        self._cluster = isinstance(client, redis.asyncio.cluster.RedisCluster)
        self._scripts = {n: client.register_script(scripts.load_source(n)) for n in scripts.SCRIPTS}

    @classmethod
    def from_url(
        cls, url: str | None, name: str | None = None, *, settings: Settings | None = None
    ) -> AsyncQueue:
        """Connect to ``url``, with the options of :func:`.connection.async_client`; None: the
        embedded Redis, as :meth:`Queue.from_url`."""
        given = settings or Settings()
        client = async_client(_url_or_embedded(url, given), given.cluster)
        return cls(client, name, settings=settings)

    async def close(self) -> None:
        await self.client.aclose()

    async def _drive(self, op: Op[T]) -> T:
        try:
            step = next(op)
            while True:
                step = op.send(await self._step(step))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _step(self, step: Step) -> Any:
        if isinstance(step, Many):  # to several partitions: concurrently
            return list(await asyncio.gather(*(self._step(s) for s in step.steps)))
        try:
            if isinstance(step, Command):
                if self._cluster:
                    return await self._cluster_command(step.args)
                return await self.client.execute_command(*step.args)
            raw = await self._scripts[step.script](
                keys=[step.prefix or self.keys.prefix],
                args=[self.testing_clock_offset_ms, self._config_json, step.args],
            )
        except redis.ResponseError as exc:
            moved = _moved(exc)
            if moved is not None:
                raise moved from None
            if isinstance(exc, _CLUSTER_TRANSIENT):
                raise _cluster_unavailable(exc) from exc
            if isinstance(step, Command) and step.tolerant:
                return None
            raise scripts.map_error(str(exc), getattr(step, "script", "a script")) from None
        except _CLUSTER_TRANSIENT as exc:
            raise _cluster_unavailable(exc) from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if _maybe_oversized(step):
                limit = await self._step(Command(_BULK_LIMIT_QUERY, True))
                too_large = _oversized(step, limit)
                if too_large is not None:
                    raise too_large from None
            raise _wrap_connection_error(exc) from exc
        return step.parse(raw)

    async def _cluster_command(self, args: tuple[Any, ...]) -> Any:
        """The asyncio twin of :meth:`Queue._cluster_command`."""
        client = self.client
        assert isinstance(client, redis.asyncio.cluster.RedisCluster)
        target = _cluster_target(args, self.keys.prefix)
        if target is None:
            return await client.execute_command(*args)
        if target != "all":
            await client.initialize()
            node = client.get_node_from_key(target)
            reply = await client.execute_command(*args, target_nodes=node)
            if str(args[0]).upper() == "SCAN":
                cursors, batch = reply
                return [next(iter(cursors.values()), 0), batch]
            return reply
        await client.initialize()
        names = [n.name for n in client.get_primaries()]
        after: dict[str, int] = {}
        found: list[str] = []
        for name, cursor in _split_cursor(args[1], names).items():
            node = client.get_node(node_name=name)
            if node is None:
                continue
            got, batch = await client.execute_command("SCAN", cursor, *args[2:], target_nodes=node)
            after[name] = int(next(iter(got.values()), 0))
            found.extend(batch)
        return [_join_cursor(after), found]

    async def enqueue(self, url: str | Request, **options: Any) -> EnqueueResult:
        """Add one job (options as :meth:`prepare`)."""
        return (await self._drive(self._op_enqueue([self.prepare(url, **options)])))[0]

    async def enqueue_many(
        self, urls: Iterable[str | Request | EnqueueSpec], **options: Any
    ) -> list[EnqueueResult]:
        """Add many jobs (URLs or requests); every one is validated before anything is
        written."""
        specs = [u if isinstance(u, EnqueueSpec) else self.prepare(u, **options) for u in urls]
        return await self._drive(self._op_enqueue(specs))

    async def claim(self, n: int = 1) -> Claimed:
        """Claim up to ``n`` jobs (most urgent first, honouring every domain's limits)."""
        return await self._drive(self._op_claim(n))

    async def settle_many(self, items: Sequence[Settlement]) -> list[str]:
        """Settle many jobs in one call; a stale token answers ``stale`` for its item."""
        return await self._drive(self._op_settle(items))

    async def ack(self, job: Job, *, domain_failed: bool = False) -> str:
        """Mark a claimed job done. Raises StaleLease when the token no longer owns it."""
        return await self._drive(self._op_settle_one(self.done(job, domain_failed=domain_failed)))

    async def retry(self, job: Job, **options: Any) -> str:
        """Retry a claimed job (options as :meth:`retrying`); ``dead`` when out of budget."""
        return await self._drive(self._op_settle_one(self.retrying(job, **options)))

    async def throttle(self, job: Job, retry_after: float | None, **options: Any) -> str:
        """Defer a throttled job without spending an attempt; the domain parks."""
        return await self._drive(self._op_settle_one(self.throttling(job, retry_after, **options)))

    async def fail(self, job: Job, reason: str, message: str = "", **options: Any) -> str:
        """Dead-letter a claimed job at once."""
        return await self._drive(self._op_settle_one(self.failing(job, reason, message, **options)))

    async def release(self, job: Job, **options: Any) -> str:
        """Give a claimed job back without spending an attempt (options as :meth:`releasing`);
        ``dead`` when past its release budget."""
        return await self._drive(self._op_settle_one(self.releasing(job, **options)))

    async def heartbeat(self, jobs: Sequence[Job], lease: float | None = None) -> list[bool]:
        """Renew leases; answers per job whether its token still owns it."""
        return await self._drive(self._op_heartbeat(jobs, lease))

    async def mark_handler_running(self, jobs: Sequence[Job]) -> list[bool]:
        """Record that the handlers of these claimed jobs run now, as
        :meth:`Queue.mark_handler_running`."""
        return await self._drive(self._op_heartbeat(jobs, None, True))

    async def reap(self) -> tuple[int, int, int]:
        """Housekeeping now: (leases reaped, delayed jobs promoted, domains woken)."""
        return await self._drive(self._op_reap())

    async def status(self) -> dict[str, Any]:
        """Counts, lanes, domains and alarms in the ``status --json`` schema."""
        return await self._drive(self._op_status())

    async def domains_info(self, domains: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Full per-domain figures (breaker state, politeness, counts)."""
        return await self._drive(self._op_domains_info(domains))

    async def paused_until(self) -> str | None:
        """When the global pause ends (see :meth:`Queue.paused_until`), or None."""
        return await self._drive(self._op_paused_until())

    async def domain_known(self, domain: str) -> bool:
        """The asyncio twin of :meth:`Queue.domain_known`."""
        return await self._drive(self._op_domain_known(domain))

    async def domain_names(self) -> list[str]:
        """Every domain the queue knows, sorted (see :meth:`Queue.domain_names`)."""
        return await self._drive(self._op_domain_names())

    async def recent_errors(self, domain: str) -> list[dict[str, Any]]:
        """The last failures charged to ``domain``'s breaker, as :meth:`Queue.recent_errors`."""
        return await self._drive(self._op_recent_errors(domain))

    async def list_jobs(
        self, state: str, *, domain: str | None = None, limit: int = 20
    ) -> JobListing:
        """Jobs in ``state``, as :meth:`Queue.list_jobs`."""
        return await self._drive(self._op_list_jobs(state, domain, limit))

    async def dead_letters(self, domain: str | None = None, limit: int = 50) -> list[Job]:
        """Dead letters, newest first."""
        return await self._drive(self._op_dead_letters(domain, limit))

    async def get_job(self, job_id: str) -> Job | None:
        """The stored job, or None when it does not exist (done jobs are deleted unless
        ``keep_done`` keeps them)."""
        return await self._drive(self._op_get_job(job_id))

    async def job_info(self, job_id: str) -> JobInfo | None:
        """Where job ``job_id`` is (ready with its place in line, delayed until when, in
        flight until when, dead, done) and what it holds; None when there is no such job (a
        done job is deleted unless ``keep_done`` keeps it). One atomic look."""
        return await self._drive(self._op_job_info(job_id))

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
        return await self._drive(self._op_cancel(ids, domain, force))

    async def counts(self) -> dict[str, int]:
        """The ``counts`` of :meth:`status`, without the per-domain pages (cheap)."""
        return await self._drive(self._op_counts())

    async def dead_count(self, domain: str | None = None) -> int:
        """How many dead letters the queue (or one domain) holds."""
        return await self._drive(self._op_dead_count(domain))

    async def known_queues(self, max_calls: int = 1000) -> KnownQueues | None:
        """The queues on this Redis (found by their marker keys), with at most ``max_calls``
        SCAN calls of COUNT 1000; ``complete`` says whether every key was looked at. None when
        the server refuses SCAN (an ACL user)."""
        return await self._drive(self._op_known_queues(max_calls))

    async def clear(self) -> int:
        """Delete every key of this queue, in slices (SCAN and UNLINK of about
        ``CLEAR_COUNT`` keys a call); answers how many keys. Stop its workers first: keys
        they write meanwhile may be left."""
        return await self._drive(self._op_clear())

    async def new_crawl(self) -> scripts.Renewed:
        """Forget what this queue has seen (see :meth:`Queue.new_crawl`)."""
        return await self._drive(self._op_renew())

    async def replay(
        self,
        *,
        ids: Sequence[str] | None = None,
        domain: str | None = None,
        all: bool = False,
        reset_attempts: bool = False,
    ) -> ReplayResult:
        """Move dead letters back to their lanes; answers (moved, missing, duplicates)."""
        return await self._drive(self._op_replay(ids, domain, all, reset_attempts))

    async def purge(self, older_than: float | None = None, domain: str | None = None) -> int:
        """Delete dead letters (those that died at least ``older_than`` seconds ago)."""
        return await self._drive(self._op_purge(older_than, domain))

    async def breaker_reset(self, domain: str) -> str:
        """Close a domain's breaker (un-retiring it). Raises NotFound for unknown domains."""
        return await self._drive(self._op_breaker(domain, "reset", None))

    async def breaker_trip(self, domain: str, cooldown: float | None = None) -> str:
        """Open a domain's breaker now, for ``cooldown`` seconds (default: next cooldown)."""
        return await self._drive(self._op_breaker(domain, "trip", cooldown))

    async def domain_set(
        self, domain: str, *, delay: float | None = None, concurrency: int | str | None = None
    ) -> dict[str, Any]:
        """Set a domain's politeness overrides; answers what is now in force."""
        return await self._drive(self._op_domain_set(domain, delay, concurrency))

    async def host_group(self, host: str, address: str) -> str:
        """The asyncio twin of :meth:`Queue.host_group`."""
        return await self._drive(_op_host_group(host, address))

    async def events(self, count: int = 100) -> list[dict[str, Any]]:
        """Recent events (trips, recoveries, retirements, dead letters), newest first."""
        return await self._drive(self._op_events(count))

    async def events_after(self, after: str = "0-0", count: int = 500) -> list[dict[str, str]]:
        """Up to ``count`` events after id ``after``, oldest first: ``id`` and every field
        (``kind``, ``domain``, ``message``, ``at`` in ms, and those some kinds add)."""
        return await self._drive(self._op_events_after(after, count))

    async def history(self, minutes: int = 60) -> dict[str, Any]:
        """Per-minute counts of the last ``minutes`` minutes (see :meth:`Queue.history`)."""
        return await self._drive(self._op_history(minutes))

    async def stats(self) -> dict[str, int]:
        """The queue's counters since it was created (see :meth:`Queue.stats`)."""
        return await self._drive(self._op_stats())

    async def figures(self) -> dict[str, int]:
        """Queue-wide counts (``done``, ``retried``, ``dead``, ``ready``, ``delayed``,
        ``inflight``, ``open_breakers``, ``retired_domains``); the ones ``status`` shows agree
        with it. Reads every domain's breaker: O(domains)."""
        return await self._drive(self._op_figures())

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
        op = self._op_log_leader(worker_id, lease, cursor_ttl, cursor, release)
        return await self._drive(op)

    async def once(self, name: str, holder: str = "") -> tuple[bool, str]:
        """The async twin of :meth:`Queue.once`."""
        flag = await self._drive(self._op_once(name, holder, "take", 0.0))
        return flag.won, flag.holder

    async def once_flag(
        self, name: str, holder: str = "", *, op: str = "take", lease: float = 0.0
    ) -> OnceFlag:
        """The async twin of :meth:`Queue.once_flag`."""
        return await self._drive(self._op_once(name, holder, op, lease))

    async def exists(self) -> bool:
        """Whether anything was ever enqueued to (or configured on) this queue."""
        return await self._drive(self._op_exists())

    async def audit(self, *, repair: bool = False) -> AuditReport:
        """Check the queue's structures (see :mod:`scrapeq.engine.audit`); with ``repair``, fix
        what is safely fixable. Suspicions a moving job raised are checked again atomically:
        only problems that hold are reported."""
        return await self._drive(self._op_audit(repair))

    async def eviction_policy(self) -> str | None:
        """The server's ``maxmemory-policy`` (None when INFO is not allowed). Anything but
        ``noeviction`` may delete job keys under memory pressure."""
        return await self._drive(self._op_eviction_policy())
