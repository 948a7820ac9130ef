"""Scrapy's and Twisted's download errors, classified as scrapeq's worker classifies aiohttp's.

A timeout is a ``retry`` charged to the domain (``timeout``), a refused or lost connection a
``retry`` charged to it (``connection_error``), a name that does not resolve ``dns_error``;
a request a middleware refused (``IgnoreRequest``: robots.txt, off-site) dies ``ignored``
without blaming the domain. A browser's navigation through scrapy-playwright that timed out
(Playwright's ``TimeoutError``) is a ``timeout`` charged to the domain, one that failed with
Chromium's ``net::ERR_*`` a ``connection_error`` (``dns_error`` for a name that does not
resolve), charged too. Anything else goes to
:func:`scrapeq.runtime.classify.classify_exception`.
"""

from __future__ import annotations

from scrapy import exceptions as scrapy_errors
from twisted.internet import error as tx_errors
from twisted.web import _newclient

from scrapeq.runtime.classify import Classification, Outcome, classify_exception, error_text

__all__ = ["classify_failure"]

_RULES: tuple[tuple[tuple[type[BaseException], ...], Outcome, str, bool], ...] = (
    ((scrapy_errors.IgnoreRequest,), Outcome.FAIL, "ignored", False),
    (
        (scrapy_errors.DownloadTimeoutError, tx_errors.TimeoutError, tx_errors.TCPTimedOutError),
        Outcome.RETRY,
        "timeout",
        True,
    ),
    ((scrapy_errors.CannotResolveHostError, tx_errors.DNSLookupError), Outcome.RETRY,
     "dns_error", True),
    (
        (
            scrapy_errors.DownloadConnectionRefusedError,
            scrapy_errors.DownloadFailedError,
            scrapy_errors.ResponseDataLossError,
            tx_errors.ConnectError,
            tx_errors.ConnectionLost,
            tx_errors.ConnectionDone,
            _newclient.ResponseFailed,
            _newclient.ResponseNeverReceived,
        ),
        Outcome.RETRY,
        "connection_error",
        True,
    ),
    ((scrapy_errors.DownloadCancelledError,), Outcome.OURS, "cancelled", False),
    ((scrapy_errors.UnsupportedURLSchemeError,), Outcome.FAIL, "invalid_url", False),
)  # fmt: skip


def classify_failure(exc: BaseException) -> Classification:
    """The verdict on a download that raised ``exc`` (see the module docstring)."""
    message = error_text(exc)  # redacted, at most 500 characters
    for types, outcome, reason, counts in _RULES:
        if isinstance(exc, types):
            return Classification(outcome, reason, counts, message=message)
    browser = _browser_failure(exc)
    if browser is not None:
        return Classification(Outcome.RETRY, browser, True, message=message)
    return classify_exception(exc)


def _browser_failure(exc: BaseException) -> str | None:
    """The reason of a Playwright navigation's failure (read by the exception's module and
    name: Playwright need not be installed), or None."""
    if not type(exc).__module__.startswith("playwright."):
        return None
    if type(exc).__name__ == "TimeoutError":
        return "timeout"
    text = str(exc)
    if "net::ERR_NAME_NOT_RESOLVED" in text:
        return "dns_error"
    if "net::ERR_" in text:
        return "connection_error"
    return None
