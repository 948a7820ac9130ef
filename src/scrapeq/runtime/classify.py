"""Turn a fetch's result (a status, or an exception) into an outcome class.

Pure logic: no I/O, no clock unless one is passed (``now``). The worker calls
:func:`classify_response` after a fetch and :func:`classify_exception` when a fetch or a
handler raised, then settles the job by :class:`Outcome`:

==========  ======================================================  ==============  =========
outcome     what                                                    attempt spent   domain
==========  ======================================================  ==============  =========
ok          2xx, 3xx (the final response after redirects)           \\-              \\-
retry       timeout, connection error, 5xx, 408, 425, 403           yes             charged
throttled   429, or 503 with a Retry-After                          no              charged
fail        400, 404, 410, 451, other 4xx, invalid content,         dead at once    \\-
            a 304 to a request that was not conditional
ours        our proxy down or refusing us (407, 401), our network   no              \\-
==========  ======================================================  ==============  =========

A proxy that answers ``CONNECT`` for one target with anything but 200, 401 or 407 (a 502 for a
target it cannot reach, a 403 for one it will not reach) is that target's failure: ``retry``,
charged to its domain, reason ``proxy_http_<status>``. Only a proxy we cannot reach, or one
that refuses our credentials, fails every target alike: ``ours``. A proxy that refuses every
target trips every breaker together, which the global-fault guard reads as our fault.

A 304 (Not Modified) answers a conditional request (``If-None-Match``, ``If-Modified-Since``:
a revisit's, or one the job's own request made so); to any other request it is no page (it has
no body, and the request had no copy to keep): :func:`classify_response` makes it ``fail``,
reason ``http_304``, as it does a status outside 100-599, and the handler never sees it.

``counts_against_domain`` is what the domain's breaker sees as a failure: transient failures
count, permanent per-page ones do not (a missing page says nothing about the site), and a call
slower than ``slow_call`` counts even when it succeeded (a hanging site is slow, not erroring).
Handler exceptions are ``retry`` and do not count, unless the handler raised
:class:`~scrapeq.errors.Permanent`.
"""

from __future__ import annotations

import asyncio
import functools
import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from scrapeq.engine.model.urls import redact_text
from scrapeq.errors import InvalidURL, Permanent, Retry, ScrapeqError

__all__ = [
    "OVERLOAD_REASONS",
    "BlockedAddress",
    "BodyTooLarge",
    "BrowserLost",
    "Classification",
    "OurNetworkDown",
    "Outcome",
    "ProxyAnswered",
    "ProxyDown",
    "ProxyRefused",
    "RendererCrashed",
    "RobotsDisallowed",
    "classify_exception",
    "classify_response",
    "classify_status",
    "error_text",
    "is_slow",
    "parse_retry_after",
]

_MESSAGE_MAX: Final = 500


class Outcome(StrEnum):
    """How one attempt ended, as far as the queue is concerned."""

    OK = "ok"
    RETRY = "retry"
    THROTTLED = "throttled"
    FAIL = "fail"
    OURS = "ours"


@dataclass(frozen=True, slots=True)
class Classification:
    """The verdict on one attempt.

    Attributes:
        outcome: the outcome class.
        reason: a short machine tag (``"ok"``, ``"http_503"``, ``"timeout"``, ...).
        counts_against_domain: feed the domain's breaker a failure.
        retry_after: seconds from a Retry-After header (throttled outcomes only), else ``None``.
        message: a human-readable detail for the job's error history.
    """

    outcome: Outcome
    reason: str
    counts_against_domain: bool
    retry_after: float | None = None
    message: str = ""


#: Reasons that say the site is overloaded, or refusing us for our rate: an adaptive domain
#: lowers its rate on them before its breaker hears of them (engine/lua/includes/adaptive.lua).
#: A refused or reset connection is one too: a site that never answers gets no excuse anyway.
OVERLOAD_REASONS: Final = frozenset(
    {"http_429", "http_503", "http_504", "timeout", "server_disconnected", "connection_error"}
)


