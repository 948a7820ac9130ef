"""The web dashboard and Prometheus metrics: a small aiohttp app over JSON endpoints.

Like saq's dashboard, :func:`create_app` builds a self-contained application that can run on
its own (:func:`serve`, behind ``scrapeq dashboard``) or be mounted in a bigger one::

    parent.add_subapp("/scrapeq/", create_app(queue))

The page at ``/`` only uses relative URLs, so it works under any prefix. Endpoints:

=========================================  ====================================================
``GET /``                                  the dashboard (``static/index.html``, views by #hash)
``GET /static/{name}``                     its script and style sheet (package data)
``POST /login``                            form field ``token``: sets the token cookie
``GET /api/session``                       ``{"csrf", "read_only", "token_holder"}``
``GET /api/status``                        the ``status --json`` document
``GET /api/history?minutes=N``             per-minute outcomes and events (default 60, max 1440)
``GET /api/domains``                       full per-domain figures (:meth:`domains_info`)
``GET /api/domains?page=P&per_page=N&...``  one page of the table (``sort``, ``order``, ``state``,
                                           ``q``): ``{"total", "page", "per_page", "items"}``
``GET /api/domain/{domain}``               one domain: figures, recent errors, breaker events
``GET /api/events?count=N``                recent events, newest first (default 100, max 1000)
``GET /api/dead?domain=D&reason=R&limit=N``  dead letters, newest first (default 50, max 1000)
``POST /api/dead/replay``                  {"ids": [...]}, {"domain": D} or {"all": true}
``POST /api/dead/purge``                   {"domain": D}, {"older_than": S} or {"all": true}
``POST /api/breaker/{domain}/reset``       close a breaker (un-retires the domain)
``POST /api/breaker/{domain}/trip``        open a breaker now (``?cooldown=S`` optional)
``GET /metrics``                           Prometheus text exposition format 0.0.4
=========================================  ====================================================

Safe by default (:class:`Guard`): a ``Host`` header that names no configured host is refused
(421: DNS rebinding); with a token every request must present it (``Authorization: Bearer``
or the ``login`` cookie, else 401) and :func:`serve` refuses a non-loopback address without
one; a POST needs the session's ``X-CSRF-Token`` (unless it came with a bearer token) and a
same-site ``Origin`` (403); ``read_only`` refuses every POST (403). URL passwords are redacted
everywhere; payloads are shown only to a request that presented the token.

Errors are JSON ``{"error": "..."}``: 400 for a bad parameter, 401 without the token, 403 for
a refused action, 404 for an unknown domain, 421 for a foreign ``Host``, 503 when Redis is
unreachable.

``/metrics`` is written by ``prometheus_client`` from a status document and the queue's
counters (:func:`status_metrics`): every series has a ``queue`` label, and only the
``metrics_top_domains`` worst domains have series of their own. A worker process's own
metrics (settles by lane and outcome, fetch and claim latency) are in
:mod:`scrapeq.runtime.metrics`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import hmac
import ipaddress
import json
import logging
import secrets
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from scrapeq.engine.job import Job, ms_to_iso
from scrapeq.engine.limits import check_json_depth
from scrapeq.engine.queue import AsyncQueue
from scrapeq.engine.urls import redact_text, redact_url
from scrapeq.errors import ConfigError, NotFound, RedisUnavailable, ScrapeqError
from scrapeq.interfaces.parsing import seconds

__all__ = [
    "CSP",
    "METRICS_CONTENT_TYPE",
    "STATIC",
    "Guard",
    "check_token",
    "create_app",
    "render_metrics",
    "serve",
    "status_metrics",
    "top_domains",
]

log = logging.getLogger(__name__)

#: The content type of the Prometheus text exposition format.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

QUEUE_KEY = web.AppKey("queue", AsyncQueue)

#: Largest ``count`` / ``limit`` a listing endpoint accepts.
MAX_LIST = 1000

_JOB_STATES = ("ready", "delayed", "inflight", "dead")
_DOMAIN_STATES = ("closed", "half_open", "open", "retired")
_STATE_RANK = {"retired": 0, "open": 1, "half_open": 2, "closed": 3}
#: Alarm kinds always exported (at 0 when quiet) so their series never vanish.
_ALARM_KINDS = ("dead_letter_spike", "domain_retired", "global_pause")
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

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


# --- Prometheus metrics ------------------------------------------------------------------------


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
    state = _STATE_RANK.get(str(info["state"]), len(_STATE_RANK))
    return (state, -int(info["dead"]), -int(info["inflight"]), -int(info["ready"]), info["domain"])


def top_domains(domains: Iterable[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """The ``n`` domains most worth a series of their own (see :func:`_rank`)."""
    return heapq.nsmallest(n, domains, key=_rank) if n > 0 else []


def _domain_metrics(
    queue: str, domains: list[Mapping[str, Any]], breakers: Mapping[str, int], top: int
) -> list[Metric]:
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
        for s in _DOMAIN_STATES:
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
    return [by_state, state, jobs, fails, limit, interval, latency]


def _alarm_metrics(queue: str, alarms: Iterable[Mapping[str, Any]]) -> Metric:
    counts = dict.fromkeys(_ALARM_KINDS, 0)
    for alarm in alarms:
        counts[str(alarm["kind"])] = counts.get(str(alarm["kind"]), 0) + 1
    metric = _gauge("scrapeq_alarms", "Alarms raised now, by kind.", ["queue", "kind"])
    for kind in sorted(counts):
        metric.add_metric([queue, kind], counts[kind])
    return metric


def status_metrics(
    status: Mapping[str, Any], stats: Mapping[str, int] | None = None, top: int = 20
) -> list[Metric]:
    """The queue-wide metric families, from a ``status --json`` document.

    Args:
        status: what :meth:`AsyncQueue.status` answers.
        stats: the queue's counters (:meth:`AsyncQueue.stats`): settled by outcome, trips,
            retirements, global pauses; zeros when not given.
        top: how many domains get series of their own (``metrics_top_domains``).
    """
    queue = str(status["queue"])
    return [
        *_queue_metrics(status, stats or {}),
        *_lane_metrics(queue, status["lanes"]),
        *_domain_metrics(queue, status["domains"], status.get("breakers") or {}, top),
        _alarm_metrics(queue, status["alarms"]),
    ]


def render_metrics(
    status: Mapping[str, Any], stats: Mapping[str, int] | None = None, top: int = 20
) -> bytes:
    """The ``/metrics`` body (Prometheus text format 0.0.4) of :func:`status_metrics`."""
    return bytes(generate_latest(_Families(status_metrics(status, stats, top))))


# --- security ----------------------------------------------------------------------------------

#: Host names a loopback dashboard always answers to (the ``Host`` header's name part).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: The cookie a browser keeps the token in after signing in at ``login``.
TOKEN_COOKIE = "scrapeq_token"
#: The header an action (POST) must carry with the session's CSRF token.
CSRF_HEADER = "X-CSRF-Token"
#: The environment variable ``scrapeq dashboard`` reads the token from.
TOKEN_ENV = "SCRAPEQ_DASHBOARD_TOKEN"
#: Shortest token accepted: a guessable token would be worse than none.
MIN_TOKEN_CHARS = 16

_SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


@dataclass(frozen=True, slots=True)
class Guard:
    """The dashboard's access rules (see docs/DESIGN.md, "the dashboard's security model").

    Attributes:
        hosts: host names the ``Host`` header may name (DNS rebinding is refused otherwise).
        token: when set, every request must present it (``Authorization: Bearer``, or the
            cookie set by ``login``); payloads are shown only to a request that presented it.
        read_only: refuse every action and tell the page to hide them.
        csrf: the secret every action must echo in ``X-CSRF-Token`` (random per app).
    """

    hosts: frozenset[str]
    token: str | None = None
    read_only: bool = False
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    def host_allowed(self, host_header: str | None) -> bool:
        """True when the ``Host`` header names one of :attr:`hosts` (any port)."""
        if not host_header:
            return False
        try:
            name = urlsplit(f"//{host_header}").hostname
        except ValueError:
            return False
        return name is not None and name.lower() in self.hosts

    def presented(self, request: web.Request) -> str | None:
        """How the request proved it holds the token: ``bearer``, ``cookie`` or None."""
        if self.token is None:
            return None
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and _same_secret(value.strip(), self.token):
            return "bearer"
        if _same_secret(request.cookies.get(TOKEN_COOKIE, ""), self.token):
            return "cookie"
        return None


def _same_secret(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def is_loopback(host: str) -> bool:
    """True for an address (or ``localhost``) that only this machine can reach."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token(token: str | None, host: str) -> None:
    """Refuse a bind address other machines can reach without a good enough token.

    Raises:
        ConfigError: ``host`` is not loopback and ``token`` is missing or too short.
    """
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError("token", f"must be at least {MIN_TOKEN_CHARS} characters")
    if token is None and not is_loopback(host):
        raise ConfigError(
            "host",
            f"{host} is reachable from other machines: a token is required "
            f"(--token or {TOKEN_ENV})",
        )


