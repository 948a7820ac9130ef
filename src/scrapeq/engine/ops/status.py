"""What ``status``, ``counts``, ``figures`` and ``history`` answer: the scripts' raw replies
shaped into the dicts the queue returns (no I/O here), and the alarms status raises."""

from __future__ import annotations

from typing import Any

from scrapeq.engine.model.job import ms_to_iso

__all__ = [
    "HISTORY_EVENTS",
    "HISTORY_MINUTES",
    "HISTORY_OUTCOMES",
    "LINK_FIGURES",
    "REVISIT_FIELDS",
    "SPIKE_FACTOR",
    "SPIKE_MIN",
    "alarms",
    "breaker_counts",
    "browsers_alarm",
    "eviction_alarm",
    "learned_timing",
    "shape_counts",
    "shape_domain",
    "shape_figures",
    "shape_history",
    "shape_revisits",
    "shape_status",
]


#: What became of a crawl's links, as the enqueue include counts them (stats field ->
#: figure): a job made, already seen (or pending), a new URL cut by max_pages.
LINK_FIGURES = {
    "links:queued": "links_queued",
    "links:seen": "links_seen",
    "links:max_pages": "links_over_max_pages",
    "links:max_bytes": "links_over_max_bytes",
    "revisits": "revisits_scheduled",
}


def shape_figures(raw: dict[str, Any]) -> dict[str, int]:
    """Queue-wide counts: those of ``status`` (done since creation, the rest held now), the
    retries since creation, and the domains whose breaker is not closed (counted by the
    scripts: sq:{Q}:open and sq:{Q}:retired); on a queue that has followed links, what
    became of them since its creation (:data:`LINK_FIGURES`); while every exit of the pool is
    down, ``exits_down_ms``: how long until the first may carry a probe (the ``exits_down``
    alarm of ``status``); while some worker's browsers are benched, ``browsers_down``: how
    many workers (the ``browsers_down`` alarm)."""
    stats = raw.get("stats") or {}
    figures = _plain_figures(raw, stats)
    if any(field in stats for field in LINK_FIGURES):
        figures.update({name: int(stats.get(field, 0)) for field, name in LINK_FIGURES.items()})
    if raw.get("exits_down_until"):
        wait = int(raw["exits_down_until"]) - int(raw.get("now") or 0)
        figures["exits_down_ms"] = max(wait, 0)
    if raw.get("browsers_down"):
        figures["browsers_down"] = len(raw["browsers_down"])
    return figures


def _plain_figures(raw: dict[str, Any], stats: dict[str, Any]) -> dict[str, int]:
    return {
        "done": int(stats.get("done", 0)),
        "retried": int(stats.get("retried", 0)),
        "dead": int(raw["dead"]),
        "ready": int(raw["ready"]),
        "delayed": int(raw["delayed"]),
        "inflight": int(raw["inflight"]),
        "open_breakers": int(raw.get("open_breakers", 0)),
        "retired_domains": int(raw.get("retired_domains", 0)),
    }


_DOMAIN_FIELDS = ("domain", "state", "ready", "delayed", "inflight", "done", "dead")

#: Minutes of history kept (lua/includes/history.lua keeps 25 h; 24 h are answered).
HISTORY_MINUTES = 1440
#: Outcomes the history counts per lane, and events it counts per queue.
HISTORY_OUTCOMES = ("done", "retried", "throttled", "released", "dead")
HISTORY_EVENTS = ("trip", "retired", "pause")


def shape_history(
    hashes: dict[int, dict[str, str]], first: int, minutes: int, now_ms: int
) -> dict[str, Any]:
    """The per-minute series of ``Queue.history`` from the hour hashes of history.lua."""
    outcomes = {o: [0] * minutes for o in HISTORY_OUTCOMES}
    events = {e: [0] * minutes for e in HISTORY_EVENTS}
    lanes: dict[str, dict[str, list[int]]] = {}
    for hour, fields in hashes.items():
        for field_name, text in fields.items():
            minute_text, _, rest = str(field_name).partition(":")
            name, _, lane = rest.partition(":")
            i = hour * 60 + int(minute_text) - first
            if not 0 <= i < minutes:
                continue
            n = int(text)
            if lane and name in outcomes:
                outcomes[name][i] += n
                per_lane = lanes.setdefault(lane, {o: [0] * minutes for o in HISTORY_OUTCOMES})
                per_lane[name][i] += n
            elif name in events:
                events[name][i] += n
    return {
        "start": ms_to_iso(first * 60_000),
        "start_ms": first * 60_000,
        "step": 60,
        "minutes": minutes,
        "now_ms": now_ms,
        "outcomes": outcomes,
        "lanes": lanes,
        "events": events,
    }


