"""``/metrics``: the queue's Prometheus series, written by ``prometheus_client`` from a
``status --json`` document and the queue's counters (:func:`status_metrics`). Every series has
a ``queue`` label; only the ``metrics_top_domains`` worst domains have series of their own.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from scrapeq.interfaces.views import DOMAIN_STATES, state_rank

__all__ = ["METRICS_CONTENT_TYPE", "render_metrics", "status_metrics", "top_domains"]

#: The content type of the Prometheus text exposition format.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_JOB_STATES = ("ready", "delayed", "inflight", "dead")
#: Alarm kinds always exported (at 0 when quiet) so their series never vanish.
_ALARM_KINDS = (
    "dead_letter_spike",
    "domain_retired",
    "global_pause",
    "exits_down",
    "browsers_down",
)
#: outcome label -> the queue's stats field counting it.
_SETTLED_FIELDS = {
    "done": "done",
    "retried": "retried",
    "throttled": "throttled",
    "released": "released",
    "dead": "dead_total",
}
#: stats field -> (counter name, help) of the breaker and guard events.
_EVENT_COUNTERS = {
    "trips": ("scrapeq_breaker_trips", "Breaker trips (closed or half-open to open)."),
    "retirements": ("scrapeq_domain_retirements", "Domains retired after repeated trips."),
    "global_pauses": ("scrapeq_global_pauses", "Global pauses of dispatch (our fault)."),
}


class _Families:
    """A one-shot collector: what ``generate_latest`` reads (``collect``)."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def _gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=labels)


def _counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=labels)


def _queue_metrics(status: Mapping[str, Any], stats: Mapping[str, int]) -> list[Metric]:
    name, counts = status["queue"], status["counts"]
    jobs = _gauge("scrapeq_jobs", "Jobs the queue holds now, by state.", ["queue", "state"])
    for state in _JOB_STATES:
        jobs.add_metric([name, state], counts[state])
    totals = _counter(
        "scrapeq_jobs_settled",
        "Attempts settled since the queue was created, by outcome (dead: dead-lettered).",
        ["queue", "outcome"],
    )
    for outcome, field_name in _SETTLED_FIELDS.items():
        totals.add_metric([name, outcome], stats.get(field_name, 0))
    enqueued = _counter("scrapeq_jobs_enqueued", "Jobs enqueued since creation.", ["queue"])
    enqueued.add_metric([name], counts["enqueued"])
    done = _counter("scrapeq_jobs_done", "Jobs done since creation.", ["queue"])
    done.add_metric([name], counts["done"])
    paused = _gauge("scrapeq_paused", "1 while the global-fault guard pauses dispatch.", ["queue"])
    paused.add_metric([name], 1 if status.get("paused_until") else 0)
    events = []
    for field_name, (metric, doc) in _EVENT_COUNTERS.items():
        family = _counter(metric, doc, ["queue"])
        family.add_metric([name], stats.get(field_name, 0))
        events.append(family)
    return [jobs, totals, enqueued, done, paused, *events]


def _lane_metrics(queue: str, lanes: Mapping[str, Mapping[str, Any]]) -> list[Metric]:
    jobs = _gauge("scrapeq_lane_jobs", "Jobs per lane, by state.", ["queue", "lane", "state"])
    age = _gauge(
        "scrapeq_lane_oldest_ready_age_seconds",
        "Age of the oldest ready job per lane (freshness lag).",
        ["queue", "lane"],
    )
    for lane, info in lanes.items():
        jobs.add_metric([queue, lane, "ready"], info["ready"])
        jobs.add_metric([queue, lane, "delayed"], info["delayed"])
        age.add_metric([queue, lane], info["oldest_ready_age"])
    return [jobs, age]


def _rank(info: Mapping[str, Any]) -> tuple[int, int, int, int, str]:
    """Sort key of the domains worth a series: not closed first, then most dead letters,
    most in flight, most ready."""
    state = state_rank(str(info["state"]))
    return (state, -int(info["dead"]), -int(info["inflight"]), -int(info["ready"]), info["domain"])