def default_hosts(bind: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The host names a dashboard bound to ``bind`` answers to: loopback, the bind address
    (unless a wildcard), this machine's name for a wildcard bind, and ``extra``."""
    names = set(LOOPBACK_HOSTS)
    if bind in ("0.0.0.0", "::", ""):
        names.update({socket.gethostname(), socket.getfqdn()})
    else:
        names.add(bind.strip("[]"))
    names.update(extra)
    return frozenset(n.lower() for n in names if n)


# --- handlers ----------------------------------------------------------------------------------

GUARD_KEY = web.AppKey("guard", Guard)
HOLDER_KEY = web.RequestKey("token_holder", bool)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Host check, token check, CSRF and read-only, before any handler runs."""
    guard = request.app[GUARD_KEY]
    if not guard.host_allowed(request.headers.get("Host")):
        return _error(421, "unknown Host header refused (add it with --allowed-host)")
    how = guard.presented(request)
    request[HOLDER_KEY] = how is not None
    is_login = request.match_info.route.name == "login"
    if guard.token is not None and how is None and not is_login:
        if request.method == "GET" and request.match_info.route.name == "index":
            return web.Response(text=LOGIN_PAGE, content_type="text/html", status=401)
        return _error(401, "a token is required (Authorization: Bearer, or sign in at /login)")
    if request.method == "POST" and not is_login:
        if guard.read_only:
            return _error(403, "read-only dashboard: actions are disabled")
        if not _same_origin(request):
            return _error(403, "cross-site request refused")
        # A bearer token cannot be sent by another site's page: only cookie or no-token
        # sessions, which a browser attaches by itself, need the CSRF token.
        if how != "bearer" and not _same_secret(request.headers.get(CSRF_HEADER, ""), guard.csrf):
            return _error(403, f"missing or wrong {CSRF_HEADER} (GET api/session gives it)")
    response = await handler(request)
    response.headers.update(_SECURITY_HEADERS)
    return response


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map the library's errors to JSON answers; anything else is a 500 as usual."""
    try:
        return await handler(request)
    except NotFound as exc:
        return _error(404, str(exc))
    except ConfigError as exc:
        return _error(400, str(exc))
    except RedisUnavailable as exc:
        return _error(503, str(exc))
    except ScrapeqError as exc:
        log.exception("dashboard request %s failed", request.path)
        return _error(500, str(exc))


def _int_param(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name, "")
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(name, f"expected an integer, got {text!r}") from None
    if not 1 <= value <= MAX_LIST:
        raise ConfigError(name, f"must be in 1..{MAX_LIST}, got {value}")
    return value


def _seconds_param(request: web.Request, name: str) -> float | None:
    """A duration in the query string (``?cooldown=60``), bounded as the CLI bounds it."""
    text = request.query.get(name, "")
    return seconds(name, text) if text else None


def _same_origin(request: web.Request) -> bool:
    """False for a browser POST from another site (CSRF); tools send no Origin at all."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


#: The page's files, shipped as package data (no network at run time, no build step).
STATIC = resources.files("scrapeq.interfaces") / "static"
_STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css"}
#: Only the page's own files, only same-origin fetches; nothing inline, no frames.
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def _static_file(name: str) -> web.Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in _STATIC_TYPES:
        raise web.HTTPNotFound()
    resource = STATIC / name
    if not resource.is_file():
        raise web.HTTPNotFound()
    return web.Response(
        body=resource.read_bytes(),
        content_type=_STATIC_TYPES[suffix],
        charset="utf-8",
        headers={"Content-Security-Policy": CSP},
    )


async def _index(request: web.Request) -> web.Response:
    return _static_file("index.html")


async def _static(request: web.Request) -> web.Response:
    return _static_file(request.match_info["name"])


async def _login(request: web.Request) -> web.StreamResponse:
    """POST ``token=...`` (a form): set the token cookie and go to the page."""
    guard = request.app[GUARD_KEY]
    form = await request.post()
    given = str(form.get("token", ""))
    if guard.token is None or not _same_secret(given, guard.token):
        return web.Response(text=LOGIN_PAGE, content_type="text/html", status=401)
    response = web.HTTPSeeOther(location="./")
    response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="Strict", path="/")
    raise response


async def _session(request: web.Request) -> web.Response:
    """What the page needs before acting: the CSRF token and what it may show."""
    guard, queue = request.app[GUARD_KEY], request.app[QUEUE_KEY]
    return web.json_response(
        {
            "csrf": guard.csrf,
            "read_only": guard.read_only,
            "token_holder": bool(request[HOLDER_KEY]),
            "queue": queue.name,
            "paused_until": await queue.paused_until(),
        }
    )


async def _status(request: web.Request) -> web.Response:
    return web.json_response(_redacted_status(await request.app[QUEUE_KEY].status()))


def _redacted_status(status: dict[str, Any]) -> dict[str, Any]:
    alarms = [{**a, "message": redact_text(str(a.get("message", "")))} for a in status["alarms"]]
    return {**status, "alarms": alarms}


async def _history(request: web.Request) -> web.Response:
    text = request.query.get("minutes", "") or "60"
    try:
        minutes = int(text)
    except ValueError:
        raise ConfigError("minutes", f"expected an integer, got {text!r}") from None
    return web.json_response(await request.app[QUEUE_KEY].history(minutes))


#: Columns the domains table sorts by (server side).
DOMAIN_SORTS = (
    "domain", "state", "ready", "delayed", "inflight", "done", "dead", "failure_rate",
    "open_until", "trips",
)  # fmt: skip
MAX_PER_PAGE = 200


def _learned_limit(info: Mapping[str, Any]) -> float | None:
    limit = info.get("limit")
    if not info.get("adaptive") or not isinstance(limit, int | float):
        return None
    return round(float(limit), 1)


def _domain_row(info: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
    """One row of the domains table: the figures, the breaker window's failure rate (its
    failures among the last outcomes it recorded, kept while it is open; 404s and other
    page faults are not in it), the open time left."""
    failures, calls = int(info["window_failures"]), int(info["window_calls"])
    open_until = info.get("open_until")
    row = {k: info[k] for k in ("domain", "state", "ready", "delayed", "inflight", "done", "dead")}
    row.update(
        failure_rate=round(failures / calls, 4) if calls else 0.0,
        window_failures=failures,
        window_calls=calls,
        open_until=ms_to_iso(open_until) if open_until else None,
        open_for=round(max(open_until - now_ms, 0) / 1000, 1) if open_until else None,
        trips=info.get("trips", 0),
        consecutive_failures=info.get("consecutive_failures", 0),
        concurrency=info.get("concurrency"),
        delay_ms=info.get("delay_ms"),
        # an adaptive domain's learned limit (domain_concurrency = auto); None when fixed
        adaptive_limit=_learned_limit(info),
    )
    return row


def _sort_key(column: str) -> Callable[[Mapping[str, Any]], Any]:
    if column == "state":
        return lambda r: (_STATE_RANK.get(r["state"], 9), r["domain"])
    if column == "domain":
        return lambda r: r["domain"]
    return lambda r: (r[column] is None, r[column] or 0, r["domain"])


async def _domains(request: web.Request) -> web.Response:
    """Without ``page``: every domain's full figures (a list). With ``page``: one page of the
    domains table, filtered (``state``, ``q`` a name substring) and sorted (``sort``,
    ``order``) on the server: ``{"total", "page", "per_page", "items"}``. Sorted by name and
    not filtered by state, only the page's domains are read from Redis."""
    queue = request.app[QUEUE_KEY]
    if "page" not in request.query:
        return web.json_response(await queue.domains_info())
    page = _int_param(request, "page", 1)
    per_page = min(_int_param(request, "per_page", 50), MAX_PER_PAGE)
    sort = request.query.get("sort") or "state"
    if sort not in DOMAIN_SORTS:
        raise ConfigError("sort", f"expected one of {', '.join(DOMAIN_SORTS)}, got {sort!r}")
    descending = request.query.get("order", "asc") == "desc"
    state = request.query.get("state") or None
    if state is not None and state not in _DOMAIN_STATES:
        raise ConfigError("state", f"expected one of {', '.join(_DOMAIN_STATES)}, got {state!r}")
    needle = (request.query.get("q") or "").lower()
    names = [n for n in await queue.domain_names() if needle in n.lower()]
    now_ms = int(time.time() * 1000) + queue.testing_clock_offset_ms
    start = (page - 1) * per_page
    if sort == "domain" and state is None:
        names.sort(reverse=descending)
        total, chosen = len(names), names[start : start + per_page]
        rows = [_domain_row(i, now_ms) for i in await queue.domains_info(chosen)] if chosen else []
    else:
        rows = [_domain_row(i, now_ms) for i in await queue.domains_info(names)] if names else []
        if state is not None:
            rows = [r for r in rows if r["state"] == state]
        rows.sort(key=_sort_key(sort), reverse=descending)
        total, rows = len(rows), rows[start : start + per_page]
    return web.json_response({"total": total, "page": page, "per_page": per_page, "items": rows})


