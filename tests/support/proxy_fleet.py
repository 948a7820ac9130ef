"""A loopback fleet of sites that ban by source address, for proxy tests and
``bench/proxies.py``.

One aiohttp application in a background thread (its own event loop: a blocking test, a worker
in the test's loop or Scrapy's reactor in another process never stop it) listens on one port of
``127.0.0.1`` per virtual domain. **A domain is a port**: scrapeq's domain key is ``host:port``
(:func:`scrapeq.engine.model.urls.domain_of`) and Scrapy's download slot is the URL's netloc, so
``127.0.0.1:40001`` and ``127.0.0.1:40002`` are two sites to every system, and a proxy reaches
them with no name to resolve (tinyproxy resolves with the system resolver; names would need
/etc/hosts). A request is told apart by the port it arrived on, and its exit by the peer
address (``Bind 127.0.0.N`` of the proxy that carried it, ``127.0.0.1`` when direct).

Each domain has a ban policy (:class:`DomainSpec`): the source addresses it refuses, one exit or
a whole tier of them, answered ``ban_status`` (403 by default; 429; or 200 with a block page,
the ban a status code does not show). Every request is recorded as a :class:`Hit` (domain,
source, path, status) so the caller counts requests per exit, per domain and the wasted ones
from the server's side, never from the system under test. Pages are small HTML.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from aiohttp import web

from support.loop_thread import LoopThread

#: The marker of the block page a ``ban_status`` 200 domain serves to a banned exit.
BLOCK_MARKER = "Access denied: unusual traffic from your network"


@dataclass(frozen=True)
class DomainSpec:
    """One virtual domain of the fleet.

    Attributes:
        name: a label (``d00``); the domain key is ``127.0.0.1:<port>`` once started.
        banned: source addresses refused (one exit, or every address of a tier).
        ban_status: the answer to a banned source: 403, 429 (with ``Retry-After: 1``), or 200
            with a block page carrying :data:`BLOCK_MARKER`.
    """

    name: str
    banned: frozenset[str] = frozenset()
    ban_status: int = 403


@dataclass(frozen=True)
class Hit:
    """One request as the fleet saw it. ``banned``: answered with the ban."""

    domain: str
    source: str
    path: str
    status: int
    banned: bool
    at: float = field(compare=False)


def page(name: str, path: str) -> str:
    """The small HTML page domain ``name`` serves at ``path``."""
    return (
        f"<!doctype html><html><head><title>{name} {path}</title></head>"
        f"<body><h1>{name}</h1><p>page {path}</p></body></html>"
    )


class Fleet:
    """Many virtual domains, one port each, served from a background thread.

    Args:
        domains: the domains (names unique).
        delay_s: seconds every answer waits before it is sent (a site's latency; 0: none).

    Use as a context manager, or call :meth:`start` and :meth:`stop`. ``hits`` is appended
    to from the fleet's thread: read it with :meth:`snapshot`. Setting ``bans`` to False makes
    every domain serve every source (a run of the same fleet with no bans).
    """

    def __init__(self, domains: Iterable[DomainSpec], *, delay_s: float = 0.0) -> None:
        self.specs = {d.name: d for d in domains}
        self.delay_s = delay_s
        self.bans = True
        self.ports: dict[str, int] = {}
        self._by_port: dict[int, DomainSpec] = {}
        self.hits: list[Hit] = []
        self._lock = threading.Lock()
        self._served = LoopThread()
        self._runner: web.AppRunner | None = None

    # --- addresses ---------------------------------------------------------------------------

    def domain(self, name: str) -> str:
        """The domain key of ``name``: ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.ports[name]}"

    def url(self, name: str, path: str = "/") -> str:
        return f"http://{self.domain(name)}{path}"

    def name_of(self, domain: str) -> str:
        """The name of the domain key ``127.0.0.1:<port>``."""
        return self._by_port[int(domain.rsplit(":", 1)[1])].name

    # --- serving -----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.Response:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        spec = self._by_port.get(sockname[1]) if sockname else None
        if spec is None:
            return web.Response(status=421, text="no such domain")
        source = request.remote or "?"
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        banned = self.bans and source in spec.banned
        if not banned:
            response = web.Response(text=page(spec.name, request.path), content_type="text/html")
        elif spec.ban_status == 200:
            body = f"<html><body><h1>{BLOCK_MARKER}</h1></body></html>"
            response = web.Response(text=body, content_type="text/html")
        else:
            headers = {"Retry-After": "1"} if spec.ban_status == 429 else {}
            response = web.Response(status=spec.ban_status, text="blocked", headers=headers)
        hit = Hit(spec.name, source, request.path, response.status, banned, time.monotonic())
        with self._lock:
            self.hits.append(hit)
        return response

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        for spec in self.specs.values():
            site = web.TCPSite(self._runner, "127.0.0.1", 0, backlog=1024)
            await site.start()
            server = site._server
            assert server is not None
            port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
            self.ports[spec.name] = port
            self._by_port[port] = spec

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def start(self) -> Fleet:
        self._served.start()
        self._served.call(self._start(), timeout=30)
        return self

    def stop(self) -> None:
        self._served.stop(self._shutdown)

    def __enter__(self) -> Fleet:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- what the fleet saw ------------------------------------------------------------------

    def snapshot(self) -> list[Hit]:
        """A copy of every request so far."""
        with self._lock:
            return list(self.hits)

    def clear(self) -> None:
        with self._lock:
            self.hits.clear()

    def by_source(self, hits: Sequence[Hit] | None = None) -> Counter[str]:
        """Requests per source address (per exit)."""
        return Counter(h.source for h in (self.snapshot() if hits is None else hits))

    def served(self, hits: Sequence[Hit] | None = None) -> Counter[str]:
        """Distinct pages served (not banned) per domain name: a page fetched twice counts
        once."""
        hits = self.snapshot() if hits is None else hits
        ok = {(h.domain, h.path) for h in hits if not h.banned and h.status == 200}
        return Counter(domain for domain, _ in ok)

    def banned(self, hits: Sequence[Hit] | None = None) -> int:
        """Requests answered with a ban."""
        return sum(h.banned for h in (self.snapshot() if hits is None else hits))