# --- exceptions the fetch layer raises -------------------------------------------------------


class BodyTooLarge(ScrapeqError):
    """The response body is larger than ``max_body`` bytes: the job fails permanently."""


class BlockedAddress(ScrapeqError):
    """The URL resolves to a loopback, private or link-local address and ``allow_private``
    is off: the job fails permanently."""


class RobotsDisallowed(ScrapeqError):
    """robots.txt forbids the URL (``respect_robots`` on): the job fails permanently."""


class OurNetworkDown(ScrapeqError):
    """Our own network is failing (not the site's): no attempt spent, no domain blamed."""


class BrowserLost(OurNetworkDown):
    """The browser a page was rendered in crashed, was killed or hung (the browser fetcher's
    pool, :mod:`scrapeq.runtime.browser_pool`): ``ours``, reason ``browser_lost``; the job
    is given back at once, no attempt spent, its domain not charged."""


class RendererCrashed(ScrapeqError):
    """The page's renderer died while its browser lived on: the page's own doing (``retry``,
    reason ``renderer_crashed``, an attempt spent, its domain not charged), so a page that
    kills its renderer every time ends dead after ``max_attempts``."""


class ProxyRefused(ScrapeqError):
    """Our proxy refused our credentials in its own name (a 407, a ``Proxy-Authenticate``,
    tinyproxy's 401: :mod:`scrapeq.runtime.proxy_auth`): ``ours``, the exit's failure."""


class ProxyDown(OurNetworkDown):
    """An exit's proxy cannot be reached (the ``impersonate`` fetcher's form of aiohttp's
    ``ClientProxyConnectionError``): ``ours``, reason ``proxy_error``, the exit down."""