async def _domain(request: web.Request) -> web.Response:
    """One domain: its figures, its recent errors, its breaker history."""
    queue, domain = request.app[QUEUE_KEY], request.match_info["domain"]
    infos = await queue.domains_info([domain])
    if not infos or not await queue.domain_known(domain):
        raise NotFound(f"unknown domain {domain!r}")
    now_ms = int(time.time() * 1000) + queue.testing_clock_offset_ms
    errors = _recent_errors(await queue.recent_errors(domain), await queue.dead_letters(domain, 20))
    events = [
        {**e, "message": redact_text(str(e.get("message", "")))}
        for e in await queue.events(MAX_LIST)
        if e["domain"] == domain
    ]
    return web.json_response(
        {
            "domain": _domain_row(infos[0], now_ms),
            "info": infos[0],
            "errors": errors[:50],
            "events": events[:100],
        }
    )


def _recent_errors(failures: list[dict[str, Any]], dead: list[Job]) -> list[dict[str, Any]]:
    """A domain's recent errors, newest first: the failures charged to its breaker (retried
    and throttled jobs' too: a tripped 429 site has no dead letter) and the last errors of
    its latest dead letters (404s too), each once."""
    errors: dict[tuple[str, int, str], dict[str, Any]] = {}
    for job in dead:
        for e in job.errors[-3:]:
            entry = {"id": job.id, "url": redact_url(job.url), "reason": job.dead_reason}
            errors[(job.id, e.at_ms, e.kind)] = {**entry, **e.as_dict()}
    for f in failures:
        errors.setdefault((f["id"], f["at_ms"], f["kind"]), {"url": None, "reason": None, **f})
    return sorted(errors.values(), key=lambda e: e["at_ms"], reverse=True)


