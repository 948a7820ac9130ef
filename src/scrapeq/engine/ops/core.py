"""The single-partition queue core: argument checks, operations (generators), result shaping.

Each operation yields :class:`~scrapeq.engine.lua.scripts.Call` or :class:`Command` steps and
receives each answer; the facades (:mod:`scrapeq.engine.facades`: sync and async) drive them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar, Unpack

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.config.specs import FETCHERS
from scrapeq.engine.facades.options import JobOptions
from scrapeq.engine.lua import owed as owed_calls
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.args import sitemap_schedule
from scrapeq.engine.lua.owed import OwedLine
from scrapeq.engine.lua.scripts import (
    ONCE_OPS,
    SCAN_START,
    Command,
    EnqueueSpec,
    JobPlace,
    OnceFlag,
    Op,
    Samples,
    ScriptConfig,
    Settled,
    Settlement,
)
from scrapeq.engine.model.dedup import Dedup
from scrapeq.engine.model.exits import ExitPool
from scrapeq.engine.model.job import Job, JobInfo, ms_to_iso
from scrapeq.engine.model.keys import QUEUE_SCAN_PATTERN, Keys, queue_of_marker, registry_bucket
from scrapeq.engine.model.request import Request
from scrapeq.engine.model.urls import domain_of, parse_target, politeness_key
from scrapeq.engine.ops.audit import AuditReport, audit_op
from scrapeq.engine.ops.oputil import (
    CALL_BYTES,
    CALL_ITEMS,
    _audit_conc,
    _chunks,
    _dead_job,
    _enqueue_result,
    _event,
    _expires_ms,
    _job_info,
    _names,
    _payload_json,
    _seconds_ms,
    _settlement_size,
    _spec_size,
    _stream_entries,
    _with_fingerprint,
    domain_set_call,
)
from scrapeq.engine.ops.results import (
    _REFUSALS,
    CancelResult,
    Claimed,
    EnqueueResult,
    KnownQueues,
    ReplayResult,
)
from scrapeq.engine.ops.settlement import SettlementBuilders
from scrapeq.engine.ops.status import (
    HISTORY_MINUTES,
    eviction_alarm,
    shape_counts,
    shape_figures,
    shape_history,
    shape_status,
)
from scrapeq.errors import (
    ConfigError,
    InvalidURL,
    PayloadTooLarge,
    StaleLease,
)

T = TypeVar("T")

#: Domains asked about per domain_info call, and dead letters read per page.
_PAGE = 200
#: Most jobs one claim may take: a script must not block Redis for long.
MAX_CLAIM = 1000
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


def check_claim_size(n: int) -> None:
    """Refuse a claim size outside 1..``MAX_CLAIM`` (:class:`ConfigError`)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CLAIM:
        raise ConfigError("n", f"claim size must be an integer in 1..{MAX_CLAIM}, got {n!r}")


def settled_one(item: Settlement, status: Settled) -> Settled:
    """A single settle's answer, or :class:`StaleLease` when its token no longer held the job."""
    if status == "stale":
        raise StaleLease(f"job {item.job_id}: token {item.token} no longer owns the lease")
    return status


