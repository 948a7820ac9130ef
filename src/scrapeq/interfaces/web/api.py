"""The dashboard's JSON endpoints (``/api/...``) and ``/metrics``: each handler reads or steers
the queue in ``request.app[QUEUE_KEY]``; bad parameters raise :class:`ConfigError` (400, see
:func:`scrapeq.interfaces.web.security.json_errors`)."""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from scrapeq.engine.config.limits import check_json_depth
from scrapeq.engine.model.exits import ExitPool
from scrapeq.engine.model.job import Job, ms_to_iso
from scrapeq.engine.model.urls import redact_text, redact_url
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import ConfigError, NotFound
from scrapeq.interfaces import views
from scrapeq.interfaces.parsing import seconds
from scrapeq.interfaces.web.metrics import METRICS_CONTENT_TYPE, render_metrics
from scrapeq.interfaces.web.security import HOLDER_KEY

__all__ = ["DOMAIN_SORTS", "MAX_LIST", "MAX_PER_PAGE", "QUEUE_KEY"]

QUEUE_KEY = web.AppKey("queue", AsyncQueue)

#: Largest ``count`` / ``limit`` a listing endpoint accepts.
MAX_LIST = 1000
#: Columns the domains table sorts by (server side): :data:`views.API_SORTS`.
DOMAIN_SORTS = views.API_SORTS
MAX_PER_PAGE = 200


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


async def status(request: web.Request) -> web.Response:
    return web.json_response(_redacted_status(await request.app[QUEUE_KEY].status()))


def _redacted_status(status: dict[str, Any]) -> dict[str, Any]:
    alarms = [{**a, "message": redact_text(str(a.get("message", "")))} for a in status["alarms"]]
    return {**status, "alarms": alarms}


async def history(request: web.Request) -> web.Response:
    text = request.query.get("minutes", "") or "60"
    try:
        minutes = int(text)
    except ValueError:
        raise ConfigError("minutes", f"expected an integer, got {text!r}") from None
    return web.json_response(await request.app[QUEUE_KEY].history(minutes))


async def domains(request: web.Request) -> web.Response:
    """Without ``page``: every domain's full figures (a list). With ``page``: one page of the
    domains table, filtered (``state``, ``q`` a name substring) and sorted (``sort``,
    ``order``) on the server: ``{"total", "page", "per_page", "items"}``. Sorted by name and
    not filtered by state, only the page's domains are read from Redis."""
    queue = request.app[QUEUE_KEY]
    if "page" not in request.query:
        return web.json_response(await queue.domains_info())
    page = _int_param(request, "page", 1)
    per_page = min(_int_param(request, "per_page", 50), MAX_PER_PAGE)
    sort = _choice(request, "sort", DOMAIN_SORTS) or "state"
    state = _choice(request, "state", views.DOMAIN_STATES)
    descending = request.query.get("order", "asc") == "desc"
    needle = (request.query.get("q") or "").lower()
    names = [n for n in await queue.domain_names() if needle in n.lower()]
    now_ms = int(time.time() * 1000) + queue.testing_clock_offset_ms
    start = (page - 1) * per_page
    if views.sort_field(sort) == "domain" and state is None:
        names.sort(reverse=descending)
        total, names = len(names), names[start : start + per_page]
        rows = await _rows(queue, names, now_ms)
    else:
        rows = [r for r in await _rows(queue, names, now_ms) if state in (None, r["state"])]
        views.order_for_table(rows, sort, descending)
        total, rows = len(rows), rows[start : start + per_page]
    return web.json_response({"total": total, "page": page, "per_page": per_page, "items": rows})


def _choice(request: web.Request, name: str, choices: tuple[str, ...]) -> str | None:
    """A query parameter that is one of ``choices`` (None when absent or empty)."""
    value = request.query.get(name) or None
    if value is not None and value not in choices:
        raise ConfigError(name, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


async def _rows(queue: AsyncQueue, names: list[str], now_ms: int) -> list[dict[str, Any]]:
    """The domains table's rows of ``names`` (:func:`views.domain_row`), in that order."""
    if not names:
        return []
    return [views.domain_row(i, now_ms) for i in await queue.domains_info(names)]


async def domain(request: web.Request) -> web.Response:
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
    doc: dict[str, Any] = {
        "domain": views.domain_row(infos[0], now_ms),
        "info": infos[0],
        "errors": errors[:50],
        "events": events[:100],
    }
    if ExitPool.from_settings(queue.settings):  # its tier, benched exits, use per tier
        doc["exits"] = await queue.domain_exits(domain)
    return web.json_response(doc)


async def exits(request: web.Request) -> web.Response:
    """The exit pool: each exit's state, tier and counts (passwords redacted)."""
    queue = request.app[QUEUE_KEY]
    pool = ExitPool.from_settings(queue.settings)
    rows = [_exit_row(e) for e in await queue.exits_info()] if pool else []
    return web.json_response({"tiers": list(pool.tiers), "exits": rows})


def _exit_row(e: dict[str, Any]) -> dict[str, Any]:
    until = e["open_until_ms"]
    return {**e, "open_until": ms_to_iso(until) if until else None}


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


async def events(request: web.Request) -> web.Response:
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


async def dead(request: web.Request) -> web.Response:
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


async def breaker(request: web.Request) -> web.Response:
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


async def dead_replay(request: web.Request) -> web.Response:
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


async def dead_purge(request: web.Request) -> web.Response:
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


async def metrics(request: web.Request) -> web.Response:
    queue = request.app[QUEUE_KEY]
    status, stats = await queue.status(), await queue.stats()
    pooled = ExitPool.from_settings(queue.settings)
    exit_rows = await queue.exits_info() if pooled else []
    body = render_metrics(status, stats, queue.settings.metrics_top_domains, exit_rows)
    return web.Response(body=body, headers={"Content-Type": METRICS_CONTENT_TYPE})