async def _events(request: web.Request) -> web.Response:
    count = _int_param(request, "count", 100)
    events = await request.app[QUEUE_KEY].events(count)
    return web.json_response(
        [{**e, "message": redact_text(str(e.get("message", "")))} for e in events]
    )


def _job_view(job: Job, holder: bool) -> dict[str, Any]:
    """A dead letter for the page: credentials redacted, the payload only for a token holder."""
    view = job.as_dict()
    if not holder and view.get("payload") is not None:
        view["payload"] = None
        view["payload_hidden"] = True
    return view


async def _dead(request: web.Request) -> web.Response:
    """Dead letters, newest first; ``reason`` filters among the newest ``MAX_LIST``."""
    limit = _int_param(request, "limit", 50)
    domain = request.query.get("domain") or None
    reason = request.query.get("reason") or None
    queue = request.app[QUEUE_KEY]
    if reason is None:
        jobs = await queue.dead_letters(domain, limit)
    else:
        jobs = [j for j in await queue.dead_letters(domain, MAX_LIST) if j.dead_reason == reason]
    holder = bool(request[HOLDER_KEY])
    return web.json_response([_job_view(job, holder) for job in jobs[:limit]])


async def _breaker(request: web.Request) -> web.Response:
    queue, domain = request.app[QUEUE_KEY], request.match_info["domain"]
    if request.match_info["action"] == "reset":
        state = await queue.breaker_reset(domain)
    else:
        state = await queue.breaker_trip(domain, _seconds_param(request, "cooldown"))
    return web.json_response({"domain": domain, "state": state})


