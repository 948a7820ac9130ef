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

The package: :mod:`.app` (the application and serving it), :mod:`.api` (the JSON endpoints),
:mod:`.security` (the guard and the middlewares), :mod:`.metrics` (``/metrics``),
:mod:`.pages` (the page's files); domain listings share their vocabulary with the CLI's tables
(:mod:`scrapeq.interfaces.views`).
"""

from __future__ import annotations

from scrapeq.interfaces.web.api import DOMAIN_SORTS, MAX_LIST, MAX_PER_PAGE, QUEUE_KEY
from scrapeq.interfaces.web.app import create_app, serve
from scrapeq.interfaces.web.metrics import (
    METRICS_CONTENT_TYPE,
    render_metrics,
    status_metrics,
    top_domains,
)
from scrapeq.interfaces.web.pages import CSP, LOGIN_PAGE, STATIC
from scrapeq.interfaces.web.security import (
    CSRF_HEADER,
    GUARD_KEY,
    HOLDER_KEY,
    LOOPBACK_HOSTS,
    MIN_TOKEN_CHARS,
    TOKEN_COOKIE,
    TOKEN_ENV,
    Guard,
    check_token,
    default_hosts,
    is_loopback,
)

__all__ = [
    "CSP",
    "CSRF_HEADER",
    "DOMAIN_SORTS",
    "GUARD_KEY",
    "HOLDER_KEY",
    "LOGIN_PAGE",
    "LOOPBACK_HOSTS",
    "MAX_LIST",
    "MAX_PER_PAGE",
    "METRICS_CONTENT_TYPE",
    "MIN_TOKEN_CHARS",
    "QUEUE_KEY",
    "STATIC",
    "TOKEN_COOKIE",
    "TOKEN_ENV",
    "Guard",
    "check_token",
    "create_app",
    "default_hosts",
    "is_loopback",
    "render_metrics",
    "serve",
    "status_metrics",
    "top_domains",
]
