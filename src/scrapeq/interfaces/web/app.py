"""The dashboard application (:func:`create_app`: routes, middlewares, sign-in and session) and
serving it on its own until a signal (:func:`serve`, behind ``scrapeq dashboard``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web

from scrapeq.engine.queue import AsyncQueue
from scrapeq.interfaces.web import api, pages
from scrapeq.interfaces.web.api import QUEUE_KEY
from scrapeq.interfaces.web.security import (
    GUARD_KEY,
    HOLDER_KEY,
    LOOPBACK_HOSTS,
    TOKEN_COOKIE,
    Guard,
    check_request,
    check_token,
    default_hosts,
    json_errors,
    same_secret,
)

__all__ = ["create_app", "serve"]

log = logging.getLogger("scrapeq.interfaces.web")


async def _login(request: web.Request) -> web.StreamResponse:
    """POST ``token=...`` (a form): set the token cookie and go to the page."""
    guard = request.app[GUARD_KEY]
    form = await request.post()
    given = str(form.get("token", ""))
    if guard.token is None or not same_secret(given, guard.token):
        return web.Response(text=pages.LOGIN_PAGE, content_type="text/html", status=401)
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
    app = web.Application(middlewares=[check_request, json_errors])
    app[QUEUE_KEY] = queue
    app[GUARD_KEY] = Guard(frozenset(h.lower() for h in hosts), token, read_only)
    app.router.add_get("/", pages.index, name="index")
    app.router.add_post("/login", _login, name="login")
    app.router.add_get("/static/{name}", pages.static)
    app.router.add_get("/api/session", _session)
    app.router.add_get("/api/status", api.status)
    app.router.add_get("/api/history", api.history)
    app.router.add_get("/api/domains", api.domains)
    app.router.add_get("/api/domain/{domain}", api.domain)
    app.router.add_get("/api/events", api.events)
    app.router.add_get("/api/exits", api.exits)
    app.router.add_get("/api/dead", api.dead)
    app.router.add_post("/api/dead/replay", api.dead_replay)
    app.router.add_post("/api/dead/purge", api.dead_purge)
    app.router.add_post("/api/breaker/{domain}/{action:reset|trip}", api.breaker)
    app.router.add_get("/metrics", api.metrics)
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