async def _json_body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    text = await request.text()
    check_json_depth("body", text)  # before parsing: deep JSON overflows the parser's stack
    try:
        body = json.loads(text)
    except ValueError:
        raise ConfigError("body", "expected a JSON object") from None
    if not isinstance(body, dict):
        raise ConfigError("body", "expected a JSON object")
    return body


async def _dead_replay(request: web.Request) -> web.Response:
    """Body: exactly one of ``{"ids": [...]}``, ``{"domain": D}``, ``{"all": true}``;
    ``"reset_attempts": true`` optional."""
    body = await _json_body(request)
    ids = body.get("ids")
    if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
        raise ConfigError("ids", "expected a list of job ids")
    domain = body.get("domain")
    if domain is not None and not isinstance(domain, str):
        raise ConfigError("domain", "expected a domain name")
    result = await request.app[QUEUE_KEY].replay(
        ids=ids,
        domain=domain,
        all=body.get("all") is True,
        reset_attempts=body.get("reset_attempts") is True,
    )
    return web.json_response(
        {"moved": result.moved, "missing": result.missing, "duplicates": result.duplicates}
    )


async def _dead_purge(request: web.Request) -> web.Response:
    """Body: ``{"domain": D}`` or ``{"all": true}``; ``"older_than": S`` optional."""
    body = await _json_body(request)
    domain, older = body.get("domain"), body.get("older_than")
    if domain is not None and not isinstance(domain, str):
        raise ConfigError("domain", "expected a domain name")
    if older is not None and not isinstance(older, int | float):
        raise ConfigError("older_than", "expected a number of seconds")
    if domain is None and older is None and body.get("all") is not True:
        raise ConfigError("purge", 'choose "domain", "older_than" or "all": true')
    purged = await request.app[QUEUE_KEY].purge(older_than=older, domain=domain)
    return web.json_response({"purged": purged})


