"""Fetcher ``auto`` in the worker (issue 42): what an auto job's fetch showed, reported in
its settlement; never which fetcher a domain needs. The claim hands each auto job its fetcher
(``Job.auto_fetcher``) and the settle moves the domain (``lua/includes/auto.lua``) from the
evidence reported here (``Settlement.auto_evidence``):

* ``block``: the fetch was refused as a fingerprint block: a 403, or an HTTPS connection
  reset during its TLS handshake (the site read the ClientHello and hung up). A timeout, a
  5xx or a refused port is never evidence.
* ``render``: the page needs rendering. The handler raised :class:`~scrapeq.NeedsBrowser`,
  or an ``--extract`` rule found nothing in the raw HTML: the same page is then rendered once
  (a comparison, not a guess) and, when the rendered page shows what the raw one did not
  (the handler's ``NeedsBrowser`` gone, or more fields found), the page is done from the
  rendered DOM: the browser fetch is the page's re-do, no attempt spent for it.
* ``same``: a re-check (a job fetched one level below its domain's) whose result was as
  good: served, the handler content, every ``--extract`` field found.
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any

from scrapeq.engine.model.job import Job
from scrapeq.engine.model.urls import redact_text
from scrapeq.errors import ConfigError, NeedsBrowser
from scrapeq.runtime.extract import is_extractor, missing
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.follow import Handled
from scrapeq.runtime.impersonate import FetcherUnavailable

if TYPE_CHECKING:
    from scrapeq.runtime.attempt import Attempts

log = logging.getLogger("scrapeq.worker")

__all__ = ["RenderFailed", "auto_handled", "auto_refused", "fingerprint_refused", "is_auto"]


def fingerprint_refused(url: str, exc: BaseException) -> bool:
    """Whether a fetch of ``url`` failed as a TLS fingerprint check refuses: an HTTPS
    connection reset (or a TLS alert) before any answer. A certificate the client refused,
    a refused port or a timeout is not."""
    if not url.startswith("https://"):
        return False
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        err = todo.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, ssl.SSLCertVerificationError):
            return False
        if isinstance(err, ConnectionResetError | ssl.SSLError):
            return True
        todo += [getattr(err, "os_error", None), err.__cause__, err.__context__]
    return False


class RenderFailed(Exception):
    """Rendering a page the handler said needs a browser failed: ``original`` is what the
    browser fetch raised, classified as a fetch's failure (a lost browser gives the job back
    without spending an attempt), not as the handler's error."""

    def __init__(self, original: Exception) -> None:
        self.original = original
        super().__init__(str(original))


def is_auto(worker: Attempts, job: Job) -> bool:
    """Whether ``job``'s fetcher is ``auto`` (its own, else its domain's, else the setting)."""
    return (job.fetcher or job.domain_fetcher or worker.settings.fetcher) == "auto"


def auto_refused(worker: Attempts, job: Job, exc: BaseException | None) -> str | None:
    """``block`` when an auto job's fetch was refused as a fingerprint block (``exc``: what
    the fetch raised; None: the site answered 403); else None."""
    if not is_auto(worker, job):
        return None
    if exc is not None and not fingerprint_refused(job.url, exc):
        return None
    return "block"


async def auto_handled(
    worker: Attempts, job: Job, response: Response
) -> tuple[Any, Response, str | None]:
    """The handler on an auto job's page fetched without the browser: its result, the
    response it came from (the rendered one when rendering showed more) and the evidence
    (see the module's text)."""
    try:
        result = await worker._call_handler(job, response)
    except NeedsBrowser:
        try:
            rendered = await _render(worker, job)
        except Exception as exc:  # the fetch's failure, not the handler's (a browser lost...)
            raise RenderFailed(exc) from exc
        return await worker._call_handler(job, rendered), rendered, "render"
    fields = _payload(result)
    if not (is_extractor(worker.handler) and missing(fields)):
        return result, response, ("same" if job.auto_level != job.auto_fetcher else None)
    try:
        rendered = await _render(worker, job)
        again = await worker._call_handler(job, rendered)
    except Exception as exc:  # no comparison: the raw page stands, nothing is learned
        log.info("job %s: rendering to compare failed: %s", job.id, redact_text(str(exc)))
        return result, response, None
    if missing(_payload(again)) < missing(fields):
        return again, rendered, "render"
    return result, response, None


async def _render(worker: Attempts, job: Job) -> Response:
    """The job's page rendered by the worker's browser fetcher (made when first needed)."""
    if worker._browser is None:
        try:
            worker._browser = worker._new_browser()
        except ConfigError as exc:  # Playwright or chromium missing here: ours
            raise FetcherUnavailable(exc.reason) from None
    return await worker._fetch(job, worker._browser.waiting_for(job.domain_wait_for))


def _payload(result: Any) -> Any:
    return result.result if isinstance(result, Handled) else result
