"""The Lua scripts: loading, configuration, and one typed wrapper per script.

The Lua files under ``lua/`` are the single source of truth for every state change; this
module only packs arguments, names the script and parses its answer. Each wrapper returns a
:class:`Call` (script name, JSON arguments, parser) so the sync and the async queue run the
very same calls: the I/O is theirs, the meaning is here.

Every script takes ``KEYS[1]`` = the queue's key prefix and ``ARGV`` = (clock offset ms,
configuration JSON, call arguments JSON); see ``lua/includes/common.lua``.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

import orjson

from scrapeq.engine.exits import ExitPool
from scrapeq.engine.keys import REGISTRY_BUCKETS
from scrapeq.engine.seen import DEFAULT_SEEN_BUCKETS, SeenLayout
from scrapeq.engine.wire import SETTLE_ITEM
from scrapeq.errors import ConfigError, NotFound, PayloadTooLarge, RedisUnavailable, ScriptError

__all__ = [
    "ONCE_OPS",
    "SCRIPTS",
    "Call",
    "Command",
    "Many",
    "OnceFlag",
    "Op",
    "Renewed",
    "ScriptConfig",
    "Settled",
    "Settlement",
    "Step",
    "expand_includes",
    "load_source",
    "map_error",
    "server_ms_op",
]

T = TypeVar("T")

#: Every script: name -> file under ``lua/`` (``<action>-<numKeys>.lua``).
SCRIPTS: dict[str, str] = {
    "audit": "audit-1.lua",
    "breaker": "breaker-1.lua",
    "cancel": "cancel-1.lua",
    "claim": "claim-1.lua",
    "clear": "clear-1.lua",
    "domain_info": "domain_info-1.lua",
    "domains": "domains-1.lua",
    "domain_set": "domain_set-1.lua",
    "host_group": "host_group-1.lua",
    "enqueue": "enqueue-1.lua",
    "heartbeat": "heartbeat-1.lua",
    "job_info": "job_info-1.lua",
    "log_leader": "log_leader-1.lua",
    "migrate": "migrate-1.lua",
    "once": "once-1.lua",
    "partitions": "partitions-1.lua",
    "purge": "purge-1.lua",
    "reap": "reap-1.lua",
    "renew": "renew-1.lua",
    "replay": "replay-1.lua",
    "settle": "settle-1.lua",
    "status": "status-1.lua",
}

_INCLUDE = re.compile(r"^--@include (\w+)\s*$", re.MULTILINE)

#: Error codes scripts raise with ``redis.error_reply('SQ_<CODE> detail')``, each before
#: their first write (``lua/includes/check.lua``): a refusal changed nothing.
_ERROR_CODES: dict[str, Callable[[str, str], Exception]] = {
    "SQ_UNKNOWN_DOMAIN": lambda detail, script: NotFound(f"unknown domain {detail!r}"),
    "SQ_BAD_ARG": lambda detail, script: ScriptError(f"{script} refused its arguments: {detail}"),
    "SQ_BAD_CONFIG": lambda detail, script: _config_error(detail, script),
    "SQ_SEEN_LAYOUT": lambda detail, script: _seen_layout_error(detail),
    "SQ_PARTITIONS": lambda detail, script: _partitions_error(detail),
    "SQ_SCHEMA": lambda detail, script: _schema_error(detail),
}


def _read(relative: str) -> str:
    return resources.files("scrapeq.engine").joinpath("lua", relative).read_text(encoding="utf-8")


@cache
def load_source(name: str) -> str:
    """Return the Lua source of script ``name`` with its ``--@include`` lines expanded.

    Each include (``lua/includes/<name>.lua``) is inserted once, at its first mention.
    """
    return expand_includes(_read(SCRIPTS[name]))


def expand_includes(source: str) -> str:
    """Expand the ``--@include <name>`` lines of a Lua ``source`` (as :func:`load_source`
    does), for a script outside the table: a benchmark's probe, a test's."""
    seen: set[str] = set()

    def expand(match: re.Match[str]) -> str:
        include = match.group(1)
        if include in seen:
            return ""
        seen.add(include)
        return _INCLUDE.sub(expand, _read(f"includes/{include}.lua"))

    return _INCLUDE.sub(expand, source)


#: Error replies that say Redis cannot take writes for now (failover, disk, memory,
#: replicas, loading): transient, so they map to RedisUnavailable and callers retry.
_TRANSIENT = ("READONLY", "NOREPLICAS", "MISCONF", "OOM", "LOADING", "BUSY", "TRYAGAIN",
              "CLUSTERDOWN", "MASTERDOWN")  # fmt: skip


def map_error(message: str, script: str = "a script") -> Exception:
    """Map a script's error reply to the library's exception for it.

    Args:
        message: the error reply's text.
        script: the script's name (``SCRIPTS``), for the message of a refused argument.

    Returns:
        ``SQ_BAD_ARG`` (a call argument the script refused) a :class:`ScriptError`: the client
        sent what its own checks should have refused; ``SQ_BAD_CONFIG`` a
        :class:`ConfigError` naming the configuration field; the other codes as documented
        in the scripts' headers; anything else a :class:`ScriptError`.
    """
    text = message.removeprefix("ERR ").strip()
    if "invalid bulk length" in text:
        return PayloadTooLarge(
            f"payload too large: Redis refused a call over its proto-max-bulk-len ({text})"
        )
    if any(f"-{code} " in text or text.startswith(code) for code in _TRANSIENT):
        return RedisUnavailable(f"Redis refused the call for now: {text}")
    # the first code in the text: a refusal quotes the value it refused, which may hold one
    found = sorted((text.find(code), code) for code in _ERROR_CODES if code in text)
    if found:
        at, code = found[0]
        return _ERROR_CODES[code](text[at + len(code) :].strip(), script)
    return ScriptError(text)


def _config_error(detail: str, script: str) -> ConfigError:
    field, _, why = detail.partition(": ")
    return ConfigError(field, f"{script} refused this configuration field: {why}")


def _partitions_error(detail: str) -> ConfigError:
    stored, given = ([*detail.split(), "?", "?"])[:2]
    return ConfigError(
        "partitions",
        f"this queue has {stored} partition(s) and these settings say {given}: changing "
        "partitions needs an empty queue (scrapeq queue clear), or set partitions to "
        f"{stored}",
    )


def _schema_error(detail: str) -> ScriptError:
    stored, known = ([*detail.split(), "?", "?"])[:2]
    return ScriptError(
        f"this queue's data is at schema {stored}, which this scrapeq (schema {known}) does "
        "not know: a newer scrapeq wrote it; upgrade scrapeq to use this queue"
    )


def _seen_layout_error(detail: str) -> ConfigError:
    stored, given = ([*detail.split(), "?", "?"])[:2]
    return ConfigError(
        "seen_filter",
        f"this queue's seen-set was built as {stored} and these settings make {given}: every "
        "client of a queue must agree on seen_filter, recrawl_after and, for a Bloom filter, "
        "seen_capacity and seen_error_rate (to change them, delete the queue's sq:{Q}:seen* "
        "keys and the 'seen' field of sq:{Q}:meta)",
    )


#: The limit an adaptive domain starts at (within the bounds): the fixed default before
#: adaptive limits existed.
AUTO_START = 2


@dataclass(frozen=True, slots=True)
class ScriptConfig:
    """The settings scripts need, in script units (ms, counts).

    Built from :class:`scrapeq.engine.settings.Settings` by :meth:`from_settings`; sent as
    ``ARGV[2]`` with every call.
    """

    conc: int = 2
    delay_ms: int = 0
    lease_ms: int = 60_000
    batch: int = 100
    fails: int = 5
    window: int = 20
    rate: float = 0.5
    min_calls: int = 10
    cool_ms: int = 120_000
    cool_max_ms: int = 3_600_000
    max_trips: int = 8
    g_share: float = 0.5
    g_min: int = 5
    g_window_ms: int = 60_000
    max_throttles: int = 20
    max_releases: int = 20
    backoff_base_ms: int = 15_000
    backoff_cap_ms: int = 3_600_000
    #: Bytes of job texts one claim answers at most (one job at least): a claim's reply must
    #: arrive well within the client's socket timeout.
    claim_bytes: int = 8 * 1024 * 1024
    #: How long a done job's key is kept (with ``done_at``); 0: deleted at once.
    keep_done_ms: int = 0
    #: Jobs a domain may have enqueued before follow-ups to it are skipped (None: no cap).
    max_pages: int | None = None
    #: The seen-set's layout (``SeenLayout.stamp``); exact with recrawl_after, its slice;
    #: exact, the bucket count to record when the queue has none (seen_capacity's);
    #: bloom, its size and its chunks' in bits.
    seen_layout: str = "exact"
    seen_slice_ms: int = 0
    seen_buckets: int = DEFAULT_SEEN_BUCKETS
    seen_bits: int = 0
    seen_chunk_bits: int = 0
    #: A domain idle this long (nothing queued or in flight, breaker closed) is forgotten by
    #: housekeeping; 0: never.
    domain_ttl_ms: int = 0
    #: domain_concurrency = auto: adaptive limits (``conc`` is then the starting limit),
    #: within conc_min and conc_max (includes/adaptive.lua).
    auto: bool = False
    conc_min: int = 1
    conc_max: int = 32
    #: auto: the limit a domain with no learned limit starts at when its head job is urgent
    #: (includes/domain.lua: is_urgent, urgent_start).
    urgent_conc: int = 16
    #: The most urgent lane's offset (ms): a ready job of priority <= now + urgent_ms is
    #: urgent (its enqueue wakes idle workers); None with a single lane.
    urgent_ms: int | None = None
    #: host | domain | ip: with ip, enqueue files a host under its learned group.
    politeness: str = "host"
    #: The exit pool (engine/exits.py: ExitPool.wire): ``[[id, tier index], ...]``; empty: no
    #: pool, jobs carry no exit (includes/exits.lua).
    exits: tuple[tuple[str, int], ...] = ()
    #: A banned (exit, domain) pair's first rest and its cap; a dead exit's first cooldown
    #: and its cap; how long a domain stays up a tier before it tries the cheaper one.
    ex_ban_ms: int = 300_000
    ex_ban_max_ms: int = 21_600_000
    ex_cool_ms: int = 60_000
    ex_cool_max_ms: int = 3_600_000
    ex_quiet_ms: int = 900_000
    #: session = sticky: one exit and one cookie jar per domain (includes/exits.lua).
    sticky: bool = False
    #: revisit = on: a done job's URL comes back by itself (includes/revisit.lua), within a
    #: budget of rv_budget revisits per domain-hour, every rv_min_ms to rv_max_ms.
    rv: bool = False
    rv_budget: float = 360.0
    rv_min_ms: int = 60_000
    rv_max_ms: int = 30 * 86_400_000
    #: Bytes a domain may download before its follow-ups and revisits are skipped (None: no
    #: cap).
    max_bytes: int | None = None

    @classmethod
    def from_settings(cls, s: Any) -> ScriptConfig:
        """Convert a Settings object (seconds) to script units (milliseconds)."""
        seen = SeenLayout.from_settings(s)
        auto = s.domain_concurrency == "auto"
        conc_min, conc_max = s.domain_concurrency_min, s.domain_concurrency_max
        return cls(
            conc=min(max(AUTO_START, conc_min), conc_max) if auto else s.domain_concurrency,
            delay_ms=_ms(s.domain_delay),
            lease_ms=_ms(s.lease),
            fails=s.breaker_failures,
            window=s.breaker_window,
            rate=s.breaker_rate,
            min_calls=s.breaker_min_calls,
            cool_ms=_ms(s.breaker_cooldown),
            cool_max_ms=_ms(s.breaker_cooldown_max),
            max_trips=s.breaker_max_trips,
            g_share=s.global_trip_share,
            g_min=s.global_trip_min,
            g_window_ms=_ms(s.global_trip_window),
            max_throttles=s.max_throttles,
            max_releases=s.max_releases,
            backoff_base_ms=_ms(s.backoff_base),
            backoff_cap_ms=_ms(s.backoff_cap),
            keep_done_ms=_ms(s.keep_done),
            max_pages=s.max_pages,
            seen_layout=seen.stamp,
            seen_slice_ms=seen.slice_ms,
            seen_buckets=seen.buckets,
            seen_bits=seen.bits,
            seen_chunk_bits=seen.chunk_bits,
            domain_ttl_ms=_ms(s.domain_ttl),
            auto=auto,
            conc_min=conc_min,
            conc_max=conc_max,
            urgent_conc=s.domain_concurrency_urgent,
            urgent_ms=s.lanes.lanes[0].offset_ms if len(s.lanes.lanes) > 1 else None,
            politeness=s.politeness,
            exits=tuple((i, t) for i, t in ExitPool.from_settings(s).wire()),
            ex_ban_ms=_ms(s.proxy_ban_cooldown),
            ex_ban_max_ms=_ms(s.proxy_ban_cooldown_max),
            ex_cool_ms=_ms(s.proxy_cooldown),
            ex_cool_max_ms=_ms(s.proxy_cooldown_max),
            ex_quiet_ms=_ms(s.proxy_tier_quiet),
            sticky=s.session == "sticky",
            rv=s.revisit == "on",
            rv_budget=_revisit_budget(s),
            rv_min_ms=_ms(s.revisit_min_interval),
            rv_max_ms=max(_ms(s.revisit_max_interval), _ms(s.revisit_min_interval)),
            max_bytes=s.max_bytes,
        )

    def to_json(self) -> str:
        return json.dumps({f: getattr(self, f) for f in self.__dataclass_fields__})


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _revisit_budget(s: Any) -> float:
    """Revisits per domain-hour: ``revisit_budget``, else half of what the politeness delay
    allows (``domain_delay``), else 360 (one every 10 s)."""
    budget: float | None = s.revisit_budget
    if budget is not None:
        return float(budget)
    delay: float = s.domain_delay
    return min(1800.0 / delay, 360.0) if delay > 0 else 360.0


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One script call: which script, its ``ARGV[3]`` JSON, and how to read its answer.

    ``prefix``: the key prefix (``KEYS[1]``) of the partition it runs on; None: the queue's
    own (``sq:{Q}:``, the only one with ``partitions = 1``).
    """

    script: str
    args: str
    parse: Callable[[Any], T]
    prefix: str | None = None

    def on(self, prefix: str) -> Call[T]:
        """This call on the partition of key prefix ``prefix``."""
        return dataclasses.replace(self, prefix=prefix)