class ProxyAnswered(ScrapeqError):
    """A proxy answered ``CONNECT`` with ``status`` (the ``impersonate`` fetcher's form of
    aiohttp's ``ClientHttpProxyError``): classified as that one is (401 and 407: the proxy
    refuses us, ``ours``; another status: the target's failure)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


# --- Retry-After -------------------------------------------------------------------------------

_DELTA_SECONDS: Final = re.compile(r"[0-9]+(?:\.[0-9]+)?")


def parse_retry_after(
    value: str | None, *, now: datetime | None = None, cap: float = 86400.0
) -> float | None:
    """Parse a Retry-After header value into seconds from ``now``.

    Accepts delta-seconds (``"120"``, also a decimal such as ``"1.5"``) and an HTTP-date
    (RFC 9110 IMF-fixdate ``Sun, 06 Nov 1994 08:49:37 GMT``, and the obsolete RFC 850 and
    asctime forms). A date in the past gives ``0.0``.

    Args:
        value: the header value, or ``None`` when the header is absent.
        now: the reference time for an HTTP-date; default the current UTC time. A naive
            datetime is taken as UTC.
        cap: seconds, the largest value returned (default 86400, one day).

    Returns:
        Seconds within ``[0, cap]``, or ``None`` for a missing, negative or unparseable value.
    """
    if value is None:
        return None
    text = value.strip()
    if _DELTA_SECONDS.fullmatch(text):
        return min(float(text), cap)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # asctime and "-0000" carry no zone: HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    if now is None:
        now = datetime.now(UTC)
    elif now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    return min(max((when - now).total_seconds(), 0.0), cap)


def _header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """Case-insensitive lookup that works on a plain dict as on a CIMultiDict."""
    if not headers:
        return None
    value = headers.get(name)
    if value is not None:
        return value
    wanted = name.lower()
    for key, item in headers.items():
        if key.lower() == wanted:
            return item
    return None


# --- statuses ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Rule:
    outcome: Outcome
    reason: str
    counts: bool

    def make(self, message: str = "", retry_after: float | None = None) -> Classification:
        return Classification(self.outcome, self.reason, self.counts, retry_after, message)


# Statuses that differ from their class's default (reason filled in as "http_<code>").
_STATUS_RULES: Final[Mapping[int, tuple[Outcome, bool]]] = MappingProxyType(
    {
        403: (Outcome.RETRY, True),  # anti-bot block: about the domain, not the page
        407: (Outcome.OURS, False),  # our proxy wants credentials
        408: (Outcome.RETRY, True),
        425: (Outcome.RETRY, True),
        429: (Outcome.THROTTLED, True),
    }
)
# Default per status class (status // 100).
_CLASS_RULES: Final[Mapping[int, tuple[Outcome, bool]]] = MappingProxyType(
    {
        2: (Outcome.OK, False),
        3: (Outcome.OK, False),  # the final response after redirects were followed
        4: (Outcome.FAIL, False),
        5: (Outcome.RETRY, True),
    }
)
# Statuses that become THROTTLED only when they carry a parseable Retry-After.
_THROTTLE_WITH_RETRY_AFTER: Final = frozenset({503})
# The verdict of every success (immutable, so one instance serves every call).
_OK: Final = Classification(Outcome.OK, "ok", False)
_NOT_MODIFIED: Final = 304
# A 304 to a request that was not conditional: no page (classify_response).
_UNASKED_304: Final = Classification(
    Outcome.FAIL, "http_304", False,
    message="HTTP 304 (Not Modified) to a request that was not conditional: no page",
)  # fmt: skip


def classify_status(
    status: int, headers: Mapping[str, str] | None = None, *, now: datetime | None = None
) -> Classification:
    """Classify a final HTTP response by its status.

    Args:
        status: the HTTP status code.
        headers: the response headers (looked up case-insensitively); only Retry-After is read.
        now: reference time for a Retry-After HTTP-date; default the current UTC time.

    Returns:
        The classification; ``reason`` is ``"ok"``, ``"http_<code>"`` or ``"invalid_status"``.
    """
    if 200 <= status < 300:
        return _OK  # no 2xx has a rule of its own
    default = _CLASS_RULES.get(status // 100) if 200 <= status <= 599 else None
    if default is None:
        return Classification(
            Outcome.FAIL, "invalid_status", False, message=f"invalid HTTP status {status!r}"
        )
    outcome, counts = _STATUS_RULES.get(status, default)
    if outcome is Outcome.OK:
        return _OK
    reason = f"http_{status}"
    retry_after = None
    if outcome is Outcome.THROTTLED or status in _THROTTLE_WITH_RETRY_AFTER:
        retry_after = parse_retry_after(_header(headers, "Retry-After"), now=now)
        if retry_after is not None:
            outcome = Outcome.THROTTLED
    return Classification(outcome, reason, counts, retry_after, f"HTTP {status}")


def is_slow(elapsed: float, slow_call: float) -> bool:
    """Whether a call took at least the slow-call threshold (both in seconds)."""
    return elapsed >= slow_call


def classify_response(
    status: int,
    headers: Mapping[str, str] | None,
    elapsed: float,
    *,
    slow_call: float,
    now: datetime | None = None,
    conditional: bool = False,
) -> Classification:
    """Classify a final response, charging the domain for a slow call.

    Like :func:`classify_status`, except that a 304 is ``ok`` only when the request was
    ``conditional`` (else ``fail``, ``http_304``: no page), and a call slower than
    ``slow_call`` counts against the domain even though the site answered: an ``ok`` keeps
    its outcome (the job is done) with reason ``"slow_call"``, and a ``fail`` (a slow 404)
    keeps its outcome and reason.

    Args:
        status: the HTTP status code.
        headers: the response headers.
        elapsed: seconds the call took.
        slow_call: seconds, the slow-call threshold (setting ``slow_call``, default 10).
        now: reference time for a Retry-After HTTP-date.
        conditional: the request carried ``If-None-Match`` or ``If-Modified-Since``.

    Returns:
        The classification.
    """
    if status == _NOT_MODIFIED and not conditional:
        verdict = _UNASKED_304
    else:
        verdict = classify_status(status, headers, now=now)
    if verdict.counts_against_domain or not is_slow(elapsed, slow_call):
        return verdict
    slow = f"slow call: {elapsed:.3f} s >= slow_call {slow_call:g} s"
    if verdict.outcome is Outcome.OK:
        return replace(verdict, reason="slow_call", counts_against_domain=True, message=slow)
    if verdict.outcome is Outcome.FAIL and verdict.reason != "invalid_status":
        return replace(verdict, counts_against_domain=True, message=f"{verdict.message}; {slow}")
    return verdict


# --- exceptions --------------------------------------------------------------------------------

_ExcRules = tuple[tuple[tuple[type[BaseException], ...], _Rule], ...]

_RETRY: Final = Outcome.RETRY
_FAIL: Final = Outcome.FAIL
_OURS: Final = Outcome.OURS

# Checked in order, first match wins: a subclass must come before its bases.
_LEADING_RULES: Final[_ExcRules] = (
    ((Retry,), _Rule(_RETRY, "retry_requested", False)),
    ((BodyTooLarge,), _Rule(_FAIL, "body_too_large", False)),
    ((BlockedAddress,), _Rule(_FAIL, "blocked_address", False)),
    ((RobotsDisallowed,), _Rule(_FAIL, "robots_disallowed", False)),
    ((ProxyDown,), _Rule(_OURS, "proxy_error", False)),
    ((BrowserLost,), _Rule(_OURS, "browser_lost", False)),
    ((RendererCrashed,), _Rule(_RETRY, "renderer_crashed", False)),
    ((OurNetworkDown,), _Rule(_OURS, "network_down", False)),
    ((ProxyRefused,), _Rule(_OURS, "proxy_error", False)),
    ((InvalidURL,), _Rule(_FAIL, "invalid_url", False)),
    # Shutdown and interrupts are nobody's failure: no attempt spent, no domain blamed.
    ((asyncio.CancelledError,), _Rule(_OURS, "cancelled", False)),
    ((KeyboardInterrupt, SystemExit), _Rule(_OURS, "interrupted", False)),
)
_TIMEOUT_RULES: Final[_ExcRules] = (((TimeoutError,), _Rule(_RETRY, "timeout", True)),)
_OS_RULES: Final[_ExcRules] = (
    ((socket.gaierror,), _Rule(_RETRY, "dns_error", True)),
    ((ssl.SSLError,), _Rule(_RETRY, "ssl_error", True)),
    # Local file-system errors come from handler code, not from the site.
    (
        (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError),
        _Rule(_RETRY, "handler_error", False),
    ),
    ((ConnectionError, OSError), _Rule(_RETRY, "connection_error", True)),
)
_FALLBACK: Final = _Rule(_RETRY, "handler_error", False)


@functools.cache
def _aiohttp_types(*names: str) -> tuple[type[BaseException], ...]:
    """The named aiohttp exception classes that this aiohttp version defines."""
    try:
        import aiohttp
    except ImportError:  # classify works without the fetch extra
        return ()
    found = (getattr(aiohttp, name, None) for name in names)
    return tuple(t for t in found if isinstance(t, type) and issubclass(t, BaseException))


@functools.cache
def _exception_rules() -> _ExcRules:
    """The whole ordered rule table, aiohttp rows included when aiohttp is importable."""
    # Proxy errors subclass the connector/response errors: they must be checked first. A
    # proxy's answer to CONNECT (ClientHttpProxyError) is read by _from_proxy_answer.
    before_timeout: _ExcRules = (
        (_aiohttp_types("ClientProxyConnectionError"), _Rule(_OURS, "proxy_error", False)),
        (_aiohttp_types("TooManyRedirects"), _Rule(_FAIL, "redirect_loop", False)),
        (_aiohttp_types("InvalidURL", "InvalidUrlClientError", "NonHttpUrlClientError"),
         _Rule(_FAIL, "invalid_url", False)),
    )  # fmt: skip
    after_timeout: _ExcRules = (
        (_aiohttp_types("ClientConnectorDNSError"), _Rule(_RETRY, "dns_error", True)),
        (_aiohttp_types("ClientSSLError"), _Rule(_RETRY, "ssl_error", True)),
        (_aiohttp_types("ServerDisconnectedError"), _Rule(_RETRY, "server_disconnected", True)),
        (_aiohttp_types("ClientPayloadError"), _Rule(_RETRY, "payload_error", True)),
        (_aiohttp_types("ClientConnectionError"), _Rule(_RETRY, "connection_error", True)),
    )
    rules = _LEADING_RULES + before_timeout + _TIMEOUT_RULES + after_timeout + _OS_RULES
    return tuple((types, rule) for types, rule in rules if types)


def error_text(exc: BaseException) -> str:
    """The job's error text for ``exc``: the one place an exception becomes one, so the
    credentials it may hold (a proxy's URL in aiohttp's ``ClientHttpProxyError``, a URL's
    user info, a ``password=``) are redacted here, before the text is stored in Redis (error
    history, dead letter), logged or shown."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # a broken __str__ in user code must not break classification
        text = f"{type(exc).__name__}: <unprintable>"
    text = redact_text(text)
    return text if len(text) <= _MESSAGE_MAX else text[: _MESSAGE_MAX - 3] + "..."