class _QueueCore(SettlementBuilders):
    """Everything but the I/O: argument checks, operations, result shaping."""

    def __init__(self, name: str | None = None, *, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        if name is not None and name != self.settings.queue:
            self.settings = self.settings.replace(queue=name)
        self.name = self.settings.queue
        self.keys = Keys(self.name)
        #: The exit pool (``proxy``, ``proxy_file``), read once: the scripts' config, the
        #: pool's listings and this process's fetcher all see the same exits.
        self.exit_pool = ExitPool.from_settings(self.settings)
        self._config_json = ScriptConfig.from_settings(self.settings, self.exit_pool).to_json()
        #: How jobs are told apart: uniqueness modes, fingerprints, the seen-set's layout.
        self._dedup = Dedup.from_settings(self.settings)
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
        fingerprint64: int | None = None,
        fetcher: str | None = None,
        sitemap_priority: float | None = None,
        lastmod: float | None = None,
    ) -> EnqueueSpec:
        """Validate one job without touching Redis.

        Args:
            url: http(s) URL; refused when invalid or (without ``allow_private``) private.
                Or a :class:`~scrapeq.engine.model.request.Request`: its URL, and what the job
                sends (its stored form, its body and meta count towards ``max_payload``).
            lane: lane name; default the settings' default lane (``normal``).
            delay: seconds before the job is eligible.
            max_attempts: attempt budget; default ``settings.max_attempts``.
            payload: any JSON-serialisable value, handed to the handler.
            unique: ``"pending"`` (or True): skip the job while a pending job has the same
                URL; ``"seen"``: skip it too when the URL was ever enqueued with ``"seen"``
                (or within ``recrawl_after``); ``"off"`` (or False): no de-duplication.
                Default: the ``unique`` setting. URLs are the same up to
                :func:`~scrapeq.engine.model.urls.canonical_url` (``canonical_*`` settings).
            expires: seconds after enqueue at which an unclaimed job dies as ``expired``.
            fingerprint64: what de-duplication compares instead of the URL's fingerprint,
                when the caller has its own: one job's (Scrapy on scrapeq: the first 8
                bytes of Scrapy's request fingerprint as an unsigned integer). Signed and
                unsigned integers are taken; a queue's clients must agree on one form,
                since the seen-set keeps the number as given.
            fetcher: what fetches the job: ``http`` (aiohttp) or ``impersonate`` (a
                browser's TLS fingerprint, curl_cffi). Default: its domain's
                (``domain set --fetcher``), else the worker's ``fetcher`` setting.
            sitemap_priority: the page's sitemap ``<priority>`` (0.0-1.0): its revisit
                weight is twice it, at least 0.1 (the default 0.5 weighs 1, as no sitemap).
            lastmod: the page's sitemap ``<lastmod>``, epoch seconds: with revisit on, one
                newer than the URL's last visit makes it due now (a pending job holding the
                URL is made due instead). The rule:
                :func:`~scrapeq.engine.lua.args.sitemap_schedule`.

        Raises:
            InvalidURL: the URL is refused.
            ConfigError: another argument is bad (names it).
        """
        return self._prepared(url, lane, delay, max_attempts, payload, unique, expires,
                              fingerprint64, fetcher, sitemap_priority, lastmod)  # fmt: skip

    def _prepared(  # the parameters of prepare, in its order
        self, url: str | Request, lane: str | None, delay: float, max_attempts: int | None,
        payload: Any, unique: bool | str | None, expires: float | None,
        fingerprint64: int | None, fetcher: str | None, sitemap_priority: float | None,
        lastmod: float | None,
    ) -> EnqueueSpec:  # fmt: skip
        """:meth:`prepare`'s checks, in this order: the first bad argument is the one named."""
        request, url = (url, url.url) if isinstance(url, Request) else (None, url)
        if fetcher is not None and fetcher not in FETCHERS:
            raise ConfigError("fetcher", f"expected {' or '.join(FETCHERS)}, got {fetcher!r}")
        target = parse_target(url, allow_private=self.settings.allow_private)
        lanes = self.settings.lanes
        lane_name = lane if lane is not None else lanes.default_lane
        off_ms, attempts = lanes.offset_ms(lane_name), self._max_attempts(max_attempts)
        payload_json, expires_ms = _payload_json(payload), _expires_ms(expires)
        request_json = None if request is None else request.to_text()
        dedup = self._dedup.fields(url, request, unique, request_json is not None, fingerprint64)
        return EnqueueSpec(
            url=target.url, domain=self._politeness_domain(target.domain), lane=lane_name,
            off_ms=off_ms, delay_ms=_seconds_ms("delay", delay, allow_none=False) or 0,
            max_attempts=attempts, payload_json=payload_json, expires_ms=expires_ms,
            request_json=request_json, fetcher=fetcher, **dedup,
            **sitemap_schedule(sitemap_priority, lastmod),
        )  # fmt: skip

    def prepare_many(
        self, urls: Iterable[str | Request | EnqueueSpec], **options: Unpack[JobOptions]
    ) -> list[EnqueueSpec]:
        """:meth:`prepare` each URL or request (a spec is taken as it is), all before any is
        written. ``fingerprint64`` is one job's own: refused for more than one URL.

        Raises:
            InvalidURL: a URL is refused.
            ConfigError: another argument is bad (names it).
        """
        items = list(urls)
        fresh = sum(not isinstance(u, EnqueueSpec) for u in items)
        if options.get("fingerprint64") is not None and fresh > 1:
            raise ConfigError("fingerprint64", "is one job's own, not for several URLs at once")
        return [u if isinstance(u, EnqueueSpec) else self.prepare(u, **options) for u in items]

    def _max_attempts(self, max_attempts: int | None) -> int:
        attempts = self.settings.max_attempts if max_attempts is None else max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigError("max_attempts", f"must be an integer >= 1, got {attempts!r}")
        return attempts

    def _politeness_domain(self, domain: str) -> str:
        """The key a job's politeness is counted under: its host, or a coarser key."""
        if self.settings.politeness != "host":
            return politeness_key(domain, self.settings.politeness)
        return domain

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

    def _op_claim(self, n: int, urgent: bool = False, domain: str | None = None) -> Op[Claimed]:
        check_claim_size(n)
        next_ms, texts = yield scripts.claim(n, urgent=urgent, domain=domain)
        jobs = [Job.from_json(t) for t in texts]
        return Claimed(jobs, None if next_ms < 0 else next_ms / 1000)

    def _op_settle(self, items: Sequence[Settlement]) -> Op[list[Settled]]:
        if len(items) <= CALL_ITEMS and sum(map(_settlement_size, items)) <= CALL_BYTES:
            return (yield scripts.settle(items))  # type: ignore[no-any-return]
        out: list[Settled] = []
        for chunk in _chunks(items, _settlement_size):
            out.extend((yield scripts.settle(chunk)))
        return out

    def _op_settle_one(self, item: Settlement) -> Op[Settled]:
        (status,) = yield scripts.settle([item])
        return settled_one(item, status)

    def _op_heartbeat(
        self, jobs: Sequence[Job], lease: float | None, handling: bool = False
    ) -> Op[list[bool]]:
        lease_ms = _seconds_ms("lease", lease)
        if not jobs:
            return []
        pairs = [(j.id, j.token) for j in jobs]
        renewed: list[bool] = yield scripts.heartbeat(pairs, lease_ms, handling=handling)
        return renewed

    def _op_downloaded(self, jobs: Sequence[Job], samples: Samples = None) -> Op[list[bool]]:
        if not jobs:
            return []
        freed: list[bool] = yield scripts.downloaded([(j.id, j.token) for j in jobs], samples)
        return freed

    def _op_owed_ack(self, ids: Sequence[str]) -> Op[int]:
        acked = 0
        for start in range(0, len(ids), owed_calls.OWED_CALL):
            acked += yield owed_calls.owed_ack(ids[start : start + owed_calls.OWED_CALL])
        return acked

    def _op_owed_take(self, n: int) -> Op[list[OwedLine]]:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= owed_calls.OWED_CALL:
            raise ConfigError("n", f"must be an integer in 1..{owed_calls.OWED_CALL}, got {n!r}")
        taken: list[OwedLine] = yield owed_calls.owed_take(n)
        return taken

    def _op_owed_count(self) -> Op[int]:
        return int((yield Command(("HLEN", self.keys.owed))))

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
        return bool(int(found))

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

    def _op_url_holder(self, fingerprint: str) -> Op[str | None]:
        held = yield Command(("HGET", self.keys.unique, fingerprint))
        return None if held is None else str(held)

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

    def _op_page_info(self, url: str) -> Op[dict[str, Any]]:
        """A page's revisit state (``page_info-1.lua``): its ``domain`` (its jobs'), ``tracked``,
        and when it is its last and next visit (s), estimated change rate (per hour), interval,
        expected freshness."""
        got: list[dict[str, Any]] = yield scripts.page_info([url])
        page = got[0] if got else {"url": url, "tracked": False}
        page["domain"] = self._politeness_domain(domain_of(url))  # its jobs' domain
        return page

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
        call = domain_set_call(domain, delay, concurrency, fetcher, max_pages, blocked_until,
                               crawl_limit, wait_for)  # fmt: skip
        got_delay, got_conc, adaptive, got_fetcher, got_wait = yield call
        return {"domain": domain, "delay": got_delay / 1000, "concurrency": got_conc,
                "adaptive": adaptive, "fetcher": got_fetcher,
                "browser_wait_for": got_wait}  # fmt: skip

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

    def _op_exits_raw(self, ids: Sequence[str]) -> Op[list[dict[str, str]]]:
        """Each exit's hash (includes/exits.lua) on this partition, in order."""
        out: list[dict[str, str]] = []
        for exit_id in ids:
            out.append(dict((yield Command(("HGETALL", self.keys.exit(exit_id))))))
        return out

    def _op_domain_exits_raw(self, domain: str) -> Op[dict[str, str]]:
        return dict((yield Command(("HGETALL", self.keys.domain_exits(domain)))))

    def _op_now_ms(self) -> Op[int]:
        return (yield from scripts.server_ms_op(self.testing_clock_offset_ms))

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

    def _final_spec(self, job: Job, url: str | None) -> EnqueueSpec | None:
        """The spec that marks ``url`` seen (None: no URL, the job's own, or one refused)."""
        if url is None or url == job.url or job.request_text is not None:
            return None  # a request's target is not marked seen as a plain GET
        try:
            return self.prepare(url, unique="seen")
        except (InvalidURL, ConfigError):
            return None