@dataclass(frozen=True, slots=True)
class Command:
    """A read-only Redis command an operation wants run.

    Attributes:
        args: the command and its arguments.
        tolerant: an error reply (a command an ACL user may not run) answers None instead
            of raising.
    """

    args: tuple[Any, ...]
    tolerant: bool = False


@dataclass(frozen=True, slots=True)
class Many:
    """Steps sent together (to several partitions, so several nodes): answered as a list in
    their order. The async queue sends them concurrently, the sync one in turn."""

    steps: tuple[Call[Any] | Command, ...]


Step = Call[Any] | Command | Many
#: An operation: a generator of steps that receives each step's answer and returns T.
Op = Generator[Step, Any, T]


def server_ms_op(offset_ms: int = 0) -> Op[int]:
    """The server's clock (TIME) in ms, plus ``offset_ms``: the clock the scripts read."""
    seconds, micros = yield Command(("TIME",))
    return int(seconds) * 1000 + int(micros) // 1000 + offset_ms


def _seed() -> int:
    return random.getrandbits(31)


def _call(script: str, parse: Callable[[Any], T], **args: Any) -> Call[T]:
    try:
        # The common case, and the hot one (a settle batch): orjson, ~10x faster than json.
        text = orjson.dumps(args).decode("utf-8")
    except TypeError:
        # What orjson refuses: lone surrogates (text decoded with surrogateescape), which
        # would make cjson refuse the whole call, become "?" here, so one odd error message
        # cannot block a batch; integers over 64 bits and non-str keys are written by json.
        text = json.dumps(args, separators=(",", ":"), ensure_ascii=False)
        text = text.encode("utf-8", "replace").decode("utf-8")
    return Call(script, text, parse)


