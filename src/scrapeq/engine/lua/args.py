"""The arguments of the enqueue and settle calls: :class:`EnqueueSpec` (a job to enqueue)
and :class:`Settlement` (how a claimed job ends its attempt), and :class:`Settled`, a
settle's answer; :class:`DownloadSample`, what a download taught of its site. Split from
:mod:`scrapeq.engine.lua.scripts`, which re-exports them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scrapeq.engine.config.limits import MAX_OWED_LINE
from scrapeq.engine.lua.wire import SETTLE_ITEM
from scrapeq.errors import ConfigError, PayloadTooLarge

# A settle item's wire names (engine/lua/wire.py), looked up once for Settlement.as_arg.
_W_ID, _W_TOKEN, _W_OUTCOME = SETTLE_ITEM["job_id"], SETTLE_ITEM["token"], SETTLE_ITEM["outcome"]
_W_DOMAIN_FAILED, _W_DELAY = SETTLE_ITEM["domain_failed"], SETTLE_ITEM["delay_ms"]
_W_BACKOFF, _W_RETRY_AFTER = SETTLE_ITEM["backoff"], SETTLE_ITEM["retry_after_ms"]
_W_KIND, _W_MESSAGE, _W_REASON = SETTLE_ITEM["kind"], SETTLE_ITEM["message"], SETTLE_ITEM["reason"]
_W_SHUTDOWN, _W_FOLLOW, _W_FINAL = (
    SETTLE_ITEM["shutdown"],
    SETTLE_ITEM["follow"],
    SETTLE_ITEM["final"],
)
_W_LATENCY, _W_OVERLOAD = SETTLE_ITEM["latency_ms"], SETTLE_ITEM["overload"]
_W_EXIT, _W_BYTES, _W_JAR = SETTLE_ITEM["exit_result"], SETTLE_ITEM["bytes_in"], SETTLE_ITEM["jar"]
_W_NOT_MODIFIED, _W_CHANGED = SETTLE_ITEM["not_modified"], SETTLE_ITEM["changed"]
_W_SIGNATURE, _W_ETAG = SETTLE_ITEM["signature"], SETTLE_ITEM["etag"]
_W_LAST_MODIFIED, _W_LINE = SETTLE_ITEM["last_modified"], SETTLE_ITEM["line"]
_W_AUTO = SETTLE_ITEM["auto_evidence"]


#: The least weight a sitemap's priority gives a page (priority 0.0 still gets revisits).
MIN_SITEMAP_WEIGHT = 0.1
#: lastmod values a revisit can compare with: epoch seconds from 1970 to 2106.
_LASTMODS = range(0, 2**32)


def sitemap_schedule(priority: float | None, lastmod: float | None) -> dict[str, Any]:
    """A sitemap entry's schedule, as an :class:`EnqueueSpec`'s ``weight`` and ``lastmod``
    (only those given): the one home of the rule (``Queue.prepare``'s ``sitemap_priority`` and
    ``lastmod``; the CLI's ``enqueue --sitemap`` goes through it too).

    ``weight`` = priority (clamped to 0.0-1.0) x 2, at least :data:`MIN_SITEMAP_WEIGHT`: the
    protocol's default priority 0.5 weighs 1, as a page with no sitemap does. A ``lastmod``
    before 1970 or past 2106 is no visit to compare with: left out.

    Raises:
        ConfigError: ``priority`` or ``lastmod`` is not a number.
    """
    out: dict[str, Any] = {}
    if priority is not None:
        if not _finite(priority):
            raise ConfigError("sitemap_priority", f"expected a number, got {priority!r}")
        out["weight"] = max(min(float(priority), 1.0), MIN_SITEMAP_WEIGHT / 2) * 2
    if lastmod is not None:
        if not _finite(lastmod):
            raise ConfigError("lastmod", f"expected epoch seconds, got {lastmod!r}")
        if int(lastmod) in _LASTMODS:
            out["lastmod"] = int(lastmod)
    return out


def _finite(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


@dataclass(frozen=True, slots=True)
class EnqueueSpec:
    """One job to enqueue, already validated (see ``Queue.prepare``).

    Attributes:
        unique: ``pending`` or ``seen`` (None: no de-duplication asked).
        fingerprint: the URL's :func:`~scrapeq.engine.model.urls.fingerprint`; set for unique jobs,
        and
            for the others once the queue has had a unique enqueue (they take it when free).
        seen: the seen-set argument (``SeenLayout.arg``) when ``unique`` is ``seen``.
        request_json: what the job sends, stored form (``Request.to_text``); None: a GET.
        weight: the page's weight for revisits (None: 1); a sitemap's ``priority`` x 2 by
            default (0.5 its default: weight 1).
        fetcher: the job's own fetcher (``http``, ``impersonate``); None: its domain's, else
            the worker's ``fetcher`` setting.
        lastmod: a sitemap's ``lastmod`` (epoch s): with revisit on, newer than the URL's last
            visit makes it due now: past the seen-set, and when a pending job holds the URL
            (``unique``) that job is made due instead of a second one (includes/enqueue.lua).
        at_ms: a known URL (the URLFrontier service's import, with ``unique = "seen"``):
            epoch ms of its next visit, earlier ones first; 0: never again (the seen-set
            records it, no job is made). It replaces ``delay_ms``.
        succeeds: with ``at_ms``, as a follow-up of a ``done`` settlement: the settled job's
            id. The new job is its next visit and takes its fingerprint over (a pending job
            holding the URL is otherwise a duplicate).
        capped: counted against its domain's ``max_pages`` as a follow-up is (the domain's
            own, ``domain_set(max_pages=)``, else the setting): the URLFrontier service's
            discovered URLs, for SetCrawlLimit.
    """

    url: str
    domain: str
    lane: str
    off_ms: int
    delay_ms: int
    max_attempts: int
    payload_json: str | None = None
    expires_ms: int | None = None
    fingerprint: str | None = None
    unique: str | None = None
    seen: dict[str, Any] | None = None
    depth: int = 0
    parent: str | None = None
    request_json: str | None = None
    parent_url: str | None = None
    weight: float | None = None
    lastmod: int | None = None
    fetcher: str | None = None
    at_ms: int | None = None
    succeeds: str | None = None
    capped: bool = False

    def child_of(self, parent: str, depth: int, parent_url: str | None = None) -> EnqueueSpec:
        """This spec as a follow-up of job ``parent`` (at ``parent_url``), ``depth`` links
        from a seed."""
        return dataclasses.replace(self, parent=parent, depth=depth, parent_url=parent_url)

    def as_arg(self) -> dict[str, Any]:
        arg: dict[str, Any] = {
            "url": self.url,
            "domain": self.domain,
            "lane": self.lane,
            "off": self.off_ms,
            "delay": self.delay_ms,
            "max_attempts": self.max_attempts,
        }
        optional = (
            ("payload", self.payload_json),
            ("expires", self.expires_ms),
            ("fp", self.fingerprint),
            ("unique", self.unique),
            ("seen", self.seen),
            ("depth", self.depth or None),
            ("parent", self.parent),
            ("request", self.request_json),
            ("parent_url", self.parent_url),
            ("weight", self.weight),
            ("lastmod", self.lastmod),
            ("fetcher", self.fetcher),
            ("at", self.at_ms),
            ("succeeds", self.succeeds),
            ("capped", self.capped or None),
        )
        arg.update((name, value) for name, value in optional if value is not None)
        return arg


@dataclass(frozen=True, slots=True)
class DownloadSample:
    """What a download over taught of its site, sent with ``Queue.downloaded``: the settle
    script's decision whether the job's domain slot may come back before its settle
    (``lua/downloaded-1.lua``: not when the sample charges the domain, its breaker or its
    adaptive limit: ``includes/adaptive_rule.lua``, ``adaptive_charges``). The sample is not
    recorded there: the settle records it, once.

    Attributes:
        latency_ms: how long the download took (what an adaptive domain learns from).
        domain_failed: the breaker input its verdict will settle with (True: a failure).
        overload: the site signalled overload (429, 503, a timeout, a reset).
    """

    latency_ms: int
    domain_failed: bool | None = None
    overload: bool = False


#: One sample per job given back with ``Queue.downloaded`` (None: no sample), or None.
Samples = Sequence[DownloadSample | None] | None


def download_item(job_id: str, token: int, sample: DownloadSample | None) -> dict[str, Any]:
    """The item of downloaded-1.lua for the lease ``(job_id, token)`` and its sample."""
    if sample is None:
        return {"id": job_id, "token": token}
    arg: dict[str, Any] = {"id": job_id, "token": token, "latency": sample.latency_ms}
    if sample.domain_failed is not None:
        arg["failed"] = sample.domain_failed
    if sample.overload:
        arg["overload"] = True
    return arg


@dataclass(frozen=True, slots=True)
class Settlement:
    """How one claimed job ends its attempt, for :func:`settle`.

    Attributes:
        job_id, token: the job and the lease token its claim returned.
        outcome: ``done``, ``retry``, ``throttle``, ``fail`` or ``release``.
        domain_failed: breaker input: True a failure, False a success, None no information.
        delay_ms: wait before the job is eligible again (retry, throttle, release).
        backoff: no delay given (a retry, a release but a shutdown's): the settle script draws
            the full-jitter backoff (``includes/jobs.lua``, ``backoff_ms``) and answers it
            (:attr:`Settled.delay_ms`); ``delay_ms`` is then unused.
        retry_after_ms: park the whole domain this long (Retry-After).
        kind, message: the error recorded in the job's history.
        reason: the dead-letter reason for ``fail``.
        shutdown: a ``release`` because the worker is stopping: the job's release budget
            is not spent and nothing is recorded.
        follow: follow-ups of a ``done`` job, enqueued by the same script call that settles
            it (nothing is enqueued when the token no longer owns the job).
        latency_ms: how long the fetch took, when the site answered or failed by itself: an
            adaptive domain learns its limit from it (``includes/adaptive.lua``).
        overload: the site signalled overload (429, 503, a timeout, a reset); with latency_ms.
        exit_result: with a job claimed through an exit (``Job.exit``), what became of the
            attempt there: ``ok``, ``ban``, ``down`` (the exit failed itself), ``timeout``,
            ``error``; None when no request was made (includes/exits.lua).
        bytes_in: bytes downloaded, counted per exit and per tier (and per domain with
            ``max_bytes``).
        not_modified, changed, signature, etag, last_modified: with ``done`` and revisit on,
            what the fetch saw of the content (includes/revisit.lua decides from them): a 304,
            the handler's "unchanged", the body's 64-bit signature (16 hex digits), the
            answer's validators (at most 100 bytes each; longer ones are not sent).
        jar: with ``session = sticky``, what this attempt changed in the domain's cookie jar:
            ``{"set": [cookie, ...], "del": [[name, domain, path], ...]}`` (cookies as
            :data:`~scrapeq.engine.lua.wire.JAR_COOKIE`), merged per cookie into the stored jar
            when the job's exit is still the domain's session exit (``includes/jar.lua``).
            Left out of the repr: cookie values are secrets.
        final: with ``done``, the spec of the URL the fetch ended at after redirects (its
            seen-set argument): it joins the seen-set in this call when the queue has one,
            so a link to it met later is skipped (``includes/seen.lua``, ``seen_mark``).
        line: the attempt's results record as JSON text on one line, sent when the worker
            writes the job's line from the settle's answer: a settle whose answer makes the
            line due (done, dead) keeps it in the owed-lines ledger until the worker
            acknowledges it (``includes/owed.lua``). At most
            :data:`~scrapeq.engine.config.limits.MAX_OWED_LINE` bytes of UTF-8
            (:class:`~scrapeq.errors.PayloadTooLarge` otherwise, when the settlement is built).
        auto_evidence: a job claimed with ``auto_fetcher``: what its fetch showed, ``block``
            (refused as a fingerprint block), ``render`` (the page needed rendering) or
            ``same`` (a re-check as good); includes/auto.lua decides what it moves.
    """

    job_id: str
    token: int
    outcome: str
    domain_failed: bool | None = None
    delay_ms: int = 0
    backoff: bool = False
    retry_after_ms: int = 0
    kind: str | None = None
    message: str | None = None
    reason: str | None = None
    shutdown: bool = False
    follow: tuple[EnqueueSpec, ...] = ()
    latency_ms: int | None = None
    overload: bool = False
    final: EnqueueSpec | None = None
    exit_result: str | None = None
    bytes_in: int | None = None
    jar: dict[str, Any] | None = dataclasses.field(default=None, repr=False)
    not_modified: bool = False
    changed: bool | None = None
    signature: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    line: str | None = None
    auto_evidence: str | None = None

    def __post_init__(self) -> None:
        if self.line is not None:
            check_owed_line(self.job_id, self.line)

    def as_arg(self) -> dict[str, Any]:
        """This settlement as a settle item: the wire names of ``wire.SETTLE_ITEM``, a field
        at its default left out. On the claim path once per job: the item is built field by
        field (a bare ``done`` sets three), not filtered from a dict of every field."""
        item: dict[str, Any] = {_W_ID: self.job_id, _W_TOKEN: self.token, _W_OUTCOME: self.outcome}
        if self.domain_failed is not None:
            item[_W_DOMAIN_FAILED] = self.domain_failed
        if self.delay_ms:
            item[_W_DELAY] = self.delay_ms
        if self.backoff:
            item[_W_BACKOFF] = True
        if self.retry_after_ms:
            item[_W_RETRY_AFTER] = self.retry_after_ms
        if self.kind is not None:
            item[_W_KIND] = self.kind
        if self.message is not None:
            item[_W_MESSAGE] = self.message
        if self.reason is not None:
            item[_W_REASON] = self.reason
        if self.shutdown:
            item[_W_SHUTDOWN] = True
        self._fetch_fields(item)
        self._content_fields(item)
        return item

    def _fetch_fields(self, item: dict[str, Any]) -> None:
        """as_arg's fields of the fetch: follow-ups, the final URL, latency, exit, bytes, jar."""
        if self.follow:
            item[_W_FOLLOW] = [spec.as_arg() for spec in self.follow]
        if self.final is not None and self.final.seen is not None:
            item[_W_FINAL] = self.final.seen
        if self.latency_ms is not None:
            item[_W_LATENCY] = self.latency_ms
            if self.overload:
                item[_W_OVERLOAD] = True
        if self.exit_result is not None:
            item[_W_EXIT] = self.exit_result
        if self.bytes_in is not None:
            item[_W_BYTES] = self.bytes_in
        if self.jar is not None:
            item[_W_JAR] = self.jar

    def _content_fields(self, item: dict[str, Any]) -> None:
        """as_arg's fields of the content (revisit) and the owed results record."""
        if self.not_modified:
            item[_W_NOT_MODIFIED] = True
        if self.changed is not None:
            item[_W_CHANGED] = self.changed
        if self.signature is not None:
            item[_W_SIGNATURE] = self.signature
        if self.etag is not None:
            item[_W_ETAG] = self.etag
        if self.last_modified is not None:
            item[_W_LAST_MODIFIED] = self.last_modified
        if self.line is not None:
            item[_W_LINE] = self.line
        if self.auto_evidence is not None:
            item[_W_AUTO] = self.auto_evidence


def check_owed_line(job_id: str, line: str) -> None:
    """Refuse a results record too large for the owed-lines ledger (more than
    :data:`~scrapeq.engine.config.limits.MAX_OWED_LINE` bytes of UTF-8) or not on one line, as
    ``includes/owed.lua`` would (:class:`~scrapeq.errors.PayloadTooLarge`, ``ValueError``)."""
    # a character is at most 4 bytes: most records are never encoded here
    size = len(line) if len(line) * 4 <= MAX_OWED_LINE else len(line.encode("utf-8", "replace"))
    if size > MAX_OWED_LINE:
        raise PayloadTooLarge(
            f"job {job_id}: results record of {size:,} bytes is over the owed-lines "
            f"ledger's {MAX_OWED_LINE:,} bytes"
        )
    if "\n" in line:
        raise ValueError(f"job {job_id}: a results record is JSON text on one line")


class Settled(str):
    """A settle answer: the status itself (``done``, ``retried``, ``throttled``,
    ``released``, ``dead`` or ``stale``, this string), with what the settle script decided
    beside it (the worker writes a results line from these, never predicting them):

    Attributes:
        reason: a ``dead`` job's dead-letter reason (``max_attempts``, ``max_throttles``,
            ``max_releases``, or a fail's reason); else None.
        delay_ms: the backoff drawn for a :attr:`Settlement.backoff` item that was retried or
            released; else None.
        changed: a ``done`` job with revisit on: whether its page changed since its last
            visit (``includes/revisit.lua``; a first visit is a change); else None.
        not_modified: a ``done`` revisit answered by a 304 (its conditional request).
        cut: a ``done`` job's follow-ups cut at their domain's budget, by budget
            (``max_pages``, ``max_bytes``: how many); empty when none was.
        revisit_skipped: a ``done`` job whose next visit was not scheduled, its domain past
            ``max_bytes``.
    """

    reason: str | None
    delay_ms: int | None
    changed: bool | None
    not_modified: bool
    cut: dict[str, int]
    revisit_skipped: bool

    def __new__(
        cls, status: str, reason: str | None = None, delay_ms: int | None = None
    ) -> Settled:
        answer = super().__new__(cls, status)
        answer.reason = reason
        answer.delay_ms = delay_ms
        answer.changed = None
        answer.not_modified = False
        answer.cut = {}
        answer.revisit_skipped = False
        return answer

    @property
    def over_budget(self) -> bool:
        """A per-domain budget stopped something of this done job: a follow-up or its next
        visit (its results line says ``skipped: budget``)."""
        return bool(self.cut) or self.revisit_skipped

    @classmethod
    def parse(cls, raw: Any) -> Settled:
        """settle-1.lua's answer for one item: ``status``, ``dead:<reason>``,
        ``<status>:<delay ms>`` or ``done:<name>=<n>,...`` (names: ``wire.SETTLE_DONE``)."""
        status, _, detail = str(raw).partition(":")
        if not detail:
            return cls(status)
        if status == "dead":
            return cls(status, reason=detail)
        if status == "done":
            return cls._done(detail)
        return cls(status, delay_ms=int(detail))

    @classmethod
    def _done(cls, detail: str) -> Settled:
        notes = {}
        for part in detail.split(","):
            name, _, n = part.partition("=")
            notes[name] = int(n)
        answer = cls("done")
        if "changed" in notes:
            answer.changed = bool(notes["changed"])
        answer.not_modified = bool(notes.get("not_modified"))
        answer.cut = {k: notes[k] for k in ("max_pages", "max_bytes") if notes.get(k)}
        answer.revisit_skipped = bool(notes.get("revisit_skipped"))
        return answer


def _settled_list(raw: list[Any]) -> list[Settled]:
    return [Settled.parse(x) for x in raw]
