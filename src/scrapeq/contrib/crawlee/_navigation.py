"""What each navigation of a crawlee crawler saw, for scrapeq's breakers and retries.

A crawlee request-queue client is not told why a request failed: crawlee reclaims it (a
retry) or marks it handled in the ``ERROR`` state (retries spent) and keeps the exception to
itself. :meth:`ScrapeqStorageClient.watch` adds a pre- and a post-navigation hook to a crawler
(crawlee's own, public hooks), which note here when each request's navigation began and what
answered it (status, ``Retry-After``, seconds). When the request comes back to the queue, its
navigation is classified as scrapeq's worker classifies a fetch
(:func:`scrapeq.runtime.classify.classify_response`):

* no answer (the navigation raised: crawlee's navigation timeout, a refused or reset
  connection): ``timeout`` when it lasted ``slow_call`` seconds or more (the site hung), else
  ``connection_error``; a ``retry`` charged to the domain;
* an answer: its status as the worker reads it: a 5xx, 403 or 408 a ``retry`` charged to the
  domain (a 403 is how a ban looks), a 429 or a 503 with ``Retry-After`` ``throttled``
  (the domain parks), a 404 ``fail`` (not charged), a 2xx ``ok`` (then the failure was the
  handler's: nothing is charged);
* no navigation seen (a crawler not watched, or the request failed before navigating):
  None, nothing known.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from scrapeq.runtime.classify import Classification, Outcome, classify_response

__all__ = ["Navigation", "Navigations"]

#: Requests whose navigation is remembered at most (a request is forgotten when the queue
#: settles it; this bounds what requests never settled here, such as a crawler's stop, keep).
MAX_KEPT = 100_000


@dataclass(slots=True)
class Navigation:
    """One request's navigation: when it began, and the answer (None: none yet)."""

    began: float
    status: int | None = None
    retry_after: str | None = None
    seconds: float | None = None


class Navigations:
    """Navigations of watched crawlers in this process, by crawlee ``unique_key``."""

    def __init__(self, slow_call: float) -> None:
        self.slow_call = slow_call
        self._seen: dict[str, Navigation] = {}

    async def before(self, context: Any) -> None:
        """Crawlee's pre-navigation hook: the request's navigation begins."""
        if len(self._seen) >= MAX_KEPT:
            self._seen.pop(next(iter(self._seen)))
        self._seen[context.request.unique_key] = Navigation(time.monotonic())

    async def after(self, context: Any) -> None:
        """Crawlee's post-navigation hook: the request's navigation was answered (an HTTP
        crawler's ``http_response``, a Playwright crawler's ``response``)."""
        nav = self._seen.get(context.request.unique_key)
        if nav is None:
            return
        nav.seconds = time.monotonic() - nav.began
        status, retry_after = _answer(context)
        nav.status = status
        nav.retry_after = retry_after

    def verdict(self, unique_key: str) -> tuple[Classification, float] | None:
        """The request's navigation, classified, with its seconds; forgotten here. None: no
        navigation seen, or one whose answer has no status."""
        nav = self._seen.pop(unique_key, None)
        if nav is None:
            return None
        if nav.seconds is None:  # it raised: the site never answered in time, or refused
            seconds = time.monotonic() - nav.began
            reason = "timeout" if seconds >= self.slow_call else "connection_error"
            message = f"navigation failed after {seconds:.1f} s"
            return Classification(Outcome.RETRY, reason, True, message=message), seconds
        if nav.status is None:
            return None
        headers = {"Retry-After": nav.retry_after} if nav.retry_after else None
        verdict = classify_response(nav.status, headers, nav.seconds, slow_call=self.slow_call)
        return verdict, nav.seconds

    def forget(self, unique_key: str) -> None:
        self._seen.pop(unique_key, None)


def _answer(context: Any) -> tuple[int | None, str | None]:
    """The status and ``Retry-After`` of a post-navigation context's answer: an HTTP
    crawler's ``http_response`` (crawlee's HttpResponse), a Playwright crawler's ``response``
    (Playwright's). A context that has neither (or raises for them, as an adaptive crawler's
    may): (None, None), nothing known."""
    for name, status_name in (("http_response", "status_code"), ("response", "status")):
        try:
            response = getattr(context, name, None)
            if response is None:
                continue
            status = getattr(response, status_name, None)
            headers = getattr(response, "headers", None) or {}
        except Exception:
            continue
        return (status if isinstance(status, int) else None), _header(headers, "retry-after")
    return None, None


def _header(headers: Any, name: str) -> str | None:
    try:
        value = headers.get(name)
    except Exception:
        return None
    return str(value) if value is not None else None