async def _metrics(request: web.Request) -> web.Response:
    queue = request.app[QUEUE_KEY]
    status, stats = await queue.status(), await queue.stats()
    body = render_metrics(status, stats, queue.settings.metrics_top_domains)
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})


def create_app(
    queue: AsyncQueue,
    *,
    hosts: Iterable[str] = LOOPBACK_HOSTS,
    token: str | None = None,
    read_only: bool = False,
) -> web.Application:
    """Build the dashboard application over ``queue``.

    The app does not own the queue: whoever created the queue closes it. Mount it with
    ``parent.add_subapp("/prefix/", create_app(queue))`` or run it with :func:`serve`.

    Args:
        queue: the queue to show and steer.
        hosts: host names the ``Host`` header may name (default: loopback names only).
        token: when set, required on every request (bearer header or the login cookie).
        read_only: refuse (403) and hide every action.

    Returns:
        An aiohttp application with the endpoints listed in this module's docstring.

    Raises:
        ConfigError: the token is shorter than :data:`MIN_TOKEN_CHARS`.
    """
    check_token(token, "127.0.0.1")
    app = web.Application(middlewares=[_guard, _errors])
    app[QUEUE_KEY] = queue
    app[GUARD_KEY] = Guard(frozenset(h.lower() for h in hosts), token, read_only)
    app.router.add_get("/", _index, name="index")
    app.router.add_post("/login", _login, name="login")
    app.router.add_get("/static/{name}", _static)
    app.router.add_get("/api/session", _session)
    app.router.add_get("/api/status", _status)
    app.router.add_get("/api/history", _history)
    app.router.add_get("/api/domains", _domains)
    app.router.add_get("/api/domain/{domain}", _domain)
    app.router.add_get("/api/events", _events)
    app.router.add_get("/api/dead", _dead)
    app.router.add_post("/api/dead/replay", _dead_replay)
    app.router.add_post("/api/dead/purge", _dead_purge)
    app.router.add_post("/api/breaker/{domain}/{action:reset|trip}", _breaker)
    app.router.add_get("/metrics", _metrics)
    return app


