""":class:`ScriptConfig`: the settings the scripts need, in script units (ms, counts), sent
as ``ARGV[2]`` with every call. Split from :mod:`scrapeq.engine.lua.scripts`, which re-exports
it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from scrapeq.engine.model.exits import ExitPool
from scrapeq.engine.model.seen import SeenLayout

#: The limit an adaptive domain starts at (within the bounds): the fixed default before
#: adaptive limits existed.
AUTO_START = 2


@dataclass(frozen=True, slots=True)
class ScriptConfig:
    """The settings scripts need, in script units (ms, counts).

    Built from :class:`scrapeq.engine.config.settings.Settings` by :meth:`from_settings`; sent as
    ``ARGV[2]`` with every call. The fields keep no defaults of their own: every setting's
    default is in :class:`~scrapeq.engine.config.settings.Settings` (docs/reference/settings.md),
    so a field :meth:`from_settings` forgets is an error, not a second, stale default.
    Only the engine's constants (``batch``, ``claim_bytes``) have values here.
    """

    conc: int
    delay_ms: int
    lease_ms: int
    fails: int
    window: int
    rate: float
    min_calls: int
    cool_ms: int
    cool_max_ms: int
    max_trips: int
    g_share: float
    g_min: int
    g_window_ms: int
    max_throttles: int
    max_releases: int
    backoff_base_ms: int
    backoff_cap_ms: int
    #: How long a done job's key is kept (with ``done_at``); 0: deleted at once.
    keep_done_ms: int
    #: Jobs a domain may have enqueued before follow-ups to it are skipped (None: no cap).
    max_pages: int | None
    #: The seen-set's layout (``SeenLayout.stamp``); exact with recrawl_after, its slice;
    #: exact, the bucket count to record when the queue has none (seen_capacity's);
    #: bloom, its size and its chunks' in bits.
    seen_layout: str
    seen_slice_ms: int
    seen_buckets: int
    seen_bits: int
    seen_chunk_bits: int
    #: A domain idle this long (nothing queued or in flight, breaker closed) is forgotten by
    #: housekeeping; 0: never.
    domain_ttl_ms: int
    #: domain_concurrency = auto: adaptive limits (``conc`` is then the starting limit),
    #: within conc_min and conc_max (includes/adaptive.lua).
    auto: bool
    conc_min: int
    conc_max: int
    #: auto: the limit a domain with no learned limit starts at when its head job is urgent
    #: (includes/domain.lua: is_urgent, urgent_start).
    urgent_conc: int
    #: The most urgent lane's offset (ms): a ready job of priority <= now + urgent_ms is
    #: urgent (its enqueue wakes idle workers); None with a single lane.
    urgent_ms: int | None
    #: host | domain | ip: with ip, enqueue files a host under its learned group.
    politeness: str
    #: The exit pool (engine/model/exits.py: ExitPool.wire): ``[[id, tier index], ...]``; empty: no
    #: pool, jobs carry no exit (includes/exits.lua).
    exits: tuple[tuple[str, int], ...]
    #: A banned (exit, domain) pair's first rest and its cap; a dead exit's first cooldown
    #: and its cap; how long a domain stays up a tier before it tries the cheaper one.
    ex_ban_ms: int
    ex_ban_max_ms: int
    ex_cool_ms: int
    ex_cool_max_ms: int
    ex_quiet_ms: int
    #: session = sticky: one exit and one cookie jar per domain (includes/exits.lua).
    sticky: bool
    #: revisit = on: a done job's URL comes back by itself (includes/revisit.lua), within a
    #: budget of rv_budget revisits per domain-hour, every rv_min_ms to rv_max_ms.
    rv: bool
    rv_budget: float
    rv_min_ms: int
    rv_max_ms: int
    #: Bytes a domain may download before its follow-ups and revisits are skipped (None: no
    #: cap).
    max_bytes: int | None
    #: The fetcher setting is ``auto`` (a job naming none, on a domain naming none, is auto)
    #: and the share of auto jobs above http that re-check the cheaper fetcher
    #: (includes/auto.lua).
    fetcher: str
    auto_recheck: float
    # Not settings: constants of the engine, the same for every queue.
    #: Jobs, domains or leases one housekeeping step handles at most.
    batch: int = 100
    #: Bytes of job texts one claim answers at most (one job at least): a claim's reply must
    #: arrive well within the client's socket timeout.
    claim_bytes: int = 8 * 1024 * 1024

    @classmethod
    def from_settings(cls, s: Any, pool: ExitPool | None = None) -> ScriptConfig:
        """Convert a Settings object (seconds) to script units (milliseconds); ``pool``: the
        exit pool already read from ``s`` (else it is read now)."""
        if pool is None:
            pool = ExitPool.from_settings(s)
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
            exits=tuple((i, t) for i, t in pool.wire()),
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
            fetcher=s.fetcher,
            auto_recheck=s.auto_recheck,
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