def top_domains(domains: Iterable[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """The ``n`` domains most worth a series of their own (see :func:`_rank`)."""
    return heapq.nsmallest(n, domains, key=_rank) if n > 0 else []


def _breaker_totals(
    queue: str, domains: list[Mapping[str, Any]], breakers: Mapping[str, int]
) -> Metric:
    by_state = _gauge("scrapeq_domains", "Domains by breaker state.", ["queue", "state"])
    # the totals come from the scripts' counters (status lists at most status_top domains);
    # they count half-open breakers with the open ones, so half_open is those among the
    # domains listed, taken out of open
    half_open = sum(1 for info in domains if info["state"] == "half_open")
    counted = {
        "closed": int(breakers.get("closed", 0)),
        "half_open": half_open,
        "open": max(int(breakers.get("open", 0)) - half_open, 0),
        "retired": int(breakers.get("retired", 0)),
    }
    for name, n in counted.items():
        by_state.add_metric([queue, name], n)
    return by_state


def _domain_metrics(queue: str, domains: list[Mapping[str, Any]], top: int) -> list[Metric]:
    labels = ["queue", "domain"]
    state = _gauge(
        "scrapeq_domain_breaker_state",
        f"Breaker state of the top {top} domains (1 = current).",
        [*labels, "state"],
    )
    jobs = _gauge(
        "scrapeq_domain_jobs", f"Jobs of the top {top} domains, by state.", [*labels, "state"]
    )
    fails = _gauge(
        "scrapeq_domain_consecutive_failures",
        f"Consecutive failures of the top {top} domains.",
        labels,
    )
    limit = _gauge(
        "scrapeq_domain_concurrency_limit",
        f"Jobs in flight at once allowed to the top {top} domains: an adaptive domain's "
        "learned limit (domain_concurrency = auto), else the fixed one.",
        labels,
    )
    interval = _gauge(
        "scrapeq_domain_request_interval_seconds",
        f"Learned least time between request starts of the top {top} adaptive domains "
        "(0: none needed).",
        labels,
    )
    latency = _gauge(
        "scrapeq_domain_latency_seconds",
        f"Fetch latency the top {top} adaptive domains are judged by: baseline (no-load) and "
        "current (moving average).",
        [*labels, "kind"],
    )
    for info in top_domains(domains, top):
        d = str(info["domain"])
        for s in DOMAIN_STATES:
            state.add_metric([queue, d, s], 1 if info["state"] == s else 0)
        for s in ("ready", "delayed", "inflight", "dead"):
            jobs.add_metric([queue, d, s], info[s])
        fails.add_metric([queue, d], info["consecutive_failures"])
        cap = info.get("limit") if info.get("adaptive") else info.get("concurrency")
        if isinstance(cap, int | float):
            limit.add_metric([queue, d], cap)
        if info.get("adaptive"):
            if isinstance(info.get("interval"), int | float):
                interval.add_metric([queue, d], info["interval"])
            for kind, key in (("baseline", "baseline"), ("current", "latency")):
                if isinstance(info.get(key), int | float):
                    latency.add_metric([queue, d, kind], info[key])
    return [state, jobs, fails, limit, interval, latency]


def _auto_metrics(queue: str, domains: list[Mapping[str, Any]], top: int) -> Metric:
    """Fetcher ``auto``: the fetcher the fleet chose for each of the top domains (pattern
    ``*``) and for each path pattern of theirs with its own (lua/includes/auto.lua)."""
    chosen = _gauge(
        "scrapeq_domain_auto_fetcher",
        f"Fetcher auto: the fetcher chosen for the top {top} domains (pattern *) and their path "
        "patterns with one of their own (1 = current).",
        ["queue", "domain", "pattern", "fetcher"],
    )
    for info in top_domains(domains, top):
        if "auto_fetcher" not in info:
            continue
        d = str(info["domain"])
        chosen.add_metric([queue, d, "*", str(info["auto_fetcher"])], 1)
        for pattern, level in sorted((info.get("auto_patterns") or {}).items()):
            chosen.add_metric([queue, d, str(pattern), str(level)], 1)
    return chosen


def _alarm_metrics(queue: str, alarms: Iterable[Mapping[str, Any]]) -> Metric:
    counts = dict.fromkeys(_ALARM_KINDS, 0)
    for alarm in alarms:
        counts[str(alarm["kind"])] = counts.get(str(alarm["kind"]), 0) + 1
    metric = _gauge("scrapeq_alarms", "Alarms raised now, by kind.", ["queue", "kind"])
    for kind in sorted(counts):
        metric.add_metric([queue, kind], counts[kind])
    return metric


def _exit_metrics(queue: str, exits: Iterable[Mapping[str, Any]]) -> list[Metric]:
    """Series per exit of the pool (at most 200 exits: engine/model/exits.py), labelled by its id
    and tier, never its URL (which may carry a user name)."""
    labels = ["queue", "exit", "tier"]
    state = _gauge("scrapeq_exit_state", "State of each exit (1 = current).", [*labels, "state"])
    requests = _counter(
        "scrapeq_exit_requests",
        "Requests through each exit, by result (ok, ban, failure: the exit's own, timeout, "
        "error: the site's).",
        [*labels, "result"],
    )
    volume = _counter("scrapeq_exit_bytes", "Bytes downloaded through each exit.", labels)
    for e in exits:
        key = [queue, str(e["id"]), str(e["tier"])]
        for s in ("closed", "half_open", "open"):
            state.add_metric([*key, s], 1 if e["state"] == s else 0)
        for result, field_name in (("ok", "ok"), ("ban", "bans"), ("failure", "failures"),
                                   ("timeout", "timeouts"), ("error", "errors")):  # fmt: skip
            requests.add_metric([*key, result], e[field_name])
        volume.add_metric(key, e["bytes"])
    return [state, requests, volume]


def status_metrics(
    status: Mapping[str, Any],
    stats: Mapping[str, int] | None = None,
    top: int = 20,
    exits: Iterable[Mapping[str, Any]] = (),
) -> list[Metric]:
    """The queue-wide metric families, from a ``status --json`` document.

    Args:
        status: what :meth:`AsyncQueue.status` answers.
        stats: the queue's counters (:meth:`AsyncQueue.stats`): settled by outcome, trips,
            retirements, global pauses; zeros when not given.
        top: how many domains get series of their own (``metrics_top_domains``).
        exits: :meth:`AsyncQueue.exits_info` with an exit pool: per-exit series.
    """
    queue = str(status["queue"])
    return [
        *_queue_metrics(status, stats or {}),
        *_lane_metrics(queue, status["lanes"]),
        _breaker_totals(queue, status["domains"], status.get("breakers") or {}),
        *_domain_metrics(queue, status["domains"], top),
        _auto_metrics(queue, status["domains"], top),
        _alarm_metrics(queue, status["alarms"]),
        *(_exit_metrics(queue, exits) if exits else ()),
    ]


def render_metrics(
    status: Mapping[str, Any],
    stats: Mapping[str, int] | None = None,
    top: int = 20,
    exits: Iterable[Mapping[str, Any]] = (),
) -> bytes:
    """The ``/metrics`` body (Prometheus text format 0.0.4) of :func:`status_metrics`."""
    return bytes(generate_latest(_Families(status_metrics(status, stats, top, list(exits)))))
