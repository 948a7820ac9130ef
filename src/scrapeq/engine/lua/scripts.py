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
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from scrapeq.engine.lua.args import (
    DownloadSample,
    EnqueueSpec,
    Samples,
    Settled,
    Settlement,
    _settled_list,
    download_item,
)
from scrapeq.engine.lua.config import ScriptConfig
from scrapeq.engine.lua.source import SCRIPTS, expand_includes, load_source, map_error
from scrapeq.engine.model.keys import REGISTRY_BUCKETS
from scrapeq.errors import ScriptError

__all__ = [
    "ONCE_OPS",
    "SCRIPTS",
    "Call",
    "Command",
    "DownloadSample",
    "EnqueueSpec",
    "Many",
    "OnceFlag",
    "Op",
    "Renewed",
    "Samples",
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


def _given(**options: Any) -> dict[str, Any]:
    """The optional arguments given (not None): a script reads an absent one as nil, while
    JSON null would reach it as ``cjson.null``, which is not nil."""
    return {name: value for name, value in options.items() if value is not None}


# --- wrappers, one per script ---------------------------------------------------------------


def enqueue(
    specs: Sequence[EnqueueSpec], pid: str | None = None
) -> Call[tuple[list[tuple[str, bool]], bool]]:
    """Add jobs; answers (per job its answer, ``"<id>"``, ``"dup:<id>"``, ``"seen"`` or
    ``"dead:<id>"``, with whether it made urgent work ready now (the script's ``is_urgent``);
    whether the queue has had a unique enqueue: then every job should carry its fingerprint).
    ``pid``: the suffix of the new ids (the partition's, ``.<i>``; None: no suffix).
    """
    n = len(specs)

    def parse(raw: list[Any]) -> tuple[list[tuple[str, bool]], bool]:
        urgent = {int(i) - 1 for i in raw[n + 1 :]}
        return [(str(x), i in urgent) for i, x in enumerate(raw[:n])], bool(int(raw[n]))

    if pid is not None:
        return _call("enqueue", parse, jobs=[s.as_arg() for s in specs], pid=pid)
    return _call("enqueue", parse, jobs=[s.as_arg() for s in specs])


def claim(
    n: int, *, urgent: bool = False, domain: str | None = None
) -> Call[tuple[int, list[str]]]:
    """Claim up to ``n`` jobs; answers (ms until the next due time or -1, job JSON texts).
    ``urgent``: only jobs of the most urgent lane; ``domain``: only that domain's."""

    def parse(raw: list[Any]) -> tuple[int, list[str]]:
        return int(raw[0]), [str(j) for j in raw[1:]]

    return _call("claim", parse, n=n, seed=_seed(), **_given(urgent=urgent or None, domain=domain))


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
    pairs = [{"id": i, "token": t} for i, t in items]
    return _call("heartbeat", parse, items=pairs, **_given(lease_ms=lease_ms))


def downloaded(items: Sequence[tuple[str, int]], samples: Samples = None) -> Call[list[bool]]:
    """Give back the domain slots of claimed jobs whose download is over, (job id, token)
    pairs, with what each download taught of its site (``samples``, one per item, or None);
    answers per item whether its slot is given back (False: the lease is stale, the job is
    its half-open domain's probe, or its sample charges its domain)."""

    def parse(raw: list[Any]) -> list[bool]:
        return [bool(int(x)) for x in raw]

    given = [None] * len(items) if samples is None else samples
    args = [download_item(i, t, s) for (i, t), s in zip(items, given, strict=True)]
    return _call("downloaded", parse, items=args)


def reap(budget: int | None = None) -> Call[tuple[int, int, int]]:
    """Housekeeping; answers (leases reaped, delayed jobs promoted, domains woken)."""

    def parse(raw: list[Any]) -> tuple[int, int, int]:
        return int(raw[0]), int(raw[1]), int(raw[2])

    return _call("reap", parse, seed=_seed(), **_given(budget=budget))


def breaker(domain: str, action: str, cool_ms: int | None = None) -> Call[str]:
    """Reset or trip a domain's breaker; answers its new state."""
    given = _given(cool_ms=cool_ms)
    return _call("breaker", str, domain=domain, action=action, seed=_seed(), **given)


def exit_probe(ids: list[str]) -> Call[list[str]]:
    """End the rest of the pool's exits ``ids`` (``lua/exit_probe-1.lua``); answers, an id
    each, ``probe`` (it was down: the next claim may send it a probe) or ``up``."""
    return _call("exit_probe", lambda raw: [str(x) for x in raw], ids=ids)


def domain_set(
    domain: str,
    delay_ms: int | None = None,
    conc: int | str | None = None,
    fetcher: str | int | None = None,
    *,
    max_pages: int | None = None,
    until_ms: int | None = None,
    crawl_limit: int | None = None,
    wait_for: str | int | None = None,
) -> Call[tuple[int, int, bool, str | None, str | None]]:
    """Set politeness overrides (-1 restores the default; conc may be ``auto``), the
    domain's fetcher (-1: none), its own ``max_pages`` (for capped specs), a wait until
    server ms ``until_ms`` (0 lifts it), a cap on its jobs done (``crawl_limit``, -1: none);
    answers (delay_ms, conc, adaptive, fetcher): conc
    is the limit in force, adaptive whether it adapts, fetcher the domain's own (None:
    none); wait_for: the selector its browser pages wait for (-1: none), answered last."""

    def text(raw: list[Any], i: int) -> str | None:
        found = raw[i] if len(raw) > i else b""
        return (found.decode() if isinstance(found, bytes) else str(found or "")) or None

    def parse(raw: list[Any]) -> tuple[int, int, bool, str | None, str | None]:
        return int(raw[0]), int(raw[1]), bool(int(raw[2])), text(raw, 3), text(raw, 4)

    given = _given(
        delay_ms=delay_ms, conc=conc, fetcher=fetcher, max_pages=max_pages, until_ms=until_ms,
        climit=crawl_limit, wait_for=wait_for,
    )  # fmt: skip
    return _call("domain_set", parse, domain=domain, **given)


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

    return _call("purge", parse, limit=limit, **_given(older_ms=older_ms, domain=domain))


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

    given = _given(cursor=cursor, release=release or None)  # release: only when True
    return _call(
        "log_leader", parse, id=worker_id, ttl_ms=ttl_ms, cursor_ttl_ms=cursor_ttl_ms, **given
    )


def domain_info(domains: Sequence[str]) -> Call[list[dict[str, Any]]]:
    """Per-domain figures (read only) for up to a few hundred domains."""

    def parse(raw: Any) -> list[dict[str, Any]]:
        value = json.loads(raw)
        return value if isinstance(value, list) else []

    return _call("domain_info", parse, domains=list(domains))


def page_info(urls: Sequence[str]) -> Call[list[dict[str, Any]]]:
    """Pages' revisit state (read only, ``lua/page_info-1.lua``): estimated change rate, the
    next visit, the expected freshness; at most 100 URLs of one partition."""

    def parse(raw: Any) -> list[dict[str, Any]]:
        value = json.loads(raw)
        return value if isinstance(value, list) else []

    return _call("page_info", parse, urls=list(urls))


def seen_has(seen: Sequence[dict[str, Any]]) -> Call[list[bool]]:
    """Whether the seen-set holds URLs, by their seen-set arguments (read only,
    ``lua/seen_has-1.lua``); at most 100 URLs of one partition."""
    return _call("seen_has", lambda raw: [bool(int(x)) for x in raw], seen=list(seen))


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


# the once-flags' calls live in .script_once; these names stay importable from here
from scrapeq.engine.lua.once import ONCE_OPS as ONCE_OPS  # noqa: E402
from scrapeq.engine.lua.once import OnceFlag as OnceFlag  # noqa: E402
from scrapeq.engine.lua.once import once as once  # noqa: E402