#: A failure spike (the alarm ``dead_letter_spike``): at least this many failures charged to
#: a domain's breaker in the last hour, and this many times its hourly baseline. Dead letters
#: of permanent page faults (404, 410) are expected and are not counted.
SPIKE_MIN = 10
SPIKE_FACTOR = 3.0


def shape_domain(info: dict[str, Any]) -> dict[str, Any]:
    out = {f: info[f] for f in _DOMAIN_FIELDS}
    out["consecutive_failures"] = info["consecutive_failures"]
    out["window_failures"] = info["window_failures"]
    out["window_calls"] = info["window_calls"]
    out["open_until"] = ms_to_iso(info["open_until"])
    # politeness: the limit in force; an adaptive domain's learned state (None: not learned)
    for f in ("concurrency", "adaptive", "limit"):
        value = info.get(f)
        out[f] = round(value, 2) if isinstance(value, float) else value
    out.update(learned_timing(info))
    for f in (*REVISIT_FIELDS, *AUTO_FIELDS):  # revisit = on, fetcher auto (domain_info-1.lua)
        if f in info:
            out[f] = info[f]
    return out


#: Fetcher ``auto``: a domain's level and its path patterns' own (lua/includes/auto.lua).
AUTO_FIELDS = ("auto_fetcher", "auto_patterns")


#: A domain's revisit figures that ``status`` shows beside its row (revisit = on): its revisit
#: load (visits an hour its pages are scheduled at), pages tracked, estimated freshness.
REVISIT_FIELDS = ("revisit_load", "revisit_pages", "revisit_budget", "freshness")


def shape_revisits(stats: dict[str, Any]) -> dict[str, Any] | None:
    """The queue's revisit figures (revisit = on), from the sums of its domains' that the
    settle script keeps (``includes/revisit.lua``, RV.total): pages tracked, revisit load
    (visits an hour), estimated freshness (weighted; None before any rate is estimated);
    None when no page was ever revisited."""
    if "rv:pages" not in stats:
        return None
    weight = float(stats.get("rv:w", 0))
    fresh = float(stats.get("rv:fw", 0)) / weight if weight > 0 else None
    return {
        "pages": round(float(stats["rv:pages"])),
        "load": max(float(stats.get("rv:load", 0)), 0.0),
        "freshness": None if fresh is None else round(min(max(fresh, 0.0), 1.0), 4),
    }


def learned_timing(info: dict[str, Any]) -> dict[str, Any]:
    """An adaptive domain's learned delay between starts (``interval``), no-load and current
    latency, as the JSON outputs give durations: seconds, then the ``_ms`` integer twin
    (None when fixed or not learned yet)."""
    out: dict[str, Any] = {}
    for name in ("interval", "baseline", "latency"):
        ms = info.get(f"{name}_ms")
        whole = None if not isinstance(ms, int | float) else round(ms)
        out[name] = None if whole is None else whole / 1000
        out[f"{name}_ms"] = whole
    return out