# --- wrappers, one per script ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EnqueueSpec:
    """One job to enqueue, already validated (see ``Queue.prepare``).

    Attributes:
        unique: ``pending`` or ``seen`` (None: no de-duplication asked).
        fingerprint: the URL's :func:`~scrapeq.engine.urls.fingerprint`; set for unique jobs, and
            for the others once the queue has had a unique enqueue (they take it when free).
        seen: the seen-set argument (``SeenLayout.arg``) when ``unique`` is ``seen``.
        request_json: what the job sends, stored form (``Request.to_text``); None: a GET.
        weight: the page's weight for revisits (None: 1); a sitemap's ``priority`` x 2 by
            default (0.5 its default: weight 1).
        lastmod: a sitemap's ``lastmod`` (epoch s): with revisit on, newer than the URL's last
            visit makes it due now (the seen-set and a pending revisit do not hold it back).
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
        if self.payload_json is not None:
            arg["payload"] = self.payload_json
        if self.expires_ms is not None:
            arg["expires"] = self.expires_ms
        if self.fingerprint is not None:
            arg["fp"] = self.fingerprint
        if self.unique is not None:
            arg["unique"] = self.unique
        if self.seen is not None:
            arg["seen"] = self.seen
        if self.depth:
            arg["depth"] = self.depth
        if self.parent is not None:
            arg["parent"] = self.parent
        if self.request_json is not None:
            arg["request"] = self.request_json
        if self.parent_url is not None:
            arg["parent_url"] = self.parent_url
        if self.weight is not None:
            arg["weight"] = self.weight
        if self.lastmod is not None:
            arg["lastmod"] = self.lastmod
        return arg


def enqueue(specs: Sequence[EnqueueSpec], pid: str | None = None) -> Call[tuple[list[str], bool]]:
    """Add jobs; answers (per job ``"<id>"``, ``"dup:<id>"``, ``"seen"`` or ``"dead:<id>"``,
    whether the queue has had a unique enqueue: then every job should carry its fingerprint).
    ``pid``: the suffix of the new ids (the partition's, ``.<i>``; None: no suffix).
    """

    def parse(raw: list[Any]) -> tuple[list[str], bool]:
        return [str(x) for x in raw[:-1]], bool(int(raw[-1]))

    if pid is not None:
        return _call("enqueue", parse, jobs=[s.as_arg() for s in specs], pid=pid)
    return _call("enqueue", parse, jobs=[s.as_arg() for s in specs])


def claim(n: int) -> Call[tuple[int, list[str]]]:
    """Claim up to ``n`` jobs; answers (ms until the next due time or -1, job JSON texts)."""

    def parse(raw: list[Any]) -> tuple[int, list[str]]:
        return int(raw[0]), [str(j) for j in raw[1:]]

    return _call("claim", parse, n=n, seed=_seed())


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
        jar: with ``session = sticky``, the domain's cookie jar after this attempt (text, at
            most 16 KiB), kept when the job's exit is still the domain's session exit.
        final: with ``done``, the spec of the URL the fetch ended at after redirects (its
            seen-set argument): it joins the seen-set in this call when the queue has one,
            so a link to it met later is skipped (``includes/seen.lua``, ``seen_mark``).
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
    jar: str | None = None
    not_modified: bool = False
    changed: bool | None = None
    signature: str | None = None
    etag: str | None = None
    last_modified: str | None = None

    def as_arg(self) -> dict[str, Any]:
        """This settlement as a settle item: the wire names of ``wire.SETTLE_ITEM``, a field
        at its default left out."""
        fields: dict[str, Any] = {
            "job_id": self.job_id,
            "token": self.token,
            "outcome": self.outcome,
            "domain_failed": self.domain_failed,
            "delay_ms": self.delay_ms or None,
            "backoff": self.backoff or None,
            "retry_after_ms": self.retry_after_ms or None,
            "kind": self.kind,
            "message": self.message,
            "reason": self.reason,
            "shutdown": self.shutdown or None,
            "follow": [spec.as_arg() for spec in self.follow] or None,
            "final": self.final.seen if self.final is not None else None,
            "latency_ms": self.latency_ms,
            "overload": (self.overload and self.latency_ms is not None) or None,
            "exit_result": self.exit_result,
            "bytes_in": self.bytes_in,
            "jar": self.jar,
            "not_modified": self.not_modified or None,
            "changed": self.changed,
            "signature": self.signature,
            "etag": self.etag,
            "last_modified": self.last_modified,
        }
        return {SETTLE_ITEM[name]: value for name, value in fields.items() if value is not None}


class Settled(str):
    """A settle answer: the status itself (``done``, ``retried``, ``throttled``,
    ``released``, ``dead`` or ``stale``, this string), with what the settle script decided
    beside it: ``reason``, the dead-letter reason of a ``dead`` job (``max_attempts``,
    ``max_throttles``, ``max_releases``, or a fail's reason), and ``delay_ms``, the backoff it
    drew for a :attr:`Settlement.backoff` item that was retried or released (else None)."""

    reason: str | None
    delay_ms: int | None

    def __new__(
        cls, status: str, reason: str | None = None, delay_ms: int | None = None
    ) -> Settled:
        answer = super().__new__(cls, status)
        answer.reason = reason
        answer.delay_ms = delay_ms
        return answer

    @classmethod
    def parse(cls, raw: Any) -> Settled:
        """settle-1.lua's answer for one item: ``status``, ``dead:<reason>`` or
        ``<status>:<delay ms>``."""
        status, _, detail = str(raw).partition(":")
        if not detail:
            return cls(status)
        if status == "dead":
            return cls(status, reason=detail)
        return cls(status, delay_ms=int(detail))


def _settled_list(raw: list[Any]) -> list[Settled]:
    return [Settled.parse(x) for x in raw]


def settle(items: Sequence[Settlement], pid: str | None = None) -> Call[list[Settled]]:
    """Settle many jobs; answers per item done/retried/throttled/released/dead/stale
    (:class:`Settled`: with the dead-letter reason, or the backoff drawn).
    ``pid``: the suffix of the follow-ups' new ids (as :func:`enqueue`)."""
    if pid is not None:
        args = [i.as_arg() for i in items]
        return _call("settle", _settled_list, items=args, seed=_seed(), pid=pid)
    return _call("settle", _settled_list, items=[i.as_arg() for i in items], seed=_seed())


def heartbeat(
    items: Sequence[tuple[str, int]], lease_ms: int | None = None, *, handling: bool = False
) -> Call[list[bool]]:
    """Extend leases of (job id, token) pairs; answers per item whether it was renewed.

    ``handling``: renew nothing, record instead that each job's handler runs (an expiry of
    its lease then spends the attempt); answers whether each was recorded."""

    def parse(raw: list[Any]) -> list[bool]:
        return [bool(int(x)) for x in raw]

    if handling:
        marked = [{"id": i, "token": t, "h": True} for i, t in items]
        return _call("heartbeat", parse, items=marked)
    args: dict[str, Any] = {"items": [{"id": i, "token": t} for i, t in items]}
    if lease_ms is not None:
        args["lease_ms"] = lease_ms
    return _call("heartbeat", parse, **args)


def reap(budget: int | None = None) -> Call[tuple[int, int, int]]:
    """Housekeeping; answers (leases reaped, delayed jobs promoted, domains woken)."""

    def parse(raw: list[Any]) -> tuple[int, int, int]:
        return int(raw[0]), int(raw[1]), int(raw[2])

    args: dict[str, Any] = {"seed": _seed()}
    if budget is not None:
        args["budget"] = budget
    return _call("reap", parse, **args)


def breaker(domain: str, action: str, cool_ms: int | None = None) -> Call[str]:
    """Reset or trip a domain's breaker; answers its new state."""
    args: dict[str, Any] = {"domain": domain, "action": action, "seed": _seed()}
    if cool_ms is not None:
        args["cool_ms"] = cool_ms
    return _call("breaker", str, **args)


def domain_set(
    domain: str, delay_ms: int | None = None, conc: int | str | None = None
) -> Call[tuple[int, int, bool]]:
    """Set politeness overrides (-1 restores the default; conc may be ``auto``); answers
    (delay_ms, conc, adaptive): conc is the limit in force, adaptive whether it adapts."""

    def parse(raw: list[Any]) -> tuple[int, int, bool]:
        return int(raw[0]), int(raw[1]), bool(int(raw[2]))

    args: dict[str, Any] = {"domain": domain}
    if delay_ms is not None:
        args["delay_ms"] = delay_ms
    if conc is not None:
        args["conc"] = conc
    return _call("domain_set", parse, **args)


def host_group(host: str, key: str) -> Call[str]:
    """``politeness = ip``: file ``host`` under group ``key`` unless it has one; answers its
    group key now."""

    def parse(raw: Any) -> str:
        return raw.decode() if isinstance(raw, bytes) else str(raw)

    return _call("host_group", parse, host=host, key=key)


@dataclass(frozen=True, slots=True)
class ReplayAnswer:
    moved: int
    remaining: int
    skipped: int
    duplicates: list[str]
    missing: list[str]


def replay(
    mode: str,
    *,
    ids: Sequence[str] = (),
    domain: str | None = None,
    reset: bool = False,
    limit: int = 100,
    offset: int = 0,
) -> Call[ReplayAnswer]:
    """Replay dead letters (mode ``ids``, ``domain`` or ``all``), a bounded slice."""

    def parse(raw: list[Any]) -> ReplayAnswer:
        n_dups = int(raw[3])
        dups, missing = raw[4 : 4 + n_dups], raw[4 + n_dups :]
        return ReplayAnswer(
            int(raw[0]), int(raw[1]), int(raw[2]), [str(x) for x in dups], [str(x) for x in missing]
        )

    return _call(
        "replay",
        parse,
        mode=mode,
        ids=list(ids),
        domain=domain,
        reset=reset,
        limit=limit,
        offset=offset,
    )


def purge(
    older_ms: int | None = None, domain: str | None = None, limit: int = 500
) -> Call[tuple[int, int]]:
    """Delete dead letters; answers (purged now, matching ones left)."""

    def parse(raw: list[Any]) -> tuple[int, int]:
        return int(raw[0]), int(raw[1])

    args: dict[str, Any] = {"limit": limit}
    if older_ms is not None:
        args["older_ms"] = older_ms
    if domain is not None:
        args["domain"] = domain
    return _call("purge", parse, **args)


@dataclass(frozen=True, slots=True)
class CancelSlice:
    """What one ``cancel_domain`` call did (see ``lua/cancel-1.lua``).

    Attributes:
        cancelled: jobs cancelled by this call.
        ready_left: jobs still in the domain's ready queue.
        delayed_left: the domain's delayed counter after this call.
        scan_end: the delayed scan is over (the end of the set, or the counter reached 0).
        cursor: where the next call resumes the delayed scan: (score, members of that score
            already passed).
        inflight: the domain's jobs in flight (never cancelled by a domain call).
    """

    cancelled: int
    ready_left: int
    delayed_left: int
    scan_end: bool
    cursor: tuple[str, int]
    inflight: int


#: Where a delayed scan starts: before the lowest score, nothing passed.
SCAN_START = ("-inf", 0)


def cancel_ids(ids: Sequence[str], force: bool = False) -> Call[list[str]]:
    """Cancel jobs by id; answers per id ``cancelled``, ``inflight`` (refused without
    ``force``), ``dead``, ``done``, ``unknown`` or ``corrupt``."""
    return _call("cancel", _str_list, mode="ids", ids=list(ids), force=force)


def cancel_domain(
    domain: str, cursor: tuple[str, int] = SCAN_START, limit: int = 500
) -> Call[CancelSlice]:
    """Cancel a slice of a domain's pending jobs: its ready queue's head first, then delayed
    jobs found from ``cursor`` on; at most ``limit`` jobs examined."""

    def parse(raw: list[Any]) -> CancelSlice:
        cursor = (str(raw[4]), int(raw[5]))
        return CancelSlice(
            int(raw[0]), int(raw[1]), int(raw[2]), bool(int(raw[3])), cursor, int(raw[6])
        )

    return _call(
        "cancel",
        parse,
        mode="domain",
        domain=domain,
        after=cursor[0],
        skip=cursor[1],
        limit=limit,
    )


def clear(cursor: str = "0", count: int = 500, *, markers: bool = False) -> Call[tuple[str, int]]:
    """Delete one SCAN slice of the queue's keys but its marker keys (``markers=True``:
    those only); answers (next cursor, keys deleted)."""

    def parse(raw: list[Any]) -> tuple[str, int]:
        return str(raw[0]), int(raw[1])

    if markers:
        return _call("clear", parse, markers=True)
    return _call("clear", parse, cursor=cursor, count=count)


@dataclass(frozen=True, slots=True)
class Renewed:
    """What ``lua/renew-1.lua`` did (summed over its slices and partitions).

    Attributes:
        seen_keys: keys of the seen-set deleted.
        flags: once-per-crawl flags deleted (the Scrapy scheduler's start flag).
        domains: domains whose count of jobs enqueued (what ``max_pages`` caps) went back to 0.
    """

    seen_keys: int = 0
    flags: int = 0
    domains: int = 0

    def __add__(self, other: Renewed) -> Renewed:
        return Renewed(
            self.seen_keys + other.seen_keys, self.flags + other.flags,
            self.domains + other.domains,
        )  # fmt: skip


def renew(cursor: str = "0", count: int = 500) -> Call[tuple[str, Renewed]]:
    """Forget one SCAN slice of what the queue has seen (a new crawl); answers (next cursor,
    what it did)."""

    def parse(raw: list[Any]) -> tuple[str, Renewed]:
        return str(raw[0]), Renewed(int(raw[1]), int(raw[2]), int(raw[3]))

    return _call("renew", parse, cursor=cursor, count=count)


@dataclass(frozen=True, slots=True)
class JobPlace:
    """Where one job is, as ``lua/job_info-1.lua`` answers (read-only, atomic).

    Attributes:
        now_ms: the Redis clock when it looked.
        place: ``ready``, ``delayed``, ``inflight``, ``dead``, ``done``, ``unplaced`` or
            ``unknown`` (no job key).
        score: the place's score (ms, or the priority for ``ready``); None when it has none.
        position, depth: ``ready``: 1-based rank in its domain's queue and that queue's size.
        ttl_ms: the job key's time to live (None: no TTL).
        text: the stored job text (None when unknown).
    """

    now_ms: int
    place: str
    score: int | None
    position: int | None
    depth: int | None
    ttl_ms: int | None
    text: str | None


def job_info(job_id: str) -> Call[JobPlace]:
    """Where job ``job_id`` is (read only)."""

    def parse(raw: list[Any]) -> JobPlace:
        score = str(raw[2])
        position, depth, ttl = int(raw[3]), int(raw[4]), int(raw[5])
        return JobPlace(
            int(raw[0]),
            str(raw[1]),
            int(float(score)) if score else None,
            position if position > 0 else None,
            depth if position > 0 else None,
            ttl if ttl >= 0 else None,
            str(raw[6]) if raw[6] else None,
        )

    return _call("job_info", parse, id=job_id)


def audit(items: Sequence[dict[str, Any]], repair: bool) -> Call[list[tuple[bool, bool, str]]]:
    """Confirm (and with ``repair`` fix) suspected problems; answers per item
    (confirmed, repaired, detail). Items are documented in ``lua/audit-1.lua``."""

    def parse(raw: list[Any]) -> list[tuple[bool, bool, str]]:
        return [(bool(int(c)), bool(int(r)), str(d)) for c, r, d in raw]

    return _call("audit", parse, items=list(items), repair=repair, seed=_seed())


def domain_names(first: int, stop: int) -> Call[list[str]]:
    """The names in the domain registry's buckets ``first <= b < stop`` (read only; bucket 0's
    call adds a not-yet-migrated registry's names, which may repeat one)."""
    return _call("domains", lambda raw: [str(d) for d in raw], **{"from": first, "to": stop})


#: Registry buckets read by one ``domains-1.lua`` call.
_REGISTRY_SLICE = 128


def registry_names_op() -> Op[list[str]]:
    """Every domain in the queue's registry, sorted: ``domains-1.lua`` a slice of buckets a
    call, so a registry of a million domains is not one long script."""
    names: set[str] = set()
    for first in range(0, REGISTRY_BUCKETS, _REGISTRY_SLICE):
        names.update((yield domain_names(first, first + _REGISTRY_SLICE)))
    return sorted(names)


def status(lanes: Sequence[str], top: int = 0) -> Call[dict[str, Any]]:
    """Queue-wide figures (read only); with ``top``, the names of at most that many domains
    worth detailing (``top`` in the answer; see ``lua/status-1.lua``)."""
    if top:
        return _call("status", _json_obj, lanes=list(lanes), top=top)
    return _call("status", _json_obj, lanes=list(lanes))


@dataclass(frozen=True, slots=True)
class LeaderAnswer:
    """What :func:`log_leader` answers.

    Attributes:
        state: 0 another worker leads (or this one released), 1 this one leads (renewed),
            2 this one leads from now on.
        start: (state 2) the event id to read after; ``""`` otherwise.
        behind: (state 0) events after the stored cursor wait to be logged.
    """

    state: int
    start: str
    behind: bool


def log_leader(
    worker_id: str,
    ttl_ms: int,
    cursor_ttl_ms: int,
    *,
    cursor: str | None = None,
    release: bool = False,
) -> Call[LeaderAnswer]:
    """Take, renew or release the log leader's lease (``lua/log_leader-1.lua``)."""

    def parse(raw: list[Any]) -> LeaderAnswer:
        return LeaderAnswer(int(raw[0]), str(raw[1]), bool(int(raw[2])))

    args: dict[str, Any] = {"id": worker_id, "ttl_ms": ttl_ms, "cursor_ttl_ms": cursor_ttl_ms}
    if cursor is not None:
        args["cursor"] = cursor
    if release:
        args["release"] = True
    return _call("log_leader", parse, **args)


def domain_info(domains: Sequence[str]) -> Call[list[dict[str, Any]]]:
    """Per-domain figures (read only) for up to a few hundred domains."""

    def parse(raw: Any) -> list[dict[str, Any]]:
        value = json.loads(raw)
        return value if isinstance(value, list) else []

    return _call("domain_info", parse, domains=list(domains))


def partitions(given: int) -> Call[str]:
    """Record (on a queue's first partitioned use) or check the queue's number of partitions
    (``lua/partitions-1.lua``); refused with ``SQ_PARTITIONS`` when it differs."""
    return _call("partitions", str, parts=given)


#: Items a migration moves at most in one call (``lua/migrate-1.lua``): a huge queue is
#: migrated in slices, so no call blocks Redis for long.
MIGRATE_BUDGET = 1000


def migrate(*, create: bool, budget: int = MIGRATE_BUDGET) -> Call[tuple[int, bool]]:
    """One slice of bringing a queue's key space to the current schema (``lua/migrate-1.lua``):
    answers (its schema now, 0 when it has none; whether to call again). ``create`` stamps a
    key space with no key yet. Refused with ``SQ_SCHEMA`` when the queue's schema is newer."""

    def parse(raw: list[Any]) -> tuple[int, bool]:
        return int(raw[0]), bool(int(raw[1]))

    return _call("migrate", parse, create=create, budget=budget)


def _str_list(raw: list[Any]) -> list[str]:
    return [str(x) for x in raw]


def _json_obj(raw: Any) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ScriptError("status script returned a non-object")
    return value


@dataclass(frozen=True, slots=True)
class OnceFlag:
    """A once-flag's state after a call (``lua/once-1.lua``).

    Attributes:
        won: this call set the flag (``take``), or the caller holds it (``renew``,
            ``release``).
        holder: the holder's text; ``""`` when the flag is not set.
        ttl_ms: the flag's time left in ms: -1 kept for good, -2 not set.
    """

    won: bool
    holder: str
    ttl_ms: int

    @property
    def kept(self) -> bool:
        """Whether the flag is set for good (its work is complete)."""
        return self.ttl_ms == -1

    @property
    def leased(self) -> bool:
        """Whether the flag is set for a while only (its holder is at work)."""
        return self.ttl_ms >= 0


#: What a call may do to a once-flag (``lua/once-1.lua``).
ONCE_OPS = ("take", "renew", "release", "peek")


def once(name: str, holder: str, *, op: str = "take", lease_ms: int = 0) -> Call[OnceFlag]:
    """Take, renew, release or read the queue's flag ``name`` (``lua/once-1.lua``)."""

    def parse(raw: list[Any]) -> OnceFlag:
        return OnceFlag(bool(int(raw[0])), str(raw[1]), int(raw[2]))

    return _call("once", parse, name=name, holder=holder, op=op, lease_ms=lease_ms)
