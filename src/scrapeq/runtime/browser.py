"""The ``browser`` fetcher: a page rendered by chromium, its DOM as the response (issue 42).

A shop whose grid is written by JavaScript answers the ``http`` fetcher with an empty grid.
:class:`BrowserFetcher` renders such a page in a browser of its pool
(:mod:`.browser_pool`: Debian's chromium, driven by Playwright) and answers the DOM as it is
once the page has settled, through the same :class:`~scrapeq.runtime.response.Response` a
handler and ``--extract`` read (``response.css``, ``response.text()``), its
``Content-Type`` ``text/html; charset=utf-8``.

**Every request of the page goes through the http fetcher.** The page's document is fetched
first by the worker's own :class:`~scrapeq.runtime.fetch.Fetcher` (with the job's request,
exit, deadline, ``max_body``, redirects checked hop by hop): an answer that is not a 2xx HTML
page is answered as it is, without a browser. Then the browser is pointed at it, and every
request it makes (the document, scripts, XHR and ``fetch()``, frames, stylesheets) is
intercepted (a Playwright route on its context): the document is answered from what was
fetched, anything else is fetched by the same http fetcher, **through the job's exit and the
same private-address guard** (a page cannot make the browser reach 127.0.0.1, the metadata
address or a private range unless ``allow_private`` is set: such a request is aborted) and
handed to the browser. Resource types in ``browser_block`` (images, fonts and media by
default) are aborted unread. Service workers are blocked, so nothing escapes the route.

**Settling**: after the ``load`` event the page is given until the network has been idle
(500 ms without a request, Playwright's ``networkidle``), or, when its domain names a
selector (``domain set --browser-wait-for``), until that selector is in the DOM; all within
the fetch's deadline (``request_timeout``, from the page's tab opened), whose last second is
kept for reading the DOM. A page that never goes idle is read as it is then (a read that
takes longer is not cut by the deadline, but by as long again); a selector that never
appears, or a script that never lets the page load, is a timeout (``retry``, as with
``http``).

**Failures**: a browser lost while rendering (crash, ``kill -9``, hang) raises
:class:`~scrapeq.runtime.classify.BrowserLost` (``ours``: given back at once, no attempt
spent, no domain charged); a page whose renderer dies while its browser lives raises
:class:`~scrapeq.runtime.classify.RendererCrashed` (the job's own fault: an attempt spent,
dead after ``max_attempts``, its domain not charged).

:attr:`BrowserFetcher.requests` and :attr:`BrowserFetcher.bytes` count what it fetched
(documents and subrequests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from multidict import CIMultiDict, CIMultiDictProxy

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.request import Request
from scrapeq.runtime.browser_pool import OP_TIMEOUT, BrowserPool, require_browser
from scrapeq.runtime.classify import BlockedAddress, RendererCrashed
from scrapeq.runtime.fetch import Fetcher
from scrapeq.runtime.response import Response

if TYPE_CHECKING:
    from playwright.async_api import Page, Route

__all__ = ["BrowserFetcher", "WaitingFetcher"]

log = logging.getLogger("scrapeq.browser")

#: The part of a page's deadline kept for reading its DOM after it settled: seconds.
READ_MARGIN: Final = 1.0
#: Headers of an answer that are the transport's, not the page's: not handed to the browser.
_HOP_HEADERS: Final = frozenset(
    {"content-encoding", "content-length", "transfer-encoding", "connection", "keep-alive"}
)
#: Headers of the browser's requests that are not sent on (the http fetcher sets its own).
_NOT_SENT: Final = frozenset(
    {"host", "content-length", "connection", "accept-encoding", "keep-alive", "upgrade"}
)


def _is_html(headers: Mapping[str, str]) -> bool:
    kind = headers.get("Content-Type", "text/html").split(";", 1)[0].strip().lower()
    return kind in ("text/html", "application/xhtml+xml", "")


def _browser_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """An answer's headers as the browser is handed them (``Set-Cookie`` lines joined by a
    newline, as Playwright splits them)."""
    out: dict[str, str] = {}
    items = headers.items()
    for name, value in items:
        low = name.lower()
        if low in _HOP_HEADERS:
            continue
        out[low] = f"{out[low]}\n{value}" if low in out and low == "set-cookie" else value
    return out


def _rendered_headers(headers: Mapping[str, str]) -> CIMultiDictProxy[str]:
    """The document's headers for the rendered body: UTF-8 HTML, no length or encoding."""
    out: CIMultiDict[str] = CIMultiDict(
        (k, v) for k, v in headers.items() if k.lower() not in _HOP_HEADERS
    )
    out["Content-Type"] = "text/html; charset=utf-8"
    return CIMultiDictProxy(out)