#: A proxy's answers to CONNECT that fail every target alike: it refuses our credentials
#: (squid answers 407, tinyproxy 1.11 answers wrong credentials with 401).
_PROXY_REFUSES_US: Final = frozenset({401, 407})


def _from_proxy_answer(exc: BaseException, message: str) -> Classification | None:
    """An aiohttp ``ClientHttpProxyError``: the proxy answered CONNECT with ``status``."""
    proxy_errors: tuple[type[BaseException], ...] = (
        ProxyAnswered,
        *_aiohttp_types("ClientHttpProxyError"),
    )
    if not isinstance(exc, proxy_errors):
        return None
    status = getattr(exc, "status", None)
    if status in _PROXY_REFUSES_US:
        return Classification(Outcome.OURS, "proxy_error", False, message=message)
    # The proxy is up and answered about this target alone: the target's failure.
    return Classification(Outcome.RETRY, f"proxy_http_{status}", True, message=message)


def _from_response_error(exc: BaseException, message: str) -> Classification | None:
    """An aiohttp ``ClientResponseError`` (``raise_for_status``) classified by its status."""
    response_errors = _aiohttp_types("ClientResponseError")
    if not response_errors or not isinstance(exc, response_errors):
        return None
    status = getattr(exc, "status", None)
    if not isinstance(status, int) or not 400 <= status <= 599:
        return None  # e.g. a ContentTypeError on a 200: the handler's problem
    headers = getattr(exc, "headers", None)
    verdict = classify_status(status, headers if isinstance(headers, Mapping) else None)
    return replace(verdict, message=message)