def alarms(raw: dict[str, Any], domains: list[dict[str, Any]]) -> list[dict[str, str]]:
    alarms: list[dict[str, str]] = []
    lost = int((raw.get("stats") or {}).get("lost", 0))
    if lost:
        alarms.append(
            {
                "kind": "jobs_lost",
                "domain": "",
                "message": f"{lost} claimed jobs had no job key when their lease expired "
                "(evicted or deleted): they are gone",
            }
        )
    if raw.get("paused_until"):
        alarms.append(
            {"kind": "global_pause", "domain": "", "message": str(raw.get("pause_reason") or "")}
        )
    if raw.get("exits_down_until"):
        wait = max(int(raw["exits_down_until"]) - int(raw.get("now") or 0), 0) / 1000
        alarms.append(
            {
                "kind": "exits_down",
                "domain": "",
                "message": f"every proxy of the pool is down (our fault, no site's): nothing "
                f"is claimed for {wait:.0f} s, until the first may carry a probe",
            }
        )
    down = raw.get("browsers_down") or []
    if down:
        alarms.append(browsers_alarm(down, int(raw.get("now") or 0)))
    for info in domains:
        if info["state"] == "retired":
            alarms.append(
                {
                    "kind": "domain_retired",
                    "domain": info["domain"],
                    "message": f"retired after {info['trips']} consecutive trips; "
                    "its backlog is in the dead letters",
                }
            )
        last_hour, baseline = info["failures_last_hour"], info["failures_baseline"]
        if last_hour >= SPIKE_MIN and last_hour >= SPIKE_FACTOR * max(baseline, 1.0):
            alarms.append(
                {
                    "kind": "dead_letter_spike",
                    "domain": info["domain"],
                    "message": f"{last_hour:.0f} failures in the last hour "
                    f"(baseline {baseline:.1f}/h)",
                }
            )
    return alarms


def browsers_alarm(down: list[dict[str, Any]], now_ms: int) -> dict[str, str]:
    """The ``browsers_down`` alarm: workers whose browsers keep crashing (or will not start)
    are benched (runtime/browser_pool.py); their browser jobs wait, no site is charged."""
    first = min(down, key=lambda b: int(b.get("until") or 0))
    wait = max(int(first.get("until") or 0) - now_ms, 0) / 1000
    when = f"next probe in {wait:.0f} s" if wait > 0 else "a probe is under way"
    reason = str(first.get("reason") or "")
    return {
        "kind": "browsers_down",
        "domain": "",
        "message": f"{len(down)} worker(s) have no usable browser (ours, no site's: "
        f"{int(first.get('failures') or 0)} crashes or failed launches in a row"
        f"{': ' + reason if reason else ''}): their browser jobs wait; {when}",
    }


def eviction_alarm(policy: str) -> dict[str, str]:
    return {
        "kind": "eviction_policy",
        "domain": "",
        "message": f"Redis maxmemory-policy is {policy!r}: under memory pressure it may evict "
        "job keys and lose jobs; set it to 'noeviction'",
    }


def shape_counts(raw: dict[str, Any]) -> dict[str, int]:
    stats = raw.get("stats") or {}
    return {
        "enqueued": int(stats.get("enqueued", 0)),
        "ready": int(raw["ready"]),
        "delayed": int(raw["delayed"]),
        "inflight": int(raw["inflight"]),
        "done": int(stats.get("done", 0)),
        "dead": int(raw["dead"]),
        "cancelled": int(stats.get("cancelled", 0)),
    }


def breaker_counts(raw: dict[str, Any]) -> dict[str, int]:
    """The queue's domains by breaker state, from the scripts' counters (O(1)): ``open``
    counts open and half-open breakers (the set sq:{Q}:open), ``retired`` the retired."""
    opened = int(raw.get("open_breakers") or 0)
    retired = int(raw.get("retired_domains") or 0)
    total = int(raw.get("domains") or 0)
    return {"closed": max(total - opened - retired, 0), "open": opened, "retired": retired}


def shape_status(name: str, raw: dict[str, Any], domains: list[dict[str, Any]]) -> dict[str, Any]:
    lanes = raw.get("lanes") or {}
    return {
        "queue": name,
        "counts": shape_counts(raw),
        "lanes": {
            lane: {
                "ready": int(lanes[lane]["ready"]),
                "delayed": max(int(lanes[lane]["delayed"]), 0),
                "oldest_ready_age": round(lanes[lane]["oldest_ready_ms"] / 1000, 3),
            }
            for lane in raw.get("lane_order") or []
        },
        "domains": [shape_domain(d) for d in domains],
        "breakers": breaker_counts(raw),
        "paused_until": ms_to_iso(raw.get("paused_until")),
        "alarms": alarms(raw, domains),
        "owed_lines": int(raw.get("owed") or 0),
        **_revisits(raw),
    }


def _revisits(raw: dict[str, Any]) -> dict[str, Any]:
    """``status``'s ``revisits`` (added when the queue revisits pages), else nothing."""
    figures = shape_revisits(raw.get("stats") or {})
    return {} if figures is None else {"revisits": figures}