class BrowserFetcher:
    """The ``browser`` fetcher (see the module's text).

    Args:
        settings: ``request_timeout``, ``browser_block`` and the pool's settings.
        http: the fetcher every request of a page goes through (the worker's ``http``
            fetcher: its guard, exits and limits). Not closed here.
        pool: the browsers; default a new :class:`.browser_pool.BrowserPool`, closed by
            :meth:`close`.
        on_fetched: called with (requests, bytes) for each request fetched for a page.

    Raises:
        ConfigError: Playwright is missing (one line naming the extra), or no chromium at
            ``browser_path``.
    """

    def __init__(
        self,
        settings: Settings,
        http: Fetcher,
        pool: BrowserPool | None = None,
        on_fetched: Callable[[int, int], None] | None = None,
    ) -> None:
        require_browser(settings)
        self._on_fetched = on_fetched
        self.settings = settings
        self.http = http
        self.pool = BrowserPool(settings) if pool is None else pool
        self._blocked = frozenset(w.strip() for w in settings.browser_block.split(",") if w)
        self.requests = 0  # requests fetched for pages (documents and subrequests)
        self.bytes = 0  # their bodies' bytes
        self.refused = 0  # subrequests refused by the private-address guard
        self.blocked = 0  # subrequests aborted unread (browser_block)

    async def close(self) -> None:
        await self.pool.close()

    def waiting_for(self, selector: str | None) -> WaitingFetcher:
        """This fetcher, its pages waiting for ``selector`` (None: network idle)."""
        return WaitingFetcher(self, selector)

    async def fetch(
        self,
        url: str,
        *,
        normalised: bool = False,
        request: Request | None = None,
        exit: str | None = None,
        wait_for: str | None = None,
    ) -> Response:
        """Fetch ``url`` (or send ``request``) as the http fetcher does; a 2xx HTML answer
        is rendered and its DOM answered (``wait_for``: a selector to wait for instead of
        network idle).

        Raises:
            What the http fetcher raises; TimeoutError (the deadline passed while
            rendering); BrowserLost; RendererCrashed.
        """
        started = time.monotonic()
        first = await self.http.fetch(url, normalised=normalised, request=request, exit=exit)
        self._count(len(first.body))
        if not 200 <= first.status < 300 or not _is_html(first.headers):
            return first
        left = self.settings.request_timeout - (time.monotonic() - started)
        if left <= READ_MARGIN / 2:
            raise TimeoutError("the page's deadline passed before it could be rendered")
        body = await self._render(first, exit, wait_for, left)
        return Response(
            url=first.url,
            status=first.status,
            headers=_rendered_headers(first.headers),
            body=body,
            # the site's latency (its document's), not our browser's queueing and rendering:
            # what slow_call and the adaptive limit read of the site
            elapsed=first.elapsed,
            redirects=first.redirects,
            set_cookies=first.set_cookies,
        )

    async def _render(
        self, first: Response, exit: str | None, wait_for: str | None, left: float
    ) -> bytes:
        """The DOM of ``first``: loaded and settled within ``left`` seconds of its tab's
        opening (within OP_TIMEOUT, a browser's operation), then read within ``left`` more."""
        async with self.pool.context() as (browser, context):
            crashed: list[bool] = []
            try:
                # the tab (its renderer started): the browser's operation, not the page's work
                page = await asyncio.wait_for(context.new_page(), OP_TIMEOUT)
                try:
                    ends = time.monotonic() + left
                    async with asyncio.timeout(left):
                        served = asyncio.Event()
                        page.on("crash", lambda _: crashed.append(True))
                        await page.route(
                            "**/*", lambda route: self._route(route, first, exit, served)
                        )
                        await page.goto(first.url, wait_until="load")
                        await self._settle(page, wait_for, ends - time.monotonic() - READ_MARGIN)
                    # read at the deadline: not cut by it (a loaded machine's read takes seconds)
                    html = await asyncio.wait_for(page.content(), left)
                finally:  # (in a context of its own, closing the context closes it)
                    if self.settings.browser_context == "browser":
                        await _close(page)
            except TimeoutError:
                raise self.pool.lost_error(
                    browser, TimeoutError(f"the page did not render within {left:.1f} s")
                ) from None
            except Exception as exc:
                lost = self.pool.lost_error(browser, exc)
                if lost is not exc:
                    raise lost from None
                if crashed or "crash" in str(exc).lower():
                    raise RendererCrashed(f"the page's renderer died: {exc}") from None
                raise
        return html.encode("utf-8")

    async def _settle(self, page: Page, wait_for: str | None, room: float) -> None:
        """Wait for ``wait_for`` (a timeout past ``room``), else for network idle (read as it
        is past ``room``)."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        ms = max(room, 0.05) * 1000
        if wait_for:
            try:
                await page.wait_for_selector(wait_for, state="attached", timeout=ms)
            except PlaywrightTimeout:
                raise TimeoutError(f"{wait_for!r} did not appear within {room:.1f} s") from None
            return
        with contextlib.suppress(PlaywrightTimeout):
            await page.wait_for_load_state("networkidle", timeout=ms)

    async def _route(
        self, route: Route, first: Response, exit: str | None, served: asyncio.Event
    ) -> None:
        """One request of the page: the document from ``first``, a blocked type aborted,
        anything else through the http fetcher (its guard, the job's exit)."""
        req = route.request
        try:
            if (
                not served.is_set()
                and req.is_navigation_request()
                and req.frame.parent_frame is None
            ):
                served.set()
                await route.fulfill(
                    status=first.status, headers=_browser_headers(first.headers), body=first.body
                )
                return
            if req.resource_type in self._blocked:
                self.blocked += 1
                await route.abort("blockedbyclient")
                return
            answer = await self._subrequest(req.url, req.method, await req.all_headers(),
                                            req.post_data_buffer, exit)  # fmt: skip
            if answer is None:
                await route.abort("blockedbyclient")
                return
            await route.fulfill(
                status=answer.status, headers=_browser_headers(answer.headers), body=answer.body
            )
        except Exception as exc:  # the page is gone (closed, lost): nothing to answer
            log.debug("a request of a page could not be answered: %r", exc)
            with contextlib.suppress(Exception):
                await route.abort("failed")

    async def _subrequest(
        self,
        url: str,
        method: str,
        headers: Mapping[str, str],
        body: bytes | None,
        exit: str | None,
    ) -> Response | None:
        """A request the browser made, through the http fetcher; None: refused by the
        private-address guard (or a URL the fetcher refuses)."""
        sent = [(k, v) for k, v in headers.items() if k.lower() not in _NOT_SENT]
        try:
            request = Request(url, method=method, headers=sent, body=body)
            answer = await self.http.fetch(url, request=request, exit=exit)
        except BlockedAddress as exc:
            self.refused += 1
            log.info("a page's request was refused: %s", exc)
            return None
        self._count(len(answer.body))
        return answer

    def _count(self, size: int) -> None:
        self.requests += 1
        self.bytes += size
        if self._on_fetched is not None:
            self._on_fetched(1, size)


async def _close(page: Page) -> None:
    """Close a page of a shared context, within its browser's operation deadline (a page
    that will not close is left to its browser's watchdog and recycling)."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(page.close(run_before_unload=False), OP_TIMEOUT)


class WaitingFetcher:
    """A :class:`BrowserFetcher` bound to one job's selector to wait for (its domain's):
    :meth:`fetch` as :meth:`.fetch.Fetcher.fetch`."""

    __slots__ = ("owner", "selector")

    def __init__(self, owner: BrowserFetcher, selector: str | None) -> None:
        self.owner = owner
        self.selector = selector

    async def fetch(
        self,
        url: str,
        *,
        normalised: bool = False,
        request: Request | None = None,
        exit: str | None = None,
    ) -> Response:
        return await self.owner.fetch(
            url, normalised=normalised, request=request, exit=exit, wait_for=self.selector
        )