def classify_exception(exc: BaseException) -> Classification:
    """Classify an exception raised by a fetch or by the user's handler.

    Order matters and is a table (first match wins): the library's signals
    (:class:`~scrapeq.errors.Permanent` -> ``fail`` with its reason,
    :class:`~scrapeq.errors.Retry` -> ``retry``, not counting: the worker reads the delay
    from the exception), a proxy's refusal of CONNECT (``retry`` counting against the target,
    ``ours`` for a 407), the fetch layer's errors, an unreachable proxy (``ours``) before the
    connector errors it subclasses, timeouts, network errors (``retry``, counting), an aiohttp
    ``ClientResponseError`` by its status (a ``raise_for_status`` 404 is not retried), and
    anything else as ``handler_error``: ``retry``, not counting (a parser bug says nothing
    about the site).

    Args:
        exc: the exception.

    Returns:
        The classification; ``message`` is ``"<Type>: <text>"``, at most 500 characters.
    """
    message = error_text(exc)
    if isinstance(exc, Permanent):
        return Classification(Outcome.FAIL, exc.reason or "permanent", False, message=message)
    from_proxy = _from_proxy_answer(exc, message)
    if from_proxy is not None:
        return from_proxy
    for types, rule in _exception_rules():
        if isinstance(exc, types):
            return rule.make(message)
    from_status = _from_response_error(exc, message)
    if from_status is not None:
        return from_status
    return _FALLBACK.make(message)