# --- serving -----------------------------------------------------------------------------------


def _base_url(address: Any) -> str:
    host, port = address[0], address[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # no signal handlers on Windows
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    try:
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _serve(
    queue_factory: Callable[[], AsyncQueue],
    host: str,
    port: int,
    on_ready: Callable[[str], None] | None,
    options: dict[str, Any],
) -> None:
    queue = queue_factory()
    runner = web.AppRunner(create_app(queue, **options), shutdown_timeout=5.0)
    try:
        await runner.setup()
        await web.TCPSite(runner, host, port).start()
        url = _base_url(runner.addresses[0])
        log.info("scrapeq dashboard on %s", url)
        if on_ready is not None:
            on_ready(url)
        await _until_signalled()
    finally:
        await runner.cleanup()
        await queue.close()


def serve(
    queue_factory: Callable[[], AsyncQueue],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    on_ready: Callable[[str], None] | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
    read_only: bool = False,
) -> None:
    """Run the dashboard and ``/metrics`` until SIGINT or SIGTERM, then return.

    Blocks in its own event loop (``asyncio.run``); the queue is made inside that loop and
    closed on the way out. Safe by default: binds loopback; any other address needs a token.

    Args:
        queue_factory: a zero-argument callable returning the :class:`AsyncQueue` to serve,
            e.g. ``lambda: AsyncQueue.from_url(url, settings=settings)``.
        host: the address to bind (default ``127.0.0.1``).
        port: the TCP port (default 8000; 0 picks a free one).
        on_ready: called once listening with the base URL (``http://127.0.0.1:8000``), e.g. to
            print it; the actual port when ``port`` is 0.
        token: required on every request when set; required when ``host`` is not loopback.
        allowed_hosts: more host names the ``Host`` header may name (a reverse proxy's).
        read_only: refuse and hide every action.

    Raises:
        ConfigError: ``host`` is not loopback and no token is given, or the token is short.
        OSError: the address cannot be bound (port in use, host not local).
    """
    check_token(token, host)
    options = {
        "hosts": default_hosts(host, allowed_hosts),
        "token": token,
        "read_only": read_only,
    }
    asyncio.run(_serve(queue_factory, host, port, on_ready, options))


# --- the page ----------------------------------------------------------------------------------

#: Shown instead of the page when a token is required and none was presented.
LOGIN_PAGE = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>scrapeq: sign in</title>
<style>body { font: 14px system-ui, sans-serif; margin: 3em; }</style></head>
<body>
<h1>scrapeq dashboard</h1>
<p>This dashboard needs its token
(<code>--token</code> or <code>SCRAPEQ_DASHBOARD_TOKEN</code>).</p>
<form method="post" action="login">
<input type="password" name="token" autocomplete="current-password" autofocus>
<button type="submit">Sign in</button>
</form>
</body>
</html>
"""
